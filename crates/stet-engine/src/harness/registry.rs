//! Every harness stet has, chosen in one place: [`HarnessKind`] names them (in configuration, in
//! `STET_HARNESS` and on `stet transcript`'s command line), [`HarnessSettings`] holds what each needs
//! to start, [`from_settings`] builds the harness a dispatch runs and [`replay_reader`] what reads a
//! captured output. A new harness is its module, a kind here, its settings and a line in each match.

use std::path::Path;
use std::sync::Arc;

use super::claude::{ClaudeHarness, ClaudeOutput, ClaudeSettings};
use super::codex::{CodexHarness, CodexOutput, CodexSettings};
use super::openhands::{OpenHandsHarness, OpenHandsOutput, OpenHandsSettings};
use super::script::{ScenarioSource, ScriptHarness, ScriptParser};
use super::{Harness, OutputParser, Result};
use stet_protocol::event::Usage;
use stet_sanitize::sanitize::TokenSanitizer;

crate::kinds::kinds! {
    /// Which harness runs the agent.
    pub enum HarnessKind {
        /// The OpenHands CLI, headless (the product).
        #[default]
        OpenHands = "openhands",
        /// `stet agent`, the scripted agent of the demo and the tests.
        Script = "script",
        /// The Codex CLI, `codex exec --json`.
        Codex = "codex",
        /// Claude Code, `claude -p --output-format stream-json`.
        Claude = "claude",
    }
}

impl HarnessKind {
    /// The wire API the kind's agent speaks when `[model] api` does not say: OpenHands speaks Chat
    /// Completions (its `openai/` models make LiteLLM speak it), the Codex CLI the Responses API,
    /// Claude Code Anthropic's Messages API;
    /// the scripted agent, which the tests and the red team drive on every API, is served all of
    /// them (`None`).
    pub fn default_wire_api(self) -> Option<crate::gateway::policy::WireApi> {
        use crate::gateway::policy::WireApi;
        match self {
            HarnessKind::OpenHands => Some(WireApi::ChatCompletions),
            HarnessKind::Codex => Some(WireApi::Responses),
            HarnessKind::Claude => Some(WireApi::Messages),
            HarnessKind::Script => None,
        }
    }
}

/// What the harness of each kind is built from.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessSettings {
    /// The OpenHands CLI and the model it asks for.
    OpenHands(OpenHandsSettings),
    /// The Codex CLI and the model it asks for.
    Codex(CodexSettings),
    /// Claude Code and the model it asks for.
    Claude(ClaudeSettings),
    /// The scripted agent.
    Script {
        /// The scenario it plays.
        scenario: ScenarioSource,
        /// How fast it plays: delays are divided by this; 0 plays without delays.
        pace: f64,
    },
}

impl HarnessSettings {
    /// The kind of harness these settings build.
    pub fn kind(&self) -> HarnessKind {
        match self {
            HarnessSettings::OpenHands(_) => HarnessKind::OpenHands,
            HarnessSettings::Codex(_) => HarnessKind::Codex,
            HarnessSettings::Claude(_) => HarnessKind::Claude,
            HarnessSettings::Script { .. } => HarnessKind::Script,
        }
    }
}

/// The harness `settings` describe.
pub fn from_settings(settings: HarnessSettings) -> Arc<dyn Harness> {
    match settings {
        HarnessSettings::OpenHands(settings) => Arc::new(OpenHandsHarness::new(settings)),
        HarnessSettings::Codex(settings) => Arc::new(CodexHarness::new(settings)),
        HarnessSettings::Claude(settings) => Arc::new(ClaudeHarness::new(settings)),
        HarnessSettings::Script { scenario, pace } => Arc::new(ScriptHarness::new(scenario, pace)),
    }
}

/// What reads a captured output of `kind`'s agent program (`stet transcript`): a fresh parser, and
/// the usage the agent recorded in its outputs directory `outputs`, when one is given and it records
/// any there.
pub fn replay_reader(
    kind: HarnessKind,
    sanitizer: &Arc<TokenSanitizer>,
    outputs: Option<&Path>,
) -> Result<(Box<dyn OutputParser>, Option<Usage>)> {
    let sanitizer = Arc::clone(sanitizer);
    Ok(match kind {
        HarnessKind::OpenHands => {
            let usage = match outputs {
                Some(outputs) => super::openhands::final_usage(outputs, &sanitizer)?,
                None => None,
            };
            let parser: Box<dyn OutputParser> = Box::new(OpenHandsOutput::new(sanitizer));
            (parser, usage)
        }
        HarnessKind::Codex => {
            let parser: Box<dyn OutputParser> = Box::new(CodexOutput::new(sanitizer, None));
            (parser, None)
        }
        HarnessKind::Claude => {
            let parser: Box<dyn OutputParser> = Box::new(ClaudeOutput::new(sanitizer, None));
            (parser, None)
        }
        HarnessKind::Script => {
            let parser: Box<dyn OutputParser> = Box::new(ScriptParser::new(sanitizer));
            (parser, None)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings of `kind`, as a test makes them.
    fn settings_of(kind: HarnessKind) -> HarnessSettings {
        match kind {
            HarnessKind::OpenHands => {
                HarnessSettings::OpenHands(OpenHandsSettings::new("openai/gpt-4.1"))
            }
            HarnessKind::Codex => HarnessSettings::Codex(CodexSettings::new("gpt-5.1-codex")),
            HarnessKind::Claude => {
                HarnessSettings::Claude(ClaudeSettings::new("claude-sonnet-4-5"))
            }
            HarnessKind::Script => HarnessSettings::Script {
                scenario: ScenarioSource::Demo,
                pace: 0.0,
            },
        }
    }

    #[test]
    fn the_registry_builds_every_kind_under_its_own_name() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        for kind in HarnessKind::ALL {
            let settings = settings_of(*kind);
            assert_eq!(settings.kind(), *kind);
            let harness = from_settings(settings);
            assert_eq!(harness.name(), kind.as_str());
            assert_eq!(HarnessKind::from_name(kind.as_str()), Some(*kind));
            let (_parser, usage) = replay_reader(*kind, &sanitizer, None).unwrap();
            assert!(usage.is_none(), "{kind:?}");
        }
        assert_eq!(HarnessKind::from_name("claude-code"), None);
        assert_eq!(HarnessKind::default(), HarnessKind::OpenHands);
    }

    #[test]
    fn only_the_scripted_agent_ships_in_the_offline_image() {
        for kind in HarnessKind::ALL {
            let harness = from_settings(settings_of(*kind));
            assert_eq!(
                harness.runs_in_offline_image(),
                *kind == HarnessKind::Script,
                "{kind:?}"
            );
        }
    }
}
