//! Anthropic's Messages API (`POST /v1/messages`, Claude Code's): the key goes as `x-api-key`, the
//! agent's `anthropic-version` and documented `anthropic-beta` values pass from an allowlist, the
//! output is capped by `max_tokens` (which bounds thinking too: a thinking budget is held below
//! it), an input token may cost a cache write's price, usage comes from `message_start` and
//! `message_delta` or the whole reply (`usage::anthropic`), and errors take Anthropic's shape.

use http::{HeaderName, HeaderValue};
use serde_json::Value;

use super::{Fields, KeyHeader, StreamUsage, Wire, WireApi, set_field, typed};
use crate::gateway::policy::Refusal;
use crate::gateway::prices::ModelPrice;
use crate::gateway::usage::anthropic::{self, MessagesStream};
use crate::gateway::usage::{Metered, NotJson};

/// The Messages API.
#[derive(Debug)]
pub(super) struct Messages;

/// The API versions a client may name.
const VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];

/// The `anthropic-beta` values passed: features that change neither where the provider reaches nor
/// what a token costs. Others (the 1M context, billed higher past 200K tokens; files; batches; code
/// execution; MCP connectors; web fetch; skills) are dropped from the header, and a request that
/// needs one is refused by the provider.
pub(crate) const BETAS: &[&str] = &[
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
    "output-128k-2025-02-19",
    "prompt-caching-2024-07-31",
    "extended-cache-ttl-2025-04-11",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "structured-outputs-2025-11-13",
    "tool-examples-2025-10-29",
    "advanced-tool-use-2025-11-20",
];

impl Wire for Messages {
    fn api(&self) -> WireApi {
        WireApi::Messages
    }

    fn key_header(&self) -> KeyHeader {
        KeyHeader::XApiKey
    }

    /// `Accept`, `User-Agent`, the SDK's `X-Stainless-*`, a known `anthropic-version`, and the
    /// allowed values of `anthropic-beta` (the others dropped; the header too when none is left).
    fn passed_header(&self, name: &HeaderName, value: &HeaderValue) -> Option<HeaderValue> {
        match name.as_str() {
            "accept" | "user-agent" => Some(value.clone()),
            name if name.starts_with("x-stainless-") => Some(value.clone()),
            "anthropic-version" => {
                let version = value.to_str().ok()?.trim();
                VERSIONS.contains(&version).then(|| value.clone())
            }
            "anthropic-beta" => {
                let kept: Vec<&str> = value
                    .to_str()
                    .ok()?
                    .split(',')
                    .map(str::trim)
                    .filter(|beta| BETAS.contains(beta))
                    .collect();
                if kept.is_empty() {
                    return None;
                }
                HeaderValue::from_str(&kept.join(",")).ok()
            }
            _ => None,
        }
    }

    /// A Messages stream reports its usage in `message_start` and `message_delta` unasked.
    fn ask_stream_usage(&self, _fields: &mut Fields) -> bool {
        false
    }

    fn output_fields(&self, _fields: &Fields) -> &'static [&'static str] {
        &["max_tokens"]
    }

    /// `max_tokens` set to `cap`, and an extended-thinking budget held below it (the API refuses a
    /// budget that is not): thinking is output, within `max_tokens`.
    fn cap_output(&self, fields: &mut Fields, cap: u64) {
        set_field(fields, "max_tokens", &Value::from(cap));
        let Some(mut thinking) = typed::<serde_json::Map<String, Value>>(fields, "thinking") else {
            return;
        };
        let over = thinking
            .get("budget_tokens")
            .is_some_and(|budget| budget.as_u64().is_none_or(|budget| budget >= cap));
        if over {
            thinking.insert(
                "budget_tokens".to_owned(),
                Value::from(cap.saturating_sub(1)),
            );
            set_field(fields, "thinking", &Value::Object(thinking));
        }
    }

    /// Any input token may be written to the cache, at up to twice the input price.
    fn input_price(&self, price: &ModelPrice) -> f64 {
        price.dearest_input()
    }

    fn body_usage(&self, body: &[u8]) -> Result<Metered, NotJson> {
        anthropic::from_json(body)
    }

    fn stream_usage(&self) -> Box<dyn StreamUsage> {
        Box::new(MessagesStream::new())
    }

    /// `{"type":"error","error":{"type":..,"message":..}}`, the type read from stet's code.
    fn error_body(&self, code: &str, message: &str) -> Value {
        serde_json::json!({
            "type": "error",
            "error": { "type": error_type(code), "message": message, "stet_code": code }
        })
    }

    /// An `invalid_request_error` whose message names the refused field.
    fn refusal_body(&self, refusal: &Refusal) -> Value {
        serde_json::json!({
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": refusal.message(),
                "stet_code": "stet_request_policy",
                "param": refusal.field,
            }
        })
    }
}

impl StreamUsage for MessagesStream {
    fn push(&mut self, chunk: &[u8]) {
        MessagesStream::push(self, chunk);
    }

    fn finish(self: Box<Self>) -> Metered {
        MessagesStream::finish(*self)
    }
}

/// Anthropic's error type for one of the gateway's codes: what its clients branch on.
fn error_type(code: &str) -> &'static str {
    match code {
        "not_found" => "not_found_error",
        "too_many_requests_in_flight" | "cost_budget_held" | "request_bytes_in_flight" => {
            "rate_limit_error"
        }
        "request_too_large" => "request_too_large",
        "cost_ceiling_reached" | "cost_ceiling_too_low_for_tools" => "billing_error",
        "upstream_unreachable" | "upstream_timeout" | "request_timeout" => "api_error",
        _ => "invalid_request_error",
    }
}
