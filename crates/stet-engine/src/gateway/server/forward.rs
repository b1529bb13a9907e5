//! One agent request, in four steps: routed (`route`), admitted (read whole, checked by the request
//! policy, priced and held on the cost ledger, which answers the refusals of the ceiling), forwarded
//! upstream with the host's key, and settled: its response handed back through the meter, which
//! settles the hold when it concludes. What the request's wire API looks like (its streams' usage,
//! its output cap, its error shapes) is the wire registry's (`gateway::wire`), not this file's.
//!
//! The replies the gateway makes itself (`replies`): 404 for a route it does not serve; 400 from the
//! request policy, also for a model request with a query string (LiteLLM reads `?model=`); 402 once
//! the cost ceiling leaves too little for the request (402 rather than 429, which OpenAI clients
//! retry: a ceiling does not lift by waiting); 429 with `Retry-After` while what is left is held by
//! requests in flight; 400 under a ceiling for a request whose cost cannot be bounded (a model the
//! price table does not list on an endpoint that reports no cost, input stored upstream, a body that
//! is not JSON); 413 for a body over 32 MiB, 400 for an unreadable one, 408 when the agent's body
//! does not arrive in time (`intake`), 502 when the upstream cannot be reached and 504 when it does
//! not answer within the request timeout.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::intake::read_body;
use super::metered::{Meter, MeteredBody, Report};
use super::replies::{GatewayBody, Stop, answer, report_status};
use super::route::{self, Route};
use super::{Shared, scan};
use crate::error_chain::error_chain;
use crate::gateway::ledger::{self, Hold, WorstCase, words};
use crate::gateway::policy::{self, ProviderCall};
use crate::gateway::prices::PriceTable;
use crate::gateway::reply::{Reply, shown_path, shown_text};
use crate::gateway::tool_calls::ToolBill;
use crate::gateway::usage;
use crate::gateway::wire::{Fields, KeyHeader, Wire, set_field, typed};

// Names the unit tests use from this module's scope, as they did when they lived here.
#[cfg(test)]
use {crate::gateway::reply::MAX_SHOWN_PATH, http::Method};

/// Input tokens reserved for each image or file part beyond its bytes: an image named by URL is a
/// few bytes in the request and up to a few thousand tokens to the model.
const TOKENS_PER_ATTACHMENT: u64 = 4096;

/// What the gateway's rewrite may add to a body (output caps, `stream_options`), counted as input
/// too: what is sent, not what was received, is what the upstream bills.
const REWRITE_BYTES: u64 = 256;

/// Serves one agent request. Never fails: every problem becomes a reply and a `GatewayEvent::Error`.
pub(super) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Response<GatewayBody> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start) + shared.request_timeout;
    let label = format!("{} {}", request.method(), shown_path(request.uri().path()));

    let Some(route) = Route::of(request.method(), request.uri().path()) else {
        let shape = route::shape_of_unserved(request.uri().path());
        return answer(&shared, shape, not_served(&label));
    };
    let shape = route.shape();
    if let (Some(api), Some(spoken)) = (route.api(), shared.policy.api)
        && api != spoken
    {
        return answer(&shared, shape, other_api(&label, spoken));
    }
    let (upstream_request, mut admitted) =
        match admit(&shared, route, &label, request, deadline).await {
            Ok(admitted) => admitted,
            Err(stop) => return stop.answer(&shared, &label, shape),
        };
    let response = match forward(&shared, &label, upstream_request, &mut admitted, deadline).await {
        Ok(response) => response,
        // The hold, if still open, is dropped after the reply's event: its own events follow it.
        Err(reply) => return answer(&shared, shape, reply),
    };
    settle(shared, route, label, start, deadline, admitted, response)
}

/// A request the gateway admitted, for as long as its response has not concluded. Dropped
/// unsettled, its hold goes first (and reports), then its bytes and its place in flight.
#[derive(Debug)]
struct Admitted {
    /// Its reservation on the ledger; `None` on a route that is not metered.
    hold: Option<Hold>,
    /// The request's `model`, the pricing fallback.
    model: Option<String>,
    /// What the provider tools it enables cost per call.
    bill: Option<ToolBill>,
    /// Its body's share of the dispatch's request bytes in flight, given back once it was sent.
    held_bytes: Option<OwnedSemaphorePermit>,
    /// Its place among the dispatch's requests in flight.
    in_flight: OwnedSemaphorePermit,
}

/// Admits a request: the ceiling not reached, a place among the requests in flight, its body read
/// whole and passed by the request policy, its worst case bounded and held on the ledger (its output
/// capped to what the hold reserved). Returns the request to send upstream, or why it goes no further.
async fn admit(
    shared: &Arc<Shared>,
    route: Route,
    label: &str,
    request: Request<Incoming>,
    deadline: tokio::time::Instant,
) -> Result<(Request<Full<Bytes>>, Admitted), Stop> {
    if let Some(reached) = shared.ledger.refuse_if_reached(label) {
        return Err(Stop::Reply(reached));
    }
    // A request in flight holds a permit until its response concludes (or it is refused).
    let Ok(in_flight) = Arc::clone(&shared.requests).try_acquire_owned() else {
        let cap = shared.limits.max_concurrent_requests;
        return Err(Stop::Reply(Reply::retry(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests_in_flight",
            format!(
                "stet gateway: {cap} model requests of this dispatch are already in flight (model.max_concurrent_requests); retry when one finishes"
            ),
            format!(
                "{label}: held back, {cap} requests are already in flight, the most one dispatch may have (429)"
            ),
        )));
    };

    let (parts, body) = request.into_parts();
    // A query string goes around the body's policy: LiteLLM runs the model `?model=` names over
    // the body's. The one a client stet runs sends is Anthropic's SDK's mark of its beta client,
    // `?beta=true` on every Messages request of Claude Code: that exact query passes (and is
    // forwarded), any other is refused.
    if let (Some(api), Some(query)) = (route.api(), parts.uri.query())
        && !(api == policy::WireApi::Messages && query == "beta=true")
    {
        return Err(Stop::Policy(policy::Refusal {
            api,
            field: "(query string)".to_owned(),
            value_kind: "query",
            shown: None,
            rule: policy::Rule::Undocumented,
        }));
    }
    if let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING)
        && !encoding.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        return Err(Stop::Reply(Reply::error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_encoding_not_supported",
            "stet gateway: send the request body uncompressed (no Content-Encoding); stet checks every body before it is forwarded".to_owned(),
            format!(
                "{label}: refused, its body is compressed (Content-Encoding), which stet does not decode before its request policy (415)"
            ),
        )));
    }
    let (body, held_bytes) = read_body(shared, &parts.headers, body, deadline)
        .await
        .map_err(|unread| Stop::Reply(unread.reply(label)))?;
    // The request policy: what goes upstream is its re-serialization, never the agent's bytes.
    let (body, enabled) = match route.api() {
        None if body.is_empty() => (body, Vec::new()),
        None => {
            return Err(Stop::Reply(Reply::error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("stet gateway: {label} takes no body"),
                format!("{label}: refused, it carries a body (400)"),
            )));
        }
        Some(api) => match shared.policy.check(api, &body) {
            Ok(checked) => (Bytes::from(checked.body), checked.provider_calls),
            Err(refusal) => return Err(Stop::Policy(refusal)),
        },
    };

    let Ok(uri) = shared.upstream.uri(route.rest(), parts.uri.query()) else {
        return Err(Stop::Reply(Reply::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "stet gateway: the query string is not valid".to_owned(),
            format!("{label}: refused, its query string is not a valid URL part (400)"),
        )));
    };
    let bounded = shared.ceiling_usd.is_some();
    let mut prepared = prepare(route, body, &shared.prices, bounded, &enabled)
        .map_err(|unbounded| Stop::Reply(words::unbounded(label, &unbounded)))?;
    let hold = ledger::admit(
        Arc::clone(shared) as Arc<dyn ledger::Reporter>,
        label,
        prepared.worst.as_ref(),
        prepared.model.as_deref(),
    )
    .map_err(Stop::Reply)?;
    let body = prepared.body(route, hold.as_ref().and_then(Hold::output_cap));
    if let Some(api) = route.api() {
        for call in enabled {
            shared.egress(api, call);
        }
    }
    let headers = upstream_headers(
        &parts.headers,
        route.shape(),
        shared.keys.as_ref(),
        body.len(),
    );
    let mut upstream_request = Request::new(Full::new(body));
    *upstream_request.method_mut() = parts.method;
    *upstream_request.uri_mut() = uri;
    *upstream_request.headers_mut() = headers;
    let admitted = Admitted {
        hold,
        model: prepared.model,
        bill: prepared.bill,
        held_bytes,
        in_flight,
    };
    Ok((upstream_request, admitted))
}

/// Sends an admitted request upstream and waits for its response head, within the request's
/// deadline. A request that never connected is settled at nothing; one cut after it was sent, at
/// its reservation.
async fn forward(
    shared: &Shared,
    label: &str,
    upstream_request: Request<Full<Bytes>>,
    admitted: &mut Admitted,
    deadline: tokio::time::Instant,
) -> Result<Response<Incoming>, Reply> {
    match tokio::time::timeout_at(deadline, shared.client.request(upstream_request)).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(err)) => {
            // A request that never connected cost nothing; one cut after it was sent may have.
            if let Some(hold) = admitted.hold.take() {
                hold.close(err.is_connect().then_some(0.0));
            }
            Err(Reply::error(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                "stet gateway: the model upstream could not be reached".to_owned(),
                format!(
                    "{label}: the model upstream could not be reached: {} (502)",
                    error_chain(&err)
                ),
            ))
        }
        Err(_) => {
            let timeout = shared.request_timeout;
            Err(Reply::error(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                format!("stet gateway: the model upstream did not answer within {timeout:?}"),
                format!("{label}: the model upstream did not answer within {timeout:?} (504)"),
            ))
        }
    }
}

/// Hands the upstream's response to the agent through the meter (a success on a metered route is
/// read for usage by its wire API as it passes), which settles the request's hold when the body
/// concludes. A response that is not a success settles at once.
fn settle(
    shared: Arc<Shared>,
    route: Route,
    label: String,
    start: Instant,
    deadline: tokio::time::Instant,
    admitted: Admitted,
    response: Response<Incoming>,
) -> Response<GatewayBody> {
    let status = response.status();
    report_status(&shared, &label, status, response.headers());
    let header_cost = response
        .headers()
        .get(usage::LITELLM_COST_HEADER)
        .and_then(|value| usage::header_cost(value.as_bytes()));
    if header_cost.is_some() {
        shared.ledger.endpoint_reports_cost();
    }
    let meter = match route.wire() {
        Some(wire) if status.is_success() => {
            if is_event_stream(response.headers()) {
                Meter::Sse(wire.stream_usage())
            } else {
                Meter::json(wire)
            }
        }
        _ => Meter::Off,
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let Admitted {
        in_flight,
        held_bytes,
        hold,
        model,
        bill,
    } = admitted;
    let hold = match hold {
        // A refusal by the upstream (4xx but 408) is not billed unless it says otherwise; a timeout
        // or a failure (408, 5xx) may come after the provider did the work, so it counts its
        // reservation.
        Some(hold) if !status.is_success() => {
            let refused = status.is_client_error() && status != StatusCode::REQUEST_TIMEOUT;
            hold.close(header_cost.or(refused.then_some(0.0)));
            None
        }
        hold => hold,
    };
    // The body went upstream with the request: its bytes are no longer held.
    drop(held_bytes);
    let report = Report {
        shared,
        label,
        request_model: model,
        bill,
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

/// Whether a response is a server-sent event stream.
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The reply to a request on a route the gateway does not serve.
fn not_served(label: &str) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "stet gateway: {label} is not served; the routes are POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens and GET /v1/models (batches, files and stored responses are not: stet meters each request as it passes)"
        ),
        format!("{label}: refused, not a route the gateway serves (404)"),
    )
}

/// The reply to a request on a route of another wire API than the dispatch's (`[model] api`).
fn other_api(label: &str, spoken: policy::WireApi) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "stet gateway: {label} is not served: this dispatch's agent speaks the {} API ([model] api = \"{}\")",
            spoken.name(),
            spoken.as_str()
        ),
        format!(
            "{label}: refused, not the {} API this dispatch speaks (404)",
            spoken.name()
        ),
    )
}

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

/// Reads an agent request for the ledger and makes it meterable: a stream is made to report its
/// usage as its wire API asks (`Wire::ask_stream_usage`), so that no streamed request goes unmetered.
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
    let Some(wire) = route.wire() else {
        return Ok(unread(raw, None));
    };
    let unpriced = || WorstCase::Unpriced {
        model: String::new(),
    };
    // The walk feeds only the worst case and the refusals, which matter under a ceiling alone.
    let found = if bounded {
        scan::scan(&raw, wire.api())
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
    if wire.ask_stream_usage(&mut fields) {
        rewrite = true;
    }
    let bill = ToolBill::of(wire.api(), enabled, typed::<u64>(&fields, "max_tool_calls"));
    if let Some(calls) = bill.as_ref().and_then(ToolBill::max_tool_calls) {
        // The calls reserved are the calls the provider may make: the bound is sent whatever the
        // request held there.
        set_field(&mut fields, "max_tool_calls", &Value::from(calls));
        rewrite = true;
    }
    if bounded && let Some(reason) = unbounded_part(wire, &fields, &found, enabled) {
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
                input_usd: input_tokens as f64 * wire.input_price(price) / 1_000_000.0
                    + predicted * price.output * choices as f64 / 1_000_000.0,
                per_output_token_usd: price.output * choices as f64 / 1_000_000.0,
                asked_output_tokens: wire
                    .output_fields(&fields)
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
        if let (Some(cap), Some(wire)) = (cap, route.wire()) {
            // Every output field gets the reserved count, whatever it held: a value stet reads
            // one way and the upstream another (`"1e6"`, `1000000.0`) is not left in place.
            wire.cap_output(&mut fields, cap);
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

/// The service tiers billed at the table's price or below (`auto` follows the user's project).
const PRICED_TIERS: &[&str] = &["auto", "default", "flex", "standard_only"];

/// What in a request makes its cost unknowable before its response, said as the refusal says it.
/// A provider tool or field the configuration enables (`enabled`) is priced per call.
fn unbounded_part(
    wire: &dyn Wire,
    fields: &Fields,
    found: &scan::Found,
    enabled: &[ProviderCall],
) -> Option<String> {
    let is_enabled = |name: &str| enabled.iter().any(|call| call.name == name);
    // The policy's allowlist of the route's API, which every field it admits is priced by or costs
    // nothing under: a proxy reads fields of its own that change the model or the price (LiteLLM's
    // `fallbacks`, `mock_testing_fallbacks`, `api_base`, …), and none is on it.
    let known = policy::forwarded_fields(wire.api());
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
            "its `service_tier` is billed above the price table (only auto, default, flex and standard_only are)"
                .to_owned(),
        );
    }
    if let Some(part) = &found.unbounded_media {
        return Some(format!(
            "a `{}` part is read by the provider at a size stet cannot see",
            shown_text(part)
        ));
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

/// The agent's headers as sent upstream: only those the route's wire API passes
/// ([`Wire::passed_header`]: `Accept`, `User-Agent`, the SDKs' `X-Stainless-*`, and `OpenAI-Beta`
/// or a known `anthropic-version` and the allowed `anthropic-beta` values). Everything else stays
/// behind: credentials (`Authorization`, `x-api-key`: the sandbox's placeholder never leaves) and
/// cookies, hop-by-hop headers, `Content-Encoding`, and the headers by which a client steers its
/// upstream (LiteLLM's `x-litellm-*` timeouts and retries, `OpenAI-Organization` and
/// `OpenAI-Project`, which bill elsewhere, an `anthropic-beta` that changes prices), and
/// `Content-Type`: a body is the policy's JSON and goes as `application/json`, since LiteLLM reads a
/// body sent as a form as form fields, which the JSON's strings could then smuggle (`…&model=…&`).
/// `Content-Length` is recomputed, `Accept-Encoding: identity` (the meter reads the bytes as they
/// pass) and the host's key, in the header the wire API reads it from, are added.
fn upstream_headers(
    agent: &HeaderMap,
    wire: &dyn Wire,
    keys: Option<&super::Keys>,
    body_len: usize,
) -> HeaderMap {
    let named_by_connection = connection_named(agent);
    let mut headers = HeaderMap::with_capacity(agent.len() + 3);
    for (name, value) in agent {
        if named_by_connection.contains(name) {
            continue;
        }
        if let Some(value) = wire.passed_header(name, value) {
            headers.append(name.clone(), value);
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
    if let Some(keys) = keys {
        match wire.key_header() {
            KeyHeader::Bearer => {
                headers.insert(header::AUTHORIZATION, keys.bearer.clone());
            }
            KeyHeader::XApiKey => {
                headers.insert(X_API_KEY, keys.x_api_key.clone());
            }
        }
    }
    headers
}

/// Anthropic's key header.
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

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

#[cfg(test)]
mod tests;
