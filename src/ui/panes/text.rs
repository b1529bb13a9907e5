//! Agent text made inert for the terminal, and cut to a width: escape sequences and control
//! characters from the container never reach a `Span` raw, so they cannot move the cursor, retitle
//! the window or hide text.

use ratatui::text::Span;

/// What a control character or a stripped escape sequence is shown as.
const REPLACEMENT: char = '\u{fffd}';

/// `text` with every escape sequence removed and every other control or bidirectional-override
/// character replaced by `�`; a tab becomes a space. Newlines are replaced too: split lines first.
pub fn inert(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\t' => out.push(' '),
            '\u{1b}' => {
                skip_escape(&mut chars);
                out.push(REPLACEMENT);
            }
            '\u{9b}' => {
                skip_csi(&mut chars);
                out.push(REPLACEMENT);
            }
            c if c.is_control() || is_bidi_control(c) => out.push(REPLACEMENT),
            c => out.push(c),
        }
    }
    out
}

/// Skips the rest of an escape sequence whose `ESC` was just read (CSI, OSC/DCS/APC/PM/SOS strings,
/// or a two-character escape).
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | '_' | '^' | 'X') => {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\u{7}' | '\u{9c}' => break,
                    '\u{1b}' => {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                    _ => {}
                }
            }
        }
        Some(c) if !c.is_control() => {
            chars.next();
        }
        _ => {}
    }
}

/// Skips CSI parameters and intermediates up to and including the final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) || !(' '..='\u{7e}').contains(&c) {
            break;
        }
    }
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// How many terminal columns `c` takes.
pub fn char_width(c: char) -> usize {
    let mut buffer = [0; 4];
    Span::raw(&*c.encode_utf8(&mut buffer)).width()
}

/// Cuts inert `text` into rows of at most `width` columns (at least one row, even for "").
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
    fn escape_sequences_and_controls_become_inert() {
        assert_eq!(inert("a\u{1b}[31mred\u{1b}[0m"), "a�red�");
        assert_eq!(inert("\u{1b}]0;title\u{7}x"), "�x");
        assert_eq!(inert("\u{1b}]8;;http://e\u{1b}\\link"), "�link");
        assert_eq!(inert("bell\u{7}\rback\u{8}"), "bell��back�");
        assert_eq!(inert("tab\there"), "tab here");
        assert_eq!(inert("\u{202e}evil"), "�evil");
        assert_eq!(inert("\u{9b}2Jx"), "�x");
        assert_eq!(inert("plain é 字"), "plain é 字");
    }

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
