//! What the scripted model answers besides a turn's reply: the model list, the misbehaviours it can
//! be told to play (a body that breaks off, a stream cut short) and the response builders every
//! route shares (plain, JSON, errors in each API's shape, server-sent events).

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};

use super::{Body, DEMO_MODEL, Route, chat_completion, chat_events, is_streaming, wire};

pub(crate) fn models() -> Value {
    json!({
        "object": "list",
        "data": [{ "id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "stet" }],
    })
}

/// A 200 whose JSON breaks off: a streamed reply's first event, or a plain body.
pub(crate) fn malformed(route: Route, body: &Value) -> Response<Body> {
    if matches!(route, Route::Responses | Route::Messages) && is_streaming(body) {
        let kind = if route == Route::Messages {
            "message_start"
        } else {
            "response.created"
        };
        named_sse_response(vec![(
            kind.to_owned(),
            format!("{{\"type\": \"{kind}\", \"x"),
        )])
    } else if route == Route::ChatCompletions && is_streaming(body) {
        sse_response(vec![
            "{\"id\": \"chatcmpl-stet\", \"choices\": [".to_owned(),
            "[DONE]".to_owned(),
        ])
    } else {
        let mut response =
            full_response(StatusCode::OK, Bytes::from_static(b"{\"id\": \"x\", \"ch"));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// A 200 whose body stops part-way, after which the connection breaks.
pub(crate) fn cut(
    route: Route,
    body: &Value,
    number: u64,
    request_bytes: usize,
    per_tool: u64,
) -> Response<Body> {
    let (content_type, first_part) = match route {
        Route::ChatCompletions if is_streaming(body) => {
            let first = chat_events(body, number, request_bytes)
                .into_iter()
                .next()
                .unwrap_or_default();
            ("text/event-stream", format!("data: {first}\n\n"))
        }
        Route::ChatCompletions => (
            "application/json",
            half(chat_completion(body, number, request_bytes).to_string()),
        ),
        Route::Responses | Route::Messages if is_streaming(body) => {
            let events = if route == Route::Messages {
                wire::message_events(body, number, request_bytes)
            } else {
                wire::response_events(body, number, request_bytes, per_tool)
            };
            let (name, data) = events.into_iter().next().unwrap_or_default();
            (
                "text/event-stream",
                format!("event: {name}\ndata: {data}\n\n"),
            )
        }
        Route::Responses => (
            "application/json",
            half(wire::response(body, number, request_bytes, per_tool).to_string()),
        ),
        Route::Messages => (
            "application/json",
            half(wire::message(body, number, request_bytes).to_string()),
        ),
        Route::Models | Route::CountTokens => ("application/json", half(models().to_string())),
    };
    let first = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(Frame::data(Bytes::from(first_part)))
    });
    let broken = futures_util::stream::once(async {
        // Waiting once lets the connection send the head and the first part (it flushes whenever
        // the body waits), so the client sees a reply that breaks off rather than none at all.
        tokio::task::yield_now().await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the scripted model cut the reply",
        ))
    });
    let mut response =
        Response::new(StreamBody::new(futures_util::StreamExt::chain(first, broken)).boxed());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The first half of `text` (on a character boundary).
fn half(mut text: String) -> String {
    let mut end = text.len() / 2;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

fn full_response(status: StatusCode, bytes: Bytes) -> Response<Body> {
    let mut response = Response::new(
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = full_response(status, Bytes::from(value.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An OpenAI-style error: `{"error": {"message", "type", "code"}}`.
pub(crate) fn error_response(status: StatusCode, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({
            "error": {
                "message": message,
                "type": "scripted_model_error",
                "code": status.as_u16(),
            }
        }),
    )
}

/// An error in the shape the route's API uses: Anthropic's for Messages, OpenAI's otherwise.
pub(crate) fn route_error(route: Route, status: StatusCode, message: &str) -> Response<Body> {
    if !matches!(route, Route::Messages | Route::CountTokens) {
        return error_response(status, message);
    }
    json_response(
        status,
        &json!({
            "type": "error",
            "error": { "type": "scripted_model_error", "message": message },
        }),
    )
}

/// Named server-sent events, as the Responses and Messages APIs send them: one frame per
/// `(event, data)`.
pub(crate) fn named_sse_response(events: Vec<(String, String)>) -> Response<Body> {
    sse_frames(
        events
            .into_iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect(),
    )
}

/// Server-sent events, one frame per `data:` payload.
pub(crate) fn sse_response(events: Vec<String>) -> Response<Body> {
    sse_frames(
        events
            .into_iter()
            .map(|event| format!("data: {event}\n\n"))
            .collect(),
    )
}

/// A `text/event-stream` response sending each of `frames` as a frame of its own.
fn sse_frames(frames: Vec<String>) -> Response<Body> {
    let frames = frames
        .into_iter()
        .map(|frame| Ok::<_, std::io::Error>(Frame::data(Bytes::from(frame))));
    let mut response = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
