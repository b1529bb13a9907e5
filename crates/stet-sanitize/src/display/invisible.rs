//! Which characters of agent text are never shown: the character half of the display policy.
//!
//! Removed: terminal escape sequences whole (`ESC [ … m`, OSC strings up to their terminator, a
//! two-character escape, CSI introduced by U+009B, an OSC, DCS, APC, PM or SOS string introduced by
//! its C1 control up to its terminator); control characters other than newline and tab;
//! every format character (Unicode general
//! category `Cf`: the bidirectional embeddings, overrides, isolates and marks U+202A–202E, U+2066–2069,
//! U+200E/200F, U+061C; the zero-width space, joiners and word joiner U+200B–200D, U+2060; the
//! invisible operators U+2061–2064; U+FEFF; the soft hyphen; the tag characters U+E0000–E007F, which
//! spell hidden ASCII; interlinear annotations; the Arabic, Syriac, Kaithi, Egyptian, shorthand and
//! musical format controls); and every other default-ignorable code point (variation selectors,
//! U+034F, the Hangul fillers, the Khmer inherent vowels, the Mongolian free variation selectors, the
//! code points Unicode reserves as default-ignorable). Line breaks (CR, CR LF, NEL, U+2028, U+2029)
//! become one newline. The tables follow Unicode 16.0.
//!
//! Removing rather than escaping keeps prose readable; the cost is that emoji sequences lose their
//! joiners and variation selectors (a family emoji shows as its members), which no review needs.

use std::borrow::Cow;

/// What the policy does with one character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Shown as it is.
    Keep,
    /// Never shown.
    Remove,
    /// Shown as a newline (`\r` followed by `\n` counts once).
    LineBreak,
}

/// Inclusive ranges of the code points [`Treatment::Remove`] applies to besides control characters:
/// `Cf` and `Default_Ignorable_Code_Point`, merged and sorted.
const INVISIBLE: &[(char, char)] = &[
    ('\u{00ad}', '\u{00ad}'),
    ('\u{034f}', '\u{034f}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061c}', '\u{061c}'),
    ('\u{06dd}', '\u{06dd}'),
    ('\u{070f}', '\u{070f}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08e2}', '\u{08e2}'),
    ('\u{115f}', '\u{1160}'),
    ('\u{17b4}', '\u{17b5}'),
    ('\u{180b}', '\u{180f}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{202a}', '\u{202e}'),
    ('\u{2060}', '\u{206f}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{fe00}', '\u{fe0f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{ffa0}', '\u{ffa0}'),
    ('\u{fff0}', '\u{fffb}'),
    ('\u{110bd}', '\u{110bd}'),
    ('\u{110cd}', '\u{110cd}'),
    ('\u{13430}', '\u{1343f}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0000}', '\u{e0fff}'),
];

/// What the display policy does with `character`.
pub fn treatment(character: char) -> Treatment {
    match character {
        '\n' | '\t' => Treatment::Keep,
        '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => Treatment::LineBreak,
        c if c.is_control() => Treatment::Remove,
        c if c.is_ascii() => Treatment::Keep,
        c => {
            let position = INVISIBLE.partition_point(|(_, last)| *last < c);
            match INVISIBLE.get(position) {
                Some((first, _)) if *first <= c => Treatment::Remove,
                _ => Treatment::Keep,
            }
        }
    }
}

/// Text after [`without_invisible`], and how many characters it lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible<'a> {
    /// The text with every invisible character removed.
    pub text: Cow<'a, str>,
    /// Characters removed, an escape sequence counting once (line breaks that became newlines are
    /// not counted).
    pub removed: usize,
}

/// `text` with every character the policy removes left out (an escape sequence whole) and every line
/// break a newline.
pub fn without_invisible(text: &str) -> Visible<'_> {
    if text.chars().all(|c| treatment(c) == Treatment::Keep) {
        return Visible {
            text: Cow::Borrowed(text),
            removed: 0,
        };
    }
    let mut shown = String::with_capacity(text.len());
    let mut removed = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match treatment(c) {
            Treatment::Keep => shown.push(c),
            Treatment::Remove => {
                removed += 1;
                match c {
                    '\u{1b}' => skip_escape(&mut chars),
                    '\u{9b}' => skip_csi(&mut chars),
                    '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
                    _ => {}
                }
            }
            Treatment::LineBreak => {
                if c == '\r' {
                    chars.next_if_eq(&'\n');
                }
                shown.push('\n');
            }
        }
    }
    Visible {
        text: Cow::Owned(shown),
        removed,
    }
}

/// `text` as one line under the same policy: what [`without_invisible`] shows, with each line break
/// and tab a space. For a status line, a progress line, an error message.
pub fn one_line(text: &str) -> String {
    without_invisible(text).text.replace(['\n', '\t'], " ")
}

/// Skips the rest of an escape sequence whose `ESC` was just read: a CSI, an OSC/DCS/APC/PM/SOS
/// string up to its terminator, or a two-character escape.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | '_' | '^' | 'X') => {
            chars.next();
            skip_string(chars);
        }
        Some(c) if !c.is_control() => {
            chars.next();
        }
        _ => {}
    }
}

/// Skips the rest of an OSC, DCS, APC, PM or SOS string (introduced by `ESC` and a letter, or by its
/// C1 control) up to and including its terminator: BEL, ST (U+009C) or `ESC \`.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => break,
            '\u{1b}' => {
                chars.next_if_eq(&'\\');
                break;
            }
            _ => {}
        }
    }
}

/// Skips CSI parameters and intermediates up to and including the final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next_if(|c| (' '..='\u{7e}').contains(c)) {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            break;
        }
    }
}

/// `name` (a path, a branch) with every character the policy would not show written as an escape
/// (`\u{202e}`, `\n`): for names, where leaving a character out would make two names look alike.
pub fn escaped_invisible(name: &str) -> Cow<'_, str> {
    let hidden = |c: char| c != ' ' && (c.is_control() || treatment(c) != Treatment::Keep);
    if !name.chars().any(hidden) {
        return Cow::Borrowed(name);
    }
    let mut shown = String::with_capacity(name.len() + 16);
    for c in name.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else if hidden(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_go_whole_and_one_line_joins_lines() {
        let cases = [
            ("a\u{1b}[31mred\u{1b}[0m", "ared"),
            ("\u{1b}]0;title\u{7}x", "x"),
            ("\u{1b}]8;;http://e\u{1b}\\link", "link"),
            ("\u{9b}2Jx", "x"),
            ("\u{9d}52;c;aGVsbG8=\u{9c}x", "x"),
            ("\u{90}q\u{1b}\\x", "x"),
            ("\u{1b}[\nnext", "\nnext"),
            ("bell\u{7}back\u{8}", "bellback"),
            ("\u{202e}evil\u{200b}", "evil"),
            ("plain é 字", "plain é 字"),
        ];
        for (raw, shown) in cases {
            assert_eq!(without_invisible(raw).text, shown, "{raw:?}");
        }
        assert_eq!(without_invisible("a\u{1b}[31mb").removed, 1);
        assert_eq!(
            one_line("one\r\ntwo\tthree\u{2028}four"),
            "one two three four"
        );
    }

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for pair in INVISIBLE.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
    }

    #[test]
    fn bidi_controls_zero_width_and_other_format_characters_are_removed() {
        for c in [
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200e}',
            '\u{200f}',
            '\u{061c}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{2061}',
            '\u{2064}',
            '\u{feff}',
            '\u{00ad}',
            '\u{180e}',
            '\u{fff9}',
            '\u{fffb}',
            '\u{e0001}',
            '\u{e0041}',
            '\u{e007f}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{034f}',
            '\u{3164}',
            '\u{115f}',
            '\u{1d173}',
            '\u{13430}',
            '\u{0600}',
            '\u{1b}',
            '\u{7f}',
            '\u{9b}',
            '\0',
        ] {
            assert_eq!(treatment(c), Treatment::Remove, "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn visible_text_is_kept() {
        for c in [
            'a',
            ' ',
            '\n',
            '\t',
            'é',
            'ß',
            'ק',
            'ع',
            '中',
            '😀',
            '\u{a0}',
            '\u{2011}',
            '\u{2212}',
            '\u{300}',
            '\u{fffd}',
            '\u{fffc}',
            '\u{2800}',
            '\u{1f3f4}',
        ] {
            assert_eq!(treatment(c), Treatment::Keep, "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn line_breaks_become_one_newline_each() {
        let shown = without_invisible("a\r\nb\rc\u{2028}d\u{2029}e\u{85}f");
        assert_eq!(shown.text, "a\nb\nc\nd\ne\nf");
        assert_eq!(shown.removed, 0);
    }

    #[test]
    fn trojan_source_and_tag_smuggling_read_as_what_they_say() {
        let reversed =
            without_invisible("access = \"user\u{202e} \u{2066}// admin\u{2069}\u{2066}\"");
        assert_eq!(reversed.text, "access = \"user // admin\"");
        assert_eq!(reversed.removed, 4);
        // "hi" spelled in tag characters after a visible word.
        let smuggled = without_invisible("Done\u{e0068}\u{e0069}.");
        assert_eq!((smuggled.text.as_ref(), smuggled.removed), ("Done.", 2));
        let clean = without_invisible("nothing to remove\n");
        assert!(matches!(clean.text, Cow::Borrowed(_)));
    }

    #[test]
    fn names_show_what_they_hide_as_escapes() {
        assert_eq!(
            escaped_invisible("src/\u{202e}txt.exe\tx\u{200b}"),
            "src/\\u{202e}txt.exe\\tx\\u{200b}"
        );
        assert_eq!(escaped_invisible("src/main.rs"), "src/main.rs");
        assert_eq!(escaped_invisible("a b/ü"), "a b/ü");
    }
}
