//! The ceiling's words: what the agent is answered and what the `Error` event says when the ledger
//! refuses a request, and when a request's cost is counted at its reservation.

use http::StatusCode;

use super::Refusal;
use crate::gateway::reply::{Reply, shown_text};
use crate::gateway::tool_calls::CALLS_PER_REQUEST;

/// Settled spend has reached the ceiling before the request was read: 402, which OpenAI clients do
/// not retry (a ceiling does not lift by waiting).
pub(crate) fn reached(label: &str, spent: f64, ceiling: f64) -> Reply {
    Reply::error(
        StatusCode::PAYMENT_REQUIRED,
        "cost_ceiling_reached",
        format!(
            "stet gateway: the stet cost ceiling of ${ceiling:.4} for this dispatch is reached (${spent:.4} spent); no further model requests are forwarded"
        ),
        format!(
            "{label}: refused, the stet cost ceiling of ${ceiling:.4} is reached (${spent:.4} spent) (402)"
        ),
    )
}

/// Under a ceiling, a request whose cost cannot be bounded before it is sent (`unbounded` says why).
pub(crate) fn unbounded(label: &str, unbounded: &str) -> Reply {
    Reply::error(
        StatusCode::BAD_REQUEST,
        "cost_not_bounded",
        format!(
            "stet gateway: under the stet cost ceiling a request's cost must be bounded before it is sent, and {unbounded}"
        ),
        format!("{label}: refused under the cost ceiling, {unbounded} (400)"),
    )
}

/// The ledger's refusal of a request: 402 when the ceiling leaves too little for it, 429 with
/// `Retry-After` while what is left is held by requests in flight, 400 for a model it cannot price.
pub(crate) fn refusal(label: &str, refusal: Refusal) -> Reply {
    match refusal {
        Refusal::Reached {
            spent_usd,
            ceiling_usd,
            needed_usd,
        } => Reply::error(
            StatusCode::PAYMENT_REQUIRED,
            "cost_ceiling_reached",
            format!(
                "stet gateway: the stet cost ceiling of ${ceiling_usd:.4} for this dispatch is reached (${spent_usd:.4} spent, ${needed_usd:.4} needed for this request at least); no further model requests are forwarded"
            ),
            format!(
                "{label}: refused, the stet cost ceiling of ${ceiling_usd:.4} leaves too little for it (${spent_usd:.4} spent, ${needed_usd:.4} needed at least) (402)"
            ),
        ),
        Refusal::Held {
            reserved_usd,
            available_usd,
            needed_usd,
        } => Reply::retry(
            StatusCode::TOO_MANY_REQUESTS,
            "cost_budget_held",
            format!(
                "stet gateway: what is left under the stet cost ceiling is held by requests in flight (${reserved_usd:.4}); retry when they finish"
            ),
            format!(
                "{label}: held back, requests in flight hold ${reserved_usd:.4} of the cost ceiling and ${available_usd:.4} is free, ${needed_usd:.4} needed (429)"
            ),
        ),
        Refusal::ToolsUnaffordable {
            available_usd,
            tools_usd,
            needed_usd,
        } => Reply::error(
            StatusCode::PAYMENT_REQUIRED,
            "cost_ceiling_too_low_for_tools",
            format!(
                "stet gateway: what is left under the stet cost ceiling (${available_usd:.4}) does not cover the ${tools_usd:.4} reserved for this request's provider-executed tools (their per-call price times `max_tool_calls`, {CALLS_PER_REQUEST} when the request sets none); send it with fewer tool calls or without those tools"
            ),
            format!(
                "{label}: refused, the stet cost ceiling leaves ${available_usd:.4}, too little for the ${tools_usd:.4} its provider tools reserve (${needed_usd:.4} needed at least) (402)"
            ),
        ),
        Refusal::UnknownPrice { model } => {
            let model = shown_text(&model);
            Reply::error(
                StatusCode::BAD_REQUEST,
                "model_not_priced",
                format!(
                    "stet gateway: the model `{model}` has no price in stet's price table and the endpoint reports no cost, so the stet cost ceiling cannot hold it; add [models.\"{model}\"] with input and output prices to the file the `[model] prices` setting names"
                ),
                format!(
                    "{label}: refused, the model `{model}` has no price in stet's price table and the endpoint reports no cost, so the cost ceiling cannot hold it; price it in the file `[model] prices` names (400)"
                ),
            )
        }
    }
}

/// The event line of a request that ended before its response: its reservation counted whole.
pub(crate) fn ended_unsettled(model: &str, counted_usd: f64) -> String {
    format!(
        "a request for `{}` ended before its response; its cost is unknown and counts as the ${counted_usd:.4} it had reserved",
        shown_text(model)
    )
}
