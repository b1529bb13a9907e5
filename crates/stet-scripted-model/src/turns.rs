//! Scripted agent conversations on the Responses and Messages APIs: a model that answers each
//! request with the turn its conversation has reached — the number of tool outputs the request
//! carries, so a retried request gets the same answer — calling the client's tools
//! (`function_call` and `custom_tool_call` items, `tool_use` blocks) or answering in text, plain
//! or streamed exactly as the real APIs stream them, with usage (cached input, cache reads and
//! writes included) in every terminal event. What it sent is kept ([`SentUsage`]) so a test can
//! price it and compare with the gateway's meter.

use serde_json::{Value, json};

use super::{BYTES_PER_TOKEN, PROMPT_TOKEN_BASE, model_name};

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The tool's name, as the client declared it.
    pub name: String,
    /// Its input.
    pub input: CallInput,
}

/// What a call passes to its tool.
#[derive(Debug, Clone, PartialEq)]
pub enum CallInput {
    /// JSON arguments: a Responses `function_call`'s `arguments` (as a string), a Messages
    /// `tool_use`'s `input` (as an object).
    Json(Value),
    /// Free text: a Responses `custom_tool_call`'s `input` (the Codex CLI's `apply_patch`); on
    /// Messages, the `input` object `{"input": text}`.
    Text(String),
}

/// What the model answers on one turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// Calls of the client's tools, in one reply (several: parallel tool use).
    Calls(Vec<Call>),
    /// A text answer that calls no tool (the agent's turn ends).
    Text(String),
    /// No answer: the request is held until the server shuts down.
    Hold,
}

impl Turn {
    /// One call of `name` with JSON `arguments`.
    pub fn call(name: &str, arguments: Value) -> Turn {
        Turn::Calls(vec![Call {
            name: name.to_owned(),
            input: CallInput::Json(arguments),
        }])
    }

    /// One call of the free-text (custom) tool `name` with `input`.
    pub fn custom(name: &str, input: &str) -> Turn {
        Turn::Calls(vec![Call {
            name: name.to_owned(),
            input: CallInput::Text(input.to_owned()),
        }])
    }

    /// A text answer.
    pub fn text(text: &str) -> Turn {
        Turn::Text(text.to_owned())
    }
}

/// The usage one reply reported, as the API counts it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SentUsage {
    /// The path it answered (`/v1/responses`, `/v1/messages`).
    pub path: String,
    /// The model it named.
    pub model: String,
    /// Input tokens, cached ones and cache writes included (the gateway's convention).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cached_tokens: u64,
    /// Input tokens written to a five-minute cache (Messages).
    pub cache_write_5m: u64,
    /// Input tokens written to a one-hour cache (Messages).
    pub cache_write_1h: u64,
}

/// How many tool outputs a Responses request's `input` or a Messages request's `messages` carry:
/// the turn its conversation has reached.
pub fn tool_outputs(body: &Value) -> usize {
    let responses = body["input"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|item| {
                item["type"]
                    .as_str()
                    .is_some_and(|kind| kind.ends_with("_call_output"))
            })
            .count()
    });
    let messages = body["messages"].as_array().map_or(0, |messages| {
        messages
            .iter()
            .filter(|message| message["role"] == "user")
            .filter_map(|message| message["content"].as_array())
            .flatten()
            .filter(|block| block["type"] == "tool_result")
            .count()
    });
    responses + messages
}

/// A turn's reply: its usage and, per API, its whole body and its events.
pub(super) struct TurnReply {
    pub(super) usage: SentUsage,
    pub(super) body: Value,
    pub(super) events: Vec<(String, String)>,
}

fn output_tokens(calls: &[Call], text: Option<&str>) -> u64 {
    let bytes: usize = calls
        .iter()
        .map(|call| {
            call.name.len()
                + match &call.input {
                    CallInput::Json(value) => value.to_string().len(),
                    CallInput::Text(text) => text.len(),
                }
        })
        .sum::<usize>()
        + text.map_or(0, str::len);
    bytes.div_ceil(BYTES_PER_TOKEN).max(1) as u64
}

fn input_tokens(request_bytes: usize) -> u64 {
    (request_bytes / BYTES_PER_TOKEN) as u64 + PROMPT_TOKEN_BASE
}

/// `text` in three pieces at most (one when it is short).
fn pieces(text: &str) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    let piece = characters.len().div_ceil(3).max(1);
    let mut pieces: Vec<String> = characters
        .chunks(piece)
        .map(|piece| piece.iter().collect())
        .collect();
    if pieces.is_empty() {
        pieces.push(String::new());
    }
    pieces
}

/// The Responses reply to `body` on `turn` (`number`: the request's number on the server).
pub(super) fn response(body: &Value, turn: &Turn, number: u64, request_bytes: usize) -> TurnReply {
    let model = model_name(body).to_owned();
    let position = tool_outputs(body);
    let (calls, text) = match turn {
        Turn::Calls(calls) => (calls.as_slice(), None),
        Turn::Text(text) => (&[][..], Some(text.as_str())),
        Turn::Hold => (&[][..], None),
    };
    let input = input_tokens(request_bytes);
    // The pretend system prompt is served from the cache once the conversation has a key and a
    // turn behind it.
    let cached = if body.get("prompt_cache_key").is_some() && position > 0 {
        PROMPT_TOKEN_BASE
    } else {
        0
    };
    let output = output_tokens(calls, text);
    let usage = json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output,
    });
    let items: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let id = format!("stet_{number}_{index}");
            match &call.input {
                CallInput::Json(arguments) => json!({
                    "type": "function_call", "id": format!("fc_{id}"), "call_id": format!("call_{id}"),
                    "name": call.name, "arguments": arguments.to_string(), "status": "completed",
                }),
                CallInput::Text(input) => json!({
                    "type": "custom_tool_call", "id": format!("ctc_{id}"), "call_id": format!("call_{id}"),
                    "name": call.name, "input": input, "status": "completed",
                }),
            }
        })
        .chain(text.map(|text| {
            json!({
                "type": "message", "id": format!("msg_stet_{number}"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            })
        }))
        .collect();
    let whole = |status: &str, output: Value, usage: Value| {
        json!({
            "id": format!("resp_stet_{number}"), "object": "response", "created_at": 0,
            "status": status, "model": model, "output": output, "usage": usage,
            "parallel_tool_calls": calls.len() > 1, "tools": body.get("tools").cloned().unwrap_or(json!([])),
        })
    };
    let body_reply = whole("completed", json!(items), usage.clone());
    let mut events = vec![
        json!({"type": "response.created", "response": whole("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.in_progress", "response": whole("in_progress", json!([]), Value::Null)}),
    ];
    for (index, item) in items.iter().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("function_call") => {
                added["arguments"] = json!("");
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let arguments = item["arguments"].as_str().unwrap_or_default();
                for piece in pieces(arguments) {
                    events.push(json!({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": index, "arguments": arguments}));
            }
            Some("custom_tool_call") => {
                added["input"] = json!("");
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let input = item["input"].as_str().unwrap_or_default();
                for piece in pieces(input) {
                    events.push(json!({"type": "response.custom_tool_call_input.delta", "item_id": item["id"], "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.custom_tool_call_input.done", "item_id": item["id"], "output_index": index, "input": input}));
            }
            _ => {
                added["content"] = json!([]);
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let part = json!({"type": "output_text", "text": "", "annotations": []});
                events.push(json!({"type": "response.content_part.added", "item_id": item["id"], "output_index": index, "content_index": 0, "part": part}));
                let text = item["content"][0]["text"].as_str().unwrap_or_default();
                for piece in pieces(text) {
                    events.push(json!({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.output_text.done", "item_id": item["id"], "output_index": index, "content_index": 0, "text": text}));
                events.push(json!({"type": "response.content_part.done", "item_id": item["id"], "output_index": index, "content_index": 0, "part": item["content"][0]}));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": body_reply}));
    let events = events
        .into_iter()
        .enumerate()
        .map(|(sequence, mut event)| {
            event["sequence_number"] = json!(sequence);
            (kind(&event), event.to_string())
        })
        .collect();
    TurnReply {
        usage: SentUsage {
            path: "/v1/responses".to_owned(),
            model,
            input_tokens: input,
            output_tokens: output,
            cached_tokens: cached,
            ..SentUsage::default()
        },
        body: body_reply,
        events,
    }
}

/// The Messages reply to `body` on `turn`.
pub(super) fn message(
    body: &Value,
    turn: &Turn,
    number: u64,
    request_bytes: usize,
    raw: &[u8],
) -> TurnReply {
    let model = model_name(body).to_owned();
    let position = tool_outputs(body);
    let (calls, text) = match turn {
        Turn::Calls(calls) => (calls.as_slice(), None),
        Turn::Text(text) => (&[][..], Some(text.as_str())),
        Turn::Hold => (&[][..], None),
    };
    let total = input_tokens(request_bytes);
    // A request that marks a cache breakpoint writes the pretend system prompt to the cache on its
    // conversation's first turn (for an hour when it asks `"ttl":"1h"`) and reads it after.
    let marks = |needle: &[u8]| raw.windows(needle.len()).any(|window| window == needle);
    let caching = marks(b"\"cache_control\"");
    let hour = marks(b"\"ttl\":\"1h\"");
    let (read, write_5m, write_1h) = match (caching, position, hour) {
        (false, _, _) => (0, 0, 0),
        (true, 0, false) => (0, PROMPT_TOKEN_BASE, 0),
        (true, 0, true) => (0, 0, PROMPT_TOKEN_BASE),
        (true, _, _) => (PROMPT_TOKEN_BASE, 0, 0),
    };
    let uncached = total - read - write_5m - write_1h;
    let output = output_tokens(calls, text);
    let start_usage = json!({
        "input_tokens": uncached,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
        "output_tokens": 1,
        "service_tier": "standard",
    });
    let mut usage = start_usage.clone();
    usage["output_tokens"] = json!(output);
    let blocks: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let input = match &call.input {
                CallInput::Json(value) => value.clone(),
                CallInput::Text(text) => json!({"input": text}),
            };
            json!({"type": "tool_use", "id": format!("toolu_stet_{number}_{index}"), "name": call.name, "input": input})
        })
        .chain(text.map(|text| json!({"type": "text", "text": text})))
        .collect();
    let stop_reason = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    let id = format!("msg_stet_{number}");
    let body_reply = json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": blocks,
        "stop_reason": stop_reason, "stop_sequence": null, "usage": usage,
    });
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": start_usage,
    }})];
    for (index, block) in blocks.iter().enumerate() {
        if block["type"] == "tool_use" {
            let mut start = block.clone();
            start["input"] = json!({});
            events.push(
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            );
            for piece in pieces(&block["input"].to_string()) {
                events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}));
            }
        } else {
            events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}));
            for piece in pieces(block["text"].as_str().unwrap_or_default()) {
                events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}));
            }
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output}}));
    events.push(json!({"type": "message_stop"}));
    TurnReply {
        usage: SentUsage {
            path: "/v1/messages".to_owned(),
            model,
            input_tokens: total,
            output_tokens: output,
            cached_tokens: read,
            cache_write_5m: write_5m,
            cache_write_1h: write_1h,
        },
        body: body_reply,
        events: events
            .into_iter()
            .map(|event| (kind(&event), event.to_string()))
            .collect(),
    }
}

fn kind(event: &Value) -> String {
    event["type"].as_str().unwrap_or_default().to_owned()
}
