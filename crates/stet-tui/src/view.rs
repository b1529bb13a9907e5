//! Draws the whole theater for one frame from the app model: the layout, each pane, the overlays.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Paragraph, Wrap};
use stet_sanitize::display::one_line;

use crate::app::{App, DispatchView, Focus, InboxRow, Msg, Pages};
use crate::keymap;
use crate::panes::{
    self, confirm, help, inbox, meter, review, salvaged, text, timeline, transcript,
};

/// Below this many columns the panes cannot be read; a notice is drawn instead.
pub const MIN_WIDTH: u16 = 60;
/// Below this many rows the panes cannot be read; a notice is drawn instead.
pub const MIN_HEIGHT: u16 = 16;

/// A pane the mouse can point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    /// The inbox of briefs.
    Inbox,
    /// The transcript.
    Transcript,
    /// The review gate's diff (or a salvaged result's).
    Review,
}

/// Where the panes of the main screen go in `area`; `None` when it is too small to draw them.
struct Screen {
    inbox: Rect,
    detail: Rect,
    status: Rect,
    footer: Rect,
}

impl Screen {
    fn of(area: Rect) -> Option<Screen> {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            return None;
        }
        let [main, status, footer] = Layout::vertical([
            Constraint::Min(0),
            Constraint::Length(1),
            Constraint::Length(1),
        ])
        .areas(area);
        let inbox_width = (area.width / 3).clamp(28, 48);
        let [inbox, detail] =
            Layout::horizontal([Constraint::Length(inbox_width), Constraint::Min(0)]).areas(main);
        Some(Screen {
            inbox,
            detail,
            status,
            footer,
        })
    }

    /// The main area the overlays are centred in.
    fn main(&self) -> Rect {
        self.inbox.union(self.detail)
    }
}

/// The detail side of a running (or finished) dispatch: timeline and meter on top, transcript below.
struct Detail {
    timeline: Rect,
    meter: Rect,
    transcript: Rect,
}

impl Detail {
    fn of(area: Rect, app: &App, view: &DispatchView) -> Detail {
        let (now, theme) = (app.now(), app.theme());
        let [timeline_area, meter_area] = Self::columns(area, view);
        let meter_width = meter_area.width.saturating_sub(2);
        let timeline_width = usize::from(timeline_area.width.saturating_sub(2));
        let timeline_lines = timeline::lines(view, now, timeline_width, theme).len();
        let meter_lines = meter::lines(
            view,
            ceiling_of(app, view),
            now,
            usize::from(meter_width),
            theme,
        )
        .len();
        let wanted = u16::try_from(timeline_lines.max(meter_lines) + 2).unwrap_or(u16::MAX);
        // A finished dispatch's story (why it ended, what was torn down) matters more than room
        // for a transcript that no longer moves.
        let share = if view.transcript.is_empty() {
            area.height.saturating_sub(3)
        } else if view.in_flight() {
            area.height / 2
        } else {
            area.height * 2 / 3
        };
        let top_height = wanted.min(share);
        let [top, transcript] =
            Layout::vertical([Constraint::Length(top_height), Constraint::Min(0)]).areas(area);
        let [timeline, meter] = Self::columns(top, view);
        Detail {
            timeline,
            meter,
            transcript,
        }
    }
}

impl Detail {
    /// The timeline's and the meter's columns of `area`: the meter keeps what its lines need (27
    /// columns, 22 while it has no usage to show) and the timeline takes the rest.
    fn columns(area: Rect, view: &DispatchView) -> [Rect; 2] {
        let meter = if view.cost.is_none() && view.last_refusal.is_none() && view.network.is_none()
        {
            22.min(area.width / 2)
        } else {
            (area.width * 45 / 100).max(27).min(area.width / 2)
        };
        Layout::horizontal([Constraint::Min(0), Constraint::Length(meter)]).areas(area)
    }
}

/// How much of each scrolling view a frame of `area` shows `app`, for its page keys.
pub fn pages(app: &App, area: Rect) -> Pages {
    let Some(screen) = Screen::of(area) else {
        return Pages::default();
    };
    let (overlay, help_hidden) = help::placement(screen.main(), app.theme());
    let mut pages = Pages {
        help: usize::from(overlay.height.saturating_sub(2)),
        help_hidden,
        ..Pages::default()
    };
    let (width, height) = (
        usize::from(screen.detail.width.saturating_sub(2)),
        usize::from(screen.detail.height.saturating_sub(2)),
    );
    if let Some(result) = app.selected_salvaged() {
        pages.diff = salvaged::diff_rows(result, width, height);
    } else if let Some(view) = app.reviewing() {
        pages.diff = review::diff_rows(view, width, height);
    } else if let Some(view) = app.selected_dispatch() {
        let transcript = Detail::of(screen.detail, app, view).transcript;
        pages.transcript = usize::from(transcript.height.saturating_sub(2));
    }
    pages
}

/// The pane at cell (`column`, `row`) of a screen of `area`, when it is one the wheel scrolls.
pub fn pane_at(app: &App, area: Rect, column: u16, row: u16) -> Option<Pane> {
    let screen = Screen::of(area)?;
    let cell = ratatui::layout::Position::new(column, row);
    if screen.inbox.contains(cell) {
        return Some(Pane::Inbox);
    }
    if !screen.detail.contains(cell) {
        return None;
    }
    if app.reviewing().is_some() || app.selected_salvaged().is_some() {
        return Some(Pane::Review);
    }
    let view = app.selected_dispatch()?;
    Detail::of(screen.detail, app, view)
        .transcript
        .contains(cell)
        .then_some(Pane::Transcript)
}

/// Draws `app` into `frame`.
pub fn render(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let Some(screen) = Screen::of(area) else {
        render_too_small(frame, area);
        return;
    };
    inbox::render(frame, screen.inbox, app);
    render_detail(frame, screen.detail, app);
    render_status(frame, screen.status, app);
    render_footer(frame, screen.footer, app);
    if let Some(form) = app.form() {
        panes::form::render(frame, screen.main(), form, app.theme());
    }
    if app.help_open() {
        help::render(frame, screen.main(), app.help_scroll(), app.theme());
    }
    if let Some(question) = app.confirm() {
        confirm::render(frame, screen.main(), question, app);
    }
}

fn render_too_small(frame: &mut Frame, area: Rect) {
    let notice = format!(
        "terminal too small: {}×{}, stet needs at least {MIN_WIDTH}×{MIN_HEIGHT}",
        area.width, area.height
    );
    frame.render_widget(Paragraph::new(notice).wrap(Wrap { trim: true }), area);
}

/// The right side: the review gate, or the selected dispatch's timeline, meter and transcript, or
/// what the selected brief would do.
fn render_detail(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme();
    if let Some(result) = app.selected_salvaged() {
        salvaged::render(frame, area, result, app.review_scroll(), theme);
        return;
    }
    if let Some(view) = app.reviewing() {
        review::render(frame, area, view, app.review_scroll(), theme);
        return;
    }
    let Some(view) = app.selected_dispatch() else {
        render_brief(frame, area, app);
        return;
    };
    let now = app.now();
    let detail = Detail::of(area, app, view);
    timeline::render(frame, detail.timeline, view, now, theme);
    meter::render(frame, detail.meter, view, ceiling_of(app, view), now, theme);
    transcript::render(
        frame,
        detail.transcript,
        view,
        transcript::Viewport {
            scroll: app.scroll(),
            search: app.search(),
            focused: app.focus() == Focus::Transcript,
        },
        theme,
    );
}

/// The selected brief before any dispatch: what it asks and where it would go.
fn render_brief(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme();
    let (title, body) = match app.selected_row() {
        Some(InboxRow::Brief(brief)) => {
            let mut lines = vec![
                Line::styled(one_line(&brief.title), theme.title()),
                Line::styled(
                    format!(
                        "{}@{} · workflow {}",
                        one_line(&brief.target.repo),
                        one_line(&brief.target.base),
                        one_line(&brief.workflow)
                    ),
                    theme.muted(),
                ),
                Line::raw(""),
            ];
            for item in &brief.items {
                for (index, line) in item.text.lines().enumerate() {
                    let lead = if index == 0 { "• " } else { "  " };
                    lines.push(Line::raw(format!("{lead}{}", one_line(line))));
                }
            }
            lines.push(Line::raw(""));
            lines.push(Line::styled(
                "not dispatched yet: Enter dispatches it",
                theme.muted(),
            ));
            (format!("Brief {}", one_line(&brief.id)), Text::from(lines))
        }
        Some(InboxRow::Invalid { reason, .. }) => (
            "Invalid brief".to_owned(),
            Text::from(vec![
                Line::styled(one_line(reason), theme.error()),
                Line::raw(""),
                Line::styled("fix the file and start stet again", theme.muted()),
            ]),
        ),
        Some(InboxRow::Salvaged(_)) | None => (
            "Dispatch".to_owned(),
            Text::styled("nothing selected", theme.muted()),
        ),
    };
    frame.render_widget(
        Paragraph::new(body)
            .wrap(Wrap { trim: false })
            .block(panes::pane_block(title, false, theme)),
        area,
    );
}

fn render_status(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme();
    let running = app.running_count();
    let mut spans = vec![Span::styled(
        format!("{running} running"),
        if running > 0 {
            theme.key()
        } else {
            theme.muted()
        },
    )];
    if app.is_quitting() {
        spans.push(Span::styled(
            format!(" · quitting: waiting for {running} teardown(s)"),
            theme.warning(),
        ));
    }
    if let Some(status) = app.status() {
        spans.push(Span::raw(" · "));
        spans.push(Span::raw(one_line(&status)));
    }
    let Some(configuration) = app.configuration() else {
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
        return;
    };
    let note = one_line(&configuration.text);
    let width = u16::try_from(note.chars().count() + 1).unwrap_or(u16::MAX);
    let [left, right] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(width)]).areas(area);
    frame.render_widget(Paragraph::new(Line::from(spans)), left);
    let style = if configuration.trusted {
        theme.warning()
    } else {
        theme.muted()
    };
    frame.render_widget(
        Paragraph::new(Line::styled(note, style)).alignment(ratatui::layout::Alignment::Right),
        right,
    );
}

/// The keys active right now, from the keymap; the search prompt while it is open.
fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme();
    if let Some(prompt) = app.search_prompt() {
        let width = usize::from(area.width.saturating_sub(1)).max(1);
        let scroll = prompt.visual_scroll(width);
        let shown: String = one_line(prompt.value()).chars().skip(scroll).collect();
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled("/", theme.key()),
                Span::raw(text::truncate(&shown, width)),
            ])),
            area,
        );
        let column = (prompt.visual_cursor().saturating_sub(scroll) + 1).min(width);
        frame.set_cursor_position((area.x + u16::try_from(column).unwrap_or(area.width), area.y));
        return;
    }
    let hints = footer_hints(app, usize::from(area.width));
    let mut spans = Vec::new();
    for binding in hints {
        if !spans.is_empty() {
            spans.push(Span::styled(" · ", theme.muted()));
        }
        spans.push(Span::styled(binding.keys, theme.key()));
        spans.push(Span::raw(format!(" {}", binding.description)));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The keys the footer shows in `width` columns: the active ones the footer lists, most important
/// first, as many as fit, and always the help key (which lists the rest).
pub fn footer_hints(app: &App, width: usize) -> Vec<&'static keymap::Binding> {
    let shown_width = |binding: &keymap::Binding| {
        text::char_width_of(binding.keys) + 1 + text::char_width_of(binding.description)
    };
    let mut active: Vec<&'static keymap::Binding> = Vec::new();
    for binding in keymap::active_bindings(app) {
        // A key an earlier (more specific) binding answers is not listed twice.
        let shadowed = binding
            .chords
            .iter()
            .all(|chord| active.iter().any(|earlier| earlier.chords.contains(chord)));
        if !shadowed {
            active.push(binding);
        }
    }
    let help = active
        .iter()
        .position(|binding| binding.msg == Msg::ToggleHelp)
        .map(|at| active.remove(at));
    active.retain(|binding| binding.rank != keymap::HIDDEN);
    active.sort_by_key(|binding| binding.rank);
    const SEPARATOR: usize = 3;
    let mut room = width.saturating_sub(help.map_or(0, |help| shown_width(help) + SEPARATOR));
    let mut hints = Vec::new();
    for binding in active {
        let needed = shown_width(binding) + SEPARATOR;
        if needed > room {
            break;
        }
        room -= needed;
        hints.push(binding);
    }
    hints.extend(help);
    hints
}

/// The ceiling a dispatch's meter measures against: the one its first event carried, else the one
/// this session dispatches with.
fn ceiling_of(app: &App, view: &DispatchView) -> Option<f64> {
    view.plan
        .as_ref()
        .and_then(|plan| plan.cost_ceiling_usd)
        .or(app.cost_ceiling())
}
