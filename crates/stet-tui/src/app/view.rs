//! What the theater knows about one dispatch, folded from its `Event`s alone (DESIGN §3: the UI never
//! asks the engine for state), and kept bounded however much the agent prints.

use std::collections::VecDeque;

use chrono::{DateTime, TimeDelta, Utc};

use crate::app::review::PatchState;
use stet_protocol::event::{
    ChangedPath, DispatchId, Event, EventKind, GateFindings, HeldPathReport, ItemKind,
    PullRequestAction, SecretReport, TeardownStepReport, Usage,
};
use stet_protocol::state::Phase;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizedText;

/// How many transcript items a dispatch keeps for display unless told otherwise.
pub const DEFAULT_TRANSCRIPT_CAPACITY: usize = 10_000;

/// How much of one transcript item or warning is kept for display; the rest is in the run record.
pub const MAX_DISPLAY_TEXT_BYTES: usize = 64 * 1024;

/// How many warnings a dispatch keeps for display.
pub const MAX_WARNINGS: usize = 256;

/// A FIFO that keeps the newest `capacity` items and counts the ones it let go.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundedRing<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

impl<T> BoundedRing<T> {
    /// A ring holding at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> BoundedRing<T> {
        BoundedRing {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Appends `item`, letting the oldest go when the ring is full.
    pub fn push(&mut self, item: T) {
        if self.items.len() == self.capacity {
            self.items.pop_front();
            self.dropped = self.dropped.saturating_add(1);
        }
        self.items.push_back(item);
    }

    /// The kept items, oldest first.
    pub fn items(&self) -> &VecDeque<T> {
        &self.items
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many older items were dropped from view.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Sanitized text cut to at most [`MAX_DISPLAY_TEXT_BYTES`] on a character boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClippedText {
    text: String,
    hidden_bytes: usize,
}

impl ClippedText {
    pub fn new(text: SanitizedText) -> ClippedText {
        let mut text = text.into_string();
        let mut keep = text.len().min(MAX_DISPLAY_TEXT_BYTES);
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        let hidden_bytes = text.len() - keep;
        text.truncate(keep);
        ClippedText { text, hidden_bytes }
    }

    /// The kept part, still sanitized (a prefix of redacted text reveals nothing).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many bytes were cut off the end (0 when the text is whole).
    pub fn hidden_bytes(&self) -> usize {
        self.hidden_bytes
    }
}

/// One transcript item as displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptLine {
    pub kind: ItemKind,
    pub text: ClippedText,
}

/// A cost ceiling a meter can measure against: a positive, finite number of dollars, else none.
pub(crate) fn positive_ceiling(ceiling: Option<f64>) -> Option<f64> {
    ceiling.filter(|usd| usd.is_finite() && *usd > 0.0)
}

/// What the dispatch said it will do (from its `dispatched` event).
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchPlan {
    pub title: SanitizedText,
    pub repo: SanitizedText,
    pub base: SanitizedText,
    pub branch: SanitizedText,
    pub harness: SanitizedText,
    pub image: SanitizedText,
    /// The ceiling the dispatch runs under, as its first event said.
    pub cost_ceiling_usd: Option<f64>,
}

/// One phase on the timeline: when it began and, once left, how long it lasted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseSpan {
    pub phase: Phase,
    pub started: DateTime<Utc>,
    pub duration: Option<TimeDelta>,
    /// Why the dispatch entered this phase, when the engine said (failures).
    pub reason: Option<SanitizedText>,
}

impl PhaseSpan {
    /// The span's length: its duration once left, the time so far while current.
    pub fn elapsed(&self, now: DateTime<Utc>) -> TimeDelta {
        self.duration
            .unwrap_or_else(|| (now - self.started).max(TimeDelta::zero()))
    }
}

/// The cost meter, which exists only once the harness reported usage.
#[derive(Debug, Clone, PartialEq)]
pub struct CostMeter {
    /// The model of the latest request.
    pub model: SanitizedText,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// The engine's running total.
    pub total_cost_usd: f64,
    pub requests: u64,
    /// Requests whose cost neither the endpoint nor the price table knew.
    pub unpriced_requests: u64,
    pub first_report: DateTime<Utc>,
}

impl CostMeter {
    fn new(usage: &Usage, ts: DateTime<Utc>) -> CostMeter {
        CostMeter {
            model: usage.model.clone(),
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            total_cost_usd: 0.0,
            requests: 0,
            unpriced_requests: 0,
            first_report: ts,
        }
    }

    fn add(&mut self, usage: Usage) {
        self.model = usage.model;
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(usage.cached_tokens);
        self.total_cost_usd = usage.total_cost_usd;
        self.requests = self.requests.saturating_add(1);
        if usage.cost_usd.is_none() {
            self.unpriced_requests = self.unpriced_requests.saturating_add(1);
        }
    }
}

/// The latest image-pull progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePullProgress {
    pub image: SanitizedText,
    pub layer: Option<SanitizedText>,
    pub status: SanitizedText,
    pub current_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
}

/// The trusted import of the agent's work, for the review gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedResult {
    pub commit: CommitSha,
    pub reference: SanitizedText,
    pub files: Vec<ChangedPath>,
    pub insertions: usize,
    pub deletions: usize,
    /// Changed paths held for review, as `path (rule)` (the only form older run records have).
    pub protected: Vec<SanitizedText>,
    /// Changed paths held for review, each with the rule holding it.
    pub held: Vec<HeldPathReport>,
    /// Secrets the scan of the added content found.
    pub secrets: Vec<SecretReport>,
}

/// The branch stet pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedBranch {
    pub branch: SanitizedText,
    pub sha: CommitSha,
    pub remote: SanitizedText,
}

/// The pull request stet opened or updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestLink {
    pub action: PullRequestAction,
    pub number: u64,
    pub url: SanitizedText,
}

/// How the sandbox was torn down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    pub steps: Vec<TeardownStepReport>,
    pub millis: u64,
}

/// How the dispatch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub phase: Phase,
    pub exit_code: u8,
    pub reason: Option<SanitizedText>,
}

/// Everything the panes show about one dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchView {
    pub id: DispatchId,
    pub brief: String,
    /// `None` until the `dispatched` event arrives.
    pub plan: Option<DispatchPlan>,
    pub phase: Phase,
    /// Every phase entered, in order; the last one is current.
    pub timeline: Vec<PhaseSpan>,
    pub transcript: BoundedRing<TranscriptLine>,
    /// `None` means "no usage reported".
    pub cost: Option<CostMeter>,
    pub image_pull: Option<ImagePullProgress>,
    pub warnings: BoundedRing<ClippedText>,
    pub collected: Option<CollectedResult>,
    /// The collected result's patch, once asked for (the loop reads it from the run record).
    pub patch: Option<PatchState>,
    pub pushed: Option<PushedBranch>,
    pub pull_request: Option<PullRequestLink>,
    pub teardown: Option<Teardown>,
    /// `None` while the dispatch is in flight.
    pub outcome: Option<Outcome>,
}

impl DispatchView {
    /// A dispatch first heard of at `ts`, queued until its events say otherwise.
    pub fn new(
        id: DispatchId,
        brief: String,
        ts: DateTime<Utc>,
        transcript_capacity: usize,
    ) -> DispatchView {
        DispatchView {
            id,
            brief,
            plan: None,
            phase: Phase::Queued,
            timeline: vec![PhaseSpan {
                phase: Phase::Queued,
                started: ts,
                duration: None,
                reason: None,
            }],
            transcript: BoundedRing::new(transcript_capacity),
            cost: None,
            image_pull: None,
            warnings: BoundedRing::new(MAX_WARNINGS),
            collected: None,
            patch: None,
            pushed: None,
            pull_request: None,
            teardown: None,
            outcome: None,
        }
    }

    /// Whether the dispatch has not finished yet.
    pub fn in_flight(&self) -> bool {
        self.outcome.is_none()
    }

    /// Dollars per minute since the first usage report; `None` without usage or elapsed time.
    pub fn usd_per_minute(&self, now: DateTime<Utc>) -> Option<f64> {
        let cost = self.cost.as_ref()?;
        let millis = (now - cost.first_report).num_milliseconds();
        (millis > 0).then(|| cost.total_cost_usd * 60_000.0 / millis as f64)
    }

    /// Folds one event of this dispatch into the view.
    pub fn apply(&mut self, event: Event) {
        let ts = event.ts;
        match event.kind {
            EventKind::Dispatched {
                title,
                repo,
                base,
                branch,
                harness,
                image,
                cost_ceiling_usd,
            } => {
                self.plan = Some(DispatchPlan {
                    title,
                    repo,
                    base,
                    branch,
                    harness,
                    image,
                    cost_ceiling_usd: positive_ceiling(cost_ceiling_usd),
                });
            }
            EventKind::Phase { to, reason, .. } => self.enter(to, ts, reason),
            EventKind::Transcript(item) => self.transcript.push(TranscriptLine {
                kind: item.item,
                text: ClippedText::new(item.text),
            }),
            EventKind::Usage(usage) => self
                .cost
                .get_or_insert_with(|| CostMeter::new(&usage, ts))
                .add(usage),
            EventKind::ImagePull {
                image,
                layer,
                status,
                current_bytes,
                total_bytes,
            } => {
                self.image_pull = Some(ImagePullProgress {
                    image,
                    layer,
                    status,
                    current_bytes,
                    total_bytes,
                });
            }
            EventKind::Warning { message } => self.warnings.push(ClippedText::new(message)),
            EventKind::Collected {
                commit,
                reference,
                files,
                insertions,
                deletions,
                gate,
            } => {
                let GateFindings {
                    protected,
                    held,
                    secrets,
                } = *gate;
                self.collected = Some(CollectedResult {
                    commit,
                    reference,
                    files,
                    insertions,
                    deletions,
                    protected,
                    held,
                    secrets,
                });
                self.patch = Some(PatchState::Loading);
            }
            EventKind::Pushed {
                branch,
                sha,
                remote,
            } => {
                self.pushed = Some(PushedBranch {
                    branch,
                    sha,
                    remote,
                })
            }
            EventKind::PullRequest {
                action,
                number,
                url,
            } => {
                self.pull_request = Some(PullRequestLink {
                    action,
                    number,
                    url,
                });
            }
            EventKind::TornDown { steps, millis } => {
                self.teardown = Some(Teardown { steps, millis });
            }
            EventKind::Finished {
                outcome,
                exit_code,
                reason,
            } => {
                self.enter(outcome, ts, None);
                self.outcome = Some(Outcome {
                    phase: outcome,
                    exit_code,
                    reason,
                });
            }
        }
    }

    /// Moves to `phase` at `ts`, closing the current span; staying in the same phase is no move.
    fn enter(&mut self, phase: Phase, ts: DateTime<Utc>, reason: Option<SanitizedText>) {
        if let Some(current) = self.timeline.last_mut() {
            if current.phase == phase {
                if current.reason.is_none() {
                    current.reason = reason;
                }
                return;
            }
            current.duration = Some((ts - current.started).max(TimeDelta::zero()));
        }
        self.phase = phase;
        self.timeline.push(PhaseSpan {
            phase,
            started: ts,
            duration: None,
            reason,
        });
    }
}

/// A brief's last-run status in the inbox, from its newest dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Badge {
    /// Never dispatched in this session.
    New,
    /// Requested, or waiting for a concurrency slot.
    Queued,
    Running(Phase),
    AwaitingReview,
    /// Done, with the pull request it opened or updated.
    PullRequest(u64),
    Done,
    Failed,
    Cancelled,
    TimedOut,
    CeilingHit,
}

impl Badge {
    pub(super) fn of(view: &DispatchView) -> Badge {
        match view.phase {
            Phase::Queued => Badge::Queued,
            Phase::AwaitingApproval => Badge::AwaitingReview,
            Phase::Done => match &view.pull_request {
                Some(pull_request) => Badge::PullRequest(pull_request.number),
                None => Badge::Done,
            },
            Phase::Failed => Badge::Failed,
            Phase::Cancelled => Badge::Cancelled,
            Phase::TimedOut => Badge::TimedOut,
            Phase::CostCeilingHit => Badge::CeilingHit,
            phase @ (Phase::Preflight
            | Phase::Provisioning
            | Phase::Running
            | Phase::Collecting
            | Phase::Pushing
            | Phase::OpeningPr) => Badge::Running(phase),
        }
    }
}
