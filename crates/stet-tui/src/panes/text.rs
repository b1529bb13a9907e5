//! Text cut to a terminal's width. What reaches a `Span` from outside is first made one line by the
//! one display policy ([`stet_sanitize::display::one_line`]): escape sequences and control
//! characters from the container cannot move the cursor, retitle the window or hide text.

use ratatui::text::Span;

/// How many terminal columns `c` takes.
pub fn char_width(c: char) -> usize {
    let mut buffer = [0; 4];
    Span::raw(&*c.encode_utf8(&mut buffer)).width()
}

/// How many terminal columns one-line `text` takes.
pub fn char_width_of(text: &str) -> usize {
    text.chars().map(char_width).sum()
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

/// Cuts one-line `text` into rows of at most `width` columns at spaces, a word longer than a row
/// cut where the row ends (at least one row, even for "").
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut rows: Vec<String> = Vec::new();
    let mut row = String::new();
    let mut used = 0;
    for word in text.split(' ') {
        let word_width = char_width_of(word);
        if used > 0 && used + 1 + word_width <= width {
            row.push(' ');
            row.push_str(word);
            used += 1 + word_width;
            continue;
        }
        if used > 0 {
            rows.push(std::mem::take(&mut row));
        }
        let mut pieces = wrap(word, width);
        let last = pieces.pop().unwrap_or_default();
        rows.extend(pieces);
        used = char_width_of(&last);
        row = last;
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
    fn word_wrapping_breaks_at_spaces_and_cuts_only_long_words() {
        assert_eq!(
            wrap_words("the quick brown fox", 9),
            ["the quick", "brown fox"]
        );
        assert_eq!(
            wrap_words("a abcdefghij b", 4),
            ["a", "abcd", "efgh", "ij b"]
        );
        assert_eq!(wrap_words("", 4), [""]);
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abcd", 4), "abcd");
        assert_eq!(truncate("ab", 4), "ab");
    }
}
