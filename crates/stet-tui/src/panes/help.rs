//! The help overlay: every key of the single keymap, grouped by where it applies, so help can never
//! list a key that does something else.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};

use crate::keymap::{Context, KEYMAP};
use crate::panes::{centred, pane_block};
use crate::theme::Theme;

/// The overlay's lines for `contexts`: a heading per context, then its keys.
pub fn lines(contexts: &[Context], theme: Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for &context in contexts {
        let bindings: Vec<_> = KEYMAP.iter().filter(|b| b.context == context).collect();
        if bindings.is_empty() {
            continue;
        }
        if !lines.is_empty() {
            lines.push(Line::raw(""));
        }
        lines.push(Line::styled(context.title(), theme.title()));
        for binding in bindings {
            lines.push(Line::from(vec![
                Span::styled(format!("  {:<11}", binding.keys), theme.key()),
                Span::raw(binding.description),
            ]));
        }
    }
    lines
}

/// Where the overlay goes in `area`, and how many of its lines are out of view below when it
/// shows its first line.
pub fn placement(area: Rect, theme: Theme) -> (Rect, usize) {
    let (left, right) = columns(theme);
    let tallest = left.len().max(right.len());
    let height = u16::try_from(tallest + 2).unwrap_or(u16::MAX);
    let overlay = centred(area, 76, height);
    let shown = usize::from(overlay.height.saturating_sub(2));
    (overlay, tallest.saturating_sub(shown))
}

/// The browsing keys (left) and the question keys (right).
fn columns(theme: Theme) -> (Vec<Line<'static>>, Vec<Line<'static>>) {
    let (left, right) = Context::ALL.split_at(3);
    (lines(left, theme), lines(right, theme))
}

/// Draws the overlay in two columns, the browsing keys left and the question keys right, from line
/// `scroll` when the area is too short for all of them.
pub fn render(frame: &mut Frame, area: Rect, scroll: usize, theme: Theme) {
    let (left, right) = columns(theme);
    let (overlay, hidden) = placement(area, theme);
    let scroll = scroll.min(hidden);
    frame.render_widget(Clear, overlay);
    let title = if hidden > 0 {
        let below = hidden - scroll;
        match (scroll, below) {
            (0, _) => format!("Keys — {below} more line(s) below: j/↓"),
            (_, 0) => "Keys — k/↑ scrolls back".to_owned(),
            _ => format!("Keys — {below} more line(s) below: j/k"),
        }
    } else {
        "Keys".to_owned()
    };
    let block = pane_block(title, true, theme);
    let inner = block.inner(overlay);
    frame.render_widget(block, overlay);
    let [left_area, right_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    let offset = (u16::try_from(scroll).unwrap_or(u16::MAX), 0);
    frame.render_widget(Paragraph::new(left).scroll(offset), left_area);
    frame.render_widget(Paragraph::new(right).scroll(offset), right_area);
}
