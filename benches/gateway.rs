//! Model gateway overhead (issue 7, "Performance"): the latency a model request gains on its way
//! through the gateway, and through the in-sandbox relay in front of it, over asking the upstream
//! directly; and how fast a streamed completion's tokens pass through.
//!
//! Latency: sequential non-streaming `POST /v1/chat/completions` on one keep-alive HTTP/1.1
//! connection per path, answered by a [`ScriptedModel`] on loopback:
//!
//! * direct: client → scripted model (TCP);
//! * gateway: client → the gateway's unix socket → scripted model;
//! * relay + gateway: client → `stet_sandbox::relay::relay` on an ephemeral 127.0.0.1 port → gateway socket →
//!   scripted model: the production path minus the container boundary (the same kernel loopback and
//!   unix-socket path);
//! * relay + gateway with a cost ceiling: the same, under a ceiling, where the gateway rewrites every
//!   body with an output cap (`max_tokens`).
//!
//! Each runs with a small request and with an agent-sized one (~32 KiB of conversation). The paths
//! take turns in rounds of 100 requests, so that a disturbance on the machine lands on all of them;
//! p50, p99 and mean are per request, and "added" is a path's percentile minus the direct path's.
//!
//! Streaming: a tiny upstream in this file answers a `"stream": true` request with one server-sent
//! `chat.completion.chunk` per token (one short word each), a usage chunk and `data: [DONE]`; the
//! client reads each stream to its end, directly and through the gateway (with and without the relay).
//!
//! Each side runs on a runtime and thread of its own, as it would in its own process: the client on a
//! current-thread runtime (the scripted agent's), the relay on one (`stet sandbox-idle`'s), the
//! gateway on two workers (a dispatch's), the upstreams on one. The gateway's events are drained as
//! they come and checked at the end: every response metered, no error.
//!
//! Wire APIs: the Responses API (`POST /v1/responses`, as the Codex CLI asks it) and Anthropic's
//! Messages API (`POST /v1/messages`, as Claude Code asks it, with `x-api-key` and
//! `anthropic-version`), each plain and streamed, answered by the scripted model with a real-shaped
//! tool call and usage: direct, through the gateway's unix socket, and through it under a ceiling
//! (output capped, every body rewritten). "added" is again a path's percentile minus the direct one.
//!
//! `cargo bench --bench gateway`. `STET_BENCH_REQUESTS` timed requests per path and body size
//! (default 5000, after 200 of warm-up), `STET_BENCH_STREAMS` timed streams per path (default 20),
//! `STET_BENCH_TOKENS` chunks per stream (default 20000). The default run takes about 25 s on 2
//! cores once built; `STET_BENCH_REQUESTS=300 STET_BENCH_STREAMS=3` is a quick check.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde_json::json;
use stet_engine::gateway::prices::PriceTable;
use stet_engine::gateway::{Gateway, GatewayConfig, GatewayEvent, GatewayLimits};
use stet_sanitize::sanitize::TokenSanitizer;
use stet_scripted_model::{DEMO_MODEL, ScriptedModel, Turn};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::oneshot;

#[path = "support/side.rs"]
mod side;
use side::Side;

/// Warm-up requests per path before the timed ones.
const WARM_UP: usize = 200;
/// Requests per path in one round; the paths take turns round by round.
const ROUND: usize = 100;
/// Warm-up streams per path.
const WARM_UP_STREAMS: usize = 2;
/// The agent-sized request body, roughly.
const LARGE_BODY: usize = 32 * 1024;
/// A ceiling the benchmark never reaches, so that the gateway caps every request's output.
const UNREACHED_CEILING_USD: f64 = 1_000_000.0;

fn main() {
    let requests = setting("STET_BENCH_REQUESTS", 5000).max(1);
    let streams = setting("STET_BENCH_STREAMS", 20).max(1);
    let tokens = setting("STET_BENCH_TOKENS", 20_000);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let upstream = Side::new("bench-upstream", None);
    let gateway = Side::new("bench-gateway", Some(2));
    let relay = Side::new("bench-relay", None);
    client.block_on(bench(
        &upstream, &gateway, &relay, requests, streams, tokens,
    ));
    drop(client);
    relay.stop();
    gateway.stop();
    upstream.stop();
}

fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
        Err(_) => default,
    }
}

async fn bench(
    upstream: &Side,
    gateway_side: &Side,
    relay_side: &Side,
    requests: usize,
    streams: usize,
    tokens: usize,
) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap_or_else(|e| panic!("{e}")));
    let tally = Arc::new(Tally::default());

    // Non-streaming latency against the scripted model.
    let model = upstream
        .run(ScriptedModel::serve(loopback()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let plain = start_gateway(
        gateway_side,
        dir.path().join("plain.sock"),
        model.base_url(),
        None,
        &sanitizer,
        &tally,
    )
    .await;
    let capped = start_gateway(
        gateway_side,
        dir.path().join("capped.sock"),
        model.base_url(),
        Some(UNREACHED_CEILING_USD),
        &sanitizer,
        &tally,
    )
    .await;
    let (plain_relay, stop_plain_relay) = start_relay(relay_side, plain.socket().to_owned()).await;
    let (capped_relay, stop_capped_relay) =
        start_relay(relay_side, capped.socket().to_owned()).await;
    let targets = [
        ("direct", Target::Tcp(model.address())),
        (
            "gateway (unix socket)",
            Target::Unix(plain.socket().to_owned()),
        ),
        ("relay + gateway", Target::Tcp(plain_relay)),
        ("relay + gateway, ceiling set", Target::Tcp(capped_relay)),
    ];

    println!(
        "model gateway: {requests} timed requests per path and body size ({WARM_UP} warm-up), \
         {streams} timed streams of {tokens} chunks per path"
    );
    for (size, body) in [
        ("small request", chat_body(0, false)),
        ("agent-sized request", chat_body(LARGE_BODY, false)),
    ] {
        let results = latency(&targets, &body, requests).await;
        print_latency(&format!("{size} ({} B body)", body.len()), &results);
    }

    // Streamed tokens against the streaming upstream.
    let frames = Arc::new(sse_frames(tokens));
    let expected: usize = frames.iter().map(Bytes::len).sum();
    let frames_for_server = Arc::clone(&frames);
    let sse_upstream = upstream
        .run(async move {
            let listener = TcpListener::bind(loopback())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
            tokio::spawn(serve_stream(listener, frames_for_server));
            address
        })
        .await;
    let streaming = start_gateway(
        gateway_side,
        dir.path().join("stream.sock"),
        format!("http://{sse_upstream}/v1"),
        None,
        &sanitizer,
        &tally,
    )
    .await;
    let (stream_relay, stop_stream_relay) =
        start_relay(relay_side, streaming.socket().to_owned()).await;
    let stream_targets = [
        ("direct", Target::Tcp(sse_upstream)),
        (
            "gateway (unix socket)",
            Target::Unix(streaming.socket().to_owned()),
        ),
        ("relay + gateway", Target::Tcp(stream_relay)),
    ];
    let results = streaming_throughput(&stream_targets, streams, expected).await;
    print_streaming(tokens, expected, &results);

    // The Responses and Messages APIs, plain and streamed.
    wire_apis(upstream, gateway_side, &dir, &sanitizer, requests).await;

    // Everything the gateways forwarded was metered, nothing went wrong.
    let through_gateway = 3 * 2 * (WARM_UP + requests);
    let streamed_through_gateway = 2 * (WARM_UP_STREAMS + streams);
    let dropped = plain.dropped_events() + capped.dropped_events() + streaming.dropped_events();
    for gateway in [plain, capped, streaming] {
        gateway_side.run(gateway.shutdown()).await;
    }
    let _ = stop_plain_relay.send(());
    let _ = stop_capped_relay.send(());
    let _ = stop_stream_relay.send(());
    upstream.run(model.shutdown()).await;
    let usage = tally.usage.load(Ordering::Relaxed);
    let streamed = tally.streamed.load(Ordering::Relaxed);
    let streamed_tokens = tally.streamed_output_tokens.load(Ordering::Relaxed);
    let errors = tally.errors.lock().unwrap_or_else(PoisonError::into_inner);
    println!(
        "\ngateway events: {usage} usage ({streamed} streamed, {streamed_tokens} streamed output \
         tokens), {} errors, {dropped} dropped",
        errors.len()
    );
    assert!(errors.is_empty(), "gateway errors: {errors:?}");
    assert_eq!(dropped, 0, "gateway events dropped");
    assert_eq!(usage, (through_gateway + streamed_through_gateway) as u64);
    assert_eq!(streamed, streamed_through_gateway as u64);
    assert_eq!(streamed_tokens, (streamed_through_gateway * tokens) as u64);
}

/// The gateway's added latency per Responses and Messages request, plain and streamed, against the
/// scripted model answering every request with a tool call (a Codex `shell` call, a Claude Code
/// `Bash` tool use) and its usage; every request through a gateway must be metered, without error.
async fn wire_apis(
    upstream: &Side,
    gateway_side: &Side,
    dir: &tempfile::TempDir,
    sanitizer: &Arc<TokenSanitizer>,
    requests: usize,
) {
    let tally = Arc::new(Tally::default());
    let model = upstream
        .run(async {
            let model = ScriptedModel::serve(loopback()).await?;
            model.set_turns(vec![Turn::call(
                "shell",
                json!({"command": ["bash", "-lc", "cargo test --lib"], "workdir": "/workspace"}),
            )]);
            Ok::<_, std::io::Error>(model)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let plain = start_gateway(
        gateway_side,
        dir.path().join("wires.sock"),
        model.base_url(),
        None,
        sanitizer,
        &tally,
    )
    .await;
    let capped = start_gateway(
        gateway_side,
        dir.path().join("wires-capped.sock"),
        model.base_url(),
        Some(UNREACHED_CEILING_USD),
        sanitizer,
        &tally,
    )
    .await;
    let targets = [
        ("direct", Target::Tcp(model.address())),
        (
            "gateway (unix socket)",
            Target::Unix(plain.socket().to_owned()),
        ),
        (
            "gateway, ceiling set",
            Target::Unix(capped.socket().to_owned()),
        ),
    ];
    let mut forwarded = 0;
    for stream in [false, true] {
        let mode = if stream { "streamed" } else { "plain" };
        let responses = responses_body(stream);
        let results = latency_of(
            &targets,
            &|| wire_request("/v1/responses", &responses, &[]),
            requests,
        )
        .await;
        print_latency(
            &format!("Responses API, {mode} ({} B body)", responses.len()),
            &results,
        );
        let messages = messages_body(stream);
        let headers = [
            ("x-api-key", "placeholder"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "claude-code-20250219"),
        ];
        let results = latency_of(
            &targets,
            &|| wire_request("/v1/messages", &messages, &headers),
            requests,
        )
        .await;
        print_latency(
            &format!("Messages API, {mode} ({} B body)", messages.len()),
            &results,
        );
        forwarded += 2 * 2 * (WARM_UP + requests);
    }
    for gateway in [plain, capped] {
        gateway_side.run(gateway.shutdown()).await;
    }
    upstream.run(model.shutdown()).await;
    let errors = tally.errors.lock().unwrap_or_else(PoisonError::into_inner);
    assert!(errors.is_empty(), "gateway errors: {errors:?}");
    assert_eq!(tally.usage.load(Ordering::Relaxed), forwarded as u64);
}

/// A Codex-shaped Responses request: instructions, a user message, the shell tool.
fn responses_body(stream: bool) -> Bytes {
    let body = json!({
        "model": "gpt-5-codex",
        "instructions": "You are a coding agent running in a sandboxed repository.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make the greeting say hello to the user by name."}]}],
        "tools": [{"type": "function", "name": "shell", "description": "Runs a command.", "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}, "strict": false}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "bench",
    });
    Bytes::from(serde_json::to_vec(&body).unwrap_or_else(|e| panic!("{e}")))
}

/// A Claude Code-shaped Messages request: a cached system prompt, a user message, the Bash tool.
fn messages_body(stream: bool) -> Bytes {
    let body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code, working in a sandboxed repository.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Make the greeting say hello to the user by name."}]}],
        "tools": [{"name": "Bash", "description": "Runs a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
        "metadata": {"user_id": "bench"},
        "stream": stream,
    });
    Bytes::from(serde_json::to_vec(&body).unwrap_or_else(|e| panic!("{e}")))
}

fn wire_request(path: &str, body: &Bytes, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut request = Request::post(path)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer dummy");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .body(Full::new(body.clone()))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// What the gateways reported.
#[derive(Default)]
struct Tally {
    usage: AtomicU64,
    streamed: AtomicU64,
    streamed_output_tokens: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, event: GatewayEvent) {
        match event {
            GatewayEvent::Usage {
                report, streamed, ..
            } => {
                self.usage.fetch_add(1, Ordering::Relaxed);
                if streamed {
                    self.streamed.fetch_add(1, Ordering::Relaxed);
                    self.streamed_output_tokens
                        .fetch_add(report.output_tokens, Ordering::Relaxed);
                }
            }
            GatewayEvent::Error { message } => self
                .errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message.into_string()),
            GatewayEvent::Refused { refusal } => self
                .errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("refused: {}", refusal.field)),
            GatewayEvent::Egress { tool, .. } => self
                .errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("egress through the provider tool {tool}")),
            GatewayEvent::CeilingReached { .. } => self
                .errors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push("the cost ceiling was reached".to_owned()),
        }
    }
}

/// Starts a gateway on `side` and drains its events into `tally` there.
async fn start_gateway(
    side: &Side,
    socket: PathBuf,
    upstream: String,
    ceiling_usd: Option<f64>,
    sanitizer: &Arc<TokenSanitizer>,
    tally: &Arc<Tally>,
) -> Gateway {
    let sanitizer = Arc::clone(sanitizer);
    let tally = Arc::clone(tally);
    side.run(async move {
        let config = GatewayConfig {
            upstream,
            api_key: None,
            prices: Arc::new(PriceTable::builtin()),
            ceiling_usd,
            request_timeout: Duration::from_secs(120),
            limits: GatewayLimits::default(),
            policy: Arc::new(stet_engine::gateway::policy::RequestPolicy::default()),
        };
        let (gateway, mut events) = Gateway::start(&socket, config, sanitizer)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                tally.record(event);
            }
        });
        gateway
    })
    .await
}

/// Starts a relay to `socket` on `side`, on a free loopback port; returns the port's address and
/// what stops the relay.
async fn start_relay(side: &Side, socket: PathBuf) -> (SocketAddr, oneshot::Sender<()>) {
    // `relay` binds the address itself: find a free port, then let it go.
    let address = std::net::TcpListener::bind(loopback())
        .and_then(|listener| listener.local_addr())
        .unwrap_or_else(|e| panic!("{e}"));
    let (stop, stopped) = oneshot::channel::<()>();
    side.handle.spawn(async move {
        stet_sandbox::relay::relay(address, socket, async {
            let _ = stopped.await;
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
    for _ in 0..1000 {
        if TcpStream::connect(address).await.is_ok() {
            return (address, stop);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the relay on {address} did not start");
}

/// Where a client connects.
#[derive(Debug, Clone)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A fresh keep-alive HTTP/1.1 connection to `target`.
async fn connect(target: &Target) -> SendRequest<Full<Bytes>> {
    match target {
        Target::Tcp(address) => {
            let stream = TcpStream::connect(address)
                .await
                .unwrap_or_else(|e| panic!("{address}: {e}"));
            stream.set_nodelay(true).unwrap_or_else(|e| panic!("{e}"));
            handshake(stream).await
        }
        Target::Unix(path) => {
            handshake(
                UnixStream::connect(path)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            )
            .await
        }
    }
}

async fn handshake<S>(stream: S) -> SendRequest<Full<Bytes>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

fn chat_request(body: &Bytes) -> Request<Full<Bytes>> {
    Request::post("/v1/chat/completions")
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer dummy")
        .body(Full::new(body.clone()))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Sends `request` and reads the whole response; returns the body's length.
async fn exchange(sender: &mut SendRequest<Full<Bytes>>, request: Request<Full<Bytes>>) -> usize {
    sender.ready().await.unwrap_or_else(|e| panic!("{e}"));
    let response = sender
        .send_request(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    body.len()
}

/// A chat completion request: a short question, or (`size` > 0) a conversation of about `size`
/// bytes like an agent's: a system prompt, tool calls and their output, then the question.
fn chat_body(size: usize, stream: bool) -> Bytes {
    let mut messages = vec![json!({
        "role": "system",
        "content": "You are a careful software engineer working in a sandboxed repository.\n\
                    Use the tools to read, edit and test the code.",
    })];
    let mut turn = 0;
    while size > 0 && serde_json::to_vec(&messages).map_or(0, |v| v.len()) < size {
        turn += 1;
        messages.push(json!({
            "role": "assistant",
            "content": format!("Step {turn}: I will look at src/lib.rs and run the tests again."),
            "tool_calls": [{
                "id": format!("call_{turn}"),
                "type": "function",
                "function": {
                    "name": "execute_bash",
                    "arguments": format!("{{\"command\": \"cargo test --lib -- step_{turn}\"}}"),
                },
            }],
        }));
        let output: String = (0..12)
            .map(|line| {
                format!(
                    "test module_{turn}::case_{line} ... ok\t(\"{}\" \\ {line})\n",
                    "x".repeat(line * 3)
                )
            })
            .collect();
        messages.push(json!({
            "role": "tool",
            "tool_call_id": format!("call_{turn}"),
            "content": output,
        }));
    }
    messages.push(json!({
        "role": "user",
        "content": "Make the greeting say hello to the user by name, and keep the tests passing.",
    }));
    let mut body = json!({ "model": DEMO_MODEL, "messages": messages });
    if stream {
        body["stream"] = json!(true);
    }
    Bytes::from(serde_json::to_vec(&body).unwrap_or_else(|e| panic!("{e}")))
}

/// Per-request latencies of one path, in nanoseconds.
struct Latencies {
    name: &'static str,
    nanos: Vec<u64>,
}

impl Latencies {
    fn sorted(&self) -> Vec<u64> {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        sorted
    }

    /// Nearest-rank percentile.
    fn percentile(sorted: &[u64], p: f64) -> u64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// p50, p99 and mean.
    fn summary(&self) -> (u64, u64, u64) {
        let sorted = self.sorted();
        let mean = sorted.iter().sum::<u64>() / sorted.len() as u64;
        (
            Self::percentile(&sorted, 50.0),
            Self::percentile(&sorted, 99.0),
            mean,
        )
    }
}

/// Times `requests` chat completions of `body` per target, in rounds, after a warm-up.
async fn latency(
    targets: &[(&'static str, Target)],
    body: &Bytes,
    requests: usize,
) -> Vec<Latencies> {
    latency_of(targets, &|| chat_request(body), requests).await
}

/// Times `requests` requests made by `make` per target, in rounds, after a warm-up.
async fn latency_of(
    targets: &[(&'static str, Target)],
    make: &dyn Fn() -> Request<Full<Bytes>>,
    requests: usize,
) -> Vec<Latencies> {
    let mut senders = Vec::with_capacity(targets.len());
    for (_, target) in targets {
        let mut sender = connect(target).await;
        for _ in 0..WARM_UP {
            exchange(&mut sender, make()).await;
        }
        senders.push(sender);
    }
    let mut results: Vec<Latencies> = targets
        .iter()
        .map(|(name, _)| Latencies {
            name,
            nanos: Vec::with_capacity(requests),
        })
        .collect();
    let mut done = 0;
    while done < requests {
        let round = ROUND.min(requests - done);
        for (sender, result) in senders.iter_mut().zip(&mut results) {
            for _ in 0..round {
                let request = make();
                let start = Instant::now();
                exchange(sender, request).await;
                result.nanos.push(start.elapsed().as_nanos() as u64);
            }
        }
        done += round;
    }
    results
}

fn micros(nanos: u64) -> String {
    format!("{:.1} µs", nanos as f64 / 1000.0)
}

fn print_latency(title: &str, results: &[Latencies]) {
    println!("\nlatency per request, {title}");
    println!(
        "  {:<30} {:>10} {:>10} {:>10} {:>11} {:>11}",
        "path", "p50", "p99", "mean", "added p50", "added p99"
    );
    let (direct_p50, direct_p99, _) = results[0].summary();
    for result in results {
        let (p50, p99, mean) = result.summary();
        let added = |value: u64, base: u64| {
            if result.name == results[0].name {
                String::new()
            } else {
                format!("{:+.1} µs", (value as f64 - base as f64) / 1000.0)
            }
        };
        println!(
            "  {:<30} {:>10} {:>10} {:>10} {:>11} {:>11}",
            result.name,
            micros(p50),
            micros(p99),
            micros(mean),
            added(p50, direct_p50),
            added(p99, direct_p99),
        );
    }
}

/// The streaming upstream's response, frame by frame: `tokens` one-word content chunks, the final
/// chunk, a usage chunk, `[DONE]`.
fn sse_frames(tokens: usize) -> Vec<Bytes> {
    const WORDS: [&str; 8] = [
        " the",
        " greeting",
        " now",
        " says",
        " hello",
        " to",
        " you",
        ".",
    ];
    let chunk = |choices: serde_json::Value, usage: serde_json::Value| {
        let event = json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": DEMO_MODEL,
            "choices": choices,
            "usage": usage,
        });
        Bytes::from(format!("data: {event}\n\n"))
    };
    let mut frames: Vec<Bytes> = (0..tokens)
        .map(|index| {
            chunk(
                json!([{
                    "index": 0,
                    "delta": { "content": WORDS[index % WORDS.len()] },
                    "finish_reason": null,
                }]),
                serde_json::Value::Null,
            )
        })
        .collect();
    frames.push(chunk(
        json!([{ "index": 0, "delta": {}, "finish_reason": "stop" }]),
        serde_json::Value::Null,
    ));
    frames.push(chunk(
        json!([]),
        json!({
            "prompt_tokens": 120,
            "completion_tokens": tokens,
            "total_tokens": 120 + tokens,
        }),
    ));
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// Answers every request, whatever it asks, with `frames` as a server-sent event stream.
async fn serve_stream(listener: TcpListener, frames: Arc<Vec<Bytes>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let frames = Arc::clone(&frames);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let frames = Arc::clone(&frames);
                async move {
                    let _ = request.into_body().collect().await;
                    let events =
                        futures_util::stream::iter((0..frames.len()).map(move |index| {
                            Ok::<_, Infallible>(Frame::data(frames[index].clone()))
                        }));
                    let mut response = Response::new(StreamBody::new(events));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("text/event-stream"),
                    );
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Seconds per stream of one path.
struct Streams {
    name: &'static str,
    seconds: Vec<f64>,
}

/// Reads `streams` whole streams per target, in turns, after a warm-up; checks each is whole.
async fn streaming_throughput(
    targets: &[(&'static str, Target)],
    streams: usize,
    expected: usize,
) -> Vec<Streams> {
    let body = chat_body(0, true);
    let mut senders = Vec::with_capacity(targets.len());
    for (_, target) in targets {
        let mut sender = connect(target).await;
        for _ in 0..WARM_UP_STREAMS {
            assert_eq!(read_stream(&mut sender, &body).await, expected);
        }
        senders.push(sender);
    }
    let mut results: Vec<Streams> = targets
        .iter()
        .map(|(name, _)| Streams {
            name,
            seconds: Vec::with_capacity(streams),
        })
        .collect();
    for _ in 0..streams {
        for (sender, result) in senders.iter_mut().zip(&mut results) {
            let start = Instant::now();
            let read = read_stream(sender, &body).await;
            result.seconds.push(start.elapsed().as_secs_f64());
            assert_eq!(read, expected, "{}: a stream came back short", result.name);
        }
    }
    results
}

/// Sends a streaming request and reads the response to its end, frame by frame; returns its length.
async fn read_stream(sender: &mut SendRequest<Full<Bytes>>, body: &Bytes) -> usize {
    sender.ready().await.unwrap_or_else(|e| panic!("{e}"));
    let response = sender
        .send_request(chat_request(body))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap_or_else(|e| panic!("{e}")).into_data() {
            read += data.len();
        }
    }
    read
}

fn print_streaming(tokens: usize, bytes: usize, results: &[Streams]) {
    println!(
        "\nstreamed tokens: {tokens} chunks per stream, {:.2} MB of SSE; median of {} streams",
        bytes as f64 / 1e6,
        results[0].seconds.len()
    );
    println!(
        "  {:<30} {:>12} {:>14} {:>10} {:>15}",
        "path", "per stream", "tokens/s", "MB/s", "time vs direct"
    );
    let median = |seconds: &[f64]| {
        let mut sorted = seconds.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    let direct = median(&results[0].seconds);
    for result in results {
        let seconds = median(&result.seconds);
        println!(
            "  {:<30} {:>9.2} ms {:>14.0} {:>10.1} {:>14.2}×",
            result.name,
            seconds * 1000.0,
            tokens as f64 / seconds,
            bytes as f64 / 1e6 / seconds,
            seconds / direct,
        );
    }
}
