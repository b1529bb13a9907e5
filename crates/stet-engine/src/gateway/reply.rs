//! A reply the gateway makes itself, said once: its status, its error code, its message to the agent
//! and the line its `Error` event reports. The words are the module's that refuses (the ledger's for
//! the ceiling); the body's shape is the wire API's ([`super::wire::Wire::error_body`]).

use http::StatusCode;

/// How long a retry is suggested while what the agent waits for is held by requests in flight.
pub(crate) const HELD_RETRY_AFTER_SECS: u32 = 2;

/// A reply of the gateway's own and its event line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The error's `code`, for programs.
    pub code: &'static str,
    /// The error's message, for people.
    pub message: String,
    /// Sent with `Retry-After` ([`HELD_RETRY_AFTER_SECS`]): what it waits for passes.
    pub retry_after: bool,
    /// The line the `Error` event reports, naming the request.
    pub event: String,
}

impl Reply {
    /// A reply that does not pass by waiting.
    pub(crate) fn error(
        status: StatusCode,
        code: &'static str,
        message: String,
        event: String,
    ) -> Reply {
        Reply {
            status,
            code,
            message,
            retry_after: false,
            event,
        }
    }

    /// A reply to retry after [`HELD_RETRY_AFTER_SECS`].
    pub(crate) fn retry(
        status: StatusCode,
        code: &'static str,
        message: String,
        event: String,
    ) -> Reply {
        Reply {
            retry_after: true,
            ..Reply::error(status, code, message, event)
        }
    }
}

/// The longest request path or model name an event or error body repeats.
pub(crate) const MAX_SHOWN_PATH: usize = 160;

/// A text of the agent's (a path, a model name) as events and replies repeat it: one line under the
/// display policy, bounded in length (the sanitizer runs on it later).
pub(crate) fn shown_text(text: &str) -> String {
    shown_path(&stet_sanitize::display::one_line(text))
}

/// The request path as events repeat it: bounded in length (the sanitizer runs on it later).
pub(crate) fn shown_path(path: &str) -> String {
    if path.len() <= MAX_SHOWN_PATH {
        return path.to_owned();
    }
    format!("{}…", crate::human::truncate(path, MAX_SHOWN_PATH))
}
