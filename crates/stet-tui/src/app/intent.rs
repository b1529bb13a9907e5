//! What each key asks for once no question is pending: the theater's intents (select, scroll,
//! search, review, dispatch, cancel, quit) and the confirmations they lead to, as one more `impl App`.

use crossterm::event::Event as TerminalEvent;
use tui_input::backend::crossterm::EventHandler;

use super::navigation::Pages;
use super::status::Notice;
use super::{
    App, Confirm, Direction, Focus, InboxRow, MAX_QUERY_CHARS, Msg, PatchState, Request, Search,
};
use crate::form::{FormOutcome, NewBriefForm};
use stet_protocol::event::DispatchId;
use stet_protocol::state::Phase;

impl App {
    pub(super) fn intent(&mut self, msg: Msg) -> Option<Request> {
        match msg {
            Msg::NewBrief => {
                let (repo, base) = self
                    .selected_row()
                    .into_iter()
                    .chain(&self.rows)
                    .find_map(|row| match row {
                        InboxRow::Brief(brief) => {
                            Some((brief.target.repo.clone(), brief.target.base.clone()))
                        }
                        InboxRow::Invalid { .. } | InboxRow::Salvaged(_) => None,
                    })
                    .unwrap_or_default();
                self.form = Some(NewBriefForm::new(&repo, &base));
                self.changed = true;
                None
            }
            Msg::FormKey(_) if self.saving_brief => None,
            Msg::FormKey(key) => {
                let outcome = self.form.as_mut()?.handle_key(key);
                self.changed = true;
                match outcome {
                    FormOutcome::Editing => None,
                    FormOutcome::Cancelled => {
                        self.form = None;
                        None
                    }
                    FormOutcome::Submitted(draft) => {
                        self.saving_brief = true;
                        Some(Request::SaveBrief(draft))
                    }
                }
            }
            Msg::SearchStart => {
                self.search_prompt = Some(tui_input::Input::default());
                self.changed = true;
                None
            }
            Msg::SearchKey(key) => {
                if let Some(prompt) = &mut self.search_prompt {
                    let before = prompt.clone();
                    prompt.handle_event(&TerminalEvent::Key(key));
                    if prompt.value().chars().count() > MAX_QUERY_CHARS {
                        *prompt = before;
                    }
                    self.changed = true;
                }
                None
            }
            Msg::SearchCommit => {
                let query = self.search_prompt.take()?.value().to_owned();
                self.changed = true;
                self.search = Search::new(&query);
                if self.search.is_none() {
                    self.set_status("search cleared".to_owned());
                    return None;
                }
                self.focus = Focus::Transcript;
                self.jump(Direction::Older, true);
                None
            }
            Msg::SearchCancel => {
                self.changed |= self.search_prompt.take().is_some();
                None
            }
            Msg::SearchNext => {
                self.jump(Direction::Older, false);
                None
            }
            Msg::SearchPrevious => {
                self.jump(Direction::Newer, false);
                None
            }
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
            Msg::ScrollUp(lines) if self.help => {
                let before = self.help_scroll;
                self.help_scroll = self.help_scroll.saturating_sub(lines);
                self.changed |= before != self.help_scroll;
                None
            }
            Msg::ScrollDown(lines) if self.help => {
                let before = self.help_scroll;
                self.help_scroll = (self.help_scroll + lines).min(self.pages.help_hidden);
                self.changed |= before != self.help_scroll;
                None
            }
            Msg::PageUp | Msg::PageDown => {
                let rows = if self.help {
                    self.pages.help
                } else if self.reviewing().is_some() || self.selected_salvaged().is_some() {
                    self.pages.diff
                } else {
                    self.pages.transcript
                };
                let page = Pages::page(rows);
                self.intent(if msg == Msg::PageUp {
                    Msg::ScrollUp(page)
                } else {
                    Msg::ScrollDown(page)
                })
            }
            Msg::ScrollUp(lines) if self.shows_a_diff() => {
                self.scroll_review_to(self.review_scroll.saturating_sub(lines));
                None
            }
            Msg::ScrollDown(lines) if self.shows_a_diff() => {
                self.scroll_review_to(self.review_scroll.saturating_add(lines));
                None
            }
            Msg::ScrollTop if self.shows_a_diff() => {
                self.scroll_review_to(0);
                None
            }
            Msg::FollowTail if self.shows_a_diff() => {
                self.scroll_review_to(usize::MAX);
                None
            }
            Msg::ScrollTop => {
                let (dropped, len) = self.transcript_extent();
                self.changed |= self.scroll.up(len, dropped, len);
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
                self.help_scroll = 0;
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
                    self.review_scroll = 0;
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
            Msg::Approve => {
                let id = self.under_review("push")?;
                self.ask(Confirm::Approve(id));
                None
            }
            Msg::Discard => {
                let id = self.under_review("discard")?;
                self.ask(Confirm::Discard(id));
                None
            }
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
            Msg::Interrupt
            | Msg::Engine(_)
            | Msg::EngineBatch(_)
            | Msg::RequestFailed { .. }
            | Msg::PatchLoaded { .. }
            | Msg::BriefSaved { .. }
            | Msg::InboxReloaded(_)
            | Msg::Tick(_)
            | Msg::ConfirmYes
            | Msg::ConfirmNo => None,
        }
    }

    pub(super) fn accept(&mut self) -> Option<Request> {
        let confirm = self.confirm.take()?;
        self.changed = true;
        match confirm {
            Confirm::Dispatch(id) => {
                if self.in_flight_elsewhere(&id) {
                    return None;
                }
                let brief = self.rows.iter().find_map(|row| match row {
                    InboxRow::Brief(brief) if brief.id == id => Some(brief.clone()),
                    _ => None,
                })?;
                self.requested.insert(id.clone());
                self.notify(Notice::Dispatching(id));
                Some(Request::Dispatch { brief })
            }
            Confirm::Cancel(id) => match self.dispatches.get(&id) {
                Some(view) if view.in_flight() => {
                    self.notify(Notice::Cancelling(id));
                    Some(Request::Cancel(id))
                }
                _ => {
                    self.set_status(format!("{id} has already finished"));
                    None
                }
            },
            Confirm::Approve(id) => self.still_under_review(id).then_some(Request::Approve(id)),
            Confirm::Discard(id) => self.still_under_review(id).then_some(Request::Discard(id)),
            Confirm::Quit => {
                self.quitting = true;
                self.notice = None;
                Some(Request::Shutdown)
            }
        }
    }

    /// Ctrl-C: the first press arms (the status line says what a second one does), a second one
    /// quits at once, cancelling whatever runs, whatever question or prompt was open.
    pub(super) fn interrupt(&mut self) -> Option<Request> {
        self.changed = true;
        if !std::mem::replace(&mut self.interrupt_armed, true) && !self.quitting {
            return None;
        }
        self.interrupt_armed = false;
        self.confirm = None;
        self.search_prompt = None;
        if self.quitting {
            return None;
        }
        self.quitting = true;
        self.notice = None;
        Some(Request::Shutdown)
    }

    /// Whether dispatch `id` still waits for review; if not, says so.
    fn still_under_review(&mut self, id: DispatchId) -> bool {
        let waiting = self
            .dispatches
            .get(&id)
            .is_some_and(|view| view.in_flight() && view.phase == Phase::AwaitingApproval);
        if !waiting {
            self.set_status(format!("{id} no longer waits for review"));
        }
        waiting
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
            InboxRow::Salvaged(result) => {
                let message = format!(
                    "a salvaged result is not a brief, so it is not dispatched; it is kept at {}",
                    result.reference
                );
                self.set_status(message);
                None
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

    /// The selected dispatch when it waits for review; otherwise says why `verb` did nothing.
    fn under_review(&mut self, verb: &str) -> Option<DispatchId> {
        let Some(row) = self.selected_row() else {
            self.set_status(format!("nothing to {verb}: the inbox is empty"));
            return None;
        };
        if let InboxRow::Salvaged(result) = row {
            let message = App::salvaged_refusal(result, verb);
            self.set_status(message);
            return None;
        }
        let Some(brief) = row.brief_id().map(str::to_owned) else {
            self.set_status(format!(
                "nothing to {verb}: this file is not a brief, so it never ran"
            ));
            return None;
        };
        let message = match self.newest(&brief) {
            Some(view) if view.in_flight() && view.phase == Phase::AwaitingApproval => {
                return Some(view.id);
            }
            None if self.requested.contains(&brief) => {
                format!("nothing to {verb} yet: {brief} was just dispatched")
            }
            None => {
                format!("nothing to {verb}: {brief} has not been dispatched (Enter dispatches it)")
            }
            Some(view) if view.in_flight() => format!(
                "nothing to {verb} yet: {brief} is {}; its result waits for review once collected",
                view.phase.label()
            ),
            Some(view) => format!(
                "nothing to {verb}: {brief} has finished ({})",
                super::Badge::of(view).label()
            ),
        };
        self.set_status(message);
        None
    }

    /// Shows the diff from line `first`, as far as its last page allows.
    fn scroll_review_to(&mut self, first: usize) {
        let last_page = self.patch_lines().saturating_sub(self.pages.diff.max(1));
        let before = self.review_scroll;
        self.review_scroll = first.min(last_page);
        self.changed |= before != self.review_scroll;
    }

    /// How many lines the patch in the review gate, or of the salvaged result selected, has (0
    /// while it is not loaded).
    fn patch_lines(&self) -> usize {
        if let Some(result) = self.selected_salvaged() {
            return result.patch.len();
        }
        match self.reviewing().and_then(|view| view.patch.as_ref()) {
            Some(PatchState::Loaded(patch)) => patch.len(),
            _ => 0,
        }
    }

    /// Whether the detail pane shows a diff the scroll keys move: the review gate's, or a salvaged
    /// result's.
    fn shows_a_diff(&self) -> bool {
        self.reviewing().is_some() || self.selected_salvaged().is_some()
    }

    /// Pins the transcript on the nearest match of the committed search, walking `direction` from
    /// the item in view, and says where it landed.
    fn jump(&mut self, direction: Direction, include_current: bool) {
        let Some(search) = self.search.clone() else {
            self.set_status("no search yet: / searches the transcript".to_owned());
            return;
        };
        let query = text_preview(search.query());
        let Some(view) = self.selected_dispatch() else {
            self.set_status("no transcript to search here".to_owned());
            return;
        };
        let dispatch = view.id;
        let ring = &view.transcript;
        let (dropped, len) = (ring.dropped(), ring.len());
        let from = self.scroll.bottom(dropped, len).unwrap_or_default();
        match search.find(ring, from, direction, include_current) {
            Some(found) => {
                let item = dropped + found.index as u64;
                self.scroll.pin(item);
                let wrapped = if found.wrapped {
                    " (wrapped round)"
                } else {
                    ""
                };
                let text = format!(
                    "{query}: item {} of {}{wrapped} · n older · N newer",
                    item + 1,
                    dropped + len as u64
                );
                self.notify(Notice::Found { dispatch, text });
            }
            None => self.notify(Notice::Found {
                dispatch,
                text: format!("no match for {query}"),
            }),
        }
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
}

/// A query as the status line quotes it.
fn text_preview(query: &str) -> String {
    format!("“{query}”")
}
