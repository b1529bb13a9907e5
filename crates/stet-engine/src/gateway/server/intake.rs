//! An agent's request body, read whole before anything of it is forwarded: within the body timeout,
//! at most 32 MiB, each byte taken from the dispatch's budget of request bytes in flight, and given
//! back when the request no longer holds it.

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use http::header::{self, HeaderMap};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::OwnedSemaphorePermit;

use super::Shared;
use crate::error_chain::error_chain;
use crate::gateway::reply::Reply;

/// The largest request body forwarded.
const MAX_REQUEST_BODY: usize = 32 * 1024 * 1024;

/// Why an agent's request body was not read whole.
#[derive(Debug)]
pub(super) enum Unread {
    /// Over [`MAX_REQUEST_BODY`], by its `Content-Length` or as it arrived.
    TooLarge,
    /// The dispatch's budget of bytes in flight is held by its other requests.
    OverBudget { budget: usize },
    /// The body failed (a malformed chunk, the connection cut); the text says how.
    Broken(String),
    /// The body did not arrive in time.
    TimedOut(std::time::Duration),
}

impl Unread {
    /// The reply and event line saying why the body was not read.
    pub(super) fn reply(self, label: &str) -> Reply {
        match self {
            Unread::TooLarge => {
                let limit = MAX_REQUEST_BODY >> 20;
                Reply::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    format!("stet gateway: request bodies are limited to {limit} MiB"),
                    format!("{label}: refused, the request body is over {limit} MiB (413)"),
                )
            }
            Unread::OverBudget { budget } => {
                let budget = budget >> 20;
                Reply::retry(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "request_bytes_in_flight",
                    format!(
                        "stet gateway: this dispatch's requests in flight already hold {budget} MiB of request bodies; retry when one finishes"
                    ),
                    format!(
                        "{label}: held back, the dispatch's other requests hold its {budget} MiB of request bytes in flight (503)"
                    ),
                )
            }
            Unread::Broken(detail) => Reply::error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "stet gateway: the request body could not be read".to_owned(),
                format!("{label}: the agent's request body could not be read: {detail} (400)"),
            ),
            Unread::TimedOut(timeout) => Reply::error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "stet gateway: the request body did not arrive in time".to_owned(),
                format!(
                    "{label}: the agent's request body did not arrive within {timeout:?} (408)"
                ),
            ),
        }
    }
}

/// Takes `bytes` more of the dispatch's budget of request bytes in flight into `held`.
fn take_bytes(
    shared: &Shared,
    bytes: usize,
    held: &mut Option<OwnedSemaphorePermit>,
) -> Result<(), Unread> {
    let budget = shared.limits.max_bytes_in_flight;
    let count = u32::try_from(bytes).map_err(|_| Unread::TooLarge)?;
    let permit = Arc::clone(&shared.bytes_in_flight)
        .try_acquire_many_owned(count)
        .map_err(|_| Unread::OverBudget { budget })?;
    match held {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
    }
    Ok(())
}

/// Reads an agent's request body whole, within the body timeout (and the request's deadline), at
/// most [`MAX_REQUEST_BODY`] bytes, each byte taken from the dispatch's budget of bytes in flight:
/// what its `Content-Length` declares before any of it is read, the rest as it arrives. Returns the
/// body and its share of the budget, given back when dropped.
pub(super) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    mut body: Incoming,
    deadline: tokio::time::Instant,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Unread> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REQUEST_BODY as u64) {
        return Err(Unread::TooLarge);
    }
    let timeout = shared.limits.body_timeout.min(shared.request_timeout);
    let body_deadline = deadline.min(tokio::time::Instant::now() + timeout);
    let declared = declared.map_or(0, |length| length as usize);
    let mut held = None;
    if declared > 0 {
        take_bytes(shared, declared, &mut held)?;
    }
    let mut collected = Vec::with_capacity(declared);
    loop {
        let frame = match tokio::time::timeout_at(body_deadline, body.frame()).await {
            Err(_) => return Err(Unread::TimedOut(timeout)),
            Ok(None) => break,
            Ok(Some(Err(err))) => return Err(Unread::Broken(error_chain(&err))),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let taken = declared.max(collected.len());
        let total = collected.len() + data.len();
        if total > MAX_REQUEST_BODY {
            return Err(Unread::TooLarge);
        }
        if total > taken {
            take_bytes(shared, total - taken, &mut held)?;
        }
        collected.extend_from_slice(&data);
    }
    Ok((Bytes::from(collected), held))
}
