//! Unit and property tests of `crate::gateway::usage::anthropic`: the Messages shapes, whole and
//! streamed, split anywhere, cut anywhere, and usage that lies.

use proptest::prelude::*;

use super::*;

/// A streamed Messages reply as Anthropic sends it: text, a tool use, usage in `message_start` and
/// the cumulative output in `message_delta`.
fn stream() -> String {
    let events: [(&str, serde_json::Value); 9] = [
        (
            "message_start",
            serde_json::json!({"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                "model": "claude-sonnet-4-5-20250929", "stop_reason": null,
                "usage": {"input_tokens": 25, "output_tokens": 1,
                    "cache_read_input_tokens": 100, "cache_creation_input_tokens": 50,
                    "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30}}}}),
        ),
        (
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Editing."}}),
        ),
        (
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\":\"ls\"}"}}),
        ),
        (
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
        ),
        ("message_stop", serde_json::json!({"type": "message_stop"})),
    ];
    let mut text = String::new();
    for (name, data) in events {
        text.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    text
}

fn expected() -> TokenCounts {
    TokenCounts {
        input: 25 + 100 + 50,
        output: 42,
        cached: 100,
        cache_write_5m: 20,
        cache_write_1h: 30,
    }
}

fn read(chunks: &[&[u8]]) -> Metered {
    let mut reader = MessagesStream::new();
    for chunk in chunks {
        reader.push(chunk);
    }
    reader.finish()
}

#[test]
fn a_streamed_reply_is_metered_from_message_start_and_message_delta() {
    let metered = read(&[stream().as_bytes()]);
    assert_eq!(metered.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    assert_eq!(metered.usage, Some(expected()));
}

#[test]
fn a_message_delta_that_restates_the_input_overrides_message_start() {
    let text = stream().replace(
        r#""usage":{"output_tokens":42}"#,
        r#""usage":{"input_tokens":30,"output_tokens":42,"cache_read_input_tokens":100,"cache_creation_input_tokens":50}"#,
    );
    let usage = read(&[text.as_bytes()]).usage.unwrap();
    assert_eq!(usage.input, 30 + 100 + 50);
    // The delta gave no split: its writes count at the one-hour rate.
    assert_eq!((usage.cache_write_5m, usage.cache_write_1h), (20, 30));
}

#[test]
fn a_whole_reply_is_metered_from_its_usage() {
    let body = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 7, "output_tokens": 9, "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0, "server_tool_use": null}
    });
    let metered = from_json(body.to_string().as_bytes()).unwrap();
    assert_eq!(metered.model.as_deref(), Some("claude-haiku-4-5"));
    assert_eq!(
        metered.usage,
        Some(TokenCounts {
            input: 7,
            output: 9,
            ..TokenCounts::default()
        })
    );
    assert!(from_json(b"<html>").is_err());
    assert_eq!(from_json(b"[1]").unwrap(), Metered::default());
}

#[test]
fn usage_that_lies_is_no_usage() {
    for usage in [
        serde_json::json!({"input_tokens": -1, "output_tokens": 5}),
        serde_json::json!({"input_tokens": 1, "output_tokens": -5}),
        serde_json::json!({"input_tokens": 1.5, "output_tokens": 5}),
        serde_json::json!({"input_tokens": "1", "output_tokens": 5}),
        serde_json::json!({"output_tokens": 5}),
        serde_json::json!({"input_tokens": 5}),
        serde_json::json!({"input_tokens": 1, "output_tokens": 5, "cache_read_input_tokens": -3}),
        serde_json::json!({"input_tokens": 1, "output_tokens": 5, "cache_creation_input_tokens": "x"}),
        serde_json::json!({"input_tokens": 1, "output_tokens": 5, "cache_creation_input_tokens": 2,
            "cache_creation": {"ephemeral_5m_input_tokens": -2}}),
    ] {
        assert_eq!(usage_from_value(&usage), None, "{usage}");
    }
    // Huge counts saturate rather than wrap: the meter charges them, and the ceiling holds.
    let huge = usage_from_value(&serde_json::json!({
        "input_tokens": u64::MAX, "output_tokens": u64::MAX, "cache_read_input_tokens": u64::MAX
    }))
    .unwrap();
    assert_eq!((huge.input, huge.output), (u64::MAX, u64::MAX));
    // A five-minute split larger than the writes is held to them.
    let split = usage_from_value(&serde_json::json!({
        "input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 4,
        "cache_creation": {"ephemeral_5m_input_tokens": 9}
    }))
    .unwrap();
    assert_eq!((split.cache_write_5m, split.cache_write_1h), (4, 0));
}

#[test]
fn a_stream_without_message_delta_reports_no_usage() {
    let text = stream();
    let cut = text.find("event: message_delta").unwrap();
    assert_eq!(read(&[&text.as_bytes()[..cut]]).usage, None);
    // An error event mid-stream ends it without usage too.
    let failed = format!(
        "{}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"x\"}}}}\n\n",
        &text[..cut]
    );
    assert_eq!(read(&[failed.as_bytes()]).usage, None);
    // A delta without a start has no input count: no usage.
    let delta_only = &text[cut..];
    assert_eq!(read(&[delta_only.as_bytes()]).usage, None);
}

proptest! {
    #[test]
    fn a_stream_split_anywhere_reads_the_same(cuts in proptest::collection::vec(0usize..2000, 0..6)) {
        let text = stream();
        let bytes = text.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|cut| cut % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for cut in cuts {
            chunks.push(&bytes[at..cut]);
            at = cut;
        }
        chunks.push(&bytes[at..]);
        prop_assert_eq!(read(&chunks).usage, Some(expected()));
    }

    #[test]
    fn a_stream_cut_anywhere_reports_its_usage_only_once_the_delta_is_whole(cut in 0usize..4000) {
        let text = stream();
        let bytes = text.as_bytes();
        let cut = cut % (bytes.len() + 1);
        let delta_end = text.find("event: message_stop").unwrap();
        let usage = read(&[&bytes[..cut]]).usage;
        // Before the whole `message_delta` line: nothing (the request counts its reservation).
        // From it on: the full usage, never the one output token `message_start` shows.
        let delta_line_end = text[..delta_end].trim_end().len();
        if cut < delta_line_end {
            prop_assert_eq!(usage, None);
        } else {
            prop_assert_eq!(usage, Some(expected()));
        }
    }
}
