//! The ledger as a dispatch's requests share it: admission (a request's worst case reserved, or the
//! reply that refuses it), the hold each admitted request keeps until its response settles it, and
//! the one `CeilingReached` announcement, sent through a slot of its own the first time the ceiling
//! is reached.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{CostLedger, Refusal, Reservation, Totals, WorstCase, words};
use crate::gateway::GatewayEvent;
use crate::gateway::reply::Reply;

/// Where the ledger's holds report: the gateway's event channel, through its sanitizer.
pub(crate) trait Reporter: std::fmt::Debug + Send + Sync {
    /// The dispatch's ledger.
    fn ledger(&self) -> &SharedLedger;

    /// A response whose usage was never read: a `Usage` event of no tokens that counted
    /// `counted_usd`.
    fn unread_usage(
        &self,
        model: &str,
        counted_usd: f64,
        totals: Totals,
        latency: Duration,
        streamed: bool,
    );

    /// A problem, as an `Error` event.
    fn error(&self, message: &str);
}

/// One dispatch's ledger behind its lock, with the reserved slot for `CeilingReached`.
#[derive(Debug)]
pub(crate) struct SharedLedger {
    book: Mutex<Book>,
}

#[derive(Debug)]
struct Book {
    ledger: CostLedger,
    /// Taken (and used) the first time the ceiling is reached.
    ceiling_permit: Option<mpsc::OwnedPermit<GatewayEvent>>,
}

impl SharedLedger {
    /// A ledger with nothing spent; under a ceiling it reserves a slot of `events` for
    /// `CeilingReached`, so that the announcement is never dropped.
    pub(crate) fn new(
        ceiling_usd: Option<f64>,
        events: &mpsc::Sender<GatewayEvent>,
    ) -> SharedLedger {
        let ceiling_permit = match ceiling_usd {
            Some(_) => events.clone().try_reserve_owned().ok(),
            None => None,
        };
        SharedLedger {
            book: Mutex::new(Book {
                ledger: CostLedger::new(ceiling_usd),
                ceiling_permit,
            }),
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ledger now.
    pub(crate) fn totals(&self) -> Totals {
        self.book().ledger.totals()
    }

    /// The reply refusing every request once the ceiling is reached; sends `CeilingReached` if it
    /// has not been sent (a ceiling of zero is reached before any response).
    pub(crate) fn refuse_if_reached(&self, label: &str) -> Option<Reply> {
        let mut book = self.book();
        let ceiling = book.ledger.ceiling_usd()?;
        if !book.ledger.reached() {
            return None;
        }
        book.announce(None);
        let spent = book.ledger.totals().settled_usd;
        Some(words::reached(label, spent, ceiling))
    }

    /// Sends `CeilingReached` (once) when settled spend has reached the ceiling.
    pub(crate) fn announce_if_reached(&self) {
        let mut book = self.book();
        if book.ledger.reached() {
            book.announce(None);
        }
    }

    /// Notes the endpoint reports costs itself.
    pub(crate) fn endpoint_reports_cost(&self) {
        self.book().ledger.endpoint_reports_cost();
    }
}

impl Book {
    /// Sends `CeilingReached` through the reserved slot, the first time only; `needed_usd` is what
    /// the refused request that reached it needed.
    fn announce(&mut self, needed_usd: Option<f64>) {
        let Some(ceiling_usd) = self.ledger.ceiling_usd() else {
            return;
        };
        if let Some(permit) = self.ceiling_permit.take() {
            permit.send(GatewayEvent::CeilingReached {
                spent_usd: self.ledger.totals().settled_usd,
                ceiling_usd,
                needed_usd,
            });
        }
    }
}

/// Admits a request whose worst case is `worst` (`None` on a route that is not metered: admitted,
/// holding nothing) for `model`, or answers the reply that refuses it. A refusal that leaves the
/// dispatch nothing it can still do announces the ceiling.
pub(crate) fn admit(
    reporter: Arc<dyn Reporter>,
    label: &str,
    worst: Option<&WorstCase>,
    model: Option<&str>,
) -> Result<Option<Hold>, Reply> {
    let Some(worst) = worst else {
        return Ok(None);
    };
    let admitted = {
        let mut book = reporter.ledger().book();
        let admitted = book.ledger.admit(worst);
        if let Err(Refusal::Reached { needed_usd, .. }) = admitted {
            book.announce(Some(needed_usd));
        }
        admitted
    };
    match admitted {
        Ok(reservation) => Ok(Some(Hold {
            reporter,
            reservation: Some(reservation),
            model: model.map(str::to_owned),
        })),
        Err(refusal) => Err(words::refusal(label, refusal)),
    }
}

/// An admitted request's reservation, settled exactly once: by [`Hold::settle`] with what the
/// request cost, or, when it is dropped unsettled (the agent went away, the gateway shut down), at
/// the whole reservation.
#[derive(Debug)]
pub(crate) struct Hold {
    reporter: Arc<dyn Reporter>,
    reservation: Option<Reservation>,
    /// The request's `model`, named by the usage a dropped hold reports.
    model: Option<String>,
}

impl Hold {
    /// What the request holds.
    pub(crate) fn reserved_usd(&self) -> f64 {
        self.reservation.as_ref().map_or(0.0, |held| held.usd)
    }

    /// The output cap the request must be sent with, when the ceiling sets one.
    pub(crate) fn output_cap(&self) -> Option<u64> {
        self.reservation.as_ref().and_then(|held| held.output_cap)
    }

    /// Settles with `cost_usd` (`None`: unknown, the reservation counts). Returns what was counted
    /// and the ledger after it; the caller reports the usage and then
    /// [`SharedLedger::announce_if_reached`], so that the usage that reached the ceiling comes first.
    pub(crate) fn settle(mut self, cost_usd: Option<f64>) -> (f64, Totals) {
        self.settle_once(cost_usd)
    }

    /// Settles with `cost_usd` for a response that reports no usage (a failure, a refusal by the
    /// upstream), and announces the ceiling if that reached it.
    pub(crate) fn close(self, cost_usd: Option<f64>) {
        let reporter = Arc::clone(&self.reporter);
        self.settle(cost_usd);
        reporter.ledger().announce_if_reached();
    }

    fn settle_once(&mut self, cost_usd: Option<f64>) -> (f64, Totals) {
        let ledger = self.reporter.ledger();
        let Some(reservation) = self.reservation.take() else {
            return (0.0, ledger.totals());
        };
        let counted = reservation.counted(cost_usd);
        let totals = ledger.book().ledger.settle(reservation, cost_usd);
        (counted, totals)
    }
}

impl Drop for Hold {
    /// The request ended before its response did (the agent went away, the upstream timed out, the
    /// gateway shut down): what it may have cost is unknown, so its reservation counts, and says so.
    fn drop(&mut self) {
        if self.reservation.is_none() {
            return;
        }
        let (counted, totals) = self.settle_once(None);
        if counted > 0.0 {
            let model = self.model.as_deref().unwrap_or("unknown");
            self.reporter
                .unread_usage(model, counted, totals, Duration::ZERO, false);
            self.reporter.error(&words::ended_unsettled(model, counted));
        }
        self.reporter.ledger().announce_if_reached();
    }
}
