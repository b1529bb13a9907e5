//! What every step of a dispatch carries ([`Steering`]): what the dispatch was asked, the handles
//! that steer it (the publisher, the stop token, the person's controls, its concurrency slot), and
//! what it has gathered so far for its `finished` event and its run record.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::dispatch::error::{CancelPoint, DispatchError};
use crate::dispatch::order::{DispatchControl, DispatchRun};
use crate::dispatch::service::{DispatchContext, DispatchService};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

use super::meter::Meter;
use super::publisher::Publisher;

/// The shared handles of one dispatch, lent to each step in turn: what it was asked, how it is
/// steered, and what it has gathered so far.
pub(super) struct Steering {
    pub(super) service: DispatchService,
    pub(super) parts: Arc<DispatchContext>,
    pub(super) run: DispatchRun,
    pub(super) control: DispatchControl,
    pub(super) publisher: Publisher,
    pub(super) meter: Meter,
    pub(super) gathered: Gathered,
    pub(super) started: (DateTime<Utc>, Instant),
    /// Cancelled by the person's cancel or by the wall-clock timeout: what the agent's work races.
    pub(super) stop: CancellationToken,
    pub(super) expired: CancellationToken,
    /// This dispatch's concurrency slot, while it holds one.
    pub(super) permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What a dispatch has gathered for its `finished` event and its run record: the branch, the
/// commits, the pull request, the summary, what teardown could not remove.
#[derive(Debug, Default)]
pub(super) struct Gathered {
    pub(super) branch: String,
    pub(super) base: Option<CommitSha>,
    pub(super) commit: Option<CommitSha>,
    pub(super) reference: Option<String>,
    pub(super) pull_request: Option<(u64, SanitizedText)>,
    pub(super) summary: Option<String>,
    pub(super) teardown_failures: Vec<SanitizedText>,
    /// What the egress proxy saw, once it stopped (when one ran).
    pub(super) egress: Option<crate::egress::proxy::EgressReport>,
}

impl Steering {
    /// A failure described by `what`, in words safe to show.
    pub(super) fn fail(&self, what: impl fmt::Display) -> DispatchError {
        DispatchError::failed(&self.sanitizer(), what)
    }

    pub(super) fn sanitizer(&self) -> Arc<TokenSanitizer> {
        self.parts.sanitizer.current()
    }

    pub(super) fn sanitize(&self, text: &str) -> SanitizedText {
        self.sanitizer().sanitize(text)
    }

    /// Races `work` against the stop token (cancel or timeout).
    pub(super) async fn guarded<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, DispatchError> {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => Err(self.stop_reason()),
            value = work => Ok(value),
        }
    }

    /// Why the stop token fired.
    pub(super) fn stop_reason(&self) -> DispatchError {
        if self.control.cancel.is_cancelled() {
            DispatchError::Cancelled(CancelPoint::During(self.publisher.phase()))
        } else if self.expired.is_cancelled() {
            DispatchError::TimedOut {
                after: self.parts.settings.timeout,
            }
        } else {
            self.fail("stopped for no recorded reason")
        }
    }
}
