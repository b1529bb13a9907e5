//! The detail pane of a salvaged result: that it is salvaged and incomplete and was never pushed,
//! where it is kept, what the review gate holds in it and what the import left out, then its diff,
//! scrolled as the review gate's is.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::SalvagedResult;
use crate::panes::review::patch_window;
use crate::panes::{pane_block, text};
use crate::theme::Theme;

/// The keys that move a salvaged diff while the inbox keeps `j`/`k` for its rows (the transcript's
/// keys, after Tab, move it too).
const DIFF_KEYS: &str = "PgDn/PgUp · End";

/// The most held paths, and left-out files, listed one per line; the rest are counted.
const MAX_LISTED: usize = 4;

/// The pane's lines for `width` × `height`, the diff from line `scroll`, and how many of them are
/// diff lines.
pub fn laid_out(
    result: &SalvagedResult,
    scroll: usize,
    width: usize,
    height: usize,
    theme: Theme,
) -> (Vec<Line<'static>>, usize) {
    let wrapped = |said: &str, style| {
        text::wrap_words(said, width)
            .into_iter()
            .map(move |row| Line::styled(row, style))
    };
    let mut lines: Vec<Line<'static>> = wrapped(
        "salvaged, incomplete, not pushed: stet never pushes it",
        theme.warning(),
    )
    .collect();
    // Whole, however narrow the pane: it is what a person takes the work further from.
    lines.extend(wrapped(
        &format!("kept at {}", one_line(&result.reference)),
        ratatui::style::Style::new(),
    ));
    lines.push(Line::from(vec![
        Span::raw(format!(
            "salvaged {} · {} file(s), ",
            result.salvaged_at.format("%Y-%m-%d %H:%M"),
            result.files
        )),
        Span::styled(format!("+{}", result.insertions), theme.success()),
        Span::raw(" "),
        Span::styled(format!("−{}", result.deletions), theme.error()),
    ]));
    let listed = |said: String, entries: &[String], style, lines: &mut Vec<Line<'static>>| {
        if entries.is_empty() {
            return;
        }
        lines.extend(wrapped(&said, style));
        for entry in entries.iter().take(MAX_LISTED) {
            lines.push(Line::raw(text::truncate(
                &format!("  {}", one_line(entry)),
                width,
            )));
        }
        if entries.len() > MAX_LISTED {
            lines.push(Line::raw(format!(
                "  … and {} more",
                entries.len() - MAX_LISTED
            )));
        }
    };
    listed(
        format!("⚠ {} held for review:", result.held.len()),
        &result.held,
        theme.warning(),
        &mut lines,
    );
    listed(
        format!("{} left out by the import:", result.warnings.len()),
        &result.warnings,
        theme.muted(),
        &mut lines,
    );
    let patch_room = height.saturating_sub(lines.len() + 1);
    let mut diff_rows = 0;
    if result.patch.is_empty() {
        lines.push(Line::styled("the diff is empty", theme.muted()));
    } else if patch_room > 1 {
        lines.push(Line::raw(""));
        diff_rows = patch_room - 1;
        lines.extend(patch_window(
            &result.patch,
            scroll,
            patch_room,
            width,
            DIFF_KEYS,
            theme,
        ));
    }
    (lines, diff_rows)
}

/// How many diff lines the pane of `width` × `height` shows at once (0: none).
pub fn diff_rows(result: &SalvagedResult, width: usize, height: usize) -> usize {
    laid_out(result, 0, width, height, Theme::Plain).1
}

/// Draws `result` into `area`, its diff scrolled `scroll` lines down.
pub fn render(frame: &mut Frame, area: Rect, result: &SalvagedResult, scroll: usize, theme: Theme) {
    let width = usize::from(area.width.saturating_sub(2));
    let height = usize::from(area.height.saturating_sub(2));
    let block = pane_block(
        format!("Salvaged — {}", one_line(&result.title)),
        false,
        theme,
    );
    frame.render_widget(
        Paragraph::new(laid_out(result, scroll, width, height, theme).0).block(block),
        area,
    );
}
