//! How `claude -p --output-format stream-json --verbose` reads into stet's terms: each stdout line's
//! event into transcript items, usage and the finish ([`ClaudeOutput`]), stderr lines as they are;
//! what decides the outcome.

use std::collections::{HashMap, HashSet};
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

/// The most distinct replies (message ids) remembered for usage and tool names; past it the oldest
/// are forgotten, and at worst a cut run's usage counts a reply twice.
const MAX_REMEMBERED: usize = 4096;

/// The fields of a Claude Code event that identify it and say nothing to a reader of its rendering.
const IDENTIFIERS: &[&str] = &["id", "uuid", "session_id"];

/// One Claude Code run's output as the engine reads it.
#[derive(Debug)]
pub struct ClaudeOutput {
    sanitizer: Arc<TokenSanitizer>,
    /// The model usage is attributed to when a reply does not name one.
    model: String,
    stdout: Gathered,
    stderr: Gathered,
    /// Each distinct reply's usage, by message id, in the order they came.
    replies: Vec<(String, Tokens)>,
    /// The ids in `replies`.
    reply_ids: HashSet<String>,
    /// Tool names by tool-use id, to name a result's tool.
    tools: HashMap<String, String>,
    /// The text of the agent's last message.
    last_message: Option<String>,
    /// What the `result` event said, once it came.
    result: Option<Verdict>,
}

/// A reply's tokens as the Messages API counts them (`input` without the cache's).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tokens {
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl Tokens {
    fn of(usage: &Map<String, Value>) -> Tokens {
        let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
        Tokens {
            input: count("input_tokens"),
            cache_read: count("cache_read_input_tokens"),
            cache_write: count("cache_creation_input_tokens"),
            output: count("output_tokens"),
        }
    }
}

/// The run's end as the `result` event tells it.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// It completed: `is_error` false, subtype `success`, terminal reason `completed` or none.
    Completed,
    /// It ended otherwise, for this reason.
    Failed(String),
}

impl ClaudeOutput {
    /// A reader of both streams, redacting with `sanitizer`; usage is attributed to `model` (or to
    /// the model a reply names, or "claude" when neither is known, as in a replay).
    pub fn new(sanitizer: Arc<TokenSanitizer>, model: Option<String>) -> ClaudeOutput {
        ClaudeOutput {
            sanitizer,
            model: model.unwrap_or_else(|| "claude".to_owned()),
            stdout: Gathered::new(MAX_EVENT_BYTES),
            stderr: Gathered::new(MAX_EVENT_BYTES),
            replies: Vec::new(),
            reply_ids: HashSet::new(),
            tools: HashMap::new(),
            last_message: None,
            result: None,
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
        match event_of(read, "Claude Code", MAX_EVENT_BYTES, MAX_EVENT_VALUES) {
            Ok(None) => Vec::new(),
            Err(Unread::Note(text)) => vec![self.note(&text)],
            Err(Unread::Printed(text)) => vec![self.item(ItemKind::Other, &text)],
            Ok(Some(event)) => match string(&event, "type") {
                "system" => self.system(&event),
                "assistant" => self.assistant(&event),
                "user" => self.user(&event),
                "result" => self.result(&event),
                "" => vec![self.note(&rendering("an event without a type", &event, IDENTIFIERS))],
                other => vec![self.note(&rendering(other, &event, IDENTIFIERS))],
            },
        }
    }

    fn system(&self, event: &Map<String, Value>) -> Vec<Parsed> {
        match string(event, "subtype") {
            "init" => {
                let tools = event
                    .get("tools")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let shown = format!(
                    "Claude Code {} session {} started: model {}, permission mode {}, {tools} tools",
                    or_placeholder(string(event, "claude_code_version"), "(no version)"),
                    or_placeholder(string(event, "session_id"), "(no id)"),
                    or_placeholder(string(event, "model"), "(no model)"),
                    or_placeholder(string(event, "permissionMode"), "(none)"),
                );
                vec![Parsed::RecordOnly(TranscriptItem {
                    item: ItemKind::Other,
                    text: self.text(&shown, MAX_RENDERING_BYTES),
                })]
            }
            // Progress: how many thinking tokens the reply so far holds.
            "thinking_tokens" => Vec::new(),
            other => vec![Parsed::RecordOnly(TranscriptItem {
                item: ItemKind::Other,
                text: self.text(
                    &rendering(&format!("system {other}"), event, IDENTIFIERS),
                    MAX_RENDERING_BYTES,
                ),
            })],
        }
    }

    /// One content block (or a few) of a model reply: messages, thinking, tool uses. The reply's
    /// usage is remembered once per message id.
    fn assistant(&mut self, event: &Map<String, Value>) -> Vec<Parsed> {
        let Some(Value::Object(message)) = event.get("message") else {
            return vec![self.note(&rendering("assistant", event, IDENTIFIERS))];
        };
        // A reply Claude Code made up itself (`<synthetic>`: an API error's words) is no model's.
        let synthetic = event.get("error").is_some() || string(message, "model") == "<synthetic>";
        let id = string(message, "id");
        if !synthetic
            && !id.is_empty()
            && !self.reply_ids.contains(id)
            && let Some(Value::Object(usage)) = message.get("usage")
        {
            if self.replies.len() >= MAX_REMEMBERED {
                let (forgotten, _) = self.replies.remove(0);
                self.reply_ids.remove(&forgotten);
            }
            self.reply_ids.insert(id.to_owned());
            self.replies.push((id.to_owned(), Tokens::of(usage)));
        }
        let blocks = message
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut parsed = Vec::new();
        for block in &blocks {
            let Value::Object(block) = block else {
                continue;
            };
            match string(block, "type") {
                "text" if synthetic => {
                    let words = or_placeholder(string(block, "text"), "(no detail)");
                    parsed.push(self.item(ItemKind::Error, &words));
                }
                "text" => {
                    let words = string(block, "text");
                    if !words.trim().is_empty() {
                        self.last_message = Some(words.to_owned());
                    }
                    parsed.push(self.item(
                        ItemKind::Message,
                        &or_placeholder(words, "(an empty message)"),
                    ));
                }
                "thinking" => parsed.push(self.item(
                    ItemKind::Thought,
                    &or_placeholder(string(block, "thinking"), "(no summary)"),
                )),
                "redacted_thinking" => {
                    parsed.push(self.item(ItemKind::Thought, "(thinking the provider redacted)"));
                }
                "tool_use" | "server_tool_use" => {
                    let name = or_placeholder(string(block, "name"), "(a tool without a name)");
                    let input = block.get("input").cloned().unwrap_or(Value::Null);
                    if self.tools.len() >= MAX_REMEMBERED {
                        self.tools.clear();
                    }
                    self.tools
                        .insert(string(block, "id").to_owned(), name.clone());
                    let (kind, shown) = tool_use(&name, &input);
                    parsed.push(self.item(kind, &shown));
                }
                other => parsed.push(self.note(&rendering(
                    &format!(
                        "assistant {}",
                        or_placeholder(other, "(a block without a type)")
                    ),
                    block,
                    IDENTIFIERS,
                ))),
            }
        }
        parsed
    }

    /// The results of tool uses, each as the tool's output (an error's marked).
    fn user(&mut self, event: &Map<String, Value>) -> Vec<Parsed> {
        let content = event
            .get("message")
            .and_then(|message| message.get("content"));
        let Some(Value::Array(blocks)) = content else {
            // The prompt itself, or a note Claude Code adds to the conversation: not the agent's.
            return Vec::new();
        };
        let mut parsed = Vec::new();
        for block in blocks {
            let Value::Object(block) = block else {
                continue;
            };
            if string(block, "type") != "tool_result" {
                continue;
            }
            let output = result_text(block.get("content"));
            let output = output.trim_end_matches(['\n', '\r']);
            let failed = block.get("is_error").and_then(Value::as_bool) == Some(true);
            let tool = self
                .tools
                .remove(string(block, "tool_use_id"))
                .unwrap_or_else(|| "a tool".to_owned());
            let status = if failed {
                format!("[{tool} failed]")
            } else {
                format!("[{tool} done]")
            };
            let shown = if output.is_empty() {
                status
            } else {
                format!("{output}\n{status}")
            };
            parsed.push(self.item(ItemKind::Output, &shown));
        }
        parsed
    }

    /// The run's end: its usage (the totals, with the CLI's cost), then its finish or its failure.
    fn result(&mut self, event: &Map<String, Value>) -> Vec<Parsed> {
        // Claude Code prints one `result`, its last line: another is not its own, counts nothing,
        // and fails the run whatever the first said.
        if self.result.is_some() {
            let reason = format!(
                "Claude Code's output held a second result, which is not its own: {}",
                rendering("result", event, IDENTIFIERS)
            );
            let shown = self.note(&reason);
            self.result = Some(Verdict::Failed(reason));
            return vec![shown];
        }
        let mut parsed = Vec::new();
        if let Some(Value::Object(usage)) = event.get("usage") {
            let tokens = Tokens::of(usage);
            let cost = event
                .get("total_cost_usd")
                .and_then(Value::as_f64)
                .filter(|cost| cost.is_finite() && *cost > 0.0);
            if tokens != Tokens::default() || cost.is_some() {
                parsed.push(self.usage(tokens, cost));
            }
            // The replies' usage is the result's now: none is reported again at the end.
            self.replies.clear();
            self.reply_ids.clear();
        }
        let subtype = string(event, "subtype");
        let terminal = string(event, "terminal_reason");
        let is_error = event.get("is_error").and_then(Value::as_bool) != Some(false);
        let words = string(event, "result");
        let completed = !is_error && subtype == "success" && matches!(terminal, "" | "completed");
        if completed {
            self.result = Some(Verdict::Completed);
            let summary = [words, self.last_message.as_deref().unwrap_or("")]
                .into_iter()
                .find(|text| !text.trim().is_empty())
                .map(|text| self.text(text, MAX_ITEM_BYTES));
            let shown = summary.clone().unwrap_or_else(|| {
                self.text("(Claude Code ended without a message)", MAX_ITEM_BYTES)
            });
            parsed.push(Parsed::Finish(Finish { summary, shown }));
        } else {
            let mut reason = match (subtype, terminal) {
                ("", "") => "Claude Code's run ended in error".to_owned(),
                (subtype, "") => format!("Claude Code's run ended with {subtype}"),
                ("", terminal) | ("success", terminal) => {
                    format!("Claude Code's run ended with {terminal}")
                }
                (subtype, terminal) => {
                    format!("Claude Code's run ended with {subtype} ({terminal})")
                }
            };
            if let Some(errors) = event.get("errors").and_then(Value::as_array) {
                let errors: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
                if !errors.is_empty() {
                    reason = format!("{reason}: {}", errors.join("; "));
                }
            }
            if !words.trim().is_empty() {
                reason = format!("{reason}: {words}");
            }
            parsed.push(self.item(ItemKind::Error, &reason));
            self.result = Some(Verdict::Failed(reason));
        }
        if let Some(denials) = event.get("permission_denials").and_then(Value::as_array)
            && !denials.is_empty()
        {
            let tools: Vec<String> = denials
                .iter()
                .map(|denial| {
                    denial
                        .get("tool_name")
                        .and_then(Value::as_str)
                        .unwrap_or("a tool")
                        .to_owned()
                })
                .collect();
            parsed.push(Parsed::Warning(self.text(
                &format!(
                    "Claude Code refused {} tool use(s) its permissions did not allow: {}",
                    denials.len(),
                    tools.join(", ")
                ),
                MAX_RENDERING_BYTES,
            )));
        }
        parsed
    }

    fn usage(&self, tokens: Tokens, cost_usd: Option<f64>) -> Parsed {
        Parsed::Usage(UsageReport {
            model: self.text(&self.model, MAX_RENDERING_BYTES),
            input_tokens: tokens
                .input
                .saturating_add(tokens.cache_read)
                .saturating_add(tokens.cache_write),
            output_tokens: tokens.output,
            cached_tokens: tokens.cache_read,
            cost_usd,
        })
    }
}

impl OutputParser for ClaudeOutput {
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

    /// A run cut before its `result`: the usage of each distinct reply it printed, once.
    fn finish(&mut self) -> Vec<Parsed> {
        if self.replies.is_empty() {
            return Vec::new();
        }
        let total = self
            .replies
            .drain(..)
            .fold(Tokens::default(), |total, (_, tokens)| Tokens {
                input: total.input.saturating_add(tokens.input),
                cache_read: total.cache_read.saturating_add(tokens.cache_read),
                cache_write: total.cache_write.saturating_add(tokens.cache_write),
                output: total.output.saturating_add(tokens.output),
            });
        self.reply_ids.clear();
        vec![self.usage(total, None)]
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        match &self.result {
            Some(Verdict::Failed(reason)) => Some(self.text(reason, MAX_RENDERING_BYTES)),
            Some(Verdict::Completed) if finished => None,
            _ => {
                let reason = match &self.last_message {
                    Some(message) => format!(
                        "Claude Code stopped before its result; its last message: {message}"
                    ),
                    None => "Claude Code stopped before its result".to_owned(),
                };
                Some(self.text(&reason, MAX_RENDERING_BYTES))
            }
        }
    }
}

/// A tool use as the transcript shows it: a command for what runs or changes something, the plan
/// for a to-do list, the call as JSON for a tool this module does not know.
fn tool_use(name: &str, input: &Value) -> (ItemKind, String) {
    let field = |field: &str| input.get(field).and_then(Value::as_str).unwrap_or("");
    let path = || or_placeholder(field("file_path"), "(no path)");
    let shown = match name {
        "Bash" => or_placeholder(field("command"), "(an empty command)"),
        "Edit" => {
            let all = input.get("replace_all").and_then(Value::as_bool) == Some(true);
            format!("edit {}{}", path(), if all { " (every match)" } else { "" })
        }
        "MultiEdit" => {
            let edits = input
                .get("edits")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!("edit {} ({edits} edits)", path())
        }
        "Write" => format!("write {} ({} bytes)", path(), field("content").len()),
        "Read" => format!("read {}", path()),
        "NotebookEdit" => format!(
            "edit notebook {}",
            or_placeholder(field("notebook_path"), "(no path)")
        ),
        "Grep" => match field("path") {
            "" => format!("grep {}", field("pattern")),
            path => format!("grep {} in {path}", field("pattern")),
        },
        "Glob" => format!("glob {}", field("pattern")),
        "WebFetch" => format!("web fetch: {}", field("url")),
        "WebSearch" => format!("web search: {}", field("query")),
        "Task" | "Agent" => format!(
            "sub-agent ({}): {}",
            or_placeholder(field("subagent_type"), "general"),
            or_placeholder(field("description"), field("prompt"))
        ),
        "TodoWrite" => return (ItemKind::Other, todo_list(input)),
        other => format!("{other} {input}"),
    };
    (ItemKind::Command, shown)
}

/// The agent's plan, one step a line, each checked or not.
fn todo_list(input: &Value) -> String {
    let steps: Vec<String> = input
        .get("todos")
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .map(|step| {
                    let mark = match step.get("status").and_then(Value::as_str) {
                        Some("completed") => "x",
                        Some("in_progress") => "~",
                        _ => " ",
                    };
                    let text = step.get("content").and_then(Value::as_str).unwrap_or("");
                    format!("[{mark}] {text}")
                })
                .collect()
        })
        .unwrap_or_default();
    format!("plan:\n{}", steps.join("\n"))
}

/// A tool result's content: a string, or the text of its text blocks (an image or another block
/// named by its type).
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                Some(other) => format!("({other})"),
                None => "(a block without a type)".to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}
