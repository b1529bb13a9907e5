//! The review gate pane: what the agent changed (from stet's trusted import, not the agent's word),
//! first of all any secret the scan found in it (the diff below shows it masked; the push would carry
//! it in clear) and the paths held for approval with the rule holding each, then the files and the
//! patch, and the keys that push it or throw it away.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::{CollectedResult, DispatchView, PatchState, PatchText};
use crate::keymap::{Context, KEYMAP};
use crate::panes::{pane_block, text};
use crate::theme::Theme;
use stet_protocol::event::ChangeKind;

fn change_mark(change: ChangeKind) -> &'static str {
    match change {
        ChangeKind::Added => "A",
        ChangeKind::Modified => "M",
        ChangeKind::Deleted => "D",
        ChangeKind::TypeChanged => "T",
    }
}

/// The most secrets, and held paths, listed one per line; the rest are counted.
const MAX_LISTED: usize = 6;

/// What needs a person's eyes before anything else: the secrets found, then the held paths.
fn alerts(collected: &CollectedResult, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let item = |text: String, lines: &mut Vec<Line<'static>>| {
        lines.push(Line::raw(text::truncate(&format!("  {text}"), width)));
    };
    let secrets = &collected.secrets;
    let all_secrets = secrets.len() + collected.secrets_not_listed;
    if all_secrets > 0 {
        let said =
            format!("✖ {all_secrets} secret(s) in the result — masked below, in clear if pushed");
        lines.extend(
            text::wrap_words(&said, width)
                .into_iter()
                .map(|row| Line::styled(row, theme.error())),
        );
        for secret in secrets.iter().take(MAX_LISTED) {
            let place = match secret.line {
                Some(line) => format!("{} line {line}", one_line(secret.path.as_str())),
                None => format!("the name {}", one_line(secret.path.as_str())),
            };
            item(
                format!("{place}: {}", one_line(secret.kind.as_str())),
                &mut lines,
            );
        }
        let shown = secrets.len().min(MAX_LISTED);
        if all_secrets > shown {
            item(format!("… and {} more", all_secrets - shown), &mut lines);
        }
    }
    let held: Vec<String> = if collected.held.is_empty() {
        collected
            .protected
            .iter()
            .map(|held| one_line(held.as_str()))
            .collect()
    } else {
        collected
            .held
            .iter()
            .map(|held| {
                format!(
                    "{}: {}",
                    one_line(held.path.as_str()),
                    one_line(held.rule.as_str())
                )
            })
            .collect()
    };
    let all_held = held.len() + collected.held_not_listed;
    if all_held > 0 {
        let said =
            format!("⚠ {all_held} path(s) held for your approval — read them before pushing:");
        lines.extend(
            text::wrap_words(&said, width)
                .into_iter()
                .map(|row| Line::styled(row, theme.warning())),
        );
        for entry in held.iter().take(MAX_LISTED) {
            item(entry.clone(), &mut lines);
        }
        let shown = held.len().min(MAX_LISTED);
        if all_held > shown {
            item(format!("… and {} more", all_held - shown), &mut lines);
        }
    }
    lines
}

/// The style of a patch line, by what it is.
fn patch_style(line: &str, theme: Theme) -> ratatui::style::Style {
    if line.starts_with("diff --git") {
        theme.title()
    } else if line.starts_with("+++") || line.starts_with("---") || line.starts_with("index ") {
        theme.muted()
    } else if line.starts_with("@@") {
        theme.key()
    } else if line.starts_with('+') {
        theme.success()
    } else if line.starts_with('-') {
        theme.error()
    } else {
        ratatui::style::Style::new()
    }
}

/// The keys that move the review gate's diff, as its last line names them.
const REVIEW_DIFF_KEYS: &str = "j/k · Space page · g/G";

/// `rows` lines of `patch` from line `first`, each cut to `width` columns, with where they are and
/// the `keys` that move them.
pub(crate) fn patch_window(
    patch: &PatchText,
    first: usize,
    rows: usize,
    width: usize,
    keys: &str,
    theme: Theme,
) -> Vec<Line<'static>> {
    if rows == 0 {
        return Vec::new();
    }
    let first = first.min(patch.len().saturating_sub(1));
    let shown = rows - 1;
    let mut lines: Vec<Line<'static>> = (first..patch.len())
        .take(shown)
        .filter_map(|index| patch.line(index))
        .map(|line| {
            Line::styled(
                text::truncate(&one_line(line), width),
                patch_style(line, theme),
            )
        })
        .collect();
    let last = (first + lines.len()).min(patch.len());
    lines.push(Line::styled(
        format!(
            "diff lines {}–{last} of {} · {keys}",
            first + usize::from(last > 0),
            patch.len()
        ),
        theme.muted(),
    ));
    lines
}

/// The lines of the gate for a pane `width` columns wide and `height` rows high, with the patch
/// from line `scroll`, without the block.
pub fn lines(
    view: &DispatchView,
    scroll: usize,
    width: usize,
    height: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    laid_out(view, scroll, width, height, theme).0
}

/// How many diff lines the gate of a pane `width` × `height` shows at once (0: none).
pub fn diff_rows(view: &DispatchView, width: usize, height: usize) -> usize {
    laid_out(view, 0, width, height, Theme::Plain).1
}

/// The gate's lines, and how many of them are diff lines.
fn laid_out(
    view: &DispatchView,
    scroll: usize,
    width: usize,
    height: usize,
    theme: Theme,
) -> (Vec<Line<'static>>, usize) {
    let mut diff_rows = 0;
    let mut head = Vec::new();
    let mut tail = Vec::new();
    if let Some(plan) = &view.plan {
        head.push(Line::raw(text::truncate(
            &format!(
                "{} → {}@{} as {}",
                one_line(plan.title.as_str()),
                one_line(plan.repo.as_str()),
                one_line(plan.base.as_str()),
                one_line(plan.branch.as_str())
            ),
            width,
        )));
    }
    let Some(collected) = &view.collected else {
        head.push(Line::styled(
            "the result is still being collected",
            theme.muted(),
        ));
        return (head, diff_rows);
    };
    head.push(Line::from(vec![
        Span::styled(
            format!(
                "commit {}",
                collected.commit.as_str().get(..12).unwrap_or_default()
            ),
            theme.muted(),
        ),
        Span::raw(format!(
            " · {} file(s) changed, ",
            collected.files.len() + collected.files_not_listed
        )),
        Span::styled(format!("+{}", collected.insertions), theme.success()),
        Span::raw(" "),
        Span::styled(format!("−{}", collected.deletions), theme.error()),
    ]));
    head.extend(alerts(collected, width, theme));
    head.push(Line::raw(""));
    tail.push(Line::raw(""));
    let mut keys = Vec::new();
    let mut room = width;
    for binding in KEYMAP
        .iter()
        .filter(|b| b.context == Context::Review && b.rank <= 2)
    {
        let separator = if keys.is_empty() { "" } else { " · " };
        let needed = separator.len()
            + text::char_width_of(binding.keys)
            + 1
            + text::char_width_of(binding.description);
        if needed > room {
            break;
        }
        room -= needed;
        keys.push(Span::raw(separator));
        keys.push(Span::styled(binding.keys, theme.key()));
        keys.push(Span::raw(format!(" {}", binding.description)));
    }
    tail.push(Line::from(keys));

    let room = height.saturating_sub(head.len() + tail.len());
    // The file list gets a third of the room when there is a patch to show below it.
    let has_patch = matches!(&view.patch, Some(PatchState::Loaded(patch)) if !patch.is_empty());
    let file_room = if has_patch { (room / 3).max(2) } else { room };
    let all_files = collected.files.len() + collected.files_not_listed;
    let shown = if all_files > file_room {
        file_room.saturating_sub(1).min(collected.files.len())
    } else {
        collected.files.len()
    };
    let number_width = 12;
    for file in collected.files.iter().take(shown) {
        let stat = if file.cut {
            "cut".to_owned()
        } else if file.binary {
            "binary".to_owned()
        } else {
            format!("+{} −{}", file.insertions, file.deletions)
        };
        let path_width = width.saturating_sub(2 + number_width);
        let path = text::truncate(&one_line(file.path.as_str()), path_width);
        head.push(Line::from(vec![
            Span::styled(format!("{} ", change_mark(file.change)), theme.key()),
            Span::raw(format!("{path:<path_width$}")),
            Span::styled(format!("{stat:>number_width$}"), theme.muted()),
        ]));
    }
    if shown < all_files {
        head.push(Line::styled(
            format!("… and {} more file(s)", all_files - shown),
            theme.muted(),
        ));
    }
    let patch_room = height.saturating_sub(head.len() + tail.len() + 1);
    match &view.patch {
        Some(PatchState::Loaded(patch)) if !patch.is_empty() && patch_room > 1 => {
            head.push(Line::raw(""));
            diff_rows = patch_room - 1;
            head.extend(patch_window(
                patch,
                scroll,
                patch_room,
                width,
                REVIEW_DIFF_KEYS,
                theme,
            ));
        }
        Some(PatchState::Loading) if patch_room > 0 => {
            head.push(Line::styled("reading the diff…", theme.muted()));
        }
        Some(PatchState::Unavailable(reason)) if patch_room > 0 => head.push(Line::styled(
            text::truncate(
                &format!("the diff cannot be shown: {}", one_line(reason)),
                width,
            ),
            theme.error(),
        )),
        _ => {}
    }
    head.extend(tail);
    (head, diff_rows)
}

/// Draws the review gate of `view` into `area`, its diff scrolled `scroll` lines down.
pub fn render(frame: &mut Frame, area: Rect, view: &DispatchView, scroll: usize, theme: Theme) {
    let width = usize::from(area.width.saturating_sub(2));
    let height = usize::from(area.height.saturating_sub(2));
    let block = pane_block(
        format!("Review — {}: awaiting approval", one_line(&view.brief)),
        true,
        theme,
    );
    frame.render_widget(
        Paragraph::new(lines(view, scroll, width, height, theme)).block(block),
        area,
    );
}
