//! How OpenHands' output reads into stet's terms: its stdout events into transcript items and what
//! decides the outcome ([`OpenHandsParser`]), both streams together as the engine reads them
//! ([`OpenHandsOutput`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::harness::{Finish, OutputParser, Parsed};
use crate::runtime::lines::FramedLine;
use crate::runtime::{OutputLine, OutputStream};
use stet_protocol::event::{ItemKind, TranscriptItem};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

use super::stderr::{OpenHandsStderr, StderrRead};
use super::{
    MAX_EVENT_BYTES, MAX_EVENT_VALUES, MAX_ITEM_BYTES, MAX_REASON_BYTES, MAX_RENDERING_BYTES,
    bounded_text,
};

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
