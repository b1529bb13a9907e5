//! The JSON Lines the CLI harnesses print (Codex's `--json`, Claude Code's `stream-json`), read
//! within bounds, shared by their parsers: a line gathered from its framed pieces up to a byte limit
//! ([`Gathered`]), then parsed only when it holds at most so many values ([`read_object`]).

use serde_json::{Map, Value};

use crate::runtime::lines::FramedLine;

/// The longest event line a JSON Lines harness's parser reads; a longer one becomes a note saying it
/// was skipped.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// The most JSON values (counted by their separators) an event line may hold to be parsed.
pub const MAX_EVENT_VALUES: usize = 128 * 1024;

/// A line while its pieces arrive, kept up to `limit` bytes.
#[derive(Debug)]
pub(crate) struct Gathered {
    limit: usize,
    bytes: Vec<u8>,
    /// Bytes past the bound, counted and dropped.
    passed_over: usize,
}

impl Gathered {
    /// Gathers lines of at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Gathered {
        Gathered {
            limit,
            bytes: Vec::new(),
            passed_over: 0,
        }
    }

    /// Adds a piece; the whole line once its last piece arrived, with how many bytes were dropped.
    pub(crate) fn push(&mut self, piece: &FramedLine) -> Option<(Vec<u8>, usize)> {
        let room = self.limit.saturating_sub(self.bytes.len());
        let kept = room.min(piece.bytes.len());
        self.bytes.extend_from_slice(&piece.bytes[..kept]);
        self.passed_over += piece.bytes.len() - kept;
        if piece.continues {
            return None;
        }
        Some((
            std::mem::take(&mut self.bytes),
            std::mem::take(&mut self.passed_over),
        ))
    }
}

/// What one gathered line holds.
#[derive(Debug)]
pub(crate) enum Line {
    /// Nothing but white space.
    Blank,
    /// A JSON object.
    Object(Map<String, Value>),
    /// A line of `0` bytes, longer than the limit: not read.
    TooLong(usize),
    /// A line of `0` values, more than the limit: not read.
    TooManyValues(usize),
    /// A line that is not a JSON object, as text.
    NotAnEvent(String),
}

/// `line` (with `passed_over` bytes dropped past the gathering limit) read as a JSON object, if it is
/// one within `max_values` values (counted by their separators). Invalid UTF-8 is read lossily.
pub(crate) fn read_object(line: &[u8], passed_over: usize, max_values: usize) -> Line {
    if passed_over > 0 {
        return Line::TooLong(line.len() + passed_over);
    }
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Line::Blank;
    }
    let values = trimmed
        .iter()
        .filter(|byte| matches!(byte, b',' | b'[' | b'{' | b':'))
        .count();
    if values > max_values {
        return Line::TooManyValues(values);
    }
    let parsed =
        serde_json::from_slice::<Value>(trimmed).or_else(|error| {
            match std::str::from_utf8(trimmed) {
                Ok(_) => Err(error),
                Err(_) => serde_json::from_str(&String::from_utf8_lossy(trimmed)),
            }
        });
    match parsed {
        Ok(Value::Object(event)) => Line::Object(event),
        Ok(_) | Err(_) => Line::NotAnEvent(String::from_utf8_lossy(trimmed).into_owned()),
    }
}

/// What a parser makes of a line that holds no event to read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unread {
    /// A line not read for its size: a note about the line, shown like a rendering.
    Note(String),
    /// A line that is not an event, shown as the agent printed it.
    Printed(String),
}

/// The event `line` holds, `None` for a blank line, or else what the transcript says of the line
/// instead; `agent` names the harness's CLI in those words ("Codex", "Claude Code").
pub(crate) fn event_of(
    line: Line,
    agent: &str,
    max_bytes: usize,
    max_values: usize,
) -> Result<Option<Map<String, Value>>, Unread> {
    match line {
        Line::Blank => Ok(None),
        Line::Object(event) => Ok(Some(event)),
        Line::TooLong(len) => Err(Unread::Note(format!(
            "a {agent} event line of {len} bytes was not read (the limit is {max_bytes} bytes)"
        ))),
        Line::TooManyValues(values) => Err(Unread::Note(format!(
            "a {agent} event line of {values} values was not read (the limit is {max_values})"
        ))),
        Line::NotAnEvent(shown) => Err(Unread::Printed(format!(
            "{agent} printed a line that is not an event: {shown}"
        ))),
    }
}

/// A string field, or "" when it is missing or not a string.
pub(crate) fn string<'a>(object: &'a Map<String, Value>, field: &str) -> &'a str {
    object.get(field).and_then(Value::as_str).unwrap_or("")
}

/// `text`, or `placeholder` when `text` is nothing but white space.
pub(crate) fn or_placeholder(text: &str, placeholder: &str) -> String {
    if text.trim().is_empty() {
        placeholder.to_owned()
    } else {
        text.to_owned()
    }
}

/// `kind {fields as compact JSON}`, for an event or item a parser has no mapping for, without its
/// `type` and the fields named in `identifiers` (which say nothing to a reader); the caller bounds it.
pub(crate) fn rendering(kind: &str, object: &Map<String, Value>, identifiers: &[&str]) -> String {
    let fields: Map<String, Value> = object
        .iter()
        .filter(|(key, _)| key.as_str() != "type" && !identifiers.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if fields.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind} {}", Value::Object(fields))
    }
}
