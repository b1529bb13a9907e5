//! OpenHands as a stet harness: how its headless CLI starts in the sandbox ([`OpenHandsHarness`]) and
//! how its output reads into stet's terms: transcript items, the run's outcome, its usage.
//!
//! The harness stages the rendered instructions as `/outputs/task.md` and runs
//! `openhands --headless --json --override-with-envs -f /outputs/task.md` in `/workspace`: the brief
//! never travels on a command line (ADR-0018 row 4). The model and its endpoint go in the environment
//! (`LLM_MODEL`, `LLM_BASE_URL`, `LLM_API_KEY`, read by `--override-with-envs`): the endpoint is stet's
//! relay on the sandbox's loopback and the key a placeholder, since the gateway on the host holds the
//! real one (DESIGN §5 row 13); without a gateway the harness refuses to plan. The CLI
//! keeps its conversations under `$OPENHANDS_CONVERSATIONS_DIR` (by default `~/.openhands/conversations`,
//! which in the sandbox is a tmpfs that dies with the container); the harness points it at
//! `/outputs/conversations`, so the state file with the run's usage survives for the host to read.
//!
//! `openhands --headless --json` (1.16, SDK 1.21) prints one JSON object per line for each conversation
//! event, mixed with lines meant for a person: a Rich warning, ANSI status lines, a summary box,
//! "Goodbye!". Only a line that parses as a JSON object with a string `kind` is an event. The other
//! lines produce no transcript item: they repeat what the events already say, and they are not the
//! agent's words; they are logged at debug level. What the CLI writes to stderr is shown as it is.
//!
//! The process exits 0 whatever happened, so the outcome comes from the events: the run succeeded when
//! the agent called `finish` and no `ConversationErrorEvent` arrived. Its first `finish` is the one
//! that counts (the engine's [`crate::harness::AgentVoice`] keeps it; a later one is a warning). Usage never appears in the stream;
//! OpenHands writes its totals to `base_state.json` in the conversation's persistence directory, which
//! [`final_usage`] finds under a root it walks without following links.
//!
//! Apart from that one bounded read and debug logging, this module is pure. Every text goes the same way:
//! escape sequences and control characters are removed first (so a colour code can neither split a
//! token the sanitizer must see whole nor reach a terminal), then the sanitizer runs, then the result
//! is cut to a bound, so no cut can leave part of a secret unrecognised.

use std::collections::{BTreeMap, HashSet};
use std::ffi::CStr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::FileType;
use rustix::io::Errno;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::credential::SecretValue;
pub use crate::harness::HarnessOutcome;
use crate::harness::text;
use crate::harness::{
    Finish, Harness, HarnessError, HarnessLaunch, HarnessPlan, OutputParser, Parsed, StagedFile,
};
use crate::runtime::lines::FramedLine;
use crate::runtime::{OUTPUTS_MOUNT, OutputLine, OutputStream, SandboxProcess, WORKSPACE_MOUNT};
use crate::untrusted_tree::{self, Entry, FileError, Listing, RegularFile};
use stderr::{OpenHandsStderr, StderrRead};
use stet_protocol::event::{ItemKind, TranscriptItem, Usage};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// The OpenHands CLI version the dispatch image carries (`docker/dispatch/Dockerfile`) and this
/// module's parser is built against (PyPI `openhands`, with `openhands-sdk` 1.21).
pub const OPENHANDS_VERSION: &str = "1.16.0";

/// The harness's name in events, run records and pull requests.
const HARNESS: &str = "openhands";

/// The staged instruction file, at `/outputs/task.md` in the sandbox.
const TASK_FILE: &str = "task.md";

/// Where, under the outputs directory, OpenHands keeps its conversations.
const CONVERSATIONS_SUBDIR: &str = "conversations";

/// How the CLI starts: made non-dumpable first (`prctl(PR_SET_DUMPABLE, 0)`), so that its
/// `/proc/<pid>/fd` belongs to root and the agent's own commands, running as the same user, cannot
/// write forged events into its stdout or stderr; then the `openhands` console script runs in the
/// same process with the arguments that follow.
const NON_DUMPABLE_LAUNCH: &str = "import ctypes, runpy, shutil, sys\n\
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:\n    \
sys.exit('stet: prctl(PR_SET_DUMPABLE, 0) failed: ' + str(ctypes.get_errno()))\n\
cli = shutil.which('openhands')\n\
if cli is None:\n    sys.exit('stet: no openhands on PATH')\n\
sys.argv = [cli] + sys.argv[1:]\n\
runpy.run_path(cli, run_name='__main__')\n";

/// What keeps the CLI's start-up short and quiet in a sandbox with no network: no banner, its logs as
/// one JSON object per line (which [`OpenHandsStderr`] reads), and LiteLLM's bundled price map instead of
/// a download that cannot succeed.
const QUIET_ENV: &[(&str, &str)] = &[
    ("OPENHANDS_SUPPRESS_BANNER", "1"),
    ("LOG_JSON", "true"),
    ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
];

/// The longest text of one transcript item, in bytes, the "… (N bytes more)" note included.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;

/// The longest event line that is read; a longer one becomes a note saying it was skipped.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// The most JSON values (counted by their separators) an event line may hold to be parsed: a tree of
/// values costs tens of bytes each on the host, whatever few bytes each took on the line.
pub const MAX_EVENT_VALUES: usize = 128 * 1024;

/// The largest `base_state.json` that is read.
pub const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;

/// The most bytes of `base_state.json` files one search reads, all of them together: every file
/// read is held until the search ends, and one file hard-linked into many directories costs the
/// agent no disk.
pub const MAX_STATES_BYTES: u64 = MAX_STATE_BYTES;

/// The short rendering of an event or action kind this module does not know.
const MAX_RENDERING_BYTES: usize = 1024;

/// The reason of a failed outcome.
const MAX_REASON_BYTES: usize = 4 * 1024;

/// How deep under the given root a conversation directory is looked for.
const MAX_SEARCH_DEPTH: usize = 6;

/// How many directory entries the search lists before giving up.
const MAX_SEARCH_ENTRIES: usize = 50_000;

/// The file in which OpenHands persists a conversation's state, its usage statistics included.
const BASE_STATE: &CStr = c"base_state.json";

/// What can go wrong reading OpenHands' persisted state.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum OpenHandsError {
    #[error("reading {path:?}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path:?} is {size} bytes; an OpenHands state file is read only up to {limit} bytes")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },

    #[error("{path:?} is not a usable OpenHands state file: {problem}")]
    Malformed { path: PathBuf, problem: String },

    #[error(
        "{root:?} holds more than {limit} entries; stopped looking for OpenHands' base_state.json"
    )]
    TooManyEntries { root: PathBuf, limit: usize },

    #[error(
        "the OpenHands state files under {root:?} add up to more than {limit} bytes; stopped reading them"
    )]
    StatesTooLarge { root: PathBuf, limit: u64 },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, OpenHandsError>;

/// What the OpenHands harness is told by configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHandsSettings {
    /// The model, as OpenHands (LiteLLM) names it, e.g. `openai/gpt-4.1`.
    pub model: String,
    /// The OpenHands CLI version the dispatch image carries.
    pub version: String,
}

impl OpenHandsSettings {
    /// Settings for `model` and the pinned [`OPENHANDS_VERSION`].
    pub fn new(model: impl Into<String>) -> OpenHandsSettings {
        OpenHandsSettings {
            model: model.into(),
            version: OPENHANDS_VERSION.to_owned(),
        }
    }
}

/// Runs the OpenHands CLI headless in the sandbox.
#[derive(Debug)]
pub struct OpenHandsHarness {
    settings: OpenHandsSettings,
}

impl OpenHandsHarness {
    /// The harness, run with `settings`.
    pub fn new(settings: OpenHandsSettings) -> OpenHandsHarness {
        OpenHandsHarness { settings }
    }

    fn plan_error(detail: String) -> HarnessError {
        HarnessError::Plan {
            harness: HARNESS,
            detail,
        }
    }
}

impl Harness for OpenHandsHarness {
    fn name(&self) -> &'static str {
        HARNESS
    }

    fn version(&self) -> Option<String> {
        Some(self.settings.version.clone())
    }

    fn model(&self) -> Option<String> {
        Some(self.settings.model.clone())
    }

    fn plan(&self, launch: &HarnessLaunch<'_>) -> crate::harness::Result<HarnessPlan> {
        let model = self.settings.model.trim();
        if model.is_empty() {
            return Err(OpenHandsHarness::plan_error(
                "no model is configured: set harness.openhands.model in stet.toml".to_owned(),
            ));
        }
        let Some(access) = launch.model else {
            return Err(OpenHandsHarness::plan_error(
                "OpenHands reaches its model only through stet's gateway, which keeps the key on the host: set [model] base_url (and api_key_env) in stet.toml".to_owned(),
            ));
        };
        let plain = |value: &str| SecretValue::new(value.to_owned());
        let mut env = BTreeMap::new();
        env.insert("LLM_MODEL".to_owned(), plain(model));
        env.insert("LLM_BASE_URL".to_owned(), plain(&access.base_url));
        env.insert("LLM_API_KEY".to_owned(), plain(&access.placeholder_key));
        env.insert("OPENHANDS_WORK_DIR".to_owned(), plain(WORKSPACE_MOUNT));
        env.insert(
            "OPENHANDS_CONVERSATIONS_DIR".to_owned(),
            SecretValue::new(format!("{OUTPUTS_MOUNT}/{CONVERSATIONS_SUBDIR}")),
        );
        for (name, value) in QUIET_ENV {
            env.insert((*name).to_owned(), plain(value));
        }
        let task = format!("{OUTPUTS_MOUNT}/{TASK_FILE}");
        let argv = [
            "python3",
            "-c",
            NON_DUMPABLE_LAUNCH,
            "--headless",
            "--json",
            "--override-with-envs",
            "-f",
            &task,
        ]
        .map(str::to_owned)
        .to_vec();
        Ok(HarnessPlan {
            files: vec![StagedFile {
                name: TASK_FILE.to_owned(),
                contents: launch.instructions.as_bytes().to_vec(),
            }],
            processes: vec![SandboxProcess {
                argv,
                env,
                workdir: WORKSPACE_MOUNT.to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(OpenHandsOutput::new(sanitizer))
    }

    fn final_usage(
        &self,
        outputs: &Path,
        sanitizer: &Arc<TokenSanitizer>,
    ) -> crate::harness::Result<Option<Usage>> {
        final_usage(outputs, sanitizer).map_err(|error| HarnessError::Usage {
            harness: HARNESS,
            detail: error.to_string(),
        })
    }
}

/// One OpenHands run's output as the engine reads it: stdout through [`OpenHandsParser`], stderr
/// through [`OpenHandsStderr`] (its start-up lines as one item, shown before the first event; its
/// network failures as one warning).
#[derive(Debug)]
pub struct OpenHandsOutput {
    parser: OpenHandsParser,
    stderr: OpenHandsStderr,
}

impl OpenHandsOutput {
    /// A reader of both streams, redacting with `sanitizer`.
    pub fn new(sanitizer: Arc<TokenSanitizer>) -> OpenHandsOutput {
        OpenHandsOutput {
            parser: OpenHandsParser::new(Arc::clone(&sanitizer)),
            stderr: OpenHandsStderr::new(sanitizer),
        }
    }
}

impl OutputParser for OpenHandsOutput {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        match line.stream {
            OutputStream::Stdout => {
                let items = self.parser.parse_line(&line.line);
                let startup = if items.is_empty() {
                    None
                } else {
                    self.stderr.end_startup()
                };
                let read = items.into_iter().map(|item| match item.item {
                    ItemKind::Finish => Parsed::Finish(Finish {
                        summary: self.parser.finish_summary(),
                        shown: item.text,
                    }),
                    _ => Parsed::Item(item),
                });
                startup.map(Parsed::Item).into_iter().chain(read).collect()
            }
            OutputStream::Stderr => match self.stderr.read(&line.line) {
                StderrRead::Nothing => Vec::new(),
                StderrRead::Item(item) => vec![Parsed::Item(item)],
                StderrRead::Recorded(item) => vec![Parsed::RecordOnly(item)],
                StderrRead::Warning(message) => vec![Parsed::Warning(message)],
            },
        }
    }

    fn finish(&mut self) -> Vec<Parsed> {
        self.stderr
            .end_startup()
            .map(Parsed::Item)
            .into_iter()
            .collect()
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        self.parser.failure(finished)
    }
}

/// Reads OpenHands' stdout line by line into transcript items and remembers what decides the outcome.
#[derive(Debug)]
pub struct OpenHandsParser {
    sanitizer: Arc<TokenSanitizer>,
    long_line: LongLine,
    /// The message of the latest `FinishAction`, as the agent wrote it: its observation, which only
    /// echoes it, is left out.
    finish_message: Option<String>,
    /// The text of the agent's last message, quoted when the run fails without a finish.
    last_agent_message: Option<String>,
    /// `code: detail` of the last `ConversationErrorEvent`.
    conversation_error: Option<String>,
}

/// A line longer than the framer's piece size, while its pieces arrive.
#[derive(Debug, Default)]
enum LongLine {
    #[default]
    None,
    /// The pieces so far of a line that may be an event.
    Event(Vec<u8>),
    /// A line that cannot be an event; its pieces are passed over.
    NotEvent,
    /// An event line past [`MAX_EVENT_BYTES`]; how long it is so far.
    Oversized(usize),
}

/// One item before sanitizing: its kind, its text and the bound on that text.
#[derive(Debug)]
struct Draft {
    item: ItemKind,
    text: String,
    limit: usize,
}

impl Draft {
    fn new(item: ItemKind, text: String) -> Draft {
        Draft {
            item,
            text,
            limit: MAX_ITEM_BYTES,
        }
    }

    fn short(item: ItemKind, text: String) -> Draft {
        Draft {
            item,
            text,
            limit: MAX_RENDERING_BYTES,
        }
    }
}

impl OpenHandsParser {
    pub(crate) fn new(sanitizer: Arc<TokenSanitizer>) -> OpenHandsParser {
        OpenHandsParser {
            sanitizer,
            long_line: LongLine::None,
            finish_message: None,
            last_agent_message: None,
            conversation_error: None,
        }
    }

    /// One framed line of OpenHands' stdout (bytes as printed: possibly not UTF-8, possibly with ANSI
    /// codes). A line cut into pieces by the framer is gathered up to [`MAX_EVENT_BYTES`] and read when
    /// its last piece arrives.
    pub fn parse_line(&mut self, line: &FramedLine) -> Vec<TranscriptItem> {
        let piece = line.bytes.as_slice();
        match std::mem::take(&mut self.long_line) {
            LongLine::None if !line.continues => self.parse_event(piece),
            LongLine::None => {
                self.long_line = if may_be_event(piece) {
                    LongLine::Event(piece.to_vec())
                } else {
                    self.log_skipped(piece);
                    LongLine::NotEvent
                };
                Vec::new()
            }
            LongLine::Event(mut bytes) => {
                let len = bytes.len() + piece.len();
                if len > MAX_EVENT_BYTES {
                    return self.oversized(len, line.continues);
                }
                bytes.extend_from_slice(piece);
                if line.continues {
                    self.long_line = LongLine::Event(bytes);
                    return Vec::new();
                }
                self.parse_event(&bytes)
            }
            LongLine::Oversized(len) => self.oversized(len + piece.len(), line.continues),
            LongLine::NotEvent => {
                if line.continues {
                    self.long_line = LongLine::NotEvent;
                }
                Vec::new()
            }
        }
    }

    /// Why the run failed, from the events read so far, given whether the agent called `finish`
    /// (`finished`): a `ConversationErrorEvent` fails it whatever else came; without a finish it
    /// failed too, its last message quoted. `None`: it did not fail.
    pub fn failure(&self, finished: bool) -> Option<SanitizedText> {
        if let Some(error) = &self.conversation_error {
            return Some(self.text(
                &format!("the OpenHands conversation stopped on an error: {error}"),
                MAX_REASON_BYTES,
            ));
        }
        if finished {
            return None;
        }
        let reason = match &self.last_agent_message {
            Some(message) => {
                format!("the agent stopped without calling finish; its last message: {message}")
            }
            None => "the agent stopped without calling finish".to_owned(),
        };
        Some(self.text(&reason, MAX_REASON_BYTES))
    }

    /// The latest `FinishAction`'s message as the run's summary: `None` when it said nothing.
    pub fn finish_summary(&self) -> Option<SanitizedText> {
        self.finish_message
            .as_deref()
            .filter(|message| !message.trim().is_empty())
            .map(|message| self.text(message, MAX_ITEM_BYTES))
    }

    fn oversized(&mut self, len: usize, continues: bool) -> Vec<TranscriptItem> {
        if continues {
            self.long_line = LongLine::Oversized(len);
            return Vec::new();
        }
        let note = format!(
            "an OpenHands event line of {len} bytes was not read (the limit is {MAX_EVENT_BYTES} bytes)"
        );
        vec![self.item(Draft::new(ItemKind::Other, note))]
    }

    fn parse_event(&mut self, line: &[u8]) -> Vec<TranscriptItem> {
        let values = line
            .iter()
            .filter(|byte| matches!(byte, b',' | b'[' | b'{' | b':'))
            .count();
        if values > MAX_EVENT_VALUES && may_be_event(line) {
            let note = format!(
                "an OpenHands event line of {values} values was not read (the limit is {MAX_EVENT_VALUES})"
            );
            return vec![self.item(Draft::new(ItemKind::Other, note))];
        }
        let Some(event) = event_object(line) else {
            self.log_skipped(line);
            return Vec::new();
        };
        let Some(kind) = event.get("kind").and_then(Value::as_str) else {
            self.log_skipped(line);
            return Vec::new();
        };
        self.drafts(kind, &event)
            .into_iter()
            .map(|draft| self.item(draft))
            .collect()
    }

    /// Logs, sanitized and bounded, a stdout line (or the first piece of one) that is no event.
    fn log_skipped(&self, line: &[u8]) {
        if line.trim_ascii().is_empty() || !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let text = self.text(&String::from_utf8_lossy(line), MAX_RENDERING_BYTES);
        tracing::debug!(line = %text, "OpenHands stdout line that is no event");
    }

    fn item(&self, draft: Draft) -> TranscriptItem {
        TranscriptItem {
            item: draft.item,
            text: self.text(&draft.text, draft.limit),
        }
    }

    fn text(&self, text: &str, limit: usize) -> SanitizedText {
        bounded_text(&self.sanitizer, text, limit)
    }

    fn drafts(&mut self, kind: &str, event: &Map<String, Value>) -> Vec<Draft> {
        match kind {
            "MessageEvent" => self.message(event),
            "ActionEvent" => self.action_event(event),
            "ObservationEvent" => self.observation(event).into_iter().collect(),
            "AgentErrorEvent" => {
                let error = or_placeholder(string(event, "error"), "(no detail)");
                let text = match string(event, "tool_name") {
                    "" => error,
                    tool => format!("{tool}: {error}"),
                };
                vec![Draft::new(ItemKind::Error, text)]
            }
            "UserRejectObservation" => {
                let reason = or_placeholder(string(event, "rejection_reason"), "no reason given");
                vec![Draft::new(
                    ItemKind::Error,
                    format!("action rejected: {reason}"),
                )]
            }
            "ConversationErrorEvent" => {
                let detail = or_placeholder(string(event, "detail"), "(no detail)");
                let error = match string(event, "code") {
                    "" => detail,
                    code => format!("{code}: {detail}"),
                };
                self.conversation_error = Some(error.clone());
                vec![Draft::new(ItemKind::Error, error)]
            }
            _ => vec![Draft::short(ItemKind::Other, rendering(kind, event))],
        }
    }

    /// The agent's messages are [`ItemKind::Message`]; anyone else's (the task stet sent is the user's
    /// message) is [`ItemKind::Other`] named by its source, so it is never taken for the agent's words.
    fn message(&mut self, event: &Map<String, Value>) -> Vec<Draft> {
        let message = event.get("llm_message");
        let text = message
            .and_then(|m| m.get("content"))
            .map(content_text)
            .unwrap_or_default();
        match string(event, "source") {
            "agent" => {
                let mut drafts = Vec::new();
                let reasoning = message
                    .and_then(|m| m.get("reasoning_content"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !reasoning.trim().is_empty() {
                    drafts.push(Draft::new(ItemKind::Thought, reasoning.to_owned()));
                }
                if !text.trim().is_empty() {
                    self.last_agent_message = Some(text.clone());
                }
                drafts.push(Draft::new(
                    ItemKind::Message,
                    or_placeholder(text, "(an empty message)"),
                ));
                drafts
            }
            source => {
                let source = if source.is_empty() { "unknown" } else { source };
                vec![Draft::new(ItemKind::Other, format!("{source}: {text}"))]
            }
        }
    }

    /// The agent's reasoning (when it gave any) as a thought, then the action it took.
    fn action_event(&mut self, event: &Map<String, Value>) -> Vec<Draft> {
        let mut drafts = Vec::new();
        let mut thought: Vec<&str> = Vec::new();
        if let Some(reasoning) = event.get("reasoning_content").and_then(Value::as_str) {
            thought.push(reasoning);
        }
        if let Some(Value::Array(blocks)) = event.get("thought") {
            thought.extend(
                blocks
                    .iter()
                    .filter_map(|block| block.get("text").and_then(Value::as_str)),
            );
        }
        thought.retain(|text| !text.trim().is_empty());
        if !thought.is_empty() {
            drafts.push(Draft::new(ItemKind::Thought, thought.join("\n")));
        }
        match event.get("action") {
            Some(Value::Object(action)) => drafts.push(self.action(action)),
            _ => {
                let tool = or_placeholder(string(event, "tool_name"), "a tool call");
                drafts.push(Draft::new(
                    ItemKind::Command,
                    format!("{tool} (not executed)"),
                ));
            }
        }
        drafts
    }

    fn action(&mut self, action: &Map<String, Value>) -> Draft {
        match string(action, "kind") {
            "TerminalAction" => {
                let command = string(action, "command");
                let text = if action.get("is_input").and_then(Value::as_bool) == Some(true) {
                    format!("input: {command}")
                } else {
                    or_placeholder(command, "(an empty command)")
                };
                Draft::new(ItemKind::Command, text)
            }
            "FileEditorAction" => Draft::new(ItemKind::Command, file_editor_summary(action)),
            "FinishAction" => {
                let message = string(action, "message");
                self.finish_message = Some(message.to_owned());
                Draft::new(ItemKind::Finish, or_placeholder(message, "(no message)"))
            }
            "ThinkAction" => Draft::new(
                ItemKind::Thought,
                or_placeholder(string(action, "thought"), "(an empty thought)"),
            ),
            "" => Draft::short(ItemKind::Command, rendering("an action", action)),
            kind => Draft::short(ItemKind::Command, rendering(kind, action)),
        }
    }

    /// What a tool returned: its content, a terminal's exit status, as an error when the tool says it
    /// failed. The finish tool's result only echoes the finish message and is left out.
    fn observation(&self, event: &Map<String, Value>) -> Option<Draft> {
        let Some(Value::Object(observation)) = event.get("observation") else {
            return Some(Draft::short(
                ItemKind::Other,
                rendering("ObservationEvent", event),
            ));
        };
        let kind = string(observation, "kind");
        let content = observation
            .get("content")
            .map(content_text)
            .unwrap_or_default();
        if kind == "FinishObservation" && self.finish_message.as_deref() == Some(content.as_str()) {
            return None;
        }
        let text = if kind == "TerminalObservation" {
            with_exit_status(content, observation)
        } else {
            content
        };
        let item = if observation.get("is_error").and_then(Value::as_bool) == Some(true) {
            ItemKind::Error
        } else {
            ItemKind::Output
        };
        let tool = match string(event, "tool_name") {
            "" => kind,
            tool => tool,
        };
        Some(Draft::new(
            item,
            or_placeholder(text, &format!("({tool} returned nothing)")),
        ))
    }
}

/// Whether a line's first piece can start an event (a JSON object).
fn may_be_event(bytes: &[u8]) -> bool {
    bytes.trim_ascii_start().starts_with(b"{")
}

/// The JSON object a line holds, if it holds one. Bytes that are not UTF-8 inside strings (Python may
/// write lone surrogates as such) become U+FFFD rather than costing the event.
fn event_object(line: &[u8]) -> Option<Map<String, Value>> {
    let line = line.trim_ascii();
    if !line.starts_with(b"{") {
        return None;
    }
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(value) => value,
        Err(_) if std::str::from_utf8(line).is_err() => {
            serde_json::from_str::<Value>(&String::from_utf8_lossy(line)).ok()?
        }
        Err(_) => return None,
    };
    match value {
        Value::Object(object) => Some(object),
        _ => None,
    }
}

/// A string field, or "" when it is missing or not a string.
fn string<'a>(object: &'a Map<String, Value>, field: &str) -> &'a str {
    object.get(field).and_then(Value::as_str).unwrap_or("")
}

fn or_placeholder(text: impl Into<String>, placeholder: &str) -> String {
    let text = text.into();
    if text.trim().is_empty() {
        placeholder.to_owned()
    } else {
        text
    }
}

/// The text of an OpenHands content list (`[{type: text, text}, {type: image, image_urls}]`), or of a
/// plain string.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => block.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("image") => {
                    let urls = block
                        .get("image_urls")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    Some(format!("[image: {urls} URLs]"))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A terminal's output followed by `[exit code N]`, or `[timed out]`.
fn with_exit_status(output: String, observation: &Map<String, Value>) -> String {
    let status = if observation.get("timeout").and_then(Value::as_bool) == Some(true) {
        Some("[timed out]".to_owned())
    } else {
        observation
            .get("exit_code")
            .and_then(Value::as_i64)
            .map(|code| format!("[exit code {code}]"))
    };
    let output = output.trim_end_matches(['\n', '\r']);
    match status {
        None => output.to_owned(),
        Some(status) if output.is_empty() => status,
        Some(status) => format!("{output}\n{status}"),
    }
}

/// One line saying what a file-editor call does, without the file contents it carries.
fn file_editor_summary(action: &Map<String, Value>) -> String {
    let path = or_placeholder(string(action, "path"), "(no path)");
    let lines = |field: &str| plural(string(action, field).lines().count(), "line");
    match string(action, "command") {
        "view" => match action.get("view_range").and_then(Value::as_array) {
            Some(range) if range.len() == 2 => {
                let bound = |value: &Value| match value.as_i64() {
                    Some(-1) => "end".to_owned(),
                    Some(line) => line.to_string(),
                    None => "?".to_owned(),
                };
                format!(
                    "view {path} lines {}-{}",
                    bound(&range[0]),
                    bound(&range[1])
                )
            }
            _ => format!("view {path}"),
        },
        "create" => format!("create {path} ({})", lines("file_text")),
        "str_replace" => format!(
            "edit {path}: replace {} with {}",
            lines("old_str"),
            lines("new_str")
        ),
        "insert" => {
            let after = action
                .get("insert_line")
                .and_then(Value::as_u64)
                .map_or_else(|| "?".to_owned(), |line| line.to_string());
            format!(
                "edit {path}: insert {} after line {after}",
                lines("new_str")
            )
        }
        "undo_edit" => format!("edit {path}: undo the last edit"),
        "" => format!("edit {path}"),
        command => format!("edit {path}: {command}"),
    }
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// `Kind {fields as compact JSON}`, for events and actions this module has no mapping for; the
/// caller bounds it to [`MAX_RENDERING_BYTES`].
fn rendering(kind: &str, object: &Map<String, Value>) -> String {
    let fields: Map<String, Value> = object
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "kind" | "id" | "timestamp"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if fields.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind} {}", Value::Object(fields))
    }
}

/// `text` made safe to show: escape sequences and control characters removed (newlines and tabs
/// kept, a lone carriage return read as a newline), secrets masked, and cut to `limit` bytes with a
/// note saying how many more there were.
fn bounded_text(sanitizer: &Arc<TokenSanitizer>, text: &str, limit: usize) -> SanitizedText {
    bounded_text_of(sanitizer, text, limit, 0)
}

/// [`bounded_text`] of the start of a longer text: `unread` more bytes followed `text` and were never
/// read; the note counts them too.
fn bounded_text_of(
    sanitizer: &Arc<TokenSanitizer>,
    text: &str,
    limit: usize,
    unread: usize,
) -> SanitizedText {
    text::bounded_text(sanitizer, text, limit, unread)
}

/// The final usage OpenHands recorded for the run, from the `base_state.json` files under `outputs`
/// (its conversations live in `<persistence dir>/<conversation id>/base_state.json`).
///
/// The search goes at most six directories deep, lists at most 50 000 entries, reads at most
/// [`MAX_STATES_BYTES`] of state files in all (however many links lead to one), follows no symbolic
/// link and reads only regular files. A conversation's directory is not searched further: the
/// sub-agent conversations OpenHands keeps inside it (`subagents/<id>/`) are already counted in the
/// parent's statistics, as `task:<id>` or `delegate:<id>` entries. Within a file, every entry of
/// `stats.usage_to_metrics` is added up (the agent's model, the condenser's, the sub-agents'), as
/// OpenHands' own combined metrics do; separate conversations found side by side are added up too.
/// `input_tokens` are the prompt tokens (cache reads included, as the providers count them),
/// `cached_tokens` the cache reads; `cost_usd` and `total_cost_usd` are both the whole run's cost.
///
/// `Ok(None)` when no state file is found or none records any usage.
pub fn final_usage(outputs: &Path, sanitizer: &Arc<TokenSanitizer>) -> Result<Option<Usage>> {
    let root = match untrusted_tree::open_root(outputs) {
        Ok(root) => root,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(read_error(outputs, errno)),
    };
    let mut search = StateSearch {
        root: outputs,
        listed: 0,
        read: 0,
        found: Vec::new(),
    };
    search.directory(root, outputs, 0)?;
    let mut totals = Totals::default();
    for (path, bytes) in &search.found {
        totals.add(path, bytes)?;
    }
    Ok(totals.into_usage(sanitizer))
}

fn read_error(path: &Path, errno: Errno) -> OpenHandsError {
    OpenHandsError::Read {
        path: path.to_owned(),
        source: errno.into(),
    }
}

/// A walk for `base_state.json` files, each directory opened relative to its parent without
/// following links.
struct StateSearch<'a> {
    root: &'a Path,
    listed: usize,
    /// The bytes of state files read so far, at most [`MAX_STATES_BYTES`].
    read: u64,
    /// Each state file found, with its contents.
    found: Vec<(PathBuf, Vec<u8>)>,
}

impl StateSearch<'_> {
    fn directory(&mut self, directory: OwnedFd, path: &Path, depth: usize) -> Result<()> {
        let mut listing = Listing::new(directory).map_err(|errno| read_error(path, errno))?;
        let mut entries = Vec::new();
        for entry in listing.by_ref() {
            let entry = entry.map_err(|errno| read_error(path, errno))?;
            self.listed += 1;
            if self.listed > MAX_SEARCH_ENTRIES {
                return Err(OpenHandsError::TooManyEntries {
                    root: self.root.to_owned(),
                    limit: MAX_SEARCH_ENTRIES,
                });
            }
            entries.push(entry);
        }
        let dirfd = listing.fd().map_err(|errno| read_error(path, errno))?;
        let mut subdirectories = Vec::new();
        for Entry { name, file_type } in entries {
            let child = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let file_type = untrusted_tree::entry_type(dirfd, &name, file_type)
                .map_err(|errno| read_error(&child, errno))?;
            match file_type {
                FileType::RegularFile if name.as_c_str() == BASE_STATE => {
                    let bytes = self.read_state(dirfd, &child)?;
                    self.found.push((child, bytes));
                    return Ok(());
                }
                FileType::Directory => subdirectories.push((name, child)),
                _ => {}
            }
        }
        if depth >= MAX_SEARCH_DEPTH {
            return Ok(());
        }
        subdirectories.sort();
        for (name, child) in subdirectories {
            let opened = untrusted_tree::open_directory(dirfd, &name)
                .map_err(|errno| read_error(&child, errno))?;
            self.directory(opened, &child, depth + 1)?;
        }
        Ok(())
    }

    /// Reads a state file through a descriptor opened without following links and checked to be a
    /// regular file of bounded size, within what is left of [`MAX_STATES_BYTES`].
    fn read_state(&mut self, dirfd: BorrowedFd<'_>, path: &Path) -> Result<Vec<u8>> {
        let left = MAX_STATES_BYTES.saturating_sub(self.read);
        let limit = left.min(MAX_STATE_BYTES);
        let bytes = untrusted_tree::open_file(dirfd, BASE_STATE, limit)
            .and_then(RegularFile::read)
            .map_err(|error| match error {
                FileError::Open(errno) | FileError::Stat(errno) => read_error(path, errno),
                FileError::NotRegular => OpenHandsError::Malformed {
                    path: path.to_owned(),
                    problem: "it is not a regular file".to_owned(),
                },
                FileError::TooLarge { .. } if limit < MAX_STATE_BYTES => {
                    OpenHandsError::StatesTooLarge {
                        root: self.root.to_owned(),
                        limit: MAX_STATES_BYTES,
                    }
                }
                FileError::TooLarge { size, limit } => OpenHandsError::TooLarge {
                    path: path.to_owned(),
                    size,
                    limit,
                },
                FileError::Read(source) => OpenHandsError::Read {
                    path: path.to_owned(),
                    source,
                },
            })?;
        self.read += u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        Ok(bytes)
    }
}

/// The part of `base_state.json` this module reads; every other field is passed over unread.
#[derive(Debug, Deserialize)]
struct BaseState {
    #[serde(default)]
    stats: Option<Stats>,
}

#[derive(Debug, Deserialize)]
struct Stats {
    #[serde(default)]
    usage_to_metrics: Option<Totals>,
}

#[derive(Debug, Deserialize)]
struct Metrics {
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    accumulated_cost: Option<f64>,
    #[serde(default)]
    accumulated_token_usage: Option<TokenUsage>,
}

#[derive(Debug, Default, Deserialize)]
struct TokenUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    cache_read_tokens: u64,
}

/// Usage added up over every metrics entry of every state file, as each entry is read: no entry is
/// kept, so a file naming millions of usages costs no more memory than one naming a few, and the
/// models are kept only as far as they are shown ([`MAX_RENDERING_BYTES`]).
#[derive(Debug, Default)]
struct Totals {
    entries: usize,
    /// The models named, in the order first named, as far as they are shown.
    models: Vec<String>,
    /// The same models, to look one up in constant time.
    named: HashSet<String>,
    /// The bytes of the models kept.
    model_bytes: usize,
    input: u64,
    output: u64,
    cached: u64,
    cost: f64,
    /// The first usage whose cost is not a non-negative number.
    bad_cost: Option<String>,
}

/// `stats.usage_to_metrics` read entry by entry into [`Totals`].
impl<'de> Deserialize<'de> for Totals {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Totals, D::Error> {
        struct Fold;
        impl<'de> serde::de::Visitor<'de> for Fold {
            type Value = Totals;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a map of usage ids to metrics")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Totals, A::Error> {
                let mut totals = Totals::default();
                while let Some((usage_id, metrics)) = map.next_entry::<String, Metrics>()? {
                    totals.entry(usage_id, metrics);
                }
                Ok(totals)
            }
        }
        deserializer.deserialize_map(Fold)
    }
}

impl Totals {
    fn entry(&mut self, usage_id: String, metrics: Metrics) {
        let cost = metrics.accumulated_cost.unwrap_or(0.0);
        if !cost.is_finite() || cost < 0.0 {
            self.bad_cost.get_or_insert(usage_id);
            return;
        }
        let tokens = metrics.accumulated_token_usage.unwrap_or_default();
        self.entries += 1;
        self.input = self.input.saturating_add(tokens.prompt_tokens);
        self.output = self.output.saturating_add(tokens.completion_tokens);
        self.cached = self.cached.saturating_add(tokens.cache_read_tokens);
        self.cost += cost;
        // "default" is the SDK's name for metrics with no model, such as a sub-agent's combined ones.
        if let Some(model) = metrics.model_name {
            self.name(model);
        }
    }

    fn name(&mut self, model: String) {
        if model.is_empty()
            || model == "default"
            || self.model_bytes > MAX_RENDERING_BYTES
            || self.named.contains(&model)
        {
            return;
        }
        self.model_bytes += model.len() + 2;
        self.named.insert(model.clone());
        self.models.push(model);
    }

    fn add(&mut self, path: &Path, bytes: &[u8]) -> Result<()> {
        let malformed = |problem: String| OpenHandsError::Malformed {
            path: path.to_owned(),
            problem,
        };
        // The problem names the place, not serde's message: that one can quote the file's contents.
        let state: BaseState = serde_json::from_slice(bytes).map_err(|error| {
            let what = match error.classify() {
                serde_json::error::Category::Io => "it could not be read",
                serde_json::error::Category::Syntax => "it is not valid JSON",
                serde_json::error::Category::Eof => "it ends early",
                serde_json::error::Category::Data => "a usage field has the wrong type or value",
            };
            malformed(format!(
                "{what} (line {}, column {})",
                error.line(),
                error.column()
            ))
        })?;
        let file = state
            .stats
            .and_then(|stats| stats.usage_to_metrics)
            .unwrap_or_default();
        if let Some(usage_id) = file.bad_cost {
            return Err(malformed(format!(
                "the accumulated cost of usage {usage_id:?} is not a non-negative number"
            )));
        }
        self.entries += file.entries;
        self.input = self.input.saturating_add(file.input);
        self.output = self.output.saturating_add(file.output);
        self.cached = self.cached.saturating_add(file.cached);
        self.cost += file.cost;
        for model in file.models {
            self.name(model);
        }
        Ok(())
    }

    fn into_usage(self, sanitizer: &Arc<TokenSanitizer>) -> Option<Usage> {
        if self.entries == 0 {
            return None;
        }
        let model = if self.models.is_empty() {
            "unknown".to_owned()
        } else {
            self.models.join(", ")
        };
        Some(Usage {
            model: bounded_text(sanitizer, &model, MAX_RENDERING_BYTES),
            input_tokens: self.input,
            output_tokens: self.output,
            cached_tokens: self.cached,
            cost_usd: Some(self.cost),
            total_cost_usd: self.cost,
            latency_ms: None,
        })
    }
}

mod stderr;
#[cfg(test)]
mod tests;
