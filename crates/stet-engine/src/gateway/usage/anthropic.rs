//! Usage of Anthropic's Messages API, whose shape is its own: `input_tokens` counts only the input
//! neither read from nor written to the prompt cache, `cache_read_input_tokens` and
//! `cache_creation_input_tokens` (split by lifetime in `cache_creation`) are apart, and a stream
//! says its input in `message_start` and its output, cumulatively, in `message_delta`. A stream's
//! usage is known only once a `message_delta` carried it: one cut before that reports none, so the
//! request counts its whole reservation rather than the one output token `message_start` shows.

use serde_json::Value;
use serde_json::value::RawValue;

use super::{Metered, NotJson, SseEvents, TokenCounts};

/// Usage from one Messages `usage` object; `None` without both counts, or with one that is not a
/// whole non-negative number.
pub fn usage_from_value(usage: &Value) -> Option<TokenCounts> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let optional = |value: Option<&Value>| match value {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64(),
    };
    let input = count("input_tokens")?;
    let output = count("output_tokens")?;
    let read = optional(usage.get("cache_read_input_tokens"))?;
    let written = optional(usage.get("cache_creation_input_tokens"))?;
    let split = usage.get("cache_creation");
    // Writes the split does not put at five minutes (the one-hour ones, and any it does not
    // account for) are charged at the dearer, one-hour rate.
    let five = optional(split.and_then(|split| split.get("ephemeral_5m_input_tokens")))?;
    let cache_write_5m = five.min(written);
    let cache_write_1h = written - cache_write_5m;
    Some(TokenCounts {
        input: input.saturating_add(read).saturating_add(written),
        output,
        cached: read,
        cache_write_5m,
        cache_write_1h,
    })
}

/// The parts of a reply or event the meter reads.
#[derive(Debug, Default, serde::Deserialize)]
struct Scope<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

fn string(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
}

fn value(raw: Option<&RawValue>) -> Option<Value> {
    raw.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
}

/// The model and usage of a whole Messages reply.
pub fn from_json(body: &[u8]) -> Result<Metered, NotJson> {
    let scope = match serde_json::from_slice::<Scope>(body) {
        Ok(scope) => scope,
        Err(_) => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map_err(|err| NotJson(format!("syntax error at line {}", err.line())))?;
            return Ok(Metered::default());
        }
    };
    Ok(Metered {
        model: string(scope.model),
        usage: value(scope.usage).as_ref().and_then(usage_from_value),
        calls: Default::default(),
    })
}

/// Reads a Messages event stream as it passes.
#[derive(Debug, Default)]
pub struct MessagesStream {
    events: SseEvents,
    model: Option<String>,
    /// `message_start`'s usage, overlaid key by key with each `message_delta`'s (cumulative).
    usage: serde_json::Map<String, Value>,
    /// A `message_delta` carried usage: the output is known.
    delta_seen: bool,
}

impl MessagesStream {
    /// A reader at the start of a stream.
    pub fn new() -> MessagesStream {
        MessagesStream::default()
    }

    /// Feeds the next bytes of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        let mut events = std::mem::take(&mut self.events);
        events.push(chunk, |data| self.event(data));
        self.events = events;
    }

    /// The end of the stream: its model, and its usage when a `message_delta` said it.
    pub fn finish(mut self) -> Metered {
        let events = std::mem::take(&mut self.events);
        events.finish(|data| self.event(data));
        let usage = self
            .delta_seen
            .then(|| usage_from_value(&Value::Object(self.usage)))
            .flatten();
        Metered {
            model: self.model,
            usage,
            calls: Default::default(),
        }
    }

    fn event(&mut self, data: &[u8]) {
        let Ok(scope) = serde_json::from_slice::<Scope>(data) else {
            return;
        };
        match scope.kind.map(RawValue::get) {
            Some("\"message_start\"") => {
                let Some(message) = scope
                    .message
                    .and_then(|raw| serde_json::from_str::<Scope>(raw.get()).ok())
                else {
                    return;
                };
                if let Some(model) = string(message.model) {
                    self.model = Some(model);
                }
                if let Some(Value::Object(usage)) = value(message.usage) {
                    self.usage = usage;
                }
            }
            Some("\"message_delta\"") => {
                if let Some(Value::Object(usage)) = value(scope.usage) {
                    self.usage.extend(usage);
                    self.delta_seen = true;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
