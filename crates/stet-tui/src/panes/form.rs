//! The *New brief* form as a centred overlay: one labelled row per field, the items added so far,
//! why the last save was refused, and the keys that drive it.

use ratatui::Frame;
use ratatui::layout::{Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use stet_sanitize::display::one_line;

use crate::form::{Field, NewBriefForm};
use crate::panes::{centred, pane_block, text};
use crate::theme::Theme;

/// The overlay's width, borders included, when the screen allows it.
const WIDTH: u16 = 72;

/// Columns before a field's value: a focus marker, the label and a gap (`› Title  `).
const VALUE_COLUMN: usize = 9;

/// Most rows the list of added items takes.
const MAX_ITEM_ROWS: usize = 8;

/// The keys the form answers to, in the order the hint line shows them.
const HINTS: [(&str, &str); 4] = [
    ("Tab", "next field"),
    ("Enter", "add item"),
    ("Ctrl-S", "save"),
    ("Esc", "cancel"),
];

/// Draws `form` over `area`, and puts the terminal cursor in the focused field.
pub fn render(frame: &mut Frame, area: Rect, form: &NewBriefForm, theme: Theme) {
    let width = WIDTH.min(area.width);
    let inner_width = usize::from(width.saturating_sub(2));
    let value_width = inner_width.saturating_sub(VALUE_COLUMN).max(1);
    let error_rows = form.error().map_or_else(Vec::new, |error| {
        text::wrap(&one_line(error), inner_width.max(1))
    });
    // The field rows, a blank row, the error, the hint and the two borders.
    let other_rows = Field::ALL.len() + 1 + error_rows.len() + 1 + 2;
    let item_room = usize::from(area.height)
        .saturating_sub(other_rows)
        .min(MAX_ITEM_ROWS);

    let mut lines = Vec::new();
    let mut cursor = None;
    for field in Field::ALL {
        let focused = form.focus() == field;
        let marker = if focused { "› " } else { "  " };
        let label_style = if focused { theme.key() } else { theme.muted() };
        let value = form.value(field);
        let (shown, column) = if value.is_empty() {
            let hint = text::truncate(placeholder(field), value_width);
            (Span::styled(hint, theme.muted()), 0)
        } else if focused {
            let (window, column) = scrolled(value, form.cursor(), value_width);
            (Span::raw(window), column)
        } else {
            let cut = text::truncate(&one_line(value), value_width);
            (Span::raw(cut), 0)
        };
        if focused {
            cursor = Some((lines.len(), column));
        }
        lines.push(Line::from(vec![
            Span::styled(marker, theme.key()),
            Span::styled(
                format!("{:<width$}", field.label(), width = VALUE_COLUMN - 2),
                label_style,
            ),
            shown,
        ]));
        if field == Field::Items {
            lines.extend(item_rows(form.items(), item_room, value_width, theme));
        }
    }
    lines.push(Line::raw(""));
    lines.extend(
        error_rows
            .into_iter()
            .map(|row| Line::styled(row, theme.error())),
    );
    lines.push(hint_line(theme));

    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let dialog = centred(area, width, height);
    frame.render_widget(Clear, dialog);
    frame.render_widget(
        Paragraph::new(lines).block(pane_block("New brief".to_owned(), true, theme)),
        dialog,
    );
    if let Some((row, column)) = cursor {
        let x = usize::from(dialog.x) + 1 + VALUE_COLUMN + column;
        let y = usize::from(dialog.y) + 1 + row;
        if let (Ok(x), Ok(y)) = (u16::try_from(x), u16::try_from(y))
            && x < dialog.right().saturating_sub(1)
            && y < dialog.bottom().saturating_sub(1)
        {
            frame.set_cursor_position(Position { x, y });
        }
    }
}

/// What an empty field shows, muted and in parentheses (so it reads as a hint without colour too).
fn placeholder(field: Field) -> &'static str {
    match field {
        Field::Title => "(what the agent should do, in a few words)",
        Field::Repo => "(owner/name)",
        Field::Base => "(the branch the work starts from)",
        Field::Items => "(one thing to do, then Enter)",
    }
}

/// The part of `value` that fits in `width` columns with the cursor at `cursor` visible, and the
/// cursor's column within it.
fn scrolled(value: &str, cursor: usize, width: usize) -> (String, usize) {
    let shown = one_line(value);
    let scroll = cursor.saturating_sub(width.saturating_sub(1));
    let mut skipped = 0;
    let mut rest = shown.as_str();
    while skipped < scroll {
        let mut chars = rest.chars();
        let Some(character) = chars.next() else {
            break;
        };
        skipped += text::char_width(character);
        rest = chars.as_str();
    }
    let mut window = String::new();
    let mut used = 0;
    for character in rest.chars() {
        let character_width = text::char_width(character);
        if used + character_width > width {
            break;
        }
        window.push(character);
        used += character_width;
    }
    (window, cursor.saturating_sub(skipped))
}

/// The added items, numbered and cut to `width`, in at most `room` rows: the last row says how many
/// did not fit.
fn item_rows(items: &[String], room: usize, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let listed = if items.len() > room {
        room.saturating_sub(1)
    } else {
        items.len()
    };
    let indent = " ".repeat(VALUE_COLUMN);
    let mut rows: Vec<Line<'static>> = items
        .iter()
        .take(listed)
        .enumerate()
        .map(|(index, item)| {
            let number = format!("{}. ", index + 1);
            let item_width = width.saturating_sub(number.chars().count());
            Line::from(vec![
                Span::raw(indent.clone()),
                Span::styled(number, theme.muted()),
                Span::raw(text::truncate(&one_line(item), item_width)),
            ])
        })
        .collect();
    if listed < items.len() && room > 0 {
        rows.push(Line::from(vec![
            Span::raw(indent),
            Span::styled(
                format!("… and {} more", items.len() - listed),
                theme.muted(),
            ),
        ]));
    }
    rows
}

fn hint_line(theme: Theme) -> Line<'static> {
    let mut spans = Vec::new();
    for (key, description) in HINTS {
        if !spans.is_empty() {
            spans.push(Span::raw(" · "));
        }
        spans.push(Span::styled(key, theme.key()));
        spans.push(Span::raw(format!(" {description}")));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::Terminal;
    use ratatui::backend::{Backend, TestBackend};

    use super::*;
    use crate::form::tests::{press, type_text};
    use crate::panes::assert_screen;

    /// The screen with `form` drawn over it, and where the terminal cursor was put.
    fn screen(form: &NewBriefForm, width: u16, height: u16) -> (String, Position) {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| render(frame, frame.area(), form, Theme::Colour))
            .unwrap();
        let cursor = terminal.backend_mut().get_cursor_position().unwrap();
        (terminal.backend().to_string(), cursor)
    }

    /// A form with a title, repo, base, two items and an item being typed, after a refused save.
    fn filled() -> NewBriefForm {
        let mut form = NewBriefForm::new("octo/app", "");
        type_text(&mut form, "Fix the \"login\" redirect loop");
        press(&mut form, KeyCode::Tab);
        press(&mut form, KeyCode::Tab);
        press(&mut form, KeyCode::Tab);
        type_text(
            &mut form,
            "Reproduce the loop with an expired session cookie",
        );
        press(&mut form, KeyCode::Enter);
        type_text(&mut form, "Add a regression test");
        press(&mut form, KeyCode::Enter);
        type_text(&mut form, "Update the changelog");
        let save = KeyEvent::new(KeyCode::Char('s'), KeyModifiers::CONTROL);
        form.handle_key(save);
        form
    }

    #[test]
    fn empty_form() {
        let form = NewBriefForm::new("", "");
        let (shown, cursor) = screen(&form, 80, 16);
        assert_eq!(cursor, Position { x: 14, y: 5 });
        assert_screen!(shown);
    }

    #[test]
    fn filled_form_with_items_and_an_error() {
        let form = filled();
        let (shown, cursor) = screen(&form, 80, 18);
        assert!(shown.contains("Base: the base branch is empty"), "{shown}");
        assert_eq!(form.cursor(), 0);
        assert_eq!(
            cursor.x, 14,
            "the cursor sits at the start of the empty base"
        );
        assert_screen!(shown);
    }

    #[test]
    fn items_that_do_not_fit_are_counted() {
        let mut form = filled();
        press(&mut form, KeyCode::Down);
        press(&mut form, KeyCode::Enter);
        for number in 1..=12 {
            type_text(&mut form, &format!("Item {number}"));
            press(&mut form, KeyCode::Enter);
        }
        let (shown, _) = screen(&form, 80, 40);
        assert!(shown.contains("7. Item 4"), "{shown}");
        assert!(shown.contains("… and 8 more"), "{shown}");
        let (shown, _) = screen(&form, 80, 14);
        assert!(shown.contains("1. Reproduce"), "{shown}");
        assert!(shown.contains("… and 11 more"), "{shown}");
    }

    #[test]
    fn a_long_value_scrolls_to_keep_the_cursor_in_view() {
        let mut form = NewBriefForm::new("", "");
        type_text(&mut form, &"abcdefghij".repeat(10));
        let (shown, cursor) = screen(&form, 40, 12);
        assert!(shown.contains("abcdefghij"), "{shown}");
        assert_eq!(
            cursor.x,
            1 + 9 + 28,
            "the cursor sits after the last visible column"
        );
        assert_eq!(scrolled("abcdef", 6, 4), ("def".to_owned(), 3));
        assert_eq!(scrolled("abcdef", 1, 4), ("abcd".to_owned(), 1));
        assert_eq!(scrolled("字字字", 6, 4), ("字".to_owned(), 2));
    }
}
