//! The Responses and Messages APIs in the running gateway: the host's key in each API's header and
//! the agent's placeholder never forwarded, each API's usage metered (cached input and cache writes
//! at their rates) streamed and not, a stream cut before its usage charged in full, each
//! fail-closed field refused naming it, in the API's own error shape, before the upstream.

use super::*;

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect()
}

fn response_object(status: &str, usage: Value) -> Value {
    serde_json::json!({
        "id": "resp_1", "object": "response", "status": status, "model": "gpt-5-codex",
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{}"}],
        "usage": usage
    })
}

fn responses_stream(terminal: &str, usage: Value) -> String {
    sse(&[
        serde_json::json!({"type": "response.created", "sequence_number": 0, "response": response_object("in_progress", Value::Null)}),
        serde_json::json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": ""}}),
        serde_json::json!({"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": "fc_1", "output_index": 0, "delta": "{}"}),
        serde_json::json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{}"}}),
        serde_json::json!({"type": terminal, "sequence_number": 4, "response": response_object(terminal.trim_start_matches("response."), usage)}),
    ])
}

fn responses_request(extra: Value) -> String {
    let mut request = serde_json::json!({
        "model": "gpt-5-codex",
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}],
        "tools": [{"type": "function", "name": "shell", "description": "run", "parameters": {"type": "object"}, "strict": false}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1"
    });
    for (key, value) in extra.as_object().unwrap() {
        request[key] = value.clone();
    }
    request.to_string()
}

async fn streamed(
    rig: &Rig,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    stream: &str,
) -> (StatusCode, String) {
    rig.upstream.reply(Reply::Full {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        body: stream.to_owned(),
    });
    let response = send(&rig.socket, "POST", path, headers, body).await;
    let status = response.status();
    let body = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn responses_usage_is_read_from_every_terminal_event_with_cached_input_at_its_rate() {
    let mut rig = rig().await;
    let gpt5 = *PriceTable::builtin().price("gpt-5-codex").unwrap();
    for terminal in [
        "response.completed",
        "response.incomplete",
        "response.failed",
    ] {
        let usage = serde_json::json!({"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 600}, "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 1050});
        let stream = responses_stream(terminal, usage);
        let (status, body) = streamed(
            &rig,
            "/v1/responses",
            &[],
            &responses_request(serde_json::json!({})),
            &stream,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{terminal}");
        assert_eq!(body, stream, "{terminal}: the stream passes unchanged");
        let (report, was_streamed) = expect_usage(rig.next_event().await);
        assert!(was_streamed);
        assert_eq!(
            (
                report.input_tokens,
                report.output_tokens,
                report.cached_tokens
            ),
            (1000, 50, 600),
            "{terminal}"
        );
        let expected = (400.0 * gpt5.input + 600.0 * gpt5.cached_input + 50.0 * gpt5.output) / 1e6;
        assert!(
            approx(report.cost_usd.unwrap(), expected),
            "{terminal}: {report:?}"
        );
    }
    // Not streamed: the whole body's usage.
    rig.upstream.reply(ok_json(response_object(
        "completed",
        serde_json::json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5}),
    )));
    let (status, _, _) = call(
        &rig.socket,
        "POST",
        "/v1/responses",
        &responses_request(serde_json::json!({"stream": false})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (report, was_streamed) = expect_usage(rig.next_event().await);
    assert!(!was_streamed);
    assert!(approx(
        report.cost_usd.unwrap(),
        (10.0 * gpt5.input + 5.0 * gpt5.output) / 1e6
    ));
    for request in rig.upstream.requests() {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {}", rig.key)
        );
        assert!(request.headers.get("x-api-key").is_none());
    }
}

#[tokio::test]
async fn responses_output_is_capped_at_the_reservation_and_a_cut_stream_counts_it_whole() {
    let mut rig = rig_with(Some(0.5), Duration::from_secs(20)).await;
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let request = responses_request(serde_json::json!({"max_output_tokens": 100_000_000u64}));
    let mut response = send(&rig.socket, "POST", "/v1/responses", &[], &request).await;
    let stream = responses_stream(
        "response.completed",
        serde_json::json!({"input_tokens": 1, "output_tokens": 1}),
    );
    let before_usage = &stream[..stream.find("event: response.completed").unwrap()];
    chunks.send(Chunk::Data(before_usage.to_owned())).unwrap();
    within(response.body_mut().frame()).await.unwrap().unwrap();
    chunks.send(Chunk::Cut).unwrap();
    assert!(within(response.into_body().collect()).await.is_err());
    let sent = &rig.upstream.requests()[0];
    let cap = sent.json()["max_output_tokens"].as_u64().unwrap();
    assert!(
        cap < 100_000_000,
        "the cap was forced to the reservation: {cap}"
    );
    let (report, _) = expect_usage(rig.next_event().await);
    let counted = report.cost_usd.unwrap();
    // Its whole reservation: at least every output token it was allowed at the output price.
    assert!(
        counted >= cap as f64 * 10.0 / 1e6,
        "{counted} for a cap of {cap}"
    );
    assert!(approx(rig.gateway.totals().settled_usd, counted));
    assert!(rig.next_error().await.contains("cut before usage"));
}

#[tokio::test]
async fn responses_work_stet_cannot_see_is_refused_naming_the_field_before_the_upstream() {
    let mut rig = rig().await;
    for (extra, field) in [
        (serde_json::json!({"background": true}), "background"),
        (
            serde_json::json!({"store": true, "previous_response_id": "resp_0"}),
            "previous_response_id",
        ),
        (
            serde_json::json!({"conversation": "conv_1"}),
            "conversation",
        ),
        (
            serde_json::json!({"conversation": {"id": "conv_1"}}),
            "conversation",
        ),
        (
            serde_json::json!({"tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [{"type": "image_generation"}]}),
            "tools[0].type",
        ),
    ] {
        let (status, _, body) = call(
            &rig.socket,
            "POST",
            "/v1/responses",
            &responses_request(extra.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["param"], field, "{extra}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{extra}"
        );
        match rig.next_event().await {
            GatewayEvent::Refused { refusal } => assert_eq!(refusal.field, field),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Null and false are no work: they pass.
    rig.upstream.reply(ok_json(response_object(
        "completed",
        serde_json::json!({"input_tokens": 1, "output_tokens": 1}),
    )));
    let (status, _, _) = call(&rig.socket, "POST", "/v1/responses", &responses_request(serde_json::json!({"stream": false, "background": false, "previous_response_id": null, "conversation": null}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rig.upstream.requests().len(), 1);
}

fn messages_request(extra: Value) -> String {
    let mut request = serde_json::json!({
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]}
        ],
        "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 16000},
        "stream": true
    });
    for (key, value) in extra.as_object().unwrap() {
        request[key] = value.clone();
    }
    request.to_string()
}

fn messages_stream(usage_start: Value, output: u64) -> String {
    sse(&[
        serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null, "usage": usage_start}}),
        serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {}}}),
        serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        serde_json::json!({"type": "content_block_stop", "index": 0}),
        serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": output}}),
        serde_json::json!({"type": "message_stop"}),
    ])
}

const CLAUDE_HEADERS: &[(&str, &str)] = &[
    ("x-api-key", "sk-ant-placeholder"),
    ("authorization", "Bearer sk-ant-placeholder"),
    ("anthropic-version", "2023-06-01"),
    (
        "anthropic-beta",
        "claude-code-20250219,context-1m-2025-08-07",
    ),
];

#[tokio::test]
async fn messages_go_with_the_host_key_as_x_api_key_and_are_metered_with_cache_rates() {
    let mut rig = rig().await;
    let sonnet = *PriceTable::builtin().price("claude-sonnet-4-5").unwrap();
    let start = serde_json::json!({"input_tokens": 20, "output_tokens": 1, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 300, "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}});
    let stream = messages_stream(start, 70);
    let (status, body) = streamed(
        &rig,
        "/v1/messages",
        CLAUDE_HEADERS,
        &messages_request(serde_json::json!({})),
        &stream,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, stream);
    let (report, was_streamed) = expect_usage(rig.next_event().await);
    assert!(was_streamed);
    assert_eq!(
        (
            report.input_tokens,
            report.output_tokens,
            report.cached_tokens
        ),
        (1320, 70, 1000)
    );
    let expected = (20.0 * sonnet.input
        + 1000.0 * sonnet.cached_input
        + 100.0 * sonnet.cache_write_5m
        + 200.0 * sonnet.cache_write_1h
        + 70.0 * sonnet.output)
        / 1e6;
    assert!(approx(report.cost_usd.unwrap(), expected), "{report:?}");

    // Not streamed: the whole body's usage.
    rig.upstream.reply(ok_json(serde_json::json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 3}})));
    let response = send(
        &rig.socket,
        "POST",
        "/v1/messages",
        CLAUDE_HEADERS,
        &messages_request(serde_json::json!({"stream": false})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    within(response.into_body().collect()).await.unwrap();
    let (report, was_streamed) = expect_usage(rig.next_event().await);
    assert!(!was_streamed);
    assert!(approx(
        report.cost_usd.unwrap(),
        (5.0 * sonnet.input + 3.0 * sonnet.output) / 1e6
    ));

    for request in rig.upstream.requests() {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.headers["x-api-key"], rig.key.as_str());
        assert_eq!(request.headers.get_all("x-api-key").iter().count(), 1);
        assert!(request.headers.get("authorization").is_none());
        assert_eq!(request.headers["anthropic-version"], "2023-06-01");
        assert_eq!(request.headers["anthropic-beta"], "claude-code-20250219");
        assert!(!String::from_utf8_lossy(&request.body).contains("placeholder"));
    }
}

#[tokio::test]
async fn messages_output_and_thinking_are_capped_and_a_cut_stream_counts_its_reservation() {
    let mut rig = rig_with(Some(0.5), Duration::from_secs(20)).await;
    let (chunks, scripted) = mpsc::unbounded_channel();
    rig.upstream.reply(Reply::Stream(scripted));
    let request = messages_request(
        serde_json::json!({"max_tokens": 128000, "thinking": {"type": "enabled", "budget_tokens": 100000}}),
    );
    let mut response = send(
        &rig.socket,
        "POST",
        "/v1/messages",
        CLAUDE_HEADERS,
        &request,
    )
    .await;
    let stream = messages_stream(
        serde_json::json!({"input_tokens": 20, "output_tokens": 1}),
        70,
    );
    let before_delta = &stream[..stream.find("event: message_delta").unwrap()];
    chunks.send(Chunk::Data(before_delta.to_owned())).unwrap();
    within(response.body_mut().frame()).await.unwrap().unwrap();
    chunks.send(Chunk::Cut).unwrap();
    assert!(within(response.into_body().collect()).await.is_err());
    let sent = rig.upstream.requests()[0].json();
    let cap = sent["max_tokens"].as_u64().unwrap();
    assert!(cap < 128000, "{cap}");
    assert!(sent["thinking"]["budget_tokens"].as_u64().unwrap() < cap);
    let (report, _) = expect_usage(rig.next_event().await);
    let counted = report.cost_usd.unwrap();
    // Its whole reservation, not the one output token `message_start` showed.
    assert!(
        counted >= cap as f64 * 15.0 / 1e6,
        "{counted} for a cap of {cap}"
    );
    assert!(approx(rig.gateway.totals().settled_usd, counted));
}

#[tokio::test]
async fn messages_usage_that_lies_counts_the_reservation() {
    let mut rig = rig_with(Some(0.5), Duration::from_secs(20)).await;
    for usage in [
        serde_json::json!({"input_tokens": -5, "output_tokens": 3}),
        serde_json::json!({"output_tokens": 3}),
        serde_json::json!(null),
    ] {
        rig.upstream.reply(ok_json(serde_json::json!({"type": "message", "model": "claude-sonnet-4-5", "content": [], "usage": usage})));
        let response = send(
            &rig.socket,
            "POST",
            "/v1/messages",
            CLAUDE_HEADERS,
            &messages_request(serde_json::json!({"stream": false, "max_tokens": 1000})),
        )
        .await;
        within(response.into_body().collect()).await.unwrap();
        let (report, _) = expect_usage(rig.next_event().await);
        assert!(
            report.cost_usd.unwrap() >= 1000.0 * 15.0 / 1e6,
            "{usage}: {report:?}"
        );
        assert!(
            rig.next_error().await.contains("carried no usage"),
            "{usage}"
        );
    }
}

#[tokio::test]
async fn messages_server_tools_batches_and_files_are_refused_in_anthropics_shape() {
    let mut rig = rig().await;
    for (extra, field) in [
        (
            serde_json::json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
            "tools[0].type",
        ),
        (
            serde_json::json!({"mcp_servers": [{"type": "url", "url": "https://mcp.example.invalid", "name": "x"}]}),
            "mcp_servers",
        ),
        (serde_json::json!({"container": "container_1"}), "container"),
        (serde_json::json!({"inference_geo": "us"}), "inference_geo"),
    ] {
        let response = send(
            &rig.socket,
            "POST",
            "/v1/messages",
            CLAUDE_HEADERS,
            &messages_request(extra.clone()),
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{extra}");
        let body: Value = serde_json::from_slice(
            &within(response.into_body().collect())
                .await
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert_eq!(body["type"], "error", "{extra}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{extra}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{extra}: {body}"
        );
        assert!(matches!(
            rig.next_event().await,
            GatewayEvent::Refused { .. }
        ));
    }
    for path in ["/v1/messages/batches", "/v1/files"] {
        let response = send(&rig.socket, "POST", path, CLAUDE_HEADERS, "{}").await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = serde_json::from_slice(
            &within(response.into_body().collect())
                .await
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        if path.starts_with("/v1/messages") {
            assert_eq!(body["error"]["type"], "not_found_error", "{body}");
        }
        rig.next_error().await;
    }
    assert!(rig.upstream.requests().is_empty());
}

#[tokio::test]
async fn count_tokens_is_forwarded_rewritten_and_free() {
    let mut rig = rig_with(Some(0.01), Duration::from_secs(20)).await;
    rig.upstream
        .reply(ok_json(serde_json::json!({"input_tokens": 123})));
    let body = "{ \"model\" : \"claude-haiku-4-5\",\n \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}] }";
    let response = send(
        &rig.socket,
        "POST",
        "/v1/messages/count_tokens",
        CLAUDE_HEADERS,
        body,
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    within(response.into_body().collect()).await.unwrap();
    let sent = &rig.upstream.requests()[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(
        sent.body,
        r#"{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}"#
    );
    assert_eq!(sent.headers["x-api-key"], rig.key.as_str());
    assert!(
        rig.pending_events().is_empty(),
        "no usage: counting tokens is free"
    );
    assert_eq!(rig.gateway.totals().settled_usd, 0.0);
    // Its body passes the Messages policy all the same.
    let response = send(&rig.socket, "POST", "/v1/messages/count_tokens", CLAUDE_HEADERS, r#"{"model":"claude-haiku-4-5","messages":[],"tools":[{"type":"web_search_20250305","name":"web_search"}]}"#).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(rig.upstream.requests().len(), 1);
}

#[tokio::test]
async fn a_dispatch_serves_only_the_wire_api_it_speaks() {
    let mut rig = rig_configured(None, Duration::from_secs(20), |config| GatewayConfig {
        policy: Arc::new(crate::gateway::policy::RequestPolicy {
            api: Some(crate::gateway::policy::WireApi::Messages),
            ..crate::gateway::policy::RequestPolicy::default()
        }),
        ..config
    })
    .await;
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let (status, _, body) = call(&rig.socket, "POST", path, &chat_request("m")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            body.contains("[model] api = \\\"anthropic\\\""),
            "{path}: {body}"
        );
        assert!(rig.next_error().await.contains(path));
    }
    rig.upstream.reply(ok_json(serde_json::json!({"type": "message", "model": "claude-haiku-4-5", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}})));
    let response = send(
        &rig.socket,
        "POST",
        "/v1/messages",
        CLAUDE_HEADERS,
        &messages_request(serde_json::json!({"stream": false})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    within(response.into_body().collect()).await.unwrap();
    assert_eq!(rig.upstream.requests().len(), 1);
}

/// Claude Code 2.1.327 posts every request to `/v1/messages?beta=true` (Anthropic's SDK marks its
/// beta client so, `tests/fixtures/claude`): that query passes and is forwarded; any other query on
/// a model route still goes around the body's policy and is refused before the upstream.
#[tokio::test]
async fn claude_codes_beta_query_passes_and_no_other_query_does() {
    let mut rig = rig().await;
    let start = serde_json::json!({"input_tokens": 20, "output_tokens": 1});
    let stream = messages_stream(start, 7);
    let (status, body) = streamed(
        &rig,
        "/v1/messages?beta=true",
        CLAUDE_HEADERS,
        &messages_request(serde_json::json!({})),
        &stream,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let _ = expect_usage(rig.next_event().await);
    let sent = rig.upstream.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1/messages?beta=true");
    for path in [
        "/v1/messages?beta=true&model=o1-pro",
        "/v1/messages?beta=false",
        "/v1/messages?model=o1-pro",
        "/v1/chat/completions?beta=true",
    ] {
        let response = send(
            &rig.socket,
            "POST",
            path,
            CLAUDE_HEADERS,
            &messages_request(serde_json::json!({})),
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let _ = rig.next_event().await;
    }
    assert_eq!(
        rig.upstream.requests().len(),
        1,
        "nothing else went upstream"
    );
}
