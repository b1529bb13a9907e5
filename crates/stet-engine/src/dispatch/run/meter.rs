//! The dispatch's view of model usage and the ceiling it is held against. With the model gateway,
//! its cost ledger is the one source of spend and what the agent reports of itself only reconciles;
//! without it, the agent's reports are all there is.

use crate::dispatch::error::DispatchError;
use crate::gateway::ledger::Totals;
use crate::gateway::usage::UsageReport;
use stet_protocol::event::Usage;
use stet_sanitize::sanitize::SanitizedText;

/// Model usage so far, and the ceiling it is held against. When the model gateway runs, its cost
/// ledger is the one source of spend: the meter copies its settled total, and what the agent reports
/// of its own usage is kept only to be compared with it at the end.
#[derive(Debug, Default)]
pub(super) struct Meter {
    pub(super) input_tokens: u64,
    pub(super) output_tokens: u64,
    pub(super) cached_tokens: u64,
    pub(super) cost_usd: f64,
    /// The most the gateway's requests in flight held at once.
    pub(super) peak_reserved_usd: f64,
    pub(super) model: Option<SanitizedText>,
    ceiling_usd: Option<f64>,
    /// The gateway meters this dispatch.
    pub(super) gateway: bool,
    /// What the agent reported of its own usage while the gateway metered, added up; `None` until
    /// it reported any.
    agent_reported: Option<Reported>,
}

/// The agent's own usage reports, added up.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Reported {
    tokens: u64,
    /// `None` while no report named a cost (Codex never does).
    cost_usd: Option<f64>,
}

impl Meter {
    /// A meter held against `ceiling_usd`; `gateway`: the model gateway meters the dispatch.
    pub(super) fn new(ceiling_usd: Option<f64>, gateway: bool) -> Meter {
        Meter {
            ceiling_usd,
            gateway,
            ..Meter::default()
        }
    }

    /// One request the gateway settled; the total is the ledger's.
    pub(super) fn add_settled(&mut self, report: UsageReport, totals: Totals) -> Usage {
        let mut usage = self.add(report);
        self.cost_usd = totals.settled_usd;
        self.peak_reserved_usd = self.peak_reserved_usd.max(totals.peak_reserved_usd);
        usage.total_cost_usd = totals.settled_usd;
        usage
    }

    /// Usage the agent reported itself: counted when nothing else meters the dispatch, otherwise
    /// kept for [`Meter::reconcile`] (`None`: nothing to publish).
    pub(super) fn add_reported(&mut self, report: UsageReport) -> Option<Usage> {
        if !self.gateway {
            return Some(self.add(report));
        }
        let reported = self.agent_reported.get_or_insert_default();
        let tokens = report.input_tokens.saturating_add(report.output_tokens);
        reported.tokens = reported.tokens.saturating_add(tokens);
        if let Some(cost) = report.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            reported.cost_usd = Some(reported.cost_usd.unwrap_or(0.0) + cost);
        }
        None
    }

    /// The harness's whole-run record compared with the gateway's figures: a warning when they
    /// differ. Never replaces them.
    pub(super) fn reconcile(&self, usage: &Usage) -> Option<String> {
        self.differs(
            "usage record",
            usage.input_tokens.saturating_add(usage.output_tokens),
            Some(usage.total_cost_usd),
        )
    }

    /// What the agent reported of its own usage as it ran, added up, compared with the gateway's
    /// figures, for a harness that leaves no whole-run record (Codex reports its thread's running
    /// total in each `turn.completed`, which the parser hands on as what each turn added): a
    /// warning when they differ, the cost compared only when the agent named one. `None` when they
    /// agree, or the agent reported nothing. Never replaces the gateway's figures.
    pub(super) fn reconcile_reported(&self) -> Option<String> {
        let reported = self.agent_reported?;
        self.differs("reported usage", reported.tokens, reported.cost_usd)
    }

    /// The warning when the agent's `tokens` (and `cost`, when it named one) differ from the
    /// gateway's.
    fn differs(&self, what: &str, tokens: u64, cost: Option<f64>) -> Option<String> {
        let metered = self.input_tokens.saturating_add(self.output_tokens);
        let cost_differs = cost.is_some_and(|cost| {
            (cost - self.cost_usd).abs() > 0.0001_f64.max(self.cost_usd * 0.01)
        });
        let cost = cost.map_or_else(|| "no cost".to_owned(), |cost| format!("${cost:.4}"));
        (tokens != metered || cost_differs).then(|| {
            format!(
                "the agent's own {what} ({tokens} tokens, {cost}) differs from what the model gateway metered ({metered} tokens, ${:.4}); stet counts the gateway's",
                self.cost_usd
            )
        })
    }

    fn add(&mut self, report: UsageReport) -> Usage {
        self.input_tokens = self.input_tokens.saturating_add(report.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(report.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(report.cached_tokens);
        if let Some(cost) = report.cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
            self.cost_usd += cost;
        }
        self.model = Some(report.model.clone());
        Usage {
            model: report.model,
            input_tokens: report.input_tokens,
            output_tokens: report.output_tokens,
            cached_tokens: report.cached_tokens,
            cost_usd: report.cost_usd,
            total_cost_usd: self.cost_usd,
            latency_ms: None,
        }
    }

    /// Replaces the totals with a whole-run record (the harness's final usage).
    pub(super) fn settle(&mut self, usage: &Usage) {
        self.input_tokens = self.input_tokens.max(usage.input_tokens);
        self.output_tokens = self.output_tokens.max(usage.output_tokens);
        self.cached_tokens = self.cached_tokens.max(usage.cached_tokens);
        self.cost_usd = self.cost_usd.max(usage.total_cost_usd);
        self.model = Some(usage.model.clone());
    }

    /// The ceiling reached, as the stop it causes.
    pub(super) fn over_ceiling(&self) -> Option<DispatchError> {
        let ceiling_usd = self.ceiling_usd?;
        (self.cost_usd >= ceiling_usd).then_some(DispatchError::CostCeilingHit {
            spent_usd: self.cost_usd,
            ceiling_usd,
            needed_usd: None,
            refused: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use stet_sanitize::sanitize::TokenSanitizer;

    fn sanitizer() -> Arc<TokenSanitizer> {
        Arc::new(TokenSanitizer::new().unwrap())
    }

    #[test]
    fn the_meter_totals_costs_and_trips_at_the_ceiling() {
        let s = sanitizer();
        let mut meter = Meter {
            ceiling_usd: Some(0.10),
            ..Meter::default()
        };
        let report = |cost| UsageReport {
            model: s.sanitize("m"),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 0,
            cost_usd: cost,
        };
        let first = meter.add(report(Some(0.06)));
        assert!((first.total_cost_usd - 0.06).abs() < 1e-9);
        assert!(meter.over_ceiling().is_none());
        meter.add(report(None));
        assert!(
            meter.over_ceiling().is_none(),
            "an unknown cost adds nothing"
        );
        meter.add(report(Some(0.04)));
        assert!(
            meter
                .over_ceiling()
                .unwrap()
                .to_string()
                .contains("ceiling of $0.1000")
        );
        assert_eq!(meter.input_tokens, 300);
        let mut unlimited = Meter::default();
        unlimited.add(report(Some(1e9)));
        assert!(unlimited.over_ceiling().is_none());
    }

    #[test]
    fn with_the_gateway_its_ledger_is_the_total_and_the_agents_figures_only_reconcile() {
        let s = sanitizer();
        let mut meter = Meter {
            ceiling_usd: Some(1.0),
            gateway: true,
            ..Meter::default()
        };
        let report = |model: &str, cost| UsageReport {
            model: s.sanitize(model),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 0,
            cost_usd: cost,
        };
        let totals = |settled_usd| Totals {
            settled_usd,
            reserved_usd: 0.0,
            peak_reserved_usd: 0.4,
            open: 0,
        };
        let usage = meter.add_settled(report("gpt-4o", Some(0.2)), totals(0.2));
        assert_eq!(usage.total_cost_usd, 0.2);
        // The agent's own figures never move the total, the model or the tokens.
        assert!(meter.add_reported(report("alias", Some(5.0))).is_none());
        assert_eq!(
            (
                meter.cost_usd,
                meter.input_tokens,
                meter.model.as_ref().unwrap().as_str()
            ),
            (0.2, 100, "gpt-4o")
        );
        assert!(meter.over_ceiling().is_none());
        // The ledger's figure is the total, even where it counted a reservation no usage reported.
        meter.add_settled(report("gpt-4o", Some(0.3)), totals(0.7));
        assert_eq!(meter.cost_usd, 0.7);
        assert_eq!(meter.peak_reserved_usd, 0.4);
        // The harness's final record, $0.0 for an alias LiteLLM does not price, is a warning.
        let final_usage = |tokens: u64, cost: f64| Usage {
            model: s.sanitize("alias"),
            input_tokens: tokens,
            output_tokens: 0,
            cached_tokens: 0,
            cost_usd: Some(cost),
            total_cost_usd: cost,
            latency_ms: None,
        };
        let warning = meter.reconcile(&final_usage(220, 0.0)).unwrap();
        assert!(
            warning.contains("$0.0000") && warning.contains("$0.7000"),
            "{warning}"
        );
        assert!(meter.reconcile(&final_usage(220, 0.7)).is_none());
        assert_eq!(meter.cost_usd, 0.7);
        // Nothing final came: what the agent reported as it ran is compared instead (220 tokens
        // metered, 110 reported above).
        let warning = meter.reconcile_reported().unwrap();
        assert!(
            warning.contains("reported usage (110 tokens, $5.0000)")
                && warning.contains("(220 tokens, $0.7000)"),
            "{warning}"
        );
        // Without the gateway the agent's report is the only one, and counts.
        let mut alone = Meter::default();
        assert_eq!(
            alone
                .add_reported(report("m", Some(0.5)))
                .unwrap()
                .total_cost_usd,
            0.5
        );
        assert!(
            alone.reconcile_reported().is_none(),
            "nothing to reconcile with"
        );
    }

    /// Codex's running totals, handed on as what each turn added and with no cost, agree with the
    /// gateway's tokens whatever they cost; a difference in tokens is a warning that leaves the
    /// ledger's figures alone.
    #[test]
    fn codexs_running_totals_reconcile_on_tokens_alone() {
        let s = sanitizer();
        let mut meter = Meter::new(None, true);
        assert_eq!(meter.reconcile_reported(), None, "nothing reported");
        let report = |input: u64, output: u64| UsageReport {
            model: s.sanitize("gpt-5-codex"),
            input_tokens: input,
            output_tokens: output,
            cached_tokens: 0,
            cost_usd: None,
        };
        let totals = |settled_usd| Totals {
            settled_usd,
            reserved_usd: 0.0,
            peak_reserved_usd: 0.0,
            open: 0,
        };
        meter.add_settled(report(1200, 40), totals(0.004));
        meter.add_settled(report(1300, 41), totals(0.008));
        // Codex's totals 1200+40, then 2500+81: the parser's deltas.
        assert!(meter.add_reported(report(1200, 40)).is_none());
        assert!(meter.add_reported(report(1300, 41)).is_none());
        assert_eq!(meter.reconcile_reported(), None);
        assert!(meter.add_reported(report(100, 0)).is_none());
        let warning = meter.reconcile_reported().unwrap();
        assert_eq!(
            warning,
            "the agent's own reported usage (2681 tokens, no cost) differs from what the model gateway metered (2581 tokens, $0.0080); stet counts the gateway's"
        );
        assert_eq!((meter.cost_usd, meter.input_tokens), (0.008, 2500));
    }
}
