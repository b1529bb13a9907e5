//! The theater's state and its one `update` function: no I/O and no terminal, so every key and every
//! engine event can be tested as a plain value (the Elm shape codex-rs and gitui use).

mod navigation;
mod view;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::brief::{Brief, BriefError};
use crate::dispatch::event::{DispatchId, Event};
use crate::dispatch::state::Phase;
use crate::inbox::InboxEntry;
use crate::ui::theme::Theme;

pub use navigation::{Focus, TranscriptScroll};
pub use view::{
    BoundedRing, ClippedText, CollectedResult, CostMeter, DEFAULT_TRANSCRIPT_CAPACITY,
    DispatchPlan, DispatchView, ImagePullProgress, MAX_DISPLAY_TEXT_BYTES, MAX_WARNINGS, Outcome,
    PhaseSpan, PullRequestLink, PushedBranch, Teardown, TranscriptLine,
};

/// One line of the inbox: a brief that can be dispatched, or a file that failed to read.
#[derive(Debug, Clone, PartialEq)]
pub enum InboxRow {
    Brief(Box<Brief>),
    Invalid {
        file: PathBuf,
        /// The line the problem is on, when the reader knows it.
        line: Option<usize>,
        reason: String,
    },
}

impl InboxRow {
    fn from_entry(entry: &InboxEntry) -> InboxRow {
        match &entry.brief {
            Ok(brief) => InboxRow::Brief(Box::new(brief.clone())),
            Err(error) => InboxRow::Invalid {
                file: entry.path.clone(),
                line: error_line(error),
                reason: error.to_string(),
            },
        }
    }

    /// The brief's id; `None` for a file that failed to read.
    pub fn brief_id(&self) -> Option<&str> {
        match self {
            InboxRow::Brief(brief) => Some(&brief.id),
            InboxRow::Invalid { .. } => None,
        }
    }
}

fn error_line(error: &BriefError) -> Option<usize> {
    match error {
        BriefError::NotUtf8 { line, .. }
        | BriefError::Toml { line, .. }
        | BriefError::Invalid { line, .. }
        | BriefError::Branch { line, .. } => Some(*line),
        BriefError::Read { .. }
        | BriefError::NotAFile { .. }
        | BriefError::TooLarge { .. }
        | BriefError::InvalidId { .. } => None,
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
    fn of(view: &DispatchView) -> Badge {
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

/// Everything that can change the app: engine events, the clock, and what the keymap asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Engine(Event),
    /// Everything pending on the event channel, drained at once for one frame.
    EngineBatch(Vec<Event>),
    /// The engine refused a request the app made; `reason` is its error, shown as the status.
    RequestFailed {
        request: Request,
        reason: String,
    },
    Tick(DateTime<Utc>),
    SelectNext,
    SelectPrevious,
    DispatchSelected,
    CancelSelected,
    ConfirmYes,
    ConfirmNo,
    Approve,
    Discard,
    Quit,
    /// Move the focus to the next pane.
    FocusNext,
    /// Scroll the transcript this many items towards the start (stops following the tail).
    ScrollUp(usize),
    /// Scroll the transcript this many items towards the end.
    ScrollDown(usize),
    /// Jump to the transcript's end and follow it again.
    FollowTail,
    ToggleHelp,
    /// Close the help overlay, or leave the review gate for the transcript.
    Back,
    /// Show the review gate again after `Back` left it.
    OpenReview,
}

/// What the app asks of the engine (sent as a `Command` through the `DispatchHandle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Dispatch {
        brief: String,
    },
    Cancel(DispatchId),
    Approve(DispatchId),
    Discard(DispatchId),
    /// Cancel every dispatch and tear everything down before exiting.
    Shutdown,
}

impl Request {
    fn verb(&self) -> &'static str {
        match self {
            Request::Dispatch { .. } => "dispatch",
            Request::Cancel(_) => "cancel",
            Request::Approve(_) => "approve",
            Request::Discard(_) => "discard",
            Request::Shutdown => "shut down",
        }
    }
}

/// A question waiting for `ConfirmYes` or `ConfirmNo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Dispatch the brief with this id.
    Dispatch(String),
    Cancel(DispatchId),
    /// Quit although dispatches are running: they are cancelled and torn down first.
    Quit,
}

/// The theater's whole state.
#[derive(Debug, Clone)]
pub struct App {
    rows: Vec<InboxRow>,
    selected: usize,
    dispatches: HashMap<DispatchId, DispatchView>,
    /// Dispatch ids in the order they were first heard of.
    order: Vec<DispatchId>,
    newest_by_brief: HashMap<String, DispatchId>,
    /// Briefs asked for whose first event has not arrived yet.
    requested: HashSet<String>,
    confirm: Option<Confirm>,
    status: Option<String>,
    quitting: bool,
    changed: bool,
    now: DateTime<Utc>,
    transcript_capacity: usize,
    theme: Theme,
    /// The per-dispatch cost ceiling in dollars, when configured.
    cost_ceiling: Option<f64>,
    focus: Focus,
    scroll: TranscriptScroll,
    help: bool,
    /// The dispatch whose review gate the person left with `Back`.
    review_left: Option<DispatchId>,
}

impl App {
    /// An app over `entries` (the inbox, in order), keeping the default transcript ring.
    pub fn new(entries: &[InboxEntry], now: DateTime<Utc>) -> App {
        App::with_transcript_capacity(entries, now, DEFAULT_TRANSCRIPT_CAPACITY)
    }

    /// An app keeping at most `capacity` transcript items per dispatch for display.
    pub fn with_transcript_capacity(
        entries: &[InboxEntry],
        now: DateTime<Utc>,
        capacity: usize,
    ) -> App {
        App {
            rows: entries.iter().map(InboxRow::from_entry).collect(),
            selected: 0,
            dispatches: HashMap::new(),
            order: Vec::new(),
            newest_by_brief: HashMap::new(),
            requested: HashSet::new(),
            confirm: None,
            status: None,
            quitting: false,
            changed: true,
            now,
            transcript_capacity: capacity,
            theme: Theme::default(),
            cost_ceiling: None,
            focus: Focus::default(),
            scroll: TranscriptScroll::default(),
            help: false,
            review_left: None,
        }
    }

    /// Applies `msg`; returns what to ask of the engine, if anything.
    pub fn update(&mut self, msg: Msg) -> Option<Request> {
        match msg {
            Msg::Engine(event) => {
                self.apply(event);
                None
            }
            Msg::EngineBatch(events) => {
                for event in events {
                    self.apply(event);
                }
                None
            }
            Msg::RequestFailed { request, reason } => {
                if let Request::Dispatch { brief } = &request {
                    self.requested.remove(brief);
                }
                self.set_status(format!("cannot {}: {reason}", request.verb()));
                None
            }
            Msg::Tick(now) => {
                self.now = now;
                if self.running_count() > 0 {
                    self.changed = true;
                }
                None
            }
            Msg::ConfirmYes => self.accept(),
            Msg::ConfirmNo => {
                if self.confirm.take().is_some() {
                    self.changed = true;
                }
                None
            }
            intent if self.confirm.is_none() => self.intent(intent),
            _ => None,
        }
    }

    /// Returns whether anything changed since the last call, and forgets it.
    pub fn take_changed(&mut self) -> bool {
        std::mem::replace(&mut self.changed, false)
    }

    /// Whether the app may exit: quitting, and every dispatch finished.
    pub fn can_exit(&self) -> bool {
        self.quitting && self.running_count() == 0
    }

    pub fn is_quitting(&self) -> bool {
        self.quitting
    }

    /// The inbox, in file-name order.
    pub fn rows(&self) -> &[InboxRow] {
        &self.rows
    }

    /// The index of the selected row; `None` when the inbox is empty.
    pub fn selected(&self) -> Option<usize> {
        (self.selected < self.rows.len()).then_some(self.selected)
    }

    pub fn selected_row(&self) -> Option<&InboxRow> {
        self.rows.get(self.selected)
    }

    /// The newest dispatch of the selected brief.
    pub fn selected_dispatch(&self) -> Option<&DispatchView> {
        self.newest(self.selected_row()?.brief_id()?)
    }

    /// The newest dispatch of brief `id`.
    pub fn newest(&self, id: &str) -> Option<&DispatchView> {
        self.dispatches.get(self.newest_by_brief.get(id)?)
    }

    pub fn dispatch(&self, id: DispatchId) -> Option<&DispatchView> {
        self.dispatches.get(&id)
    }

    /// Every dispatch heard of, oldest first.
    pub fn dispatches(&self) -> impl Iterator<Item = &DispatchView> {
        self.order.iter().filter_map(|id| self.dispatches.get(id))
    }

    /// How many dispatches have not finished.
    pub fn running_count(&self) -> usize {
        self.dispatches
            .values()
            .filter(|view| view.in_flight())
            .count()
    }

    /// The last-run badge of brief `id`.
    pub fn badge(&self, id: &str) -> Badge {
        if self.requested.contains(id) {
            return Badge::Queued;
        }
        self.newest(id).map_or(Badge::New, Badge::of)
    }

    pub fn confirm(&self) -> Option<&Confirm> {
        self.confirm.as_ref()
    }

    /// The latest one-line message for the person (refusals, what is happening).
    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// The time of the latest tick, for live elapsed times.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// Draws with `theme` from now on (`Theme::from_env()` honours `NO_COLOR`).
    pub fn set_theme(&mut self, theme: Theme) {
        self.theme = theme;
        self.changed = true;
    }

    pub fn theme(&self) -> Theme {
        self.theme
    }

    /// Sets the per-dispatch cost ceiling in dollars the meter measures against (`None`: unknown).
    pub fn set_cost_ceiling(&mut self, ceiling: Option<f64>) {
        self.cost_ceiling = ceiling.filter(|usd| usd.is_finite() && *usd > 0.0);
        self.changed = true;
    }

    pub fn cost_ceiling(&self) -> Option<f64> {
        self.cost_ceiling
    }

    pub fn focus(&self) -> Focus {
        self.focus
    }

    /// The selected dispatch's transcript position.
    pub fn scroll(&self) -> TranscriptScroll {
        self.scroll
    }

    pub fn help_open(&self) -> bool {
        self.help
    }

    /// The selected dispatch when its review gate is showing: it awaits approval and the person has
    /// not left the gate with `Back`.
    pub fn reviewing(&self) -> Option<&DispatchView> {
        self.selected_dispatch().filter(|view| {
            view.in_flight()
                && view.phase == Phase::AwaitingApproval
                && self.review_left != Some(view.id)
        })
    }

    fn apply(&mut self, event: Event) {
        self.changed = true;
        let capacity = self.transcript_capacity;
        let view = self.dispatches.entry(event.dispatch).or_insert_with(|| {
            self.order.push(event.dispatch);
            self.newest_by_brief
                .insert(event.brief.clone(), event.dispatch);
            self.requested.remove(&event.brief);
            DispatchView::new(event.dispatch, event.brief.clone(), event.ts, capacity)
        });
        view.apply(event);
    }

    fn intent(&mut self, msg: Msg) -> Option<Request> {
        match msg {
            Msg::SelectNext => {
                if self.selected + 1 < self.rows.len() {
                    self.select(self.selected + 1);
                }
                None
            }
            Msg::SelectPrevious => {
                if self.selected > 0 {
                    self.select(self.selected - 1);
                }
                None
            }
            Msg::FocusNext => {
                self.focus = self.focus.next();
                self.changed = true;
                None
            }
            Msg::ScrollUp(lines) => {
                let (dropped, len) = self.transcript_extent();
                self.changed |= self.scroll.up(lines, dropped, len);
                None
            }
            Msg::ScrollDown(lines) => {
                let (dropped, len) = self.transcript_extent();
                self.changed |= self.scroll.down(lines, dropped, len);
                None
            }
            Msg::FollowTail => {
                self.changed |= self.scroll.follow();
                None
            }
            Msg::ToggleHelp => {
                self.help = !self.help;
                self.changed = true;
                None
            }
            Msg::Back => {
                if self.help {
                    self.help = false;
                    self.changed = true;
                } else if let Some(id) = self.reviewing().map(|view| view.id) {
                    self.review_left = Some(id);
                    self.changed = true;
                }
                None
            }
            Msg::OpenReview => {
                let waiting = self
                    .selected_dispatch()
                    .filter(|view| view.in_flight() && view.phase == Phase::AwaitingApproval)
                    .is_some();
                if waiting {
                    self.review_left = None;
                    self.changed = true;
                } else {
                    self.set_status("nothing is waiting for review here".to_owned());
                }
                None
            }
            Msg::DispatchSelected => {
                let id = self.dispatchable()?;
                self.ask(Confirm::Dispatch(id));
                None
            }
            Msg::CancelSelected => {
                match self.selected_dispatch().filter(|view| view.in_flight()) {
                    Some(view) => {
                        let id = view.id;
                        self.ask(Confirm::Cancel(id));
                    }
                    None => self.set_status("nothing to cancel here".to_owned()),
                }
                None
            }
            Msg::Approve => self.decision(Request::Approve),
            Msg::Discard => self.decision(Request::Discard),
            Msg::Quit if self.quitting => None,
            Msg::Quit if self.running_count() == 0 => {
                self.quitting = true;
                self.changed = true;
                Some(Request::Shutdown)
            }
            Msg::Quit => {
                self.ask(Confirm::Quit);
                None
            }
            Msg::Engine(_)
            | Msg::EngineBatch(_)
            | Msg::RequestFailed { .. }
            | Msg::Tick(_)
            | Msg::ConfirmYes
            | Msg::ConfirmNo => None,
        }
    }

    fn accept(&mut self) -> Option<Request> {
        let confirm = self.confirm.take()?;
        self.changed = true;
        match confirm {
            Confirm::Dispatch(id) => {
                if self.in_flight_elsewhere(&id) {
                    return None;
                }
                self.requested.insert(id.clone());
                self.set_status(format!("dispatching {id}"));
                Some(Request::Dispatch { brief: id })
            }
            Confirm::Cancel(id) => match self.dispatches.get(&id) {
                Some(view) if view.in_flight() => {
                    self.set_status(format!("cancelling {id}"));
                    Some(Request::Cancel(id))
                }
                _ => {
                    self.set_status(format!("{id} has already finished"));
                    None
                }
            },
            Confirm::Quit => {
                self.quitting = true;
                let running = self.running_count();
                self.set_status(format!(
                    "cancelling {running} running dispatch(es); waiting for teardown"
                ));
                Some(Request::Shutdown)
            }
        }
    }

    /// The selected brief's id when it may be dispatched now; otherwise says why not.
    fn dispatchable(&mut self) -> Option<String> {
        if self.quitting {
            self.set_status("stet is shutting down; no new dispatch starts".to_owned());
            return None;
        }
        let row = self.selected_row()?;
        match row {
            InboxRow::Invalid { file, .. } => {
                let message = format!("{} cannot be dispatched: fix the file", file.display());
                self.set_status(message);
                None
            }
            InboxRow::Brief(brief) => {
                let id = brief.id.clone();
                (!self.in_flight_elsewhere(&id)).then_some(id)
            }
        }
    }

    /// Whether brief `id` already has a dispatch requested or in flight; if so, says so.
    fn in_flight_elsewhere(&mut self, id: &str) -> bool {
        let message = if self.requested.contains(id) {
            format!("brief {id:?} was just dispatched; wait for it or cancel it")
        } else if let Some(view) = self.newest(id).filter(|view| view.in_flight()) {
            format!(
                "brief {id:?} is already being dispatched ({}); cancel it first",
                view.id
            )
        } else {
            return false;
        };
        self.set_status(message);
        true
    }

    /// Approve or discard the selected dispatch, which must be waiting for review.
    fn decision(&mut self, request: fn(DispatchId) -> Request) -> Option<Request> {
        let waiting = self
            .selected_dispatch()
            .filter(|view| view.in_flight() && view.phase == Phase::AwaitingApproval)
            .map(|view| view.id);
        match waiting {
            Some(id) => {
                self.changed = true;
                Some(request(id))
            }
            None => {
                self.set_status("nothing is waiting for review here".to_owned());
                None
            }
        }
    }

    /// Selects row `index`; the transcript of the newly selected brief starts at its tail.
    fn select(&mut self, index: usize) {
        self.selected = index;
        self.scroll = TranscriptScroll::default();
        self.changed = true;
    }

    /// How many items the selected transcript dropped, and how many it keeps.
    fn transcript_extent(&self) -> (u64, usize) {
        self.selected_dispatch().map_or((0, 0), |view| {
            (view.transcript.dropped(), view.transcript.len())
        })
    }

    fn ask(&mut self, confirm: Confirm) {
        self.confirm = Some(confirm);
        self.changed = true;
    }

    fn set_status(&mut self, message: String) {
        self.status = Some(message);
        self.changed = true;
    }
}

#[cfg(test)]
pub(crate) mod tests;
