//! The request policy in the running gateway: each way a request could make the provider act for
//! the agent is answered 400 (naming the field) and reported, and the upstream receives none of
//! them; real clients' requests reach it written anew, unchanged in meaning.

use std::collections::BTreeSet;

use futures_util::stream;
use serde_json::json;

use super::*;
use crate::gateway::policy::{RequestPolicy, Rule};

async fn rig_with_policy(policy: RequestPolicy) -> Rig {
    rig_configured(None, Duration::from_secs(20), |config| GatewayConfig {
        policy: Arc::new(policy),
        ..config
    })
    .await
}

fn allowing(models: &[&str]) -> RequestPolicy {
    RequestPolicy {
        models: Some(
            models
                .iter()
                .map(|model| (*model).to_owned())
                .collect::<BTreeSet<_>>(),
        ),
        ..RequestPolicy::default()
    }
}

/// Sends `chunks` as a body of unknown length: HTTP/1.1 chunked transfer encoding.
async fn send_chunked(socket: &Path, path: &str, chunks: Vec<String>) -> (StatusCode, String) {
    let stream_socket = within(UnixStream::connect(socket)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream_socket))
            .await
            .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let frames = stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, Infallible>(Frame::data(Bytes::from(chunk)))),
    );
    let request = Request::builder()
        .method("POST")
        .uri(path)
        .header("host", "127.0.0.1:4000")
        .header("content-type", "application/json")
        .body(StreamBody::new(frames))
        .unwrap();
    let response = within(sender.send_request(request)).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn every_way_out_is_refused_naming_the_field_and_the_upstream_receives_none() {
    let mut rig = rig_with_policy(allowing(&["stet-demo-model"])).await;
    let canary = format!("canary-{}", random_key());
    let mcp = json!({"type": "mcp", "server_label": "c", "server_url": format!("https://x.invalid/c?d={canary}"),
        "headers": {"X-Data": canary}});
    let chat = "/v1/chat/completions";
    let responses = "/v1/responses";
    let cases = [
        (chat, json!({"model": "stet-demo-model", "messages": [], "tools": [mcp]}).to_string(), "tools[0].type", Rule::ProviderTool),
        (chat, json!({"model": "stet-demo-model", "messages": [], "web_search_options": {"user_location": canary}}).to_string(), "web_search_options", Rule::ProviderTool),
        (chat, json!({"model": "stet-demo-model", "messages": [], "plugins": [{"id": "web"}]}).to_string(), "plugins", Rule::Plugin),
        (chat, json!({"model": "stet-demo-model:online", "messages": []}).to_string(), "model", Rule::RoutingSuffix),
        (chat, json!({"model": "o1-pro", "messages": []}).to_string(), "model", Rule::Model),
        (chat, json!({"model": "openrouter/stet-demo-model", "messages": []}).to_string(), "model", Rule::ProviderPrefix),
        (chat, json!({"model": "stet-demo-model", "messages": [], "fallbacks": [canary]}).to_string(), "fallbacks", Rule::Undocumented),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "tools": [mcp]}).to_string(), "tools[0].type", Rule::ProviderTool),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "tools": [{"type": "Web_Search"}]}).to_string(), "tools[0].type", Rule::ProviderTool),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}).to_string(), "tools[0].type", Rule::ProviderTool),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}).to_string(), "tools[0].type", Rule::ProviderTool),
        (responses, format!(r#"{{"model":"stet-demo-model","input":"hi","tools":[],"tools":[{{"type":"MCP","server_url":"https://x.invalid/{canary}"}}]}}"#), "tools", Rule::DuplicateKey),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "tool_choice": {"type": "mcp", "server_label": "c"}}).to_string(), "tool_choice.type", Rule::ProviderTool),
        (responses, json!({"model": "stet-demo-model", "input": "hi", "include": ["web_search_call.action.sources"]}).to_string(), "include[0]", Rule::ProviderTool),
    ];
    for (path, body, field, rule) in cases {
        let (status, _, reply) = call(&rig.socket, "POST", path, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["error"]["param"], Value::from(field), "{body}");
        assert_eq!(reply["error"]["type"], Value::from("invalid_request_error"));
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{message}");
        assert!(!message.contains(&canary), "{message}");
        if let Some(setting) = rule.setting() {
            assert!(message.contains(setting), "{message}");
        }
        match rig.next_event().await {
            GatewayEvent::Refused { refusal } => {
                assert_eq!((refusal.field.as_str(), refusal.rule), (field, rule));
                assert_eq!(refusal.shown, None, "events never carry the value");
            }
            other => panic!("{body}: {other:?}"),
        }
    }

    // The same tool in a chunked body: decoded within the size bound, checked, refused.
    let body = json!({"model": "stet-demo-model", "messages": [], "tools": [mcp]}).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let (status, reply) =
        send_chunked(&rig.socket, chat, vec![first.to_owned(), rest.to_owned()]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    assert!(matches!(
        rig.next_event().await,
        GatewayEvent::Refused { .. }
    ));

    // A compressed body is not decoded: refused before it is read.
    let response = send(
        &rig.socket,
        "POST",
        chat,
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        "\u{1f}\u{8b} not really gzip",
    )
    .await;
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(matches!(rig.next_event().await, GatewayEvent::Error { .. }));

    assert!(
        rig.upstream.requests().is_empty(),
        "the upstream received a refused request"
    );
}

#[tokio::test]
async fn real_clients_requests_reach_the_upstream_written_anew() {
    for (name, model) in [
        ("openhands-1.16-chat-completions.json", "stet-live-model"),
        ("codex-0.163-responses-turn-2.json", "gpt-5-codex"),
    ] {
        let mut rig = rig_with_policy(allowing(&[model])).await;
        let path = format!(
            "{}/../../tests/fixtures/model-requests/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let record: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let sent = serde_json::to_string_pretty(&record["body"]).unwrap();
        rig.upstream
            .reply(ok_json(chat_completion(model, 10, 10, 0)));
        let (status, _, _) =
            call(&rig.socket, "POST", record["path"].as_str().unwrap(), &sent).await;
        assert_eq!(status, StatusCode::OK, "{name}");
        let received = rig.upstream.requests().pop().unwrap();
        assert_ne!(
            received.body,
            Bytes::from(sent.clone()),
            "{name}: the agent's bytes went through"
        );
        let received: Value = serde_json::from_slice(&received.body).unwrap();
        let mut expected = record["body"].clone();
        if expected.get("stream") == Some(&Value::Bool(true))
            && record["path"] == "/v1/chat/completions"
        {
            expected["stream_options"] = json!({"include_usage": true});
        }
        assert_eq!(received, expected, "{name}");
        let _ = rig.next_event().await;
    }
}
