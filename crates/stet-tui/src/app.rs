//! The theater's state and its one `update` function: no I/O and no terminal, so every key and every
//! engine event can be tested as a plain value (the Elm shape codex-rs and gitui use).

mod inbox;
mod intent;
mod navigation;
mod review;
pub(crate) mod salvaged;
mod search;
mod status;
pub(crate) mod view;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use crossterm::event::KeyEvent;

use crate::form::{BriefDraft, NewBriefForm};
use crate::theme::Theme;
use stet_protocol::brief::{Brief, BriefError};
use stet_protocol::event::{DispatchId, Event};
use stet_protocol::inbox::InboxEntry;
use stet_protocol::state::Phase;

pub use inbox::PastRun;
pub use navigation::{Focus, Pages, TranscriptScroll};
pub use review::{PatchState, PatchText};
pub use salvaged::SalvagedResult;
pub use search::{Direction, MAX_QUERY_CHARS, Search};
pub use view::{
    Badge, BoundedRing, ClippedText, CollectedResult, CostMeter, DEFAULT_TRANSCRIPT_CAPACITY,
    DispatchPlan, DispatchView, ImagePullProgress, MAX_DISPLAY_TEXT_BYTES, MAX_WARNINGS,
    NetworkLine, Outcome, PhaseSpan, PullRequestLink, PushedBranch, Teardown, TranscriptLine,
};

/// One line of the inbox: a brief that can be dispatched, a file that failed to read, or the work
/// the sweep salvaged from a crashed dispatch.
#[derive(Debug, Clone, PartialEq)]
pub enum InboxRow {
    /// A brief read and checked.
    Brief(Box<Brief>),
    /// A file of the inbox that is not a valid brief.
    Invalid {
        /// The file.
        file: PathBuf,
        /// The line the problem is on, when the reader knows it.
        line: Option<usize>,
        /// Why it is not a brief, in the reader's words.
        reason: String,
    },
    /// A crashed dispatch's work, salvaged by the sweep: incomplete, never pushed from here.
    Salvaged(Box<SalvagedResult>),
}

impl InboxRow {
    /// The row of an inbox entry as read.
    pub fn from_entry(entry: &InboxEntry) -> InboxRow {
        match &entry.brief {
            Ok(brief) => InboxRow::Brief(Box::new(brief.clone())),
            Err(error) => InboxRow::Invalid {
                file: entry.path.clone(),
                line: error_line(error),
                reason: error.to_string(),
            },
        }
    }

    /// What the inbox is ordered by: the file's stem.
    fn sort_key(&self) -> &str {
        match self {
            InboxRow::Brief(brief) => &brief.id,
            InboxRow::Invalid { file, .. } => file
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or_default(),
            InboxRow::Salvaged(result) => &result.reference,
        }
    }

    /// The brief's id; `None` for a file that failed to read and for a salvaged result.
    pub fn brief_id(&self) -> Option<&str> {
        match self {
            InboxRow::Brief(brief) => Some(&brief.id),
            InboxRow::Invalid { .. } | InboxRow::Salvaged(_) => None,
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
        | BriefError::Link { .. }
        | BriefError::TooLarge { .. }
        | BriefError::TooCostly { .. }
        | BriefError::InvalidId { .. } => None,
    }
}

/// Everything that can change the app: engine events, the clock, and what the keymap asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// One event from the engine.
    Engine(Event),
    /// Everything pending on the event channel, drained at once for one frame.
    EngineBatch(Vec<Event>),
    /// The engine refused a request the app made; `reason` is its error, shown as the status.
    RequestFailed {
        /// The request refused.
        request: Request,
        /// The engine's words.
        reason: String,
    },
    /// The clock, for elapsed times and the status line's expiry.
    Tick(DateTime<Utc>),
    /// Select the next row of the focused list.
    SelectNext,
    /// Select the previous row of the focused list.
    SelectPrevious,
    /// Ask to dispatch the selected brief (a confirmation follows).
    DispatchSelected,
    /// Ask to cancel the selected dispatch (a confirmation follows).
    CancelSelected,
    /// Answer yes to the open confirmation.
    ConfirmYes,
    /// Answer no to the open confirmation.
    ConfirmNo,
    /// Approve the selected dispatch at review: push and open the pull request.
    Approve,
    /// Discard the selected dispatch at review.
    Discard,
    /// Quit (with a confirmation when dispatches are running).
    Quit,
    /// Move the focus to the next pane.
    FocusNext,
    /// Scroll the transcript this many items towards the start (stops following the tail).
    ScrollUp(usize),
    /// Scroll the transcript this many items towards the end.
    ScrollDown(usize),
    /// Jump to the transcript's end and follow it again (the diff's last page at review).
    FollowTail,
    /// Jump to the transcript's oldest item (the diff's first line at review).
    ScrollTop,
    /// Scroll one page of what is shown towards the end (the diff, the transcript, the help).
    PageDown,
    /// Scroll one page towards the start.
    PageUp,
    /// Show or hide the key help overlay.
    ToggleHelp,
    /// Close the help overlay, or leave the review gate for the transcript.
    Back,
    /// Show the review gate again after `Back` left it.
    OpenReview,
    /// Open the transcript search prompt.
    SearchStart,
    /// A key typed into the open search prompt.
    SearchKey(KeyEvent),
    /// Search for what the prompt holds and close it.
    SearchCommit,
    /// Close the search prompt without searching.
    SearchCancel,
    /// Jump to the next match of the committed search, towards older items.
    SearchNext,
    /// Jump to the next match towards newer items.
    SearchPrevious,
    /// The run record's patch of a collected dispatch, read for the review gate (or why not).
    PatchLoaded {
        /// The dispatch whose result it is.
        dispatch: DispatchId,
        /// The diff, or why it could not be read.
        patch: Result<String, String>,
    },
    /// Ctrl-C: the first press arms, a second one quits as `q` does.
    Interrupt,
    /// Open the new-brief form.
    NewBrief,
    /// A key typed into the open new-brief form.
    FormKey(KeyEvent),
    /// The form's brief was written to `file` and read back (or why not).
    BriefSaved {
        /// The file written, when it was.
        file: Option<PathBuf>,
        /// The brief as read back, or why it could not be saved.
        saved: Result<Box<Brief>, String>,
    },
    /// The inbox as read again after its directory changed on disk.
    InboxReloaded(Vec<InboxRow>),
}

/// What the app asks of the engine (sent as a `Command` through the `DispatchHandle`).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Dispatch a brief.
    Dispatch {
        /// The brief, as the inbox read it.
        brief: Box<Brief>,
    },
    /// Cancel a dispatch in flight.
    Cancel(DispatchId),
    /// Approve a dispatch waiting for review.
    Approve(DispatchId),
    /// Discard a dispatch waiting for review.
    Discard(DispatchId),
    /// Cancel every dispatch and tear everything down before exiting.
    Shutdown,
    /// [`Request::Shutdown`] because the terminal went away.
    HangUp,
    /// Read the run record's patch of a dispatch whose result was collected.
    LoadPatch(DispatchId),
    /// Write the new-brief form's brief into the inbox.
    SaveBrief(BriefDraft),
}

impl Request {
    fn verb(&self) -> &'static str {
        match self {
            Request::LoadPatch(_) => "read the diff",
            Request::SaveBrief(_) => "save the brief",
            Request::Dispatch { .. } => "dispatch",
            Request::Cancel(_) => "cancel",
            Request::Approve(_) => "approve",
            Request::Discard(_) => "discard",
            Request::Shutdown | Request::HangUp => "shut down",
        }
    }
}

/// A question waiting for `ConfirmYes` or `ConfirmNo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Dispatch the brief with this id.
    Dispatch(String),
    /// Cancel this dispatch.
    Cancel(DispatchId),
    /// Push this dispatch's result and open its pull request.
    Approve(DispatchId),
    /// Throw this dispatch's result away.
    Discard(DispatchId),
    /// Quit although dispatches are running: they are cancelled and torn down first.
    Quit,
}

/// The repository configuration file in effect, as the status line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// A few words: the file and whether it is trusted.
    pub text: String,
    /// A trusted file may have set machine settings, which the status line marks.
    pub trusted: bool,
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
    /// What earlier runs came to, by target repository and brief id.
    history: HashMap<(String, String), Badge>,
    confirm: Option<Confirm>,
    /// What the status line was last asked to say; [`App::status`] derives the text from it.
    notice: Option<status::Notice>,
    quitting: bool,
    changed: bool,
    now: DateTime<Utc>,
    transcript_capacity: usize,
    theme: Theme,
    /// The per-dispatch cost ceiling in dollars, when configured.
    cost_ceiling: Option<f64>,
    /// Which repository configuration file is in effect and whether it is trusted.
    configuration: Option<Configuration>,
    focus: Focus,
    scroll: TranscriptScroll,
    help: bool,
    /// The first line of the help overlay shown.
    help_scroll: usize,
    /// How much of each scrolling view the last frame showed.
    pages: Pages,
    /// The dispatch whose review gate the person left with `Back`.
    review_left: Option<DispatchId>,
    /// The first line of the patch the review gate shows.
    review_scroll: usize,
    /// The search prompt, while it is open.
    search_prompt: Option<tui_input::Input>,
    /// The committed search, highlighted in the transcript and walked by `n`/`N`.
    search: Option<Search>,
    /// A first Ctrl-C was pressed; a second one quits.
    interrupt_armed: bool,
    /// The new-brief form, while it is open.
    form: Option<NewBriefForm>,
    /// The form's brief is being written; keys wait until it is.
    saving_brief: bool,
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
            history: HashMap::new(),
            confirm: None,
            notice: None,
            quitting: false,
            changed: true,
            now,
            transcript_capacity: capacity,
            theme: Theme::default(),
            cost_ceiling: None,
            configuration: None,
            focus: Focus::default(),
            scroll: TranscriptScroll::default(),
            help: false,
            help_scroll: 0,
            pages: Pages::default(),
            review_left: None,
            review_scroll: 0,
            search_prompt: None,
            search: None,
            interrupt_armed: false,
            form: None,
            saving_brief: false,
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
            Msg::PatchLoaded { dispatch, patch } => {
                if let Some(view) = self.dispatches.get_mut(&dispatch) {
                    view.patch = Some(match patch {
                        Ok(text) => PatchState::Loaded(PatchText::new(text)),
                        Err(reason) => PatchState::Unavailable(reason),
                    });
                    self.changed = true;
                }
                None
            }
            Msg::InboxReloaded(mut rows) => {
                rows.extend(self.salvaged_rows().cloned());
                self.reload(rows);
                None
            }
            Msg::BriefSaved { file, saved } => {
                self.saving_brief = false;
                match saved {
                    Ok(brief) => {
                        self.form = None;
                        let shown =
                            file.map_or_else(|| brief.id.clone(), |f| f.display().to_string());
                        self.set_status(format!("saved {shown}: Enter dispatches it"));
                        self.add_brief(brief);
                    }
                    Err(reason) => self.set_status(format!("cannot save the brief: {reason}")),
                }
                None
            }
            Msg::RequestFailed { request, reason } => {
                if let Request::Dispatch { brief } = &request {
                    self.requested.remove(&brief.id);
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
            Msg::Interrupt => self.interrupt(),
            Msg::ConfirmYes => self.after_key(Msg::ConfirmYes),
            Msg::ConfirmNo => {
                self.after_key(Msg::ConfirmNo);
                if self.confirm.take().is_some() {
                    self.changed = true;
                }
                None
            }
            intent if self.confirm.is_none() => self.after_key(intent),
            // A key the open question does not take still ends what the last key started.
            _ => {
                self.forget_last_key();
                None
            }
        }
    }

    /// A key the person pressed: the previous key's answer and an armed Ctrl-C are forgotten, then
    /// the key acts.
    fn after_key(&mut self, msg: Msg) -> Option<Request> {
        self.forget_last_key();
        match msg {
            Msg::ConfirmYes => self.accept(),
            Msg::ConfirmNo => None,
            intent => self.intent(intent),
        }
    }

    /// Forgets the answer to the previous key and an armed Ctrl-C.
    fn forget_last_key(&mut self) {
        if matches!(self.notice, Some(status::Notice::Said(_))) {
            self.notice = None;
            self.changed = true;
        }
        if std::mem::take(&mut self.interrupt_armed) {
            self.changed = true;
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

    /// Whether a quit was confirmed and the app waits for the teardowns before it exits.
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

    /// The inbox row the cursor is on.
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

    /// The dispatch `id`, when the app has seen its events.
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
        match self.newest(id) {
            Some(view) => Badge::of(view),
            None => self.past_badge(id).unwrap_or(Badge::New),
        }
    }

    /// The question waiting for an answer, if one is open.
    pub fn confirm(&self) -> Option<&Confirm> {
        self.confirm.as_ref()
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

    /// The colours the view draws with.
    pub fn theme(&self) -> Theme {
        self.theme
    }

    /// Sets the per-dispatch cost ceiling in dollars the meter measures against (`None`: unknown).
    pub fn set_cost_ceiling(&mut self, ceiling: Option<f64>) {
        self.cost_ceiling = view::positive_ceiling(ceiling);
        self.changed = true;
    }

    /// The cost ceiling the meter is drawn against, in dollars, before a dispatch names its own.
    pub fn cost_ceiling(&self) -> Option<f64> {
        self.cost_ceiling
    }

    /// Says which repository configuration file is in effect (`None`: none is).
    pub fn set_configuration(&mut self, configuration: Option<Configuration>) {
        self.configuration = configuration;
        self.changed = true;
    }

    /// The repository configuration file in effect, as the status line names it.
    pub fn configuration(&self) -> Option<&Configuration> {
        self.configuration.as_ref()
    }

    /// The pane that keys act on.
    pub fn focus(&self) -> Focus {
        self.focus
    }

    /// The selected dispatch's transcript position.
    pub fn scroll(&self) -> TranscriptScroll {
        self.scroll
    }

    /// The first line of the help overlay shown.
    pub fn help_scroll(&self) -> usize {
        self.help_scroll
    }

    /// Tells the app how much of each scrolling view the frame just drawn showed.
    pub fn set_pages(&mut self, pages: Pages) {
        self.pages = pages;
        self.help_scroll = self.help_scroll.min(pages.help_hidden);
    }

    /// Whether the key help overlay is shown.
    pub fn help_open(&self) -> bool {
        self.help
    }

    /// The new-brief form, while it is open.
    pub fn form(&self) -> Option<&NewBriefForm> {
        self.form.as_ref()
    }

    /// The search prompt, while it is open.
    pub fn search_prompt(&self) -> Option<&tui_input::Input> {
        self.search_prompt.as_ref()
    }

    /// The committed search, if any.
    pub fn search(&self) -> Option<&Search> {
        self.search.as_ref()
    }

    /// The first patch line the review gate shows.
    pub fn review_scroll(&self) -> usize {
        self.review_scroll
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

    /// Selects row `index`; the transcript of the newly selected brief starts at its tail.
    fn select(&mut self, index: usize) {
        self.selected = index;
        self.scroll = TranscriptScroll::default();
        self.review_scroll = 0;
        self.changed = true;
    }

    /// Adds a brief just written to the inbox, in file-name order, and selects it.
    fn add_brief(&mut self, brief: Box<Brief>) {
        let id = brief.id.clone();
        let at = self
            .rows
            .iter()
            .position(|row| matches!(row, InboxRow::Salvaged(_)) || row.sort_key() > id.as_str())
            .unwrap_or(self.rows.len());
        self.rows.insert(at, InboxRow::Brief(brief));
        self.focus = Focus::Inbox;
        self.select(at);
    }
}

#[cfg(test)]
mod status_props;
#[cfg(test)]
pub(crate) mod tests;
