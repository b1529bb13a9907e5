//! What OpenAI's two wire APIs share: where a reply's usage is (`usage::from_json` and
//! `usage::SseScanner` read both APIs' shapes) and the error bodies their clients read.

use serde_json::Value;

use super::StreamUsage;
use crate::gateway::policy::Refusal;
use crate::gateway::usage::{Metered, NotJson, SseScanner};

/// The model, usage and provider calls of a whole reply.
pub(super) fn body_usage(body: &[u8]) -> Result<Metered, NotJson> {
    crate::gateway::usage::from_json(body)
}

impl StreamUsage for SseScanner {
    fn push(&mut self, chunk: &[u8]) {
        SseScanner::push(self, chunk);
    }

    fn finish(self: Box<Self>) -> Metered {
        SseScanner::finish(*self).metered
    }
}

/// A reader of a reply streamed as server-sent events.
pub(super) fn stream_usage() -> Box<dyn StreamUsage> {
    Box::new(SseScanner::new())
}

/// `{"error":{"message":..,"type":"stet_gateway","code":..}}`.
pub(super) fn error_body(code: &str, message: &str) -> Value {
    serde_json::json!({
        "error": { "message": message, "type": "stet_gateway", "code": code }
    })
}

/// An `invalid_request_error` naming the refused field as its `param`.
pub(super) fn refusal_body(refusal: &Refusal) -> Value {
    serde_json::json!({
        "error": {
            "message": refusal.message(),
            "type": "invalid_request_error",
            "param": refusal.field,
            "code": "stet_request_policy",
        }
    })
}
