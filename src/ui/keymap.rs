//! The single keymap: which key does what, in one place, so the footer, the help overlay and the
//! event loop never disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::ui::app::{App, Msg};

/// The message a key press means in the app's current state; `None` for keys with no meaning here
/// (and for key releases and repeats: only presses act).
pub fn message_for(key: KeyEvent, app: &App) -> Option<Msg> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    if app.confirm().is_some() {
        return match key.code {
            KeyCode::Char('y') | KeyCode::Enter => Some(Msg::ConfirmYes),
            KeyCode::Char('n') | KeyCode::Esc => Some(Msg::ConfirmNo),
            _ => None,
        };
    }
    match (key.code, key.modifiers) {
        (KeyCode::Char('c'), KeyModifiers::CONTROL) | (KeyCode::Char('q'), _) => Some(Msg::Quit),
        (KeyCode::Down | KeyCode::Char('j'), _) => Some(Msg::SelectNext),
        (KeyCode::Up | KeyCode::Char('k'), _) => Some(Msg::SelectPrevious),
        (KeyCode::Enter, _) => Some(Msg::DispatchSelected),
        (KeyCode::Char('c'), _) => Some(Msg::CancelSelected),
        (KeyCode::Char('p'), _) => Some(Msg::Approve),
        (KeyCode::Char('x'), _) => Some(Msg::Discard),
        _ => None,
    }
}
