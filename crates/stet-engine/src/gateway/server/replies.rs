//! What the agent is answered when the gateway answers itself, and what the events say of the
//! upstream's own refusals. Replies carry their wire API's error shape (`Wire::error_body`,
//! `Wire::refusal_body`; OpenAI's `{"error":{"message":..,"type":"stet_gateway","code":..}}` on the
//! routes served today), so agents surface them as API errors. The upstream's own statuses (429
//! with `Retry-After`, 5xx, …) pass through unchanged; they are only reported.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use super::Shared;
use super::errors::BoxError;
use crate::gateway::policy;
use crate::gateway::reply::{HELD_RETRY_AFTER_SECS, Reply, shown_text};
use crate::gateway::wire::Wire;

/// A body the gateway sends the agent: its own error replies, or an upstream response passing through.
pub(super) type GatewayBody = BoxBody<Bytes, BoxError>;

/// Why a request went no further than the gateway.
#[derive(Debug)]
pub(super) enum Stop {
    /// A reply of the gateway's own (a route not served, the ceiling, a body it cannot read, …).
    Reply(Reply),
    /// The request policy refused it.
    Policy(policy::Refusal),
}

impl Stop {
    /// Reports the stop and answers it in `shape`'s error shape.
    pub(super) fn answer(
        self,
        shared: &Shared,
        label: &str,
        shape: &dyn Wire,
    ) -> Response<GatewayBody> {
        match self {
            Stop::Reply(reply) => answer(shared, shape, reply),
            Stop::Policy(refusal) => refused(shared, label, shape, refusal),
        }
    }
}

/// Reports `reply` as an `Error` event and answers it, with `Retry-After` when waiting passes it.
pub(super) fn answer(shared: &Shared, shape: &dyn Wire, reply: Reply) -> Response<GatewayBody> {
    shared.error(&reply.event);
    let mut response = json_reply(reply.status, &shape.error_body(reply.code, &reply.message));
    if reply.retry_after {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(HELD_RETRY_AFTER_SECS),
        );
    }
    response
}

/// Reports a request the policy refused (the field, the kind of value and the rule, never the
/// value) and answers it with a 400 in its API's own error shape.
fn refused(
    shared: &Shared,
    label: &str,
    shape: &dyn Wire,
    refusal: policy::Refusal,
) -> Response<GatewayBody> {
    let body = shape.refusal_body(&refusal);
    tracing::info!(
        path = label,
        field = %shown_text(&refusal.field),
        kind = refusal.value_kind,
        rule = refusal.rule.name(),
        "the request policy refused a model request"
    );
    shared.refused(refusal);
    json_reply(StatusCode::BAD_REQUEST, &body)
}

/// A JSON reply of `status`.
fn json_reply(status: StatusCode, body: &serde_json::Value) -> Response<GatewayBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Reports an upstream status the agent will have to deal with.
pub(super) fn report_status(shared: &Shared, label: &str, status: StatusCode, headers: &HeaderMap) {
    if status == StatusCode::TOO_MANY_REQUESTS {
        match headers.get(header::RETRY_AFTER) {
            Some(retry_after) => {
                let retry_after: String = String::from_utf8_lossy(retry_after.as_bytes()).chars().take(64).collect();
                shared.error(&format!(
                    "{label}: the model upstream is rate-limiting ({status}), Retry-After: {retry_after}; passed to the agent"
                ));
            }
            None => shared.error(&format!(
                "{label}: the model upstream is rate-limiting ({status}), with no Retry-After; passed to the agent"
            )),
        }
    } else if status.is_server_error() {
        shared.error(&format!(
            "{label}: the model upstream failed ({status}); passed to the agent"
        ));
    } else if status.is_client_error() {
        shared.error(&format!(
            "{label}: the model upstream refused the request ({status}); passed to the agent"
        ));
    }
}
