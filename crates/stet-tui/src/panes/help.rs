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
                Span::styled(format!("  {:<8}", binding.keys), theme.key()),
                Span::raw(binding.description),
            ]));
        }
    }
    lines
}

/// Draws the overlay in two columns, the browsing keys left and the question keys right.
pub fn render(frame: &mut Frame, area: Rect, theme: Theme) {
    let (left, right) = Context::ALL.split_at(3);
    let left = lines(left, theme);
    let right = lines(right, theme);
    let height = u16::try_from(left.len().max(right.len()) + 2).unwrap_or(u16::MAX);
    let overlay = centred(area, 76, height);
    frame.render_widget(Clear, overlay);
    let block = pane_block("Keys".to_owned(), true, theme);
    let inner = block.inner(overlay);
    frame.render_widget(block, overlay);
    let [left_area, right_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    frame.render_widget(Paragraph::new(left), left_area);
    frame.render_widget(Paragraph::new(right), right_area);
}
