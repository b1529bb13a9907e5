//! The wire APIs the gateway speaks, chosen in one place: [`WireApi`] (beside the request policy,
//! which every kind has) names each kind, [`Wire`] is what the gateway needs to know of one (how its
//! streams report usage, how its output is capped, where its usage is, its error shapes) and [`of`]
//! is the registry that gives each kind its implementation. The forwarder and the meter ask the
//! registry and never branch on a kind themselves.

mod chat;
mod messages;
mod openai;
mod responses;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Debug;

use http::{HeaderName, HeaderValue};
use serde_json::Value;
use serde_json::value::RawValue;

use super::policy::{Refusal, WireApi};
use super::prices::ModelPrice;
use super::usage::{Metered, NotJson};

/// The registry: the implementation the gateway serves each kind with, `None` for a kind whose
/// request policy is written (`policy/rules.rs`) but which no route serves yet. A kind added to
/// [`WireApi`] does not compile until it has a line here.
pub(crate) fn of(api: WireApi) -> Option<&'static dyn Wire> {
    match api {
        WireApi::ChatCompletions => Some(&chat::ChatCompletions),
        WireApi::Responses => Some(&responses::Responses),
        WireApi::Messages => Some(&messages::Messages),
    }
}

/// How the host's model API key goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyHeader {
    /// `Authorization: Bearer <key>` (OpenAI and the proxies that speak its APIs).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
}

/// The error shape of a reply made where no wire API is known (a route the gateway does not serve,
/// `GET /v1/models`): OpenAI's, which every client stet runs reads.
pub(crate) fn fallback() -> &'static dyn Wire {
    &chat::ChatCompletions
}

/// A JSON request's top-level fields, each kept as the bytes it was written in: reading a request
/// this way costs about its size, whatever it holds (see `server/scan.rs` for the rest of the walk).
pub(crate) type Fields = BTreeMap<String, Box<RawValue>>;

/// A top-level field read as `T`; `None` when it is missing or of another shape (nothing else of the
/// request is read, so a huge value of the wrong shape costs no memory).
pub(crate) fn typed<T: serde::de::DeserializeOwned>(fields: &Fields, name: &str) -> Option<T> {
    fields
        .get(name)
        .and_then(|raw| serde_json::from_str::<T>(raw.get()).ok())
}

/// Sets a top-level field to `value`.
pub(crate) fn set_field(fields: &mut Fields, name: &str, value: &Value) {
    if let Ok(raw) = serde_json::value::to_raw_value(value) {
        fields.insert(name.to_owned(), raw);
    }
}

/// One wire API as the gateway meters and answers it. A new wire API is a module implementing this
/// trait, a [`WireApi`] kind with its request policy (`policy/rules.rs`: the top-level fields it
/// documents, the tools, items and parts a client runs itself), a line in [`of`], and its routes in
/// `server/route.rs`. It must supply:
///
/// - [`Wire::api`]: its kind, by which the policy, the tool bill and events name it (the fields by
///   which the provider adds input or work the request does not show are the policy's, refused on
///   every request);
/// - [`Wire::key_header`] and [`Wire::passed_header`]: how the host's key goes upstream and which of
///   the agent's headers go with it;
/// - [`Wire::ask_stream_usage`]: how a streamed request is made to report its usage, so that no
///   stream goes unmetered;
/// - [`Wire::output_fields`] and [`Wire::cap_output`]: the fields that cap its output, set to the
///   count the ledger reserved;
/// - [`Wire::input_price`]: the most one input token may cost;
/// - [`Wire::body_usage`] and [`Wire::stream_usage`]: where the model, the usage and the provider's
///   tool calls are in a whole reply and in a server-sent event stream;
/// - [`Wire::error_body`] and [`Wire::refusal_body`]: its error shape, for the gateway's own
///   replies and for the request policy's refusals, so that its clients surface them as API errors.
pub(crate) trait Wire: Debug + Send + Sync {
    /// Its kind.
    fn api(&self) -> WireApi;

    /// The header that carries the host's key.
    fn key_header(&self) -> KeyHeader {
        KeyHeader::Bearer
    }

    /// The value an agent's header is sent upstream with, `None` for one that stays behind. The
    /// default is OpenAI's: `Accept`, `User-Agent`, `OpenAI-Beta` and the SDKs' `X-Stainless-*`.
    fn passed_header(&self, name: &HeaderName, value: &HeaderValue) -> Option<HeaderValue> {
        let passed = matches!(name.as_str(), "accept" | "user-agent" | "openai-beta")
            || name.as_str().starts_with("x-stainless-");
        passed.then(|| value.clone())
    }

    /// Makes a streamed request (`fields`) ask for its usage; whether it changed the request.
    fn ask_stream_usage(&self, fields: &mut Fields) -> bool;

    /// The fields that cap the request's output, all of them set to the reserved count.
    fn output_fields(&self, fields: &Fields) -> &'static [&'static str];

    /// Caps the request's output at `cap` tokens: every output field set to it.
    fn cap_output(&self, fields: &mut Fields, cap: u64) {
        for name in self.output_fields(fields) {
            set_field(fields, name, &Value::from(cap));
        }
    }

    /// Dollars per million for the dearest input token of a request to a model priced `price`.
    fn input_price(&self, price: &ModelPrice) -> f64 {
        price.input
    }

    /// The model, usage and provider calls of a whole (non-streaming) reply body.
    fn body_usage(&self, body: &[u8]) -> Result<Metered, NotJson>;

    /// A reader of a streamed reply's model, usage and provider calls, fed as the stream passes.
    fn stream_usage(&self) -> Box<dyn StreamUsage>;

    /// The body of a reply the gateway makes itself: `code` for programs, `message` for people.
    fn error_body(&self, code: &str, message: &str) -> Value;

    /// The body of a request policy's refusal (answered 400).
    fn refusal_body(&self, refusal: &Refusal) -> Value;
}

/// Reads a streamed reply's usage as its bytes pass, in chunks split anywhere.
pub(crate) trait StreamUsage: Debug + Send + Sync {
    /// Feeds the next bytes of the stream.
    fn push(&mut self, chunk: &[u8]);

    /// The end of the stream: what it said of itself.
    fn finish(self: Box<Self>) -> Metered;
}
