//! A dispatch's admission ([`Admission`]): announced with its `dispatched` event, refused when its
//! run record could not be created, then waiting in `queued` for a concurrency slot; its wall-clock
//! timeout starts once it holds one.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;

use crate::dispatch::error::{CancelPoint, DispatchError};
use stet_protocol::event::EventKind;
use stet_protocol::state::Input;

use super::steering::Steering;

/// Covers `queued`: the `dispatched` event, the run record's check, a concurrency slot (kept in the
/// [`Steering`]) and the timeout's timer; moves to `preflight` and hands the [`Timeout`] on.
pub(super) struct Admission<'d> {
    steering: &'d mut Steering,
}

/// The wall-clock timeout's timer: it stops the dispatch when it fires, is disarmed once the agent's
/// work is over, and never outlives its dispatch.
pub(super) struct Timeout(tokio::task::JoinHandle<()>);

impl Timeout {
    /// The agent's work is over: the timeout no longer applies (a person reviewing is not timed).
    pub(super) fn disarm(&self) {
        self.0.abort();
    }
}

impl Drop for Timeout {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<'d> Admission<'d> {
    pub(super) fn new(steering: &'d mut Steering) -> Admission<'d> {
        Admission { steering }
    }

    /// Announces the dispatch and waits for its slot; `record_error`: why its run record could not
    /// be created, if it could not.
    pub(super) async fn admit(
        self,
        record_error: Option<String>,
    ) -> Result<Timeout, DispatchError> {
        let steering = self.steering;
        let harness = &steering.parts.harness;
        let harness_label = match harness.version() {
            Some(version) => format!("{} ({version})", harness.name()),
            None => harness.name().to_owned(),
        };
        let dispatched = EventKind::Dispatched {
            title: steering.sanitize(&steering.run.brief.title),
            repo: steering.sanitize(&steering.run.brief.target.repo),
            base: steering.sanitize(&steering.run.brief.target.base),
            branch: steering.sanitize(&steering.gathered.branch),
            harness: steering.sanitize(&harness_label),
            image: steering.sanitize(steering.parts.settings.image.as_str()),
            cost_ceiling_usd: steering.parts.settings.cost_ceiling_usd,
        };
        steering.publisher.emit(dispatched).await;
        if let Some(error) = record_error {
            let reason = format!(
                "the run record could not be created ({error}); a dispatch whose events cannot be kept does not start"
            );
            return Err(steering.fail(reason));
        }
        let slots = Arc::clone(&steering.control.slots);
        let permit = tokio::select! {
            biased;
            () = steering.control.cancel.cancelled() => None,
            permit = slots.acquire_owned() => permit.ok(),
        };
        let Some(permit) = permit else {
            return Err(DispatchError::Cancelled(CancelPoint::Queued));
        };
        steering.permit = Some(permit);
        steering.started = (Utc::now(), Instant::now());
        let timer = tokio::spawn({
            let (stop, expired) = (steering.stop.clone(), steering.expired.clone());
            let timeout = steering.parts.settings.timeout;
            async move {
                tokio::time::sleep(timeout).await;
                expired.cancel();
                stop.cancel();
            }
        });
        let timeout = Timeout(timer);
        steering.publisher.advance(Input::Start, None).await;
        Ok(timeout)
    }
}
