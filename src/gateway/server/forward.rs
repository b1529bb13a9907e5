//! One agent request: routed, admitted (cost ceiling, size), rewritten (streamed usage, output cap),
//! sent upstream with the host's key, and its response handed back through the meter.
//!
//! Replies the gateway makes itself carry an OpenAI-style error body
//! (`{"error":{"message":..,"type":"stet_gateway","code":..}}`), so agents surface them as API errors:
//! 404 for a route it does not serve, 402 once the cost ceiling is reached (402 rather than 429, which
//! OpenAI clients retry: a ceiling does not lift by waiting), 413 for a body over 32 MiB, 400 for an
//! unreadable one, 408 when the agent's body does not arrive in time, 502 when the upstream cannot be
//! reached and 504 when it does not answer within the request timeout. The upstream's own statuses
//! (429 with `Retry-After`, 5xx, …) pass through unchanged.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};

use super::Shared;
use super::metered::{Meter, MeteredBody, Report};
use crate::gateway::prices::PriceTable;
use crate::gateway::usage::{self, SseScanner};

/// A body the gateway sends the agent: its own error replies, or an upstream response passing through.
pub(super) type GatewayBody = BoxBody<Bytes, BoxError>;
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest request body forwarded.
const MAX_REQUEST_BODY: usize = 32 * 1024 * 1024;

/// The longest request path an event or error body repeats.
const MAX_SHOWN_PATH: usize = 160;

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

    let (parts, body) = request.into_parts();
    let collected =
        tokio::time::timeout_at(deadline, Limited::new(body, MAX_REQUEST_BODY).collect()).await;
    let body = match collected {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            let limit = MAX_REQUEST_BODY >> 20;
            shared.error(&format!(
                "{label}: refused, the request body is over {limit} MiB (413)"
            ));
            return error_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                &format!("stet gateway: request bodies are limited to {limit} MiB"),
            );
        }
        Ok(Err(err)) => {
            let detail = describe(&*err);
            shared.error(&format!(
                "{label}: the agent's request body could not be read: {detail} (400)"
            ));
            return error_reply(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "stet gateway: the request body could not be read",
            );
        }
        Err(_) => {
            let timeout = shared.request_timeout;
            shared.error(&format!(
                "{label}: the agent's request body did not arrive within {timeout:?} (408)"
            ));
            return error_reply(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "stet gateway: the request body did not arrive in time",
            );
        }
    };

    let prepared = prepare(route, body, &shared.prices, shared.remaining_usd());
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
    let headers = upstream_headers(
        &parts.headers,
        shared.authorization.as_ref(),
        prepared.body.len(),
    );
    let mut upstream_request = Request::new(Full::new(prepared.body));
    *upstream_request.method_mut() = parts.method;
    *upstream_request.uri_mut() = uri;
    *upstream_request.headers_mut() = headers;

    let response =
        match tokio::time::timeout_at(deadline, shared.client.request(upstream_request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => {
                shared.error(&format!(
                    "{label}: the model upstream could not be reached: {} (502)",
                    describe(&err)
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
    let report = Report {
        shared,
        label,
        request_model: prepared.model,
        header_cost,
        start,
    };
    Response::from_parts(
        parts,
        MeteredBody::new(body, deadline, meter, report).boxed(),
    )
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

/// An agent request body after the gateway's rewrites.
#[derive(Debug, PartialEq)]
struct Prepared {
    body: Bytes,
    /// The request's `model`, the pricing fallback when the response does not name one the table knows.
    model: Option<String>,
}

/// Rewrites a JSON request body where the gateway must; any other body passes unchanged.
///
/// * A chat-completions request with `"stream": true` and no `stream_options` gets
///   `"stream_options": {"include_usage": true}`, so the stream's last chunk carries usage. A client
///   that set `stream_options` itself is left alone: its choice stands, and a stream without usage is
///   reported as unmetered.
/// * Under a cost ceiling, when the table knows the model's output price, the output cap is set to the
///   most output tokens the remaining budget pays for (at least 1) unless the request already asks for
///   no more: `max_output_tokens` on `/v1/responses`; on chat completions, whichever of
///   `max_completion_tokens` and `max_tokens` the request names, else `max_tokens`. The cap counts
///   output alone (input is not known before the response), so a request may still end slightly past
///   the ceiling; it keeps one request from running far beyond it.
fn prepare(route: Route, body: Bytes, prices: &PriceTable, remaining_usd: Option<f64>) -> Prepared {
    let unchanged = |body: Bytes, model: Option<String>| Prepared { body, model };
    if !route.metered() {
        return unchanged(body, None);
    }
    let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(&body) else {
        return unchanged(body, None);
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut changed = false;

    if route == Route::ChatCompletions
        && request.get("stream") == Some(&Value::Bool(true))
        && !request.contains_key("stream_options")
    {
        request.insert(
            "stream_options".to_owned(),
            serde_json::json!({ "include_usage": true }),
        );
        changed = true;
    }

    let output_price = model
        .as_deref()
        .and_then(|m| prices.price(m))
        .map(|price| price.output);
    if let (Some(remaining), Some(per_million)) = (remaining_usd, output_price)
        && per_million > 0.0
    {
        let affordable = (remaining * 1_000_000.0 / per_million).floor();
        // `as` saturates; a budget this large caps nothing in practice.
        let cap = (affordable as u64).max(1);
        let fields: &[&str] = match route {
            Route::Responses => &["max_output_tokens"],
            _ => {
                let named: Vec<&str> = ["max_completion_tokens", "max_tokens"]
                    .into_iter()
                    .filter(|field| request.contains_key(*field))
                    .collect();
                if named.len() == 2 {
                    &["max_completion_tokens", "max_tokens"]
                } else if named == ["max_completion_tokens"] {
                    &["max_completion_tokens"]
                } else {
                    &["max_tokens"]
                }
            }
        };
        for field in fields {
            changed |= cap_field(&mut request, field, cap);
        }
    }

    if !changed {
        return unchanged(body, model);
    }
    match serde_json::to_vec(&Value::Object(request)) {
        Ok(rewritten) => Prepared {
            body: Bytes::from(rewritten),
            model,
        },
        Err(_) => unchanged(body, model),
    }
}

/// Sets `field` to `cap` unless it already holds a number no larger; true when it changed.
fn cap_field(request: &mut Map<String, Value>, field: &str, cap: u64) -> bool {
    let within = request
        .get(field)
        .and_then(Value::as_f64)
        .is_some_and(|asked| asked <= cap as f64);
    if within {
        return false;
    }
    request.insert(field.to_owned(), Value::from(cap));
    true
}

/// The agent's headers as sent upstream: its credentials and cookies, `Host`, hop-by-hop headers,
/// `Content-Length` (recomputed) and `Accept-Encoding` dropped; `Accept-Encoding: identity` (the meter
/// reads the bytes as they pass) and the host's `Authorization` added.
fn upstream_headers(
    agent: &HeaderMap,
    authorization: Option<&HeaderValue>,
    body_len: usize,
) -> HeaderMap {
    let named_by_connection = connection_named(agent);
    let mut headers = HeaderMap::with_capacity(agent.len() + 3);
    for (name, value) in agent {
        let dropped = is_hop_by_hop(name)
            || named_by_connection.contains(name)
            || matches!(
                name.as_str(),
                "authorization"
                    | "proxy-authorization"
                    | "cookie"
                    | "host"
                    | "content-length"
                    | "accept-encoding"
                    | "api-key"
                    | "x-api-key"
            );
        if !dropped {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if body_len > 0 {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
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

/// An error and its sources, joined: `client error (Connect): tcp connect error: Connection refused`.
pub(super) fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn prepared_json(route: Route, body: Value, remaining: Option<f64>) -> Value {
        let prepared = prepare(
            route,
            Bytes::from(body.to_string()),
            &PriceTable::builtin(),
            remaining,
        );
        serde_json::from_slice(&prepared.body).unwrap()
    }

    #[test]
    fn routes_are_exact() {
        assert_eq!(
            Route::of(&Method::POST, "/v1/chat/completions"),
            Some(Route::ChatCompletions)
        );
        assert_eq!(Route::of(&Method::GET, "/v1/models"), Some(Route::Models));
        assert_eq!(Route::of(&Method::GET, "/v1/chat/completions"), None);
        assert_eq!(Route::of(&Method::POST, "/v1/chat/completions/"), None);
        assert_eq!(Route::of(&Method::POST, "/v1/embeddings"), None);
        assert_eq!(Route::of(&Method::GET, "/v1/models/gpt-4o"), None);
    }

    #[test]
    fn streaming_chat_requests_ask_for_usage_unless_the_client_chose() {
        let body = prepared_json(
            Route::ChatCompletions,
            serde_json::json!({"model": "m", "stream": true}),
            None,
        );
        assert_eq!(
            body["stream_options"],
            serde_json::json!({"include_usage": true})
        );
        let body = prepared_json(
            Route::ChatCompletions,
            serde_json::json!({"model": "m", "stream": true, "stream_options": {"include_usage": false}}),
            None,
        );
        assert_eq!(
            body["stream_options"],
            serde_json::json!({"include_usage": false})
        );
        let body = prepared_json(
            Route::ChatCompletions,
            serde_json::json!({"model": "m"}),
            None,
        );
        assert!(body.get("stream_options").is_none());
        // The responses API reports usage in `response.completed` anyway.
        let body = prepared_json(
            Route::Responses,
            serde_json::json!({"model": "m", "stream": true}),
            None,
        );
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn the_output_cap_follows_the_remaining_budget() {
        // stet-demo-model: $15 per million output tokens; $0.0015 pays for 100.
        let chat = |body: Value| prepared_json(Route::ChatCompletions, body, Some(0.0015));
        assert_eq!(
            chat(serde_json::json!({"model": "stet-demo-model"}))["max_tokens"],
            100
        );
        assert_eq!(
            chat(serde_json::json!({"model": "stet-demo-model", "max_tokens": 40}))["max_tokens"],
            40
        );
        assert_eq!(
            chat(serde_json::json!({"model": "stet-demo-model", "max_tokens": 4000}))["max_tokens"],
            100
        );
        let both =
            chat(serde_json::json!({"model": "stet-demo-model", "max_completion_tokens": 500}));
        assert_eq!(both["max_completion_tokens"], 100);
        assert!(both.get("max_tokens").is_none());
        let responses = prepared_json(
            Route::Responses,
            serde_json::json!({"model": "openai/stet-demo-model"}),
            Some(0.0015),
        );
        assert_eq!(responses["max_output_tokens"], 100);
        assert!(responses.get("max_tokens").is_none());
        // Nearly nothing left still lets one token through; unknown models and no ceiling cap nothing.
        assert_eq!(
            prepared_json(
                Route::ChatCompletions,
                serde_json::json!({"model": "stet-demo-model"}),
                Some(0.0)
            )["max_tokens"],
            1
        );
        assert!(
            chat(serde_json::json!({"model": "unpriced"}))
                .get("max_tokens")
                .is_none()
        );
        assert!(
            prepared_json(
                Route::ChatCompletions,
                serde_json::json!({"model": "stet-demo-model"}),
                None
            )
            .get("max_tokens")
            .is_none()
        );
    }

    #[test]
    fn bodies_the_gateway_does_not_change_pass_byte_for_byte() {
        let raw = Bytes::from_static(b"{ \"model\" : \"m\",  \"messages\": [] }");
        let prepared = prepare(
            Route::ChatCompletions,
            raw.clone(),
            &PriceTable::builtin(),
            None,
        );
        assert_eq!(
            prepared,
            Prepared {
                body: raw,
                model: Some("m".to_owned())
            }
        );
        let garbage = Bytes::from_static(b"not json");
        let prepared = prepare(
            Route::ChatCompletions,
            garbage.clone(),
            &PriceTable::builtin(),
            Some(1.0),
        );
        assert_eq!(
            prepared,
            Prepared {
                body: garbage,
                model: None
            }
        );
    }

    #[test]
    fn agent_credentials_and_hop_by_hop_headers_stay_behind() {
        let mut agent = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer dummy"),
            ("proxy-authorization", "Basic x"),
            ("cookie", "a=b"),
            ("host", "127.0.0.1:4000"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("x-api-key", "dummy"),
            ("accept-encoding", "gzip"),
            ("content-length", "999"),
            ("content-type", "application/json"),
            ("openai-beta", "assistants=v2"),
        ] {
            agent.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let host_key = HeaderValue::from_static("Bearer host-side");
        let headers = upstream_headers(&agent, Some(&host_key), 12);
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "accept-encoding",
                "authorization",
                "content-length",
                "content-type",
                "openai-beta"
            ]
        );
        assert_eq!(headers[header::AUTHORIZATION], "Bearer host-side");
        assert_eq!(headers[header::ACCEPT_ENCODING], "identity");
        assert_eq!(headers[header::CONTENT_LENGTH], "12");
        let headers = upstream_headers(&agent, None, 0);
        assert!(headers.get(header::AUTHORIZATION).is_none());
        assert!(headers.get(header::CONTENT_LENGTH).is_none());
    }

    #[test]
    fn long_paths_are_shortened_on_a_char_boundary() {
        let path = format!("/v1/{}", "é".repeat(200));
        let shown = shown_path(&path);
        assert!(shown.len() <= MAX_SHOWN_PATH + '…'.len_utf8());
        assert!(shown.ends_with('…'));
        assert_eq!(shown_path("/v1/x"), "/v1/x");
    }
}
