//! The transcript pane: the selected dispatch's sanitized items, styled by kind, wrapped to the pane,
//! drawn from the scroll position upwards so only what is visible is ever laid out (the ring may
//! hold a million items).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::dispatch::event::ItemKind;
use crate::ui::app::{DispatchView, TranscriptLine, TranscriptScroll};
use crate::ui::panes::{count, pane_block, text};
use crate::ui::theme::Theme;

const REDACTION_OPEN: &str = "[REDACTED:";

/// The mark in front of an item of `kind`; every mark is two columns wide.
fn mark(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::Message => "» ",
        ItemKind::Thought => "… ",
        ItemKind::Command => "$ ",
        ItemKind::Output => "  ",
        ItemKind::Error => "! ",
        ItemKind::Finish => "✓ ",
        ItemKind::Other => "· ",
    }
}

/// Splits inert `line` into runs in `base` style and `[REDACTED:…]` markers in the redaction style.
fn styled_runs(line: &str, base: Style, theme: Theme) -> Vec<(String, Style)> {
    let mut runs = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find(REDACTION_OPEN) {
        let Some(length) = rest[start..].find(']') else {
            break;
        };
        if start > 0 {
            runs.push((rest[..start].to_owned(), base));
        }
        let end = start + length + 1;
        runs.push((rest[start..end].to_owned(), theme.redaction()));
        rest = &rest[end..];
    }
    if !rest.is_empty() || runs.is_empty() {
        runs.push((rest.to_owned(), base));
    }
    runs
}

/// The rows of one item wrapped to `width` columns, its mark on the first.
pub fn item_rows(item: &TranscriptLine, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let base = theme.item(item.kind);
    let body_width = width.saturating_sub(2).max(1);
    let mut rows: Vec<Line<'static>> = Vec::new();
    for source_line in item.text.as_str().split('\n') {
        let mut row: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        for (run, style) in styled_runs(&text::inert(source_line), base, theme) {
            let mut piece = String::new();
            for c in run.chars() {
                let w = text::char_width(c);
                if used + w > body_width && used > 0 {
                    if !piece.is_empty() {
                        row.push(Span::styled(std::mem::take(&mut piece), style));
                    }
                    rows.push(Line::from(std::mem::take(&mut row)));
                    used = 0;
                }
                piece.push(c);
                used += w;
            }
            if !piece.is_empty() {
                row.push(Span::styled(piece, style));
            }
        }
        rows.push(Line::from(row));
    }
    for (index, row) in rows.iter_mut().enumerate() {
        let lead = if index == 0 { mark(item.kind) } else { "  " };
        row.spans.insert(0, Span::styled(lead, base));
    }
    if item.text.hidden_bytes() > 0 {
        rows.push(Line::styled(
            format!(
                "  … {} more byte(s) in the run record",
                count(item.text.hidden_bytes() as u64)
            ),
            theme.muted(),
        ));
    }
    rows
}

/// The rows that fill a pane `width` × `height` with the item at `scroll`'s bottom last.
pub fn visible_rows(
    view: &DispatchView,
    scroll: TranscriptScroll,
    width: usize,
    height: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let ring = &view.transcript;
    let Some(bottom) = scroll.bottom(ring.dropped(), ring.len()) else {
        return vec![Line::styled("no transcript yet", theme.muted())];
    };
    let mut blocks: Vec<Vec<Line<'static>>> = Vec::new();
    let mut filled = 0;
    let mut reached_start = true;
    for index in (0..=bottom).rev() {
        if filled >= height {
            reached_start = false;
            break;
        }
        let Some(item) = ring.items().get(index) else {
            break;
        };
        let rows = item_rows(item, width, theme);
        filled += rows.len();
        blocks.push(rows);
    }
    let mut rows: Vec<Line<'static>> = blocks.into_iter().rev().flatten().collect();
    if reached_start && ring.dropped() > 0 {
        rows.insert(
            0,
            Line::styled(
                format!(
                    "… {} older item(s) dropped from view; the run record has them all",
                    count(ring.dropped())
                ),
                theme.muted(),
            ),
        );
    }
    let excess = rows.len().saturating_sub(height);
    rows.drain(..excess);
    rows
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    view: &DispatchView,
    scroll: TranscriptScroll,
    focused: bool,
    theme: Theme,
) {
    let width = usize::from(area.width.saturating_sub(2));
    let height = usize::from(area.height.saturating_sub(2));
    let items = view.transcript.len() as u64 + view.transcript.dropped();
    let noun = if items == 1 { "item" } else { "items" };
    let title = if scroll.is_following() {
        format!("Transcript ({} {noun})", count(items))
    } else {
        format!("Transcript ({} {noun}) — paused, G follows", count(items))
    };
    frame.render_widget(
        Paragraph::new(visible_rows(view, scroll, width, height, theme))
            .block(pane_block(title, focused, theme)),
        area,
    );
}
