//! OpenAI's Responses API (`POST /v1/responses`, the Codex CLI's): its output capped by
//! `max_output_tokens`, its usage (cached input apart) in the reply or in the `response` object of
//! the stream's terminal event (`response.completed`, `response.incomplete` or `response.failed`),
//! and the fields by which the provider works from state stet cannot see (`background`,
//! `previous_response_id`, `conversation`) refused by the request policy on every request.

use serde_json::Value;

use super::{Fields, StreamUsage, Wire, WireApi, openai};
use crate::gateway::policy::Refusal;
use crate::gateway::usage::{Metered, NotJson};

/// The Responses API.
#[derive(Debug)]
pub(super) struct Responses;

impl Wire for Responses {
    fn api(&self) -> WireApi {
        WireApi::Responses
    }

    /// A Responses stream reports its usage in its `response.completed` event unasked.
    fn ask_stream_usage(&self, _fields: &mut Fields) -> bool {
        false
    }

    fn output_fields(&self, _fields: &Fields) -> &'static [&'static str] {
        &["max_output_tokens"]
    }

    fn body_usage(&self, body: &[u8]) -> Result<Metered, NotJson> {
        openai::body_usage(body)
    }

    fn stream_usage(&self) -> Box<dyn StreamUsage> {
        openai::stream_usage()
    }

    fn error_body(&self, code: &str, message: &str) -> Value {
        openai::error_body(code, message)
    }

    fn refusal_body(&self, refusal: &Refusal) -> Value {
        openai::refusal_body(refusal)
    }
}
