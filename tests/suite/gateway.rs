//! The model gateway end to end, against the real Docker engine: the scripted agent asks a scripted
//! OpenAI-compatible upstream (on the test's loopback) through the relay in a `--network none`
//! sandbox and the gateway on the host. What the upstream received is checked (the key arrives there
//! and nowhere else), as is everything the dispatch showed and kept.

use super::support::serving_runtime;

use std::net::{Ipv4Addr, SocketAddr};

use stet_protocol::event::{EventKind, ItemKind};
use stet_protocol::state::Phase;
use stet_scripted_model::{Behaviour, ModelRequest, ScriptedModel};

use super::headless::{Project, docker_ready, files_under, run, scenario};

/// The variable of stet's environment that holds the model key in these tests.
pub(super) const KEY_ENV: &str = "STET_TEST_GATEWAY_KEY";

/// A model key made up at run time, shaped like no real provider's.
fn canary_key() -> String {
    format!("canary-{}", uuid::Uuid::new_v4().simple())
}

/// A scripted upstream on loopback, served by `runtime`'s workers while the test runs stet.
fn upstream(runtime: &tokio::runtime::Runtime) -> ScriptedModel {
    runtime
        .block_on(ScriptedModel::serve(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            0,
        ))))
        .unwrap()
}

impl Project {
    /// Points the user's `[model]` at `upstream`, the key in [`KEY_ENV`] (machine settings: the
    /// user's own configuration names them); `extra` lines go into the `[model]` table too.
    fn use_model(&self, upstream: &ScriptedModel, extra: &str) {
        self.home.add_user_config(&format!(
            "\n[model]\nbase_url = \"{}\"\napi_key_env = \"{KEY_ENV}\"\n{extra}",
            upstream.base_url()
        ));
    }
}

fn chat_requests(upstream: &ScriptedModel) -> Vec<ModelRequest> {
    upstream
        .requests()
        .into_iter()
        .filter(|request| request.path == "/v1/chat/completions")
        .collect()
}

/// Every file under `dir` with its contents, read as (lossy) text.
fn texts_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    files_under(dir)
        .into_iter()
        .map(|path| {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            (path, text)
        })
        .collect()
}

#[test]
fn asks_reach_the_upstream_with_the_hosts_key_which_never_enters_the_sandbox() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    let key = canary_key();
    // The third ask quotes the key (as if it had leaked from elsewhere) and the scripted model echoes
    // the question: the model traffic shown in the transcript must carry it masked.
    let echoed = format!("ask = {{ prompt = \"{key} was in the logs\" }}");
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Which file holds the notes?\" }",
        "ask = { prompt = \"Summarise the notes.\", stream = true }",
        &echoed,
        "run = [\"stet\", \"probe\", \"--environment\", \"--connect\", \"1.1.1.1:443\", \"--connect\", \"127.0.0.1:4141\"]",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Added a fourth note.\"",
    ]));
    project.use_model(&upstream, "");
    let mut command = project.headless(&["--push"]);
    command.env(KEY_ENV, &key);
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");

    // The upstream saw both asks, each with the host's key and not the agent's placeholder.
    let asks = chat_requests(&upstream);
    assert_eq!(asks.len(), 3, "{asks:#?}");
    for ask in &asks {
        assert_eq!(
            ask.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
        assert_eq!(ask.body["model"], "headless-test-model");
    }
    assert_eq!(asks[1].body["stream"], true);
    assert_eq!(
        asks[1].body["stream_options"]["include_usage"], true,
        "the gateway asks a stream for its usage"
    );

    // Both were metered, the streamed one from its final chunk.
    let usages: Vec<_> = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => Some(usage.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(usages.len(), 3, "{usages:#?}");
    for usage in &usages {
        assert!(
            usage.input_tokens > 0 && usage.output_tokens > 0,
            "{usage:?}"
        );
        assert!(
            usage.latency_ms.is_some(),
            "the gateway timed it: {usage:?}"
        );
    }
    assert!(
        usages[1].total_cost_usd >= usages[0].total_cost_usd,
        "{usages:?}"
    );

    // The agent read its replies; its environment held the relay and a placeholder, not the key.
    let transcript = finished.transcript();
    let said: Vec<&str> = transcript
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Message)
        .map(|(_, text)| *text)
        .collect();
    assert!(
        said.iter()
            .any(|text| text.contains("Which file holds the notes?")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|text| text.contains("[REDACTED:model-key] was in the logs")),
        "the echoed key is shown masked: {said:#?}"
    );
    let output: String = transcript
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Output)
        .map(|(_, text)| format!("{text}\n"))
        .collect();
    assert!(
        output.contains("STET_MODEL_URL=http://127.0.0.1:4141/v1"),
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "STET_MODEL_KEY={}",
            stet_engine::harness::PLACEHOLDER_KEY
        )),
        "{output}"
    );
    assert!(
        !output.contains(&key),
        "the key reached the sandbox: {output}"
    );
    // The sandbox still reaches nothing beyond its loopback, where the relay listens.
    let probe: serde_json::Value = output
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .expect("the probe's report");
    let connected: Vec<(String, bool)> = probe["connect"]
        .as_array()
        .unwrap()
        .iter()
        .map(|outcome| {
            (
                outcome["address"].as_str().unwrap_or_default().to_owned(),
                outcome["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        connected,
        [
            ("1.1.1.1:443".to_owned(), false),
            ("127.0.0.1:4141".to_owned(), true)
        ],
        "{probe:#}"
    );

    // The key is in no sink: stdout, stderr, the run record, the logs, the pull request (the local
    // forge's review record is under the state directory), the pushed commit.
    assert!(!finished.stdout.contains(&key));
    assert!(!finished.stderr.contains(&key));
    let state = texts_under(&project.home.state());
    assert!(
        state
            .iter()
            .any(|(path, _)| path.to_string_lossy().contains("reviews")),
        "a pull request was opened: {:?}",
        state.iter().map(|(path, _)| path).collect::<Vec<_>>()
    );
    for (path, text) in state {
        assert!(!text.contains(&key), "{} holds the key", path.display());
    }
    let sha = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Pushed { sha, .. } => Some(sha.as_str().to_owned()),
            _ => None,
        })
        .expect("a pushed event");
    let message = super::support::git(&project.remote, &["log", "--format=%B", "-1", &sha]);
    assert!(message.contains("Added a fourth note."), "{message}");
    assert!(!message.contains(&key), "{message}");
    assert_eq!(finished.outcome().0, Phase::Done);
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}

#[test]
fn the_ceiling_refuses_further_asks_and_ends_the_dispatch() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    let project = Project::new(&scenario(&[
        "ask_until_refused = { prompt = \"Keep going.\", max = 40 }",
        "finish = \"Never reached.\"",
    ]));
    // The test's model is priced by a price file of the user's, over the built-in table.
    let prices = project.home.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[models.\"headless-test-model\"]\ninput = 10.0\noutput = 30.0\n",
    )
    .unwrap();
    project.use_model(
        &upstream,
        &format!(
            "prices = {}\n",
            toml::Value::String(prices.display().to_string())
        ),
    );
    let mut command = project.headless(&["--cost-ceiling", "0.01"]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    let (outcome, code, reason) = finished.outcome();
    assert_eq!(
        (outcome, code),
        (Phase::CostCeilingHit, 5),
        "{reason:?}\n{finished:#?}"
    );
    let total = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => Some(usage.total_cost_usd),
            _ => None,
        })
        .fold(0.0, f64::max);
    // Bound: spend. Each request reserved its worst case first, so what was settled never passed the
    // ceiling; the dispatch ended when the next request no longer fitted.
    assert!(
        total > 0.0 && total <= 0.01,
        "the ledger settled ${total} under a $0.01 ceiling"
    );
    // Every request the upstream answered was metered, and none came after the ceiling.
    let answered = chat_requests(&upstream).len();
    let metered = finished
        .events
        .iter()
        .filter(|event| matches!(event.kind, EventKind::Usage(_)))
        .count();
    assert!(
        answered == metered && answered < 40,
        "{answered} requests reached the upstream, {metered} metered"
    );
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}

#[test]
fn a_failing_upstream_is_an_error_in_the_transcript_and_the_run_goes_on() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    upstream.set_behaviour(Behaviour::TooManyRequests {
        retry_after_secs: 7,
    });
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Anyone there?\" }",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Worked without the model.\"",
    ]));
    project.use_model(&upstream, "request_timeout_secs = 5\n");
    let mut command = project.headless(&[]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let errors: Vec<&str> = finished
        .transcript()
        .into_iter()
        .filter(|(kind, _)| *kind == ItemKind::Error)
        .map(|(_, text)| text)
        .collect();
    assert!(
        errors.iter().any(|text| text.contains("429")),
        "the agent saw the refusal: {errors:#?}"
    );
    assert!(
        errors.iter().any(|text| text.contains("7")),
        "the gateway said when to retry: {errors:#?}"
    );
    finished.torn_down_cleanly();

    // An upstream that never answers is cut off at the request timeout, not at the dispatch's.
    upstream.set_behaviour(Behaviour::Stall);
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Hello?\" }",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Gave up on the model.\"",
    ]));
    project.use_model(&upstream, "request_timeout_secs = 2\n");
    let mut command = project.headless(&["--timeout", "5m"]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert!(
        finished
            .transcript()
            .iter()
            .any(|(kind, text)| *kind == ItemKind::Error && text.contains("within 2s")),
        "{:#?}",
        finished.transcript()
    );
    runtime.block_on(upstream.shutdown());
}

/// DESIGN §5 row 24 from inside a real sandbox: an ask naming a model with a routing suffix, and one
/// naming a model `[model] allow` does not list, go through the relay and are refused by the gateway's
/// request policy; the upstream receives neither, each refusal is a `gateway_refusal` event naming the
/// field, and the agent sees the 400 naming the setting.
#[test]
fn a_model_the_user_did_not_allow_never_reaches_the_upstream() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    for (model, extra, rule) in [
        ("headless-test-model:online", "", "routing_suffix"),
        (
            "headless-test-model",
            "allow = [\"another-model\"]\n",
            "model_not_allowed",
        ),
    ] {
        let steps = scenario(&[
            "ask = { prompt = \"Search the web for the notes.\" }",
            "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
            "finish = \"Worked without the model.\"",
        ])
        .replace("headless-test-model", model);
        let project = Project::new(&steps);
        project.use_model(&upstream, extra);
        let mut command = project.headless(&[]);
        command.env(KEY_ENV, canary_key());
        let finished = run(command);
        assert_eq!(finished.code(), Some(0), "{finished:#?}");
        let refusals: Vec<_> = finished
            .events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::GatewayRefusal {
                    field,
                    rule,
                    setting,
                    ..
                } => Some((
                    field.as_str().to_owned(),
                    rule.as_str().to_owned(),
                    setting.as_ref().map(|setting| setting.as_str().to_owned()),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            refusals,
            vec![(
                "model".to_owned(),
                rule.to_owned(),
                Some("[model] allow".to_owned())
            )],
            "{model}"
        );
        assert!(
            finished
                .transcript()
                .iter()
                .any(|(kind, text)| *kind == ItemKind::Error
                    && text.contains("400")
                    && text.contains("[model] allow")),
            "the agent saw the refusal: {:#?}",
            finished.transcript()
        );
        finished.torn_down_cleanly();
    }
    assert!(
        chat_requests(&upstream).is_empty(),
        "the upstream received a refused request"
    );
    runtime.block_on(upstream.shutdown());
}

// ---------------------------------------------------------------------------------------------
// The Responses and Messages APIs through a real unix-socket gateway to the scripted model, as the
// Codex CLI and Claude Code drive them: a conversation of tool turns, streamed and not, the agent's
// placeholder key in its API's header. The key reaches the upstream only, in its API's header, and
// the meter's total is what the upstream's reported usage costs at the table's prices.
// ---------------------------------------------------------------------------------------------

mod wires {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use hyper::{Request, StatusCode};
    use hyper_util::rt::TokioIo;
    use serde_json::{Value, json};
    use stet_engine::credential::SecretValue;
    use stet_engine::gateway::policy::{RequestPolicy, WireApi};
    use stet_engine::gateway::prices::PriceTable;
    use stet_engine::gateway::usage::TokenCounts;
    use stet_engine::gateway::{Gateway, GatewayConfig, GatewayLimits};
    use stet_sanitize::sanitize::TokenSanitizer;
    use stet_scripted_model::{Call, CallInput, ScriptedModel, SentUsage, Turn};
    use tokio::net::UnixStream;

    /// What the agent's environment holds in place of the key.
    const PLACEHOLDER: &str = "stet-placeholder-key";

    async fn gateway(
        upstream: &ScriptedModel,
        key: &str,
        api: WireApi,
        dir: &tempfile::TempDir,
    ) -> Gateway {
        let (gateway, _events) = Gateway::start(
            &dir.path().join("model.sock"),
            GatewayConfig {
                upstream: upstream.base_url(),
                api_key: Some(SecretValue::new(key.to_owned())),
                prices: Arc::new(PriceTable::builtin()),
                ceiling_usd: Some(5.0),
                request_timeout: Duration::from_secs(30),
                limits: GatewayLimits::default(),
                policy: Arc::new(RequestPolicy {
                    api: Some(api),
                    ..RequestPolicy::default()
                }),
            },
            Arc::new(TokenSanitizer::new().unwrap()),
        )
        .await
        .unwrap();
        gateway
    }

    async fn post(
        gateway: &Gateway,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> (StatusCode, Vec<u8>) {
        let stream = UnixStream::connect(gateway.socket()).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::post(path)
            .header("host", "127.0.0.1:4141")
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(
                request
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, bytes.to_vec())
    }

    /// What the upstream's reported usage costs at the built-in prices.
    fn upstream_cost(sent: &[SentUsage]) -> f64 {
        let prices = PriceTable::builtin();
        sent.iter()
            .map(|usage| {
                prices
                    .cost_of(
                        &usage.model,
                        &TokenCounts {
                            input: usage.input_tokens,
                            output: usage.output_tokens,
                            cached: usage.cached_tokens,
                            cache_write_5m: usage.cache_write_5m,
                            cache_write_1h: usage.cache_write_1h,
                        },
                    )
                    .unwrap_or_else(|| panic!("{} is priced", usage.model))
            })
            .sum()
    }

    fn key() -> String {
        format!("canary-{}", uuid::Uuid::new_v4().simple())
    }

    #[tokio::test]
    async fn a_codex_conversation_on_the_responses_api_is_keyed_by_the_host_and_metered_exactly() {
        let upstream = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let key = key();
        upstream.expect_key(&key);
        upstream.set_turns(vec![
            Turn::call(
                "shell",
                json!({"command": ["bash", "-lc", "echo 4 >> notes.txt"]}),
            ),
            Turn::custom(
                "apply_patch",
                "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n",
            ),
            Turn::text("Added a fourth note."),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let gateway = gateway(&upstream, &key, WireApi::Responses, &dir).await;
        let bearer = format!("Bearer {PLACEHOLDER}");
        let mut input = vec![
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add a fourth note."}]}),
        ];
        for turn in 0..3 {
            let body = json!({
                "model": "gpt-5-codex",
                "instructions": "You are Codex.",
                "input": input,
                "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": false},
                          {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
                "tool_choice": "auto",
                "parallel_tool_calls": false,
                "reasoning": {"effort": "medium", "summary": "auto"},
                "store": false,
                "stream": turn % 2 == 0,
                "include": ["reasoning.encrypted_content"],
                "prompt_cache_key": "thread-1",
            });
            let (status, reply) = post(
                &gateway,
                "/v1/responses",
                &[
                    ("authorization", &bearer),
                    ("openai-beta", "responses=experimental"),
                ],
                &body,
            )
            .await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{}",
                String::from_utf8_lossy(&reply)
            );
            let call_id = format!("call_{turn}");
            input.push(json!({"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}));
            input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "ok"}));
        }
        let requests = upstream.requests();
        assert_eq!(requests.len(), 3);
        for request in &requests {
            assert_eq!(request.path, "/v1/responses");
            assert_eq!(
                request.header("authorization"),
                Some(format!("Bearer {key}").as_str())
            );
            assert!(!format!("{:?}{}", request.headers, request.body).contains(PLACEHOLDER));
            assert!(
                request.body["max_output_tokens"].as_u64().is_some(),
                "capped at the reservation"
            );
        }
        assert_eq!(upstream.key_mismatches(), 0);
        let sent = upstream.sent_usage();
        assert_eq!(sent.len(), 3);
        assert!(
            sent.iter().any(|usage| usage.cached_tokens > 0),
            "cached input was priced"
        );
        let totals = gateway.totals();
        assert!(
            (totals.settled_usd - upstream_cost(&sent)).abs() < 1e-12,
            "{totals:?} against {}",
            upstream_cost(&sent)
        );
        gateway.shutdown().await;
    }

    #[tokio::test]
    async fn a_claude_code_conversation_on_the_messages_api_is_keyed_by_the_host_and_metered_exactly()
     {
        let upstream = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let key = key();
        upstream.expect_key(&key);
        upstream.set_turns(vec![
            Turn::Calls(vec![
                Call {
                    name: "Bash".to_owned(),
                    input: CallInput::Json(json!({"command": "echo 4 >> notes.txt"})),
                },
                Call {
                    name: "Read".to_owned(),
                    input: CallInput::Json(json!({"file_path": "/workspace/notes.txt"})),
                },
            ]),
            Turn::call(
                "Write",
                json!({"file_path": "/workspace/b.txt", "content": "b"}),
            ),
            Turn::text("Added a fourth note."),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let gateway = gateway(&upstream, &key, WireApi::Messages, &dir).await;
        let bearer = format!("Bearer {PLACEHOLDER}");
        let headers = [
            ("x-api-key", PLACEHOLDER),
            ("authorization", bearer.as_str()),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "claude-code-20250219,interleaved-thinking-2025-05-14,context-1m-2025-08-07",
            ),
        ];
        let mut messages = vec![
            json!({"role": "user", "content": [{"type": "text", "text": "Add a fourth note."}]}),
        ];
        let (status, counted) = post(
            &gateway,
            "/v1/messages/count_tokens",
            &headers,
            &json!({"model": "claude-sonnet-4-5", "messages": messages}),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&counted)
        );
        assert!(serde_json::from_slice::<Value>(&counted).unwrap()["input_tokens"].is_u64());
        for (turn, results) in [(0, 0), (1, 2), (2, 3)] {
            while messages
                .iter()
                .filter(|m| m["content"][0]["type"] == "tool_result")
                .count()
                < results
            {
                let id = format!("toolu_{turn}_{}", messages.len());
                messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {}}]}));
                messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}));
            }
            let body = json!({
                "model": "claude-sonnet-4-5-20250929",
                "max_tokens": 32000,
                "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
                "messages": messages,
                "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
                "metadata": {"user_id": "session"},
                "thinking": {"type": "enabled", "budget_tokens": 16000},
                "stream": turn != 1,
            });
            let (status, reply) = post(&gateway, "/v1/messages", &headers, &body).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{}",
                String::from_utf8_lossy(&reply)
            );
        }
        let requests = upstream.requests();
        assert_eq!(requests.len(), 4);
        for request in &requests {
            assert_eq!(request.header("x-api-key"), Some(key.as_str()));
            assert_eq!(request.header("authorization"), None);
            assert_eq!(
                request.header("anthropic-beta"),
                Some("claude-code-20250219,interleaved-thinking-2025-05-14")
            );
            assert!(!format!("{:?}{}", request.headers, request.body).contains(PLACEHOLDER));
        }
        assert_eq!(requests[0].path, "/v1/messages/count_tokens");
        for request in &requests[1..] {
            let cap = request.body["max_tokens"].as_u64().unwrap();
            assert!(request.body["thinking"]["budget_tokens"].as_u64().unwrap() < cap);
        }
        assert_eq!(upstream.key_mismatches(), 0);
        let sent = upstream.sent_usage();
        assert_eq!(sent.len(), 3);
        assert_eq!(
            sent[0].cache_write_1h, 50,
            "a one-hour cache write was priced"
        );
        assert!(sent[1..].iter().all(|usage| usage.cached_tokens == 50));
        let totals = gateway.totals();
        assert!(
            (totals.settled_usd - upstream_cost(&sent)).abs() < 1e-12,
            "{totals:?} against {}",
            upstream_cost(&sent)
        );
        gateway.shutdown().await;
    }
}
