//! Agent text made safe to show, shared by the harness parsers: terminal escape sequences removed,
//! every character the display policy does not show ([`stet_sanitize::display::invisible`]) left
//! out, secrets masked, and a bound on length with a note saying how much was cut.

use std::borrow::Cow;
use std::iter::Peekable;
use std::str::Chars;
use std::sync::Arc;

use stet_sanitize::display::{Treatment, treatment};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// Room left at the end of a cut text for the note saying how much was cut.
const NOTE_ROOM: usize = 40;

/// How much past its limit a text is read before it is cleaned and sanitized: room for a secret that
/// starts before the cut to be seen whole (a private key block is a few KiB), while a text of any
/// length costs no more than this to show.
const SANITIZE_MARGIN: usize = 64 * 1024;

/// `text` made safe to show: escape sequences, control characters and invisible characters removed
/// (newlines and tabs kept, a lone carriage return or a line separator read as a newline), secrets
/// masked, then cut to `limit` bytes with a note saying how many more there were (`dropped` of them
/// already passed over before). Only the first `limit` bytes and [`SANITIZE_MARGIN`] are cleaned and
/// sanitized: the rest is counted, never converted.
pub(crate) fn bounded_text(
    sanitizer: &Arc<TokenSanitizer>,
    text: &str,
    limit: usize,
    dropped: usize,
) -> SanitizedText {
    let window = crate::human::truncate(text, limit.saturating_add(SANITIZE_MARGIN));
    let dropped = dropped + (text.len() - window.len());
    let text = window;
    let full = sanitizer.sanitize(&displayable(text));
    let shown = full.as_str();
    if shown.len() <= limit && dropped == 0 {
        return full;
    }
    let kept = crate::human::truncate(shown, limit.saturating_sub(NOTE_ROOM));
    let more = shown.len() - kept.len() + dropped;
    sanitizer.sanitize(&format!("{kept}… ({more} bytes more)"))
}

/// `text` without terminal escape sequences and without the characters the display policy removes;
/// every line break a newline.
pub(crate) fn displayable(text: &str) -> Cow<'_, str> {
    if text.chars().all(|c| treatment(c) == Treatment::Keep) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => shown.push(c),
            '\r' => {
                if chars.peek().is_some_and(|next| *next != '\n') {
                    shown.push('\n');
                }
            }
            '\u{1b}' => skip_escape(&mut chars),
            '\u{9b}' => skip_csi(&mut chars),
            c => match treatment(c) {
                Treatment::Keep => shown.push(c),
                Treatment::Remove => {}
                Treatment::LineBreak => shown.push('\n'),
            },
        }
    }
    Cow::Owned(shown)
}

/// Passes over the rest of an escape sequence whose ESC was just read.
fn skip_escape(chars: &mut Peekable<Chars<'_>>) {
    let Some(&introducer) = chars.peek() else {
        return;
    };
    match introducer {
        '[' => {
            chars.next();
            skip_csi(chars);
        }
        ']' | 'P' | 'X' | '^' | '_' => {
            chars.next();
            skip_control_string(chars);
        }
        '\u{20}'..='\u{2f}' => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
                .is_some()
            {}
            chars.next_if(|c| ('\u{30}'..='\u{7e}').contains(c));
        }
        '\u{30}'..='\u{7e}' => {
            chars.next();
        }
        _ => {}
    }
}

/// Passes over a control sequence's parameters and its final byte.
fn skip_csi(chars: &mut Peekable<Chars<'_>>) {
    while chars
        .next_if(|c| ('\u{20}'..='\u{3f}').contains(c))
        .is_some()
    {}
    chars.next_if(|c| ('\u{40}'..='\u{7e}').contains(c));
}

/// Passes over an OSC, DCS or other control string up to its BEL or ST; a newline ends it too, so an
/// unterminated one cannot swallow the rest of the text.
fn skip_control_string(chars: &mut Peekable<Chars<'_>>) {
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => break,
            '\u{7}' | '\u{9c}' => {
                chars.next();
                break;
            }
            '\u{1b}' => {
                chars.next();
                chars.next_if_eq(&'\\');
                break;
            }
            _ => {
                chars.next();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_text_holds_no_invisible_character() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let shown = bounded_text(
            &sanitizer,
            "rm \u{202e}gpj.exe\u{202c} \u{2066}x\u{2069}\u{200b}\u{feff}\u{e0041}\u{2028}next\u{85}line",
            1024,
            0,
        );
        assert_eq!(shown.as_str(), "rm gpj.exe x\nnext\nline");
    }
}
