//! Provider-executed tools the user enables (`[model] provider_tools`) against the running gateway and
//! the scripted upstream, which answers with the tool calls it made: a request's tool calls are
//! reserved before it is forwarded, so a ceiling that cannot cover them refuses it and the upstream
//! receives nothing; the calls the answer reports are charged exactly, plain and streamed; a broken
//! stream counts its whole reservation; and each enabled tool is audited as egress naming its host,
//! never the path or query the agent put in the URL.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use stet_engine::gateway::ledger::Totals;
use stet_engine::gateway::policy::RequestPolicy;
use stet_engine::gateway::prices::PriceTable;
use stet_engine::gateway::tool_calls::CALLS_PER_REQUEST;
use stet_engine::gateway::{Gateway, GatewayConfig, GatewayEvent, GatewayLimits};
use stet_sanitize::sanitize::TokenSanitizer;
use stet_scripted_model::{Behaviour, DEMO_MODEL, ScriptedModel};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// The prices the user gives the tools, in dollars per call.
const WEB_SEARCH_USD: f64 = 0.01;
const MCP_USD: f64 = 0.05;

/// stet's built-in price of the scripted model, in dollars per million tokens.
const INPUT_PER_MILLION: f64 = 3.0;
const OUTPUT_PER_MILLION: f64 = 15.0;

/// A gateway enabling web search and remote MCP, in front of a scripted upstream.
struct Rig {
    _dir: tempfile::TempDir,
    upstream: ScriptedModel,
    gateway: Gateway,
    events: mpsc::Receiver<GatewayEvent>,
}

impl Rig {
    async fn start(ceiling_usd: Option<f64>) -> Rig {
        let upstream = ScriptedModel::serve(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let policy = RequestPolicy {
            models: None,
            provider_tools: BTreeMap::from([
                ("web_search".to_owned(), WEB_SEARCH_USD),
                ("mcp".to_owned(), MCP_USD),
                ("web_search_options".to_owned(), WEB_SEARCH_USD),
            ]),
            api: None,
        };
        let (gateway, events) = Gateway::start(
            &dir.path().join("model.sock"),
            GatewayConfig {
                upstream: upstream.base_url(),
                api_key: None,
                prices: Arc::new(PriceTable::builtin()),
                ceiling_usd,
                request_timeout: Duration::from_secs(30),
                limits: GatewayLimits::default(),
                policy: Arc::new(policy),
            },
            Arc::new(TokenSanitizer::new().unwrap()),
        )
        .await
        .unwrap();
        Rig {
            _dir: dir,
            upstream,
            gateway,
            events,
        }
    }

    /// Sends one request to the gateway's socket and reads its reply whole.
    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Vec<u8>) {
        let stream = UnixStream::connect(self.gateway.socket()).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let bytes = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes().to_vec(),
            Err(_) => Vec::new(),
        };
        (status, bytes)
    }

    /// Events until the next `Usage` (returned with the ones before it).
    async fn until_usage(&mut self) -> (Option<f64>, Totals, Vec<GatewayEvent>) {
        let mut before = Vec::new();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(20), self.events.recv())
                .await
                .expect("no usage event within 20 s")
                .expect("the gateway's events ended");
            match event {
                GatewayEvent::Usage { report, totals, .. } => {
                    return (report.cost_usd, totals, before);
                }
                other => before.push(other),
            }
        }
    }

    /// The events sent so far, without waiting.
    fn pending(&mut self) -> Vec<GatewayEvent> {
        std::iter::from_fn(|| self.events.try_recv().ok()).collect()
    }
}

/// A Responses request enabling web search and a remote MCP server at `server_url`.
fn with_tools(server_url: &str, stream: bool) -> Value {
    json!({
        "model": DEMO_MODEL,
        "input": "Look it up.",
        "stream": stream,
        "tools": [
            {"type": "web_search"},
            {"type": "mcp", "server_label": "notes", "server_url": server_url, "require_approval": "never"},
        ],
    })
}

/// What the upstream's token counts cost at the scripted model's price.
fn token_cost(input: u64, output: u64) -> f64 {
    (input as f64 * INPUT_PER_MILLION + output as f64 * OUTPUT_PER_MILLION) / 1e6
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The usage of a Responses reply: the whole body's, or the last event's of a stream.
fn reply_usage(bytes: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(bytes);
    let usage = match serde_json::from_slice::<Value>(bytes) {
        Ok(body) => body["usage"].clone(),
        Err(_) => {
            let last = text
                .lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .filter_map(|data| serde_json::from_str::<Value>(data).ok())
                .rfind(|event| event["type"] == "response.completed")
                .expect("a response.completed event");
            last["response"]["usage"].clone()
        }
    };
    (
        usage["input_tokens"].as_u64().unwrap(),
        usage["output_tokens"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn a_ceiling_too_small_for_the_tool_calls_refuses_the_request_before_the_upstream() {
    // Eight calls of the dearest tool ($0.40) do not fit under $0.30; the tokens alone would.
    let mut rig = Rig::start(Some(0.30)).await;
    let (status, reply) = rig
        .post(
            "/v1/responses",
            &with_tools("https://mcp.example.test/", false),
        )
        .await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    let reply: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(reply["error"]["code"], "cost_ceiling_too_low_for_tools");
    assert!(
        rig.upstream.requests().is_empty(),
        "the upstream received a request the ceiling could not cover"
    );
    let events = rig.pending();
    assert!(
        events.iter().all(|event| !matches!(
            event,
            GatewayEvent::CeilingReached { .. } | GatewayEvent::Egress { .. }
        )),
        "{events:?}"
    );

    // The dispatch goes on: fewer calls fit, and the upstream is sent the bound it was priced at.
    let mut fewer = with_tools("https://mcp.example.test/", false);
    fewer["max_tool_calls"] = json!(2);
    let (status, _) = rig.post("/v1/responses", &fewer).await;
    assert_eq!(status, StatusCode::OK);
    let sent = rig.upstream.requests().pop().unwrap();
    assert_eq!(sent.body["max_tool_calls"], 2);
    let (_, totals, _) = rig.until_usage().await;
    assert!(totals.peak_reserved_usd >= 2.0 * MCP_USD, "{totals:?}");
}

#[tokio::test]
async fn the_calls_an_answer_reports_are_charged_exactly_plain_and_streamed() {
    let mut rig = Rig::start(Some(5.0)).await;
    rig.upstream.set_tool_calls(3);
    let mut settled = 0.0;
    for stream in [false, true] {
        let (status, reply) = rig
            .post(
                "/v1/responses",
                &with_tools("https://mcp.example.test/", stream),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&reply)
        );
        let sent = rig.upstream.requests().pop().unwrap();
        assert_eq!(
            sent.body["max_tool_calls"], CALLS_PER_REQUEST,
            "the bound stet reserved is sent"
        );
        let (input, output) = reply_usage(&reply);
        let (cost, totals, _) = rig.until_usage().await;
        let expected = token_cost(input, output) + 3.0 * WEB_SEARCH_USD + 3.0 * MCP_USD;
        assert!(
            approx(cost.unwrap(), expected),
            "stream {stream}: {cost:?} != {expected}"
        );
        settled += expected;
        assert!(approx(totals.settled_usd, settled), "{totals:?}");
        assert_eq!(totals.reserved_usd, 0.0, "the rest of the hold is released");
        assert!(
            totals.peak_reserved_usd >= CALLS_PER_REQUEST as f64 * MCP_USD,
            "the calls were reserved: {totals:?}"
        );
    }

    // Chat Completions with web search enabled: one call per request.
    let (status, reply) = rig
        .post(
            "/v1/chat/completions",
            &json!({"model": DEMO_MODEL, "messages": [{"role": "user", "content": "hi"}], "web_search_options": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_slice(&reply).unwrap();
    let (cost, _, _) = rig.until_usage().await;
    let expected = token_cost(
        reply["usage"]["prompt_tokens"].as_u64().unwrap(),
        reply["usage"]["completion_tokens"].as_u64().unwrap(),
    ) + WEB_SEARCH_USD;
    assert!(approx(cost.unwrap(), expected), "{cost:?} != {expected}");
}

#[tokio::test]
async fn a_broken_stream_counts_its_whole_tool_reservation() {
    let mut rig = Rig::start(Some(5.0)).await;
    rig.upstream.set_behaviour(Behaviour::CutStream);
    let _ = rig
        .post(
            "/v1/responses",
            &with_tools("https://mcp.example.test/", true),
        )
        .await;
    let (cost, totals, _) = rig.until_usage().await;
    assert!(
        totals.peak_reserved_usd >= CALLS_PER_REQUEST as f64 * MCP_USD,
        "{totals:?}"
    );
    assert!(
        approx(cost.unwrap(), totals.peak_reserved_usd),
        "{cost:?} {totals:?}"
    );
    assert!(approx(totals.settled_usd, totals.peak_reserved_usd));
}

#[tokio::test]
async fn each_enabled_tool_is_egress_naming_its_host_and_never_the_query() {
    let mut rig = Rig::start(None).await;
    let canary = format!("canary{}", uuid::Uuid::new_v4().simple());
    let url =
        format!("https://user:{canary}@mcp.example.test:8443/{canary}/sse?data={canary}#{canary}");
    let (status, _) = rig.post("/v1/responses", &with_tools(&url, false)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, _, before) = rig.until_usage().await;
    let mut egress: Vec<(String, Option<String>, f64)> = before
        .iter()
        .filter_map(|event| match event {
            GatewayEvent::Egress {
                tool,
                host,
                price_usd,
                ..
            } => Some((
                tool.as_str().to_owned(),
                host.as_ref().map(|host| host.as_str().to_owned()),
                *price_usd,
            )),
            _ => None,
        })
        .collect();
    egress.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        egress,
        vec![
            (
                "mcp".to_owned(),
                Some("mcp.example.test:8443".to_owned()),
                MCP_USD
            ),
            ("web_search".to_owned(), None, WEB_SEARCH_USD),
        ]
    );
    let everything = format!("{before:?}{:?}", rig.pending());
    assert!(!everything.contains(&canary), "{everything}");
    // The user enabled the tool: the upstream is sent its URL as the agent wrote it.
    let sent = rig.upstream.requests().pop().unwrap();
    assert_eq!(
        sent.body["tools"][1]["server_url"],
        Value::from(url.as_str())
    );
}

/// The scripted upstream answers with the calls it made, in OpenAI's item shapes.
#[tokio::test]
async fn the_scripted_upstream_reports_its_tool_calls_within_max_tool_calls() {
    let rig = Rig::start(None).await;
    rig.upstream.set_tool_calls(5);
    let (status, reply) = rig
        .post(
            "/v1/responses",
            &with_tools("https://mcp.example.test/", false),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let reply: Value = serde_json::from_slice(&reply).unwrap();
    let kinds: Vec<&str> = reply["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    let calls = CALLS_PER_REQUEST as usize;
    assert_eq!(kinds.len(), calls + 1, "{kinds:?}");
    assert_eq!(&kinds[..5], ["web_search_call"; 5]);
    assert!(
        kinds[5..calls].iter().all(|kind| *kind == "mcp_call"),
        "{kinds:?}"
    );
    assert_eq!(kinds[calls], "message");
}
