//! The transcript pane: the selected dispatch's sanitized items, styled by kind, wrapped to the pane,
//! drawn from the scroll position upwards so only what is visible is ever laid out (the ring may
//! hold a million items).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::{DispatchView, Search, TranscriptLine, TranscriptScroll};
use crate::panes::{count, pane_block, text};
use crate::theme::Theme;
use stet_protocol::event::ItemKind;

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

/// Where the person is looking in the transcript and what they searched for.
#[derive(Debug, Clone, Copy)]
pub struct Viewport<'a> {
    /// Following the tail, or pinned to an item.
    pub scroll: TranscriptScroll,
    /// Its matches are highlighted.
    pub search: Option<&'a Search>,
    /// Whether the pane has the focus (its border shows it).
    pub focused: bool,
}

/// Splits inert `line` into runs in `base` style and `[REDACTED:…]` markers in the redaction style,
/// then marks what `search` matches.
fn styled_runs(
    line: &str,
    base: Style,
    search: Option<&Search>,
    theme: Theme,
) -> Vec<(String, Style)> {
    let runs = redaction_runs(line, base, theme);
    let Some(search) = search else {
        return runs;
    };
    let mut marked = Vec::with_capacity(runs.len());
    for (run, style) in runs {
        let mut last = 0;
        for found in search.pattern().find_iter(&run) {
            if found.start() > last {
                marked.push((run[last..found.start()].to_owned(), style));
            }
            marked.push((found.as_str().to_owned(), theme.search_match()));
            last = found.end();
        }
        if last < run.len() || last == 0 {
            marked.push((run[last..].to_owned(), style));
        }
    }
    marked
}

/// Splits inert `line` into runs in `base` style and `[REDACTED:…]` markers in the redaction style.
fn redaction_runs(line: &str, base: Style, theme: Theme) -> Vec<(String, Style)> {
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

/// The rows of one item wrapped to `width` columns, its mark on the first, `search`'s matches marked.
pub fn item_rows(
    item: &TranscriptLine,
    width: usize,
    search: Option<&Search>,
    theme: Theme,
) -> Vec<Line<'static>> {
    let base = theme.item(item.kind);
    let body_width = width.saturating_sub(2).max(1);
    let mut rows: Vec<Line<'static>> = Vec::new();
    for source_line in item.text.as_str().split('\n') {
        let mut row: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        for (run, style) in styled_runs(&one_line(source_line), base, search, theme) {
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
    viewport: Viewport,
    width: usize,
    height: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let ring = &view.transcript;
    let Some(bottom) = viewport.scroll.bottom(ring.dropped(), ring.len()) else {
        return vec![Line::styled("no transcript yet", theme.muted())];
    };
    let anchor = item_rows(&ring.items()[bottom], width, viewport.search, theme);
    // A search's match keeps the items after it in view: up to two thirds of the pane below it.
    let mut after: Vec<Line<'static>> = Vec::new();
    if viewport.scroll.in_context() {
        let room = height.saturating_sub(height / 3 + anchor.len());
        for item in ring.items().iter().skip(bottom + 1) {
            if after.len() >= room {
                break;
            }
            after.extend(item_rows(item, width, viewport.search, theme));
        }
        after.truncate(room);
    }
    let above_room = height.saturating_sub(anchor.len() + after.len());
    let mut blocks: Vec<Vec<Line<'static>>> = vec![anchor];
    let mut filled = 0;
    let mut reached_start = true;
    for index in (0..bottom).rev() {
        if filled >= above_room {
            reached_start = false;
            break;
        }
        let Some(item) = ring.items().get(index) else {
            break;
        };
        let rows = item_rows(item, width, viewport.search, theme);
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
    let excess = rows
        .len()
        .saturating_sub(height.saturating_sub(after.len()));
    rows.drain(..excess);
    rows.extend(after);
    rows.truncate(height);
    rows
}

/// Draws `view`'s transcript into `area` as `viewport` says.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    view: &DispatchView,
    viewport: Viewport,
    theme: Theme,
) {
    let width = usize::from(area.width.saturating_sub(2));
    let height = usize::from(area.height.saturating_sub(2));
    let items = view.transcript.len() as u64 + view.transcript.dropped();
    let noun = if items == 1 { "item" } else { "items" };
    let mut title = format!("Transcript ({} {noun})", count(items));
    if !viewport.scroll.is_following() {
        title.push_str(" — paused, G follows");
    }
    if let Some(search) = viewport.search {
        title.push_str(&format!(
            " — /{}",
            text::truncate(&one_line(search.query()), 24)
        ));
    }
    frame.render_widget(
        Paragraph::new(visible_rows(view, viewport, width, height, theme)).block(pane_block(
            title,
            viewport.focused,
            theme,
        )),
        area,
    );
}
