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

use crate::agent::ask::{MODEL_KEY_ENV, MODEL_URL_ENV};
use crate::agent::scenario::MAX_SCENARIO_BYTES;
use crate::agent::{AgentError, AgentRecord, MAX_PACE, parse_scenario};
use crate::dispatch::credential::SecretValue;
use crate::dispatch::event::{ItemKind, TranscriptItem, Usage};
use crate::dispatch::sanitize::{SanitizedText, TokenSanitizer};
use crate::harness::text;
use crate::harness::{
    Harness, HarnessError, HarnessLaunch, HarnessOutcome, HarnessPlan, ModelAccess, OutputParser,
    Parsed, StagedFile, UsageReport,
};
use crate::image::BINARY_PATH;
use crate::runtime::{OUTPUTS_MOUNT, OutputLine, OutputStream, SandboxProcess, WORKSPACE_MOUNT};

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
        include_str!("../../assets/demo/scenarios/fix-greeting.toml"),
    ),
    (
        "test-word-count",
        include_str!("../../assets/demo/scenarios/test-word-count.toml"),
    ),
];

/// The scenario of every other brief.
const DEFAULT_SCENARIO: &str = include_str!("../../assets/demo/scenarios/default.toml");

/// Why the script harness cannot plan a run.
#[derive(Debug, thiserror::Error)]
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
    Scenario(#[from] AgentError),
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
fn without_content(error: &AgentError) -> String {
    let key = |field: &str| {
        if crate::agent::scenario::is_format_key(field) {
            format!("field `{field}`")
        } else {
            "a field".to_owned()
        }
    };
    match error {
        AgentError::ScenarioSyntax { message, .. } => message.clone(),
        AgentError::ScenarioTooLarge { size, limit, .. } => {
            format!("it is {size} bytes, more than {limit}")
        }
        AgentError::ScenarioField { field, .. } => format!(
            "{} is not as a scenario needs it (a `model` and `[[step]]` tables)",
            key(field)
        ),
        AgentError::StepField { step, field, .. } => {
            format!("step {step}: {} is not as a step needs it", key(field))
        }
        _ => "it cannot be read as a scenario".to_owned(),
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

    fn final_usage(
        &self,
        _outputs: &Path,
        _sanitizer: &Arc<TokenSanitizer>,
    ) -> crate::harness::Result<Option<Usage>> {
        Ok(None)
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

/// Reads `stet agent`'s output into transcript items and usage, and remembers what decides the
/// outcome: a `finish` record, or the last `error` record.
#[derive(Debug)]
pub struct ScriptParser {
    sanitizer: Arc<TokenSanitizer>,
    /// The pieces so far of a long stdout line and of a long stderr line.
    long_stdout: Option<LongLine>,
    long_stderr: Option<LongLine>,
    finish: Option<String>,
    last_error: Option<String>,
}

impl ScriptParser {
    pub fn new(sanitizer: Arc<TokenSanitizer>) -> ScriptParser {
        ScriptParser {
            sanitizer,
            long_stdout: None,
            long_stderr: None,
            finish: None,
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
                let shown = if summary.trim().is_empty() {
                    "(no summary)"
                } else {
                    summary.as_str()
                };
                let item = self.item(ItemKind::Finish, shown, 0);
                self.finish = Some(summary);
                item
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

    fn outcome(&self) -> HarnessOutcome {
        match (&self.finish, &self.last_error) {
            (Some(summary), _) => HarnessOutcome::Succeeded {
                summary: (!summary.trim().is_empty())
                    .then(|| self.text(summary, 0, MAX_ITEM_BYTES)),
            },
            (None, Some(error)) => HarnessOutcome::Failed {
                reason: self.text(
                    &format!("the agent stopped without finishing: {error}"),
                    0,
                    MAX_REASON_BYTES,
                ),
            },
            (None, None) => HarnessOutcome::Failed {
                reason: self.text("the agent stopped without finishing", 0, MAX_REASON_BYTES),
            },
        }
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::brief::Brief;
    use crate::dispatch::event::DispatchId;
    use crate::runtime::lines::{FramedLine, LineFramer, MAX_LINE_BYTES};

    fn sanitizer() -> Arc<TokenSanitizer> {
        Arc::new(TokenSanitizer::new().unwrap())
    }

    fn brief(id: &str, title: &str) -> Brief {
        let text = format!(
            "title = {}\nworkflow = \"implement\"\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n[[items]]\ntext = \"Do it.\"\n",
            toml::Value::String(title.to_owned())
        );
        Brief::parse(id, Path::new(&format!("{id}.toml")), &text).unwrap()
    }

    fn plan(harness: &ScriptHarness, brief: &Brief, instructions: &str) -> HarnessPlan {
        harness
            .plan(&HarnessLaunch {
                dispatch: DispatchId::new(),
                brief,
                instructions,
                model: None,
            })
            .unwrap()
    }

    fn stdout(text: &str) -> OutputLine {
        OutputLine {
            stream: OutputStream::Stdout,
            line: FramedLine {
                bytes: text.as_bytes().to_vec(),
                continues: false,
            },
        }
    }

    fn stderr(text: &str) -> OutputLine {
        OutputLine {
            stream: OutputStream::Stderr,
            ..stdout(text)
        }
    }

    fn items(parsed: &[Parsed]) -> Vec<(ItemKind, &str)> {
        parsed
            .iter()
            .map(|parsed| match parsed {
                Parsed::Item(item) => (item.item, item.text.as_str()),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    fn parse_all(parser: &mut ScriptParser, lines: &[OutputLine]) -> Vec<Parsed> {
        lines.iter().flat_map(|line| parser.parse(line)).collect()
    }

    /// Frames `bytes` as the runtime does and parses every stdout line.
    fn parse_stream(parser: &mut ScriptParser, bytes: &[u8]) -> Vec<Parsed> {
        let mut framer = LineFramer::default();
        let mut lines = framer.push(bytes);
        lines.extend(framer.finish());
        lines
            .into_iter()
            .flat_map(|line| {
                parser.parse(&OutputLine {
                    stream: OutputStream::Stdout,
                    line,
                })
            })
            .collect()
    }

    fn github_shaped() -> String {
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut random = [0u8; 36];
        getrandom::fill(&mut random).unwrap();
        let body: String = random
            .iter()
            .map(|b| char::from(ALNUM[usize::from(*b) % ALNUM.len()]))
            .collect();
        format!("ghp_{body}")
    }

    #[test]
    fn the_plan_stages_the_files_and_keeps_the_brief_off_the_command_line() {
        let hostile = "--help $(touch /tmp/x)";
        let brief = brief("fix-greeting", hostile);
        let instructions = format!("# Task: {hostile}\n");
        let harness = ScriptHarness::new(ScenarioSource::Demo, 0.5);
        let plan = plan(&harness, &brief, &instructions);
        assert_eq!(plan.files.len(), 2);
        assert_eq!(plan.files[0].name, "task.md");
        assert_eq!(plan.files[0].contents, instructions.as_bytes());
        assert_eq!(plan.files[1].name, "scenario.toml");
        assert_eq!(
            plan.files[1].contents,
            demo_scenario("fix-greeting").1.as_bytes()
        );
        let [process] = plan.processes.as_slice() else {
            panic!("{:?}", plan.processes)
        };
        assert_eq!(
            process.argv,
            [
                "/usr/local/bin/stet",
                "agent",
                "run",
                "--scenario",
                "/outputs/scenario.toml",
                "--instructions",
                "/outputs/task.md",
                "--pace",
                "0.5"
            ]
        );
        assert!(
            process
                .argv
                .iter()
                .all(|arg| !arg.contains("touch") && !arg.contains("--help") && !arg.contains('$'))
        );
        assert!(process.env.is_empty());
        assert_eq!(process.workdir, "/workspace");
        assert_eq!(harness.name(), "script");
        assert_eq!(
            harness.version(),
            Some(format!("stet-agent {}", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(harness.model(), None);
    }

    #[test]
    fn the_demo_picks_the_brief_s_scenario_or_the_default() {
        let harness = ScriptHarness::new(ScenarioSource::Demo, 1.0);
        for (id, expected) in [
            ("fix-greeting", "fix-greeting"),
            ("test-word-count", "test-word-count"),
            ("something-else", "default"),
        ] {
            let plan = plan(&harness, &brief(id, "A title"), "# Task\n");
            let (name, text) = demo_scenario(id);
            assert_eq!(name, expected);
            assert_eq!(plan.files[1].contents, text.as_bytes());
            assert!(plan.processes[0].argv.contains(&"1".to_owned()));
        }
        for (name, text) in DEMO_SCENARIOS
            .iter()
            .copied()
            .chain([("default", DEFAULT_SCENARIO)])
        {
            let scenario = parse_scenario(Path::new(name), text).unwrap();
            assert!(
                matches!(
                    scenario.steps.last().unwrap().action,
                    crate::agent::Action::Finish(_)
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn a_scenario_file_is_read_and_checked_at_plan_time() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mine.toml");
        std::fs::write(&file, "model = \"m\"\n[[step]]\nfinish = \"ok\"\n").unwrap();
        let harness = ScriptHarness::new(ScenarioSource::File(file.clone()), 0.0);
        let brief = brief("anything", "A title");
        let plan = plan(&harness, &brief, "# Task\n");
        assert_eq!(
            plan.files[1].contents,
            b"model = \"m\"\n[[step]]\nfinish = \"ok\"\n"
        );
        assert!(
            plan.processes[0]
                .argv
                .ends_with(&["--pace".into(), "0".into()])
        );

        let launch = HarnessLaunch {
            dispatch: DispatchId::new(),
            brief: &brief,
            instructions: "# Task\n",
            model: None,
        };
        std::fs::write(&file, "model = \"m\"\n[[step]]\nsing = true\n").unwrap();
        let message = harness.plan(&launch).unwrap_err().to_string();
        assert!(
            message
                .contains("mine.toml: not a scenario: step 1: a field is not as a step needs it"),
            "{message}"
        );
        assert!(
            !message.contains("sing"),
            "a key of the file is not quoted: {message}"
        );
        assert!(message.contains("script harness"), "{message}");
        std::fs::write(&file, "model = \"m\"\n[[step]]\nfinish = 5\n").unwrap();
        let message = harness.plan(&launch).unwrap_err().to_string();
        assert!(
            message.contains("step 1: field `finish` is not as a step needs it"),
            "the format's own keys are named: {message}"
        );
    }

    #[test]
    fn a_scenario_file_that_is_some_other_file_of_the_users_is_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let secret = format!("canary{}", uuid::Uuid::new_v4().simple());
        let brief = brief("anything", "A title");
        let launch = HarnessLaunch {
            dispatch: DispatchId::new(),
            brief: &brief,
            instructions: "# Task\n",
            model: None,
        };
        for text in [
            format!("db.example.invalid:5432:app:admin:{secret}\n"),
            format!("TOKEN = \"{secret}\"\n"),
            format!("{secret} = 1\n"),
            format!("model = \"m\"\n[[step]]\nsay = \"hi\"\n{secret} = true\n"),
            format!("model = \"m\"\n[[step]]\npause = \"{secret}\"\nsay = \"hi\"\n"),
            format!("model = {secret}\n"),
        ] {
            let file = dir.path().join("pgpass");
            std::fs::write(&file, &text).unwrap();
            let harness = ScriptHarness::new(ScenarioSource::File(file), 0.0);
            let message = harness.plan(&launch).unwrap_err().to_string();
            assert!(message.contains("pgpass: not a scenario: "), "{message}");
            assert!(!message.contains(&secret), "{text:?}: {message}");
            assert!(!message.contains("admin"), "{text:?}: {message}");
        }
    }

    #[test]
    fn a_scenario_that_cannot_be_read_or_played_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let brief = brief("anything", "A title");
        let launch = HarnessLaunch {
            dispatch: DispatchId::new(),
            brief: &brief,
            instructions: "# Task\n",
            model: None,
        };

        let missing = dir.path().join("missing.toml");
        let harness = ScriptHarness::new(ScenarioSource::File(missing), 0.0);
        let message = harness.plan(&launch).unwrap_err().to_string();
        assert!(
            message.contains("missing.toml: cannot read the scenario"),
            "{message}"
        );

        let harness = ScriptHarness::new(ScenarioSource::Demo, f64::NAN);
        let message = harness.plan(&launch).unwrap_err().to_string();
        assert!(message.contains("pace NaN"), "{message}");
    }

    #[test]
    fn every_record_becomes_its_item_or_usage() {
        let mut parser = ScriptParser::new(sanitizer());
        let lines: Vec<OutputLine> = [
            AgentRecord::Message { text: "hi".into() },
            AgentRecord::Thought { text: "hm".into() },
            AgentRecord::Command {
                text: "stet agent check checks/greeting.toml".into(),
            },
            AgentRecord::Output {
                text: "ok greets".into(),
            },
            AgentRecord::Error {
                text: "broken".into(),
            },
            AgentRecord::Finish {
                summary: "Done.\nTwo files.".into(),
            },
        ]
        .iter()
        .map(|record| stdout(&record.to_line().unwrap()))
        .collect();
        let parsed = parse_all(&mut parser, &lines);
        assert_eq!(
            items(&parsed),
            vec![
                (ItemKind::Message, "hi"),
                (ItemKind::Thought, "hm"),
                (ItemKind::Command, "stet agent check checks/greeting.toml"),
                (ItemKind::Output, "ok greets"),
                (ItemKind::Error, "broken"),
                (ItemKind::Finish, "Done.\nTwo files."),
            ]
        );
        let usage = parser.parse(&stdout(
            r#"{"type":"usage","model":"demo-model","input_tokens":1200,"output_tokens":80,"cached_tokens":600,"cost_usd":0.0042}"#,
        ));
        assert_eq!(
            usage,
            vec![Parsed::Usage(UsageReport {
                model: sanitizer().sanitize("demo-model"),
                input_tokens: 1200,
                output_tokens: 80,
                cached_tokens: 600,
                cost_usd: Some(0.0042),
            })]
        );
        let usage = parser.parse(&stdout(
            r#"{"type":"usage","model":"m","input_tokens":1,"output_tokens":2,"cost_usd":-1}"#,
        ));
        assert!(
            matches!(&usage[..], [Parsed::Usage(report)] if report.cost_usd.is_none() && report.cached_tokens == 0),
            "{usage:?}"
        );
    }

    #[test]
    fn other_lines_are_raw_output_and_stderr_is_errors() {
        let mut parser = ScriptParser::new(sanitizer());
        let mut lines = vec![
            stdout("plain text"),
            stdout(r#"{"type":"dance","text":"x"}"#),
            stdout(r#"{"type":"message"}"#),
            stdout("{not json"),
            stderr("error: something on stderr"),
        ];
        lines.push(OutputLine {
            stream: OutputStream::Stdout,
            line: FramedLine {
                bytes: b"caf\xff\xfe".to_vec(),
                continues: false,
            },
        });
        let parsed = parse_all(&mut parser, &lines);
        assert_eq!(
            items(&parsed),
            vec![
                (ItemKind::Output, "plain text"),
                (ItemKind::Output, r#"{"type":"dance","text":"x"}"#),
                (ItemKind::Output, r#"{"type":"message"}"#),
                (ItemKind::Output, "{not json"),
                (ItemKind::Error, "error: something on stderr"),
                (ItemKind::Output, "caf\u{fffd}\u{fffd}"),
            ]
        );
        let mut record = br#"{"type":"message","text":"caf"#.to_vec();
        record.extend_from_slice(b"\xff ok\"}");
        let parsed = parser.parse(&OutputLine {
            stream: OutputStream::Stdout,
            line: FramedLine {
                bytes: record,
                continues: false,
            },
        });
        assert_eq!(items(&parsed), vec![(ItemKind::Message, "caf\u{fffd} ok")]);
    }

    #[test]
    fn a_planted_secret_comes_out_redacted_wherever_it_appears() {
        let secret = github_shaped();
        let mut parser = ScriptParser::new(sanitizer());
        let lines = [
            stdout(
                &AgentRecord::Output {
                    text: format!("export DEMO_TOKEN={secret}"),
                }
                .to_line()
                .unwrap(),
            ),
            stdout(&format!("raw {secret}")),
            stderr(&format!("stderr {secret}")),
            stdout(
                &AgentRecord::Finish {
                    summary: format!("leaked {secret}"),
                }
                .to_line()
                .unwrap(),
            ),
        ];
        let parsed = parse_all(&mut parser, &lines);
        let texts = items(&parsed);
        assert_eq!(texts.len(), 4);
        for (_, text) in &texts {
            assert!(!text.contains(&secret), "{text}");
            assert!(text.contains("[REDACTED:"), "{text}");
        }
        let HarnessOutcome::Succeeded {
            summary: Some(summary),
        } = parser.outcome()
        else {
            panic!()
        };
        assert!(!summary.as_str().contains(&secret));
    }

    #[test]
    fn escape_sequences_and_control_characters_are_stripped() {
        let mut parser = ScriptParser::new(sanitizer());
        let parsed = parse_all(
            &mut parser,
            &[
                stdout(
                    "\u{1b}[1;31mred\u{1b}[0m\tand \u{1b}]0;title\u{7}plain\u{0}\u{7f}\u{9b}2Jend\r",
                ),
                stdout(
                    &AgentRecord::Message {
                        text: "a\u{1b}]52;c;aGVsbG8=\nb\rc\u{8}".into(),
                    }
                    .to_line()
                    .unwrap(),
                ),
            ],
        );
        assert_eq!(
            items(&parsed),
            vec![
                (ItemKind::Output, "red\tand plainend"),
                (ItemKind::Message, "a\nb\nc"),
            ]
        );
        assert!(matches!(
            text::displayable("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn long_lines_are_gathered_bounded_and_noted() {
        let mut parser = ScriptParser::new(sanitizer());
        let text = "x".repeat(MAX_LINE_BYTES * 2);
        let record = AgentRecord::Output { text: text.clone() }
            .to_line()
            .unwrap();
        let huge = "y".repeat(MAX_GATHERED_BYTES + MAX_LINE_BYTES);
        let stream = format!("{record}\n{huge}\n{}\n", "z".repeat(MAX_ITEM_BYTES + 1));
        let parsed = parse_stream(&mut parser, stream.as_bytes());
        let shown = items(&parsed);
        assert_eq!(shown.len(), 3);
        for ((kind, shown), (letter, full)) in shown.iter().zip([
            ('x', text.len()),
            ('y', huge.len()),
            ('z', MAX_ITEM_BYTES + 1),
        ]) {
            assert_eq!(*kind, ItemKind::Output);
            assert!(shown.len() <= MAX_ITEM_BYTES, "{}", shown.len());
            let (kept, note) = shown.rsplit_once("\u{2026} (").unwrap();
            assert!(kept.chars().all(|c| c == letter));
            let more: usize = note.strip_suffix(" bytes more)").unwrap().parse().unwrap();
            assert_eq!(kept.len() + more, full);
        }
    }

    #[test]
    fn pieces_of_stdout_and_stderr_lines_are_gathered_apart() {
        let mut parser = ScriptParser::new(sanitizer());
        let piece = |stream, text: &str, continues| OutputLine {
            stream,
            line: FramedLine {
                bytes: text.as_bytes().to_vec(),
                continues,
            },
        };
        let parsed = parse_all(
            &mut parser,
            &[
                piece(OutputStream::Stdout, "{\"type\":\"thought\",", true),
                piece(OutputStream::Stderr, "warn", true),
                piece(OutputStream::Stdout, "\"text\":\"joined\"}", false),
                piece(OutputStream::Stderr, "ing", false),
            ],
        );
        assert_eq!(
            items(&parsed),
            vec![(ItemKind::Thought, "joined"), (ItemKind::Error, "warning")]
        );
    }

    #[test]
    fn the_outcome_is_success_only_with_a_finish_record() {
        let outcome = |lines: &[&str]| {
            let mut parser = ScriptParser::new(sanitizer());
            for line in lines {
                parser.parse(&stdout(line));
            }
            parser.outcome()
        };
        let finish = r#"{"type":"finish","summary":"All done"}"#;
        let error = r#"{"type":"error","text":"too hard"}"#;
        assert_eq!(
            outcome(&[error, finish]),
            HarnessOutcome::Succeeded {
                summary: Some(sanitizer().sanitize("All done"))
            }
        );
        assert_eq!(
            outcome(&[r#"{"type":"finish","summary":"  "}"#]),
            HarnessOutcome::Succeeded { summary: None }
        );
        assert_eq!(
            outcome(&[r#"{"type":"error","text":"first"}"#, error, "raw"]),
            HarnessOutcome::Failed {
                reason: sanitizer().sanitize("the agent stopped without finishing: too hard")
            }
        );
        assert_eq!(
            outcome(&[r#"{"type":"message","text":"hi"}"#]),
            HarnessOutcome::Failed {
                reason: sanitizer().sanitize("the agent stopped without finishing")
            }
        );
        let mut parser = ScriptParser::new(sanitizer());
        parser.parse(&stderr(r#"{"type":"finish","summary":"not from stdout"}"#));
        assert!(matches!(parser.outcome(), HarnessOutcome::Failed { .. }));
    }

    #[test]
    fn final_usage_is_none() {
        let harness = ScriptHarness::new(ScenarioSource::Demo, 1.0);
        assert!(
            harness
                .final_usage(Path::new("/nonexistent"), &sanitizer())
                .unwrap()
                .is_none()
        );
    }
}
