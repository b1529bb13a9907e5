//! What a dispatch is asked to do and how it is steered from outside: the brief and its delivery, a
//! person's decision at review, cancel and the concurrency slots. Shared by the service that starts
//! dispatches and the run that carries one out.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::brief::Brief;
use stet_protocol::event::DispatchId;

/// The ref a collected result is kept at in the repository: `refs/stet/<dispatch id>`.
pub fn result_ref(dispatch: DispatchId) -> String {
    format!("refs/stet/{dispatch}")
}

/// What happens to a collected result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Wait at `awaiting_approval` for a person's [`Decision`].
    Review,
    /// Push and open the pull request without asking (`--headless --push`); a result the review
    /// gate holds (a dangerous path, a secret) is not pushed.
    Push,
    /// Keep the commit at [`result_ref`] and stop (`--headless` without `--push`).
    Keep,
}

/// A person's decision at review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Push the result and open or update its pull request.
    Approve,
    /// Do not push the result; the dispatch ends as discarded.
    Discard,
}

/// One dispatch to run.
#[derive(Debug, Clone)]
pub struct DispatchRun {
    /// The dispatch's id.
    pub id: DispatchId,
    /// The brief it runs.
    pub brief: Brief,
    /// What happens to its result.
    pub delivery: Delivery,
}

/// How a running dispatch is steered from outside.
#[derive(Debug)]
pub struct DispatchControl {
    /// Cancelled to end the dispatch from outside.
    pub cancel: CancellationToken,
    /// Why it was cancelled from outside, when the canceller said (set before `cancel` is).
    pub cause: Arc<std::sync::OnceLock<String>>,
    /// The decision at review arrives here.
    pub decisions: mpsc::Receiver<Decision>,
    /// The concurrency ceiling: a dispatch holds one permit from preflight to its end, except while
    /// it waits for a person at review.
    pub slots: Arc<Semaphore>,
}
