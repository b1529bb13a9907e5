//! The single keymap: which key does what, in one table, so the footer, the help overlay and the
//! event loop never disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::app::{App, Focus, Msg};

/// Where a binding applies; the app's state decides which of these are active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A confirmation is waiting for an answer.
    Confirm,
    /// The search prompt is open: every other key is typed into it.
    Search,
    /// The new-brief form is open: every key goes to it.
    Form,
    /// The help overlay is open.
    Help,
    /// The review gate of the selected dispatch is showing.
    Review,
    /// The inbox has the focus.
    Inbox,
    /// The transcript has the focus.
    Transcript,
    /// Anywhere no confirmation or overlay captures the keys.
    Global,
}

impl Context {
    /// A heading for the help overlay.
    pub fn title(self) -> &'static str {
        match self {
            Context::Confirm => "confirmation",
            Context::Search => "search prompt",
            Context::Form => "new brief form",
            Context::Help => "help",
            Context::Review => "review gate",
            Context::Inbox => "inbox",
            Context::Transcript => "transcript",
            Context::Global => "everywhere",
        }
    }

    /// Every context, in the order the help overlay lists them.
    pub const ALL: [Context; 8] = [
        Context::Global,
        Context::Inbox,
        Context::Transcript,
        Context::Review,
        Context::Form,
        Context::Search,
        Context::Confirm,
        Context::Help,
    ];
}

/// One key a binding answers to. Shift is ignored (a `G` arrives with it); Control is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chord {
    /// The key.
    pub code: KeyCode,
    /// Whether Control is held with it.
    pub control: bool,
}

const fn key(code: KeyCode) -> Chord {
    Chord {
        code,
        control: false,
    }
}

const fn ch(c: char) -> Chord {
    key(KeyCode::Char(c))
}

const fn ctrl(c: char) -> Chord {
    Chord {
        code: KeyCode::Char(c),
        control: true,
    }
}

/// The message that hands key `code` (with `modifiers`) to the new-brief form.
const fn form_key(code: KeyCode, modifiers: KeyModifiers) -> Msg {
    Msg::FormKey(KeyEvent::new(code, modifiers))
}

/// One row of the keymap.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Where the binding applies (the inbox, the review gate, a dialog, …).
    pub context: Context,
    /// The keys that trigger it.
    pub chords: &'static [Chord],
    /// The keys as the footer and help show them.
    pub keys: &'static str,
    /// What it does, as the help shows it.
    pub description: &'static str,
    /// What it sends the app.
    pub msg: Msg,
    /// Where it comes in the footer when the width does not fit every key: lower first;
    /// [`HIDDEN`] never shows there (the help lists it).
    pub rank: u8,
}

/// The rank of a binding the footer never shows.
pub const HIDDEN: u8 = u8::MAX;

impl Binding {
    const fn rank(mut self, rank: u8) -> Binding {
        self.rank = rank;
        self
    }
}

const fn bind(
    context: Context,
    chords: &'static [Chord],
    keys: &'static str,
    description: &'static str,
    msg: Msg,
) -> Binding {
    Binding {
        context,
        chords,
        keys,
        description,
        msg,
        rank: 5,
    }
}

/// The keymap. The first binding of an active context that answers to a key wins.
pub const KEYMAP: &[Binding] = &[
    bind(
        Context::Confirm,
        &[ch('y'), key(KeyCode::Enter)],
        "y/Enter",
        "yes",
        Msg::ConfirmYes,
    )
    .rank(1),
    bind(
        Context::Confirm,
        &[ch('n'), key(KeyCode::Esc)],
        "n/Esc",
        "no",
        Msg::ConfirmNo,
    )
    .rank(1),
    bind(
        Context::Help,
        &[ch('?'), key(KeyCode::Esc)],
        "?/Esc",
        "close help",
        Msg::ToggleHelp,
    )
    .rank(1),
    bind(
        Context::Help,
        &[key(KeyCode::Down), ch('j')],
        "j/↓",
        "scroll down",
        Msg::ScrollDown(1),
    )
    .rank(2),
    bind(
        Context::Help,
        &[key(KeyCode::Up), ch('k')],
        "k/↑",
        "scroll up",
        Msg::ScrollUp(1),
    )
    .rank(2),
    bind(
        Context::Help,
        &[ch(' '), key(KeyCode::PageDown)],
        "Space/PgDn",
        "next page",
        Msg::PageDown,
    )
    .rank(4),
    bind(
        Context::Help,
        &[ch('b'), key(KeyCode::PageUp)],
        "b/PgUp",
        "previous page",
        Msg::PageUp,
    )
    .rank(4),
    bind(Context::Help, &[ch('q')], "q", "quit", Msg::Quit).rank(3),
    bind(Context::Help, &[ctrl('c')], "^C ^C", "quit", Msg::Interrupt).rank(HIDDEN),
    bind(
        Context::Form,
        &[key(KeyCode::Tab)],
        "Tab",
        "next field",
        form_key(KeyCode::Tab, KeyModifiers::NONE),
    ),
    bind(
        Context::Form,
        &[key(KeyCode::BackTab)],
        "S-Tab",
        "previous field",
        form_key(KeyCode::BackTab, KeyModifiers::SHIFT),
    ),
    bind(
        Context::Form,
        &[key(KeyCode::Enter)],
        "Enter",
        "next field / add item",
        form_key(KeyCode::Enter, KeyModifiers::NONE),
    ),
    bind(
        Context::Form,
        &[ctrl('s')],
        "^S",
        "save to the inbox",
        form_key(KeyCode::Char('s'), KeyModifiers::CONTROL),
    ),
    bind(
        Context::Form,
        &[key(KeyCode::Esc)],
        "Esc",
        "cancel",
        form_key(KeyCode::Esc, KeyModifiers::NONE),
    ),
    bind(
        Context::Search,
        &[key(KeyCode::Enter)],
        "Enter",
        "search",
        Msg::SearchCommit,
    ),
    bind(
        Context::Search,
        &[key(KeyCode::Esc)],
        "Esc",
        "cancel",
        Msg::SearchCancel,
    ),
    bind(
        Context::Review,
        &[ch('p')],
        "p",
        "push & open PR",
        Msg::Approve,
    )
    .rank(1),
    bind(Context::Review, &[ch('x')], "x", "discard", Msg::Discard).rank(1),
    bind(
        Context::Review,
        &[key(KeyCode::Down), ch('j')],
        "j/↓",
        "scroll the diff",
        Msg::ScrollDown(1),
    ),
    bind(
        Context::Review,
        &[key(KeyCode::Up), ch('k')],
        "k/↑",
        "scroll the diff back",
        Msg::ScrollUp(1),
    ),
    bind(
        Context::Review,
        &[ch('g'), key(KeyCode::Home)],
        "g/Home",
        "top of the diff",
        Msg::ScrollTop,
    ),
    bind(
        Context::Review,
        &[ch('G'), key(KeyCode::End)],
        "G/End",
        "end of the diff",
        Msg::FollowTail,
    ),
    bind(
        Context::Review,
        &[ch(' '), key(KeyCode::PageDown)],
        "Space/PgDn",
        "next page",
        Msg::PageDown,
    )
    .rank(4),
    bind(
        Context::Review,
        &[ch('b'), key(KeyCode::PageUp)],
        "b/PgUp",
        "previous page",
        Msg::PageUp,
    )
    .rank(6),
    bind(
        Context::Review,
        &[key(KeyCode::Esc)],
        "Esc",
        "back to transcript",
        Msg::Back,
    )
    .rank(2),
    bind(
        Context::Inbox,
        &[key(KeyCode::Down), ch('j')],
        "j/↓",
        "next brief",
        Msg::SelectNext,
    )
    .rank(4),
    bind(
        Context::Inbox,
        &[key(KeyCode::Up), ch('k')],
        "k/↑",
        "previous brief",
        Msg::SelectPrevious,
    )
    .rank(4),
    bind(Context::Inbox, &[ch('n')], "n", "new brief", Msg::NewBrief).rank(2),
    bind(
        Context::Transcript,
        &[key(KeyCode::Down), ch('j')],
        "j/↓",
        "scroll down",
        Msg::ScrollDown(1),
    )
    .rank(4),
    bind(
        Context::Transcript,
        &[key(KeyCode::Up), ch('k')],
        "k/↑",
        "scroll up",
        Msg::ScrollUp(1),
    )
    .rank(4),
    bind(
        Context::Transcript,
        &[ch('n')],
        "n",
        "older match",
        Msg::SearchNext,
    )
    .rank(3),
    bind(
        Context::Transcript,
        &[ch('N')],
        "N",
        "newer match",
        Msg::SearchPrevious,
    )
    .rank(3),
    bind(
        Context::Transcript,
        &[ch('g'), key(KeyCode::Home)],
        "g/Home",
        "oldest item",
        Msg::ScrollTop,
    ),
    bind(
        Context::Global,
        &[key(KeyCode::Enter)],
        "Enter",
        "dispatch",
        Msg::DispatchSelected,
    )
    .rank(1),
    bind(
        Context::Global,
        &[ch('c')],
        "c",
        "cancel",
        Msg::CancelSelected,
    )
    .rank(2),
    bind(Context::Global, &[ch('?')], "?", "help", Msg::ToggleHelp),
    bind(Context::Global, &[ch('q')], "q", "quit", Msg::Quit).rank(1),
    bind(
        Context::Global,
        &[ctrl('c')],
        "^C ^C",
        "quit",
        Msg::Interrupt,
    )
    .rank(HIDDEN),
    bind(
        Context::Global,
        &[ch('/')],
        "/",
        "search the transcript",
        Msg::SearchStart,
    )
    .rank(3),
    bind(Context::Global, &[ch('r')], "r", "review", Msg::OpenReview).rank(3),
    bind(
        Context::Global,
        &[key(KeyCode::Tab)],
        "Tab",
        "switch pane",
        Msg::FocusNext,
    )
    .rank(3),
    bind(
        Context::Global,
        &[key(KeyCode::PageUp)],
        "PgUp",
        "page up",
        Msg::PageUp,
    )
    .rank(6),
    bind(
        Context::Global,
        &[key(KeyCode::PageDown)],
        "PgDn",
        "page down",
        Msg::PageDown,
    )
    .rank(6),
    bind(
        Context::Global,
        &[ch('p')],
        "p",
        "push (at review)",
        Msg::Approve,
    )
    .rank(HIDDEN),
    bind(
        Context::Global,
        &[ch('x')],
        "x",
        "discard (at review)",
        Msg::Discard,
    )
    .rank(HIDDEN),
    bind(
        Context::Global,
        &[ch('G'), key(KeyCode::End)],
        "G/End",
        "follow the tail",
        Msg::FollowTail,
    )
    .rank(4),
];

/// The contexts active in `app`'s current state, most specific first.
pub fn active_contexts(app: &App) -> &'static [Context] {
    if app.confirm().is_some() {
        &[Context::Confirm]
    } else if app.form().is_some() {
        &[Context::Form]
    } else if app.search_prompt().is_some() {
        &[Context::Search]
    } else if app.help_open() {
        &[Context::Help]
    } else if app.reviewing().is_some() {
        &[Context::Review, Context::Global]
    } else {
        match app.focus() {
            Focus::Inbox => &[Context::Inbox, Context::Global],
            Focus::Transcript => &[Context::Transcript, Context::Global],
        }
    }
}

/// The bindings active in `app`'s current state, for the footer.
pub fn active_bindings(app: &App) -> impl Iterator<Item = &'static Binding> {
    let contexts = active_contexts(app);
    contexts
        .iter()
        .flat_map(|context| KEYMAP.iter().filter(move |b| b.context == *context))
}

/// The message a key press means in the app's current state; `None` for keys with no meaning here
/// (and for key releases and repeats: only presses act).
pub fn message_for(key: KeyEvent, app: &App) -> Option<Msg> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    let control = key.modifiers.contains(KeyModifiers::CONTROL);
    if control && key.code == KeyCode::Char('c') {
        // Ctrl-C means the same wherever the keys go: the status line says what a second one does.
        return Some(Msg::Interrupt);
    }
    if app.form().is_some() {
        // The form's bindings above only describe it: it reads every key itself.
        return Some(Msg::FormKey(key));
    }
    let bound = active_bindings(app)
        .find(|binding| {
            binding
                .chords
                .iter()
                .any(|chord| chord.code == key.code && chord.control == control)
        })
        .map(|binding| binding.msg.clone());
    match bound {
        None if app.search_prompt().is_some() => Some(Msg::SearchKey(key)),
        bound => bound,
    }
}

#[cfg(test)]
mod tests {

    use chrono::DateTime;
    use crossterm::event::KeyEventState;

    use super::*;

    fn press(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent {
            code,
            modifiers,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        }
    }

    fn plain(c: char) -> KeyEvent {
        press(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn empty_app() -> App {
        App::new(&[], DateTime::UNIX_EPOCH)
    }

    #[test]
    fn arrows_move_the_selection_or_scroll_by_focus() {
        let mut app = empty_app();
        assert_eq!(message_for(plain('j'), &app), Some(Msg::SelectNext));
        app.update(Msg::FocusNext);
        assert_eq!(message_for(plain('j'), &app), Some(Msg::ScrollDown(1)));
        assert_eq!(
            message_for(press(KeyCode::Up, KeyModifiers::NONE), &app),
            Some(Msg::ScrollUp(1))
        );
    }

    #[test]
    fn shift_is_ignored_and_control_is_not() {
        let app = empty_app();
        assert_eq!(
            message_for(press(KeyCode::Char('G'), KeyModifiers::SHIFT), &app),
            Some(Msg::FollowTail)
        );
        assert_eq!(
            message_for(press(KeyCode::Char('c'), KeyModifiers::CONTROL), &app),
            Some(Msg::Interrupt)
        );
        assert_eq!(message_for(plain('c'), &app), Some(Msg::CancelSelected));
    }

    #[test]
    fn only_presses_act() {
        let app = empty_app();
        let mut release = plain('q');
        release.kind = KeyEventKind::Release;
        assert_eq!(message_for(release, &app), None);
    }

    #[test]
    fn the_help_overlay_captures_every_key_but_its_own() {
        let mut app = empty_app();
        app.update(Msg::ToggleHelp);
        assert_eq!(message_for(plain('c'), &app), None);
        assert_eq!(message_for(plain('j'), &app), Some(Msg::ScrollDown(1)));
        assert_eq!(
            message_for(press(KeyCode::Esc, KeyModifiers::NONE), &app),
            Some(Msg::ToggleHelp)
        );
        assert_eq!(message_for(plain('q'), &app), Some(Msg::Quit));
    }

    #[test]
    fn the_search_prompt_takes_every_key_but_enter_and_esc() {
        let mut app = empty_app();
        app.update(message_for(plain('/'), &app).unwrap());
        assert_eq!(
            message_for(plain('q'), &app),
            Some(Msg::SearchKey(plain('q')))
        );
        assert_eq!(
            message_for(plain('j'), &app),
            Some(Msg::SearchKey(plain('j')))
        );
        assert_eq!(
            message_for(press(KeyCode::Enter, KeyModifiers::NONE), &app),
            Some(Msg::SearchCommit)
        );
        assert_eq!(
            message_for(press(KeyCode::Esc, KeyModifiers::NONE), &app),
            Some(Msg::SearchCancel)
        );
    }

    #[test]
    fn n_walks_matches_in_the_transcript_and_opens_the_form_in_the_inbox() {
        let mut app = empty_app();
        assert_eq!(message_for(plain('n'), &app), Some(Msg::NewBrief));
        app.update(Msg::NewBrief);
        assert_eq!(
            message_for(plain('q'), &app),
            Some(Msg::FormKey(plain('q')))
        );
        assert_eq!(
            message_for(press(KeyCode::Esc, KeyModifiers::NONE), &app),
            Some(Msg::FormKey(press(KeyCode::Esc, KeyModifiers::NONE)))
        );
        app.update(Msg::FormKey(press(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(app.form().is_none());
        app.update(Msg::FocusNext);
        assert_eq!(message_for(plain('n'), &app), Some(Msg::SearchNext));
        assert_eq!(
            message_for(press(KeyCode::Char('N'), KeyModifiers::SHIFT), &app),
            Some(Msg::SearchPrevious)
        );
    }

    #[test]
    fn no_key_is_bound_twice_in_one_context() {
        for context in Context::ALL {
            let chords: Vec<Chord> = KEYMAP
                .iter()
                .filter(|b| b.context == context)
                .flat_map(|b| b.chords.iter().copied())
                .collect();
            for (i, chord) in chords.iter().enumerate() {
                assert!(!chords[i + 1..].contains(chord), "{chord:?} in {context:?}");
            }
        }
    }
}
