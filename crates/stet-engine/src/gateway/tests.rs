//! End-to-end tests of the gateway: a scripted OpenAI-compatible upstream on loopback that records
//! every request it receives, and an agent-side HTTP/1.1 client on the gateway's unix socket.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::mpsc;

use super::prices::PriceTable;
use super::{Gateway, GatewayConfig, GatewayError, GatewayEvent, GatewayLimits};
use crate::credential::SecretValue;
use stet_sanitize::sanitize::TokenSanitizer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A guard against a hung test: every wait is bounded (the assertion is on the outcome, never on time).
async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("the test waited 20 s for something that should be immediate")
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Recorded {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// One piece of a scripted stream.
enum Chunk {
    Data(String),
    /// The upstream fails the body: the connection is cut mid-stream.
    Cut,
}

/// What the upstream answers the next request with.
enum Reply {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// An event stream whose chunks the test hands over one by one.
    Stream(mpsc::UnboundedReceiver<Chunk>),
    /// Never answers.
    Hang,
}

fn ok_json(body: Value) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        body: body.to_string(),
    }
}

fn chat_completion(model: &str, prompt: u64, completion: u64, cached: u64) -> Value {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}
        }
    })
}

/// The scripted upstream: answers requests from a queue of replies and records each request.
struct Upstream {
    base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::new()));
        let (log, queue) = (Arc::clone(&requests), Arc::clone(&replies));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (log, queue) = (Arc::clone(&log), Arc::clone(&queue));
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        upstream_answer(request, Arc::clone(&log), Arc::clone(&queue))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Upstream {
            base,
            requests,
            replies,
            task,
        }
    }

    fn reply(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn upstream_answer(
    request: Request<Incoming>,
    log: Arc<Mutex<Vec<Recorded>>>,
    queue: Arc<Mutex<VecDeque<Reply>>>,
) -> Result<Response<BoxBody<Bytes, BoxError>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    log.lock().unwrap().push(Recorded {
        path: parts.uri.to_string(),
        headers: parts.headers,
        body,
    });
    let reply = queue.lock().unwrap().pop_front();
    let response = match reply {
        Some(Reply::Full {
            status,
            headers,
            body,
        }) => {
            let mut response = Response::new(
                Full::new(Bytes::from(body))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Some(Reply::Stream(chunks)) => {
            let frames = futures_util::stream::unfold(chunks, |mut chunks| async move {
                match chunks.recv().await {
                    Some(Chunk::Data(data)) => Some((Ok(Frame::data(Bytes::from(data))), chunks)),
                    Some(Chunk::Cut) => Some((Err(BoxError::from("scripted cut")), chunks)),
                    None => None,
                }
            });
            let mut response = Response::new(BoxBody::new(StreamBody::new(frames)));
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
        Some(Reply::Hang) => std::future::pending().await,
        None => Response::builder()
            .status(599)
            .body(
                Full::new(Bytes::from_static(b"no scripted reply"))
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap(),
    };
    Ok(response)
}

/// A key made up at test time, so no literal in the tree looks like a credential.
fn random_key() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("stet-test-{hex}")
}

/// A gateway in front of a scripted upstream.
struct Rig {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    gateway: Gateway,
    events: mpsc::Receiver<GatewayEvent>,
    upstream: Upstream,
    key: String,
}

fn config(upstream: &str, key: &str, ceiling_usd: Option<f64>, timeout: Duration) -> GatewayConfig {
    GatewayConfig {
        upstream: upstream.to_owned(),
        api_key: Some(SecretValue::new(key.to_owned())),
        prices: Arc::new(PriceTable::builtin()),
        ceiling_usd,
        request_timeout: timeout,
        limits: GatewayLimits::default(),
        policy: Arc::new(crate::gateway::policy::RequestPolicy::default()),
    }
}

/// A sanitizer that does NOT know the key: events stay free of it because the gateway never writes it.
fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

async fn rig_with(ceiling_usd: Option<f64>, timeout: Duration) -> Rig {
    rig_limited(ceiling_usd, timeout, GatewayLimits::default()).await
}

async fn rig_limited(ceiling_usd: Option<f64>, timeout: Duration, limits: GatewayLimits) -> Rig {
    rig_configured(ceiling_usd, timeout, |config| GatewayConfig {
        limits,
        ..config
    })
    .await
}

/// A gateway in front of a scripted upstream, configured by `configure` from the tests' defaults.
async fn rig_configured(
    ceiling_usd: Option<f64>,
    timeout: Duration,
    configure: impl FnOnce(GatewayConfig) -> GatewayConfig,
) -> Rig {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let key = random_key();
    let (gateway, events) = Gateway::start(
        &socket,
        configure(config(&upstream.base, &key, ceiling_usd, timeout)),
        sanitizer(),
    )
    .await
    .unwrap();
    Rig {
        _dir: dir,
        socket,
        gateway,
        events,
        upstream,
        key,
    }
}

async fn rig() -> Rig {
    rig_with(None, Duration::from_secs(20)).await
}

impl Rig {
    async fn next_event(&mut self) -> GatewayEvent {
        within(self.events.recv()).await.unwrap()
    }

    /// The events already sent, without waiting.
    fn pending_events(&mut self) -> Vec<GatewayEvent> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }

    async fn next_error(&mut self) -> String {
        match self.next_event().await {
            GatewayEvent::Error { message } => message.into_string(),
            other => panic!("expected an error event, got {other:?}"),
        }
    }
}

/// Opens a connection to the gateway's socket and sends one request.
/// A streamed chat completion the upstream holds open after its first chunk, which the client has
/// read: the sender scripts (or withholds) the rest.
async fn held_stream(rig: &Rig) -> (mpsc::UnboundedSender<Chunk>, Response<Incoming>) {
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let mut response = send(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_request("m"),
    )
    .await;
    chunks.send(Chunk::Data("data: {}\n\n".to_owned())).unwrap();
    within(response.body_mut().frame()).await.unwrap().unwrap();
    (chunks, response)
}

async fn send(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response<Incoming> {
    let stream = within(UnixStream::connect(socket)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1:4000");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    within(sender.send_request(request)).await.unwrap()
}

/// Sends one request and reads the whole reply.
async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: &str,
) -> (StatusCode, HeaderMap, String) {
    let response = send(
        socket,
        method,
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await;
    let (parts, body) = response.into_parts();
    let body = within(body.collect()).await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

/// A plain chat completion of the demo model, through the gateway at `socket`.
async fn chat(socket: &Path) -> (StatusCode, HeaderMap, String) {
    call(
        socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("stet-demo-model"),
    )
    .await
}

fn chat_request(model: &str) -> String {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string()
}

fn expect_usage(event: GatewayEvent) -> (crate::gateway::usage::UsageReport, bool) {
    match event {
        GatewayEvent::Usage {
            report, streamed, ..
        } => (report, streamed),
        other => panic!("expected a usage event, got {other:?}"),
    }
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn the_host_key_goes_upstream_and_the_agents_credentials_do_not() {
    let mut rig = rig().await;
    let reply = chat_completion("stet-demo-model", 10, 5, 0).to_string();
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        body: reply.clone(),
    });
    let response = send(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer dummy-agent-key"),
            ("cookie", "session=agent"),
            ("x-api-key", "dummy-agent-key"),
            ("content-type", "application/json"),
        ],
        &chat_request("stet-demo-model"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(
        body,
        reply.as_bytes(),
        "the response passes through unchanged"
    );

    let requests = rig.upstream.requests();
    assert_eq!(requests.len(), 1);
    let seen = &requests[0];
    assert_eq!(seen.path, "/v1/chat/completions");
    let authorization: Vec<_> = seen.headers.get_all("authorization").iter().collect();
    assert_eq!(authorization, [format!("Bearer {}", rig.key).as_str()]);
    assert!(seen.headers.get("cookie").is_none());
    assert!(seen.headers.get("x-api-key").is_none());
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        seen.body,
        chat_request("stet-demo-model").as_bytes(),
        "an unchanged request passes byte for byte"
    );

    let event = rig.next_event().await;
    let rest = rig.pending_events();
    let everything = format!("{event:?} {:?} {rest:?}", rig.gateway);
    assert!(
        !everything.contains(&rig.key),
        "the key leaked: {everything}"
    );
}

#[tokio::test]
async fn a_gateway_without_a_key_sends_no_authorization() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let mut config = config(&upstream.base, "unused", None, Duration::from_secs(20));
    config.api_key = None;
    let (_gateway, _events) = Gateway::start(&socket, config, sanitizer()).await.unwrap();
    upstream.reply(ok_json(serde_json::json!({"object": "list", "data": []})));
    let response = send(
        &socket,
        "GET",
        "/v1/models?limit=2",
        &[("authorization", "Bearer dummy")],
        "",
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let requests = upstream.requests();
    assert_eq!(requests[0].path, "/v1/models?limit=2");
    assert!(requests[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn non_streaming_usage_is_metered_at_table_prices() {
    let mut rig = rig().await;
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1000, 100, 200)));
    let (status, _, _) = chat(&rig.socket).await;
    assert_eq!(status, StatusCode::OK);
    let (report, streamed) = expect_usage(rig.next_event().await);
    assert!(!streamed);
    assert_eq!(report.model.as_str(), "stet-demo-model");
    assert_eq!(
        (
            report.input_tokens,
            report.output_tokens,
            report.cached_tokens
        ),
        (1000, 100, 200)
    );
    // 800 uncached × $3 + 200 cached × $0.30 + 100 output × $15, per million.
    let expected = (800.0 * 3.0 + 200.0 * 0.30 + 100.0 * 15.0) / 1e6;
    assert!(approx(report.cost_usd.unwrap(), expected), "{report:?}");
    assert!(approx(rig.gateway.totals().settled_usd, expected));

    // The responses API, priced by the request's model when the response names an unknown one.
    rig.upstream.reply(ok_json(serde_json::json!({
        "object": "response",
        "model": "stet-demo-model-2099-01-01",
        "usage": {"input_tokens": 50, "output_tokens": 10, "input_tokens_details": {"cached_tokens": 0}}
    })));
    let (status, _, _) = call(
        &rig.socket,
        "POST",
        "/v1/responses",
        &serde_json::json!({"model": "stet-demo-model", "input": "hi"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (report, _) = expect_usage(rig.next_event().await);
    assert_eq!(report.model.as_str(), "stet-demo-model-2099-01-01");
    assert!(
        approx(report.cost_usd.unwrap(), (50.0 * 3.0 + 10.0 * 15.0) / 1e6),
        "{report:?}"
    );
    assert_eq!(rig.upstream.requests()[1].path, "/v1/responses");

    // A model nobody prices is metered in tokens, at no known cost.
    rig.upstream
        .reply(ok_json(chat_completion("mystery", 5, 5, 0)));
    call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("mystery"),
    )
    .await;
    let (report, _) = expect_usage(rig.next_event().await);
    assert_eq!((report.output_tokens, report.cost_usd), (5, None));
}

#[tokio::test]
async fn the_litellm_cost_header_wins_over_the_table() {
    let mut rig = rig().await;
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("x-litellm-response-cost", "0.0425".to_owned()),
        ],
        body: chat_completion("stet-demo-model", 1000, 100, 0).to_string(),
    });
    chat(&rig.socket).await;
    let (report, _) = expect_usage(rig.next_event().await);
    assert_eq!(report.cost_usd, Some(0.0425));
    assert!(approx(rig.gateway.totals().settled_usd, 0.0425));
}

#[tokio::test]
async fn an_event_stream_passes_through_as_it_arrives_and_is_metered_from_its_last_chunk() {
    let mut rig = rig().await;
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let request =
        serde_json::json!({"model": "stet-demo-model", "stream": true, "messages": []}).to_string();
    let mut response = send(&rig.socket, "POST", "/v1/chat/completions", &[], &request).await;
    assert_eq!(response.status(), StatusCode::OK);

    let first = "data: {\"model\":\"stet-demo-model\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n";
    chunks.send(Chunk::Data(first.to_owned())).unwrap();
    // The client sees the first chunk while the upstream still holds the last one.
    let mut seen = Vec::new();
    while seen.len() < first.len() {
        let frame = within(response.body_mut().frame()).await.unwrap().unwrap();
        seen.extend_from_slice(frame.data_ref().unwrap());
    }
    assert_eq!(seen, first.as_bytes());
    assert!(
        rig.pending_events().is_empty(),
        "nothing is metered before the stream ends"
    );

    let last = concat!(
        "data: {\"model\":\"stet-demo-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,",
        "\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":10}}}\n\n",
        "data: [DONE]\n\n"
    );
    chunks.send(Chunk::Data(last.to_owned())).unwrap();
    drop(chunks);
    let rest = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(rest, last.as_bytes());

    let (report, streamed) = expect_usage(rig.next_event().await);
    assert!(streamed);
    assert_eq!(
        (
            report.input_tokens,
            report.output_tokens,
            report.cached_tokens
        ),
        (40, 20, 10)
    );
    let expected = (30.0 * 3.0 + 10.0 * 0.30 + 20.0 * 15.0) / 1e6;
    assert!(approx(report.cost_usd.unwrap(), expected), "{report:?}");

    let forwarded = rig.upstream.requests()[0].json();
    assert_eq!(
        forwarded["stream_options"],
        serde_json::json!({"include_usage": true})
    );
    assert_eq!(forwarded["stream"], true);
}

#[tokio::test]
async fn an_event_stream_cut_mid_way_ends_for_the_agent_and_is_reported() {
    let mut rig = rig().await;
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let request = serde_json::json!({"model": "stet-demo-model", "stream": true}).to_string();
    let mut response = send(&rig.socket, "POST", "/v1/chat/completions", &[], &request).await;
    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    chunks.send(Chunk::Data(first.to_owned())).unwrap();
    let frame = within(response.body_mut().frame()).await.unwrap().unwrap();
    assert!(first.as_bytes().starts_with(frame.data_ref().unwrap()));
    chunks.send(Chunk::Cut).unwrap();

    // The agent's stream ends: an error (the body was not completed), never a hang.
    let ended = within(response.into_body().collect()).await;
    assert!(
        ended.is_err(),
        "a cut stream must not look complete to the agent"
    );
    let message = rig.next_error().await;
    assert!(message.contains("POST /v1/chat/completions"), "{message}");
    assert!(message.contains("cut before usage"), "{message}");
    assert!(rig.pending_events().is_empty());
    assert_eq!(rig.gateway.totals().settled_usd, 0.0);
}

#[tokio::test]
async fn unknown_routes_get_404_and_never_reach_the_upstream() {
    let mut rig = rig().await;
    for (method, path) in [
        ("GET", "/v1/files"),
        ("POST", "/v2/chat/completions"),
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/models"),
    ] {
        let (status, headers, body) = call(&rig.socket, method, path, "{}").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(headers["content-type"], "application/json");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], "stet_gateway");
        assert!(body["error"]["message"].as_str().unwrap().contains(path));
        let message = rig.next_error().await;
        assert!(
            message.contains(&format!("{method} {path}")) && message.contains("404"),
            "{message}"
        );
    }
    assert!(rig.upstream.requests().is_empty());
}

#[tokio::test]
async fn past_the_ceiling_requests_are_refused_before_the_upstream() {
    // One response of 100 + 100 tokens of stet-demo-model costs $0.0018.
    let mut rig = rig_with(Some(0.001), Duration::from_secs(20)).await;
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 100, 100, 0)));
    let (status, _, _) = chat(&rig.socket).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the request in flight when the ceiling is crossed finishes"
    );
    expect_usage(rig.next_event().await);
    match rig.next_event().await {
        GatewayEvent::CeilingReached {
            spent_usd,
            ceiling_usd,
            needed_usd,
        } => {
            assert!(approx(spent_usd, 0.0018), "{spent_usd}");
            assert_eq!(ceiling_usd, 0.001);
            assert_eq!(needed_usd, None, "spend reached it, not a refusal");
        }
        other => panic!("expected CeilingReached, got {other:?}"),
    }

    for _ in 0..2 {
        rig.upstream
            .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
        let (status, headers, body) = chat(&rig.socket).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
        assert!(headers.get("retry-after").is_none());
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], "stet_gateway");
        assert_eq!(body["error"]["code"], "cost_ceiling_reached");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cost ceiling")
        );
        let message = rig.next_error().await;
        assert!(
            message.contains("POST /v1/chat/completions") && message.contains("ceiling"),
            "{message}"
        );
    }
    assert_eq!(
        rig.upstream.requests().len(),
        1,
        "the upstream saw nothing after the ceiling"
    );
    assert!(
        !rig.pending_events()
            .iter()
            .any(|event| matches!(event, GatewayEvent::CeilingReached { .. })),
        "CeilingReached is sent once"
    );
}

#[tokio::test]
async fn a_zero_ceiling_refuses_the_first_request_and_says_so_once() {
    let mut rig = rig_with(Some(0.0), Duration::from_secs(20)).await;
    let (status, _, _) = call(&rig.socket, "POST", "/v1/responses", "{}").await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert!(matches!(
        rig.next_event().await,
        GatewayEvent::CeilingReached { .. }
    ));
    assert!(matches!(rig.next_event().await, GatewayEvent::Error { .. }));
    call(&rig.socket, "POST", "/v1/responses", "{}").await;
    assert!(matches!(rig.next_event().await, GatewayEvent::Error { .. }));
    assert!(rig.upstream.requests().is_empty());
}

#[tokio::test]
async fn the_output_cap_shrinks_with_the_remaining_budget() {
    // What is left after the input's worst case (a token a byte at $3 per million) pays for output
    // at $15 per million.
    let input_usd = (chat_request("stet-demo-model").len() as f64 + 256.0) * 3.0 / 1e6;
    let affordable = |left: f64| ((left - input_usd) / 15e-6).floor() as u64;
    let mut rig = rig_with(Some(0.01), Duration::from_secs(20)).await;
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 100, 100, 0)));
    chat(&rig.socket).await;
    expect_usage(rig.next_event().await);
    assert_eq!(
        rig.upstream.requests()[0].json()["max_tokens"],
        affordable(0.01)
    );

    // $0.0018 spent: less is left.
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
    chat(&rig.socket).await;
    expect_usage(rig.next_event().await);
    assert_eq!(
        rig.upstream.requests()[1].json()["max_tokens"],
        affordable(0.0082)
    );

    // A smaller cap of the agent's own stands; the responses API's field is `max_output_tokens`.
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
    let request = serde_json::json!({"model": "stet-demo-model", "max_tokens": 12}).to_string();
    call(&rig.socket, "POST", "/v1/chat/completions", &request).await;
    expect_usage(rig.next_event().await);
    assert_eq!(rig.upstream.requests()[2].json()["max_tokens"], 12);
    rig.upstream
        .reply(ok_json(serde_json::json!({"model": "stet-demo-model"})));
    call(
        &rig.socket,
        "POST",
        "/v1/responses",
        &serde_json::json!({"model": "stet-demo-model"}).to_string(),
    )
    .await;
    // $0.0018 and two requests of 1 + 1 tokens ($0.000018 each) spent; this body is shorter.
    // The rewrite's margin of 256 bytes is counted as input too.
    let body_usd = (serde_json::json!({"model": "stet-demo-model"})
        .to_string()
        .len() as f64
        + 256.0)
        * 3e-6;
    let left = 0.01 - 0.0018 - 2.0 * 18e-6 - body_usd;
    let capped = rig.upstream.requests()[3].json()["max_output_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        capped.abs_diff((left / 15e-6).floor() as u64) <= 1,
        "{capped} for ${left}"
    );
}

#[tokio::test]
async fn an_upstream_that_is_down_gets_502_and_an_event() {
    let free_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let upstream = format!("http://127.0.0.1:{free_port}/v1");
    let (_gateway, mut events) = Gateway::start(
        &socket,
        config(&upstream, &random_key(), None, Duration::from_secs(20)),
        sanitizer(),
    )
    .await
    .unwrap();
    let (status, _, body) = call(&socket, "POST", "/v1/chat/completions", &chat_request("m")).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    match within(events.recv()).await.unwrap() {
        GatewayEvent::Error { message } => {
            let message = message.as_str();
            assert!(message.contains("POST /v1/chat/completions"), "{message}");
            assert!(
                message.contains("could not be reached") && message.contains("502"),
                "{message}"
            );
            assert!(!message.contains('\n'));
        }
        other => panic!("expected an error event, got {other:?}"),
    }
}

#[tokio::test]
async fn a_rate_limit_passes_through_with_its_retry_after() {
    let mut rig = rig().await;
    let body = r#"{"error":{"message":"slow down","type":"rate_limit"}}"#;
    rig.upstream.reply(Reply::Full {
        status: 429,
        headers: vec![
            ("retry-after", "7".to_owned()),
            ("content-type", "application/json".to_owned()),
        ],
        body: body.to_owned(),
    });
    let (status, headers, text) = call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("m"),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(text, body);
    let message = rig.next_error().await;
    assert!(
        message.contains("429") && message.contains("Retry-After: 7"),
        "{message}"
    );
    assert!(message.contains("POST /v1/chat/completions"), "{message}");
    assert!(
        rig.pending_events().is_empty(),
        "an error status is not metered"
    );
}

#[tokio::test]
async fn an_upstream_server_error_passes_through_and_is_reported() {
    let mut rig = rig().await;
    rig.upstream.reply(Reply::Full {
        status: 500,
        headers: vec![],
        body: "internal trouble".to_owned(),
    });
    let (status, _, text) = call(&rig.socket, "POST", "/v1/responses", "{}").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(text, "internal trouble");
    let message = rig.next_error().await;
    assert!(
        message.contains("POST /v1/responses") && message.contains("500"),
        "{message}"
    );
    assert!(
        !message.contains("internal trouble"),
        "no bodies in events: {message}"
    );
}

#[tokio::test]
async fn malformed_json_passes_through_unchanged_and_is_reported_unmetered() {
    let mut rig = rig().await;
    let broken = r#"{"id":"x","usage":{"prompt_tokens":3"#;
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        body: broken.to_owned(),
    });
    let (status, _, text) = call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("m"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text, broken);
    let message = rig.next_error().await;
    assert!(
        message.contains("not JSON") && message.contains("usage could not be read"),
        "{message}"
    );
    assert!(rig.pending_events().is_empty());
}

#[tokio::test]
async fn a_response_without_usage_is_reported_as_unmetered() {
    let mut rig = rig().await;
    rig.upstream
        .reply(ok_json(serde_json::json!({"model": "m", "choices": []})));
    call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("m"),
    )
    .await;
    let message = rig.next_error().await;
    assert!(message.contains("carried no usage"), "{message}");
    // `/v1/models` is not metered and reports nothing.
    rig.upstream
        .reply(ok_json(serde_json::json!({"object": "list", "data": []})));
    let (status, _, _) = call(&rig.socket, "GET", "/v1/models", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(rig.pending_events().is_empty());
}

#[tokio::test]
async fn an_upstream_that_never_answers_gets_504_within_the_timeout() {
    let mut rig = rig_with(None, Duration::from_millis(300)).await;
    rig.upstream.reply(Reply::Hang);
    let (status, _, body) = call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("m"),
    )
    .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "upstream_timeout");
    let message = rig.next_error().await;
    assert!(
        message.contains("did not answer within") && message.contains("504"),
        "{message}"
    );
    assert_eq!(rig.upstream.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_that_stalls_is_cut_at_the_timeout() {
    let mut rig = rig_with(None, Duration::from_millis(300)).await;
    let (chunks, response) = held_stream(&rig).await;
    // The upstream holds the rest back (the sender stays alive): the gateway ends it at the deadline.
    let ended = within(response.into_body().collect()).await;
    assert!(ended.is_err());
    let message = rig.next_error().await;
    assert!(
        message.contains("did not finish the response stream within"),
        "{message}"
    );
    drop(chunks);
}

#[tokio::test]
async fn the_socket_is_private_and_removed_at_shutdown_or_drop() {
    let rig = rig().await;
    let mode = std::fs::metadata(&rig.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(rig.gateway.socket(), rig.socket);
    let socket = rig.socket.clone();
    rig.gateway.shutdown().await;
    assert!(!socket.exists());
    assert!(UnixStream::connect(&socket).await.is_err());

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let upstream = Upstream::start().await;
    let (gateway, _events) = Gateway::start(
        &socket,
        config(&upstream.base, &random_key(), None, Duration::from_secs(1)),
        sanitizer(),
    )
    .await
    .unwrap();
    assert!(socket.exists());
    drop(gateway);
    assert!(!socket.exists());
}

#[tokio::test]
async fn shutdown_ends_a_request_in_flight() {
    let rig = rig().await;
    let (chunks, response) = held_stream(&rig).await;
    let Rig {
        gateway,
        mut events,
        ..
    } = rig;
    within(gateway.shutdown()).await;
    assert!(within(response.into_body().collect()).await.is_err());
    match within(events.recv()).await.unwrap() {
        GatewayEvent::Error { message } => {
            assert!(message.as_str().contains("gateway shut down"), "{message}")
        }
        other => panic!("expected an error event, got {other:?}"),
    }
    drop(chunks);
}

#[tokio::test]
async fn start_refuses_an_existing_path_a_long_path_and_a_missing_directory() {
    let rig = rig().await;
    let second = Gateway::start(
        &rig.socket,
        config(
            &rig.upstream.base,
            &random_key(),
            None,
            Duration::from_secs(1),
        ),
        sanitizer(),
    )
    .await;
    match second {
        Err(err @ GatewayError::SocketExists(_)) => {
            assert!(
                err.to_string().contains(&rig.socket.display().to_string()),
                "{err}"
            )
        }
        other => panic!("expected SocketExists, got {other:?}"),
    }
    // The first gateway still serves.
    rig.upstream
        .reply(ok_json(serde_json::json!({"object": "list", "data": []})));
    let (status, _, _) = call(&rig.socket, "GET", "/v1/models", "").await;
    assert_eq!(status, StatusCode::OK);

    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("x".repeat(120));
    let err = Gateway::start(
        &long,
        config(&rig.upstream.base, "k", None, Duration::from_secs(1)),
        sanitizer(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, GatewayError::SocketPathTooLong { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&long.display().to_string()));

    let missing = dir.path().join("nope").join("model.sock");
    let err = Gateway::start(
        &missing,
        config(&rig.upstream.base, "k", None, Duration::from_secs(1)),
        sanitizer(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, GatewayError::SocketDir(_)), "{err:?}");
    assert!(err.to_string().contains("nope"));
}

#[tokio::test]
async fn start_refuses_upstreams_it_must_not_talk_to() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let secret = random_key();
    for (url, reason) in [
        ("http://models.example.com/v1".to_owned(), "loopback"),
        (
            format!("https://user:{secret}@models.example.com/v1"),
            "userinfo",
        ),
        (
            format!("https://models.example.com/v1?key={secret}"),
            "query",
        ),
        ("ftp://127.0.0.1/v1".to_owned(), "scheme"),
        ("not a url".to_owned(), "valid"),
        ("/v1".to_owned(), "host"),
    ] {
        let err = Gateway::start(
            &socket,
            config(&url, "k", None, Duration::from_secs(1)),
            sanitizer(),
        )
        .await
        .unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, GatewayError::Upstream { .. }),
            "{url}: {err:?}"
        );
        assert!(message.contains(reason), "{url}: {message}");
        assert!(
            !message.contains(&secret),
            "the error echoes a secret: {message}"
        );
        assert!(!socket.exists(), "a refused start binds nothing");
    }
    for url in [
        "http://127.0.0.1:9/v1",
        "http://localhost:4000/v1/",
        "http://[::1]:9/v1",
        "https://models.example.com/v1",
    ] {
        let (gateway, _events) = Gateway::start(
            &socket,
            config(url, "k", None, Duration::from_secs(1)),
            sanitizer(),
        )
        .await
        .unwrap_or_else(|err| panic!("{url}: {err}"));
        gateway.shutdown().await;
    }
}

// ---------------------------------------------------------------------------------------------
// A hostile agent against the cost ledger. Each test states the bound it checks.
// ---------------------------------------------------------------------------------------------

/// The most a request can cost as the upstream received it: a token a byte of input (plus the
/// attachment allowance, none here) at the demo model's $3 per million, and its output cap times its
/// choices at $15 per million.
fn worst_as_sent(request: &Recorded) -> f64 {
    let body = request.json();
    let cap = body["max_tokens"].as_u64().expect("an output cap was sent");
    let choices = body["n"].as_u64().unwrap_or(1);
    request.body.len() as f64 * 3e-6 + (cap * choices) as f64 * 15e-6
}

/// Bound: spend. 150 requests at once under a $0.01 ceiling: what reaches the upstream can cost at
/// most the ceiling together, the rest are held back with a retry, and the ledger ends at or below it.
#[tokio::test]
async fn parallel_requests_cannot_reserve_past_the_ceiling_together() {
    let ceiling = 0.01;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(2)).await;
    for _ in 0..150 {
        rig.upstream.reply(Reply::Hang);
    }
    let body = serde_json::json!({"model": "stet-demo-model", "max_tokens": 40, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..150 {
        let (socket, body) = (rig.socket.clone(), body.clone());
        calls.spawn(async move { call(&socket, "POST", "/v1/chat/completions", &body).await });
    }
    let mut held = 0;
    let mut timed_out = 0;
    while let Some(reply) = calls.join_next().await {
        let (status, headers, _) = reply.unwrap();
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(headers.get("retry-after").is_some());
                held += 1;
            }
            StatusCode::GATEWAY_TIMEOUT => timed_out += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let forwarded = rig.upstream.requests();
    assert_eq!(forwarded.len(), timed_out);
    assert_eq!(held + timed_out, 150);
    let worst: f64 = forwarded.iter().map(worst_as_sent).sum();
    assert!(
        worst <= ceiling + 1e-9,
        "{} requests reached the upstream, able to cost ${worst:.4} together",
        forwarded.len()
    );
    assert!(timed_out > 1, "more than one request fits: {timed_out}");
    // Nobody learnt what the hung requests cost: each counts its whole reservation.
    let totals = rig.gateway.totals();
    assert!(totals.settled_usd <= ceiling + 1e-9, "{totals:?}");
    assert!(totals.peak_reserved_usd <= ceiling + 1e-9, "{totals:?}");
    assert_eq!(totals.open, 0);
    assert!(
        rig.pending_events()
            .iter()
            .any(|event| matches!(event, GatewayEvent::Usage { report, .. } if report.cost_usd.is_some_and(|cost| cost > 0.0))),
        "the counted reservations are reported as usage"
    );
}

/// Bound: spend. `"n": 128` asks for 128 answers: the output cap shares what is left among them.
#[tokio::test]
async fn many_choices_share_the_output_cap() {
    let ceiling = 0.05;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 10, 10, 0)));
    let body = serde_json::json!({"model": "stet-demo-model", "n": 128, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (status, _, _) = call(&rig.socket, "POST", "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK);
    expect_usage(rig.next_event().await);
    let sent = &rig.upstream.requests()[0];
    assert_eq!(sent.json()["n"], 128);
    let worst = worst_as_sent(sent);
    assert!(worst <= ceiling, "${worst}");
    assert!(worst > ceiling * 0.9, "the cap uses what is left: ${worst}");
}

/// Bound: metering. A stream asked for without usage is made to carry it, and is metered.
#[tokio::test]
async fn a_stream_asked_for_without_usage_is_metered_all_the_same() {
    let mut rig = rig().await;
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let body = serde_json::json!({"model": "stet-demo-model", "stream": true, "stream_options": {"include_usage": false}}).to_string();
    let response = send(&rig.socket, "POST", "/v1/chat/completions", &[], &body).await;
    assert_eq!(
        rig.upstream.requests()[0].json()["stream_options"]["include_usage"],
        true
    );
    chunks
        .send(Chunk::Data(format!(
            "data: {}\n\ndata: [DONE]\n\n",
            chat_completion("stet-demo-model", 1000, 100, 0)
        )))
        .unwrap();
    drop(chunks);
    within(response.into_body().collect()).await.unwrap();
    let (report, streamed) = expect_usage(rig.next_event().await);
    assert!(streamed);
    assert_eq!(report.output_tokens, 100);
    assert!(approx(rig.gateway.totals().settled_usd, 0.0045));
}

/// Bound: spend. Under a ceiling a model the price table does not list never reaches an endpoint that
/// has not reported a cost; once it has, such a request runs alone, holding all that is left.
#[tokio::test]
async fn an_unpriced_model_is_refused_until_the_endpoint_reports_cost() {
    let mut rig = rig_with(Some(1.0), Duration::from_secs(20)).await;
    let (status, _, body) = call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("o1-pro"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "model_not_priced");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`o1-pro`") && message.contains("[model] prices"),
        "{message}"
    );
    let event = rig.next_error().await;
    assert!(
        event.contains("`o1-pro`") && event.contains("prices"),
        "{event}"
    );
    assert!(rig.upstream.requests().is_empty());

    // A priced request's response carries LiteLLM's own cost: the endpoint reports costs.
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("x-litellm-response-cost", "0.25".to_owned()),
        ],
        body: chat_completion("stet-demo-model", 1, 1, 0).to_string(),
    });
    chat(&rig.socket).await;
    expect_usage(rig.next_event().await);
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("x-litellm-response-cost", "0.5".to_owned()),
        ],
        body: chat_completion("o1-pro", 1, 1, 0).to_string(),
    });
    let (status, _, _) = call(
        &rig.socket,
        "POST",
        "/v1/chat/completions",
        &chat_request("o1-pro"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (report, _) = expect_usage(rig.next_event().await);
    assert_eq!(report.cost_usd, Some(0.5));
    assert!(approx(rig.gateway.totals().settled_usd, 0.75));
}

/// Bound: spend. A response whose usage never comes counts what it reserved, not nothing.
#[tokio::test]
async fn a_response_without_usage_counts_its_reservation_under_a_ceiling() {
    let mut rig = rig_with(Some(0.01), Duration::from_secs(20)).await;
    rig.upstream
        .reply(ok_json(serde_json::json!({"model": "stet-demo-model"})));
    chat(&rig.socket).await;
    let (report, _) = expect_usage(rig.next_event().await);
    let counted = report.cost_usd.unwrap();
    // It had reserved all the budget, to the last whole output token.
    assert!((0.01 - 15e-6..=0.01).contains(&counted), "{counted}");
    let message = rig.next_error().await;
    assert!(
        message.contains("counts as the $0.0100 it had reserved"),
        "{message}"
    );
    assert_eq!(rig.gateway.totals().settled_usd, counted);
    // Nothing is left for another request: the ceiling is reached, and the announcement carries
    // the figure the refusal told the agent, so the dispatch's reason says the same.
    let (status, _, _) = chat(&rig.socket).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    let needed = match rig.next_event().await {
        GatewayEvent::CeilingReached {
            needed_usd: Some(needed),
            ..
        } => needed,
        other => panic!("expected CeilingReached with what was needed, got {other:?}"),
    };
    let message = rig.next_error().await;
    assert!(
        message.contains(&format!("${needed:.4} needed at least")),
        "{message}"
    );
    assert_eq!(rig.upstream.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// A hostile agent against the host's resources. Each test states the bound it checks.
// ---------------------------------------------------------------------------------------------

/// This process's open file descriptors.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// This process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Bound: file descriptors. A hostile dispatch holding 300 idle connections costs stet at most its
/// connection cap, and a benign dispatch beside it is served at once; the idle ones are let go after
/// the header timeout, and the hostile agent's next request is served then.
#[tokio::test]
async fn idle_connections_cost_at_most_the_cap_and_starve_no_other_dispatch() {
    let limits = GatewayLimits {
        header_timeout: Duration::from_millis(500),
        ..GatewayLimits::default()
    };
    let hostile = rig_limited(None, Duration::from_secs(20), limits).await;
    let mut benign = rig().await;
    let before = open_descriptors();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(within(UnixStream::connect(&hostile.socket)).await.unwrap());
    }
    // Every connect completed: the ones past the cap wait in the backlog, not in stet. Let the
    // accept loop take what it will (a request on the benign gateway is a full round trip).
    benign
        .upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
    let (status, _, _) = chat(&benign.socket).await;
    assert_eq!(status, StatusCode::OK, "the benign dispatch is served");
    expect_usage(benign.next_event().await);
    // Other tests of this process open descriptors meanwhile: the slack is theirs. Unbounded, stet
    // would hold 300 more.
    let grown = open_descriptors() - before;
    assert!(
        grown <= 300 + limits.max_connections + 64,
        "300 client ends and {} descriptors more: stet holds {} for them",
        grown - 300,
        grown.saturating_sub(300)
    );
    // The hostile agent itself is served once its idle connections are let go.
    hostile
        .upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
    let (status, _, _) = chat(&hostile.socket).await;
    assert_eq!(status, StatusCode::OK);
    drop(idle);
}

/// Bound: time and descriptors. A request head that never ends is cut at the header timeout.
#[tokio::test]
async fn a_request_head_sent_slowly_is_cut_at_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = GatewayLimits {
        header_timeout: Duration::from_millis(300),
        ..GatewayLimits::default()
    };
    let rig = rig_limited(None, Duration::from_secs(20), limits).await;
    let mut stream = within(UnixStream::connect(&rig.socket)).await.unwrap();
    stream
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    let mut rest = Vec::new();
    within(stream.read_to_end(&mut rest)).await.unwrap();
    let reply = String::from_utf8_lossy(&rest);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 408"),
        "{reply}"
    );
    assert!(rig.upstream.requests().is_empty());
}

/// Bound: time. A body that stops arriving is answered 408 at the body timeout.
#[tokio::test]
async fn a_body_sent_slowly_is_refused_at_the_body_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = GatewayLimits {
        body_timeout: Duration::from_millis(300),
        ..GatewayLimits::default()
    };
    let mut rig = rig_limited(None, Duration::from_secs(20), limits).await;
    let mut stream = within(UnixStream::connect(&rig.socket)).await.unwrap();
    stream
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    within(stream.read_exact(&mut head)).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 408");
    assert!(rig.next_error().await.contains("did not arrive"));
    assert!(rig.upstream.requests().is_empty());
}

/// Bound: requests in flight. Past the cap a request is answered 429 with a retry, and never reaches
/// the upstream.
#[tokio::test]
async fn requests_past_the_cap_in_flight_are_held_back() {
    let limits = GatewayLimits {
        max_concurrent_requests: 2,
        ..GatewayLimits::default()
    };
    let mut rig = rig_limited(None, Duration::from_secs(20), limits).await;
    let (first, _first_response) = held_stream(&rig).await;
    let (second, _second_response) = held_stream(&rig).await;
    let (status, headers, body) = chat(&rig.socket).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.get("retry-after").is_some());
    assert!(body.contains("too_many_requests_in_flight"), "{body}");
    assert!(
        rig.next_error()
            .await
            .contains("2 requests are already in flight")
    );
    assert_eq!(rig.upstream.requests().len(), 2);
    // One ends: its place is free again.
    drop(first);
    drop(_first_response);
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 1, 1, 0)));
    let mut served = false;
    for _ in 0..50 {
        let (status, _, _) = chat(&rig.socket).await;
        if status == StatusCode::OK {
            served = true;
            break;
        }
        // The first stream's end is reported before its place is given back.
        rig.pending_events();
        tokio::task::yield_now().await;
    }
    assert!(served, "a place freed when a request ended");
    drop(second);
}

/// Bound: memory. 100 connections each sending a 31 MiB body: the bodies held at once stay within
/// the dispatch's budget of bytes in flight (64 MiB), so resident memory grows by far less than the
/// 3.1 GiB sent.
#[tokio::test]
async fn huge_bodies_at_once_are_held_to_the_budget_of_bytes_in_flight() {
    let rig = rig_limited(
        None,
        Duration::from_secs(60),
        GatewayLimits {
            max_concurrent_requests: 64,
            max_connections: 128,
            ..GatewayLimits::default()
        },
    )
    .await;
    for _ in 0..100 {
        rig.upstream.reply(Reply::Hang);
    }
    let before = resident_bytes();
    let body_len = 31 * 1024 * 1024;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let socket = rig.socket.clone();
        calls.spawn(async move {
            let stream = UnixStream::connect(&socket).await.unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(async move {
                let _ = connection.await;
            });
            // Sent in 1 MiB pieces of the same buffer: the client holds 1 MiB, not 31.
            let piece = Bytes::from(vec![b' '; 1024 * 1024]);
            let frames = futures_util::stream::iter(
                (0..31).map(move |_| Ok::<_, Infallible>(Frame::data(piece.clone()))),
            );
            let request = Request::builder()
                .method("POST")
                .uri("/v1/chat/completions")
                .header("host", "x")
                .header("content-length", body_len)
                .body(StreamBody::new(frames))
                .unwrap();
            match sender.send_request(request).await {
                Ok(response) => Some(response.status()),
                Err(_) => None,
            }
        });
    }
    let mut over_budget = 0;
    let mut peak = 0;
    while let Some(result) = within(calls.join_next()).await {
        peak = peak.max(resident_bytes().saturating_sub(before));
        if result.unwrap() == Some(StatusCode::SERVICE_UNAVAILABLE) {
            over_budget += 1;
        }
        if calls.len() <= 2 {
            // The last two are held at the upstream, which never answers.
            break;
        }
    }
    peak = peak.max(resident_bytes().saturating_sub(before));
    assert!(
        over_budget >= 90,
        "{over_budget} of 100 refused for the budget"
    );
    assert!(
        peak < 512 * 1024 * 1024,
        "resident memory grew by {} MiB",
        peak >> 20
    );
}

// ---------------------------------------------------------------------------------------------
// attack15: a hostile agent's advocate's attacks, kept. Each doc comment says how the attack got
// past the gateway as it was; each test asserts the cost bound (or the host's memory bound), which a
// refusal before the upstream holds too.
// ---------------------------------------------------------------------------------------------

/// A request the gateway answered `expected` without reaching the upstream, which holds the bound;
/// false when it was forwarded (`200`), for the test to check what was sent.
fn refused_before_the_upstream(rig: &Rig, status: StatusCode, expected: StatusCode) -> bool {
    if status == StatusCode::OK {
        return false;
    }
    assert_eq!(status, expected);
    assert!(rig.upstream.requests().is_empty());
    true
}

/// o1-pro's list price, dollars per token: $150 per million input, $600 per million output. The
/// built-in table does not list it; LiteLLM does, and reports its cost in `x-litellm-response-cost`.
const O1_PRO_INPUT: f64 = 150e-6;
const O1_PRO_OUTPUT: f64 = 600e-6;

/// A whole number the way pydantic's lax mode reads an `int` field (vLLM's and SGLang's request
/// models): an integer, a float with no fraction, or a string of digits.
fn lax_int(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Bound: spend. LiteLLM runs the model a query parameter names over the body's (`chat_completion(
/// request, model: Optional[str] = None)`: `data["model"] = ... or model or data.get("model")`), and
/// runs a body's `fallbacks` when `mock_testing_fallbacks` fails the first model. The gateway forwards
/// both, and prices, caps and reserves the request as the cheap model the body names.
#[tokio::test]
async fn attack15_litellm_model_overrides_escape_the_price_reserved() {
    let ceiling = 0.01;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    let cheap = serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let mut fallback = cheap.clone();
    fallback["mock_testing_fallbacks"] = Value::Bool(true);
    fallback["fallbacks"] = serde_json::json!(["o1-pro"]);
    let cases = [
        ("/v1/chat/completions?model=o1-pro", cheap.to_string()),
        ("/v1/chat/completions", fallback.to_string()),
    ];
    let mut violations = Vec::new();
    for (path, body) in cases {
        rig.upstream
            .reply(ok_json(chat_completion("o1-pro", 10, 10, 0)));
        let (status, _, _) = call(&rig.socket, "POST", path, &body).await;
        if refused_before_the_upstream(&rig, status, StatusCode::BAD_REQUEST) {
            let _ = rig.next_event().await;
            continue;
        }
        let _ = rig.next_event().await;
        let sent = rig.upstream.requests().pop().unwrap();
        let cap = sent.json()["max_tokens"].as_u64().unwrap();
        // What LiteLLM runs: o1-pro, with the cap priced for gpt-4o-mini.
        let worst = sent.body.len() as f64 * O1_PRO_INPUT + cap as f64 * O1_PRO_OUTPUT;
        if worst > ceiling {
            violations.push(format!(
                "{} {}: cap {cap} sent, o1-pro can cost ${worst:.4} under a ${ceiling} ceiling",
                sent.path,
                String::from_utf8_lossy(&sent.body)
            ));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Bound: spend. A body with a duplicated key is refused by the request policy (400, naming the
/// field) and never reaches the upstream: the gateway priced the last value (serde_json), an
/// upstream that keeps the first would run another.
#[tokio::test]
async fn attack15_duplicate_keys_are_refused_before_the_upstream() {
    let mut rig = rig_with(Some(0.01), Duration::from_secs(20)).await;
    let messages = r#""messages":[{"role":"user","content":"hi"}]"#;
    let cases = [
        (
            format!(
                r#"{{"model":"stet-demo-model","max_tokens":1000000,"max_tokens":16,{messages}}}"#
            ),
            "max_tokens",
        ),
        (
            format!(r#"{{"model":"stet-demo-model","n":128,"n":1,"max_tokens":500,{messages}}}"#),
            "n",
        ),
        (
            format!(
                r#"{{"model":"o1-pro","model":"stet-demo-model","max_tokens":500,{messages}}}"#
            ),
            "model",
        ),
    ];
    for (body, field) in cases {
        let (status, _, reply) = call(&rig.socket, "POST", "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["error"]["param"], Value::from(field), "{body}");
        match rig.next_event().await {
            GatewayEvent::Refused { refusal } => {
                assert_eq!(refusal.field, field);
                assert_eq!(refusal.rule, crate::gateway::policy::Rule::DuplicateKey);
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    assert!(rig.upstream.requests().is_empty());
}

/// Bound: spend. With both output fields named, the gateway reads the smaller whole number and,
/// when that fits, sends the body as it came: a `max_completion_tokens` it cannot read as a whole
/// number (`"1000000"`, `1000000.0`, `1e6`) stays uncapped. vLLM and SGLang (pydantic, lax mode)
/// read it as 1000000 and use it first (`max_completion_tokens or max_tokens`).
#[tokio::test]
async fn attack15_an_output_field_the_gateway_cannot_read_stays_uncapped() {
    let ceiling = 0.01;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    let mut violations = Vec::new();
    for odd in [r#""1000000""#, "1000000.0", "1e6"] {
        let body = format!(
            r#"{{"model":"stet-demo-model","max_tokens":16,"max_completion_tokens":{odd},"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        rig.upstream
            .reply(ok_json(chat_completion("stet-demo-model", 10, 10, 0)));
        let (status, _, _) = call(&rig.socket, "POST", "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::OK);
        let _ = rig.next_event().await;
        let sent = rig.upstream.requests().pop().unwrap();
        let json = sent.json();
        let cap = ["max_completion_tokens", "max_tokens"]
            .iter()
            .filter_map(|field| json.get(*field).and_then(lax_int))
            .max()
            .unwrap();
        let worst = sent.body.len() as f64 * 3e-6 + cap as f64 * 15e-6;
        if worst > ceiling {
            violations.push(format!(
                "sent {}: a lax reader caps it at {cap}, ${worst:.4} under ${ceiling}",
                String::from_utf8_lossy(&sent.body)
            ));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Bound: spend. An attachment by URL is a few bytes and a 4096-token allowance: a PDF by
/// `file_url` on the responses API is up to 100 pages, each its extracted text plus an image of the
/// page (1000+ tokens a page; OpenAI's file inputs); a `video_url` part (vLLM; Gemini through LiteLLM
/// bills ~263 tokens a second of video) is not counted as an attachment at all. The upstream bills
/// the tokens it read; the ledger settles them, past the ceiling.
#[tokio::test]
async fn attack15_attachments_by_url_cost_past_their_allowance() {
    let ceiling = 0.05;
    let mut violations = Vec::new();
    let cases = [
        (
            "/v1/responses",
            serde_json::json!({"model": "stet-demo-model", "max_output_tokens": 16, "input": [{"role": "user", "content": [
                {"type": "input_file", "file_url": "https://example.invalid/100-pages.pdf"},
                {"type": "input_text", "text": "summarise"}
            ]}]}),
            // 100 pages at 1000 tokens a page.
            100_000u64,
        ),
        (
            "/v1/chat/completions",
            serde_json::json!({"model": "stet-demo-model", "max_tokens": 16, "messages": [{"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": "https://example.invalid/one-hour.mp4"}},
                {"type": "text", "text": "summarise"}
            ]}]}),
            // 3600 s at 263 tokens a second.
            946_800u64,
        ),
    ];
    for (path, body, billed_input) in cases {
        let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
        rig.upstream.reply(ok_json(chat_completion(
            "stet-demo-model",
            billed_input,
            16,
            0,
        )));
        let (status, _, _) = call(&rig.socket, "POST", path, &body.to_string()).await;
        if status != StatusCode::OK {
            continue; // refused: the bound holds
        }
        let _ = rig.next_event().await;
        let settled = rig.gateway.totals().settled_usd;
        if settled > ceiling {
            violations.push(format!(
                "{path}: admitted under ${ceiling}, the upstream read {billed_input} input tokens, settled ${settled:.4}"
            ));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Bound: spend. Predicted outputs: "any rejected prediction tokens are still billed at completion
/// token rates" (OpenAI), and they are not generated tokens `max_tokens` caps. The gateway counts a
/// prediction's bytes at the input price only: 40 000 bytes of prediction are reserved as $0.12 of
/// input and can bill as $0.60 of output.
#[tokio::test]
async fn attack15_a_prediction_bills_at_the_output_price_it_was_reserved_below() {
    let ceiling = 0.2;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    let prediction = "x".repeat(40_000);
    let body = serde_json::json!({"model": "stet-demo-model", "max_tokens": 16,
        "prediction": {"type": "content", "content": prediction},
        "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    rig.upstream
        .reply(ok_json(chat_completion("stet-demo-model", 10, 10, 0)));
    let (status, _, _) = call(&rig.socket, "POST", "/v1/chat/completions", &body).await;
    if refused_before_the_upstream(&rig, status, StatusCode::PAYMENT_REQUIRED) {
        return;
    }
    let _ = rig.next_event().await;
    let sent = rig.upstream.requests().pop().unwrap();
    let json = sent.json();
    let predicted = json["prediction"]["content"].as_str().map_or(0, str::len) as u64;
    let cap = json["max_tokens"].as_u64().unwrap();
    // A token a byte, as the gateway itself bounds input; rejected prediction tokens at output price.
    let worst =
        (sent.body.len() as u64 - predicted) as f64 * 3e-6 + (cap + predicted) as f64 * 15e-6;
    assert!(
        worst <= ceiling,
        "admitted under ${ceiling} with a {predicted}-byte prediction and cap {cap}: can bill ${worst:.4}"
    );
}

/// Bound: spend (assumption (b), broken by the agent). `service_tier: "priority"` is billed at the
/// priority price (gpt-4o: $4.25 / $17 per million against the table's $2.50 / $10); the agent
/// chooses it, the gateway reserves and settles at the standard price.
#[tokio::test]
async fn attack15_the_priority_tier_bills_above_the_table_price() {
    let ceiling = 0.01;
    let mut rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    let body = serde_json::json!({"model": "gpt-4o", "service_tier": "priority",
        "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let mut reply = chat_completion("gpt-4o-2024-08-06", 10, 10, 0);
    reply["service_tier"] = Value::from("priority");
    rig.upstream.reply(ok_json(reply));
    let (status, _, _) = call(&rig.socket, "POST", "/v1/chat/completions", &body).await;
    if refused_before_the_upstream(&rig, status, StatusCode::BAD_REQUEST) {
        return;
    }
    let _ = rig.next_event().await;
    let sent = rig.upstream.requests().pop().unwrap();
    let json = sent.json();
    assert_eq!(json["service_tier"], "priority");
    let cap = json["max_tokens"].as_u64().unwrap();
    let worst = sent.body.len() as f64 * 4.25e-6 + cap as f64 * 17e-6;
    assert!(
        worst <= ceiling,
        "sent at the priority tier with cap {cap}: can bill ${worst:.4} under ${ceiling}"
    );
}

/// Bound: spend. An upstream's error status settles at $0, yet the agent can make the upstream give
/// up after the provider has started billing: LiteLLM honours the agent's `x-litellm-timeout`
/// request header (answering 408 while the provider finishes and bills a non-streamed request) and
/// `x-litellm-num-retries`. The gateway forwards both headers; each such request reserves all that
/// is left, is sent with a cap for all of it, and counts nothing, so the agent can repeat it forever.
#[tokio::test]
async fn attack15_an_error_status_the_agent_provokes_counts_nothing() {
    let ceiling = 0.01;
    let rig = rig_with(Some(ceiling), Duration::from_secs(20)).await;
    let rounds = 5;
    let mut could_cost = 0.0;
    for _ in 0..rounds {
        rig.upstream.reply(Reply::Full {
            status: 408,
            headers: vec![("content-type", "application/json".to_owned())],
            body: r#"{"error":{"message":"litellm.Timeout: Request timed out","type":"timeout","code":"408"}}"#.to_owned(),
        });
        let response = send(
            &rig.socket,
            "POST",
            "/v1/chat/completions",
            &[
                ("content-type", "application/json"),
                ("x-litellm-timeout", "0.001"),
                ("x-litellm-num-retries", "10"),
            ],
            &chat_request("stet-demo-model"),
        )
        .await;
        let status = response.status();
        within(response.into_body().collect()).await.unwrap();
        if status == StatusCode::PAYMENT_REQUIRED {
            // The timed-out requests counted what they reserved: nothing is left.
            break;
        }
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        let sent = rig.upstream.requests().pop().unwrap();
        assert!(
            sent.headers.get("x-litellm-timeout").is_none()
                && sent.headers.get("x-litellm-num-retries").is_none(),
            "the agent's headers steer the upstream: {:?}",
            sent.headers
        );
        could_cost += worst_as_sent(&sent);
    }
    let totals = rig.gateway.totals();
    assert!(
        could_cost <= ceiling + 1e-9 || totals.settled_usd >= ceiling,
        "{rounds} requests forwarded with a timeout the agent set, each able to bill up to ${:.4} (${could_cost:.4} together, before LiteLLM's retries); the ledger settled ${:.4}",
        could_cost / rounds as f64,
        totals.settled_usd
    );
}

/// The process's peak resident memory in bytes since the last reset.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn current_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Whether a request failed because the server answered or closed before taking the whole body.
fn closed_early(error: &hyper::Error) -> bool {
    let io_kind = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    error.is_closed()
        || error.is_incomplete_message()
        || error.is_canceled()
        || matches!(
            io_kind,
            Some(std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
        )
}

/// Bound: the host's memory. Every connection may send a 32 MiB body, and there is no limit on
/// connections; `prepare` parses it into a `serde_json::Value` (32 bytes a value: `[0,0,…]` is 16
/// times its size) and clones the whole request twice more (`unbounded_part`'s stored-file walk and
/// `attachments`), before the ledger refuses it. Three bodies of 32 MiB in flight take gigabytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack15_request_bodies_are_amplified_in_the_hosts_memory() {
    let rig = rig_with(Some(0.01), Duration::from_secs(60)).await;
    let mut body = String::from(r#"{"model":"stet-demo-model","x":["#);
    let target = 32 * 1024 * 1024 - 64;
    while body.len() < target {
        body.push_str("0,");
    }
    body.push_str("0]}");
    let body = Arc::new(body);
    let concurrent = 3;
    // Reset the peak (VmHWM) to the present.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = current_rss();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..concurrent {
        let (socket, body) = (rig.socket.clone(), Arc::clone(&body));
        calls.spawn(async move {
            let stream = UnixStream::connect(&socket).await.unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let request = Request::builder()
                .method("POST")
                .uri("/v1/chat/completions")
                .header("host", "x")
                .body(Full::new(Bytes::from(body.as_bytes().to_vec())))
                .unwrap();
            match sender.send_request(request).await {
                Ok(response) => Some(response.status()),
                // The gateway may refuse and close before the whole body is written: a refusal too.
                Err(error) if closed_early(&error) => None,
                Err(error) => panic!("{error:?}"),
            }
        });
    }
    while let Some(status) = calls.join_next().await {
        // Refused in the end (a field stet cannot price, the budget of bytes, the ceiling): what
        // matters is the memory it took before.
        if let Some(status) = status.unwrap() {
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{status}"
            );
        }
    }
    let grown = peak_rss().saturating_sub(before);
    let received = (concurrent * body.len()) as u64;
    assert!(
        grown <= 4 * received,
        "{concurrent} bodies of {} MiB ({} MiB received) raised the host's peak memory by {} MiB ({:.1}× what was received)",
        body.len() >> 20,
        received >> 20,
        grown >> 20,
        grown as f64 / received as f64
    );
    assert!(rig.upstream.requests().is_empty());
}

/// One `[model]` example of docs/agents.md: what it configures and what it says arrives upstream.
#[derive(Debug)]
struct DocumentedEndpoint {
    harness_model: String,
    base_url: String,
    keyed: bool,
    forwarded_path: String,
    forwarded_model: String,
}

/// Every TOML block of docs/agents.md that configures `[model]`, with its `# forwards:` line.
fn documented_endpoints() -> Vec<DocumentedEndpoint> {
    let doc = include_str!("../../../../docs/agents.md");
    let forwards = regex::Regex::new(r"(?m)^# forwards: POST (\S+), model (\S+)$").unwrap();
    doc.split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .filter(|block| block.contains("[model]"))
        .map(|block| {
            let table: toml::Table = block.parse().unwrap_or_else(|e| panic!("{e}\n{block}"));
            let said = forwards
                .captures(block)
                .unwrap_or_else(|| panic!("no `# forwards:` line in\n{block}"));
            DocumentedEndpoint {
                harness_model: table["harness"]["openhands"]["model"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                base_url: table["model"]["base_url"].as_str().unwrap().to_owned(),
                keyed: table["model"].get("api_key_env").is_some(),
                forwarded_path: said[1].to_owned(),
                forwarded_model: said[2].to_owned(),
            }
        })
        .collect()
}

#[tokio::test]
async fn the_documented_endpoints_receive_what_the_docs_say() {
    let endpoints = documented_endpoints();
    assert_eq!(endpoints.len(), 5, "{endpoints:#?}");
    for endpoint in endpoints {
        // LiteLLM strips the provider prefix of an `openai/` model before asking the relay.
        let asked = endpoint
            .harness_model
            .strip_prefix("openai/")
            .unwrap_or_else(|| panic!("not an openai/ model: {endpoint:?}"));
        assert_eq!(asked, endpoint.forwarded_model, "{endpoint:?}");
        // The documented URL's path, on a loopback server.
        let upstream = Upstream::start().await;
        let authority = upstream
            .base
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
            .unwrap()
            .0;
        let path = endpoint
            .base_url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .map_or(String::new(), |(_, path)| format!("/{path}"));
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("model.sock");
        let key = random_key();
        let mut config = config(
            &format!("http://{authority}{path}"),
            &key,
            None,
            Duration::from_secs(20),
        );
        if !endpoint.keyed {
            config.api_key = None;
        }
        let (_gateway, _events) = Gateway::start(&socket, config, sanitizer()).await.unwrap();
        upstream.reply(ok_json(chat_completion(asked, 10, 5, 0)));
        let (status, _, _) = call(
            &socket,
            "POST",
            "/v1/chat/completions",
            &chat_request(asked),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{endpoint:?}");
        let requests = upstream.requests();
        assert_eq!(requests.len(), 1, "{endpoint:?}");
        assert_eq!(requests[0].path, endpoint.forwarded_path, "{endpoint:?}");
        assert_eq!(requests[0].json()["model"], asked, "{endpoint:?}");
        let authorization = requests[0]
            .headers
            .get("authorization")
            .map(|value| value.to_str().unwrap().to_owned());
        assert_eq!(
            authorization,
            endpoint.keyed.then(|| format!("Bearer {key}")),
            "{endpoint:?}"
        );
    }
}

mod network;
mod policy;
mod wires;
