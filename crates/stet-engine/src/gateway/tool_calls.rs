//! What the provider-executed tools a request enables (`[model] provider_tools`) may cost it, and
//! what they did cost: the price of every call stet lets the provider make is reserved on the
//! ledger before the request is forwarded, and each call the answer reports is charged. A pure
//! core, tested on its own.
//!
//! How many calls a request reserves: on Responses, the API's own bound, `max_tool_calls` (the
//! most built-in tool calls one response may make, across its tools), as the request sets it, or
//! [`CALLS_PER_REQUEST`], which the request is then sent with. Each is reserved at the dearest
//! enabled tool of the request, and each call item of the answer (`web_search_call`,
//! `mcp_call`, …) is charged at its tool's price. A top-level field (`web_search_options`, a
//! router's `plugins`), and on Chat Completions a tool, is one call per request, reserved and
//! charged whatever the answer shows.

use std::collections::BTreeMap;

use super::policy::{ProviderCall, WireApi};

/// The `max_tool_calls` a Responses request enabling provider tools is sent with when it sets none.
pub const CALLS_PER_REQUEST: u64 = 8;

/// The item types of a Responses answer that are calls the client runs, not the provider.
const CLIENT_CALLS: &[&str] = &[
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "computer_call",
    "shell_call",
    "apply_patch_call",
];

/// Whether a Responses output item of type `kind` is a call the provider ran (and bills).
pub fn is_provider_call(kind: &str) -> bool {
    kind.ends_with("_call") && !CLIENT_CALLS.contains(&kind)
}

/// The provider-tool charges of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolBill {
    /// What is charged once per request: enabled fields, and tools on Chat Completions.
    per_request_usd: f64,
    /// Responses tools enabled by type, with their price per call.
    per_call: Vec<(String, f64)>,
    /// How many per-call tool calls are reserved.
    calls: u64,
}

impl ToolBill {
    /// The bill of a request on `api` whose policy check found `enabled`; `asked_calls` is the
    /// request's own `max_tool_calls`. `None` when it enables no provider tool.
    pub fn of(
        api: WireApi,
        enabled: &[ProviderCall],
        asked_calls: Option<u64>,
    ) -> Option<ToolBill> {
        if enabled.is_empty() {
            return None;
        }
        let mut per_request_usd = 0.0;
        let mut per_call = Vec::new();
        for call in enabled {
            let price = price(call.price_usd);
            if api == WireApi::Responses && !is_field(&call.name) {
                per_call.push((call.name.clone(), price));
            } else {
                per_request_usd += price;
            }
        }
        let calls = if per_call.is_empty() {
            0
        } else {
            asked_calls.unwrap_or(CALLS_PER_REQUEST)
        };
        Some(ToolBill {
            per_request_usd,
            per_call,
            calls,
        })
    }

    /// The `max_tool_calls` the request must be sent with, when its tools are billed per call.
    pub fn max_tool_calls(&self) -> Option<u64> {
        (!self.per_call.is_empty()).then_some(self.calls)
    }

    /// What the request reserves for its tools.
    pub fn reserved_usd(&self) -> f64 {
        self.per_request_usd + self.calls as f64 * self.dearest()
    }

    /// What an answer that reports `calls` (provider call item types and how many of each) is
    /// charged for its tools. A call of a type no enabled tool names counts at the dearest one.
    pub fn charged_usd(&self, calls: &BTreeMap<String, u64>) -> f64 {
        let per_call: f64 = calls
            .iter()
            .map(|(kind, count)| *count as f64 * self.price_of(kind))
            .sum();
        self.per_request_usd + per_call
    }

    /// The price of a call item of type `kind` (`web_search_call` is a call of `web_search`,
    /// `web_search_preview` or a dated `web_search_2025_08_26`).
    fn price_of(&self, kind: &str) -> f64 {
        let tool = kind.strip_suffix("_call").unwrap_or(kind);
        self.per_call
            .iter()
            .filter(|(name, _)| name.starts_with(tool))
            .map(|(_, price)| *price)
            .reduce(f64::max)
            .unwrap_or_else(|| self.dearest())
    }

    fn dearest(&self) -> f64 {
        self.per_call
            .iter()
            .map(|(_, price)| *price)
            .fold(0.0, f64::max)
    }
}

/// Top-level fields the policy can enable (its tools are enabled by `type`).
fn is_field(name: &str) -> bool {
    matches!(
        name,
        "web_search_options" | "plugins" | "mcp_servers" | "container"
    )
}

/// A configured price as charged: never negative (the configuration refuses one that is not a
/// finite, non-negative figure).
fn price(usd: f64) -> f64 {
    usd.max(0.0)
}

#[cfg(test)]
mod tests;
