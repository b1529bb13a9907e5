//! Unit tests of `crate::gateway::usage`, in a file of their own so the module reads as code.

use super::sse::MAX_SSE_LINE;
use super::*;

const CHAT: &str = r#"{"id":"c1","model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":100}}}"#;
const RESPONSES: &str = r#"{"id":"r1","object":"response","model":"o4-mini","output":[],"usage":{"input_tokens":50,"output_tokens":7,"input_tokens_details":{"cached_tokens":20},"output_tokens_details":{"reasoning_tokens":3}}}"#;

#[test]
fn chat_completion_usage_is_read() {
    let metered = from_json(CHAT.as_bytes()).unwrap();
    assert_eq!(metered.model.as_deref(), Some("gpt-4o-2024-08-06"));
    assert_eq!(
        metered.usage,
        Some(TokenCounts {
            input: 120,
            output: 30,
            cached: 100,
            ..TokenCounts::default()
        })
    );
}

#[test]
fn responses_api_usage_is_read() {
    let metered = from_json(RESPONSES.as_bytes()).unwrap();
    assert_eq!(metered.model.as_deref(), Some("o4-mini"));
    assert_eq!(
        metered.usage,
        Some(TokenCounts {
            input: 50,
            output: 7,
            cached: 20,
            ..TokenCounts::default()
        })
    );
}

#[test]
fn missing_or_partial_usage_is_none_and_garbage_is_not_json() {
    let metered = from_json(br#"{"model":"m","usage":{"prompt_tokens":3}}"#).unwrap();
    assert_eq!(metered.usage, None);
    assert_eq!(
        from_json(br#"{"object":"list","data":[]}"#).unwrap(),
        Metered::default()
    );
    assert!(from_json(b"{\"usage\": {").is_err());
    assert!(from_json(b"<html>bad gateway</html>").is_err());
}

#[test]
fn the_litellm_cost_header_must_be_a_finite_non_negative_decimal() {
    assert_eq!(header_cost(b"0.00123"), Some(0.00123));
    assert_eq!(header_cost(b" 2 "), Some(2.0));
    assert_eq!(header_cost(b"1e-4"), Some(0.0001));
    for bad in [&b""[..], b"-1", b"NaN", b"inf", b"$0.01", b"\xff"] {
        assert_eq!(header_cost(bad), None, "{bad:?}");
    }
}

fn chat_stream() -> String {
    let mut stream = String::new();
    for word in ["Hel", "lo"] {
        stream.push_str(&format!(
                "data: {{\"model\":\"gpt-4o\",\"choices\":[{{\"delta\":{{\"content\":\"{word}\"}}}}],\"usage\":null}}\n\n"
            ));
    }
    stream.push_str(": keep-alive comment\n\n");
    stream.push_str("data: {\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\r\n\r\n");
    stream.push_str("data: [DONE]\n\n");
    stream
}

#[test]
fn sse_usage_is_read_however_the_stream_is_split() {
    let stream = chat_stream();
    let expected = SseSummary {
        metered: Metered {
            model: Some("gpt-4o".to_owned()),
            usage: Some(TokenCounts {
                input: 11,
                output: 2,
                cached: 4,
                ..TokenCounts::default()
            }),
            calls: BTreeMap::new(),
        },
        done: true,
    };
    for split in 0..=stream.len() {
        let mut scanner = SseScanner::new();
        scanner.push(&stream.as_bytes()[..split]);
        scanner.push(&stream.as_bytes()[split..]);
        assert_eq!(scanner.finish(), expected, "split at {split}");
    }
    let mut scanner = SseScanner::new();
    for byte in stream.as_bytes() {
        scanner.push(std::slice::from_ref(byte));
    }
    assert_eq!(scanner.finish(), expected);
}

#[test]
fn sse_cut_before_usage_has_no_usage_and_no_done() {
    let stream = chat_stream();
    let cut = stream
        .find("data: {\"model\":\"gpt-4o\",\"choices\":[],")
        .unwrap()
        + 20;
    let mut scanner = SseScanner::new();
    scanner.push(&stream.as_bytes()[..cut]);
    let summary = scanner.finish();
    assert_eq!(summary.metered.usage, None);
    assert!(!summary.done);
}

#[test]
fn responses_api_stream_is_metered_from_response_completed() {
    let stream = concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"response\":{\"model\":\"o4-mini\",\"usage\":null}}\n\n",
        "event: response.output_text.delta\n",
        "data: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"model\":\"o4-mini-2025-04-16\",",
        "\"usage\":{\"input_tokens\":9,\"output_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":0}}}}\n\n",
    );
    let mut scanner = SseScanner::new();
    scanner.push(stream.as_bytes());
    let summary = scanner.finish();
    assert_eq!(summary.metered.model.as_deref(), Some("o4-mini-2025-04-16"));
    assert_eq!(
        summary.metered.usage,
        Some(TokenCounts {
            input: 9,
            output: 5,
            cached: 0,
            ..TokenCounts::default()
        })
    );
    assert!(!summary.done);
}

#[test]
fn multi_line_data_and_an_unterminated_last_event_are_read() {
    let mut scanner = SseScanner::new();
    scanner.push(b"data: {\"usage\":\ndata: {\"input_tokens\":1,\"output_tokens\":2}}");
    assert_eq!(
        scanner.finish().metered.usage,
        Some(TokenCounts {
            input: 1,
            output: 2,
            cached: 0,
            ..TokenCounts::default()
        })
    );
}

#[test]
fn an_overlong_line_is_skipped_and_the_stream_read_on() {
    let mut scanner = SseScanner::new();
    scanner.push(b"data: ");
    scanner.push(&vec![b'x'; MAX_SSE_LINE + 10]);
    scanner.push(b"\n\ndata: {\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n\n");
    let summary = scanner.finish();
    assert_eq!(summary.metered.usage.map(|u| u.output), Some(1));

    let mut scanner = SseScanner::new();
    scanner.push(&vec![b'y'; MAX_SSE_LINE + 1]);
    assert!(scanner.events.held() <= MAX_SSE_LINE);
}

#[test]
fn provider_tool_calls_are_counted_in_a_whole_responses_body() {
    let body = r#"{"model":"m","output":[
        {"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}},
        {"type":"function_call","id":"fc_1","name":"f","arguments":"{}"},
        {"type":"mcp_list_tools","id":"ml_1","server_label":"s","tools":[]},
        {"type":"mcp_call","id":"mcp_1","server_label":"s","name":"t","arguments":"{}"},
        {"type":"web_search_call","id":"ws_2","status":"completed"},
        {"type":"message","id":"msg_1","content":[]}],
        "usage":{"input_tokens":5,"output_tokens":1}}"#;
    let metered = from_json(body.as_bytes()).unwrap();
    assert_eq!(
        metered.calls,
        [
            ("mcp_call".to_owned(), 1),
            ("web_search_call".to_owned(), 2)
        ]
        .into()
    );
    assert!(from_json(CHAT.as_bytes()).unwrap().calls.is_empty());
}

#[test]
fn provider_tool_calls_are_counted_in_a_stream_whichever_event_reports_them() {
    let item = |id: &str| format!(r#"{{"type":"mcp_call","id":"{id}","status":"completed"}}"#);
    let done = |id: &str| {
        format!(
            "event: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"item\":{}}}\n\n",
            item(id)
        )
    };
    let added = format!(
        "event: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"item\":{}}}\n\n",
        item("a")
    );
    let completed = |output: &str| {
        format!(
            "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"model\":\"m\",\"output\":[{output}],\"usage\":{{\"input_tokens\":5,\"output_tokens\":1}}}}}}\n\n"
        )
    };
    // Each item's event and the last event agree: counted once.
    let mut scanner = SseScanner::new();
    scanner.push(
        format!(
            "{added}{}{}{}",
            done("a"),
            done("b"),
            completed(&format!("{},{}", item("a"), item("b")))
        )
        .as_bytes(),
    );
    assert_eq!(
        scanner.finish().metered.calls,
        [("mcp_call".to_owned(), 2)].into()
    );
    // The last event lists fewer than the items' events said: the larger count is charged.
    let mut scanner = SseScanner::new();
    scanner.push(format!("{}{}{}", done("a"), done("b"), completed("")).as_bytes());
    assert_eq!(
        scanner.finish().metered.calls,
        [("mcp_call".to_owned(), 2)].into()
    );
}

/// A Responses stream as the Codex CLI receives it: created, a function call, completed with usage.
fn codex_stream() -> String {
    concat!(
        "event: response.created\n",
        "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"model\":\"gpt-5-codex\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n",
        "event: response.output_item.added\n",
        "data: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c1\",\"name\":\"shell\",\"arguments\":\"\"}}\n\n",
        "event: response.function_call_arguments.delta\n",
        "data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":2,\"item_id\":\"fc_1\",\"delta\":\"{}\"}\n\n",
        "event: response.output_item.done\n",
        "data: {\"type\":\"response.output_item.done\",\"sequence_number\":3,\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c1\",\"name\":\"shell\",\"arguments\":\"{}\"}}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"model\":\"gpt-5-codex\",\"status\":\"completed\",\"output\":[{\"type\":\"function_call\",\"id\":\"fc_1\"}],",
        "\"usage\":{\"input_tokens\":900,\"input_tokens_details\":{\"cached_tokens\":800},\"output_tokens\":30,\"output_tokens_details\":{\"reasoning_tokens\":10},\"total_tokens\":930}}}\n\n",
    )
    .to_owned()
}

#[test]
fn responses_usage_that_lies_is_no_usage() {
    for usage in [
        r#"{"input_tokens":-1,"output_tokens":3}"#,
        r#"{"input_tokens":1,"output_tokens":-3}"#,
        r#"{"input_tokens":1.5,"output_tokens":3}"#,
        r#"{"output_tokens":3}"#,
        r#"{"input_tokens":"9","output_tokens":3}"#,
        "null",
    ] {
        let body = format!(r#"{{"model":"gpt-5","usage":{usage}}}"#);
        assert_eq!(from_json(body.as_bytes()).unwrap().usage, None, "{usage}");
        let stream = format!(
            "data: {{\"type\":\"response.completed\",\"response\":{{\"model\":\"gpt-5\",\"usage\":{usage}}}}}\n\n"
        );
        let mut scanner = SseScanner::new();
        scanner.push(stream.as_bytes());
        assert_eq!(scanner.finish().metered.usage, None, "{usage}");
    }
    // Huge counts are read as they are (the meter charges them; the ceiling then holds), and a
    // cached count above the input is held to it when priced.
    let huge = from_json(
        format!(
            r#"{{"usage":{{"input_tokens":{max},"output_tokens":{max},"input_tokens_details":{{"cached_tokens":{max}}}}}}}"#,
            max = u64::MAX
        )
        .as_bytes(),
    )
    .unwrap()
    .usage
    .unwrap();
    assert_eq!(
        (huge.input, huge.output, huge.cached),
        (u64::MAX, u64::MAX, u64::MAX)
    );
}

proptest::proptest! {
    #[test]
    fn a_responses_stream_cut_anywhere_has_usage_only_once_its_terminal_event_is_whole(
        cut in 0usize..4000,
    ) {
        let text = codex_stream();
        let cut = cut % (text.len() + 1);
        let mut scanner = SseScanner::new();
        scanner.push(&text.as_bytes()[..cut]);
        let usage = scanner.finish().metered.usage;
        let whole = text.trim_end().len();
        if cut < whole {
            proptest::prop_assert_eq!(usage, None);
        } else {
            proptest::prop_assert_eq!(
                usage,
                Some(TokenCounts { input: 900, output: 30, cached: 800, ..TokenCounts::default() })
            );
        }
    }

    #[test]
    fn a_responses_stream_split_anywhere_reads_the_same(first in 0usize..4000, second in 0usize..4000) {
        let text = codex_stream();
        let bytes = text.as_bytes();
        let mut cuts = [first % (bytes.len() + 1), second % (bytes.len() + 1)];
        cuts.sort_unstable();
        let mut scanner = SseScanner::new();
        scanner.push(&bytes[..cuts[0]]);
        scanner.push(&bytes[cuts[0]..cuts[1]]);
        scanner.push(&bytes[cuts[1]..]);
        let metered = scanner.finish().metered;
        proptest::prop_assert_eq!(metered.model.as_deref(), Some("gpt-5-codex"));
        proptest::prop_assert_eq!(metered.usage.map(|usage| (usage.input, usage.cached)), Some((900, 800)));
        proptest::prop_assert!(metered.calls.is_empty(), "a function call is the client's");
    }
}
