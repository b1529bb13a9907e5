//! What the theater asks of the engine, as a trait the executable implements over the engine's
//! handle: this crate depends on no engine, so nothing in it can reach a container, a forge or a
//! credential. Answers come back as events; a refusal comes back here, in the engine's words.

use async_trait::async_trait;
use stet_protocol::brief::Brief;
use stet_protocol::event::DispatchId;

/// The engine, as the theater sees it.
#[async_trait]
pub trait EngineHandle: Send + Sync + 'static {
    /// Accepts `brief` for dispatch; its result waits for review, its events follow on the stream.
    async fn dispatch(&self, brief: Brief) -> Result<DispatchId, String>;
    /// Cancels `dispatch`; its teardown follows as events.
    async fn cancel(&self, dispatch: DispatchId) -> Result<(), String>;
    /// Approves `dispatch`'s result at review: it is pushed and its pull request opened.
    async fn approve(&self, dispatch: DispatchId) -> Result<(), String>;
    /// Discards `dispatch`'s result at review.
    async fn discard(&self, dispatch: DispatchId) -> Result<(), String>;
    /// The diff of `dispatch`'s result, sanitized and bounded.
    async fn patch(&self, dispatch: DispatchId) -> Result<String, String>;
    /// Cancels every dispatch and returns once every one has torn down.
    async fn shutdown(&self);
    /// [`Self::shutdown`] because the terminal went away: each dispatch's record says so.
    async fn hang_up(&self);
}
