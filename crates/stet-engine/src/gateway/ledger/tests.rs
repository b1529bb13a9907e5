//! Unit tests of `crate::gateway::ledger`, in a file of their own so the module reads as code.

use super::*;

fn priced(input_usd: f64, per_output_token_usd: f64, asked: Option<u64>) -> WorstCase {
    with_tools(input_usd, per_output_token_usd, asked, 0.0)
}

fn with_tools(
    input_usd: f64,
    per_output_token_usd: f64,
    asked: Option<u64>,
    tools_usd: f64,
) -> WorstCase {
    WorstCase::Priced {
        input_usd,
        per_output_token_usd,
        asked_output_tokens: asked,
        tools_usd,
    }
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn without_a_ceiling_everything_is_admitted_and_only_costs_count() {
    let mut ledger = CostLedger::new(None);
    let held = ledger
        .admit(&WorstCase::Unpriced {
            model: "anything".to_owned(),
        })
        .unwrap();
    assert_eq!(
        held,
        Reservation {
            usd: 0.0,
            output_cap: None
        }
    );
    let totals = ledger.settle(held, Some(2.5));
    assert_eq!(totals.settled_usd, 2.5);
    let held = ledger.admit(&priced(1.0, 1.0, None)).unwrap();
    assert_eq!(ledger.settle(held, None).settled_usd, 2.5);
    assert!(!ledger.reached());
}

#[test]
fn a_request_reserves_its_input_and_the_output_the_budget_pays_for() {
    let mut ledger = CostLedger::new(Some(1.0));
    // $0.10 of input, $0.01 per output token: $0.90 left pays for 90 tokens.
    let held = ledger.admit(&priced(0.10, 0.01, None)).unwrap();
    assert_eq!(held.output_cap, Some(90));
    assert!(approx(held.usd, 1.0), "{held:?}");
    // Asking for fewer tokens than that reserves only those, and is capped to them.
    let mut ledger = CostLedger::new(Some(1.0));
    let held = ledger.admit(&priced(0.10, 0.01, Some(20))).unwrap();
    assert_eq!(held.output_cap, Some(20));
    assert!(approx(held.usd, 0.30), "{held:?}");
    // Asking for more is capped.
    let mut ledger = CostLedger::new(Some(1.0));
    let held = ledger.admit(&priced(0.10, 0.01, Some(500))).unwrap();
    assert_eq!(held.output_cap, Some(90));
}

#[test]
fn parallel_requests_cannot_reserve_past_the_ceiling() {
    let mut ledger = CostLedger::new(Some(0.05));
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..150 {
        match ledger.admit(&priced(0.004, 0.0001, Some(10))) {
            Ok(reservation) => held.push(reservation),
            Err(Refusal::Held { .. }) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    // Each holds $0.005: ten fit under $0.05.
    assert_eq!(held.len(), 10);
    assert_eq!(refused, 140);
    assert!(ledger.totals().reserved_usd <= 0.05 + 1e-12);
    // Each response costs the most it could: spend ends at the ceiling and not past it.
    for reservation in held {
        let usd = reservation.usd;
        ledger.settle(reservation, Some(usd));
    }
    let totals = ledger.totals();
    assert!(totals.settled_usd <= 0.05 + 1e-12, "{totals:?}");
    assert_eq!(totals.open, 0);
    assert_eq!(totals.reserved_usd, 0.0);
    assert!(approx(totals.peak_reserved_usd, 0.05), "{totals:?}");
    // With nothing left to wait for, the next request meets the ceiling itself.
    assert!(matches!(
        ledger.admit(&priced(0.004, 0.0001, Some(10))),
        Err(Refusal::Reached { .. })
    ));
}

#[test]
fn an_unknown_cost_counts_the_whole_reservation() {
    let mut ledger = CostLedger::new(Some(1.0));
    let held = ledger.admit(&priced(0.1, 0.01, Some(10))).unwrap();
    let totals = ledger.settle(held, None);
    assert!(approx(totals.settled_usd, 0.2), "{totals:?}");
    let held = ledger.admit(&priced(0.1, 0.01, Some(10))).unwrap();
    let totals = ledger.settle(held, Some(f64::NAN));
    assert!(approx(totals.settled_usd, 0.4), "{totals:?}");
}

#[test]
fn a_request_whose_input_alone_crosses_the_ceiling_is_refused() {
    let mut ledger = CostLedger::new(Some(0.01));
    assert_eq!(
        ledger.admit(&priced(0.02, 0.001, None)),
        Err(Refusal::Reached {
            spent_usd: 0.0,
            ceiling_usd: 0.01,
            needed_usd: 0.021
        })
    );
    // A zero ceiling is reached before anything.
    let mut zero = CostLedger::new(Some(0.0));
    assert!(zero.reached());
    assert!(matches!(
        zero.admit(&priced(0.0, 0.0, None)),
        Err(Refusal::Reached { .. })
    ));
}

#[test]
fn an_unpriced_model_is_refused_until_the_endpoint_reports_cost_then_runs_alone() {
    let unpriced = WorstCase::Unpriced {
        model: "o1-pro".to_owned(),
    };
    let mut ledger = CostLedger::new(Some(1.0));
    assert_eq!(
        ledger.admit(&unpriced),
        Err(Refusal::UnknownPrice {
            model: "o1-pro".to_owned()
        })
    );
    ledger.endpoint_reports_cost();
    let first = ledger.admit(&unpriced).unwrap();
    assert!(approx(first.usd, 1.0));
    // It holds everything left: nothing else runs beside it.
    assert!(matches!(ledger.admit(&unpriced), Err(Refusal::Held { .. })));
    assert!(matches!(
        ledger.admit(&priced(0.0, 0.000001, Some(1))),
        Err(Refusal::Held { .. })
    ));
    let totals = ledger.settle(first, Some(0.25));
    assert!(approx(totals.settled_usd, 0.25));
    assert!(ledger.admit(&unpriced).is_ok());
}

#[test]
fn a_free_model_reserves_its_input_only() {
    let mut ledger = CostLedger::new(Some(1.0));
    let held = ledger.admit(&priced(0.0, 0.0, None)).unwrap();
    assert_eq!(
        held,
        Reservation {
            usd: 0.0,
            output_cap: None
        }
    );
}

#[test]
fn provider_tools_are_reserved_whole_before_the_output_is_sized() {
    // Binary fractions, so that the arithmetic is exact.
    let mut ledger = CostLedger::new(Some(1.0));
    // $0.125 of input, $0.375 of tool calls, $0.25 per output token: $0.50 left pays for 2 tokens.
    let held = ledger.admit(&with_tools(0.125, 0.25, None, 0.375)).unwrap();
    assert_eq!(held.output_cap, Some(2));
    assert_eq!(held.usd, 1.0);
    // Settled with the calls the answer reported, the rest of the hold is released.
    let totals = ledger.settle(held, Some(0.25));
    assert_eq!(totals.settled_usd, 0.25);
    assert_eq!(totals.reserved_usd, 0.0);
}

#[test]
fn a_ceiling_too_small_for_the_tools_refuses_the_request_but_not_the_dispatch() {
    let mut ledger = CostLedger::new(Some(0.5));
    // Without its tools it would fit; with them it does not.
    assert_eq!(
        ledger.admit(&with_tools(0.125, 0.0625, Some(2), 0.75)),
        Err(Refusal::ToolsUnaffordable {
            available_usd: 0.5,
            tools_usd: 0.75,
            needed_usd: 0.9375,
        })
    );
    assert!(!ledger.reached());
    assert_eq!(ledger.totals().open, 0);
    // The same request without tools is admitted.
    let held = ledger.admit(&priced(0.125, 0.0625, Some(2))).unwrap();
    assert_eq!(held.usd, 0.25);
    // While another request holds part of the rest, the refusal is the held one (it may free).
    assert!(matches!(
        ledger.admit(&with_tools(0.0625, 0.0625, Some(1), 0.25)),
        Err(Refusal::Held { .. })
    ));
    // A request that would not fit even without its tools is the ordinary refusal.
    let _ = ledger.settle(held, Some(0.25));
    assert!(matches!(
        ledger.admit(&with_tools(0.5, 0.0625, Some(1), 0.25)),
        Err(Refusal::Reached { .. })
    ));
}
