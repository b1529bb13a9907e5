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

    /// How many items are kept.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no item is kept.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The most items kept; older ones are dropped.
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
    /// `text`, clipped.
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
    /// What the agent did: said, thought, ran, printed.
    pub kind: ItemKind,
    /// The item's text.
    pub text: ClippedText,
}

/// A cost ceiling a meter can measure against: a positive, finite number of dollars, else none.
pub(crate) fn positive_ceiling(ceiling: Option<f64>) -> Option<f64> {
    ceiling.filter(|usd| usd.is_finite() && *usd > 0.0)
}

/// What the dispatch said it will do (from its `dispatched` event).
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchPlan {
    /// The brief's title.
    pub title: SanitizedText,
    /// The target repository (`owner/name`).
    pub repo: SanitizedText,
    /// The base branch.
    pub base: SanitizedText,
    /// The branch the result goes to.
    pub branch: SanitizedText,
    /// Which harness runs the agent.
    pub harness: SanitizedText,
    /// The sandbox image, by digest or local id.
    pub image: SanitizedText,
    /// The ceiling the dispatch runs under, as its first event said.
    pub cost_ceiling_usd: Option<f64>,
}

/// One phase on the timeline: when it began and, once left, how long it lasted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseSpan {
    /// The phase.
    pub phase: Phase,
    /// When the dispatch entered it.
    pub started: DateTime<Utc>,
    /// How long it lasted; `None` while it is current.
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
    /// Prompt tokens so far, cache reads included.
    pub input_tokens: u64,
    /// Completion tokens so far.
    pub output_tokens: u64,
    /// Prompt tokens read from a cache so far.
    pub cached_tokens: u64,
    /// The engine's running total.
    pub total_cost_usd: f64,
    /// Model requests metered so far.
    pub requests: u64,
    /// Requests whose cost neither the endpoint nor the price table knew.
    pub unpriced_requests: u64,
    /// When the first usage arrived (the meter's rate is measured from it).
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
    /// The image being pulled.
    pub image: SanitizedText,
    /// The layer the report is about, when it is about one.
    pub layer: Option<SanitizedText>,
    /// The engine's words (`Downloading`, `Pull complete`, …).
    pub status: SanitizedText,
    /// Bytes of the layer so far, when the engine says.
    pub current_bytes: Option<u64>,
    /// The layer's size, when the engine says.
    pub total_bytes: Option<u64>,
}

/// The trusted import of the agent's work, for the review gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedResult {
    /// The trusted commit stet made of the agent's work.
    pub commit: CommitSha,
    /// Where the commit is kept until it is pushed (`refs/stet/<dispatch>`).
    pub reference: SanitizedText,
    /// The changed paths, each with how it changed (the first of them, when there are many).
    pub files: Vec<ChangedPath>,
    /// Changed paths the event counted but did not list.
    pub files_not_listed: usize,
    /// Lines added.
    pub insertions: usize,
    /// Lines removed.
    pub deletions: usize,
    /// Changed paths held for review, as `path (rule)` (the only form older run records have).
    pub protected: Vec<SanitizedText>,
    /// Changed paths held for review, each with the rule holding it.
    pub held: Vec<HeldPathReport>,
    /// Secrets the scan of the added content found.
    pub secrets: Vec<SecretReport>,
    /// Held paths the event counted but did not list.
    pub held_not_listed: usize,
    /// Secrets the event counted but did not list.
    pub secrets_not_listed: usize,
}

/// The branch stet pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedBranch {
    /// The branch.
    pub branch: SanitizedText,
    /// The commit it points at.
    pub sha: CommitSha,
    /// Where it was pushed (the remote's URL, without credentials).
    pub remote: SanitizedText,
}

/// The pull request stet opened or updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestLink {
    /// Whether it was opened or updated.
    pub action: PullRequestAction,
    /// Its number on the forge.
    pub number: u64,
    /// Its web address.
    pub url: SanitizedText,
}

/// How the sandbox was torn down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    /// Each step and how it went.
    pub steps: Vec<TeardownStepReport>,
    /// How long the whole teardown took, in milliseconds.
    pub millis: u64,
}

/// How the dispatch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The terminal phase.
    pub phase: Phase,
    /// The exit code `--headless` would give it (DESIGN §6).
    pub exit_code: u8,
    /// Why it did not end `done`, when it did not.
    pub reason: Option<SanitizedText>,
}

/// Everything the panes show about one dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchView {
    /// The dispatch.
    pub id: DispatchId,
    /// The id of the brief it runs.
    pub brief: String,
    /// `None` until the `dispatched` event arrives.
    pub plan: Option<DispatchPlan>,
    /// The current phase.
    pub phase: Phase,
    /// Every phase entered, in order; the last one is current.
    pub timeline: Vec<PhaseSpan>,
    /// The latest transcript items (older ones dropped past the capacity).
    pub transcript: BoundedRing<TranscriptLine>,
    /// `None` means "no usage reported".
    pub cost: Option<CostMeter>,
    /// The model gateway's last refusal of an agent request: its field and rule.
    pub last_refusal: Option<(ClippedText, SanitizedText)>,
    /// What the agent's egress proxy let through and refused, once it asked for a connection.
    pub network: Option<NetworkLine>,
    /// The latest image-pull report, while the image is pulled.
    pub image_pull: Option<ImagePullProgress>,
    /// The engine's warnings (teardown trouble, dropped output), the latest kept.
    pub warnings: BoundedRing<ClippedText>,
    /// The trusted import of the agent's work, once collected.
    pub collected: Option<CollectedResult>,
    /// The collected result's patch, once asked for (the loop reads it from the run record).
    pub patch: Option<PatchState>,
    /// The branch stet pushed, once pushed.
    pub pushed: Option<PushedBranch>,
    /// The pull request, once opened or updated.
    pub pull_request: Option<PullRequestLink>,
    /// How the sandbox was torn down, once it was.
    pub teardown: Option<Teardown>,
    /// `None` while the dispatch is in flight.
    pub outcome: Option<Outcome>,
}

/// The network line of a dispatch whose agent reached out through the egress proxy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkLine {
    /// Connections allowed.
    pub allowed: u64,
    /// Connections refused.
    pub refused: u64,
    /// The last refusal: the host, its port and the line that would allow it (or why not).
    pub last_refused: Option<(ClippedText, u16, ClippedText)>,
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
            last_refusal: None,
            network: None,
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

    /// Whether the dispatch left the review gate for its current phase without being pushed: its
    /// result was discarded (or the dispatch cancelled while it waited for review).
    pub fn left_review(&self) -> bool {
        let mut phases = self.timeline.iter().rev().map(|span| span.phase);
        phases.next() == Some(Phase::Cancelled) && phases.next() == Some(Phase::AwaitingApproval)
    }

    /// Whether the dispatch got as far as provisioning a sandbox (so there is one to tear down).
    pub fn provisioned(&self) -> bool {
        self.timeline
            .iter()
            .any(|span| span.phase == Phase::Provisioning)
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
            EventKind::GatewayRefusal { field, rule, .. } => {
                self.last_refusal = Some((ClippedText::new(field), rule));
            }
            // The run record keeps it; the meter line already counts what its calls cost.
            EventKind::GatewayEgress { .. } => {}
            EventKind::Egress {
                host,
                port,
                allowed,
                outcome,
                hint,
                ..
            } => {
                let network = self.network.get_or_insert_with(NetworkLine::default);
                if allowed {
                    network.allowed += 1;
                } else {
                    network.refused += 1;
                    network.last_refused = Some((
                        ClippedText::new(host),
                        port,
                        ClippedText::new(hint.unwrap_or(outcome)),
                    ));
                }
            }
            EventKind::EgressSummary {
                allowed, refused, ..
            } => {
                let network = self.network.get_or_insert_with(NetworkLine::default);
                network.allowed = allowed;
                network.refused = refused;
            }
            EventKind::Warning { message } => self.warnings.push(ClippedText::new(message)),
            EventKind::Collected {
                commit,
                reference,
                files,
                files_not_listed,
                insertions,
                deletions,
                gate,
            } => {
                let GateFindings {
                    protected,
                    held,
                    secrets,
                    held_not_listed,
                    secrets_not_listed,
                } = *gate;
                self.collected = Some(CollectedResult {
                    commit,
                    reference,
                    files,
                    files_not_listed,
                    insertions,
                    deletions,
                    protected,
                    held,
                    secrets,
                    held_not_listed,
                    secrets_not_listed,
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
    /// Never dispatched: not in this session, and no run record of it either.
    New,
    /// Requested, or waiting for a concurrency slot.
    Queued,
    /// In flight, in this phase.
    Running(Phase),
    /// Collected and waiting for the person's decision.
    AwaitingReview,
    /// Done, with the pull request it opened or updated.
    PullRequest(u64),
    /// Done without a pull request (kept, discarded or nothing to push).
    Done,
    /// Ended with an error.
    Failed,
    /// Cancelled by the person.
    Cancelled,
    /// Its result was thrown away at review.
    Discarded,
    /// Ran past its wall-clock timeout.
    TimedOut,
    /// Stopped at its cost ceiling.
    CeilingHit,
}

impl Badge {
    /// What the badge says.
    pub fn label(self) -> String {
        match self {
            Badge::New => "new".to_owned(),
            Badge::Queued => "queued".to_owned(),
            Badge::Running(phase) => phase.label().to_owned(),
            Badge::AwaitingReview => "awaiting review".to_owned(),
            Badge::PullRequest(number) => format!("PR #{number}"),
            Badge::Done => "done".to_owned(),
            Badge::Failed => "failed".to_owned(),
            Badge::Cancelled => "cancelled".to_owned(),
            Badge::Discarded => "discarded".to_owned(),
            Badge::TimedOut => "timed out".to_owned(),
            Badge::CeilingHit => "ceiling hit".to_owned(),
        }
    }

    /// The badge of `view`, from its current phase and what it went through.
    pub fn of(view: &DispatchView) -> Badge {
        match view.phase {
            Phase::Queued => Badge::Queued,
            Phase::AwaitingApproval => Badge::AwaitingReview,
            Phase::Done => match &view.pull_request {
                Some(pull_request) => Badge::PullRequest(pull_request.number),
                None => Badge::Done,
            },
            Phase::Failed => Badge::Failed,
            Phase::Cancelled if view.left_review() => Badge::Discarded,
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
