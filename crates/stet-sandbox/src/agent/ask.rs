//! The scripted agent's side of the model conversation: `ask` steps post an OpenAI-style chat
//! completion to the model URL the harness gives it (in the sandbox, the relay on loopback, which
//! leads to the host gateway) and read the reply, plain or streamed. The agent prints no usage for
//! these: the gateway meters them on the host, where the agent cannot lie about them. Every ask of
//! one run names the same end user (`user`, a name made for the run), so a model can tell one run's
//! conversation from another's: the demo's scripted model numbers its replies per run by it.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::{AgentError, Result};
use stet_protocol::sandbox::{MODEL_KEY_ENV, MODEL_URL_ENV};

/// How long one ask may take, reply included, before it is given up.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(300);

/// The largest reply read, plain or streamed.
const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// How many random bytes name a run's conversation (as hexadecimal after [`USER_PREFIX`]).
const USER_RANDOM_BYTES: usize = 8;

/// The start of the end-user name every ask of a run sends.
const USER_PREFIX: &str = "stet-agent-";

/// The largest refusal body read for its error message.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// Where `ask` steps send their questions.
#[derive(Clone)]
pub struct ModelEndpoint {
    /// The OpenAI-style base URL; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when present.
    pub api_key: Option<String>,
    /// How long one ask may take.
    pub timeout: Duration,
}

impl ModelEndpoint {
    /// The endpoint [`MODEL_URL_ENV`] and [`MODEL_KEY_ENV`] name, with [`ASK_TIMEOUT`]; `None` when
    /// the URL is unset or empty.
    pub fn from_environment() -> Option<ModelEndpoint> {
        let base_url = std::env::var(MODEL_URL_ENV)
            .ok()
            .filter(|url| !url.is_empty())?;
        Some(ModelEndpoint {
            base_url,
            api_key: std::env::var(MODEL_KEY_ENV).ok(),
            timeout: ASK_TIMEOUT,
        })
    }
}

impl std::fmt::Debug for ModelEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEndpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A connection to the model for one run: its own small async runtime, and an HTTP client whose
/// connections are kept between asks.
pub(super) struct ModelClient {
    runtime: tokio::runtime::Runtime,
    client: Client<HttpConnector, Full<Bytes>>,
    url: Uri,
    authorization: Option<HeaderValue>,
    timeout: Duration,
    model: String,
    /// The end user every ask of this run names: [`USER_PREFIX`] and random hexadecimal.
    user: String,
}

impl ModelClient {
    /// A client for `endpoint`, asking for `model`; `step` is the step that first needs it.
    pub(super) fn new(step: usize, endpoint: &ModelEndpoint, model: &str) -> Result<Self> {
        let url_error = |problem: String| AgentError::ModelUrl {
            step,
            url: endpoint.base_url.clone(),
            problem,
        };
        let url: Uri = format!(
            "{}/chat/completions",
            endpoint.base_url.trim_end_matches('/')
        )
        .parse()
        .map_err(|error: http::uri::InvalidUri| url_error(error.to_string()))?;
        if url.scheme() != Some(&http::uri::Scheme::HTTP) || url.authority().is_none() {
            return Err(url_error(
                "only http://host:port URLs are supported (the model is reached on loopback)"
                    .to_owned(),
            ));
        }
        let authorization = match &endpoint.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    AgentError::Ask {
                        step,
                        problem: format!("{MODEL_KEY_ENV} holds characters a header cannot carry"),
                    }
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| AgentError::Ask {
                step,
                problem: format!("cannot start the async runtime: {error}"),
            })?;
        Ok(ModelClient {
            runtime,
            client: Client::builder(TokioExecutor::new()).build_http(),
            url,
            authorization,
            timeout: endpoint.timeout,
            model: model.to_owned(),
            user: run_user(step)?,
        })
    }

    /// Asks `prompt` as step `step`; returns the reply's text. A refusal is
    /// [`AgentError::ModelRefused`]; anything else that goes wrong is [`AgentError::Ask`].
    pub(super) fn ask(&self, step: usize, prompt: &str, stream: bool) -> Result<String> {
        let asked = self.runtime.block_on(async {
            tokio::time::timeout(self.timeout, self.exchange(prompt, stream)).await
        });
        match asked {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Failure::Refused {
                status,
                message,
                retry_after,
            })) => Err(AgentError::ModelRefused {
                step,
                status,
                message,
                retry_after,
            }),
            Ok(Err(Failure::Other(problem))) => Err(AgentError::Ask { step, problem }),
            Err(_) => Err(AgentError::Ask {
                step,
                problem: format!("no answer within {} s", self.timeout.as_secs_f64()),
            }),
        }
    }

    async fn exchange(&self, prompt: &str, stream: bool) -> std::result::Result<String, Failure> {
        let body = json!({
            "model": self.model,
            "messages": [{ "role": "user", "content": prompt }],
            "stream": stream,
            "user": self.user,
        });
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .header(
                header::USER_AGENT,
                concat!("stet-agent/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| Failure::Other(format!("cannot build the request: {error}")))?;
        let response = self.client.request(request).await.map_err(|error| {
            Failure::Other(format!(
                "cannot reach the model at {}: {}",
                self.url,
                with_sources(&error)
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(refusal(status, response).await);
        }
        if stream {
            read_stream(response.into_body()).await
        } else {
            read_completion(response.into_body()).await
        }
    }
}

/// A new end-user name for one run: [`USER_PREFIX`] and [`USER_RANDOM_BYTES`] random bytes in
/// hexadecimal, always the same length so that the size of an ask does not vary between runs.
fn run_user(step: usize) -> Result<String> {
    let mut random = [0u8; USER_RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(|error| AgentError::Ask {
        step,
        problem: format!("cannot name the run's conversation: {error}"),
    })?;
    Ok(random
        .iter()
        .fold(USER_PREFIX.to_owned(), |mut name, byte| {
            name.push_str(&format!("{byte:02x}"));
            name
        }))
}

/// Why an exchange did not give a reply.
enum Failure {
    /// The model (or the gateway) answered with a status other than 2xx.
    Refused {
        status: StatusCode,
        message: Option<String>,
        retry_after: Option<String>,
    },
    Other(String),
}

/// The refusal `response` stands for, with the server's `error.message` when its body has one.
async fn refusal(status: StatusCode, response: http::Response<Incoming>) -> Failure {
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let message = Limited::new(response.into_body(), MAX_REFUSAL_BYTES)
        .collect()
        .await
        .ok()
        .and_then(|body| serde_json::from_slice::<Value>(&body.to_bytes()).ok())
        .and_then(|body| {
            body.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    Failure::Refused {
        status,
        message,
        retry_after,
    }
}

/// The text of a plain chat completion: `choices[0].message.content`.
async fn read_completion(body: Incoming) -> std::result::Result<String, Failure> {
    let bytes = Limited::new(body, MAX_REPLY_BYTES)
        .collect()
        .await
        .map_err(|error| Failure::Other(format!("the reply broke off: {}", with_sources(&*error))))?
        .to_bytes();
    let reply: Value = serde_json::from_slice(&bytes)
        .map_err(|error| Failure::Other(format!("the reply is not JSON: {error}")))?;
    reply
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Failure::Other("the reply holds no choices[0].message.content".to_owned()))
}

/// The text of a streamed chat completion: the `delta.content` of every chunk up to `data: [DONE]`.
async fn read_stream(mut body: Incoming) -> std::result::Result<String, Failure> {
    let mut events = EventReader::default();
    let mut received = 0usize;
    loop {
        let frame = match body.frame().await {
            None => {
                return Err(Failure::Other(
                    "the reply stream ended before `data: [DONE]`".to_owned(),
                ));
            }
            Some(Err(error)) => {
                return Err(Failure::Other(format!(
                    "the reply stream broke after {received} bytes: {}",
                    with_sources(&error)
                )));
            }
            Some(Ok(frame)) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received += data.len();
        if received > MAX_REPLY_BYTES {
            return Err(Failure::Other(format!(
                "the reply stream is longer than {MAX_REPLY_BYTES} bytes"
            )));
        }
        if events.push(&data).map_err(Failure::Other)? {
            return Ok(events.content);
        }
    }
}

/// Reads server-sent events as they arrive, gathering the content of chat completion chunks.
#[derive(Debug, Default)]
struct EventReader {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    content: String,
}

impl EventReader {
    /// Takes the next bytes of the stream; returns whether `data: [DONE]` has come.
    fn push(&mut self, bytes: &[u8]) -> std::result::Result<bool, String> {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = memchr::memchr(b'\n', &self.partial) {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            // Only `data:` lines matter here; comments, `event:` and blank lines do not.
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.strip_prefix(' ').unwrap_or(data);
            if data == "[DONE]" {
                return Ok(true);
            }
            let chunk: Value = serde_json::from_str(data)
                .map_err(|error| format!("a streamed chunk is not JSON ({error}): {data:?}"))?;
            if let Some(message) = chunk.pointer("/error/message").and_then(Value::as_str) {
                return Err(format!("the stream reported an error: {message}"));
            }
            if let Some(content) = chunk
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
            {
                self.content.push_str(content);
            }
        }
        Ok(false)
    }
}

/// An error and its sources, joined by ": " (a client error alone says little).
fn with_sources(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What a refusal says after its status: the server's message and when to retry, if given.
pub(super) fn refusal_detail(message: &Option<String>, retry_after: &Option<String>) -> String {
    let mut detail = String::new();
    if let Some(message) = message {
        detail.push_str(": ");
        detail.push_str(message);
    }
    if let Some(seconds) = retry_after {
        detail.push_str(&format!(" (retry after {seconds} s)"));
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_across_arbitrary_splits() {
        let stream = concat!(
            ": a comment\n",
            "event: message\n",
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\r\n\r\n",
            "data:{\"choices\":[{\"delta\":{\"content\":\"lo ü\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"after\"}}]}\n\n",
        )
        .as_bytes();
        for split in 1..stream.len() {
            let mut reader = EventReader::default();
            let mut done = false;
            for piece in stream.chunks(split) {
                if reader.push(piece).unwrap() {
                    done = true;
                    break;
                }
            }
            assert!(done, "split {split}");
            assert_eq!(reader.content, "Hello ü", "split {split}");
        }
    }

    #[test]
    fn a_bad_chunk_or_an_error_event_ends_the_reading() {
        let mut reader = EventReader::default();
        let error = reader.push(b"data: {\"choices\": [\n\n").unwrap_err();
        assert!(error.contains("not JSON"), "{error}");
        let mut reader = EventReader::default();
        let error = reader
            .push(b"data: {\"error\": {\"message\": \"over budget\"}}\n\n")
            .unwrap_err();
        assert_eq!(error, "the stream reported an error: over budget");
    }

    #[test]
    fn an_endpoint_must_be_plain_http() {
        for url in [
            "https://127.0.0.1:4141/v1",
            "127.0.0.1:4141",
            "http://",
            "not a url",
        ] {
            let endpoint = ModelEndpoint {
                base_url: url.to_owned(),
                api_key: None,
                timeout: ASK_TIMEOUT,
            };
            let Err(error) = ModelClient::new(4, &endpoint, "m") else {
                panic!("{url} was accepted");
            };
            let message = error.to_string();
            assert!(message.starts_with("step 4: ask: "), "{message}");
            assert!(message.contains(url), "{message}");
        }
    }

    #[test]
    fn the_key_is_kept_out_of_debug_output() {
        let endpoint = ModelEndpoint {
            base_url: "http://127.0.0.1:1/v1".to_owned(),
            api_key: Some(format!("key-{}", std::process::id())),
            timeout: ASK_TIMEOUT,
        };
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("key-"), "{shown}");
        assert!(shown.contains("<set>"), "{shown}");
    }
}
