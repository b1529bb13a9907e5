//! What each key asks for once no question is pending: the theater's intents (select, scroll,
//! search, review, dispatch, cancel, quit) and the confirmations they lead to, as one more `impl App`.

use crossterm::event::Event as TerminalEvent;
use tui_input::backend::crossterm::EventHandler;

use super::{
    App, Confirm, Direction, Focus, InboxRow, MAX_QUERY_CHARS, Msg, PatchState, Request, Search,
};
use crate::form::{FormOutcome, NewBriefForm};
use stet_protocol::event::DispatchId;
use stet_protocol::state::Phase;

impl App {
    pub(super) fn intent(&mut self, msg: Msg) -> Option<Request> {
        if msg != Msg::Interrupt {
            self.interrupt_armed = false;
        }
        match msg {
            Msg::Interrupt if self.interrupt_armed || self.quitting => self.intent(Msg::Quit),
            Msg::Interrupt => {
                self.interrupt_armed = true;
                self.set_status("press Ctrl-C again to quit".to_owned());
                None
            }
            Msg::NewBrief => {
                let (repo, base) = self
                    .selected_row()
                    .into_iter()
                    .chain(&self.rows)
                    .find_map(|row| match row {
                        InboxRow::Brief(brief) => {
                            Some((brief.target.repo.clone(), brief.target.base.clone()))
                        }
                        InboxRow::Invalid { .. } => None,
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
                        self.set_status("saving the brief".to_owned());
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
            Msg::ScrollUp(lines) if self.reviewing().is_some() => {
                let before = self.review_scroll;
                self.review_scroll = self.review_scroll.saturating_sub(lines);
                self.changed |= before != self.review_scroll;
                None
            }
            Msg::ScrollDown(lines) if self.reviewing().is_some() => {
                let last = self.patch_lines().saturating_sub(1);
                let before = self.review_scroll;
                self.review_scroll = self.review_scroll.saturating_add(lines).min(last);
                self.changed |= before != self.review_scroll;
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
            | Msg::PatchLoaded { .. }
            | Msg::BriefSaved { .. }
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
                self.set_status(format!("dispatching {id}"));
                Some(Request::Dispatch { brief })
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

    /// How many lines the patch in the review gate has (0 while it is not loaded).
    fn patch_lines(&self) -> usize {
        match self.reviewing().and_then(|view| view.patch.as_ref()) {
            Some(PatchState::Loaded(patch)) => patch.len(),
            _ => 0,
        }
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
                self.set_status(format!(
                    "{query}: item {} of {}{wrapped} · n older · N newer",
                    item + 1,
                    dropped + len as u64
                ));
            }
            None => self.set_status(format!("no match for {query}")),
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
