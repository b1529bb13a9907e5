//! OpenAI's Chat Completions (`POST /v1/chat/completions`): a stream reports its usage only when
//! asked (`stream_options.include_usage`), and the output is capped by `max_completion_tokens` or
//! the older `max_tokens`.

use serde_json::Value;

use super::{Fields, StreamUsage, Wire, WireApi, openai, set_field, typed};
use crate::gateway::policy::Refusal;
use crate::gateway::usage::{Metered, NotJson};

/// The Chat Completions API.
#[derive(Debug)]
pub(super) struct ChatCompletions;

impl Wire for ChatCompletions {
    fn api(&self) -> WireApi {
        WireApi::ChatCompletions
    }

    /// `stream_options.include_usage` set to true, whatever the agent chose.
    fn ask_stream_usage(&self, fields: &mut Fields) -> bool {
        if typed::<bool>(fields, "stream") != Some(true) {
            return false;
        }
        let mut options = typed::<Fields>(fields, "stream_options").unwrap_or_default();
        if typed::<bool>(&options, "include_usage") == Some(true) {
            return false;
        }
        set_field(&mut options, "include_usage", &Value::Bool(true));
        if let Ok(options) = serde_json::value::to_raw_value(&options) {
            fields.insert("stream_options".to_owned(), options);
        }
        true
    }

    /// Whichever of `max_completion_tokens` and `max_tokens` the request names, else `max_tokens`.
    fn output_fields(&self, fields: &Fields) -> &'static [&'static str] {
        match (
            fields.contains_key("max_completion_tokens"),
            fields.contains_key("max_tokens"),
        ) {
            (true, true) => &["max_completion_tokens", "max_tokens"],
            (true, false) => &["max_completion_tokens"],
            _ => &["max_tokens"],
        }
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
