//! How slowly one exchange through the origin guard may move before the guard gives up on it, so a
//! forge that sends an answer's head and then trickles its body (or reads a push a byte at a time)
//! cannot hold a ref listing, a base fetch or a push for ever (docs/security.md, "The origin rule").
//! Two bounds, on the bytes moved in either direction of one forwarded request: nothing may stand
//! still for longer than the idle bound, and after a grace period the exchange must keep an average
//! rate above a floor. A legitimate transfer of any size passes both; a trickle meets one of them.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf as _;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The bounds on one forwarded request. [`TransferBounds::default`] is what every git operation uses;
/// tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferBounds {
    /// The longest nothing may move in either direction: before the answer's head (once the request
    /// was sent, this is the time the origin has to begin its answer) as within its body.
    pub idle: Duration,
    /// How long an exchange may take whatever its rate.
    pub grace: Duration,
    /// Past the grace, the exchange may take only as long as its bytes need at this rate: it must
    /// have moved `(elapsed - grace) × floor` bytes.
    pub floor_bytes_per_second: u64,
}

impl Default for TransferBounds {
    /// 60 s idle, 60 s of grace, then at least 4 KiB/s on average: a 1 GiB push may take up to
    /// 73 hours at the floor, a trickle of one byte a second is cut after about a minute.
    fn default() -> TransferBounds {
        TransferBounds {
            idle: Duration::from_secs(60),
            grace: Duration::from_secs(60),
            floor_bytes_per_second: 4096,
        }
    }
}

/// Why an exchange was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallKind {
    /// Nothing moved for the idle bound.
    Idle,
    /// Past the grace, fewer bytes than the floor asks for.
    UnderFloor,
}

/// An exchange the guard cut: which request, how far it got and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The request, as `METHOD path` relative to the checked URL's origin.
    pub request: String,
    /// Whether the origin's answer had begun (its head arrived).
    pub answering: bool,
    /// Bytes moved in both directions before the cut.
    pub moved: u64,
    /// How long the exchange had run.
    pub elapsed: Duration,
    /// Why it was cut.
    pub kind: StallKind,
    /// The bounds it broke.
    pub bounds: TransferBounds,
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = if self.answering {
            "its answer"
        } else {
            "the start of its answer"
        };
        let seconds = self.elapsed.as_secs();
        match self.kind {
            StallKind::Idle => write!(
                f,
                "{}: nothing moved for {} s waiting for {stage} ({} bytes in {seconds} s); stet gives up on an exchange that stands still that long",
                self.request,
                self.bounds.idle.as_secs(),
                self.moved,
            ),
            StallKind::UnderFloor => write!(
                f,
                "{}: {} bytes in {seconds} s while waiting for {stage}, under the floor of {} bytes/s that applies after the first {} s; stet gives up on an exchange that slow",
                self.request,
                self.moved,
                self.bounds.floor_bytes_per_second,
                self.bounds.grace.as_secs(),
            ),
        }
    }
}

/// What one forwarded request has moved, shared by the request body going up and the answer coming
/// down, and where a cut is recorded for the operation's error.
#[derive(Debug)]
pub(crate) struct Meter {
    bounds: TransferBounds,
    request: String,
    start: Instant,
    moved: AtomicU64,
    /// Nanoseconds from `start` to the last byte moved.
    last: AtomicU64,
    stalled: Arc<Mutex<Option<Stall>>>,
}

impl Meter {
    pub(crate) fn new(
        bounds: TransferBounds,
        request: String,
        stalled: Arc<Mutex<Option<Stall>>>,
    ) -> Arc<Meter> {
        Arc::new(Meter {
            bounds,
            request,
            start: Instant::now(),
            moved: AtomicU64::new(0),
            last: AtomicU64::new(0),
            stalled,
        })
    }

    fn record(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.moved
            .fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
        let since = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(since, Ordering::Relaxed);
    }

    /// When the exchange breaks a bound if nothing more moves, and which.
    fn deadline(&self) -> (Instant, StallKind) {
        let idle =
            self.start + Duration::from_nanos(self.last.load(Ordering::Relaxed)) + self.bounds.idle;
        let earned = Duration::from_secs_f64(
            self.moved.load(Ordering::Relaxed) as f64
                / self.bounds.floor_bytes_per_second.max(1) as f64,
        );
        let floor = self.start + self.bounds.grace + earned;
        if floor < idle {
            (floor, StallKind::UnderFloor)
        } else {
            (idle, StallKind::Idle)
        }
    }

    /// Records the cut (the first of the operation is kept) and returns it.
    fn cut(&self, kind: StallKind, answering: bool) -> Stall {
        let stall = Stall {
            request: self.request.clone(),
            answering,
            moved: self.moved.load(Ordering::Relaxed),
            elapsed: self.start.elapsed(),
            kind,
            bounds: self.bounds,
        };
        self.stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert_with(|| stall.clone());
        stall
    }

    /// Polls `sleep` against the meter's deadline: ready with the cut once a bound is broken.
    fn poll_bound(
        &self,
        sleep: &mut Pin<Box<Sleep>>,
        answering: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Stall> {
        loop {
            let (deadline, kind) = self.deadline();
            if Instant::now() >= deadline {
                return Poll::Ready(self.cut(kind, answering));
            }
            sleep.as_mut().reset(deadline);
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// Awaits `future` (the request until its answer's head) within the bounds; `Err` with the cut
    /// when one is broken first.
    pub(crate) async fn within<F: Future>(&self, future: F) -> Result<F::Output, Stall> {
        let mut future = std::pin::pin!(future);
        let mut sleep = Box::pin(tokio::time::sleep_until(self.deadline().0));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            self.poll_bound(&mut sleep, false, cx).map(Err)
        })
        .await
    }
}

/// A body whose bytes count on a [`Meter`]; the answer's body (`enforcing`) also ends with an error
/// once the meter's bounds are broken, which cuts libgit2's connection.
pub(crate) struct Metered<B> {
    inner: B,
    meter: Arc<Meter>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Metered<B> {
    /// Counts `inner`'s bytes only (the request body: the answer's side enforces).
    pub(crate) fn counting(inner: B, meter: Arc<Meter>) -> Metered<B> {
        Metered {
            inner,
            meter,
            sleep: None,
        }
    }

    /// Counts `inner`'s bytes and ends it with an error when a bound is broken.
    pub(crate) fn enforcing(inner: B, meter: Arc<Meter>) -> Metered<B> {
        let sleep = Box::pin(tokio::time::sleep_until(meter.deadline().0));
        Metered {
            inner,
            meter,
            sleep: Some(sleep),
        }
    }
}

/// The error an enforcing body ends with.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Cut(Stall);

impl<B> Body for Metered<B>
where
    B: Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.meter.record(data.remaining());
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(Some(Err(err))) => return Poll::Ready(Some(Err(err.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match &mut this.sleep {
            Some(sleep) => this
                .meter
                .poll_bound(sleep, true, cx)
                .map(|stall| Some(Err(Box::new(Cut(stall)) as Self::Error))),
            None => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
