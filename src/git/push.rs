//! Placeholder: being written.

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("push is not built yet")]
    NotBuilt,
}
