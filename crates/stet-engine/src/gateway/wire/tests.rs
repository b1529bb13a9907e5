//! Unit tests of `crate::gateway::wire`: the registry gives every kind its implementation (or says it
//! is not served yet), and each implementation answers in its own API's shapes.

use super::*;
use crate::gateway::policy::Rule;

/// The kinds whose request policy is written but which no route serves yet. A kind added to
/// [`WireApi`] either gets a line in the registry or is named here; otherwise this test fails.
const NOT_SERVED_YET: &[WireApi] = &[];

#[test]
fn the_registry_gives_every_wire_api_its_implementation() {
    assert_eq!(
        WireApi::ALL,
        &[
            WireApi::ChatCompletions,
            WireApi::Responses,
            WireApi::Messages
        ]
    );
    let mut served = Vec::new();
    for api in WireApi::ALL {
        match of(*api) {
            Some(wire) => {
                assert_eq!(
                    wire.api(),
                    *api,
                    "{}: the registry's entry is another API's",
                    api.name()
                );
                served.push(*api);
            }
            None => assert!(
                NOT_SERVED_YET.contains(api),
                "{}: a wire API without an entry in the registry",
                api.name()
            ),
        }
        assert_eq!(WireApi::from_name(api.as_str()), Some(*api));
    }
    assert_eq!(
        served,
        [
            WireApi::ChatCompletions,
            WireApi::Responses,
            WireApi::Messages
        ]
    );
    assert_eq!(fallback().api(), WireApi::ChatCompletions);
}

#[test]
fn each_wire_api_caps_its_own_output_fields_and_asks_its_own_streams_for_usage() {
    let fields = |json: serde_json::Value| -> Fields { serde_json::from_value(json).unwrap() };
    let chat = of(WireApi::ChatCompletions).unwrap();
    let responses = of(WireApi::Responses).unwrap();
    assert_eq!(
        chat.output_fields(&fields(serde_json::json!({}))),
        ["max_tokens"]
    );
    assert_eq!(
        chat.output_fields(&fields(serde_json::json!({"max_completion_tokens": 1}))),
        ["max_completion_tokens"]
    );
    assert_eq!(
        responses.output_fields(&fields(serde_json::json!({"max_tokens": 1}))),
        ["max_output_tokens"]
    );
    let mut streamed = fields(serde_json::json!({"stream": true}));
    assert!(!responses.ask_stream_usage(&mut streamed));
    assert!(chat.ask_stream_usage(&mut streamed));
    assert_eq!(
        typed::<Value>(&streamed, "stream_options"),
        Some(serde_json::json!({"include_usage": true}))
    );
    assert!(!chat.ask_stream_usage(&mut streamed), "asked once");
    let mut whole = fields(serde_json::json!({"stream": false}));
    assert!(!chat.ask_stream_usage(&mut whole));
    assert!(!whole.contains_key("stream_options"));
}

#[test]
fn openai_apis_answer_in_openai_error_shapes_and_read_usage_from_both_shapes() {
    let refusal = Refusal {
        api: WireApi::Responses,
        field: "tools[0].type".to_owned(),
        value_kind: "string",
        shown: Some("web_search".to_owned()),
        rule: Rule::ProviderTool,
    };
    for api in [WireApi::ChatCompletions, WireApi::Responses] {
        let wire = of(api).unwrap();
        let body = wire.refusal_body(&refusal);
        assert_eq!(body["error"]["param"], "tools[0].type");
        assert_eq!(body["error"]["code"], "stet_request_policy");
        assert_eq!(body["error"]["message"], refusal.message());
        let own = wire.error_body("cost_ceiling_reached", "stet gateway: no");
        assert_eq!(
            own,
            serde_json::json!({"error": {"message": "stet gateway: no", "type": "stet_gateway", "code": "cost_ceiling_reached"}})
        );
        let whole = wire
            .body_usage(br#"{"model":"m","usage":{"prompt_tokens":3,"completion_tokens":2}}"#)
            .unwrap();
        assert_eq!(
            whole.usage.map(|usage| (usage.input, usage.output)),
            Some((3, 2))
        );
        let mut stream = wire.stream_usage();
        stream.push(
            b"data: {\"type\":\"response.completed\",\"response\":{\"model\":\"m\",\"usage\":",
        );
        stream.push(b"{\"input_tokens\":5,\"output_tokens\":7}}}\n\n");
        let streamed = stream.finish();
        assert_eq!(streamed.model.as_deref(), Some("m"));
        assert_eq!(
            streamed.usage.map(|usage| (usage.input, usage.output)),
            Some((5, 7))
        );
    }
}

#[test]
fn messages_caps_max_tokens_and_holds_a_thinking_budget_below_it() {
    let fields = |json: serde_json::Value| -> Fields { serde_json::from_value(json).unwrap() };
    let messages = of(WireApi::Messages).unwrap();
    assert_eq!(messages.key_header(), KeyHeader::XApiKey);
    assert_eq!(
        of(WireApi::Responses).unwrap().key_header(),
        KeyHeader::Bearer
    );
    let mut request = fields(serde_json::json!({
        "max_tokens": 64000,
        "thinking": {"type": "enabled", "budget_tokens": 32000}
    }));
    messages.cap_output(&mut request, 4000);
    assert_eq!(typed::<u64>(&request, "max_tokens"), Some(4000));
    assert_eq!(
        typed::<Value>(&request, "thinking"),
        Some(serde_json::json!({"type": "enabled", "budget_tokens": 3999}))
    );
    // A budget already below the cap, or a budget that is not a count, is held or set below it.
    let mut request =
        fields(serde_json::json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}));
    messages.cap_output(&mut request, 4000);
    assert_eq!(
        typed::<Value>(&request, "thinking"),
        Some(serde_json::json!({"type": "enabled", "budget_tokens": 1024}))
    );
    let mut request =
        fields(serde_json::json!({"thinking": {"type": "enabled", "budget_tokens": "9e9"}}));
    messages.cap_output(&mut request, 4000);
    assert_eq!(
        typed::<Value>(&request, "thinking").unwrap()["budget_tokens"],
        3999
    );
    let mut streamed = fields(serde_json::json!({"stream": true}));
    assert!(!messages.ask_stream_usage(&mut streamed));
}

#[test]
fn messages_answers_in_anthropic_error_shapes_and_reads_anthropic_usage() {
    let messages = of(WireApi::Messages).unwrap();
    let refusal = Refusal {
        api: WireApi::Messages,
        field: "tools[0].type".to_owned(),
        value_kind: "string",
        shown: Some("web_search_20250305".to_owned()),
        rule: Rule::ProviderTool,
    };
    let body = messages.refusal_body(&refusal);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["message"], refusal.message());
    assert!(
        refusal.message().contains("tools[0].type"),
        "{}",
        refusal.message()
    );
    for (code, kind) in [
        ("cost_ceiling_reached", "billing_error"),
        ("too_many_requests_in_flight", "rate_limit_error"),
        ("not_found", "not_found_error"),
        ("upstream_unreachable", "api_error"),
        ("cost_not_bounded", "invalid_request_error"),
    ] {
        let own = messages.error_body(code, "stet gateway: no");
        assert_eq!(own["type"], "error", "{code}");
        assert_eq!(own["error"]["type"], kind, "{code}");
        assert_eq!(own["error"]["message"], "stet gateway: no", "{code}");
    }
    let whole = messages
        .body_usage(br#"{"type":"message","model":"claude-sonnet-4-5","usage":{"input_tokens":3,"output_tokens":2,"cache_read_input_tokens":10,"cache_creation_input_tokens":5}}"#)
        .unwrap();
    let usage = whole.usage.unwrap();
    assert_eq!((usage.input, usage.output, usage.cached), (18, 2, 10));
    assert_eq!((usage.cache_write_5m, usage.cache_write_1h), (0, 5));
    // An OpenAI shape is not Anthropic's: no usage.
    assert_eq!(
        messages
            .body_usage(br#"{"model":"m","usage":{"prompt_tokens":3,"completion_tokens":2}}"#)
            .unwrap()
            .usage,
        None
    );
}
