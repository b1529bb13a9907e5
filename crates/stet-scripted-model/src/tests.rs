//! Unit tests of the scripted model server, in a file of their own so the crate root reads as code.

use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::*;
use crate::conversation::{MAX_CONVERSATIONS, MAX_USER_BYTES};

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A bearer token made up now, so that no secret-looking value is written in the repository.
fn fresh_key() -> String {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).unwrap();
    let hex: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("test-{hex}")
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: std::result::Result<Bytes, String>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(self.body.as_ref().unwrap()).unwrap()
    }
    fn text(&self) -> String {
        String::from_utf8(self.body.clone().unwrap().to_vec()).unwrap()
    }
}

async fn send(model: &ScriptedModel, method: Method, path: &str, body: Option<Value>) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", model.address()));
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Full::new(Bytes::from(
            body.map(|body| body.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let response = client().request(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|error| error.to_string());
    Answer {
        status,
        headers,
        body,
    }
}

async fn chat(model: &ScriptedModel, body: Value) -> Answer {
    send(model, Method::POST, "/v1/chat/completions", Some(body)).await
}

fn question(text: &str) -> Value {
    json!({
        "model": DEMO_MODEL,
        "messages": [
            { "role": "system", "content": "be brief" },
            { "role": "user", "content": "an earlier question" },
            { "role": "assistant", "content": "an answer" },
            { "role": "user", "content": text },
        ],
    })
}

/// The `data:` payloads of an event stream.
fn events(text: &str) -> Vec<String> {
    assert!(text.ends_with("\n\n"), "{text:?}");
    text.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| event.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn chat_completions_answer_deterministically_with_usage() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let long = "Please rename the greeting function and update every caller in the crate.";
    let body = question(long);
    let request_bytes = body.to_string().len() as u64;
    let answer = chat(&model, body.clone()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers[header::CONTENT_TYPE],
        HeaderValue::from_static("application/json")
    );
    assert!(answer.headers.get(COST_HEADER).is_none());
    let reply = answer.json();
    // The question is quoted up to its 60th character, at a word's end.
    let expected =
        "step 1: Please rename the greeting function and update every caller…".to_owned();
    assert_eq!(reply["choices"][0]["message"]["content"], json!(expected));
    assert_eq!(reply["choices"][0]["finish_reason"], json!("stop"));
    assert_eq!(reply["model"], json!(DEMO_MODEL));
    let completion = (expected.len() as u64).div_ceil(4);
    assert_eq!(
        reply["usage"],
        json!({
            "prompt_tokens": request_bytes / 4 + 50,
            "completion_tokens": completion,
            "total_tokens": request_bytes / 4 + 50 + completion,
            "prompt_tokens_details": { "cached_tokens": 0 },
        })
    );
    // The same request again: the same reply but for its number.
    let again = chat(&model, body).await.json();
    assert_eq!(
        again["choices"][0]["message"]["content"],
        json!("step 2: Please rename the greeting function and update every caller…")
    );
    assert_eq!(again["usage"], reply["usage"]);
    model.shutdown().await;
}

#[tokio::test]
async fn every_request_is_recorded_with_its_headers_and_body() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let key = fresh_key();
    let body = question("hi");
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/chat/completions?trace=1", model.base_url()))
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    send(&model, Method::GET, "/v1/models", None).await;
    send(&model, Method::POST, "/v1/nothing", Some(json!("x"))).await;

    let requests = model.requests();
    assert_eq!(
        requests.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        vec!["/v1/chat/completions", "/v1/models", "/v1/nothing"]
    );
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    assert_eq!(requests[0].body, body);
    assert_eq!(requests[0].raw, Bytes::from(body.to_string()));
    assert_eq!(requests[1].body, Value::Null);
    assert_eq!(requests[1].header("authorization"), None);
    assert_eq!(requests[2].body, json!("x"));
    model.shutdown().await;
}

#[tokio::test]
async fn a_streamed_chat_completion_comes_in_chunks_with_usage_when_asked() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut plain = question("stream this answer to me please");
    plain["stream"] = json!(true);
    let mut with_usage = plain.clone();
    with_usage["stream_options"] = json!({ "include_usage": true });

    for (number, body) in [(1, plain), (2, with_usage)] {
        let include_usage = number == 2;
        let answer = chat(&model, body.clone()).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.headers[header::CONTENT_TYPE],
            HeaderValue::from_static("text/event-stream")
        );
        let events = events(&answer.text());
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|event| serde_json::from_str(event).unwrap())
            .collect();
        assert!(
            chunks
                .iter()
                .all(|chunk| chunk["object"] == json!("chat.completion.chunk"))
        );
        let content: String = chunks
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        let expected = format!("step {number}: stream this answer to me please");
        assert_eq!(content, expected);
        let pieces = chunks
            .iter()
            .filter(|chunk| chunk["choices"][0]["delta"]["content"].is_string())
            .count();
        assert_eq!(pieces, 3);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], json!("assistant"));
        let usage: Vec<&Value> = chunks
            .iter()
            .filter(|chunk| chunk["usage"].is_object())
            .map(|chunk| &chunk["usage"])
            .collect();
        if include_usage {
            assert_eq!(usage.len(), 1);
            let last = chunks.last().unwrap();
            assert_eq!(last["choices"], json!([]));
            let request_bytes = body.to_string().len() as u64;
            assert_eq!(
                last["usage"]["prompt_tokens"],
                json!(request_bytes / 4 + 50)
            );
            assert_eq!(
                last["usage"]["completion_tokens"],
                json!((expected.len() as u64).div_ceil(4))
            );
            assert_eq!(
                chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
                json!("stop")
            );
        } else {
            assert!(usage.is_empty(), "{events:?}");
            assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none()));
            assert_eq!(
                chunks.last().unwrap()["choices"][0]["finish_reason"],
                json!("stop")
            );
        }
    }
    model.shutdown().await;
}

#[tokio::test]
async fn the_output_token_limit_cuts_the_reply() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut body = question("a question long enough to need more than two tokens");
    body["max_tokens"] = json!(2);
    let reply = chat(&model, body).await.json();
    assert_eq!(reply["choices"][0]["message"]["content"], json!("step 1: "));
    assert_eq!(reply["choices"][0]["finish_reason"], json!("length"));
    assert_eq!(reply["usage"]["completion_tokens"], json!(2));
    let reply = send(
        &model,
        Method::POST,
        "/v1/responses",
        Some(json!({ "model": "m", "input": "another question", "max_output_tokens": 1 })),
    )
    .await
    .json();
    assert_eq!(reply["output"][0]["content"][0]["text"], json!("step"));
    assert_eq!(reply["status"], json!("incomplete"));
    assert_eq!(reply["usage"]["output_tokens"], json!(1));
    model.shutdown().await;
}

#[tokio::test]
async fn responses_answer_with_output_text_and_usage() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let by_string = json!({ "model": "other-model", "input": "what is two and two" });
    let by_items = json!({
        "model": DEMO_MODEL,
        "input": [
            { "role": "user", "content": [{ "type": "input_text", "text": "first" }] },
            { "role": "user", "content": [{ "type": "input_text", "text": "second" }] },
        ],
    });
    let reply = send(
        &model,
        Method::POST,
        "/v1/responses",
        Some(by_string.clone()),
    )
    .await
    .json();
    assert_eq!(
        reply["output"][0]["content"][0]["text"],
        json!("step 1: what is two and two")
    );
    assert_eq!(reply["model"], json!("other-model"));
    let request_bytes = by_string.to_string().len() as u64;
    assert_eq!(
        reply["usage"]["input_tokens"],
        json!(request_bytes / 4 + 50)
    );
    assert_eq!(
        reply["usage"]["output_tokens"],
        json!(("step 1: what is two and two".len() as u64).div_ceil(4))
    );
    let reply = send(&model, Method::POST, "/v1/responses", Some(by_items))
        .await
        .json();
    assert_eq!(
        reply["output"][0]["content"][0]["text"],
        json!("step 2: second")
    );
    model.shutdown().await;
}

/// The `(event, data)` pairs of a named event stream.
fn named_events(text: &str) -> Vec<(String, Value)> {
    assert!(text.ends_with("\n\n"), "{text:?}");
    text.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let (name, data) = event.split_once('\n').unwrap();
            (
                name.strip_prefix("event: ").unwrap().to_owned(),
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_response_sends_the_events_of_the_responses_api() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let body = json!({
        "model": DEMO_MODEL,
        "stream": true,
        "input": [{ "role": "user", "content": [{ "type": "input_text", "text": "stream me a reply" }] }],
    });
    let answer = send(&model, Method::POST, "/v1/responses", Some(body.clone())).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers[header::CONTENT_TYPE],
        HeaderValue::from_static("text/event-stream")
    );
    let events = named_events(&answer.text());
    for (sequence, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], json!(name));
        assert_eq!(data["sequence_number"], json!(sequence));
    }
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[0], "response.created");
    assert_eq!(names.last(), Some(&"response.completed"));
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "response.output_text.delta")
        .map(|(_, data)| data["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "step 1: stream me a reply");
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["status"], json!("completed"));
    assert_eq!(done["output"][0]["content"][0]["text"], json!(deltas));
    let request_bytes = body.to_string().len() as u64;
    assert_eq!(done["usage"]["input_tokens"], json!(request_bytes / 4 + 50));
    assert_eq!(
        done["usage"]["output_tokens"],
        json!((deltas.len() as u64).div_ceil(4))
    );
    model.shutdown().await;
}

#[tokio::test]
async fn a_streamed_response_reports_its_provider_tool_calls_item_by_item() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    model.set_tool_calls(2);
    let body = json!({
        "model": DEMO_MODEL,
        "stream": true,
        "input": "search",
        "max_tool_calls": 3,
        "tools": [
            { "type": "web_search_preview" },
            { "type": "function", "name": "f", "parameters": {} },
            { "type": "mcp", "server_label": "notes", "server_url": "https://mcp.example.test/" },
        ],
    });
    let answer = send(&model, Method::POST, "/v1/responses", Some(body)).await;
    let events = named_events(&answer.text());
    let done_items: Vec<(u64, String)> = events
        .iter()
        .filter(|(name, _)| name == "response.output_item.done")
        .map(|(_, data)| {
            (
                data["output_index"].as_u64().unwrap(),
                data["item"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // Two searches, then one MCP call: `max_tool_calls` bounds them all; the message comes last.
    assert_eq!(
        done_items,
        [
            (0, "web_search_call".to_owned()),
            (1, "web_search_call".to_owned()),
            (2, "mcp_call".to_owned()),
            (3, "message".to_owned()),
        ]
    );
    assert!(
        events
            .iter()
            .any(|(name, _)| name == "response.web_search_call.completed")
    );
    let output = &events.last().unwrap().1["response"]["output"];
    let kinds: Vec<&str> = output
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["web_search_call", "web_search_call", "mcp_call", "message"]
    );
    assert_eq!(output[2]["server_label"], json!("notes"));
    model.shutdown().await;
}

#[tokio::test]
async fn messages_answer_in_anthropic_shape_plain_and_streamed() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let body = json!({
        "model": "claude-scripted",
        "max_tokens": 1000,
        "system": [{ "type": "text", "text": "be brief" }],
        "messages": [
            { "role": "user", "content": "an earlier question" },
            { "role": "assistant", "content": [{ "type": "text", "text": "an answer" }] },
            { "role": "user", "content": [{ "type": "text", "text": "what now" }] },
        ],
    });
    let request_bytes = body.to_string().len() as u64;
    let plain = send(&model, Method::POST, "/v1/messages", Some(body.clone())).await;
    assert_eq!(plain.status, StatusCode::OK);
    let reply = plain.json();
    assert_eq!(reply["type"], json!("message"));
    assert_eq!(reply["model"], json!("claude-scripted"));
    assert_eq!(reply["content"][0]["text"], json!("step 1: what now"));
    assert_eq!(reply["stop_reason"], json!("end_turn"));
    assert_eq!(
        reply["usage"]["input_tokens"],
        json!(request_bytes / 4 + 50)
    );

    let mut streamed = body;
    streamed["stream"] = json!(true);
    streamed["max_tokens"] = json!(2);
    let answer = send(&model, Method::POST, "/v1/messages", Some(streamed)).await;
    let events = named_events(&answer.text());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let text: String = events
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "step 2: ");
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], json!("max_tokens"));
    assert_eq!(delta["usage"]["output_tokens"], json!(2));

    model.set_behaviour(Behaviour::ServerError);
    let failed = send(&model, Method::POST, "/v1/messages", Some(json!({}))).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(failed.json()["type"], json!("error"));
    assert!(failed.json()["error"]["message"].is_string());
    model.shutdown().await;
}

#[tokio::test]
async fn models_lists_the_demo_model_and_other_paths_are_not_found() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let answer = send(&model, Method::GET, "/v1/models", None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["data"][0]["id"], json!(DEMO_MODEL));
    for path in ["/v1/embeddings", "/", "/v1/models/extra"] {
        let answer = send(&model, Method::GET, path, None).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert!(answer.json()["error"]["message"].is_string());
    }
    let answer = send(&model, Method::GET, "/v1/chat/completions", None).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    model.shutdown().await;
}

#[tokio::test]
async fn the_cost_header_is_sent_only_when_set() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    model.set_cost_header(Some(0.0125));
    let answer = chat(&model, question("cost?")).await;
    assert_eq!(
        answer.headers[COST_HEADER],
        HeaderValue::from_static("0.0125")
    );
    let mut streamed = question("cost?");
    streamed["stream"] = json!(true);
    let answer = chat(&model, streamed).await;
    assert_eq!(
        answer.headers[COST_HEADER],
        HeaderValue::from_static("0.0125")
    );
    model.set_cost_header(None);
    let answer = chat(&model, question("cost?")).await;
    assert!(answer.headers.get(COST_HEADER).is_none());
    model.shutdown().await;
}

#[tokio::test]
async fn misbehaviours_answer_as_told_until_changed() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut streamed = question("x");
    streamed["stream"] = json!(true);

    model.set_behaviour(Behaviour::TooManyRequests {
        retry_after_secs: 7,
    });
    for _ in 0..2 {
        let answer = chat(&model, question("x")).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.headers[header::RETRY_AFTER], HeaderValue::from(7u64));
        assert!(answer.json()["error"]["message"].is_string());
    }

    model.set_behaviour(Behaviour::ServerError);
    let answer = chat(&model, question("x")).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(answer.json()["error"]["message"].is_string());

    model.set_behaviour(Behaviour::MalformedJson);
    let answer = chat(&model, question("x")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(serde_json::from_slice::<Value>(answer.body.as_ref().unwrap()).is_err());
    let answer = chat(&model, streamed.clone()).await;
    let events = events(&answer.text());
    assert!(serde_json::from_str::<Value>(&events[0]).is_err());
    assert_eq!(events.last().unwrap(), "[DONE]");

    model.set_behaviour(Behaviour::CutStream);
    for body in [question("x"), streamed.clone()] {
        let answer = chat(&model, body).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert!(answer.body.is_err(), "the body arrived whole");
    }
    let answer = send(
        &model,
        Method::POST,
        "/v1/responses",
        Some(json!({"input": "x"})),
    )
    .await;
    assert!(answer.body.is_err(), "the body arrived whole");

    model.set_behaviour(Behaviour::Normal);
    let answer = chat(&model, question("x")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.json()["choices"][0]["message"]["content"].is_string());
    model.shutdown().await;
}

#[tokio::test]
async fn a_stalled_model_never_answers_and_still_shuts_down() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    model.set_behaviour(Behaviour::Stall);
    let address = model.address();
    let pending = tokio::spawn(async move {
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{address}/v1/chat/completions"))
            .body(Full::new(Bytes::from(question("x").to_string())))
            .unwrap();
        client().request(request).await
    });
    // The request has arrived once it is recorded; it is then left without an answer.
    while model.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    assert!(!pending.is_finished());
    model.shutdown().await;
    // Shutting down cut the stalled connection: the client sees it closed, not an answer.
    assert!(pending.await.unwrap().is_err());
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = model.address();
    drop(model);
    // The aborted task releases the listener once the runtime has run the abort; until then
    // connections still arrive in its backlog.
    while tokio::net::TcpStream::connect(address).await.is_ok() {
        tokio::task::yield_now().await;
    }
    let refused = tokio::net::TcpStream::connect(address).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[test]
fn a_long_question_is_quoted_to_a_whole_word() {
    let short = "what is two and two";
    assert_eq!(super::quote(short), short);
    let words = "word ".repeat(20);
    let quoted = super::quote(words.trim());
    assert!(quoted.ends_with("word…"), "{quoted}");
    assert!(quoted.chars().count() <= 61, "{quoted}");
    let one_long_word = "x".repeat(100);
    assert_eq!(super::quote(&one_long_word), format!("{}…", "x".repeat(60)));
}

async fn send_with(
    model: &ScriptedModel,
    path: &str,
    headers: &[(&str, String)],
    body: &Value,
) -> Answer {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{}{path}", model.address()))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let response = client()
        .request(
            request
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|error| error.to_string());
    Answer {
        status,
        headers,
        body,
    }
}

fn codex_turn(outputs: usize, stream: bool) -> Value {
    let mut input = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}),
    ];
    for index in 0..outputs {
        input.push(json!({"type": "function_call", "call_id": format!("c{index}"), "name": "shell", "arguments": "{}"}));
        input.push(
            json!({"type": "function_call_output", "call_id": format!("c{index}"), "output": "ok"}),
        );
    }
    json!({"model": "gpt-5-codex", "input": input, "stream": stream, "prompt_cache_key": "thread-1",
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]})
}

fn claude_turn(results: usize, stream: bool) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}),
    ];
    for index in 0..results {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{index}"), "name": "Bash", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{index}"), "content": "ok"}]}));
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "messages": messages, "stream": stream})
}

#[tokio::test]
async fn scripted_turns_answer_the_responses_api_with_tool_calls_streamed_and_not() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let key = fresh_key();
    model.expect_key(&key);
    model.set_turns(vec![
        Turn::call(
            "shell",
            json!({"command": ["bash", "-lc", "echo hi > a.txt"]}),
        ),
        Turn::custom(
            "apply_patch",
            "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n",
        ),
        Turn::text("done"),
    ]);
    let auth = [("authorization", format!("Bearer {key}"))];
    // Turn 0, streamed: a function call whose arguments arrive in deltas, usage in response.completed.
    let answer = send_with(&model, "/v1/responses", &auth, &codex_turn(0, true)).await;
    assert_eq!(answer.status, StatusCode::OK);
    let events = named_events(&answer.text());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert!(names.contains(&"response.function_call_arguments.delta"));
    assert_eq!(
        names[names.len() - 2..],
        ["response.output_item.done", "response.completed"]
    );
    let arguments: String = events
        .iter()
        .filter(|(name, _)| name == "response.function_call_arguments.delta")
        .map(|(_, data)| data["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"command": ["bash", "-lc", "echo hi > a.txt"]})
    );
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(completed["output"][0]["type"], "function_call");
    assert_eq!(completed["output"][0]["name"], "shell");
    assert_eq!(
        completed["usage"]["input_tokens_details"]["cached_tokens"],
        0
    );
    // Turn 1, not streamed: the custom tool's input whole; the cache serves the prompt now.
    let answer = send_with(&model, "/v1/responses", &auth, &codex_turn(1, false)).await;
    let reply = answer.json();
    assert_eq!(reply["output"][0]["type"], "custom_tool_call");
    assert!(
        reply["output"][0]["input"]
            .as_str()
            .unwrap()
            .contains("Add File")
    );
    assert_eq!(reply["usage"]["input_tokens_details"]["cached_tokens"], 50);
    // Turn 2: text; past the script: "No more turns.".
    let reply = send_with(&model, "/v1/responses", &auth, &codex_turn(2, false))
        .await
        .json();
    assert_eq!(reply["output"][0]["content"][0]["text"], "done");
    let reply = send_with(&model, "/v1/responses", &auth, &codex_turn(7, false))
        .await
        .json();
    assert_eq!(reply["output"][0]["content"][0]["text"], "No more turns.");
    let sent = model.sent_usage();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[1].cached_tokens, 50);
    assert_eq!(
        sent[0].input_tokens,
        completed["usage"]["input_tokens"].as_u64().unwrap()
    );
    // The placeholder, or the key in Anthropic's header, is refused and counted.
    let placeholder = [("authorization", "Bearer placeholder".to_owned())];
    let refused = send_with(&model, "/v1/responses", &placeholder, &codex_turn(0, false)).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let wrong_header = [("x-api-key", key.clone())];
    let refused = send_with(
        &model,
        "/v1/responses",
        &wrong_header,
        &codex_turn(0, false),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(model.key_mismatches(), 2);
    assert_eq!(model.sent_usage().len(), 4);
    model.shutdown().await;
}

#[tokio::test]
async fn scripted_turns_answer_the_messages_api_with_tool_use_streamed_and_not() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let key = fresh_key();
    model.expect_key(&key);
    model.set_turns(vec![
        Turn::Calls(vec![
            Call {
                name: "Bash".to_owned(),
                input: CallInput::Json(json!({"command": "ls"})),
            },
            Call {
                name: "Read".to_owned(),
                input: CallInput::Json(json!({"file_path": "/workspace/a"})),
            },
        ]),
        Turn::text("all done"),
    ]);
    let headers = [
        ("x-api-key", key.clone()),
        ("anthropic-version", "2023-06-01".to_owned()),
    ];
    let answer = send_with(&model, "/v1/messages", &headers, &claude_turn(0, true)).await;
    assert_eq!(answer.status, StatusCode::OK);
    let events = named_events(&answer.text());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "content_block_start")
        .map(|(_, data)| &data["content_block"])
        .collect();
    assert_eq!(
        starts.len(),
        2,
        "two tool uses in one message: parallel tool use"
    );
    assert!(starts.iter().all(|block| block["type"] == "tool_use"));
    for index in 0..2 {
        let json: String = events
            .iter()
            .filter(|(name, data)| name == "content_block_delta" && data["index"] == index)
            .map(|(_, data)| data["delta"]["partial_json"].as_str().unwrap().to_owned())
            .collect();
        assert!(serde_json::from_str::<Value>(&json).unwrap().is_object());
    }
    let start = &events[0].1["message"]["usage"];
    assert_eq!(start["cache_creation"]["ephemeral_1h_input_tokens"], 50);
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    // One tool result in the conversation: turn 1.
    let reply = send_with(&model, "/v1/messages", &headers, &claude_turn(1, false))
        .await
        .json();
    assert_eq!(reply["content"][0]["text"], "all done");
    assert_eq!(reply["stop_reason"], "end_turn");
    assert_eq!(reply["usage"]["cache_read_input_tokens"], 50);
    let sent = model.sent_usage();
    assert_eq!((sent[0].cache_write_1h, sent[1].cached_tokens), (50, 50));
    // The key as a bearer token, or a placeholder, is refused in Anthropic's shape.
    let bearer = [("authorization", format!("Bearer {key}"))];
    let refused = send_with(&model, "/v1/messages", &bearer, &claude_turn(0, false)).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.json()["type"], "error");
    assert_eq!(model.key_mismatches(), 1);
    model.shutdown().await;
}

/// The text of a Chat Completions reply to `text` asked by `user` (nobody when `None`).
async fn step_of(model: &ScriptedModel, user: Option<&str>, text: &str) -> String {
    let mut body = json!({
        "model": DEMO_MODEL,
        "messages": [{ "role": "user", "content": text }],
    });
    if let Some(user) = user {
        body["user"] = json!(user);
    }
    chat(model, body).await.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn replies_are_numbered_per_named_end_user_and_the_unnamed_share_one_count() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(step_of(&model, Some("run-a"), "a").await, "step 1: a");
    assert_eq!(step_of(&model, Some("run-a"), "a").await, "step 2: a");
    assert_eq!(step_of(&model, Some("run-b"), "b").await, "step 1: b");
    assert_eq!(step_of(&model, None, "n").await, "step 1: n");
    assert_eq!(step_of(&model, Some("run-a"), "a").await, "step 3: a");
    assert_eq!(step_of(&model, None, "n").await, "step 2: n");
    assert_eq!(step_of(&model, Some("run-b"), "b").await, "step 2: b");
    // Anthropic names the end user in `metadata.user_id`.
    let message = json!({
        "model": "claude-scripted",
        "max_tokens": 100,
        "metadata": { "user_id": "run-b" },
        "messages": [{ "role": "user", "content": "m" }],
    });
    let reply = send(&model, Method::POST, "/v1/messages", Some(message))
        .await
        .json();
    assert_eq!(reply["content"][0]["text"], json!("step 3: m"));
    // A name too long to be a key names nobody.
    let long = "x".repeat(MAX_USER_BYTES + 1);
    assert_eq!(step_of(&model, Some(&long), "l").await, "step 3: l");
    model.shutdown().await;
}

#[test]
fn the_turn_is_the_number_of_tool_outputs() {
    assert_eq!(tool_outputs(&codex_turn(3, true)), 3);
    assert_eq!(tool_outputs(&claude_turn(2, true)), 2);
    assert_eq!(tool_outputs(&json!({"input": "just text"})), 0);
}

#[tokio::test]
async fn count_tokens_answers_in_anthropic_shape_with_the_key_checked() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let key = fresh_key();
    model.expect_key(&key);
    let body = claude_turn(0, false);
    let counted = send_with(
        &model,
        "/v1/messages/count_tokens",
        &[("x-api-key", key.clone())],
        &body,
    )
    .await;
    assert_eq!(counted.status, StatusCode::OK);
    assert_eq!(
        counted.json()["input_tokens"],
        json!(body.to_string().len() as u64 / 4 + 50)
    );
    let refused = send_with(
        &model,
        "/v1/messages/count_tokens",
        &[("x-api-key", "placeholder".to_owned())],
        &body,
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.json()["type"], "error");
    assert!(model.sent_usage().is_empty(), "counting tokens is no turn");
    model.shutdown().await;
}

#[test]
fn names_past_the_last_conversation_kept_are_numbered_with_the_unnamed() {
    let mut asked = Asked::default();
    for index in 0..MAX_CONVERSATIONS {
        assert_eq!(asked.next(Some(&format!("run-{index}"))), 1);
    }
    assert_eq!(asked.next(Some("one-too-many")), 1);
    assert_eq!(asked.next(Some("another-too-many")), 2);
    assert_eq!(asked.next(None), 3);
    assert_eq!(asked.next(Some("run-7")), 2);
    assert_eq!(asked.named.len(), MAX_CONVERSATIONS);
}

#[tokio::test]
async fn a_scripted_turn_carries_the_cost_header_and_a_waiting_test_sees_its_request() {
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    model.set_cost_header(Some(0.004));
    model.set_turns(vec![Turn::text("done")]);
    assert!(!model.wait_for_requests(1, std::time::Duration::ZERO));
    let answer = send_with(&model, "/v1/responses", &[], &codex_turn(0, true)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers[COST_HEADER],
        HeaderValue::from_static("0.004")
    );
    assert!(model.wait_for_requests(1, std::time::Duration::ZERO));
    assert_eq!(model.sent_usage().len(), 1);
    model.shutdown().await;
}
