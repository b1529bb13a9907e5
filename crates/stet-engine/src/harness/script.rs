//! The `script` harness: runs `stet agent`, the scripted agent of `stet demo` and of the engine tests.
//!
//! The plan stages the rendered instructions as `task.md` and the scenario as `scenario.toml` in the
//! outputs directory and runs the stet binary of the sandbox image on them; nothing of the brief
//! travels on the command line. The parser reads the agent's JSON Lines ([`AgentRecord`]) back into
//! transcript items and usage. The agent is treated as untrusted like any other: a line that is not a
//! record is shown as raw output, every text is stripped of escape sequences and control characters,
//! sanitized, then cut to a bound.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::credential::SecretValue;
use crate::harness::text;
use crate::harness::{
    Finish, Harness, HarnessError, HarnessLaunch, HarnessPlan, ModelAccess, OutputParser, Parsed,
    StagedFile, UsageReport,
};
use crate::image::BINARY_PATH;
use crate::runtime::{OUTPUTS_MOUNT, OutputLine, OutputStream, SandboxProcess, WORKSPACE_MOUNT};
use stet_protocol::agent_record::AgentRecord;
use stet_protocol::event::{ItemKind, TranscriptItem};
use stet_protocol::sandbox::{MODEL_KEY_ENV, MODEL_URL_ENV};
use stet_protocol::scenario::{MAX_PACE, MAX_SCENARIO_BYTES, ScenarioError, parse_scenario};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

const HARNESS: &str = "script";

/// The staged instruction file's name in the outputs directory.
pub const INSTRUCTIONS_FILE: &str = "task.md";

/// The staged scenario's name in the outputs directory.
pub const SCENARIO_FILE: &str = "scenario.toml";

/// The longest text of one transcript item, in bytes, the "… (N bytes more)" note included.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;

/// The longest line gathered from its pieces; the rest of a longer line is only counted.
pub const MAX_GATHERED_BYTES: usize = 1024 * 1024;

/// The longest model name of a usage record.
const MAX_MODEL_BYTES: usize = 256;

/// The longest reason of a failed outcome.
const MAX_REASON_BYTES: usize = 4 * 1024;

/// The scenarios of the demo briefs, by brief id.
const DEMO_SCENARIOS: &[(&str, &str)] = &[
    (
        "fix-greeting",
        include_str!("../../../../assets/demo/scenarios/fix-greeting.toml"),
    ),
    (
        "test-word-count",
        include_str!("../../../../assets/demo/scenarios/test-word-count.toml"),
    ),
];

/// The scenario of every other brief.
const DEFAULT_SCENARIO: &str = include_str!("../../../../assets/demo/scenarios/default.toml");

/// Why the script harness cannot plan a run.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ScriptError {
    #[error("{}: cannot read the scenario: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the scenario is larger than {limit} bytes", file.display())]
    TooLarge { file: PathBuf, limit: usize },
    #[error("{}: the scenario is not UTF-8 text", file.display())]
    NotUtf8 { file: PathBuf },
    #[error("{}: not a scenario: {problem}", file.display())]
    NotAScenario { file: PathBuf, problem: String },
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("the pace {pace} is not a number from 0 to {MAX_PACE}")]
    Pace { pace: f64 },
}

impl From<ScriptError> for HarnessError {
    fn from(error: ScriptError) -> HarnessError {
        HarnessError::Plan {
            harness: HARNESS,
            detail: error.to_string(),
        }
    }
}

/// Where the scenario comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ScenarioSource {
    /// The embedded scenario of the demo brief with the dispatch's brief id, or the generic one.
    Demo,
    /// A scenario file on the host, read when a run is planned.
    File(PathBuf),
}

/// The harness of `stet agent`.
#[derive(Debug, Clone)]
pub struct ScriptHarness {
    source: ScenarioSource,
    pace: f64,
}

impl ScriptHarness {
    /// `pace` multiplies every pause of the scenario; 0 runs it without pauses.
    pub fn new(source: ScenarioSource, pace: f64) -> ScriptHarness {
        ScriptHarness { source, pace }
    }

    /// The scenario text for `brief_id`, checked.
    fn scenario(&self, brief_id: &str) -> Result<String, ScriptError> {
        let (name, text) = match &self.source {
            ScenarioSource::Demo => {
                let (name, text) = demo_scenario(brief_id);
                (
                    PathBuf::from(format!("assets/demo/scenarios/{name}.toml")),
                    text.to_owned(),
                )
            }
            ScenarioSource::File(file) => {
                let text = read_scenario(file)?;
                parse_scenario(file, &text).map_err(|error| ScriptError::NotAScenario {
                    file: file.clone(),
                    problem: without_content(&error),
                })?;
                return Ok(text);
            }
        };
        parse_scenario(&name, &text)?;
        Ok(text)
    }
}

/// What is wrong with a scenario file of the user's, quoting none of it (it may be any file:
/// configuration names it): a syntax error is already placed in the parser's words, and a field is
/// named only when it is one of the format's own keys.
fn without_content(error: &ScenarioError) -> String {
    let key = |field: &str| {
        if stet_protocol::scenario::is_format_key(field) {
            format!("field `{field}`")
        } else {
            "a field".to_owned()
        }
    };
    match error {
        ScenarioError::Syntax { message, .. } => message.clone(),
        ScenarioError::TooLarge { size, limit, .. } => {
            format!("it is {size} bytes, more than {limit}")
        }
        ScenarioError::Field { field, .. } => format!(
            "{} is not as a scenario needs it (a `model` and `[[step]]` tables)",
            key(field)
        ),
        ScenarioError::StepField { step, field, .. } => {
            format!("step {step}: {} is not as a step needs it", key(field))
        }
    }
}

/// The embedded demo scenario for `brief_id`: its name and text (`default` for a brief without one).
pub fn demo_scenario(brief_id: &str) -> (&'static str, &'static str) {
    DEMO_SCENARIOS
        .iter()
        .find(|(id, _)| *id == brief_id)
        .copied()
        .unwrap_or(("default", DEFAULT_SCENARIO))
}

fn read_scenario(file: &Path) -> Result<String, ScriptError> {
    let read_error = |source| ScriptError::Read {
        file: file.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .map_err(read_error)?
        .take(MAX_SCENARIO_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_SCENARIO_BYTES {
        return Err(ScriptError::TooLarge {
            file: file.to_owned(),
            limit: MAX_SCENARIO_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| ScriptError::NotUtf8 {
        file: file.to_owned(),
    })
}

/// Where the scripted agent's `ask` steps reach the model: the relay's URL and the placeholder key,
/// in `STET_MODEL_URL` and `STET_MODEL_KEY`; nothing without a gateway.
fn model_environment(model: Option<&ModelAccess>) -> BTreeMap<String, SecretValue> {
    model
        .map(|access| {
            BTreeMap::from([
                (
                    MODEL_URL_ENV.to_owned(),
                    SecretValue::new(access.base_url.clone()),
                ),
                (
                    MODEL_KEY_ENV.to_owned(),
                    SecretValue::new(access.placeholder_key.clone()),
                ),
            ])
        })
        .unwrap_or_default()
}

impl Harness for ScriptHarness {
    fn name(&self) -> &'static str {
        HARNESS
    }

    fn version(&self) -> Option<String> {
        Some(format!("stet-agent {}", env!("CARGO_PKG_VERSION")))
    }

    fn runs_in_offline_image(&self) -> bool {
        true
    }

    fn model(&self) -> Option<String> {
        None
    }

    fn plan(&self, launch: &HarnessLaunch<'_>) -> crate::harness::Result<HarnessPlan> {
        if !(self.pace.is_finite() && (0.0..=MAX_PACE).contains(&self.pace)) {
            return Err(ScriptError::Pace { pace: self.pace }.into());
        }
        let scenario = self.scenario(&launch.brief.id)?;
        let argv = [
            BINARY_PATH.to_owned(),
            "agent".to_owned(),
            "run".to_owned(),
            "--scenario".to_owned(),
            format!("{OUTPUTS_MOUNT}/{SCENARIO_FILE}"),
            "--instructions".to_owned(),
            format!("{OUTPUTS_MOUNT}/{INSTRUCTIONS_FILE}"),
            "--pace".to_owned(),
            self.pace.to_string(),
        ];
        Ok(HarnessPlan {
            files: vec![
                StagedFile {
                    name: INSTRUCTIONS_FILE.to_owned(),
                    contents: launch.instructions.as_bytes().to_vec(),
                },
                StagedFile {
                    name: SCENARIO_FILE.to_owned(),
                    contents: scenario.into_bytes(),
                },
            ],
            processes: vec![SandboxProcess {
                argv: argv.into(),
                env: model_environment(launch.model),
                workdir: WORKSPACE_MOUNT.to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(ScriptParser::new(sanitizer))
    }
}

/// A line longer than the framer's piece size, while its pieces arrive.
#[derive(Debug, Default)]
struct LongLine {
    /// Up to [`MAX_GATHERED_BYTES`] of it.
    bytes: Vec<u8>,
    /// How many bytes past those were passed over.
    dropped: usize,
}

impl LongLine {
    fn add(&mut self, piece: &[u8]) {
        let room = MAX_GATHERED_BYTES - self.bytes.len();
        let kept = piece.len().min(room);
        self.bytes.extend_from_slice(&piece[..kept]);
        self.dropped += piece.len() - kept;
    }
}

/// Reads `stet agent`'s output into transcript items, finishes and usage, and remembers the last
/// `error` record, which says why a run without a finish failed.
#[derive(Debug)]
pub struct ScriptParser {
    sanitizer: Arc<TokenSanitizer>,
    /// The pieces so far of a long stdout line and of a long stderr line.
    long_stdout: Option<LongLine>,
    long_stderr: Option<LongLine>,
    last_error: Option<String>,
}

impl ScriptParser {
    /// A parser of the scripted agent's output, redacting with `sanitizer`.
    pub fn new(sanitizer: Arc<TokenSanitizer>) -> ScriptParser {
        ScriptParser {
            sanitizer,
            long_stdout: None,
            long_stderr: None,
            last_error: None,
        }
    }

    /// One whole line: `dropped` bytes past `bytes` were passed over.
    fn line(&mut self, stream: OutputStream, bytes: &[u8], dropped: usize) -> Vec<Parsed> {
        match stream {
            OutputStream::Stderr => vec![self.item(ItemKind::Error, &lossy(bytes), dropped)],
            OutputStream::Stdout => match record(bytes).filter(|_| dropped == 0) {
                Some(record) => self.record(record),
                None => vec![self.item(ItemKind::Output, &lossy(bytes), dropped)],
            },
        }
    }

    fn record(&mut self, record: AgentRecord) -> Vec<Parsed> {
        let parsed = match record {
            AgentRecord::Message { text } => self.item(ItemKind::Message, &text, 0),
            AgentRecord::Thought { text } => self.item(ItemKind::Thought, &text, 0),
            AgentRecord::Command { text } => self.item(ItemKind::Command, &text, 0),
            AgentRecord::Output { text } => self.item(ItemKind::Output, &text, 0),
            AgentRecord::Error { text } => {
                let item = self.item(ItemKind::Error, &text, 0);
                self.last_error = Some(text);
                item
            }
            AgentRecord::Finish { summary } => {
                let written = !summary.trim().is_empty();
                let shown = if written {
                    summary.as_str()
                } else {
                    "(no summary)"
                };
                Parsed::Finish(Finish {
                    summary: written.then(|| self.text(&summary, 0, MAX_ITEM_BYTES)),
                    shown: self.text(shown, 0, MAX_ITEM_BYTES),
                })
            }
            AgentRecord::Usage {
                model,
                input_tokens,
                output_tokens,
                cached_tokens,
                cost_usd,
            } => Parsed::Usage(UsageReport {
                model: self.text(&model, 0, MAX_MODEL_BYTES),
                input_tokens,
                output_tokens,
                cached_tokens,
                cost_usd: cost_usd.filter(|cost| cost.is_finite() && *cost >= 0.0),
            }),
        };
        vec![parsed]
    }

    fn item(&self, item: ItemKind, text: &str, dropped: usize) -> Parsed {
        Parsed::Item(TranscriptItem {
            item,
            text: self.text(text, dropped, MAX_ITEM_BYTES),
        })
    }

    fn text(&self, text: &str, dropped: usize, limit: usize) -> SanitizedText {
        text::bounded_text(&self.sanitizer, text, limit, dropped)
    }
}

impl OutputParser for ScriptParser {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        let slot = match line.stream {
            OutputStream::Stdout => &mut self.long_stdout,
            OutputStream::Stderr => &mut self.long_stderr,
        };
        let piece = line.line.bytes.as_slice();
        match (slot.take(), line.line.continues) {
            (None, false) => self.line(line.stream, piece, 0),
            (gathered, continues) => {
                let mut long = gathered.unwrap_or_default();
                long.add(piece);
                if continues {
                    *slot = Some(long);
                    return Vec::new();
                }
                self.line(line.stream, &long.bytes, long.dropped)
            }
        }
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        if finished {
            return None;
        }
        let reason = match &self.last_error {
            Some(error) => format!("the agent stopped without finishing: {error}"),
            None => "the agent stopped without finishing".to_owned(),
        };
        Some(self.text(&reason, 0, MAX_REASON_BYTES))
    }
}

/// The record a stdout line holds, if it holds one; bytes that are not UTF-8 become U+FFFD.
fn record(bytes: &[u8]) -> Option<AgentRecord> {
    let line = bytes.trim_ascii();
    if !line.starts_with(b"{") {
        return None;
    }
    match serde_json::from_slice(line) {
        Ok(record) => Some(record),
        Err(_) if std::str::from_utf8(line).is_err() => {
            serde_json::from_str(&String::from_utf8_lossy(line)).ok()
        }
        Err(_) => None,
    }
}

fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests;
