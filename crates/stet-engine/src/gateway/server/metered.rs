//! The response body on its way to the agent: passed through frame by frame as it arrives (a stream is
//! never buffered whole), teed into the meter, bounded by the request's deadline, and concluded
//! exactly once — at its end, when it is cut, when it times out, or when it is dropped — into the
//! settlement of its reservation on the cost ledger, a `Usage` event and, when something went wrong,
//! an `Error` event. A response whose usage is never read counts its whole reservation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::errors::BoxError;
use super::{GatewayEvent, Shared};
use crate::error_chain::error_chain;
use crate::gateway::ledger::{Hold, Reporter};
use crate::gateway::tool_calls::ToolBill;
use crate::gateway::usage::UsageReport;
use crate::gateway::usage::{self, Metered};
use crate::gateway::wire::{StreamUsage, Wire};
use stet_sanitize::display::without_invisible;

/// The largest non-streaming body kept for reading its usage; a larger one passes unmetered.
const MAX_METERED_BODY: usize = 32 * 1024 * 1024;

/// How a response's bytes are read for usage.
#[derive(Debug)]
pub(super) enum Meter {
    /// Not metered: `/v1/models`, or an error status.
    Off,
    /// A whole JSON body of `wire`'s, kept until its end.
    Json {
        wire: &'static dyn Wire,
        body: Vec<u8>,
        overflow: bool,
    },
    /// A server-sent event stream, read by its wire API as it passes.
    Sse(Box<dyn StreamUsage>),
}

impl Meter {
    /// A meter for a whole JSON body of `wire`'s.
    pub(super) fn json(wire: &'static dyn Wire) -> Meter {
        Meter::Json {
            wire,
            body: Vec::new(),
            overflow: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        match self {
            Meter::Off => {}
            Meter::Json { body, overflow, .. } => {
                if *overflow || body.len() + data.len() > MAX_METERED_BODY {
                    *overflow = true;
                    *body = Vec::new();
                } else {
                    body.extend_from_slice(data);
                }
            }
            Meter::Sse(scanner) => scanner.push(data),
        }
    }
}

/// How a response body ended.
#[derive(Debug)]
enum End {
    Complete,
    /// The upstream's body failed (connection cut, malformed chunking); the text says how.
    Cut(String),
    TimedOut,
    /// Dropped before its end: the agent went away, or the gateway shut down.
    Dropped,
}

/// Who the response belongs to, for its events.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) shared: Arc<Shared>,
    /// `POST /v1/chat/completions`: what events name the request by.
    pub(super) label: String,
    /// The request's `model`, the pricing fallback.
    pub(super) request_model: Option<String>,
    /// What the provider tools it enables cost per call, added to its token cost.
    pub(super) bill: Option<ToolBill>,
    /// The upstream's own cost report, when it made one.
    pub(super) header_cost: Option<f64>,
    /// The request's reservation, settled when the response concludes; `None` when not metered.
    pub(super) hold: Option<Hold>,
    /// The request's place among the dispatch's requests in flight, given up when it concludes.
    pub(super) in_flight: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) start: Instant,
}

/// The upstream's response body, metered on its way to the agent.
pub(super) struct MeteredBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    meter: Meter,
    /// Taken when the body concludes.
    report: Option<Report>,
}

impl MeteredBody {
    pub(super) fn new(
        inner: Incoming,
        deadline: tokio::time::Instant,
        meter: Meter,
        report: Report,
    ) -> MeteredBody {
        MeteredBody {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            meter,
            report: Some(report),
        }
    }

    fn conclude(&mut self, end: End) {
        if let Some(report) = self.report.take() {
            let meter = std::mem::replace(&mut self.meter, Meter::Off);
            report.conclude(meter, end);
        }
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.report.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.push(data);
                }
                // A body with a length is complete with its last byte: hyper stops polling there and
                // drops the body, so it must conclude now rather than at a `None` that never comes.
                if this.inner.is_end_stream() {
                    this.conclude(End::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.conclude(End::Cut(error_chain(&err)));
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.conclude(End::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.conclude(End::TimedOut);
                    Poll::Ready(Some(Err(
                        "stet gateway: the model upstream did not finish the response in time"
                            .into(),
                    )))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    /// Ended once concluded; before that the body is polled to its end (or its last byte), so that
    /// it concludes as complete rather than as dropped.
    fn is_end_stream(&self) -> bool {
        self.report.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        // hyper drops an empty body (`Content-Length: 0`) without polling it: that one is complete.
        let end = if self.inner.is_end_stream() {
            End::Complete
        } else {
            End::Dropped
        };
        self.conclude(end);
    }
}

impl Report {
    fn conclude(mut self, meter: Meter, end: End) {
        let latency = self.start.elapsed();
        let label = self.label.clone();
        let label = &label;
        let complete = matches!(end, End::Complete);
        // `None` when not metered; `problem` when the meter could not read what it was given.
        let (metered, streamed, problem): (Option<Metered>, bool, Option<String>) = match meter {
            Meter::Off => (None, false, None),
            Meter::Json { .. } if !complete => (Some(Metered::default()), false, None),
            Meter::Json { overflow: true, .. } => (
                None,
                false,
                Some(format!(
                    "{label}: the response is over {} MiB, too large to read its usage{}",
                    MAX_METERED_BODY >> 20,
                    self.unread_note()
                )),
            ),
            Meter::Json { wire, body, .. } => match wire.body_usage(&body) {
                Ok(metered) => (Some(metered), false, None),
                Err(err) => (
                    None,
                    false,
                    Some(format!(
                        "{label}: {err}; its usage could not be read (the body was passed to the agent unchanged){}",
                        self.unread_note()
                    )),
                ),
            },
            Meter::Sse(reader) => (Some(reader.finish()), true, None),
        };
        let usage = metered.as_ref().and_then(|metered| metered.usage);
        let counted = match (&metered, usage) {
            (Some(metered), Some(tokens)) => {
                self.record(metered, tokens, complete, latency, streamed)
            }
            _ => self.record_unread(latency, streamed),
        };

        let what = if streamed { "stream" } else { "body" };
        let unmetered_text = match counted {
            Some(reserved) => {
                format!("; its cost is unknown and counts as the ${reserved:.4} it had reserved")
            }
            None => "; this request is not metered".to_owned(),
        };
        let unmetered = if metered.is_some() && usage.is_none() {
            unmetered_text.as_str()
        } else {
            ""
        };
        let ended = match end {
            End::Complete => (metered.is_some() && usage.is_none())
                .then(|| format!("{label}: the response carried no usage{unmetered_text}")),
            End::Cut(how) if streamed && usage.is_none() => Some(format!(
                "{label}: the response stream was cut before usage ({how}){unmetered}"
            )),
            End::Cut(how) => Some(format!(
                "{label}: the response {what} was cut ({how}){unmetered}"
            )),
            End::TimedOut => {
                let timeout = self.shared.request_timeout;
                Some(format!(
                    "{label}: the model upstream did not finish the response {what} within {timeout:?}; the agent's response was cut{unmetered}"
                ))
            }
            End::Dropped if self.shared.shutting_down.load(Ordering::Relaxed) => Some(format!(
                "{label}: the gateway shut down before the response {what} ended{unmetered}"
            )),
            End::Dropped => Some(format!(
                "{label}: the agent closed the connection before the response {what} ended{unmetered}"
            )),
        };
        for message in [problem, ended].into_iter().flatten() {
            self.shared.error(&message);
        }
        self.shared.ledger.announce_if_reached();
        self.in_flight.take();
    }

    /// What an unread response will count, as its error says it.
    fn unread_note(&self) -> String {
        match self.hold.as_ref().map(Hold::reserved_usd) {
            Some(reserved) if reserved > 0.0 => {
                format!("; its cost counts as the ${reserved:.4} it had reserved")
            }
            _ => "; this request is not metered".to_owned(),
        }
    }

    /// One metered response: its cost settled on the ledger and its `Usage` event. Its provider
    /// tools add the calls it reports, or, when it did not end whole, all the calls reserved.
    /// Returns the reservation counted in its place when its cost is unknown and one was held.
    fn record(
        &mut self,
        metered: &Metered,
        tokens: usage::TokenCounts,
        complete: bool,
        latency: std::time::Duration,
        streamed: bool,
    ) -> Option<f64> {
        let shared = Arc::clone(&self.shared);
        let model = metered.model.as_ref().or(self.request_model.as_ref());
        let cost_usd = self.header_cost.or_else(|| {
            [metered.model.as_ref(), self.request_model.as_ref()]
                .into_iter()
                .flatten()
                .find_map(|model| shared.prices.cost_of(model, &tokens))
        });
        let cost_usd = match &self.bill {
            Some(bill) if complete => cost_usd.map(|cost| cost + bill.charged_usd(&metered.calls)),
            Some(bill) => cost_usd.map(|cost| cost + bill.reserved_usd()),
            None => cost_usd,
        };
        let (counted, totals) = match self.hold.take() {
            Some(hold) => hold.settle(cost_usd),
            None => (cost_usd.unwrap_or(0.0), shared.ledger.totals()),
        };
        let reserved_instead = (cost_usd.is_none() && counted > 0.0).then_some(counted);
        shared.emit(GatewayEvent::Usage {
            report: UsageReport {
                model: shared
                    .sanitizer
                    .sanitize(&without_invisible(model.map_or("unknown", String::as_str)).text),
                input_tokens: tokens.input,
                output_tokens: tokens.output,
                cached_tokens: tokens.cached,
                cost_usd: cost_usd.or(reserved_instead),
            },
            totals,
            latency,
            streamed,
        });
        reserved_instead
    }

    /// A response whose usage was never read: its reservation settles whole, and when that counts
    /// anything a `Usage` event of no tokens carries it. Returns what was counted, if anything.
    fn record_unread(&mut self, latency: std::time::Duration, streamed: bool) -> Option<f64> {
        let (counted, totals) = self.hold.take()?.settle(None);
        if counted <= 0.0 {
            return None;
        }
        let model = self.request_model.as_deref().unwrap_or("unknown");
        self.shared
            .unread_usage(model, counted, totals, latency, streamed);
        Some(counted)
    }
}
