//! The inbox pane: every brief with its last-run badge and target, files that failed to read as
//! error rows, so a broken brief is visible instead of silently missing, and below them the work the
//! sweep salvaged from crashed dispatches, badged `[salvaged]`.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{List, ListItem, ListState, Paragraph, Wrap};
use stet_sanitize::display::one_line;

use crate::app::{App, Badge, Focus, InboxRow};
use crate::panes::{pane_block, text};

/// What a badge says.
pub fn badge_label(badge: Badge) -> String {
    badge.label()
}

/// Draws the inbox into `area`.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme();
    let block = pane_block(
        format!("Inbox ({})", app.rows().len()),
        app.focus() == Focus::Inbox && app.reviewing().is_none(),
        theme,
    );
    if app.rows().is_empty() {
        let hint = Text::from(vec![
            Line::from("No briefs in the inbox."),
            Line::raw(""),
            Line::from(vec![
                Span::styled("n", theme.key()),
                Span::styled(
                    " writes a new brief, or add a .toml file to ",
                    theme.muted(),
                ),
                Span::raw(".stet/briefs/"),
                Span::styled(": it shows up here.", theme.muted()),
            ]),
        ]);
        frame.render_widget(
            Paragraph::new(hint).wrap(Wrap { trim: true }).block(block),
            area,
        );
        return;
    }
    let width = usize::from(area.width.saturating_sub(4));
    let items: Vec<ListItem> = app
        .rows()
        .iter()
        .map(|row| match row {
            InboxRow::Brief(brief) => {
                let badge = app.badge(&brief.id);
                let label = format!("[{}] ", badge_label(badge));
                let title_width = width.saturating_sub(one_line(&label).chars().count());
                let target = format!(
                    "  {}@{}",
                    one_line(&brief.target.repo),
                    one_line(&brief.target.base)
                );
                ListItem::new(vec![
                    Line::from(vec![
                        Span::styled(label, theme.badge(badge)),
                        Span::raw(text::truncate(&one_line(&brief.title), title_width)),
                    ]),
                    Line::styled(text::truncate(&target, width), theme.muted()),
                ])
            }
            InboxRow::Invalid { file, line, reason } => {
                let name = file
                    .file_name()
                    .map_or_else(|| file.display().to_string(), |n| n.display().to_string());
                let place = match line {
                    Some(line) => format!("✗ {}:{line}", one_line(&name)),
                    None => format!("✗ {}", one_line(&name)),
                };
                let mut lines = vec![Line::styled(text::truncate(&place, width), theme.error())];
                lines.extend(
                    text::wrap_words(&one_line(reason), width.saturating_sub(2))
                        .into_iter()
                        .take(3)
                        .map(|part| Line::styled(format!("  {part}"), theme.error())),
                );
                ListItem::new(lines)
            }
            InboxRow::Salvaged(result) => {
                let label = "[salvaged] ";
                let title_width = width.saturating_sub(label.chars().count());
                let counts = format!(
                    "  {} file(s) +{} −{} · incomplete, not pushed",
                    result.files, result.insertions, result.deletions
                );
                ListItem::new(vec![
                    Line::from(vec![
                        Span::styled(label, theme.warning()),
                        Span::raw(text::truncate(&one_line(&result.title), title_width)),
                    ]),
                    Line::styled(text::truncate(&counts, width), theme.muted()),
                ])
            }
        })
        .collect();
    let list = List::new(items)
        .block(block)
        .highlight_style(theme.selected())
        .highlight_symbol("▸ ");
    let mut state = ListState::default().with_selected(app.selected());
    frame.render_stateful_widget(list, area, &mut state);
}
