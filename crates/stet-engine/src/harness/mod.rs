//! Harnesses: the adapters that know how one agent program is started in the sandbox and how its
//! output reads (DESIGN §2 "harness"). Each one turns its agent's own output format into stet's
//! transcript items, an outcome and, where the agent reports it, the run's usage.
//!
//! The engine only sees the [`Harness`] trait: a harness plans the files to stage and the processes to
//! run, and hands out a fresh [`OutputParser`] per dispatch. Staged files are written by the host into
//! the outputs directory (mounted at `/outputs`) before the agent starts, so no brief text ever travels
//! on a command line (ADR-0018 row 4).

pub mod openhands;
pub mod replay;
pub mod script;
mod text;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::brief::Brief;
use crate::dispatch::credential::SecretValue;
use crate::dispatch::event::{DispatchId, TranscriptItem, Usage};
use crate::dispatch::sanitize::{SanitizedText, TokenSanitizer};
use crate::runtime::{OutputLine, SandboxProcess};

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

/// Model usage as an agent reports it for one request (the engine keeps the running total).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageReport {
    /// The model the request went to, as reported.
    pub model: SanitizedText,
    /// Tokens of the prompt.
    pub input_tokens: u64,
    /// Tokens of the completion.
    pub output_tokens: u64,
    /// Tokens of the prompt served from the provider's cache.
    pub cached_tokens: u64,
    /// What the request cost in US dollars, when the report says; `None` when it does not.
    pub cost_usd: Option<f64>,
}

/// One thing read from the agent's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// An entry of the agent's transcript.
    Item(TranscriptItem),
    /// Model usage for one request.
    Usage(UsageReport),
    /// Something about the run a person should know that is not the agent's doing (the harness's
    /// network attempts failing in a sandbox that has none); published as a `warning` event.
    Warning(SanitizedText),
    /// An item for the run record only, not shown live (the harness's repeated network failures).
    RecordOnly(TranscriptItem),
}

/// Reads one agent run's output, line by line; one parser per dispatch.
pub trait OutputParser: Send {
    /// One framed line of stdout or stderr. Every text it returns is already sanitized.
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed>;
    /// The output ended: whatever the parser still holds back, in order. Nothing by default.
    fn finish(&mut self) -> Vec<Parsed> {
        Vec::new()
    }
    /// The outcome of what was read so far.
    fn outcome(&self) -> HarnessOutcome;
}

/// One agent program: how it starts in the sandbox and how its output reads.
pub trait Harness: Send + Sync + fmt::Debug {
    /// `openhands`, `script`: shown in events, run records and the pull request's provenance.
    fn name(&self) -> &'static str;
    /// The agent program's version, when the harness pins one.
    fn version(&self) -> Option<String>;
    /// The model the agent is told to use, when the harness knows it.
    fn model(&self) -> Option<String>;
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
    /// it records none there.
    fn final_usage(&self, outputs: &Path, sanitizer: &Arc<TokenSanitizer>)
    -> Result<Option<Usage>>;
}
