//! Harnesses: the adapters that know how one agent program is started in the sandbox and how its
//! output reads (DESIGN §2 "harness"). Each one turns its agent's own output format into stet's
//! transcript items, an outcome and, where the agent reports it, the run's usage.
//!
//! The engine only sees the [`Harness`] trait: a harness plans the files to stage and the processes to
//! run, and hands out a fresh [`OutputParser`] per dispatch. Which harness runs is chosen in one
//! place, the registry ([`HarnessKind`], [`from_settings`]). Staged files are written by the host into
//! the outputs directory (mounted at `/outputs`) before the agent starts, so no brief text ever travels
//! on a command line (ADR-0018 row 4).
//!
//! **Only the harness process speaks as the agent** (DESIGN §5 row 21). The engine, not each harness,
//! keeps that rule, so a new harness inherits it:
//!
//! * every planned process runs under `stet speak` ([`speaking`]), the sandbox executable every image
//!   carries: it is non-dumpable from its start, gives the harness program channels of its own (its
//!   output is captured, never the engine's stream inherited), relays only what the harness program
//!   itself wrote (the kernel names the writer of every write) and nothing written after it exited,
//!   saying so on stderr when another process wrote there or held its output open past that (a
//!   warning here);
//! * the parser is read through an [`AgentVoice`], which keeps the agent's first `finish` (a
//!   [`Parsed::Finish`]) and shows any later one as a warning instead: the outcome's summary, the
//!   commit message and the pull request's body are the first one's.
//!
//! What is left to each harness: its program must not hand its own stdout or stderr to the commands
//! it runs (capture theirs), and should be non-dumpable itself (`prctl(PR_SET_DUMPABLE, 0)` before
//! it starts any), or those commands, running as the same user, can write into its output through
//! `/proc/<pid>/fd`. `stet agent run` and the OpenHands launch line do both; a compiled CLI that
//! does not (Codex) is made non-dumpable by its image, which installs it execute-only for the
//! sandbox user (the kernel starts a program its user cannot read non-dumpable).

#[cfg(test)]
mod captures;
pub mod claude;
pub mod codex;
mod json_lines;
pub mod openhands;
mod registry;
pub mod replay;
pub mod script;
mod text;

pub use registry::{HarnessKind, HarnessSettings, from_settings, replay_reader};

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::brief::Brief;
use crate::credential::SecretValue;
use crate::gateway::usage::UsageReport;
use crate::runtime::{OutputLine, OutputStream, SandboxProcess};
use stet_protocol::agent_record::{HarnessStream, SpeakerReport};
use stet_protocol::event::{DispatchId, ItemKind, TranscriptItem, Usage};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// The longest warning about a later `finish`, its quoted summary included.
const MAX_FINISH_WARNING_BYTES: usize = 4 * 1024;

/// Errors of planning a harness run or reading what it left behind.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum HarnessError {
    #[error("the {harness} harness cannot run this dispatch: {detail}")]
    Plan {
        harness: &'static str,
        detail: String,
    },
    #[error("reading the {harness} harness's usage record: {detail}")]
    Usage {
        harness: &'static str,
        detail: String,
    },
    #[error(transparent)]
    OpenHandsRecord(#[from] openhands::OpenHandsError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, HarnessError>;

/// How the agent's run ended, as far as its own output tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessOutcome {
    /// The agent declared the task finished; `summary` is its own message, when it wrote one.
    Succeeded {
        /// The agent's closing message, when it wrote one.
        summary: Option<SanitizedText>,
    },
    /// The agent never declared the task finished, or reported that it failed.
    Failed {
        /// Why, in the agent's words or the harness's.
        reason: SanitizedText,
    },
}

/// How the agent in the sandbox reaches the model: the relay's URL on the sandbox's own loopback
/// and a placeholder key. The real key stays with stet's gateway on the host, which adds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAccess {
    /// E.g. `http://127.0.0.1:4141/v1`.
    pub base_url: String,
    /// What the agent sends as its key; the gateway drops it.
    pub placeholder_key: String,
}

/// The placeholder key agents are given: plainly not a secret.
pub const PLACEHOLDER_KEY: &str = "stet-gateway-holds-the-key";

/// What a harness needs to know to start its agent on one dispatch.
#[derive(Debug, Clone, Copy)]
pub struct HarnessLaunch<'a> {
    /// The dispatch the agent works on.
    pub dispatch: DispatchId,
    /// The brief it works from.
    pub brief: &'a Brief,
    /// The rendered instructions (the workflow template filled in with the brief).
    pub instructions: &'a str,
    /// The model through stet's gateway; `None` when no model endpoint is configured.
    pub model: Option<&'a ModelAccess>,
}

/// A file the host writes into the outputs directory before the agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFile {
    /// A plain file name (no directory part); it appears at `/outputs/<name>` in the sandbox.
    pub name: String,
    /// The file's bytes.
    pub contents: Vec<u8>,
}

/// The files to stage and the processes to run, in order, for one dispatch.
#[derive(Debug, Clone, Default)]
pub struct HarnessPlan {
    /// Written before any process runs.
    pub files: Vec<StagedFile>,
    /// Run one after the other; the first that exits non-zero ends the run.
    pub processes: Vec<SandboxProcess>,
}

/// The agent declaring the task finished, as a harness reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// The agent's closing message, when it wrote one: the outcome's summary.
    pub summary: Option<SanitizedText>,
    /// What the transcript's `finish` item shows: the summary, or the harness's words for none.
    pub shown: SanitizedText,
}

/// One thing read from the agent's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// An entry of the agent's transcript (never a `finish`: that is [`Parsed::Finish`]).
    Item(TranscriptItem),
    /// The agent declared the task finished. [`AgentVoice`] passes the first one on (shown as a
    /// `finish` item) and turns any later one into a [`Parsed::Warning`].
    Finish(Finish),
    /// Model usage for one request.
    Usage(UsageReport),
    /// Something about the run a person should know that is not the agent's doing (the harness's
    /// network attempts failing in a sandbox that has none); published as a `warning` event.
    Warning(SanitizedText),
    /// An item for the run record only, not shown live (the harness's repeated network failures).
    RecordOnly(TranscriptItem),
}

/// Reads one agent run's output, line by line; one parser per dispatch, always read through an
/// [`AgentVoice`], which decides which `finish` counts.
pub trait OutputParser: Send {
    /// One framed line of stdout or stderr. Every text it returns is already sanitized.
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed>;
    /// The output ended: whatever the parser still holds back, in order. Nothing by default.
    fn finish(&mut self) -> Vec<Parsed> {
        Vec::new()
    }
    /// Why the run failed, from what was read so far, given whether the agent declared a finish
    /// (`finished`); `None` when it did not fail. A run without a finish normally failed; a
    /// harness may also fail a run that finished (the agent's conversation stopped on an error).
    fn failure(&self, finished: bool) -> Option<SanitizedText>;
    /// Why the run failed when the agent's output said so itself (an error the harness reported,
    /// such as Codex's `turn.failed`), as opposed to a finish that merely never came; `None` by
    /// default. When the harness's process exits non-zero, this is the dispatch's reason, not the
    /// exit code alone.
    fn reported_failure(&self) -> Option<SanitizedText> {
        None
    }
}

/// The agent's voice: an [`OutputParser`] read under the rule that only the harness speaks as the
/// agent (module documentation). The agent's first `finish` stands and a later one is a warning;
/// `stet speak`'s report of output held open past the harness's end is a warning; the outcome is
/// the parser's verdict on the first finish.
pub struct AgentVoice<'p> {
    parser: &'p mut dyn OutputParser,
    sanitizer: Arc<TokenSanitizer>,
    /// The first finish's summary, once there was one.
    first_finish: Option<Option<SanitizedText>>,
    /// The last stderr piece said its line goes on.
    stderr_continues: bool,
}

impl<'p> AgentVoice<'p> {
    /// Reads through `parser`, writing its own warnings with `sanitizer`.
    pub fn new(parser: &'p mut dyn OutputParser, sanitizer: Arc<TokenSanitizer>) -> AgentVoice<'p> {
        AgentVoice {
            parser,
            sanitizer,
            first_finish: None,
            stderr_continues: false,
        }
    }

    /// One framed line of stdout or stderr, as the parser reads it under the rule.
    pub fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        if line.stream == OutputStream::Stderr {
            let whole = !self.stderr_continues && !line.line.continues;
            self.stderr_continues = line.line.continues;
            if let Some(report) = whole
                .then(|| SpeakerReport::from_line(&line.line.bytes))
                .flatten()
            {
                return vec![Parsed::Warning(self.held_open(&report))];
            }
        }
        let parsed = self.parser.parse(line);
        self.first_finish_stands(parsed)
    }

    /// The output ended: what the parser still held back, under the rule.
    pub fn ended(&mut self) -> Vec<Parsed> {
        let parsed = self.parser.finish();
        self.first_finish_stands(parsed)
    }

    /// How the run ended: failed when the parser says so (given whether a finish came), otherwise
    /// succeeded with the first finish's summary.
    pub fn outcome(&self) -> HarnessOutcome {
        match self.parser.failure(self.first_finish.is_some()) {
            Some(reason) => HarnessOutcome::Failed { reason },
            None => HarnessOutcome::Succeeded {
                summary: self.first_finish.clone().flatten(),
            },
        }
    }

    /// Why the run failed in the harness's own words, when its output said so
    /// ([`OutputParser::reported_failure`]).
    pub fn reported_failure(&self) -> Option<SanitizedText> {
        self.parser.reported_failure()
    }

    /// Passes the first finish on and turns every later one into a warning quoting it. A `finish`
    /// item a parser returned as a plain item counts as a finish too.
    fn first_finish_stands(&mut self, parsed: Vec<Parsed>) -> Vec<Parsed> {
        parsed
            .into_iter()
            .map(|parsed| {
                let finish = match parsed {
                    Parsed::Finish(finish) => finish,
                    Parsed::Item(item) | Parsed::RecordOnly(item)
                        if item.item == ItemKind::Finish =>
                    {
                        Finish {
                            summary: Some(item.text.clone()),
                            shown: item.text,
                        }
                    }
                    other => return other,
                };
                if self.first_finish.is_none() {
                    self.first_finish = Some(finish.summary.clone());
                    return Parsed::Finish(finish);
                }
                Parsed::Warning(text::bounded_text(
                    &self.sanitizer,
                    &format!(
                        "the agent's output held another finish after the first; the first one stands and this one is ignored: {}",
                        finish.shown.as_str()
                    ),
                    MAX_FINISH_WARNING_BYTES,
                    0,
                ))
            })
            .collect()
    }

    fn held_open(&self, report: &SpeakerReport) -> SanitizedText {
        let streams = |streams: &[HarnessStream]| match streams {
            [HarnessStream::Stdout] => "stdout",
            [HarnessStream::Stderr] => "stderr",
            _ => "stdout and stderr",
        };
        let mut said = Vec::new();
        if !report.held_open_after_exit.is_empty() {
            said.push(format!(
                "a process the agent started held the harness's {} open after the harness exited; nothing written there after that was read",
                streams(&report.held_open_after_exit)
            ));
        }
        if !report.written_by_others.is_empty() {
            said.push(format!(
                "a process other than the harness wrote on the harness's {}; none of it was read as the agent's",
                streams(&report.written_by_others)
            ));
        }
        self.sanitizer.sanitize(&said.join("; "))
    }
}

impl fmt::Debug for AgentVoice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentVoice")
            .field("first_finish", &self.first_finish)
            .finish_non_exhaustive()
    }
}

/// `process` as the engine runs it: under `stet speak` (the sandbox executable at
/// [`crate::image::BINARY_PATH`]), which keeps the rule of the module documentation whatever the
/// harness program is.
pub fn speaking(process: &SandboxProcess) -> SandboxProcess {
    let mut argv = vec![
        crate::image::BINARY_PATH.to_owned(),
        "speak".to_owned(),
        "--".to_owned(),
    ];
    argv.extend(process.argv.iter().cloned());
    SandboxProcess {
        argv,
        env: process.env.clone(),
        workdir: process.workdir.clone(),
    }
}

/// What a CLI harness needs before it can plan a run: the model it tells its agent to use (from
/// `harness.<name>.model`) and stet's gateway to reach it through; either missing is an error naming
/// the setting that gives it.
pub(crate) fn model_through_gateway<'a>(
    harness: &'static str,
    program: &str,
    model: &'a str,
    launch: &HarnessLaunch<'a>,
) -> Result<(&'a str, &'a ModelAccess)> {
    let plan_error = |detail: String| HarnessError::Plan { harness, detail };
    let model = model.trim();
    if model.is_empty() {
        return Err(plan_error(format!(
            "no model is configured: set harness.{harness}.model in your own configuration ($XDG_CONFIG_HOME/stet/config.toml; `stet doctor` names the file it reads)"
        )));
    }
    let Some(access) = launch.model else {
        return Err(plan_error(format!(
            "{program} reaches its model only through stet's gateway, which keeps the key on the host: set [model] base_url (and api_key_env) in your own configuration ($XDG_CONFIG_HOME/stet/config.toml; `stet doctor` names the file it reads)"
        )));
    };
    Ok((model, access))
}

/// One agent program: how it starts in the sandbox and how its output reads.
pub trait Harness: Send + Sync + fmt::Debug {
    /// `openhands`, `script`: shown in events, run records and the pull request's provenance.
    fn name(&self) -> &'static str;
    /// The agent program's version, when the harness pins one.
    fn version(&self) -> Option<String>;
    /// The model the agent is told to use, when the harness knows it.
    fn model(&self) -> Option<String>;
    /// Whether its agent program is part of the offline sandbox image (the stet-sandbox
    /// executable), so a dispatch needs no configured image. No, by default.
    fn runs_in_offline_image(&self) -> bool {
        false
    }
    /// The files to stage and the processes to run for `launch`.
    fn plan(&self, launch: &HarnessLaunch<'_>) -> Result<HarnessPlan>;
    /// The secrets `plan` carries (e.g. a model key in the agent's environment), each with the label
    /// its redaction shows, so the engine masks them by value in everything the dispatch shows.
    fn secrets(&self, plan: &HarnessPlan) -> Vec<(&'static str, SecretValue)> {
        let _ = plan;
        Vec::new()
    }
    /// A fresh parser for one run's output.
    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser>;
    /// Usage the agent recorded in the outputs directory (host path), read once it ended; `None` when
    /// it records none there (the default: a harness whose usage the parser or the gateway reports).
    fn final_usage(
        &self,
        outputs: &Path,
        sanitizer: &Arc<TokenSanitizer>,
    ) -> Result<Option<Usage>> {
        let _ = (outputs, sanitizer);
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
