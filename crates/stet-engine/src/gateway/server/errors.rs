//! The error a gateway body carries, shared by the forwarder and the metered body so that neither
//! depends on the other for it.

/// The error type of every body the gateway passes on.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;
