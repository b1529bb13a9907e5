//! The status line's text, derived from the current state each time it is drawn: a notice names
//! what it is about (a brief being dispatched, a dispatch being cancelled, a search of one
//! transcript), and says nothing once that has moved on, so no word of a past action stays behind.

use super::App;
use stet_protocol::event::DispatchId;

/// What the status line was last asked to say, and what about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// An answer to the key just pressed (a refusal, what was saved); the next key clears it.
    Said(String),
    /// Brief `0` was asked for; said until its first event arrives or the engine refuses it.
    Dispatching(String),
    /// Dispatch `0` was asked to stop; said while it has not finished.
    Cancelling(DispatchId),
    /// Where a search of dispatch `dispatch`'s transcript landed; said while it is the one shown.
    Found {
        /// The dispatch whose transcript was searched.
        dispatch: DispatchId,
        /// Where the search landed.
        text: String,
    },
}

impl App {
    /// The status line's text for the current state: what stet is doing on the person's behalf,
    /// or the answer to the key just pressed; `None` when there is nothing to say.
    pub fn status(&self) -> Option<String> {
        if self.interrupt_armed {
            return Some(match self.running_count() {
                0 => "press Ctrl-C again to quit".to_owned(),
                running => {
                    format!("press Ctrl-C again to quit: cancels {running} running dispatch(es)")
                }
            });
        }
        if self.saving_brief {
            return Some("saving the brief".to_owned());
        }
        match self.notice.as_ref()? {
            Notice::Said(text) => Some(text.clone()),
            Notice::Dispatching(brief) => self
                .requested
                .contains(brief)
                .then(|| format!("dispatching {brief}")),
            Notice::Cancelling(dispatch) => self
                .dispatches
                .get(dispatch)
                .filter(|view| view.in_flight())
                .map(|view| format!("cancelling {}", view.brief)),
            Notice::Found { dispatch, text } => (self.selected_dispatch().map(|view| view.id)
                == Some(*dispatch))
            .then(|| text.clone()),
        }
    }

    /// Says `message` in answer to the key just pressed.
    pub(super) fn set_status(&mut self, message: String) {
        self.notify(Notice::Said(message));
    }

    pub(super) fn notify(&mut self, notice: Notice) {
        self.notice = Some(notice);
        self.changed = true;
    }
}
