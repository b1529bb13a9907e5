//! The error a gateway body carries and the one-line text of an error chain, shared by the forwarder
//! and the metered body so that neither depends on the other for them.

/// The error type of every body the gateway passes on.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error and its sources, joined: `client error (Connect): tcp connect error: Connection refused`.
pub(super) fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
