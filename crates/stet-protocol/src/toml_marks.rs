//! How costly a TOML text is to parse, counted before parsing it: a brief of 1 MiB can hold a
//! hundred thousand tiny inline tables (`{text="a"},` twelve bytes apiece), which the parser turns
//! into as many spanned values, some seconds and over a hundred MiB each, and an inbox sixteen of
//! them (DESIGN §5 row 23, §8). One pass over the bytes counts the marks every key, value, array
//! and table begins or ends with (`=`, `,`, `[`, `{`, `.`) outside strings and comments, so such a
//! shape is refused for the cost of reading it.

/// The marks of `text`: each `=`, `,`, `[`, `{` and `.` outside strings and comments. A string or
/// comment left open runs to the end of the text (the parser refuses it later).
pub fn count(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut marks = 0;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        match byte {
            b'#' => at = line_end(bytes, at),
            b'"' | b'\'' => {
                let triple = bytes.get(at..at + 2) == Some(&[byte, byte][..]);
                at = if triple {
                    multi_line_end(bytes, at + 2, byte)
                } else {
                    string_end(bytes, at, byte)
                };
            }
            b'=' | b',' | b'[' | b'{' | b'.' => marks += 1,
            _ => {}
        }
    }
    marks
}

/// Where a comment starting before `at` ends: at its newline.
fn line_end(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .position(|byte| *byte == b'\n')
        .map_or(bytes.len(), |offset| at + offset)
}

/// Just past the quote closing a one-line string that began before `at` (a basic string's
/// backslash escapes the byte after it); a newline ends it too.
fn string_end(bytes: &[u8], mut at: usize, quote: u8) -> usize {
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        match byte {
            b'\\' if quote == b'"' => at += 1,
            b'\n' => return at,
            _ if byte == quote => return at,
            _ => {}
        }
    }
    bytes.len()
}

/// Just past the three quotes closing a multi-line string whose opening three end before `at`.
fn multi_line_end(bytes: &[u8], mut at: usize, quote: u8) -> usize {
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        if byte == b'\\' && quote == b'"' {
            at += 1;
        } else if byte == quote && bytes.get(at..at + 2) == Some(&[quote, quote][..]) {
            return at + 2;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_outside_strings_and_comments_are_counted() {
        let text = concat!(
            "title = \"a, b. [c] = {d}\" # e, f = [g]\n",
            r#"items = [{text = 'h, i'}, {text = """j\""", k"""}]"#,
            "\n[target]\nrepo.x = '''l,m'''\n",
        );
        // title =; items = [ { = , { =; [ target; repo . x =
        assert_eq!(count(text), 11);
        assert_eq!(count("{text=\"a\"},".repeat(1000).as_str()), 3000);
    }

    #[test]
    fn an_escaped_quote_does_not_end_a_string() {
        assert_eq!(count(r#"a = "\" , , , \\" , ="#), 3);
        assert_eq!(count("a = \"open, , ,\nb = 1"), 2);
        assert_eq!(count("a = '''open, , ,"), 1);
    }
}
