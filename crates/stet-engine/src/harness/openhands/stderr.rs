//! What the OpenHands CLI writes to stderr, read so that a person sees the run and not the CLI's
//! start-up: the lines before its first event (deprecation warnings, log lines) become one item,
//! every attempt to reach the network (a sandbox has none, by design) becomes one warning for the
//! whole run, and a JSON log line (`LOG_JSON=true`) reads as `LEVEL logger: message`.
//!
//! Nothing is dropped unseen: start-up lines are all in the one item (up to its bound), and a network
//! failure after the first goes to the run record only. Every line is sanitized whole, once it is
//! complete, before anything is cut from it or picked out of it, so the sanitizer sees each secret
//! entire. A log line must name a standard level to be rendered as one, and a message's own line
//! breaks are indented under it, so no log line reads as a line of stet's own.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::harness::text;
use stet_protocol::event::{ItemKind, TranscriptItem};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};
// A stderr line is gathered as far as an event line is, and shown within an item's bound.
use super::{MAX_EVENT_BYTES as MAX_LINE_BYTES, MAX_ITEM_BYTES};
use crate::runtime::lines::FramedLine;

/// What a resolver or a socket says when there is no network at all; a line holding one reports a
/// failed network attempt. A refused connection is not among them: the relay on the sandbox's own
/// loopback refusing is a fault worth showing.
const NO_NETWORK: &[&str] = &[
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "No address associated with hostname",
    "nodename nor servname provided",
    "Network is unreachable",
];

/// The most characters of a failed attempt's URL the warning quotes.
const MAX_TARGET_CHARS: usize = 200;

/// What one stderr line became.
#[derive(Debug, PartialEq)]
pub(crate) enum StderrRead {
    /// Nothing to show now (a piece of a line, a blank line, a start-up line held back, a network
    /// failure already warned about).
    Nothing,
    /// A line to show as an [`ItemKind::Other`] item.
    Item(TranscriptItem),
    /// A line for the run record only: a network failure after the first.
    Recorded(TranscriptItem),
    /// The run's one network warning.
    Warning(SanitizedText),
}

/// The stderr side of one OpenHands run.
#[derive(Debug)]
pub(crate) struct OpenHandsStderr {
    sanitizer: Arc<TokenSanitizer>,
    /// The current line while its pieces arrive.
    line: Vec<u8>,
    line_passed_over: usize,
    /// Until the first event: the lines held back for the start-up item.
    startup: Option<Startup>,
    /// Whether the network warning was given.
    warned: bool,
}

/// The start-up lines held back, sanitized: joined by newlines, up to [`MAX_ITEM_BYTES`].
#[derive(Debug, Default)]
struct Startup {
    text: String,
    lines: usize,
    passed_over: usize,
}

impl OpenHandsStderr {
    pub(crate) fn new(sanitizer: Arc<TokenSanitizer>) -> OpenHandsStderr {
        OpenHandsStderr {
            sanitizer,
            line: Vec::new(),
            line_passed_over: 0,
            startup: Some(Startup::default()),
            warned: false,
        }
    }

    /// One framed piece of stderr: gathered until its line is complete, then read.
    pub(crate) fn read(&mut self, piece: &FramedLine) -> StderrRead {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        let (kept, passed_over) = piece.bytes.split_at(room.min(piece.bytes.len()));
        self.line.extend_from_slice(kept);
        self.line_passed_over += passed_over.len();
        if piece.continues {
            return StderrRead::Nothing;
        }
        let bytes = std::mem::take(&mut self.line);
        let passed_over = std::mem::take(&mut self.line_passed_over);
        self.complete_line(&String::from_utf8_lossy(&bytes), passed_over)
    }

    fn complete_line(&mut self, raw: &str, passed_over: usize) -> StderrRead {
        let line = self.sanitizer.sanitize(&readable(raw));
        let line = line.as_str();
        if line.trim().is_empty() {
            return StderrRead::Nothing;
        }
        if let Some(target) = network_attempt(line) {
            let item = TranscriptItem {
                item: ItemKind::Other,
                text: self.bounded(line, passed_over),
            };
            if std::mem::replace(&mut self.warned, true) {
                return StderrRead::Recorded(item);
            }
            tracing::debug!(line = %item.text, "OpenHands stderr: a network attempt failed");
            return StderrRead::Warning(self.sanitizer.sanitize(&format!(
                "OpenHands tried to reach {target} and could not: the sandbox has no network, as \
                 intended (later attempts go to the run record only)"
            )));
        }
        if let Some(startup) = &mut self.startup {
            startup.hold(line, passed_over);
            return StderrRead::Nothing;
        }
        let text = self.bounded(line, passed_over);
        tracing::debug!(line = %text, "OpenHands stderr");
        StderrRead::Item(TranscriptItem {
            item: ItemKind::Other,
            text,
        })
    }

    /// The first event arrived, or the output ended: the start-up lines, as one item (none when there
    /// were none). Later lines are shown one by one.
    pub(crate) fn end_startup(&mut self) -> Option<TranscriptItem> {
        let startup = self.startup.take()?;
        if startup.lines == 0 {
            return None;
        }
        let noun = if startup.lines == 1 { "line" } else { "lines" };
        let text = text::bounded_text(
            &self.sanitizer,
            &format!(
                "OpenHands start-up ({} {noun} of stderr):\n{}",
                startup.lines, startup.text
            ),
            MAX_ITEM_BYTES,
            startup.passed_over,
        );
        tracing::debug!(text = %text, "OpenHands start-up");
        Some(TranscriptItem {
            item: ItemKind::Other,
            text,
        })
    }

    fn bounded(&self, line: &str, passed_over: usize) -> SanitizedText {
        text::bounded_text(&self.sanitizer, line, MAX_ITEM_BYTES, passed_over)
    }
}

impl Startup {
    fn hold(&mut self, line: &str, passed_over: usize) {
        self.lines += 1;
        let room = MAX_ITEM_BYTES.saturating_sub(self.text.len() + 1);
        let kept = crate::human::truncate(line, room);
        if !self.text.is_empty() && room > 0 {
            self.text.push('\n');
        }
        self.text.push_str(kept);
        self.passed_over += line.len() - kept.len() + passed_over;
    }
}

/// The level names Python's logging gives; a "log line" naming another is shown as it is.
const LEVELS: &[&str] = &["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];

/// A JSON log line (`{"levelname": …, "name": …, "message": …}`) as `LEVEL logger: message`, each
/// further line of the message indented; any other line as it is.
fn readable(line: &str) -> String {
    let Ok(Value::Object(log)) = serde_json::from_str::<Value>(line.trim()) else {
        return line.to_owned();
    };
    let field = |object: &Map<String, Value>, name: &str| {
        object.get(name).and_then(Value::as_str).map(str::to_owned)
    };
    match (field(&log, "levelname"), field(&log, "message")) {
        (Some(level), Some(message)) if LEVELS.contains(&level.as_str()) => {
            let message = message.trim_end().replace('\n', "\n    ");
            match field(&log, "name") {
                Some(logger) if !logger.contains(char::is_whitespace) => {
                    format!("{level} {logger}: {message}")
                }
                _ => format!("{level}: {message}"),
            }
        }
        _ => line.to_owned(),
    }
}

/// What a line reporting a failed network attempt tried to reach: its first URL, else "the
/// network"; `None` when the line reports no such failure.
fn network_attempt(line: &str) -> Option<String> {
    if !NO_NETWORK.iter().any(|phrase| line.contains(phrase)) {
        return None;
    }
    let url = ["https://", "http://"]
        .iter()
        .filter_map(|scheme| line.find(scheme))
        .min()
        .map(|start| {
            line[start..]
                .split(|c: char| c.is_whitespace() || "'\"<>(){},;".contains(c))
                .next()
                .unwrap_or_default()
                .trim_end_matches(['.', ':', '/'])
                .chars()
                .take(MAX_TARGET_CHARS)
                .collect::<String>()
        });
    Some(url.unwrap_or_else(|| "the network".to_owned()))
}

#[cfg(test)]
mod tests;
