//! The request policy against real clients' requests (they pass, unchanged in meaning) and against
//! each way a request could make the provider act for the agent (each is refused, naming the field).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/fixtures/model-requests/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn api_of(path: &str) -> WireApi {
    match path {
        "/v1/chat/completions" => WireApi::ChatCompletions,
        "/v1/responses" => WireApi::Responses,
        "/v1/messages" => WireApi::Messages,
        other => panic!("no wire API for {other}"),
    }
}

fn allowing(models: &[&str]) -> RequestPolicy {
    RequestPolicy {
        models: Some(models.iter().map(|model| (*model).to_owned()).collect()),
        ..RequestPolicy::default()
    }
}

fn refusal(policy: &RequestPolicy, api: WireApi, body: &str) -> Refusal {
    match policy.check(api, body.as_bytes()) {
        Ok(checked) => panic!(
            "passed: {body}\nas {}",
            String::from_utf8_lossy(&checked.body)
        ),
        Err(refusal) => refusal,
    }
}

const FIXTURES: &[&str] = &[
    "openhands-1.16-chat-completions.json",
    "codex-0.163-responses-turn-1.json",
    "codex-0.163-responses-turn-2.json",
    "claude-code-2.1.327-messages.json",
    "claude-code-2.1.327-messages-turn-2.json",
    "codex-0.163-responses-default-web-search.json",
];

#[test]
fn real_clients_requests_pass_unchanged_in_meaning() {
    for name in FIXTURES {
        let record = fixture(name);
        let body = &record["body"];
        let api = api_of(record["path"].as_str().unwrap());
        let policy = allowing(&[body["model"].as_str().unwrap()]);
        let raw = serde_json::to_vec_pretty(body).unwrap();
        match (record["expect"].as_str().unwrap(), policy.check(api, &raw)) {
            ("pass", Ok(checked)) => {
                let sent: Value = serde_json::from_slice(&checked.body).unwrap();
                assert_eq!(&sent, body, "{name}");
                assert!(
                    checked.body.len() < raw.len(),
                    "{name}: written anew, compactly"
                );
                assert!(checked.provider_calls.is_empty());
            }
            ("refuse", Err(refusal)) => {
                assert_eq!(refusal.field, "tools[8].type", "{name}");
                assert_eq!(refusal.rule, Rule::ProviderTool);
                assert_eq!(refusal.shown.as_deref(), Some("web_search"));
                assert!(refusal.message().contains("[model] provider_tools"));
            }
            (expect, outcome) => panic!("{name}: expected {expect}, got {outcome:?}"),
        }
    }
}

#[test]
fn the_default_codex_request_passes_once_web_search_is_enabled_with_a_price() {
    let record = fixture("codex-0.163-responses-default-web-search.json");
    let mut policy = allowing(&["gpt-5-codex"]);
    policy.provider_tools.insert("web_search".to_owned(), 0.01);
    let checked = policy
        .check(WireApi::Responses, record["body"].to_string().as_bytes())
        .unwrap();
    assert_eq!(
        checked.provider_calls,
        vec![ProviderCall {
            name: "web_search".to_owned(),
            price_usd: 0.01,
            host: None
        }]
    );
}

/// Each provider-executed tool type of each API, as the API documents it and in mixed case.
#[test]
fn every_provider_tool_is_refused_on_every_api() {
    let policy = allowing(&["m"]);
    let cases: &[(WireApi, &[&str])] = &[
        (
            WireApi::Responses,
            &[
                "mcp",
                "MCP",
                "web_search",
                "web_search_preview",
                "web_search_preview_2025_03_11",
                "Web_Search",
                "file_search",
                "code_interpreter",
                "image_generation",
                "computer_use_preview",
                "Function",
            ],
        ),
        (
            WireApi::ChatCompletions,
            &["mcp", "web_search", "Function", "web_search_preview"],
        ),
        (
            WireApi::Messages,
            &[
                "web_search_20250305",
                "web_fetch_20250910",
                "code_execution_20250825",
                "mcp_toolset",
                "computer_20250124",
                "WEB_SEARCH_20250305",
            ],
        ),
    ];
    for (api, kinds) in cases {
        for kind in *kinds {
            let body = json!({
                "model": "m",
                "tools": [
                    { "type": "function", "function": { "name": "f" } },
                    { "type": kind, "server_url": "https://example.invalid/c?d=1" },
                ],
            });
            let body = if *api == WireApi::Messages {
                json!({ "model": "m", "tools": [
                    { "name": "f", "input_schema": {} },
                    { "type": kind, "name": "x" },
                ]})
            } else if *api == WireApi::Responses {
                json!({ "model": "m", "tools": [
                    { "type": "function", "name": "f", "parameters": {} },
                    body["tools"][1].clone(),
                ]})
            } else {
                body
            };
            let refused = refusal(&policy, *api, &body.to_string());
            assert_eq!(refused.field, "tools[1].type", "{api:?} {kind}");
            assert_eq!(refused.rule, Rule::ProviderTool, "{api:?} {kind}");
            assert_eq!(refused.shown.as_deref(), Some(*kind));
            assert!(
                refused
                    .message()
                    .contains(&format!("tools[1].type = \"{kind}\""))
            );
        }
    }
}

#[test]
fn a_duplicated_key_is_refused_wherever_it_is() {
    let policy = allowing(&["m"]);
    for (body, field) in [
        (
            r#"{"model":"m","tools":[],"tools":[{"type":"MCP","server_url":"https://x.invalid"}]}"#,
            "tools",
        ),
        (
            r#"{"model":"m","tool\u0073":[],"tools":[{"type":"mcp"}]}"#,
            "tools",
        ),
        (
            r#"{"model":"m","tools":[{"type":"function","name":"f","type":"mcp"}]}"#,
            "tools[0].type",
        ),
        (
            r#"{"model":"m","input":[{"role":"user","content":"a","content":"b"}]}"#,
            "input[0].content",
        ),
        (r#"{"model":"m","model":"other"}"#, "model"),
    ] {
        let refused = refusal(&policy, WireApi::Responses, body);
        assert_eq!(refused.rule, Rule::DuplicateKey, "{body}");
        assert_eq!(refused.field, field, "{body}");
        assert_eq!(refused.shown, None);
    }
}

#[test]
fn provider_tools_hidden_in_tool_choice_include_items_and_fields_are_refused() {
    let policy = allowing(&["m"]);
    for (api, body, field, rule) in [
        (
            WireApi::Responses,
            json!({"model": "m", "tool_choice": {"type": "mcp", "server_label": "x"}}),
            "tool_choice.type",
            Rule::ProviderTool,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "tool_choice": {"type": "web_search_preview"}}),
            "tool_choice.type",
            Rule::ProviderTool,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "tool_choice": {"type": "allowed_tools", "mode": "auto",
                "tools": [{"type": "file_search"}]}}),
            "tool_choice.tools[0].type",
            Rule::ProviderTool,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "include": ["reasoning.encrypted_content", "web_search_call.action.sources"]}),
            "include[1]",
            Rule::ProviderTool,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "input": [{"type": "mcp_approval_response", "approve": true}]}),
            "input[0].type",
            Rule::ProviderTool,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
            "input[0].type",
            Rule::Undocumented,
        ),
        (
            WireApi::Responses,
            json!({"model": "m", "input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "https://x.invalid/p?d=1"}]}]}),
            "input[0].content[0].image_url",
            Rule::RemoteUrl,
        ),
        (
            WireApi::ChatCompletions,
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://x.invalid/p"}}]}]}),
            "messages[0].content[0].image_url.url",
            Rule::RemoteUrl,
        ),
        (
            WireApi::ChatCompletions,
            json!({"model": "m", "web_search_options": {}}),
            "web_search_options",
            Rule::ProviderTool,
        ),
        (
            WireApi::ChatCompletions,
            json!({"model": "m", "plugins": [{"id": "web"}]}),
            "plugins",
            Rule::Plugin,
        ),
        (
            WireApi::Messages,
            json!({"model": "m", "mcp_servers": [{"type": "url", "url": "https://x.invalid"}]}),
            "mcp_servers",
            Rule::ProviderTool,
        ),
        (
            WireApi::Messages,
            json!({"model": "m", "container": "c"}),
            "container",
            Rule::ProviderTool,
        ),
        (
            WireApi::Messages,
            json!({"model": "m", "tool_choice": {"type": "web_search_20250305"}}),
            "tool_choice.type",
            Rule::ProviderTool,
        ),
        (
            WireApi::Messages,
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://x.invalid"}}]}]}),
            "messages[0].content[0].source.type",
            Rule::RemoteUrl,
        ),
        (
            WireApi::Messages,
            json!({"model": "m", "messages": [{"role": "assistant", "content": [
                {"type": "server_tool_use", "name": "web_fetch"}]}]}),
            "messages[0].content[0].type",
            Rule::ProviderTool,
        ),
        (
            WireApi::ChatCompletions,
            json!({"model": "m", "tools": {"type": "mcp"}}),
            "tools",
            Rule::Undocumented,
        ),
    ] {
        let refused = refusal(&policy, api, &body.to_string());
        assert_eq!(
            (refused.field.as_str(), refused.rule),
            (field, rule),
            "{body}"
        );
    }
}

#[test]
fn models_are_the_allowed_ones_without_suffix_or_prefix() {
    let policy = allowing(&["gpt-4.1", "claude-haiku-4-5"]);
    for (model, rule) in [
        ("gpt-4.1:online", Rule::RoutingSuffix),
        ("gpt-4.1:nitro", Rule::RoutingSuffix),
        ("openrouter/gpt-4.1", Rule::ProviderPrefix),
        ("o1-pro", Rule::Model),
        ("GPT-4.1", Rule::Model),
    ] {
        let body = json!({ "model": model, "messages": [] }).to_string();
        let refused = refusal(&policy, WireApi::ChatCompletions, &body);
        assert_eq!((refused.field.as_str(), refused.rule), ("model", rule));
        assert!(refused.message().contains("[model] allow"), "{model}");
    }
    let body = json!({ "model": "claude-haiku-4-5", "messages": [] }).to_string();
    assert!(policy.check(WireApi::Messages, body.as_bytes()).is_ok());
    // No model known to stet: any name but a routing suffix.
    let open = RequestPolicy::default();
    assert!(
        open.check(WireApi::ChatCompletions, br#"{"model":"x/y"}"#)
            .is_ok()
    );
    assert_eq!(
        refusal(&open, WireApi::ChatCompletions, r#"{"model":"x:online"}"#).rule,
        Rule::RoutingSuffix
    );
    let models: BTreeSet<String> = BTreeSet::new();
    let none = RequestPolicy {
        models: Some(models),
        ..RequestPolicy::default()
    };
    assert_eq!(
        refusal(&none, WireApi::Responses, r#"{"model":"x"}"#).rule,
        Rule::Model
    );
}

#[test]
fn an_undocumented_field_is_refused_by_name_never_by_value() {
    let policy = allowing(&["m"]);
    let secret = format!("canary-{}", std::process::id());
    for (api, field) in [
        (WireApi::ChatCompletions, "fallbacks"),
        (WireApi::ChatCompletions, "api_base"),
        (WireApi::Responses, "models"),
        (WireApi::Messages, "betas"),
    ] {
        let body = json!({ "model": "m", field: [secret.clone()] }).to_string();
        let refused = refusal(&policy, api, &body);
        assert_eq!(refused.field, field);
        assert_eq!(refused.rule, Rule::Undocumented);
        assert_eq!(refused.value_kind, "array");
        assert!(!refused.message().contains(&secret));
    }
    let refused = refusal(
        &policy,
        WireApi::Responses,
        &json!({"model": "m", "tools": [{"type": "function", "name": "f", "headers": {}}]})
            .to_string(),
    );
    assert_eq!(refused.field, "tools[0].headers");
}

#[test]
fn a_body_that_is_not_one_json_object_is_refused() {
    let policy = RequestPolicy::default();
    for body in ["", "[]", "{\"model\":\"m\"} {}", "{\"model\":", "\"text\""] {
        assert_eq!(
            refusal(&policy, WireApi::ChatCompletions, body).rule,
            Rule::NotJson,
            "{body}"
        );
    }
}

#[test]
fn an_enabled_provider_tool_passes_noted_with_its_price_and_host() {
    let mut policy = allowing(&["m"]);
    policy.provider_tools.insert("mcp".to_owned(), 0.002);
    policy
        .provider_tools
        .insert("mcp_servers".to_owned(), 0.003);
    let checked = policy
        .check(
            WireApi::Responses,
            json!({"model": "m", "tools": [{"server_url": "https://mcp.example.test/sse?k=v",
                "type": "mcp", "server_label": "s", "headers": {"X": "y"}}]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
    assert_eq!(
        checked.provider_calls,
        vec![ProviderCall {
            name: "mcp".to_owned(),
            price_usd: 0.002,
            host: Some("mcp.example.test".to_owned()),
        }]
    );
    let checked = policy
        .check(
            WireApi::Messages,
            json!({"model": "m", "mcp_servers": [{"type": "url", "url": "https://other.example.test/x"}]})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert_eq!(checked.provider_calls[0].name, "mcp_servers");
    assert_eq!(
        checked.provider_calls[0].host.as_deref(),
        Some("other.example.test")
    );
}

#[test]
fn client_tool_calls_results_and_inline_images_pass() {
    let policy = allowing(&["m"]);
    let responses = json!({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"type": "custom_tool_call", "call_id": "d", "name": "apply_patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}], "encrypted_content": "e"},
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]},
    ], "tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
        {"type": "local_shell"}]});
    let messages = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "ok"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
    ], "tools": [{"type": "bash_20250124", "name": "bash"}], "tool_choice": {"type": "auto"}});
    let chat = json!({"model": "m", "messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]},
    ], "tool_choice": {"type": "function", "function": {"name": "f"}}, "stream": true,
        "stream_options": {"include_usage": true}, "temperature": 0.5, "max_tokens": 12});
    for (api, body) in [
        (WireApi::Responses, responses),
        (WireApi::Messages, messages),
        (WireApi::ChatCompletions, chat),
    ] {
        let checked = policy
            .check(api, body.to_string().as_bytes())
            .unwrap_or_else(|refusal| panic!("{api:?}: {refusal:?}"));
        let sent: Value = serde_json::from_slice(&checked.body).unwrap();
        assert_eq!(sent, body);
    }
}

/// The field sets OpenHands 1.16 (openhands-sdk 1.21, litellm 1.110) was seen sending besides the
/// fixture's (LiteLLM adds `top_k` for some models): each passes, as it passes the ceiling's pricing.
#[test]
fn every_field_set_openhands_was_seen_sending_passes() {
    let tool = json!([{"type": "function", "function": {"name": "finish", "parameters": {}}}]);
    for body in [
        json!({"model": "m", "messages": [], "tools": tool, "reasoning_effort": "high", "prompt_cache_key": "4d888bed"}),
        json!({"model": "m", "messages": [], "tools": tool, "max_completion_tokens": 32768, "prompt_cache_retention": "24h", "prompt_cache_key": "k"}),
        json!({"model": "m", "messages": [], "max_tokens": 64000, "max_completion_tokens": 64000}),
        json!({"model": "m", "messages": [], "seed": 7, "top_k": 40.0, "temperature": 0.5, "top_p": 1.0, "stream": true, "stream_options": {"include_usage": true}}),
    ] {
        let checked = allowing(&["m"])
            .check(WireApi::ChatCompletions, body.to_string().as_bytes())
            .unwrap_or_else(|refusal| panic!("{body}: {}", refusal.message()));
        let forwarded: Value = serde_json::from_slice(&checked.body).unwrap();
        assert_eq!(forwarded, body);
    }
}

/// What the model-channel red team found passing (tests/suite/redteam_model.rs): each is refused
/// now, naming its field and rule, while the inline data beside it still passes.
#[test]
fn the_red_teams_ways_out_are_refused() {
    let policy = allowing(&["m"]);
    let chat = WireApi::ChatCompletions;
    let responses = WireApi::Responses;
    let part = |part: &str| {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{part}]}}]}}"#)
    };
    let cases = [
        (chat, r#"{"model":"m","messages":[],"input":[]}"#.to_owned(), "input", Rule::Undocumented),
        (chat, r#"{"model":"m","messages":[],"include":[]}"#.to_owned(), "include", Rule::Undocumented),
        (responses, r#"{"model":"m","messages":[]}"#.to_owned(), "messages", Rule::Undocumented),
        (responses, r#"{"model":"m","prompt":{"id":"pmpt_1"}}"#.to_owned(), "prompt", Rule::ProviderTool),
        (
            responses,
            r#"{"model":"m","tools":[{"type":"function","name":"f","server_url":"https://x.invalid"}]}"#.to_owned(),
            "tools[0].server_url",
            Rule::Undocumented,
        ),
        (
            chat,
            r#"{"model":"m","tools":[{"type":"function","function":{"name":"f"},"tools":[]}]}"#.to_owned(),
            "tools[0].tools",
            Rule::Undocumented,
        ),
        (
            chat,
            part(r#"{"type":"file","file":{"file_data":"https://x.invalid/a.pdf"}}"#),
            "messages[0].content[0].file.file_data",
            Rule::RemoteUrl,
        ),
        (
            chat,
            part(r#"{"type":"file","file":{"file_id":"gs://b/a.pdf"}}"#),
            "messages[0].content[0].file.file_id",
            Rule::RemoteUrl,
        ),
        (
            chat,
            part(r#"{"type":"file","file":{"file_url":"https://x.invalid/a.pdf"}}"#),
            "messages[0].content[0].file.file_url",
            Rule::RemoteUrl,
        ),
        (
            responses,
            r#"{"model":"m","instructions":[{"role":"system","content":[{"type":"input_image","image_url":"https://x.invalid"}]}]}"#.to_owned(),
            "instructions[0].content[0].image_url",
            Rule::RemoteUrl,
        ),
        (chat, r#"{"model":null,"messages":[]}"#.to_owned(), "model", Rule::Model),
        (chat, r#"{"messages":[]}"#.to_owned(), "model", Rule::Model),
        (chat, r#"{"model":"m","messages":[],"stream":"true"}"#.to_owned(), "stream", Rule::Undocumented),
    ];
    for (api, body, field, rule) in cases {
        let refused = refusal(&policy, api, &body);
        assert_eq!(
            (refused.field.as_str(), refused.rule),
            (field, rule),
            "{body}"
        );
    }
    // A suffix anywhere in the name routes, even where no model is configured.
    let open = RequestPolicy::default();
    for model in ["m:online:free", "m:ONLINE ", "m:nitro/x"] {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        assert_eq!(
            refusal(&open, chat, &body).rule,
            Rule::RoutingSuffix,
            "{model}"
        );
    }
    assert!(
        open.check(chat, br#"{"messages":[]}"#).is_ok(),
        "no model known, none required"
    );
    for inline in [
        r#"{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}}"#,
        r#"{"type":"file","file":{"file_data":"JVBERi0xLjQK/+8="}}"#,
        r#"{"type":"file","file":{"file_id":"file-abc123"}}"#,
    ] {
        let body = part(inline);
        assert!(policy.check(chat, body.as_bytes()).is_ok(), "{body}");
    }
    let streamed = br#"{"model":"m","messages":[],"stream":true}"#;
    assert!(policy.check(chat, streamed).is_ok());
    let instructions = br#"{"model":"m","instructions":"be brief","input":"hi"}"#;
    assert!(policy.check(responses, instructions).is_ok());
}

/// Every top-level field each API documents, with a value of the documented shape: the request
/// passes and is written anew with the same meaning (the fields by which the provider would work
/// from state stet cannot see pass only as null or false).
#[test]
fn every_documented_responses_and_messages_field_passes_written_anew() {
    let responses = json!({
        "model": "gpt-5-codex",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "instructions": "be brief",
        "background": false,
        "client_metadata": {"k": "v"},
        "conversation": null,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": 100,
        "max_tool_calls": 2,
        "metadata": {"k": "v"},
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "prompt_cache_key": "thread",
        "prompt_cache_retention": "24h",
        "reasoning": {"effort": "low", "summary": "auto"},
        "safety_identifier": "u",
        "service_tier": "auto",
        "store": false,
        "stream": true,
        "stream_options": {"include_obfuscation": false},
        "temperature": 1.0,
        "text": {"verbosity": "low", "format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [{"type": "function", "name": "shell", "description": "d", "parameters": {"type": "object"}, "strict": false}],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "user": "u"
    });
    let messages = json!({
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
        "max_tokens": 1000,
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "metadata": {"user_id": "u"},
        "output_config": {"effort": "high"},
        "output_format": {"type": "json_schema", "schema": {"type": "object"}},
        "service_tier": "standard_only",
        "stop_sequences": ["END"],
        "stream": false,
        "system": [{"type": "text", "text": "s"}],
        "temperature": 0.5,
        "thinking": {"type": "enabled", "budget_tokens": 512},
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "tools": [{"name": "Bash", "description": "d", "input_schema": {"type": "object"}}],
        "top_k": 5,
        "top_p": 0.9
    });
    for (api, body) in [
        (WireApi::Responses, responses),
        (WireApi::Messages, messages),
    ] {
        let documented: BTreeSet<&str> = rules::fields(api).iter().copied().collect();
        let sent: BTreeSet<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            sent,
            documented,
            "{}: the test covers every field",
            api.name()
        );
        let raw = serde_json::to_vec_pretty(&body).unwrap();
        let checked = RequestPolicy::default().check(api, &raw).unwrap();
        let written: Value = serde_json::from_slice(&checked.body).unwrap();
        assert_eq!(written, body, "{}", api.name());
        assert!(checked.body.len() < raw.len(), "written anew, compactly");
    }
}

#[test]
fn work_stet_cannot_see_is_refused_on_every_request_naming_the_field() {
    for (body, field, kind) in [
        (
            json!({"model": "m", "background": true}),
            "background",
            "boolean",
        ),
        (
            json!({"model": "m", "previous_response_id": "resp_1"}),
            "previous_response_id",
            "string",
        ),
        (
            json!({"model": "m", "conversation": "conv_1"}),
            "conversation",
            "string",
        ),
        (
            json!({"model": "m", "conversation": {"id": "conv_1"}}),
            "conversation",
            "object",
        ),
    ] {
        let refused = refusal(
            &RequestPolicy::default(),
            WireApi::Responses,
            &body.to_string(),
        );
        assert_eq!(refused.field, field);
        assert_eq!(refused.rule, Rule::UnseenWork);
        assert_eq!(refused.value_kind, kind);
        assert!(refused.message().contains(field), "{}", refused.message());
        // Chat Completions and Messages do not document these fields at all.
        for api in [WireApi::ChatCompletions, WireApi::Messages] {
            assert_eq!(
                refusal(&RequestPolicy::default(), api, &body.to_string()).rule,
                Rule::Undocumented
            );
        }
    }
}
