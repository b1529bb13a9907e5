//! `stet agent`: the scripted agent that runs inside the sandbox for `stet demo` and the engine tests.
//!
//! It stands in for a real coding agent where one cannot or should not run: the sandbox image holds
//! only the stet binary, with no shell, no compiler and no network. It reads a scenario (TOML, see
//! [`stet_protocol::scenario`], the format the host's `script` harness checks too) and the staged
//! instruction file and acts the scenario out step by step, printing one [`AgentRecord`] per line
//! on stdout. The `script` harness reads those lines back. Only the agent
//! writes records: `stet agent run` makes itself non-dumpable first, and the programs it runs get
//! pipes of their own (their lines become `output` records), never its stdout; only the hostile
//! `daemon_with_output` step hands that over.
//!
//! Its `ask` steps are the one way out: they ask a model over HTTP at the URL the harness passes in
//! `STET_MODEL_URL`, in the sandbox the relay on the container's loopback that leads to stet's
//! gateway on the host (see [`ask`]).
//!
//! The agent is deliberately untrusted: its edits may go anywhere, plant hooks or follow links, print
//! secrets or flood its output, so the host's defences can be tested against it. A step that cannot
//! be carried out (an edit that fails, a missing instruction file, an unusable model URL) is
//! reported as an `error` record and ends the run with exit code 1; a model that refuses or fails, or
//! no model at all (no gateway configured), is an `error` record and the run goes on. Only a broken stdout or a bad scenario is an
//! [`AgentError`] returned to the caller.

mod act;
pub mod ask;
pub mod check;
mod proxied;

use std::io::{Read as _, Write};
use std::path::PathBuf;

pub use ask::ModelEndpoint;
pub use check::check;
pub use stet_protocol::agent_record::AgentRecord;
use stet_protocol::scenario::{self, MAX_PACE, ScenarioError, parse_scenario};

/// Why the scripted agent could not run, or could not read a scenario or checks file.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum AgentError {
    #[error("{}: cannot read the scenario: {source}", file.display())]
    ReadScenario {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{}: cannot read the checks: {source}", file.display())]
    ReadChecks {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", file.display())]
    ChecksSyntax { file: PathBuf, message: String },
    #[error("{}: check {check}: field `{field}`: {problem}", file.display())]
    CheckField {
        file: PathBuf,
        /// Counted from 1; 0 when the problem is the file as a whole.
        check: usize,
        field: String,
        problem: String,
    },
    #[error("--pace {pace} is not a number from 0 to {MAX_PACE}")]
    InvalidPace { pace: f64 },
    #[error("{}: cannot read the instructions: {source}", file.display())]
    ReadInstructions {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("step {step}: {action} {}: {source}", path.display())]
    Edit {
        step: usize,
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("step {step}: replace in {}: the text {find:?} is not in the file", path.display())]
    NotFound {
        step: usize,
        path: PathBuf,
        find: String,
    },
    #[error("step {step}: cannot start {program:?}: {source}")]
    Start {
        step: usize,
        program: String,
        source: std::io::Error,
    },
    #[error("step {step}: the system's random generator failed: {detail}")]
    Random { step: usize, detail: String },
    #[error(
        "step {step}: ask: {} is not set, so there is no model to ask",
        stet_protocol::sandbox::MODEL_URL_ENV
    )]
    NoModelUrl { step: usize },
    #[error("step {step}: ask: the model URL {url:?} cannot be used: {problem}")]
    ModelUrl {
        step: usize,
        url: String,
        problem: String,
    },
    #[error(
        "step {step}: ask: the model answered {status}{}",
        ask::refusal_detail(message, retry_after)
    )]
    ModelRefused {
        step: usize,
        status: http::StatusCode,
        /// The server's `error.message`, when its reply had one.
        message: Option<String>,
        /// The reply's `Retry-After`, when it had one.
        retry_after: Option<String>,
    },
    #[error("step {step}: ask: {problem}")]
    Ask { step: usize, problem: String },
    #[error("writing the agent's output: {0}")]
    Write(#[source] std::io::Error),
}

/// Result alias of the scripted agent.
pub type Result<T> = std::result::Result<T, AgentError>;

/// What `stet agent run` was told.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The scenario file to act out.
    pub scenario: PathBuf,
    /// The staged instruction file.
    pub instructions: PathBuf,
    /// The factor every pause is multiplied by; 0 runs without pauses.
    pub pace: f64,
    /// Where edits and programs run: the sandbox's `/workspace`.
    pub workspace: PathBuf,
}

/// Acts the scenario out, printing one record per line on `out`; returns the process exit code.
/// `ask` steps go to the model the environment names ([`ModelEndpoint::from_environment`]).
pub fn run(options: &AgentOptions, out: &mut dyn Write) -> Result<u8> {
    run_with_model(options, ModelEndpoint::from_environment().as_ref(), out)
}

/// [`run`], with `ask` steps sent to `model` (none: each `ask` step is an `error` record). An `ask`
/// step runs a small async runtime of its own, so this must not be called from async code.
pub fn run_with_model(
    options: &AgentOptions,
    model: Option<&ModelEndpoint>,
    out: &mut dyn Write,
) -> Result<u8> {
    if !(options.pace.is_finite() && (0.0..=MAX_PACE).contains(&options.pace)) {
        return Err(AgentError::InvalidPace { pace: options.pace });
    }
    let text = read_scenario(&options.scenario)?;
    let scenario = parse_scenario(&options.scenario, &text)?;
    act::Actor::new(options, &scenario.model, model, out).perform(&scenario.steps)
}

fn read_scenario(file: &std::path::Path) -> Result<String> {
    let read_error = |source| AgentError::ReadScenario {
        file: file.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .map_err(read_error)?
        .take(scenario::MAX_SCENARIO_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > scenario::MAX_SCENARIO_BYTES {
        return Err(AgentError::Scenario(ScenarioError::TooLarge {
            file: file.to_owned(),
            size: bytes.len(),
            limit: scenario::MAX_SCENARIO_BYTES,
        }));
    }
    String::from_utf8(bytes).map_err(|_| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the scenario is not UTF-8 text",
        ))
    })
}
