//! OpenAI's Responses API (`POST /v1/responses`) as far as the gateway serves it today: its output
//! capped by `max_output_tokens`, its usage in the reply or in the stream's last `response` object,
//! and the fields by which the provider works from state stet cannot see refused under a ceiling.
//! The Codex harness (issue 31) completes it here.

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

    /// A stored response or conversation adds input; a background response runs on its own.
    fn unseen_work_fields(&self) -> &'static [&'static str] {
        &["previous_response_id", "conversation", "background"]
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
