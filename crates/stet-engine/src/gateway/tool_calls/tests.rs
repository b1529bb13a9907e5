//! Unit tests of `crate::gateway::tool_calls`.

use super::*;

fn enabled(name: &str, price_usd: f64) -> ProviderCall {
    ProviderCall {
        name: name.to_owned(),
        price_usd,
        host: None,
    }
}

fn reported(calls: &[(&str, u64)]) -> BTreeMap<String, u64> {
    calls
        .iter()
        .map(|(kind, count)| ((*kind).to_owned(), *count))
        .collect()
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn a_request_without_provider_tools_has_no_bill() {
    assert_eq!(ToolBill::of(WireApi::Responses, &[], Some(3)), None);
}

#[test]
fn responses_tools_reserve_max_tool_calls_at_the_dearest_tool() {
    let tools = [enabled("web_search", 0.01), enabled("mcp", 0.05)];
    let bill = ToolBill::of(WireApi::Responses, &tools, None).unwrap();
    assert_eq!(bill.max_tool_calls(), Some(CALLS_PER_REQUEST));
    assert!(approx(bill.reserved_usd(), CALLS_PER_REQUEST as f64 * 0.05));
    let bill = ToolBill::of(WireApi::Responses, &tools, Some(2)).unwrap();
    assert_eq!(bill.max_tool_calls(), Some(2));
    assert!(approx(bill.reserved_usd(), 0.10));
    let bill = ToolBill::of(WireApi::Responses, &tools, Some(0)).unwrap();
    assert_eq!(bill.reserved_usd(), 0.0);
}

#[test]
fn each_reported_call_is_charged_at_its_tools_price() {
    let tools = [enabled("web_search_preview", 0.01), enabled("mcp", 0.05)];
    let bill = ToolBill::of(WireApi::Responses, &tools, None).unwrap();
    let charged = bill.charged_usd(&reported(&[("web_search_call", 3), ("mcp_call", 2)]));
    assert!(approx(charged, 0.03 + 0.10), "{charged}");
    assert_eq!(bill.charged_usd(&BTreeMap::new()), 0.0);
    // A call no enabled tool names counts at the dearest.
    let charged = bill.charged_usd(&reported(&[("code_interpreter_call", 1)]));
    assert!(approx(charged, 0.05), "{charged}");
}

#[test]
fn fields_and_chat_tools_are_one_call_per_request() {
    let bill = ToolBill::of(
        WireApi::ChatCompletions,
        &[
            enabled("web_search_options", 0.02),
            enabled("web_search", 0.03),
        ],
        Some(50),
    )
    .unwrap();
    assert_eq!(bill.max_tool_calls(), None);
    assert!(approx(bill.reserved_usd(), 0.05));
    assert!(approx(bill.charged_usd(&BTreeMap::new()), 0.05));
    let bill = ToolBill::of(WireApi::Responses, &[enabled("plugins", 0.04)], None).unwrap();
    assert_eq!(bill.max_tool_calls(), None);
    assert!(approx(bill.reserved_usd(), 0.04));
}

#[test]
fn client_calls_are_not_provider_calls() {
    for kind in [
        "web_search_call",
        "mcp_call",
        "file_search_call",
        "image_generation_call",
    ] {
        assert!(is_provider_call(kind), "{kind}");
    }
    for kind in [
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "message",
        "mcp_list_tools",
    ] {
        assert!(!is_provider_call(kind), "{kind}");
    }
}
