//! Unit tests of `crate::gateway::server::forward`, in a file of their own so the module reads as code.

use super::*;

use crate::gateway::ledger::CostLedger;

/// The body sent for `body` under a ceiling of `remaining` (`None`: no ceiling), as the ledger
/// admits it.
fn prepared_json(route: Route, body: Value, remaining: Option<f64>) -> Value {
    let mut prepared = prepare(
        route,
        Bytes::from(body.to_string()),
        &PriceTable::builtin(),
        remaining.is_some(),
        &[],
    )
    .unwrap();
    let cap = CostLedger::new(remaining)
        .admit(prepared.worst.as_ref().unwrap())
        .unwrap()
        .output_cap;
    serde_json::from_slice(&prepared.body(route, cap)).unwrap()
}

fn worst(route: Route, body: Value) -> WorstCase {
    prepare(
        route,
        Bytes::from(body.to_string()),
        &PriceTable::builtin(),
        true,
        &[],
    )
    .unwrap()
    .worst
    .unwrap()
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
fn every_streaming_chat_request_asks_for_usage_whatever_the_agent_chose() {
    for asked in [
        serde_json::json!({"model": "m", "stream": true}),
        serde_json::json!({"model": "m", "stream": true, "stream_options": {"include_usage": false}}),
        serde_json::json!({"model": "m", "stream": true, "stream_options": "no"}),
    ] {
        let body = prepared_json(Route::ChatCompletions, asked.clone(), None);
        assert_eq!(body["stream_options"]["include_usage"], true, "{asked}");
    }
    let body = prepared_json(
        Route::ChatCompletions,
        serde_json::json!({"model": "m", "stream": true, "stream_options": {"include_obfuscation": false}}),
        None,
    );
    assert_eq!(
        body["stream_options"],
        serde_json::json!({"include_obfuscation": false, "include_usage": true})
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
fn the_worst_case_counts_every_byte_each_attachment_and_every_choice() {
    // stet-demo-model: $3 per million input tokens, $15 per million output tokens.
    let request = serde_json::json!({"model": "stet-demo-model", "n": 4, "max_tokens": 100});
    let bytes = request.to_string().len() as f64 + REWRITE_BYTES as f64;
    assert_eq!(
        worst(Route::ChatCompletions, request),
        WorstCase::Priced {
            input_usd: bytes * 3.0 / 1e6,
            per_output_token_usd: 4.0 * 15.0 / 1e6,
            asked_output_tokens: Some(100),
            tools_usd: 0.0,
        }
    );
    let request = serde_json::json!({"model": "stet-demo-model", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/b.png"}}
    ]}]});
    let bytes = request.to_string().len() as f64 + REWRITE_BYTES as f64;
    let WorstCase::Priced { input_usd, .. } = worst(Route::ChatCompletions, request) else {
        panic!("priced");
    };
    let tokens = bytes + 2.0 * TOKENS_PER_ATTACHMENT as f64;
    assert!(
        (input_usd - tokens * 3.0 / 1e6).abs() < 1e-12,
        "{input_usd}"
    );
    // Both caps named: the smaller is what is asked; the responses API has its own field.
    let WorstCase::Priced {
        asked_output_tokens,
        ..
    } = worst(
        Route::ChatCompletions,
        serde_json::json!({"model": "stet-demo-model", "max_tokens": 70, "max_completion_tokens": 50}),
    )
    else {
        panic!("priced");
    };
    assert_eq!(asked_output_tokens, Some(50));
    let WorstCase::Priced {
        asked_output_tokens,
        ..
    } = worst(
        Route::Responses,
        serde_json::json!({"model": "stet-demo-model", "max_output_tokens": 30}),
    )
    else {
        panic!("priced");
    };
    assert_eq!(asked_output_tokens, Some(30));
    // Dated snapshots and prefixes find their price; an unknown model is unpriced.
    assert!(matches!(
        worst(
            Route::ChatCompletions,
            serde_json::json!({"model": "openai/gpt-4o-2024-08-06"})
        ),
        WorstCase::Priced { .. }
    ));
    assert_eq!(
        worst(
            Route::ChatCompletions,
            serde_json::json!({"model": "o1-pro"})
        ),
        WorstCase::Unpriced {
            model: "o1-pro".to_owned()
        }
    );
}

#[test]
fn under_a_ceiling_a_request_whose_cost_cannot_be_bounded_is_refused() {
    let refused = [
        (
            Route::Responses,
            serde_json::json!({"model": "gpt-4o", "prompt": {"id": "pmpt_1"}}),
            "prompt",
        ),
        (
            Route::Responses,
            serde_json::json!({"model": "gpt-4o", "tools": [{"type": "web_search"}]}),
            "web_search",
        ),
        (
            Route::Responses,
            serde_json::json!({"model": "gpt-4o", "input": [{"role": "user", "content": [{"type": "input_text", "file_id": "file-1"}]}]}),
            "file_id",
        ),
        (
            Route::Responses,
            serde_json::json!({"model": "gpt-4o", "input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://example.invalid/a.pdf"}]}]}),
            "file_url",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "fallbacks": ["o1-pro"]}),
            "`fallbacks`",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "service_tier": "priority"}),
            "service_tier",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "web_search_options": {}}),
            "web_search_options",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "modalities": ["text", "audio"]}),
            "audio",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "n": 0}),
            "`n`",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"model": "gpt-4o", "n": "128"}),
            "`n`",
        ),
        (
            Route::ChatCompletions,
            serde_json::json!({"messages": []}),
            "no model",
        ),
    ];
    for (route, body, named) in refused {
        let raw = Bytes::from(body.to_string());
        let reason = prepare(route, raw.clone(), &PriceTable::builtin(), true, &[]).unwrap_err();
        assert!(reason.contains(named), "{body}: {reason}");
        // Without a ceiling the same request passes as it came.
        let mut prepared = prepare(route, raw.clone(), &PriceTable::builtin(), false, &[]).unwrap();
        assert_eq!(prepared.body(route, None), raw, "{body}");
    }
    let reason = prepare(
        Route::ChatCompletions,
        Bytes::from_static(b"not json"),
        &PriceTable::builtin(),
        true,
        &[],
    )
    .unwrap_err();
    assert!(reason.contains("not a JSON object"), "{reason}");
    // Function tools are the agent's own.
    assert!(
            prepare(
                Route::ChatCompletions,
                Bytes::from(serde_json::json!({"model": "gpt-4o", "tools": [{"type": "function", "function": {"name": "f"}}]}).to_string()),
                &PriceTable::builtin(),
                true,
                &[],
            )
            .is_ok()
        );
}

#[test]
fn what_openhands_sends_passes_under_a_ceiling() {
    // The field sets OpenHands 1.16 (openhands-sdk 1.21, litellm 1.110) was seen sending.
    let tool =
        serde_json::json!([{"type": "function", "function": {"name": "finish", "parameters": {}}}]);
    let chat = [
        serde_json::json!({"model": "gpt-4o", "messages": [], "tools": tool, "reasoning_effort": "high", "prompt_cache_key": "4d888bed"}),
        serde_json::json!({"model": "gpt-4.1", "messages": [], "tools": tool, "max_completion_tokens": 32768, "prompt_cache_retention": "24h", "prompt_cache_key": "k"}),
        serde_json::json!({"model": "claude-sonnet-4", "messages": [], "max_tokens": 64000, "max_completion_tokens": 64000}),
        serde_json::json!({"model": "gpt-4o", "messages": [], "seed": 7, "top_k": 40.0, "temperature": 0.5, "top_p": 1.0, "stream": true, "stream_options": {"include_usage": true}}),
    ];
    for body in chat {
        let prepared = prepare(
            Route::ChatCompletions,
            Bytes::from(body.to_string()),
            &PriceTable::builtin(),
            true,
            &[],
        );
        assert!(prepared.is_ok(), "{body}: {:?}", prepared.err());
    }
    let responses = serde_json::json!({"model": "gpt-4o", "input": [], "instructions": "i",
            "include": ["reasoning.encrypted_content"], "max_output_tokens": 128000,
            "reasoning": {"effort": "high"}, "store": false, "temperature": 1.0, "tool_choice": "auto",
            "tools": tool, "prompt_cache_retention": "24h", "prompt_cache_key": "k", "stream": true});
    let prepared = prepare(
        Route::Responses,
        Bytes::from(responses.to_string()),
        &PriceTable::builtin(),
        true,
        &[],
    );
    assert!(prepared.is_ok(), "{:?}", prepared.err());
}

#[test]
fn the_output_cap_follows_the_remaining_budget() {
    // stet-demo-model: $15 per million output tokens. $0.0015 plus the input's cost pays for 100.
    let chat = |body: Value| {
        let input = (body.to_string().len() as f64 + REWRITE_BYTES as f64) * 3.0 / 1e6;
        prepared_json(Route::ChatCompletions, body, Some(0.0015 + input + 1e-12))
    };
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
    let named = chat(serde_json::json!({"model": "stet-demo-model", "max_completion_tokens": 500}));
    assert_eq!(named["max_completion_tokens"], 100);
    assert!(named.get("max_tokens").is_none());
    // `n` choices share the budget.
    assert_eq!(
        chat(serde_json::json!({"model": "stet-demo-model", "n": 4}))["max_tokens"],
        25
    );
    let body = serde_json::json!({"model": "openai/stet-demo-model"});
    let input = (body.to_string().len() as f64 + REWRITE_BYTES as f64) * 3.0 / 1e6;
    let responses = prepared_json(Route::Responses, body, Some(0.0015 + input + 1e-12));
    assert_eq!(responses["max_output_tokens"], 100);
    assert!(responses.get("max_tokens").is_none());
    // No ceiling caps nothing.
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
    let mut prepared = prepare(
        Route::ChatCompletions,
        raw.clone(),
        &PriceTable::builtin(),
        false,
        &[],
    )
    .unwrap();
    assert_eq!(prepared.model.as_deref(), Some("m"));
    assert_eq!(prepared.body(Route::ChatCompletions, None), raw);
    let garbage = Bytes::from_static(b"not json");
    let mut prepared = prepare(
        Route::ChatCompletions,
        garbage.clone(),
        &PriceTable::builtin(),
        false,
        &[],
    )
    .unwrap();
    assert_eq!(prepared.model, None);
    assert_eq!(prepared.body(Route::ChatCompletions, Some(5)), garbage);
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
    let keys = crate::gateway::server::Keys {
        bearer: HeaderValue::from_static("Bearer host-side"),
        x_api_key: HeaderValue::from_static("host-side"),
    };
    let openai = Route::ChatCompletions.shape();
    let headers = upstream_headers(&agent, openai, Some(&keys), 12);
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
    let headers = upstream_headers(&agent, openai, None, 0);
    assert!(headers.get(header::AUTHORIZATION).is_none());
    assert!(headers.get(header::CONTENT_LENGTH).is_none());

    // Anthropic's: the host's key as `x-api-key` in place of the agent's placeholder, never an
    // `Authorization`; a known version and the allowed betas pass, the others stay behind.
    for (name, value) in [
        ("anthropic-version", "2023-06-01"),
        (
            "anthropic-beta",
            "claude-code-20250219, context-1m-2025-08-07,interleaved-thinking-2025-05-14",
        ),
        ("anthropic-beta", "files-api-2025-04-14"),
        ("x-app", "cli"),
        ("x-stainless-lang", "js"),
    ] {
        agent.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    let headers = upstream_headers(&agent, Route::Messages.shape(), Some(&keys), 12);
    let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept-encoding",
            "anthropic-beta",
            "anthropic-version",
            "content-length",
            "content-type",
            "x-api-key",
            "x-stainless-lang"
        ]
    );
    assert_eq!(headers["x-api-key"], "host-side");
    assert_eq!(headers.get_all("x-api-key").iter().count(), 1);
    assert_eq!(
        headers.get_all("anthropic-beta").iter().collect::<Vec<_>>(),
        ["claude-code-20250219,interleaved-thinking-2025-05-14"]
    );
    let mut unknown = HeaderMap::new();
    unknown.insert("anthropic-version", HeaderValue::from_static("2099-01-01"));
    let headers = upstream_headers(&unknown, Route::CountTokens.shape(), Some(&keys), 0);
    assert!(headers.get("anthropic-version").is_none());
    assert_eq!(headers["x-api-key"], "host-side");
}

#[test]
fn long_paths_are_shortened_on_a_char_boundary() {
    let path = format!("/v1/{}", "é".repeat(200));
    let shown = shown_path(&path);
    assert!(shown.len() <= MAX_SHOWN_PATH + '…'.len_utf8());
    assert!(shown.ends_with('…'));
    assert_eq!(shown_path("/v1/x"), "/v1/x");
}

#[test]
fn enabled_provider_tools_pass_under_a_ceiling_with_their_calls_reserved_and_bounded() {
    let enabled = |name: &str, price_usd| ProviderCall {
        name: name.to_owned(),
        price_usd,
        host: None,
    };
    // Responses: the calls are bounded by `max_tool_calls`, forced when the request sets none.
    let body = serde_json::json!({"model": "stet-demo-model", "input": "hi",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f", "parameters": {}}]});
    let mut prepared = prepare(
        Route::Responses,
        Bytes::from(body.to_string()),
        &PriceTable::builtin(),
        true,
        &[enabled("web_search", 0.01)],
    )
    .unwrap();
    let Some(WorstCase::Priced { tools_usd, .. }) = prepared.worst.clone() else {
        panic!("priced");
    };
    let calls = crate::gateway::tool_calls::CALLS_PER_REQUEST;
    assert!(
        (tools_usd - calls as f64 * 0.01).abs() < 1e-12,
        "{tools_usd}"
    );
    let sent: Value = serde_json::from_slice(&prepared.body(Route::Responses, Some(10))).unwrap();
    assert_eq!(sent["max_tool_calls"], calls);
    // A bound of its own is kept and reserved; one stet cannot read is replaced.
    for (asked, kept) in [(serde_json::json!(2), 2), (serde_json::json!("1e6"), calls)] {
        let mut body = body.clone();
        body["max_tool_calls"] = asked;
        let mut prepared = prepare(
            Route::Responses,
            Bytes::from(body.to_string()),
            &PriceTable::builtin(),
            true,
            &[enabled("web_search", 0.01)],
        )
        .unwrap();
        let sent: Value = serde_json::from_slice(&prepared.body(Route::Responses, None)).unwrap();
        assert_eq!(sent["max_tool_calls"], kept);
    }
    // Chat Completions: an enabled field is one call per request.
    let body =
        serde_json::json!({"model": "stet-demo-model", "messages": [], "web_search_options": {}});
    let prepared = prepare(
        Route::ChatCompletions,
        Bytes::from(body.to_string()),
        &PriceTable::builtin(),
        true,
        &[enabled("web_search_options", 0.03)],
    )
    .unwrap();
    assert!(matches!(
        prepared.worst,
        Some(WorstCase::Priced { tools_usd, .. }) if (tools_usd - 0.03).abs() < 1e-12
    ));
    // Not enabled, the same tool is still refused under the ceiling.
    let refused = prepare(
        Route::ChatCompletions,
        Bytes::from(body.to_string()),
        &PriceTable::builtin(),
        true,
        &[],
    );
    assert!(refused.is_err());
}
