//! Where a dispatch's events go: the run record first, then the consumer (the theater or the
//! headless output), which may be slow or gone; and the state machine, walked one checked move at a
//! time with each phase's span kept for the result.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dispatch::record::{PhaseSpan, RunRecord};
use stet_protocol::event::{DispatchId, Event, EventKind};
use stet_protocol::state::{Input, Phase, transition};
use stet_sanitize::sanitize::SanitizedText;

/// Publishes events to the consumer and the run record, and walks the state machine.
pub(super) struct Publisher {
    dispatch: DispatchId,
    brief: String,
    events: mpsc::Sender<Event>,
    record: Option<RunRecord>,
    phase: Phase,
    phase_started: (DateTime<Utc>, Instant),
    spans: Vec<PhaseSpan>,
    redactions: u64,
    consumer_gone: bool,
}

impl Publisher {
    pub(super) fn new(
        dispatch: DispatchId,
        brief: String,
        events: mpsc::Sender<Event>,
        record: Option<RunRecord>,
        queued: (DateTime<Utc>, Instant),
    ) -> Publisher {
        Publisher {
            dispatch,
            brief,
            events,
            record,
            phase: Phase::Queued,
            phase_started: queued,
            spans: Vec::new(),
            redactions: 0,
            consumer_gone: false,
        }
    }

    /// The phase the dispatch is in.
    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// How many redactions the transcript published so far carried.
    pub(super) fn redactions(&self) -> u64 {
        self.redactions
    }

    /// The run record, while it takes events.
    pub(super) fn record(&self) -> Option<&RunRecord> {
        self.record.as_ref()
    }

    /// Every phase's span, the terminal one (which lasts no time) last.
    pub(super) fn take_spans(&mut self) -> Vec<PhaseSpan> {
        self.spans.push(PhaseSpan {
            phase: self.phase,
            started: self.phase_started.0,
            millis: 0,
        });
        std::mem::take(&mut self.spans)
    }

    pub(super) async fn emit(&mut self, kind: EventKind) {
        let never = CancellationToken::new();
        self.emit_until(kind, &never).await;
    }

    /// Records the event, then hands it to the consumer unless `stop` fires first (a slow reader
    /// must never hold up a cancel or the timeout). Returns `false` when `stop` won; the event is in
    /// the run record either way.
    pub(super) async fn emit_until(&mut self, kind: EventKind, stop: &CancellationToken) -> bool {
        if let EventKind::Transcript(item) = &kind {
            self.redactions += count_redactions(item.text.as_str());
        }
        let event = Event::new(self.dispatch, &self.brief, kind);
        self.append(&event);
        if self.consumer_gone {
            return true;
        }
        tokio::select! {
            biased;
            sent = self.events.send(event) => {
                // An error means the consumer went away (the UI closed); the run record keeps
                // everything.
                self.consumer_gone = sent.is_err();
                true
            }
            () = stop.cancelled() => false,
        }
    }

    /// Writes an event to the run record only.
    pub(super) fn record_only(&mut self, kind: EventKind) {
        let event = Event::new(self.dispatch, &self.brief, kind);
        self.append(&event);
    }

    /// Appends `event` to the run record; a record that fails is given up, never retried.
    fn append(&mut self, event: &Event) {
        if let Some(record) = self.record.as_mut()
            && let Err(error) = record.append(event)
        {
            tracing::error!(dispatch = %self.dispatch, %error, "the run record stopped taking events");
            self.record = None;
        }
    }

    /// Moves the state machine and publishes the change. An illegal move is a bug: it is logged and
    /// the dispatch fails rather than continuing in a state the machine does not allow.
    pub(super) async fn advance(&mut self, input: Input, reason: Option<SanitizedText>) {
        if self.phase.is_terminal() {
            return;
        }
        let (to, reason) = match transition(self.phase, input) {
            Ok(to) => (to, reason),
            Err(error) => {
                tracing::error!(dispatch = %self.dispatch, %error, "illegal transition");
                (Phase::Failed, None)
            }
        };
        let now = (Utc::now(), Instant::now());
        self.spans.push(PhaseSpan {
            phase: self.phase,
            started: self.phase_started.0,
            millis: millis(now.1 - self.phase_started.1),
        });
        let from = std::mem::replace(&mut self.phase, to);
        self.phase_started = now;
        self.emit(EventKind::Phase { from, to, reason }).await;
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
fn count_redactions(text: &str) -> u64 {
    u64::try_from(text.matches("[REDACTED:").count()).unwrap_or(u64::MAX)
}
