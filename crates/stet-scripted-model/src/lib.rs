//! A deterministic OpenAI-compatible model server on loopback: the upstream of `stet demo` and of
//! the gateway's tests, so that the whole model path (agent → relay → gateway → upstream) runs with
//! no account and no network. Its replies and their `usage` follow from the requests alone (and
//! their order), it records every request it receives, and it can be told to misbehave (429, 500,
//! malformed JSON, a stream cut short, no answer at all) so the gateway's handling of each can be
//! tested.
//!
//! Routes: `POST /v1/chat/completions` (plain JSON, or server-sent events with `"stream": true`,
//! ending with a usage chunk when `stream_options.include_usage` is true), `POST /v1/responses` and
//! Anthropic's `POST /v1/messages` (plain JSON, or with `"stream": true` the named server-sent events
//! the real APIs send, usage in their last event; a Responses reply reports a call of each
//! provider-executed tool its request enables, [`ScriptedModel::set_tool_calls`]),
//! `POST /v1/messages/count_tokens` and `GET /v1/models`. Any other path is 404, and every request, whatever its path, is recorded with
//! its body as received.
//!
//! Scripted agent turns ([`ScriptedModel::set_turns`], `turns`): the Responses and Messages routes
//! then answer each request with the turn its conversation has reached (tool calls or text, plain
//! or streamed), for the live suites of the Codex CLI and Claude Code. [`ScriptedModel::expect_key`]
//! makes it check that every request carries the real key in its API's header (`Authorization:
//! Bearer` on OpenAI's routes, `x-api-key` on Anthropic's), answering 401 and counting any that does
//! not.
//! Replies are numbered ("step N: …") per conversation: a request naming its end user (`user`, or
//! Anthropic's `metadata.user_id`) counts among that user's requests, so each run of the scripted
//! agent, which names itself once per run, starts again at step 1 however many runs share the
//! server (as the dispatches of one `stet demo` do); requests naming nobody share one count.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

mod conversation;
mod replies;
mod turns;
mod wire;

use conversation::{Asked, end_user};
use replies::{
    cut, error_response, json_response, malformed, models, named_sse_response, route_error,
    sse_response,
};
pub use turns::{Call, CallInput, SentUsage, Turn, tool_outputs};

/// The model the scripted server lists and the demo's scenarios name.
pub const DEMO_MODEL: &str = "stet-demo-model";

/// The header LiteLLM reports a response's cost in, in dollars.
pub const COST_HEADER: &str = "x-litellm-response-cost";

/// The largest request body read; a larger one is refused with 413.
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// How many characters of the question a reply quotes.
const QUOTED_CHARS: usize = 60;

/// How many content chunks a streamed reply is split into (fewer when it is shorter).
const STREAM_PIECES: usize = 3;

/// The fixed part of every request's prompt tokens (a system prompt the scripted model pretends to
/// have).
const PROMPT_TOKEN_BASE: u64 = 50;

/// Roughly how many bytes of text make one token.
const BYTES_PER_TOKEN: usize = 4;

type Body = BoxBody<Bytes, std::io::Error>;

/// What the scripted model received: one HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The request's path, without its query.
    pub path: String,
    /// The request's query string, when it has one.
    pub query: Option<String>,
    /// Every header, names in lower case, values as (lossy) text, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when empty, a JSON string holding the text when it is not JSON.
    pub body: Value,
    /// The body's bytes exactly as received (a duplicated key, which `body` resolves, shows here).
    pub raw: Bytes,
}

impl ModelRequest {
    /// The value of the first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }
}

/// How the scripted model answers the requests on its routes from now on (tests use the
/// misbehaviours; the default is [`Behaviour::Normal`]). Unknown paths are 404 whatever the
/// behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Behaviour {
    /// Deterministic replies with usage.
    #[default]
    Normal,
    /// 429 with `Retry-After` and an OpenAI-style error body.
    TooManyRequests {
        /// The `Retry-After` it sends, in seconds.
        retry_after_secs: u64,
    },
    /// 500 with an OpenAI-style error body.
    ServerError,
    /// 200 whose body (or, streaming, whose first event) is not valid JSON.
    MalformedJson,
    /// 200 whose body stops part-way and the connection breaks: a stream cut mid-way.
    CutStream,
    /// Receives the request and never answers.
    Stall,
}

/// What the server shares with its connections.
#[derive(Debug)]
struct State {
    requests: Mutex<Vec<ModelRequest>>,
    /// Signalled each time a request is recorded ([`ScriptedModel::wait_for_requests`]).
    recorded: Condvar,
    behaviour: Mutex<Behaviour>,
    cost_usd: Mutex<Option<f64>>,
    /// How many calls a Responses reply makes of each provider-executed tool its request enables.
    tool_calls: AtomicU64,
    /// Requests on the completion routes so far, per conversation: numbers the replies.
    asked: Mutex<Asked>,
    /// The scripted turns of the Responses and Messages routes, when set.
    turns: Mutex<Option<Vec<Turn>>>,
    /// The key every request must carry, when set.
    key: Mutex<Option<String>>,
    /// Requests that did not carry it.
    key_mismatches: AtomicU64,
    /// The usage each turn's reply reported.
    sent: Mutex<Vec<SentUsage>>,
}

impl Default for State {
    fn default() -> State {
        State {
            requests: Mutex::default(),
            recorded: Condvar::new(),
            behaviour: Mutex::default(),
            cost_usd: Mutex::default(),
            tool_calls: AtomicU64::new(1),
            asked: Mutex::default(),
            turns: Mutex::default(),
            key: Mutex::default(),
            key_mismatches: AtomicU64::new(0),
            sent: Mutex::default(),
        }
    }
}

impl State {
    fn behaviour(&self) -> Behaviour {
        *self
            .behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn cost_usd(&self) -> Option<f64> {
        *self.cost_usd.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A scripted model serving in a background task; stopped by [`ScriptedModel::shutdown`] or when
/// dropped.
#[derive(Debug)]
pub struct ScriptedModel {
    address: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ScriptedModel {
    /// Serves on `addr` (e.g. `127.0.0.1:0`) in a background task of the current runtime.
    pub async fn serve(addr: SocketAddr) -> std::io::Result<ScriptedModel> {
        let listener = TcpListener::bind(addr).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(State::default());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept(listener, Arc::clone(&state), stopped));
        Ok(ScriptedModel {
            address,
            state,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The OpenAI-style base URL: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Blocks the calling thread until `count` requests were received (true) or `timeout` passed
    /// (false): how a test knows a request it holds has arrived, without polling.
    pub fn wait_for_requests(&self, count: usize, timeout: Duration) -> bool {
        let requests = self
            .state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (requests, _) = self
            .state
            .recorded
            .wait_timeout_while(requests, timeout, |requests| requests.len() < count)
            .unwrap_or_else(PoisonError::into_inner);
        requests.len() >= count
    }

    /// How the next responses behave.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self
            .state
            .behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = behaviour;
    }

    /// When `Some`, successful completions carry [`COST_HEADER`] with this many dollars.
    pub fn set_cost_header(&self, usd: Option<f64>) {
        *self
            .state
            .cost_usd
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = usd;
    }

    /// How many calls a Responses reply reports of each provider-executed tool (web search, remote
    /// MCP, file search, code interpreter, image generation) its request enables, at most the
    /// request's `max_tool_calls` in all; 1 until set.
    pub fn set_tool_calls(&self, per_tool: u64) {
        self.state.tool_calls.store(per_tool, Ordering::SeqCst);
    }

    /// From now on the Responses and Messages routes answer from `turns`: a request whose
    /// conversation holds `n` tool outputs ([`tool_outputs`]) gets `turns[n]`, a request past the
    /// script the text "No more turns.".
    pub fn set_turns(&self, turns: Vec<Turn>) {
        *self
            .state
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(turns);
    }

    /// From now on every request must carry `key`: as `Authorization: Bearer <key>` on the OpenAI
    /// routes, as `x-api-key: <key>` on `/v1/messages`; one that does not is answered 401 in its
    /// API's shape and counted ([`ScriptedModel::key_mismatches`]).
    pub fn expect_key(&self, key: &str) {
        *self
            .state
            .key
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(key.to_owned());
    }

    /// How many requests came without the expected key (a placeholder, another header, none).
    pub fn key_mismatches(&self) -> u64 {
        self.state.key_mismatches.load(Ordering::SeqCst)
    }

    /// The usage each scripted turn's reply reported, in order.
    pub fn sent_usage(&self) -> Vec<SentUsage> {
        self.state
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops accepting, cuts the open connections (stalled ones included) and waits for the server
    /// task to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Accepts connections until `stopped`, serving each in its own task; then ends them all.
async fn accept(listener: TcpListener, state: Arc<State>, mut stopped: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = accepted else {
            // A connection that failed before it was accepted concerns no one else.
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
    connections.shutdown().await;
}

/// The routes the scripted model serves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    ChatCompletions,
    Responses,
    Messages,
    /// Anthropic's `POST /v1/messages/count_tokens`: `{"input_tokens": n}`, free.
    CountTokens,
    Models,
}

/// Records `request` and answers it as the current behaviour says.
async fn answer(state: &State, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("cannot read the request body: {error}"),
            );
        }
    };
    let raw = bytes.clone();
    let raw_bytes = bytes.clone();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let path = parts.uri.path().to_owned();
    state
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(ModelRequest {
            path: path.clone(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.clone(),
            raw,
        });
    state.recorded.notify_all();

    let (route, method) = match path.as_str() {
        "/v1/chat/completions" => (Route::ChatCompletions, Method::POST),
        "/v1/responses" => (Route::Responses, Method::POST),
        "/v1/messages" => (Route::Messages, Method::POST),
        "/v1/messages/count_tokens" => (Route::CountTokens, Method::POST),
        "/v1/models" => (Route::Models, Method::GET),
        _ => {
            return error_response(
                StatusCode::NOT_FOUND,
                &format!("no route {path} on the scripted model"),
            );
        }
    };
    if parts.method != method {
        return error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{path} takes {method}, not {}", parts.method),
        );
    }
    let expected = state
        .key
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(key) = expected {
        let carried = if matches!(route, Route::Messages | Route::CountTokens) {
            parts.headers.get("x-api-key").map(HeaderValue::as_bytes) == Some(key.as_bytes())
                && parts.headers.get(header::AUTHORIZATION).is_none()
        } else {
            parts
                .headers
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes)
                == Some(format!("Bearer {key}").as_bytes())
                && parts.headers.get("x-api-key").is_none()
        };
        if !carried {
            state.key_mismatches.fetch_add(1, Ordering::SeqCst);
            return route_error(
                route,
                StatusCode::UNAUTHORIZED,
                "the scripted model did not receive its key in this API's header",
            );
        }
    }
    let number = if matches!(route, Route::Models | Route::CountTokens) {
        0
    } else {
        state
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next(end_user(&body))
    };
    let per_tool = state.tool_calls.load(Ordering::SeqCst);
    let error_response = |status, message: &str| route_error(route, status, message);
    match state.behaviour() {
        Behaviour::Normal => {}
        Behaviour::TooManyRequests { retry_after_secs } => {
            let mut response = error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "rate limited by the scripted model",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return response;
        }
        Behaviour::ServerError => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the scripted model failed",
            );
        }
        Behaviour::MalformedJson => return malformed(route, &body),
        Behaviour::CutStream => return cut(route, &body, number, bytes.len(), per_tool),
        Behaviour::Stall => return std::future::pending().await,
    }
    // A scripted turn's answer is a completion like any other: it carries the cost header too.
    let scripted = scripted_turn(state, route, &body, number, &raw_bytes).await;
    let mut response = match (scripted, route) {
        (Some(response), _) => response,
        (None, Route::Models) => return json_response(StatusCode::OK, &models()),
        (None, Route::CountTokens) => {
            let tokens = (bytes.len() / BYTES_PER_TOKEN) as u64 + PROMPT_TOKEN_BASE;
            return json_response(StatusCode::OK, &json!({ "input_tokens": tokens }));
        }
        (None, Route::ChatCompletions) if is_streaming(&body) => {
            sse_response(chat_events(&body, number, bytes.len()))
        }
        (None, Route::ChatCompletions) => {
            json_response(StatusCode::OK, &chat_completion(&body, number, bytes.len()))
        }
        (None, Route::Responses) if is_streaming(&body) => {
            named_sse_response(wire::response_events(&body, number, bytes.len(), per_tool))
        }
        (None, Route::Responses) => {
            let reply = wire::response(&body, number, bytes.len(), per_tool);
            json_response(StatusCode::OK, &reply)
        }
        (None, Route::Messages) if is_streaming(&body) => {
            named_sse_response(wire::message_events(&body, number, bytes.len()))
        }
        (None, Route::Messages) => {
            json_response(StatusCode::OK, &wire::message(&body, number, bytes.len()))
        }
    };
    if let Some(usd) = state.cost_usd()
        && let Ok(value) = HeaderValue::from_str(&usd.to_string())
    {
        response.headers_mut().insert(COST_HEADER, value);
    }
    response
}

/// The answer of a scripted turn on the Responses and Messages routes, when turns are set.
async fn scripted_turn(
    state: &State,
    route: Route,
    body: &Value,
    number: u64,
    raw: &Bytes,
) -> Option<Response<Body>> {
    if !matches!(route, Route::Responses | Route::Messages) {
        return None;
    }
    let turn = {
        let turns = state.turns.lock().unwrap_or_else(PoisonError::into_inner);
        let turns = turns.as_ref()?;
        turns
            .get(tool_outputs(body))
            .cloned()
            .unwrap_or_else(|| Turn::text("No more turns."))
    };
    if turn == Turn::Hold {
        return std::future::pending().await;
    }
    let reply = if route == Route::Messages {
        turns::message(body, &turn, number, raw.len(), raw)
    } else {
        turns::response(body, &turn, number, raw.len())
    };
    state
        .sent
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(reply.usage);
    Some(if is_streaming(body) {
        named_sse_response(reply.events)
    } else {
        json_response(StatusCode::OK, &reply.body)
    })
}

/// The first [`QUOTED_CHARS`] characters of `question`; a longer one ends at the last whole word
/// that fits, marked `…` (a word longer than the quote is cut where the quote ends).
fn quote(question: &str) -> String {
    if question.chars().count() <= QUOTED_CHARS {
        return question.to_owned();
    }
    let head: String = question.chars().take(QUOTED_CHARS).collect();
    let next_starts_a_word = question
        .chars()
        .nth(QUOTED_CHARS)
        .is_some_and(char::is_whitespace);
    let whole = if next_starts_a_word {
        head.as_str()
    } else {
        head.rsplit_once(char::is_whitespace)
            .map_or(head.as_str(), |(words, _)| words)
    };
    format!("{}…", whole.trim_end())
}

fn is_streaming(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The reply to a completion request, whether it was cut at the request's token limit, and its
/// usage.
struct Reply {
    text: String,
    truncated: bool,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl Reply {
    /// "step N: <the question's first 60 characters, at a word's end>", cut to the request's output token
    /// `limit` when it has one; tokens from the request's and the reply's sizes.
    fn to(question: Option<String>, limit: Option<u64>, number: u64, request_bytes: usize) -> Self {
        let quoted = question
            .as_deref()
            .map_or_else(|| "(no question)".to_owned(), |text| quote(text.trim()));
        let mut text = format!("step {number}: {quoted}");
        let mut truncated = false;
        if let Some(limit) = limit {
            let allowed = usize::try_from(limit)
                .unwrap_or(usize::MAX)
                .saturating_mul(BYTES_PER_TOKEN);
            if text.len() > allowed {
                let mut end = allowed;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                truncated = true;
            }
        }
        Reply {
            prompt_tokens: (request_bytes / BYTES_PER_TOKEN) as u64 + PROMPT_TOKEN_BASE,
            completion_tokens: text.len().div_ceil(BYTES_PER_TOKEN) as u64,
            text,
            truncated,
        }
    }

    fn chat_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": { "cached_tokens": 0 },
        })
    }

    fn finish_reason(&self) -> &'static str {
        if self.truncated { "length" } else { "stop" }
    }
}

/// The text of a message's `content`: a string, or the text parts of an array.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The last user message of a list of messages or input items.
fn last_user_text(items: &[Value]) -> Option<String> {
    items
        .iter()
        .rev()
        .find(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|item| item.get("content"))
        .and_then(content_text)
}

fn model_name(body: &Value) -> &str {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEMO_MODEL)
}

fn chat_reply(body: &Value, number: u64, request_bytes: usize) -> Reply {
    let question = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| last_user_text(messages));
    let limit = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|field| body.get(*field).and_then(Value::as_u64));
    Reply::to(question, limit, number, request_bytes)
}

fn chat_completion(body: &Value, number: u64, request_bytes: usize) -> Value {
    let reply = chat_reply(body, number, request_bytes);
    json!({
        "id": format!("chatcmpl-stet-{number}"),
        "object": "chat.completion",
        "created": 0,
        "model": model_name(body),
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": reply.text },
            "finish_reason": reply.finish_reason(),
        }],
        "usage": reply.chat_usage(),
    })
}

/// The `data:` payloads of a streamed chat completion, `[DONE]` last.
fn chat_events(body: &Value, number: u64, request_bytes: usize) -> Vec<String> {
    let reply = chat_reply(body, number, request_bytes);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let model = model_name(body);
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut chunk = json!({
            "id": format!("chatcmpl-stet-{number}"),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": choices,
        });
        if include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        chunk.to_string()
    };
    let characters: Vec<char> = reply.text.chars().collect();
    let piece = characters.len().div_ceil(STREAM_PIECES).max(1);
    let mut events: Vec<String> = characters
        .chunks(piece)
        .enumerate()
        .map(|(index, piece)| {
            let content: String = piece.iter().collect();
            let delta = if index == 0 {
                json!({ "role": "assistant", "content": content })
            } else {
                json!({ "content": content })
            };
            chunk(
                json!([{ "index": 0, "delta": delta, "finish_reason": null }]),
                None,
            )
        })
        .collect();
    events.push(chunk(
        json!([{ "index": 0, "delta": {}, "finish_reason": reply.finish_reason() }]),
        None,
    ));
    if include_usage {
        events.push(chunk(json!([]), Some(reply.chat_usage())));
    }
    events.push("[DONE]".to_owned());
    events
}

#[cfg(test)]
mod tests;
