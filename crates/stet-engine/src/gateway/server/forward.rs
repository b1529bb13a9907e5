//! One agent request: routed, read, admitted to the cost ledger (its worst case reserved), rewritten
//! (streamed usage, output cap), sent upstream with the host's key, and its response handed back
//! through the meter, which settles the reservation.
//!
//! Replies the gateway makes itself carry an OpenAI-style error body
//! (`{"error":{"message":..,"type":"stet_gateway","code":..}}`), so agents surface them as API errors:
//! 404 for a route it does not serve; 400 from the request policy for a model request with a query
//! string (LiteLLM reads `?model=`); 402 once the cost ceiling leaves too little for the request
//! (402 rather than 429, which OpenAI clients retry: a ceiling does not lift by waiting); 429 with
//! `Retry-After` while what is left is held by requests in flight; 400 under a ceiling for a request
//! whose cost cannot be bounded (a model the price table does not list on an endpoint that reports
//! no cost, input stored upstream, a body that is not JSON); 413 for a body over 32 MiB, 400 for an
//! unreadable one, 408 when the agent's body does not arrive in time, 502 when the upstream cannot be
//! reached and 504 when it does not answer within the request timeout. The upstream's own statuses
//! (429 with `Retry-After`, 5xx, …) pass through unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use super::errors::BoxError;
use super::metered::{Meter, MeteredBody, Report};
use super::{Hold, Shared, scan};
use crate::error_chain::error_chain;
use crate::gateway::ledger::{Refusal, WorstCase};
use crate::gateway::policy::{self, ProviderCall, WireApi};
use crate::gateway::prices::PriceTable;
use crate::gateway::tool_calls::ToolBill;
use crate::gateway::usage::{self, SseScanner};

/// A body the gateway sends the agent: its own error replies, or an upstream response passing through.
pub(super) type GatewayBody = BoxBody<Bytes, BoxError>;

/// The largest request body forwarded.
const MAX_REQUEST_BODY: usize = 32 * 1024 * 1024;

/// The longest request path or model name an event or error body repeats.
const MAX_SHOWN_PATH: usize = 160;

/// Input tokens reserved for each image or file part beyond its bytes: an image named by URL is a
/// few bytes in the request and up to a few thousand tokens to the model.
const TOKENS_PER_ATTACHMENT: u64 = 4096;

/// What the gateway's rewrite may add to a body (output caps, `stream_options`), counted as input
/// too: what is sent, not what was received, is what the upstream bills.
const REWRITE_BYTES: u64 = 256;

/// How long a retry is suggested while the budget is held by requests in flight.
const HELD_RETRY_AFTER_SECS: u32 = 2;

/// The routes the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    ChatCompletions,
    Responses,
    Models,
}

impl Route {
    fn of(method: &Method, path: &str) -> Option<Route> {
        match (method, path) {
            (&Method::POST, "/v1/chat/completions") => Some(Route::ChatCompletions),
            (&Method::POST, "/v1/responses") => Some(Route::Responses),
            (&Method::GET, "/v1/models") => Some(Route::Models),
            _ => None,
        }
    }

    /// The path after `/v1/`, appended to the upstream base URL.
    fn rest(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat/completions",
            Route::Responses => "responses",
            Route::Models => "models",
        }
    }

    /// Whether responses on this route carry usage to meter.
    fn metered(self) -> bool {
        self != Route::Models
    }

    /// The wire API whose request policy the route's bodies pass; `None` on a route whose body is
    /// not forwarded.
    fn api(self) -> Option<WireApi> {
        match self {
            Route::ChatCompletions => Some(WireApi::ChatCompletions),
            Route::Responses => Some(WireApi::Responses),
            Route::Models => None,
        }
    }
}

/// Serves one agent request. Never fails: every problem becomes a reply and a `GatewayEvent::Error`.
pub(super) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Response<GatewayBody> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start) + shared.request_timeout;
    let label = format!("{} {}", request.method(), shown_path(request.uri().path()));

    let Some(route) = Route::of(request.method(), request.uri().path()) else {
        shared.error(&format!(
            "{label}: refused, not a route the gateway serves (404)"
        ));
        return error_reply(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!(
                "stet gateway: {label} is not served; the routes are POST /v1/chat/completions, POST /v1/responses and GET /v1/models"
            ),
        );
    };
    if let Some((spent, ceiling)) = shared.ceiling_reached() {
        shared.error(&format!(
            "{label}: refused, the stet cost ceiling of ${ceiling:.4} is reached (${spent:.4} spent) (402)"
        ));
        return error_reply(
            StatusCode::PAYMENT_REQUIRED,
            "cost_ceiling_reached",
            &format!(
                "stet gateway: the stet cost ceiling of ${ceiling:.4} for this dispatch is reached (${spent:.4} spent); no further model requests are forwarded"
            ),
        );
    }

    // A request in flight holds a permit until its response concludes (or it is refused).
    let Ok(in_flight) = Arc::clone(&shared.requests).try_acquire_owned() else {
        let cap = shared.limits.max_concurrent_requests;
        shared.error(&format!(
            "{label}: held back, {cap} requests are already in flight, the most one dispatch may have (429)"
        ));
        return retry_reply(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests_in_flight",
            &format!(
                "stet gateway: {cap} model requests of this dispatch are already in flight (model.max_concurrent_requests); retry when one finishes"
            ),
        );
    };

    let (parts, body) = request.into_parts();
    // A query string goes around the body's policy: LiteLLM runs the model `?model=` names over
    // the body's. No client stet runs sends one.
    if let (Some(api), Some(_)) = (route.api(), parts.uri.query()) {
        return refused(
            &shared,
            &label,
            policy::Refusal {
                api,
                field: "(query string)".to_owned(),
                value_kind: "query",
                shown: None,
                rule: policy::Rule::Undocumented,
            },
        );
    }
    if let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING)
        && !encoding.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        shared.error(&format!(
            "{label}: refused, its body is compressed (Content-Encoding), which stet does not decode before its request policy (415)"
        ));
        return error_reply(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_encoding_not_supported",
            "stet gateway: send the request body uncompressed (no Content-Encoding); stet checks every body before it is forwarded",
        );
    }
    let (body, held_bytes) = match read_body(&shared, &parts.headers, body, deadline).await {
        Ok(read) => read,
        Err(unread) => return unread.reply(&shared, &label),
    };
    // The request policy: what goes upstream is its re-serialization, never the agent's bytes.
    let (body, enabled) = match route.api() {
        None if body.is_empty() => (body, Vec::new()),
        None => {
            shared.error(&format!("{label}: refused, it carries a body (400)"));
            return error_reply(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("stet gateway: {label} takes no body"),
            );
        }
        Some(api) => match shared.policy.check(api, &body) {
            Ok(checked) => (Bytes::from(checked.body), checked.provider_calls),
            Err(refusal) => return refused(&shared, &label, refusal),
        },
    };

    let Ok(uri) = shared.upstream.uri(route.rest(), parts.uri.query()) else {
        shared.error(&format!(
            "{label}: refused, its query string is not a valid URL part (400)"
        ));
        return error_reply(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "stet gateway: the query string is not valid",
        );
    };
    let bounded = shared.ceiling_usd.is_some();
    let mut prepared = match prepare(route, body, &shared.prices, bounded, &enabled) {
        Ok(prepared) => prepared,
        Err(unbounded) => {
            shared.error(&format!(
                "{label}: refused under the cost ceiling, {unbounded} (400)"
            ));
            return error_reply(
                StatusCode::BAD_REQUEST,
                "cost_not_bounded",
                &format!(
                    "stet gateway: under the stet cost ceiling a request's cost must be bounded before it is sent, and {unbounded}"
                ),
            );
        }
    };
    let (hold, body) = match admit(
        &shared,
        &label,
        prepared.worst.as_ref(),
        prepared.model.as_deref(),
    ) {
        Ok(hold) => {
            let cap = hold.as_ref().and_then(Hold::output_cap);
            (hold, prepared.body(route, cap))
        }
        Err(reply) => return *reply,
    };
    if let Some(api) = route.api() {
        for call in enabled {
            shared.egress(api, call);
        }
    }
    let headers = upstream_headers(&parts.headers, shared.authorization.as_ref(), body.len());
    let mut upstream_request = Request::new(Full::new(body));
    *upstream_request.method_mut() = parts.method;
    *upstream_request.uri_mut() = uri;
    *upstream_request.headers_mut() = headers;

    let response =
        match tokio::time::timeout_at(deadline, shared.client.request(upstream_request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => {
                // A request that never connected cost nothing; one cut after it was sent may have.
                if let Some(hold) = hold {
                    hold.settle(err.is_connect().then_some(0.0));
                    shared.announce_if_reached();
                }
                shared.error(&format!(
                    "{label}: the model upstream could not be reached: {} (502)",
                    error_chain(&err)
                ));
                return error_reply(
                    StatusCode::BAD_GATEWAY,
                    "upstream_unreachable",
                    "stet gateway: the model upstream could not be reached",
                );
            }
            Err(_) => {
                let timeout = shared.request_timeout;
                shared.error(&format!(
                    "{label}: the model upstream did not answer within {timeout:?} (504)"
                ));
                return error_reply(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    &format!("stet gateway: the model upstream did not answer within {timeout:?}"),
                );
            }
        };

    let status = response.status();
    report_status(&shared, &label, status, response.headers());
    let header_cost = response
        .headers()
        .get(usage::LITELLM_COST_HEADER)
        .and_then(|value| usage::header_cost(value.as_bytes()));
    if header_cost.is_some() {
        shared.endpoint_reports_cost();
    }
    let meter = if route.metered() && status.is_success() {
        let event_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| {
                value
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if event_stream {
            Meter::Sse(SseScanner::new())
        } else {
            Meter::json()
        }
    } else {
        Meter::Off
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let hold = match hold {
        // A refusal by the upstream (4xx but 408) is not billed unless it says otherwise; a timeout
        // or a failure (408, 5xx) may come after the provider did the work, so it counts its
        // reservation.
        Some(hold) if !status.is_success() => {
            let refused = status.is_client_error() && status != StatusCode::REQUEST_TIMEOUT;
            hold.settle(header_cost.or(refused.then_some(0.0)));
            shared.announce_if_reached();
            None
        }
        hold => hold,
    };
    // The body went upstream with the request: its bytes are no longer held.
    drop(held_bytes);
    let report = Report {
        shared,
        label,
        request_model: prepared.model,
        bill: prepared.bill,
        header_cost,
        hold,
        in_flight: Some(in_flight),
        start,
    };
    Response::from_parts(
        parts,
        MeteredBody::new(body, deadline, meter, report).boxed(),
    )
}

/// Why an agent's request body was not read whole.
#[derive(Debug)]
enum Unread {
    /// Over [`MAX_REQUEST_BODY`], by its `Content-Length` or as it arrived.
    TooLarge,
    /// The dispatch's budget of bytes in flight is held by its other requests.
    OverBudget { budget: usize },
    /// The body failed (a malformed chunk, the connection cut); the text says how.
    Broken(String),
    /// The body did not arrive in time.
    TimedOut(std::time::Duration),
}

impl Unread {
    fn reply(self, shared: &Shared, label: &str) -> Response<GatewayBody> {
        match self {
            Unread::TooLarge => {
                let limit = MAX_REQUEST_BODY >> 20;
                shared.error(&format!(
                    "{label}: refused, the request body is over {limit} MiB (413)"
                ));
                error_reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    &format!("stet gateway: request bodies are limited to {limit} MiB"),
                )
            }
            Unread::OverBudget { budget } => {
                let budget = budget >> 20;
                shared.error(&format!(
                    "{label}: held back, the dispatch's other requests hold its {budget} MiB of request bytes in flight (503)"
                ));
                retry_reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "request_bytes_in_flight",
                    &format!(
                        "stet gateway: this dispatch's requests in flight already hold {budget} MiB of request bodies; retry when one finishes"
                    ),
                )
            }
            Unread::Broken(detail) => {
                shared.error(&format!(
                    "{label}: the agent's request body could not be read: {detail} (400)"
                ));
                error_reply(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "stet gateway: the request body could not be read",
                )
            }
            Unread::TimedOut(timeout) => {
                shared.error(&format!(
                    "{label}: the agent's request body did not arrive within {timeout:?} (408)"
                ));
                error_reply(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    "stet gateway: the request body did not arrive in time",
                )
            }
        }
    }
}

/// Takes `bytes` more of the dispatch's budget of request bytes in flight into `held`.
fn take_bytes(
    shared: &Shared,
    bytes: usize,
    held: &mut Option<OwnedSemaphorePermit>,
) -> Result<(), Unread> {
    let budget = shared.limits.max_bytes_in_flight;
    let count = u32::try_from(bytes).map_err(|_| Unread::TooLarge)?;
    let permit = Arc::clone(&shared.bytes_in_flight)
        .try_acquire_many_owned(count)
        .map_err(|_| Unread::OverBudget { budget })?;
    match held {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
    }
    Ok(())
}

/// Reads an agent's request body whole, within the body timeout (and the request's deadline), at
/// most [`MAX_REQUEST_BODY`] bytes, each byte taken from the dispatch's budget of bytes in flight:
/// what its `Content-Length` declares before any of it is read, the rest as it arrives. Returns the
/// body and its share of the budget, given back when dropped.
async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    mut body: Incoming,
    deadline: tokio::time::Instant,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Unread> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REQUEST_BODY as u64) {
        return Err(Unread::TooLarge);
    }
    let timeout = shared.limits.body_timeout.min(shared.request_timeout);
    let body_deadline = deadline.min(tokio::time::Instant::now() + timeout);
    let declared = declared.map_or(0, |length| length as usize);
    let mut held = None;
    if declared > 0 {
        take_bytes(shared, declared, &mut held)?;
    }
    let mut collected = Vec::with_capacity(declared);
    loop {
        let frame = match tokio::time::timeout_at(body_deadline, body.frame()).await {
            Err(_) => return Err(Unread::TimedOut(timeout)),
            Ok(None) => break,
            Ok(Some(Err(err))) => return Err(Unread::Broken(error_chain(&err))),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let taken = declared.max(collected.len());
        let total = collected.len() + data.len();
        if total > MAX_REQUEST_BODY {
            return Err(Unread::TooLarge);
        }
        if total > taken {
            take_bytes(shared, total - taken, &mut held)?;
        }
        collected.extend_from_slice(&data);
    }
    Ok((Bytes::from(collected), held))
}

/// Reports an upstream status the agent will have to deal with.
fn report_status(shared: &Shared, label: &str, status: StatusCode, headers: &HeaderMap) {
    if status == StatusCode::TOO_MANY_REQUESTS {
        match headers.get(header::RETRY_AFTER) {
            Some(retry_after) => {
                let retry_after: String = String::from_utf8_lossy(retry_after.as_bytes()).chars().take(64).collect();
                shared.error(&format!(
                    "{label}: the model upstream is rate-limiting ({status}), Retry-After: {retry_after}; passed to the agent"
                ));
            }
            None => shared.error(&format!(
                "{label}: the model upstream is rate-limiting ({status}), with no Retry-After; passed to the agent"
            )),
        }
    } else if status.is_server_error() {
        shared.error(&format!(
            "{label}: the model upstream failed ({status}); passed to the agent"
        ));
    } else if status.is_client_error() {
        shared.error(&format!(
            "{label}: the model upstream refused the request ({status}); passed to the agent"
        ));
    }
}

/// A JSON request's top-level fields, each kept as the bytes it was written in: reading a request
/// this way costs about its size, whatever it holds (see `scan` for the rest of the walk).
type Fields = BTreeMap<String, Box<RawValue>>;

/// An agent request as read, with what the ledger needs to know of it.
#[derive(Debug)]
struct Prepared {
    /// The body as received: what is sent when nothing needs rewriting.
    raw: Bytes,
    /// The request's fields, when it is a JSON object on a metered route.
    fields: Option<Fields>,
    /// `fields` must be sent instead of `raw`: a stream was made to report usage, or the request is
    /// held to a ceiling (what is sent is then exactly what was priced, one value per field).
    rewrite: bool,
    /// The request's `model`, the pricing fallback when the response does not name one the table knows.
    model: Option<String>,
    /// What the request may cost at most; `None` on a route that is not metered.
    worst: Option<WorstCase>,
    /// What the provider tools it enables cost per call, when it enables any.
    bill: Option<ToolBill>,
}

/// Reads an agent request for the ledger and makes it meterable: a chat-completions stream is made to
/// report its usage (`stream_options.include_usage` set to true, whatever the agent chose), so that
/// no streamed request goes unmetered.
///
/// Under a ceiling (`bounded`) its worst case must be knowable: a body that is not a JSON object
/// naming its model as a string, a chat `n` that is not a positive whole number, and input or work
/// the request only refers to (a stored response, conversation, prompt or file; a background
/// response; a tool the provider runs itself; audio output; web search) are refused with the reason.
/// Without a ceiling any body passes.
///
/// The worst case counts each byte of the body as an input token (tokenizers spend at least a byte
/// a token; JSON spends more), [`TOKENS_PER_ATTACHMENT`] more for each image part, at the model's
/// input price (cached input is cheaper, so this bounds it), a prediction's bytes at the output price
/// (rejected prediction tokens are billed as output), and each output token at the output price
/// times `n`. Under a ceiling the request's fields must all be ones the worst case accounts for,
/// and file, audio and video parts, which the provider reads at a size the request does not show,
/// are refused.
fn prepare(
    route: Route,
    raw: Bytes,
    prices: &PriceTable,
    bounded: bool,
    enabled: &[ProviderCall],
) -> Result<Prepared, String> {
    let unread = |raw: Bytes, worst| Prepared {
        raw,
        fields: None,
        rewrite: false,
        model: None,
        worst,
        bill: None,
    };
    if !route.metered() {
        return Ok(unread(raw, None));
    }
    let unpriced = || WorstCase::Unpriced {
        model: String::new(),
    };
    // The walk feeds only the worst case and the refusals, which matter under a ceiling alone.
    let found = if bounded {
        scan::scan(&raw)
    } else {
        Ok(scan::Found::default())
    };
    let (Ok(mut fields), Ok(found)) = (serde_json::from_slice::<Fields>(&raw), found) else {
        if bounded {
            return Err("the request body is not a JSON object".to_owned());
        }
        return Ok(unread(raw, Some(unpriced())));
    };
    let model = typed::<String>(&fields, "model");
    let mut rewrite = bounded;
    if route == Route::ChatCompletions && typed::<bool>(&fields, "stream") == Some(true) {
        let mut options = typed::<Fields>(&fields, "stream_options").unwrap_or_default();
        if typed::<bool>(&options, "include_usage") != Some(true) {
            set_field(&mut options, "include_usage", &Value::Bool(true));
            if let Ok(options) = serde_json::value::to_raw_value(&options) {
                fields.insert("stream_options".to_owned(), options);
            }
            rewrite = true;
        }
    }
    let bill = route
        .api()
        .and_then(|api| ToolBill::of(api, enabled, typed::<u64>(&fields, "max_tool_calls")));
    if let Some(calls) = bill.as_ref().and_then(ToolBill::max_tool_calls) {
        // The calls reserved are the calls the provider may make: the bound is sent whatever the
        // request held there.
        set_field(&mut fields, "max_tool_calls", &Value::from(calls));
        rewrite = true;
    }
    if bounded && let Some(reason) = unbounded_part(route, &fields, &found, enabled) {
        return Err(reason);
    }
    let worst = match model.as_deref().and_then(|name| prices.price(name)) {
        None if bounded && model.is_none() => {
            return Err("the request names no model (a string) to price".to_owned());
        }
        None => WorstCase::Unpriced {
            model: model.clone().unwrap_or_default(),
        },
        Some(price) => {
            let choices = match fields.get("n").map(|raw| raw.get().trim()) {
                None | Some("null") => 1,
                Some(_) => match typed::<u64>(&fields, "n").filter(|n| *n > 0) {
                    Some(n) => n,
                    None if bounded => {
                        return Err("its `n` is not a positive whole number".to_owned());
                    }
                    None => 1,
                },
            };
            let input_tokens = (raw.len() as u64 + REWRITE_BYTES)
                .saturating_add(found.attachments.saturating_mul(TOKENS_PER_ATTACHMENT));
            // Rejected prediction tokens are billed as output, for each choice.
            let predicted = fields.get("prediction").map_or(0, |raw| raw.get().len()) as f64;
            WorstCase::Priced {
                input_usd: input_tokens as f64 * price.input / 1_000_000.0
                    + predicted * price.output * choices as f64 / 1_000_000.0,
                per_output_token_usd: price.output * choices as f64 / 1_000_000.0,
                asked_output_tokens: output_fields(route, &fields)
                    .iter()
                    .filter_map(|name| typed::<u64>(&fields, name))
                    .min(),
                tools_usd: bill.as_ref().map_or(0.0, ToolBill::reserved_usd),
            }
        }
    };
    Ok(Prepared {
        raw,
        fields: Some(fields),
        rewrite,
        model,
        worst: Some(worst),
        bill,
    })
}

impl Prepared {
    /// The body to send: the one received unless the request must be rewritten or `cap` set on its
    /// output fields. It is taken out of the prepared request, once.
    fn body(&mut self, route: Route, cap: Option<u64>) -> Bytes {
        // Taken, not copied: while the request waits for the upstream only the body sent is held.
        let raw = std::mem::take(&mut self.raw);
        let Some(mut fields) = self.fields.take() else {
            return raw;
        };
        let mut rewrite = self.rewrite;
        if let Some(cap) = cap {
            // Every output field gets the reserved count, whatever it held: a value stet reads
            // one way and the upstream another (`"1e6"`, `1000000.0`) is not left in place.
            for name in output_fields(route, &fields) {
                set_field(&mut fields, name, &Value::from(cap));
            }
            rewrite = true;
        }
        if !rewrite {
            return raw;
        }
        match serde_json::to_vec(&fields) {
            Ok(rewritten) => Bytes::from(rewritten),
            Err(_) => raw,
        }
    }
}

/// A top-level field read as `T`; `None` when it is missing or of another shape (nothing else of the
/// request is read, so a huge value of the wrong shape costs no memory).
fn typed<T: serde::de::DeserializeOwned>(fields: &Fields, name: &str) -> Option<T> {
    fields
        .get(name)
        .and_then(|raw| serde_json::from_str::<T>(raw.get()).ok())
}

/// Sets a top-level field to `value`.
fn set_field(fields: &mut Fields, name: &str, value: &Value) {
    if let Ok(raw) = serde_json::value::to_raw_value(value) {
        fields.insert(name.to_owned(), raw);
    }
}

/// The fields that cap a request's output: `max_output_tokens` on `/v1/responses`; on chat
/// completions whichever of `max_completion_tokens` and `max_tokens` the request names, else
/// `max_tokens`.
fn output_fields(route: Route, fields: &Fields) -> &'static [&'static str] {
    match route {
        Route::Responses => &["max_output_tokens"],
        _ => match (
            fields.contains_key("max_completion_tokens"),
            fields.contains_key("max_tokens"),
        ) {
            (true, true) => &["max_completion_tokens", "max_tokens"],
            (true, false) => &["max_completion_tokens"],
            _ => &["max_tokens"],
        },
    }
}

/// The service tiers billed at the table's price or below (`auto` follows the user's project).
const PRICED_TIERS: &[&str] = &["auto", "default", "flex"];

/// What in a request makes its cost unknowable before its response, said as the refusal says it.
/// A provider tool or field the configuration enables (`enabled`) is priced per call.
fn unbounded_part(
    route: Route,
    fields: &Fields,
    found: &scan::Found,
    enabled: &[ProviderCall],
) -> Option<String> {
    let is_enabled = |name: &str| enabled.iter().any(|call| call.name == name);
    // The policy's allowlist of the route's API, which every field it admits is priced by or costs
    // nothing under: a proxy reads fields of its own that change the model or the price (LiteLLM's
    // `fallbacks`, `mock_testing_fallbacks`, `api_base`, …), and none is on it.
    let known = route.api().map_or(&[][..], policy::forwarded_fields);
    if let Some(unknown) = fields
        .keys()
        .find(|name| !known.contains(&name.as_str()) && !is_enabled(name))
    {
        return Some(format!(
            "the field `{}` is not one whose cost stet can bound",
            shown_text(unknown)
        ));
    }
    let set = |name: &str| {
        fields
            .get(name)
            .is_some_and(|raw| !matches!(raw.get().trim(), "null" | "false"))
    };
    if set("service_tier")
        && !typed::<String>(fields, "service_tier")
            .is_some_and(|tier| PRICED_TIERS.contains(&tier.as_str()))
    {
        return Some(
            "its `service_tier` is billed above the price table (only auto, default and flex are)"
                .to_owned(),
        );
    }
    if let Some(part) = &found.unbounded_media {
        return Some(format!(
            "a `{}` part is read by the provider at a size stet cannot see",
            shown_text(part)
        ));
    }
    if route == Route::Responses {
        for name in ["previous_response_id", "conversation", "background"] {
            if set(name) {
                return Some(format!(
                    "`{name}` makes the provider add input or work stet cannot see"
                ));
            }
        }
    }
    if set("audio") || found.audio_output {
        return Some("audio output is priced apart from the text the price table lists".to_owned());
    }
    if let Some(kind) = found.hosted_tool.as_ref().filter(|kind| !is_enabled(kind)) {
        return Some(format!(
            "the tool of type `{}` is run by the provider, at a price of its own",
            shown_text(kind)
        ));
    }
    found
        .stored_file
        .then(|| "a `file_id` names a file stored upstream, of a size stet cannot see".to_owned())
}

/// Admits a prepared request to the ledger: its hold (`None` on a route that is not metered), or the
/// reply that refuses it.
fn admit(
    shared: &Arc<Shared>,
    label: &str,
    worst: Option<&WorstCase>,
    model: Option<&str>,
) -> Result<Option<Hold>, Box<Response<GatewayBody>>> {
    let Some(worst) = worst else {
        return Ok(None);
    };
    match shared.admit(worst, model) {
        Ok(hold) => Ok(Some(hold)),
        Err(Refusal::Reached {
            spent_usd,
            ceiling_usd,
            needed_usd,
        }) => {
            shared.error(&format!(
                "{label}: refused, the stet cost ceiling of ${ceiling_usd:.4} leaves too little for it (${spent_usd:.4} spent, ${needed_usd:.4} needed at least) (402)"
            ));
            Err(Box::new(error_reply(
                StatusCode::PAYMENT_REQUIRED,
                "cost_ceiling_reached",
                &format!(
                    "stet gateway: the stet cost ceiling of ${ceiling_usd:.4} for this dispatch is reached (${spent_usd:.4} spent, ${needed_usd:.4} needed for this request at least); no further model requests are forwarded"
                ),
            )))
        }
        Err(Refusal::Held {
            reserved_usd,
            available_usd,
            needed_usd,
        }) => {
            shared.error(&format!(
                "{label}: held back, requests in flight hold ${reserved_usd:.4} of the cost ceiling and ${available_usd:.4} is free, ${needed_usd:.4} needed (429)"
            ));
            Err(Box::new(retry_reply(
                StatusCode::TOO_MANY_REQUESTS,
                "cost_budget_held",
                &format!(
                    "stet gateway: what is left under the stet cost ceiling is held by requests in flight (${reserved_usd:.4}); retry when they finish"
                ),
            )))
        }
        Err(Refusal::ToolsUnaffordable {
            available_usd,
            tools_usd,
            needed_usd,
        }) => {
            shared.error(&format!(
                "{label}: refused, the stet cost ceiling leaves ${available_usd:.4}, too little for the ${tools_usd:.4} its provider tools reserve (${needed_usd:.4} needed at least) (402)"
            ));
            Err(Box::new(error_reply(
                StatusCode::PAYMENT_REQUIRED,
                "cost_ceiling_too_low_for_tools",
                &format!(
                    "stet gateway: what is left under the stet cost ceiling (${available_usd:.4}) does not cover the ${tools_usd:.4} reserved for this request's provider-executed tools (their per-call price times `max_tool_calls`, {} when the request sets none); send it with fewer tool calls or without those tools",
                    crate::gateway::tool_calls::CALLS_PER_REQUEST
                ),
            )))
        }
        Err(Refusal::UnknownPrice { model }) => {
            let model = shown_text(&model);
            shared.error(&format!(
                "{label}: refused, the model `{model}` has no price in stet's price table and the endpoint reports no cost, so the cost ceiling cannot hold it; price it in the file `[model] prices` names (400)"
            ));
            Err(Box::new(error_reply(
                StatusCode::BAD_REQUEST,
                "model_not_priced",
                &format!(
                    "stet gateway: the model `{model}` has no price in stet's price table and the endpoint reports no cost, so the stet cost ceiling cannot hold it; add [models.\"{model}\"] with input and output prices to the file the `[model] prices` setting names"
                ),
            )))
        }
    }
}

/// The agent's headers as sent upstream: only `Accept`, `User-Agent`, `OpenAI-Beta` and the OpenAI
/// SDKs' `X-Stainless-*` pass. Everything else stays behind: credentials and cookies,
/// hop-by-hop headers, `Content-Encoding`, and the headers by which a client steers its upstream
/// (LiteLLM's `x-litellm-*` timeouts and retries, `OpenAI-Organization` and `OpenAI-Project`, which
/// bill elsewhere, `anthropic-beta`, which changes prices), and `Content-Type`: a body is the
/// policy's JSON and goes as `application/json`, since LiteLLM reads a body sent as a form as
/// form fields, which the JSON's strings could then smuggle (`…&model=…&`). `Content-Length` is recomputed,
/// `Accept-Encoding: identity` (the meter reads the bytes as they pass) and the host's
/// `Authorization` are added.
fn upstream_headers(
    agent: &HeaderMap,
    authorization: Option<&HeaderValue>,
    body_len: usize,
) -> HeaderMap {
    let named_by_connection = connection_named(agent);
    let mut headers = HeaderMap::with_capacity(agent.len() + 3);
    for (name, value) in agent {
        let passed = !named_by_connection.contains(name)
            && (matches!(name.as_str(), "accept" | "user-agent" | "openai-beta")
                || name.as_str().starts_with("x-stainless-"));
        if passed {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if body_len > 0 {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(authorization) = authorization {
        headers.insert(header::AUTHORIZATION, authorization.clone());
    }
    headers
}

/// Drops hop-by-hop headers from an upstream response before it goes to the agent.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in connection_named(headers) {
        headers.remove(name);
    }
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name))
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The extra hop-by-hop headers a `Connection` header names.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect()
}

/// A text of the agent's (a path, a model name) as events and replies repeat it: one line under the
/// display policy, bounded in length (the sanitizer runs on it later).
pub(super) fn shown_text(text: &str) -> String {
    shown_path(&stet_sanitize::display::one_line(text))
}

/// The request path as events repeat it: bounded in length (the sanitizer runs on it later).
fn shown_path(path: &str) -> String {
    if path.len() <= MAX_SHOWN_PATH {
        return path.to_owned();
    }
    let mut end = MAX_SHOWN_PATH;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// Reports a request the policy refused (the field, the kind of value and the rule, never the
/// value) and answers it with a 400 in its API's own error shape.
fn refused(shared: &Shared, label: &str, refusal: policy::Refusal) -> Response<GatewayBody> {
    let message = refusal.message();
    let body = match refusal.api {
        WireApi::Messages => serde_json::json!({
            "type": "error",
            "error": { "type": "invalid_request_error", "message": message },
        }),
        _ => serde_json::json!({
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": refusal.field,
                "code": "stet_request_policy",
            }
        }),
    };
    tracing::info!(
        path = label,
        field = %shown_text(&refusal.field),
        kind = refusal.value_kind,
        rule = refusal.rule.name(),
        "the request policy refused a model request"
    );
    shared.refused(refusal);
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A reply the gateway makes itself for something that passes: with `Retry-After`.
fn retry_reply(status: StatusCode, code: &str, message: &str) -> Response<GatewayBody> {
    let mut reply = error_reply(status, code, message);
    reply.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(HELD_RETRY_AFTER_SECS),
    );
    reply
}

/// A reply the gateway makes itself, with an OpenAI-style error body.
fn error_reply(status: StatusCode, code: &str, message: &str) -> Response<GatewayBody> {
    let body = serde_json::json!({
        "error": { "message": message, "type": "stet_gateway", "code": code }
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests;
