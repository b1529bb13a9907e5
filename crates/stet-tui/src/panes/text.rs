//! Text cut to a terminal's width. What reaches a `Span` from outside is first made one line by the
//! one display policy ([`stet_sanitize::display::one_line`]): escape sequences and control
//! characters from the container cannot move the cursor, retitle the window or hide text.

use ratatui::text::Span;

/// How many terminal columns `c` takes.
pub fn char_width(c: char) -> usize {
    let mut buffer = [0; 4];
    Span::raw(&*c.encode_utf8(&mut buffer)).width()
}

/// Cuts one-line `text` into rows of at most `width` columns (at least one row, even for "").
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut rows = Vec::new();
    let mut row = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w > width && !row.is_empty() {
            rows.push(std::mem::take(&mut row));
            used = 0;
        }
        row.push(c);
        used += w;
    }
    rows.push(row);
    rows
}

/// `text` cut to `width` columns, with `…` when something was cut.
pub fn truncate(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w > width.saturating_sub(1) {
            let rest: usize = text[out.len()..].chars().map(char_width).sum();
            if used + rest <= width {
                out.push_str(&text[out.len()..]);
            } else {
                out.push('…');
            }
            return out;
        }
        out.push(c);
        used += w;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_counts_columns() {
        assert_eq!(wrap("abcdef", 4), ["abcd", "ef"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(wrap("字字字", 4), ["字字", "字"]);
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abcd", 4), "abcd");
        assert_eq!(truncate("ab", 4), "ab");
    }
}
