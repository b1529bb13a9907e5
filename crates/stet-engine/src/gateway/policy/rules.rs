//! What each wire API documents and what real clients send: the top-level fields forwarded, the
//! tool, item and part types a client executes or holds itself, and the fields and types by which
//! the provider acts on the network (or bills a call) for the agent.

use super::WireApi;

/// The top-level fields forwarded on each API. A field not listed is refused by name.
pub(crate) fn fields(api: WireApi) -> &'static [&'static str] {
    match api {
        WireApi::ChatCompletions => CHAT_FIELDS,
        WireApi::Responses => RESPONSES_FIELDS,
        WireApi::Messages => MESSAGES_FIELDS,
    }
}

const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_k",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
];

const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "background",
    "client_metadata",
    "conversation",
    "include",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

const MESSAGES_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "context_management",
    "metadata",
    "output_config",
    "output_format",
    "service_tier",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
];

/// Top-level fields by which the provider works from state the request does not carry (a stored
/// response or conversation) or after its reply (a background response, fetched later on a route
/// the gateway does not serve): refused on every request unless null or false, since neither the
/// ledger's reservation nor the meter could see that work.
pub(super) fn unseen_work_fields(api: WireApi) -> &'static [&'static str] {
    match api {
        WireApi::Responses => &["background", "previous_response_id", "conversation"],
        WireApi::ChatCompletions | WireApi::Messages => &[],
    }
}

/// Top-level fields by which the provider acts for the agent (searches, connects to servers, runs
/// code in a container of its own) or a router adds plug-ins: refused unless the machine
/// configuration enables the field by name with a per-call price.
pub(super) fn provider_fields(api: WireApi) -> &'static [&'static str] {
    match api {
        WireApi::ChatCompletions => &["web_search_options", "plugins"],
        // A stored prompt carries a configuration of its own (tools, MCP servers included) and
        // variables that may be images or files the provider fetches by URL.
        WireApi::Responses => &["plugins", "prompt"],
        WireApi::Messages => &["mcp_servers", "container", "plugins"],
    }
}

/// Tool types the client executes itself. A tool with no `type` is a client tool on Messages only.
pub(crate) fn client_tool(api: WireApi, kind: Option<&str>) -> bool {
    match (api, kind) {
        (WireApi::Messages, None | Some("custom")) => true,
        (WireApi::Messages, Some(kind)) => {
            // Anthropic-defined tools the client runs: bash and the text editor.
            kind.starts_with("bash_20") || kind.starts_with("text_editor_20")
        }
        (WireApi::ChatCompletions, Some(kind)) => matches!(kind, "function" | "custom"),
        (WireApi::Responses, Some(kind)) => {
            matches!(kind, "function" | "custom" | "local_shell" | "namespace")
        }
        (_, None) => false,
    }
}

/// The keys a client tool's object may hold (any of them on any client tool of the API).
pub(super) fn tool_key(api: WireApi, key: &str) -> bool {
    match api {
        WireApi::ChatCompletions => matches!(key, "type" | "function" | "custom"),
        WireApi::Responses => matches!(
            key,
            "type" | "name" | "description" | "parameters" | "strict" | "format" | "tools"
        ),
        WireApi::Messages => matches!(
            key,
            "type"
                | "name"
                | "description"
                | "input_schema"
                | "cache_control"
                | "defer_loading"
                | "strict"
                | "input_examples"
        ),
    }
}

/// `tool_choice` as a string.
pub(super) fn tool_choice_word(api: WireApi, word: &str) -> bool {
    api != WireApi::Messages && matches!(word, "none" | "auto" | "required")
}

/// `tool_choice.type`: choosing a client tool, or letting the model choose among them.
pub(super) fn tool_choice_type(api: WireApi, kind: &str) -> bool {
    match api {
        WireApi::Messages => matches!(kind, "auto" | "any" | "tool" | "none"),
        _ => matches!(
            kind,
            "function" | "custom" | "allowed_tools" | "local_shell"
        ),
    }
}

/// `include` entries: what the provider adds to its reply. Search results, code outputs and file
/// search results exist only when a provider tool ran.
pub(super) fn include_entry(entry: &str) -> bool {
    matches!(
        entry,
        "reasoning.encrypted_content" | "message.output_text.logprobs"
    )
}

/// The `type` of an item of `input` (Responses) or of a message (none have one on Chat and
/// Messages): what the client said or ran; not a provider tool's call or a stored item.
pub(super) fn item_type(api: WireApi, kind: &str) -> bool {
    match api {
        WireApi::Responses => matches!(
            kind,
            "message"
                | "function_call"
                | "function_call_output"
                | "custom_tool_call"
                | "custom_tool_call_output"
                | "local_shell_call"
                | "local_shell_call_output"
                | "reasoning"
        ),
        _ => false,
    }
}

/// The `type` of a content part or block: text, images and files the request carries, tool use
/// and results of client tools, and the model's own reasoning.
pub(super) fn part_type(api: WireApi, kind: &str) -> bool {
    match api {
        WireApi::ChatCompletions => {
            matches!(
                kind,
                "text" | "image_url" | "input_audio" | "file" | "refusal"
            )
        }
        WireApi::Responses => matches!(
            kind,
            "input_text"
                | "output_text"
                | "input_image"
                | "input_file"
                | "input_audio"
                | "refusal"
                | "summary_text"
                | "reasoning_text"
        ),
        WireApi::Messages => matches!(
            kind,
            "text"
                | "image"
                | "document"
                | "tool_use"
                | "tool_result"
                | "thinking"
                | "redacted_thinking"
                | "search_result"
        ),
    }
}

/// The `type` of a Messages image or document `source`: data the request carries.
pub(super) fn source_type(kind: &str) -> bool {
    matches!(kind, "base64" | "text" | "content")
}

/// Keys, inside a content part, whose value is a URL the provider would fetch.
pub(super) fn url_key(key: &str) -> bool {
    matches!(key, "url" | "image_url" | "file_url")
}

/// Keys, inside a content part, whose value is data the request carries or a stored file's id, and
/// which routers read as a URL to fetch when given one (OpenRouter's `file_data`, LiteLLM's
/// `file_id` for Gemini).
pub(super) fn inline_key(key: &str) -> bool {
    matches!(key, "file_data" | "file_id")
}

/// Routing suffixes routers read from a model name to add a plug-in or pick another provider.
pub(super) const ROUTING_SUFFIXES: &[&str] = &[":online", ":nitro", ":floor", ":exacto"];
