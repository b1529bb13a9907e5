//! The merge: every setting is read across the layers (the user's file, the repository's, the
//! environment, lowest first) by the rule of its class, and each read names the setting and its class
//! once. A machine setting in a repository file the user has not trusted is refused; a project
//! setting there may only tighten what lies beneath it. Refusals are gathered, not returned one by
//! one, so a person sees everything the file would have to give up in one message.

use std::fmt::Display;
use std::path::PathBuf;

use toml::Spanned;

use super::Sourced;
use super::file::{FileSettings, Layer};

/// Whose a setting is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Only the user's own configuration, the environment, flags, or a trusted repository file may
    /// set it.
    Machine(Reason),
    /// A repository's own file may set it, by `Rule`.
    Project(Rule),
}

/// Why a setting is a machine setting: what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// It names a command stet runs on the user's machine.
    Command,
    /// It names an environment variable whose value stet sends out.
    EnvironmentVariable,
    /// It names a host stet sends credentials to.
    Url,
    /// It names a path on the user's machine outside the repository.
    HostPath,
    /// It chooses the image the agent runs in.
    Image,
    /// It chooses which credential stet mints, and from what.
    CredentialProvider,
    /// It chooses where results are pushed and which token is read.
    Forge,
    /// It names which of the user's credentials stet uses.
    Credential,
    /// It is who pushed commits say wrote them.
    Identity,
    /// It lets the agent's container reach the network.
    Network,
    /// It chooses the container engine that runs the agent's sandbox and enforces its limits.
    Runtime,
    /// It chooses the program that works with the model key.
    Agent,
    /// It chooses the model the user is billed for.
    Model,
    /// It names a price table, which decides what counts toward the cost ceiling.
    PriceTable,
    /// It names a scenario file to read from the user's machine.
    Scenario,
    /// It lets the model provider act on the network, and bill calls, for the agent.
    ProviderTools,
}

impl Reason {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Reason::Command => "it names a command stet runs on your machine",
            Reason::EnvironmentVariable => {
                "it names an environment variable of yours whose value stet sends out"
            }
            Reason::Url => "it names a host stet sends your credentials to",
            Reason::HostPath => "it names a path on your machine outside the repository",
            Reason::Image => "it chooses the image the agent runs in",
            Reason::CredentialProvider => "it chooses which credential stet mints and from what",
            Reason::Forge => "it chooses where results are pushed and which token is read",
            Reason::Credential => "it names which of your credentials stet uses",
            Reason::Identity => "it is who your pushed commits say wrote them",
            Reason::Network => "it lets the agent's container reach the network",
            Reason::Runtime => {
                "it chooses the container engine that runs the agent's sandbox and enforces its limits"
            }
            Reason::Agent => "it chooses the program that works with your model key",
            Reason::Model => "it chooses the model you are billed for",
            Reason::PriceTable => {
                "it names a price table, which decides what counts toward your cost ceiling"
            }
            Reason::Scenario => "it names a scenario file to read from your machine",
            Reason::ProviderTools => {
                "it lets the model provider act on the network, and bill calls, for the agent"
            }
        }
    }
}

/// How a repository's own file may change a project setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// To any valid value.
    Free,
    /// Only to a value no higher than the one beneath it.
    AtMost,
    /// Its entries are added to the ones beneath, never replacing them.
    Adds,
    /// Only off.
    StaysOff,
}

/// What a repository file the user has not trusted was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The repository's file.
    pub file: PathBuf,
    /// The line of the refused setting, counted from 1.
    pub line: usize,
    /// The refused setting's dotted name (`dispatch.timeout_seconds`).
    pub field: &'static str,
    /// Why it was refused.
    pub why: String,
}

/// The layers of one configuration, lowest first, and what reading them refused.
#[derive(Debug)]
pub(super) struct Layers {
    layers: Vec<Layer>,
    refusals: Vec<Refusal>,
    read: Vec<(&'static str, Class)>,
}

/// The lists of an "only add" setting, lowest first.
#[derive(Debug)]
pub(super) struct Lists<T> {
    /// The highest list of a layer that is not a repository file; `None`: the default.
    pub base: Option<Sourced<Vec<T>>>,
    /// Every repository file's list, added to the base.
    pub added: Vec<Sourced<Vec<T>>>,
}

/// Picks one setting out of a layer's settings.
pub(super) type Pick<T> = fn(&FileSettings) -> &Option<Spanned<T>>;

impl Layers {
    pub(crate) fn new(layers: Vec<Layer>) -> Layers {
        Layers {
            layers,
            refusals: Vec::new(),
            read: Vec::new(),
        }
    }

    /// The highest layer's value; refused from a repository file the user has not trusted.
    pub(crate) fn machine<T: Clone>(
        &mut self,
        field: &'static str,
        reason: Reason,
        pick: Pick<T>,
    ) -> Option<Sourced<T>> {
        self.read.push((field, Class::Machine(reason)));
        let mut found = None;
        for (rank, layer) in self.layers.iter().enumerate() {
            let Some(value) = pick(&layer.settings) else {
                continue;
            };
            let origin = layer.origin(value.span());
            if layer.is_untrusted_repository() {
                self.refusals.push(Refusal {
                    file: origin.file(),
                    line: origin.line(),
                    field,
                    why: format!("is a machine setting: {}", reason.describe()),
                });
                continue;
            }
            found = Some(Sourced::new(value.get_ref().clone(), origin, rank));
        }
        found
    }

    /// The highest layer's value, whichever layer set it.
    pub(crate) fn free<T: Clone>(
        &mut self,
        field: &'static str,
        pick: Pick<T>,
    ) -> Option<Sourced<T>> {
        self.read.push((field, Class::Project(Rule::Free)));
        self.layers
            .iter()
            .enumerate()
            .rev()
            .find_map(|(rank, layer)| {
                pick(&layer.settings).as_ref().map(|value| {
                    Sourced::new(value.get_ref().clone(), layer.origin(value.span()), rank)
                })
            })
    }

    /// The highest layer's value; from a repository file the user has not trusted only when it is
    /// no higher than the value beneath it (`default` when no lower layer set one; `None`: no bound).
    pub(crate) fn at_most<T: Clone + PartialOrd + Display>(
        &mut self,
        field: &'static str,
        pick: Pick<T>,
        default: Option<T>,
    ) -> Option<Sourced<T>> {
        self.read.push((field, Class::Project(Rule::AtMost)));
        let mut found: Option<Sourced<T>> = None;
        for (rank, layer) in self.layers.iter().enumerate() {
            let Some(value) = pick(&layer.settings) else {
                continue;
            };
            let origin = layer.origin(value.span());
            if layer.is_untrusted_repository() {
                let beneath = match &found {
                    Some(found) => Some((&found.value, found.origin.to_string())),
                    None => default
                        .as_ref()
                        .map(|value| (value, "the default".to_owned())),
                };
                if let Some((beneath, from)) = beneath
                    && value.get_ref() > beneath
                {
                    self.refusals.push(Refusal {
                        file: origin.file(),
                        line: origin.line(),
                        field,
                        why: format!(
                            "= {} would raise it above {beneath} ({from}); a repository's file may only lower it",
                            value.get_ref()
                        ),
                    });
                    continue;
                }
            }
            found = Some(Sourced::new(value.get_ref().clone(), origin, rank));
        }
        found
    }

    /// The lists to use, lowest first: the highest list of a layer that is not a repository file
    /// (replacing the ones beneath it; `None` when none set one), then every repository file's list
    /// added to it, trusted or not.
    pub(crate) fn adds<T: Clone>(&mut self, field: &'static str, pick: Pick<Vec<T>>) -> Lists<T> {
        self.read.push((field, Class::Project(Rule::Adds)));
        let mut base = None;
        let mut added = Vec::new();
        for (rank, layer) in self.layers.iter().enumerate() {
            let Some(value) = pick(&layer.settings) else {
                continue;
            };
            let sourced = Sourced::new(value.get_ref().clone(), layer.origin(value.span()), rank);
            if layer.is_repository() {
                added.push(sourced);
            } else {
                base = Some(sourced);
                added.clear();
            }
        }
        Lists { base, added }
    }

    /// The highest layer's switch; a repository file the user has not trusted may only turn it off.
    pub(crate) fn stays_off(
        &mut self,
        field: &'static str,
        reason: Reason,
        pick: Pick<bool>,
    ) -> Option<Sourced<bool>> {
        self.read.push((field, Class::Project(Rule::StaysOff)));
        let mut found = None;
        for (rank, layer) in self.layers.iter().enumerate() {
            let Some(value) = pick(&layer.settings) else {
                continue;
            };
            let origin = layer.origin(value.span());
            if layer.is_untrusted_repository() && *value.get_ref() {
                self.refusals.push(Refusal {
                    file: origin.file(),
                    line: origin.line(),
                    field,
                    why: format!(
                        "= true is refused: a repository's file may only turn it off ({})",
                        reason.describe()
                    ),
                });
                continue;
            }
            found = Some(Sourced::new(*value.get_ref(), origin, rank));
        }
        found
    }

    /// What was refused, in the order the settings were read.
    pub(crate) fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// What was refused, in the file's order.
    pub(crate) fn refusals_by_line(&self) -> Vec<Refusal> {
        let mut refusals = self.refusals.clone();
        refusals.sort_by_key(|refusal| refusal.line);
        refusals
    }

    /// Every setting read so far, with its class.
    pub(crate) fn catalog(&self) -> &[(&'static str, Class)] {
        &self.read
    }
}

#[cfg(test)]
mod tests;
