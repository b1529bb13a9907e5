//! How `codex exec --json` reads into stet's terms: each stdout line's event into transcript items,
//! usage and the finish ([`CodexOutput`]), stderr lines as they are; what decides the outcome.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::gateway::usage::UsageReport;
use crate::harness::json_lines::{
    Gathered, MAX_EVENT_BYTES, MAX_EVENT_VALUES, Unread, event_of, or_placeholder, read_object,
    rendering, string,
};
use crate::harness::{Finish, OutputParser, Parsed, text};
use crate::runtime::{OutputLine, OutputStream};
use stet_protocol::event::{ItemKind, TranscriptItem};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

use super::{MAX_ITEM_BYTES, MAX_RENDERING_BYTES};

/// The most item ids remembered as started (so a completed command is not shown twice); past it
/// the set starts again, and at worst a command's line shows twice.
const MAX_STARTED_ITEMS: usize = 4096;

/// The fields of a Codex event that identify it and say nothing to a reader of its rendering.
const IDENTIFIERS: &[&str] = &["id"];

/// One Codex run's output as the engine reads it.
#[derive(Debug)]
pub struct CodexOutput {
    sanitizer: Arc<TokenSanitizer>,
    /// The model the usage is attributed to (Codex does not name it in its events).
    model: String,
    stdout: Gathered,
    stderr: Gathered,
    /// Ids of the items whose `item.started` was shown.
    started: HashSet<String>,
    /// The text of the agent's last message: the summary when the turn completes.
    last_message: Option<String>,
    /// The running usage total of the last `turn.completed`.
    total: Totals,
    /// A turn completed.
    completed: bool,
    /// The error of the last `turn.failed`.
    failed: Option<String>,
    /// The message of the last top-level `error` event (a thread's fatal error).
    error: Option<String>,
}

/// Codex's usage totals as it reports them (`input` includes `cached`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    input: u64,
    cached: u64,
    output: u64,
}

impl CodexOutput {
    /// A reader of both streams, redacting with `sanitizer`; usage is attributed to `model` (or to
    /// "codex" when it is not known, as in a replay).
    pub fn new(sanitizer: Arc<TokenSanitizer>, model: Option<String>) -> CodexOutput {
        CodexOutput {
            sanitizer,
            model: model.unwrap_or_else(|| "codex".to_owned()),
            stdout: Gathered::new(MAX_EVENT_BYTES),
            stderr: Gathered::new(MAX_EVENT_BYTES),
            started: HashSet::new(),
            last_message: None,
            total: Totals::default(),
            completed: false,
            failed: None,
            error: None,
        }
    }

    fn text(&self, text: &str, limit: usize) -> SanitizedText {
        text::bounded_text(&self.sanitizer, text, limit, 0)
    }

    fn item(&self, item: ItemKind, text: &str) -> Parsed {
        Parsed::Item(TranscriptItem {
            item,
            text: self.text(text, MAX_ITEM_BYTES),
        })
    }

    fn note(&self, text: &str) -> Parsed {
        Parsed::Item(TranscriptItem {
            item: ItemKind::Other,
            text: self.text(text, MAX_RENDERING_BYTES),
        })
    }

    fn stdout_line(&mut self, line: &[u8], passed_over: usize) -> Vec<Parsed> {
        let read = read_object(line, passed_over, MAX_EVENT_VALUES);
        match event_of(read, "Codex", MAX_EVENT_BYTES, MAX_EVENT_VALUES) {
            Ok(None) => Vec::new(),
            Err(Unread::Note(text)) => vec![self.note(&text)],
            Err(Unread::Printed(text)) => vec![self.item(ItemKind::Other, &text)],
            Ok(Some(event)) => match event.get("type").and_then(Value::as_str) {
                Some(kind) => self.event(kind, &event),
                None => vec![self.note(&rendering("an event without a type", &event, IDENTIFIERS))],
            },
        }
    }

    fn event(&mut self, kind: &str, event: &Map<String, Value>) -> Vec<Parsed> {
        match kind {
            "thread.started" => {
                let id = or_placeholder(string(event, "thread_id"), "(no id)");
                vec![Parsed::RecordOnly(TranscriptItem {
                    item: ItemKind::Other,
                    text: self.text(&format!("Codex thread {id} started"), MAX_RENDERING_BYTES),
                })]
            }
            "turn.started" => Vec::new(),
            "turn.completed" => self.turn_completed(event),
            "turn.failed" => {
                let message = event
                    .get("error")
                    .and_then(|error| error.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("(no detail)");
                self.failed = Some(message.to_owned());
                vec![self.item(ItemKind::Error, &format!("the turn failed: {message}"))]
            }
            "error" => {
                let message = or_placeholder(string(event, "message"), "(no detail)");
                self.error = Some(message.clone());
                vec![self.item(ItemKind::Error, &message)]
            }
            "item.started" | "item.updated" | "item.completed" => match event.get("item") {
                Some(Value::Object(item)) => self.thread_item(kind, item),
                _ => vec![self.note(&rendering(kind, event, IDENTIFIERS))],
            },
            _ => vec![self.note(&rendering(kind, event, IDENTIFIERS))],
        }
    }

    /// The turn's usage as what it adds to the previous total, then the finish, the last agent
    /// message its summary.
    fn turn_completed(&mut self, event: &Map<String, Value>) -> Vec<Parsed> {
        let mut parsed = Vec::new();
        if let Some(Value::Object(usage)) = event.get("usage") {
            let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
            let total = Totals {
                input: count("input_tokens"),
                cached: count("cached_input_tokens"),
                output: count("output_tokens"),
            };
            let previous = self.total;
            self.total = total;
            parsed.push(Parsed::Usage(UsageReport {
                model: self.text(&self.model, MAX_RENDERING_BYTES),
                input_tokens: total.input.saturating_sub(previous.input),
                output_tokens: total.output.saturating_sub(previous.output),
                cached_tokens: total.cached.saturating_sub(previous.cached),
                cost_usd: None,
            }));
        }
        self.completed = true;
        let summary = self
            .last_message
            .as_deref()
            .filter(|message| !message.trim().is_empty())
            .map(|message| self.text(message, MAX_ITEM_BYTES));
        let shown = summary.clone().unwrap_or_else(|| {
            self.text("(Codex ended its turn without a message)", MAX_ITEM_BYTES)
        });
        parsed.push(Parsed::Finish(Finish { summary, shown }));
        parsed
    }

    fn thread_item(&mut self, kind: &str, item: &Map<String, Value>) -> Vec<Parsed> {
        let id = string(item, "id").to_owned();
        let started = kind == "item.started";
        let completed = kind == "item.completed";
        match string(item, "type") {
            "agent_message" if completed => {
                let message = string(item, "text");
                if !message.trim().is_empty() {
                    self.last_message = Some(message.to_owned());
                }
                vec![self.item(
                    ItemKind::Message,
                    &or_placeholder(message, "(an empty message)"),
                )]
            }
            "reasoning" if completed => {
                vec![self.item(
                    ItemKind::Thought,
                    &or_placeholder(string(item, "text"), "(no summary)"),
                )]
            }
            "command_execution" => self.command(&id, started, completed, item),
            "file_change" if completed => vec![self.item(ItemKind::Command, &file_change(item))],
            "mcp_tool_call" => self.mcp_call(&id, started, completed, item),
            "web_search" if completed => {
                let query = or_placeholder(string(item, "query"), "(no query)");
                vec![self.item(ItemKind::Command, &format!("web search: {query}"))]
            }
            "todo_list" => {
                // Shown as it starts and changes; its completion repeats the last one.
                let seen = self.started.contains(&id);
                if completed {
                    self.started.remove(&id);
                    if seen {
                        return Vec::new();
                    }
                } else {
                    self.remember_started(&id);
                }
                vec![self.item(ItemKind::Other, &todo_list(item))]
            }
            "error" => {
                let message = or_placeholder(string(item, "message"), "(no detail)");
                vec![self.item(ItemKind::Error, &message)]
            }
            "agent_message" | "reasoning" | "file_change" | "web_search" => Vec::new(),
            other => {
                let other = if other.is_empty() {
                    "an item without a type"
                } else {
                    other
                };
                vec![self.note(&rendering(&format!("{kind} {other}"), item, IDENTIFIERS))]
            }
        }
    }

    /// A command's line when it starts (or, if its start was not seen, when it ends), then its
    /// output with its exit code.
    fn command(
        &mut self,
        id: &str,
        started: bool,
        completed: bool,
        item: &Map<String, Value>,
    ) -> Vec<Parsed> {
        let mut parsed = Vec::new();
        if started || (completed && !self.started.contains(id)) {
            let command = or_placeholder(string(item, "command"), "(an empty command)");
            parsed.push(self.item(ItemKind::Command, &command));
            if started {
                self.remember_started(id);
            }
        }
        if completed {
            self.started.remove(id);
            let output = string(item, "aggregated_output").trim_end_matches(['\n', '\r']);
            let status = match (
                item.get("exit_code").and_then(Value::as_i64),
                string(item, "status"),
            ) {
                (Some(code), _) => format!("[exit code {code}]"),
                (None, "") => "[no exit code]".to_owned(),
                (None, status) => format!("[{status}]"),
            };
            let text = if output.is_empty() {
                status
            } else {
                format!("{output}\n{status}")
            };
            let kind = if string(item, "status") == "declined" {
                ItemKind::Error
            } else {
                ItemKind::Output
            };
            parsed.push(self.item(kind, &text));
        }
        parsed
    }

    fn mcp_call(
        &mut self,
        id: &str,
        started: bool,
        completed: bool,
        item: &Map<String, Value>,
    ) -> Vec<Parsed> {
        let mut parsed = Vec::new();
        if started || (completed && !self.started.contains(id)) {
            let call = format!(
                "MCP {}.{} {}",
                or_placeholder(string(item, "server"), "?"),
                or_placeholder(string(item, "tool"), "?"),
                item.get("arguments")
                    .map(Value::to_string)
                    .unwrap_or_default()
            );
            parsed.push(self.item(ItemKind::Command, &call));
            if started {
                self.remember_started(id);
            }
        }
        if completed {
            self.started.remove(id);
            match item.get("error") {
                Some(Value::Object(error)) => {
                    let message = or_placeholder(string(error, "message"), "(no detail)");
                    parsed.push(self.item(ItemKind::Error, &message));
                }
                _ => {
                    let result = item
                        .get("result")
                        .filter(|result| !result.is_null())
                        .map_or_else(|| "(no result)".to_owned(), mcp_result);
                    parsed.push(self.item(ItemKind::Output, &result));
                }
            }
        }
        parsed
    }

    fn remember_started(&mut self, id: &str) {
        if self.started.len() >= MAX_STARTED_ITEMS {
            self.started.clear();
        }
        self.started.insert(id.to_owned());
    }
}

impl OutputParser for CodexOutput {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        match line.stream {
            OutputStream::Stdout => match self.stdout.push(&line.line) {
                Some((bytes, passed_over)) => self.stdout_line(&bytes, passed_over),
                None => Vec::new(),
            },
            OutputStream::Stderr => match self.stderr.push(&line.line) {
                Some((bytes, passed_over)) => {
                    let shown = String::from_utf8_lossy(&bytes);
                    if shown.trim().is_empty() {
                        return Vec::new();
                    }
                    vec![Parsed::Item(TranscriptItem {
                        item: ItemKind::Other,
                        text: text::bounded_text(
                            &self.sanitizer,
                            &shown,
                            MAX_ITEM_BYTES,
                            passed_over,
                        ),
                    })]
                }
                None => Vec::new(),
            },
        }
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        if (self.failed.is_some() || !(finished && self.completed))
            && let Some(reported) = self.reported_failure()
        {
            return Some(reported);
        }
        if finished && self.completed {
            return None;
        }
        let reason = match &self.last_message {
            Some(message) => {
                format!("Codex stopped before its turn completed; its last message: {message}")
            }
            None => "Codex stopped before its turn completed".to_owned(),
        };
        Some(self.text(&reason, MAX_RENDERING_BYTES))
    }

    /// The turn's failure, or else, when no turn completed, the thread's last `error` event (an
    /// `error` item, such as the missing model metadata, is only a warning).
    fn reported_failure(&self) -> Option<SanitizedText> {
        let reason = match (&self.failed, &self.error) {
            (Some(failed), _) => format!("Codex's turn failed: {failed}"),
            (None, Some(error)) if !self.completed => {
                format!("Codex stopped on an error: {error}")
            }
            (None, _) => return None,
        };
        Some(self.text(&reason, MAX_RENDERING_BYTES))
    }
}

/// `add notes/a.md, update src/lib.rs`: what a file change does, path by path.
fn file_change(item: &Map<String, Value>) -> String {
    let changes: Vec<String> = item
        .get("changes")
        .and_then(Value::as_array)
        .map(|changes| {
            changes
                .iter()
                .map(|change| {
                    let field = |name: &str| change.get(name).and_then(Value::as_str).unwrap_or("");
                    format!(
                        "{} {}",
                        or_placeholder(field("kind"), "change"),
                        or_placeholder(field("path"), "(no path)")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let changes = if changes.is_empty() {
        "(no files)".to_owned()
    } else {
        changes.join(", ")
    };
    match string(item, "status") {
        "failed" => format!("file change failed: {changes}"),
        _ => format!("file change: {changes}"),
    }
}

/// An MCP tool's result as its text parts say it, one a line; as JSON when it has none (an image,
/// structured content only).
fn mcp_result(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if texts.is_empty() {
        result.to_string()
    } else {
        texts.join("\n")
    }
}

/// The agent's plan, one step a line, each checked or not.
fn todo_list(item: &Map<String, Value>) -> String {
    let steps: Vec<String> = item
        .get("items")
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .map(|step| {
                    let done = step.get("completed").and_then(Value::as_bool) == Some(true);
                    let text = step.get("text").and_then(Value::as_str).unwrap_or("");
                    format!("[{}] {text}", if done { "x" } else { " " })
                })
                .collect()
        })
        .unwrap_or_default();
    format!("plan:\n{}", steps.join("\n"))
}
