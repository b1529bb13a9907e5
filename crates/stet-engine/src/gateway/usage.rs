//! Reading token usage and cost out of model responses: whole JSON bodies, server-sent event streams
//! and LiteLLM's cost header. Pure functions; the gateway feeds them the bytes it forwards.
//!
//! Both OpenAI shapes are understood: chat completions (`prompt_tokens`, `completion_tokens`,
//! `prompt_tokens_details.cached_tokens`) and the responses API (`input_tokens`, `output_tokens`,
//! `input_tokens_details.cached_tokens`, nested under `response` in its `response.completed` event).
//! On the responses API the calls the provider ran for the request's tools are counted too: its
//! output items of a provider call type (`web_search_call`, `mcp_call`, …), in the whole response
//! or, streamed, in `response.output_item.done` events and the last event's response.

use std::collections::BTreeMap;

use serde_json::Value;
use serde_json::value::RawValue;

use stet_sanitize::sanitize::SanitizedText;

use super::tool_calls::is_provider_call;

pub mod anthropic;
mod sse;

pub(crate) use sse::SseEvents;

/// Model usage as an agent reports it for one request (the engine keeps the running total).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageReport {
    /// The model the request went to, as reported.
    pub model: SanitizedText,
    /// Tokens of the prompt.
    pub input_tokens: u64,
    /// Tokens of the completion.
    pub output_tokens: u64,
    /// Tokens of the prompt served from the provider's cache.
    pub cached_tokens: u64,
    /// What the request cost in US dollars, when the report says; `None` when it does not.
    pub cost_usd: Option<f64>,
}

/// The response header in which LiteLLM reports a request's cost in dollars.
pub const LITELLM_COST_HEADER: &str = "x-litellm-response-cost";

/// Token counts of one request (`input` includes `cached` and the cache writes; Anthropic's
/// separate counts are added up into it by [`anthropic`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenCounts {
    /// Input (prompt) tokens, the cached ones and the cache writes included.
    pub input: u64,
    /// Output (completion) tokens, reasoning and thinking tokens included.
    pub output: u64,
    /// Input tokens served from the provider's prompt cache.
    pub cached: u64,
    /// Input tokens written to a prompt cache that lives five minutes (Anthropic).
    pub cache_write_5m: u64,
    /// Input tokens written to a prompt cache that lives an hour (Anthropic).
    pub cache_write_1h: u64,
}

/// What a response says about itself: the model that answered, its usage and the provider tool
/// calls it reports, each when present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metered {
    /// The response's `model` (the upstream's name for it, often a dated variant).
    pub model: Option<String>,
    /// The response's token counts.
    pub usage: Option<TokenCounts>,
    /// The provider tool calls among its output items: how many of each type.
    pub calls: BTreeMap<String, u64>,
}

/// The most distinct call types counted; further ones count under the last (priced at the dearest
/// enabled tool either way), so a hostile answer cannot grow the map.
const MAX_CALL_TYPES: usize = 16;

/// One output item, as far as the meter reads it.
#[derive(Debug, serde::Deserialize)]
struct Item {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

/// Counts `item` into `calls` when it is a provider tool call.
fn count_call(calls: &mut BTreeMap<String, u64>, item: &Item) {
    let Some(kind) = item.kind.as_deref().filter(|kind| is_provider_call(kind)) else {
        return;
    };
    let key = if calls.len() < MAX_CALL_TYPES || calls.contains_key(kind) {
        kind.to_owned()
    } else {
        "other_call".to_owned()
    };
    *calls.entry(key).or_default() += 1;
}

/// The provider tool calls of an `output` array.
fn output_calls(output: &RawValue) -> Option<BTreeMap<String, u64>> {
    let items = serde_json::from_str::<Vec<Item>>(output.get()).ok()?;
    let mut calls = BTreeMap::new();
    for item in &items {
        count_call(&mut calls, item);
    }
    Some(calls)
}

/// A response body that is not JSON: its usage cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the response body is not JSON ({0})")]
pub struct NotJson(String);

/// The parts of a response body (or of its `response` object, in the responses API) the meter
/// reads; everything else is skipped as it is read, never built, so a body of many small values
/// (`logprobs`) costs no more memory than its bytes.
#[derive(Debug, Default, serde::Deserialize)]
struct Scope<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
}

/// Usage and model from a whole (non-streaming) JSON response body.
pub fn from_json(body: &[u8]) -> Result<Metered, NotJson> {
    let not_json = |err: serde_json::Error| {
        let what = match err.classify() {
            serde_json::error::Category::Eof => "it ends early",
            _ => "syntax error",
        };
        NotJson(format!(
            "{what} at line {} column {}",
            err.line(),
            err.column()
        ))
    };
    let mut metered = Metered::default();
    let scope = match serde_json::from_slice::<Scope>(body) {
        Ok(scope) => scope,
        // Valid JSON of another shape (an array, a number) carries no usage.
        Err(_) => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body).map_err(not_json)?;
            return Ok(metered);
        }
    };
    absorb(&scope, &mut metered);
    if let Some(inner) = scope
        .response
        .and_then(|raw| serde_json::from_str::<Scope>(raw.get()).ok())
    {
        absorb(&inner, &mut metered);
    }
    Ok(metered)
}

/// Usage from one `usage` object of either API shape; `None` when it has neither shape's counts.
pub fn usage_from_value(usage: &Value) -> Option<TokenCounts> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let cached = |details: &str| {
        usage
            .get(details)
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    if let (Some(input), Some(output)) = (count("prompt_tokens"), count("completion_tokens")) {
        return Some(TokenCounts {
            input,
            output,
            cached: cached("prompt_tokens_details"),
            ..TokenCounts::default()
        });
    }
    if let (Some(input), Some(output)) = (count("input_tokens"), count("output_tokens")) {
        return Some(TokenCounts {
            input,
            output,
            cached: cached("input_tokens_details"),
            ..TokenCounts::default()
        });
    }
    None
}

/// A request's cost from LiteLLM's [`LITELLM_COST_HEADER`]: a finite, non-negative decimal, else `None`.
pub fn header_cost(value: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let cost: f64 = text.parse().ok()?;
    (cost.is_finite() && cost >= 0.0).then_some(cost)
}

/// Takes the model, the usage and the output's provider calls from one JSON document (a whole body
/// or one SSE event's data): top level first, then the responses API's `response` object. A later
/// document overrides an earlier one, so the last usage seen in a stream wins; `"usage": null`
/// chunks change nothing.
fn absorb(scope: &Scope<'_>, metered: &mut Metered) {
    if let Some(calls) = scope.output.and_then(output_calls) {
        metered.calls = calls;
    }
    if let Some(model) = scope
        .model
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
    {
        metered.model = Some(model);
    }
    if let Some(usage) = scope
        .usage
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .as_ref()
        .and_then(usage_from_value)
    {
        metered.usage = Some(usage);
    }
}

/// Reads a server-sent event stream of either OpenAI API as it passes, in chunks split anywhere,
/// and keeps the last usage.
#[derive(Debug, Default)]
pub struct SseScanner {
    events: SseEvents,
    metered: Metered,
    /// Provider calls of the `response.output_item.done` events so far.
    streamed_calls: BTreeMap<String, u64>,
    done: bool,
}

impl SseScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> SseScanner {
        SseScanner::default()
    }

    /// Feeds the next bytes of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        let mut events = std::mem::take(&mut self.events);
        events.push(chunk, |data| self.dispatch(data));
        self.events = events;
    }

    /// The end of the stream: an event not closed by a blank line still counts.
    pub fn finish(mut self) -> SseSummary {
        let events = std::mem::take(&mut self.events);
        events.finish(|data| self.dispatch(data));
        // The last event's response lists every item, and each item's own event said it too: the
        // larger count of each type is charged, so neither missing undercharges.
        for (kind, count) in self.streamed_calls {
            let charged = self.metered.calls.entry(kind).or_default();
            *charged = (*charged).max(count);
        }
        SseSummary {
            metered: self.metered,
            done: self.done,
        }
    }

    fn dispatch(&mut self, data: &[u8]) {
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
        } else if let Ok(scope) = serde_json::from_slice::<Scope>(data) {
            absorb(&scope, &mut self.metered);
            if scope.kind.map(RawValue::get) == Some("\"response.output_item.done\"")
                && let Some(item) = scope
                    .item
                    .and_then(|raw| serde_json::from_str::<Item>(raw.get()).ok())
            {
                count_call(&mut self.streamed_calls, &item);
            }
            if let Some(inner) = scope
                .response
                .and_then(|raw| serde_json::from_str::<Scope>(raw.get()).ok())
            {
                absorb(&inner, &mut self.metered);
            }
        }
    }
}

/// What a whole event stream said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseSummary {
    /// The last model and the last usage any event carried.
    pub metered: Metered,
    /// The stream sent OpenAI's `data: [DONE]` terminator.
    pub done: bool,
}

#[cfg(test)]
mod tests;
