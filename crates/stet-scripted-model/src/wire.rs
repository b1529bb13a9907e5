//! The replies of the Responses API and of Anthropic's Messages API, plain and streamed, in the shape
//! the real APIs send them, so that real clients (the Codex CLI, Claude Code) run a turn against the
//! scripted model and the gateway's meter reads what it would read from the provider.

use serde_json::{Value, json};

use super::{Reply, STREAM_PIECES, content_text, last_user_text, model_name};

/// The question of a Responses request: its `input` text, or its last user item's.
fn response_reply(body: &Value, number: u64, request_bytes: usize) -> Reply {
    let question = match body.get("input") {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(items)) => last_user_text(items),
        _ => None,
    };
    let limit = body.get("max_output_tokens").and_then(Value::as_u64);
    Reply::to(question, limit, number, request_bytes)
}

/// The `usage` of a Responses reply.
fn response_usage(reply: &Reply) -> Value {
    json!({
        "input_tokens": reply.prompt_tokens,
        "output_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens_details": { "reasoning_tokens": 0 },
    })
}

/// The message item of a Responses reply, holding `text`.
fn output_message(number: u64, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg-stet-{number}"),
        "role": "assistant",
        "status": status,
        "content": [{ "type": "output_text", "text": text, "annotations": [] }],
    })
}

/// The calls a Responses reply says the provider ran for the request's provider-executed tools:
/// `per_tool` for each such tool it enables (`web_search*`, `mcp`, `file_search`,
/// `code_interpreter`, `image_generation`), at most its `max_tool_calls` in all, each an output
/// item in the shape OpenAI sends, completed.
fn provider_calls(body: &Value, number: u64, per_tool: u64) -> Vec<Value> {
    let status = "completed";
    let most = body
        .get("max_tool_calls")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX);
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut calls = Vec::new();
    for tool in tools {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
        for _ in 0..per_tool {
            if calls.len() as u64 >= most {
                return calls;
            }
            let id = format!("stet-{number}-{}", calls.len());
            let call = match kind {
                kind if kind.starts_with("web_search") => json!({
                    "type": "web_search_call", "id": format!("ws_{id}"), "status": status,
                    "action": { "type": "search", "query": "scripted search" },
                }),
                "mcp" => json!({
                    "type": "mcp_call", "id": format!("mcp_{id}"), "status": status,
                    "server_label": tool.get("server_label").cloned().unwrap_or_default(),
                    "name": "scripted_tool", "arguments": "{}", "output": "", "error": null,
                }),
                "file_search" => json!({
                    "type": "file_search_call", "id": format!("fs_{id}"), "status": status,
                    "queries": ["scripted search"], "results": null,
                }),
                "code_interpreter" => json!({
                    "type": "code_interpreter_call", "id": format!("ci_{id}"), "status": status,
                    "code": "", "container_id": "cntr_stet", "outputs": null,
                }),
                "image_generation" => json!({
                    "type": "image_generation_call", "id": format!("ig_{id}"), "status": status,
                    "result": null,
                }),
                _ => break,
            };
            calls.push(call);
        }
    }
    calls
}

/// A whole Responses reply: `status`, its output (the provider's tool calls, then the message)
/// and usage.
fn response_object(body: &Value, number: u64, reply: &Reply, status: &str, per_tool: u64) -> Value {
    let mut output = provider_calls(body, number, per_tool);
    output.push(output_message(number, &reply.text, "completed"));
    let mut answer = json!({
        "id": format!("resp-stet-{number}"),
        "object": "response",
        "created_at": 0,
        "model": model_name(body),
        "status": status,
        "output": output,
        "usage": response_usage(reply),
    });
    if reply.truncated {
        answer["status"] = json!("incomplete");
        answer["incomplete_details"] = json!({ "reason": "max_output_tokens" });
    }
    answer
}

/// The reply to a plain `POST /v1/responses`, making `per_tool` calls of each provider tool.
pub(super) fn response(body: &Value, number: u64, request_bytes: usize, per_tool: u64) -> Value {
    let reply = response_reply(body, number, request_bytes);
    response_object(body, number, &reply, "completed", per_tool)
}

/// The `(event, data)` pairs of a streamed `POST /v1/responses`: `response.created`, each provider
/// tool call (`response.output_item.added`, its progress event, `response.output_item.done`), the
/// message item and its text in pieces, then `response.completed` (or `response.incomplete`, when
/// the output limit cut it) carrying the whole response and its usage. Each event's `data` names
/// its `type` and a `sequence_number`, as OpenAI's do.
pub(super) fn response_events(
    body: &Value,
    number: u64,
    request_bytes: usize,
    per_tool: u64,
) -> Vec<(String, String)> {
    let reply = response_reply(body, number, request_bytes);
    let mut started = response_object(body, number, &reply, "in_progress", per_tool);
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let item_id = format!("msg-stet-{number}");
    let mut events = vec![
        json!({ "type": "response.created", "response": started.clone() }),
        json!({ "type": "response.in_progress", "response": started }),
    ];
    let calls = provider_calls(body, number, per_tool);
    let message_index = calls.len();
    for (index, call) in calls.into_iter().enumerate() {
        let kind = call["type"].as_str().unwrap_or_default().to_owned();
        let mut added = call.clone();
        added["status"] = json!("in_progress");
        events.extend([
            json!({ "type": "response.output_item.added", "output_index": index, "item": added }),
            json!({
                "type": format!("response.{kind}.completed"),
                "output_index": index, "item_id": call["id"],
            }),
            json!({ "type": "response.output_item.done", "output_index": index, "item": call }),
        ]);
    }
    events.extend([
        json!({
            "type": "response.output_item.added",
            "output_index": message_index,
            "item": {
                "type": "message", "id": item_id, "role": "assistant",
                "status": "in_progress", "content": [],
            },
        }),
        json!({
            "type": "response.content_part.added",
            "item_id": item_id, "output_index": message_index, "content_index": 0,
            "part": { "type": "output_text", "text": "", "annotations": [] },
        }),
    ]);
    for piece in pieces(&reply.text) {
        events.push(json!({
            "type": "response.output_text.delta",
            "item_id": item_id, "output_index": message_index, "content_index": 0, "delta": piece,
        }));
    }
    let done = response_object(body, number, &reply, "completed", per_tool);
    let last = if reply.truncated {
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.extend([
        json!({
            "type": "response.output_text.done",
            "item_id": item_id, "output_index": message_index, "content_index": 0, "text": reply.text,
        }),
        json!({
            "type": "response.content_part.done",
            "item_id": item_id, "output_index": message_index, "content_index": 0,
            "part": { "type": "output_text", "text": reply.text, "annotations": [] },
        }),
        json!({
            "type": "response.output_item.done",
            "output_index": message_index,
            "item": output_message(number, &reply.text, "completed"),
        }),
        json!({ "type": last, "response": done }),
    ]);
    numbered(events)
}

/// The question of a Messages request: its last user message's text.
fn message_reply(body: &Value, number: u64, request_bytes: usize) -> Reply {
    let question = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| {
            messages
                .iter()
                .rev()
                .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|message| message.get("content"))
        .and_then(content_text);
    let limit = body.get("max_tokens").and_then(Value::as_u64);
    Reply::to(question, limit, number, request_bytes)
}

fn stop_reason(reply: &Reply) -> &'static str {
    if reply.truncated {
        "max_tokens"
    } else {
        "end_turn"
    }
}

fn message_usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

/// The reply to a plain `POST /v1/messages`, in Anthropic's shape.
pub(super) fn message(body: &Value, number: u64, request_bytes: usize) -> Value {
    let reply = message_reply(body, number, request_bytes);
    json!({
        "id": format!("msg_stet_{number}"),
        "type": "message",
        "role": "assistant",
        "model": model_name(body),
        "content": [{ "type": "text", "text": reply.text }],
        "stop_reason": stop_reason(&reply),
        "stop_sequence": null,
        "usage": message_usage(reply.prompt_tokens, reply.completion_tokens),
    })
}

/// The `(event, data)` pairs of a streamed `POST /v1/messages`: `message_start` (with the input
/// tokens), a text block in pieces, then `message_delta` (the stop reason and the output tokens)
/// and `message_stop`, as Anthropic sends them.
pub(super) fn message_events(
    body: &Value,
    number: u64,
    request_bytes: usize,
) -> Vec<(String, String)> {
    let reply = message_reply(body, number, request_bytes);
    let mut events = vec![
        json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_stet_{number}"),
                "type": "message",
                "role": "assistant",
                "model": model_name(body),
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": message_usage(reply.prompt_tokens, 1),
            },
        }),
        json!({
            "type": "content_block_start",
            "index": 0,
            "content_block": { "type": "text", "text": "" },
        }),
        json!({ "type": "ping" }),
    ];
    for piece in pieces(&reply.text) {
        events.push(json!({
            "type": "content_block_delta",
            "index": 0,
            "delta": { "type": "text_delta", "text": piece },
        }));
    }
    events.extend([
        json!({ "type": "content_block_stop", "index": 0 }),
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(&reply), "stop_sequence": null },
            "usage": { "output_tokens": reply.completion_tokens },
        }),
        json!({ "type": "message_stop" }),
    ]);
    events
        .into_iter()
        .map(|event| (kind(&event), event.to_string()))
        .collect()
}

/// `text` in at most [`STREAM_PIECES`] pieces (one, when it is empty).
fn pieces(text: &str) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    let piece = characters.len().div_ceil(STREAM_PIECES).max(1);
    let mut pieces: Vec<String> = characters
        .chunks(piece)
        .map(|piece| piece.iter().collect())
        .collect();
    if pieces.is_empty() {
        pieces.push(String::new());
    }
    pieces
}

/// An event's `type`, which names it.
fn kind(event: &Value) -> String {
    event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Responses events with their `sequence_number`s, as `(event, data)` pairs.
fn numbered(events: Vec<Value>) -> Vec<(String, String)> {
    events
        .into_iter()
        .enumerate()
        .map(|(sequence, mut event)| {
            event["sequence_number"] = json!(sequence);
            (kind(&event), event.to_string())
        })
        .collect()
}
