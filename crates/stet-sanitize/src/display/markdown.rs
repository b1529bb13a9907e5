//! Agent text made inert for a forge's markdown: the other half of the display policy. GitHub,
//! Gitea and GitLab render a pull request body (and may render a commit message, when it fills in a
//! pull request) as markdown, so a remote image in it is fetched by whoever views it — a channel out
//! for anything the agent put in the URL — and a link is one click from a page the agent chose.
//!
//! The rewrite does not trust any parser to agree with the forge's. Instead it keeps one invariant:
//! outside the code spans and code blocks it writes itself, the output holds no unescaped `[`, `]`,
//! `` ` ``, `\`, `$` or `~~~`, no `<` (written `&lt;`), no character reference (`&` before one is
//! written `&amp;`), no line a table could be built on, and no URL, `www.` host or e-mail address.
//! Every URL goes into a code span, which no forge links, fetches or parses. Code spans and fenced
//! blocks the agent wrote keep their text, inside delimiters chosen here so nothing can close them
//! early; fences lose their info string, since a `mermaid`, `math` or `geojson` block renders live.
//!
//! On top of the invariant, the usual constructs get a readable rendering:
//!
//! | agent wrote | becomes |
//! |---|---|
//! | `![alt](https://x/a.png)` | ``alt (image: `https://x/a.png`)`` |
//! | `[text](https://x/)`, `[text][ref]` with `[ref]: https://x/` | ``text (`https://x/`)`` |
//! | `[ref]: https://x/ "title"` | ``\[ref\]: `https://x/` "title"`` |
//! | `<https://x/>`, `https://x/`, `www.x.org`, `me@x.org` | `` `https://x/` `` and so on |
//! | `<img src="https://x/">` | ``&lt;img src="`https://x/`">`` |
//!
//! The sanitizer's `[REDACTED:kind]` markers stay as they are, their brackets escaped only where
//! they could start a link.

use std::collections::HashMap;

/// How far a link's text or destination may reach from its `[`; a longer one is left as text
/// (escaped, so inert), which keeps the rewrite linear in its input.
const MAX_LINK_SPAN: usize = 1024;

/// Links inside link text deeper than this are left as text.
const MAX_NESTING: usize = 3;

/// The longest URL scheme looked for before `:`.
const MAX_SCHEME: usize = 32;

/// Schemes that need no `//` to be dangerous in a link or an autolink.
const BARE_SCHEMES: &[&str] = &["mailto", "xmpp", "javascript", "vbscript", "data", "file"];

/// Agent text made inert, and how many constructs were rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inert {
    /// The rewritten text.
    pub text: String,
    /// Links, images, autolinks and reference definitions rewritten; bare URLs are not counted.
    pub defanged: usize,
}

/// `text` rewritten so that a forge's markdown shows it without fetching or linking anything.
pub fn inert_markdown(text: &str) -> Inert {
    let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = normalized.split('\n').collect();
    let definitions = definitions(&lines);
    let mut writer = Writer {
        definitions: &definitions,
        out: String::with_capacity(text.len() + text.len() / 4),
        defanged: 0,
    };
    let mut index = 0;
    while index < lines.len() {
        if index > 0 {
            writer.out.push('\n');
        }
        if let Some(fence) = Fence::opening(lines[index]) {
            let close = (index + 1..lines.len()).find(|&line| fence.closes(lines[line]));
            let content = &lines[index + 1..close.unwrap_or(lines.len())];
            writer.fenced(content);
            index = close.map_or(lines.len(), |line| line + 1);
        } else {
            writer.line(lines[index]);
            index += 1;
        }
    }
    Inert {
        text: writer.out,
        defanged: writer.defanged,
    }
}

/// Inert markdown as a terminal shows it: the two character references the rewrite writes (`&lt;`
/// for `<`, `&amp;` for `&`) read back in one pass, so `stet reviews` prints `<name>` where the
/// forge renders it. A terminal renders no HTML; the invisible filter still applies after this.
pub fn for_terminal(markdown: &str) -> String {
    let mut shown = String::with_capacity(markdown.len());
    let mut rest = markdown;
    while let Some(at) = rest.find('&') {
        shown.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("&lt;") {
            shown.push('<');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("&amp;") {
            shown.push('&');
            rest = after;
        } else {
            shown.push('&');
            rest = &tail[1..];
        }
    }
    shown.push_str(rest);
    shown
}

/// `text` as a code span, shown literally by every markdown renderer; newlines become spaces. Empty
/// text gives an empty string (markdown has no empty code span).
pub fn code_span(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    if text.is_empty() {
        return String::new();
    }
    let fence = "`".repeat(longest_run(text.as_bytes(), b'`') + 1);
    // A space inside each delimiter keeps a backtick at either end from joining it, and markdown
    // strips exactly one such pair; text that itself starts and ends with a space needs it too.
    let pad = text.starts_with('`')
        || text.ends_with('`')
        || (text.starts_with(' ') && text.ends_with(' ') && text.trim() != "");
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// `text` as a code span inside a markdown table cell: a table splits its cells at `|` even inside a
/// code span (and reads `\|` differently from one renderer to the next), so `|` becomes `¦`.
pub fn table_cell_code(text: &str) -> String {
    code_span(&text.replace('|', "\u{a6}"))
}

/// The link reference definitions of `lines` that stand on one line, by normalized label; the first
/// of a label wins, as in CommonMark.
fn definitions(lines: &[&str]) -> HashMap<String, String> {
    let mut found = HashMap::new();
    let mut fence: Option<Fence> = None;
    for line in lines {
        match fence {
            Some(open) if open.closes(line) => fence = None,
            Some(_) => {}
            None => {
                if let Some(opening) = Fence::opening(line) {
                    fence = Some(opening);
                } else if let Some(definition) = Definition::parse(line) {
                    found
                        .entry(normalized_label(definition.label))
                        .or_insert_with(|| definition.destination.to_owned());
                }
            }
        }
    }
    found
}

/// How CommonMark matches labels: case-folded, inner whitespace collapsed.
fn normalized_label(label: &str) -> String {
    label
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A fenced code block's opening line: up to three spaces, then three or more backticks (with no
/// backtick after them) or tildes.
#[derive(Debug, Clone, Copy)]
struct Fence {
    marker: u8,
    length: usize,
}

impl Fence {
    fn opening(line: &str) -> Option<Fence> {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let marker = *bytes.get(indent)?;
        if indent > 3 || !matches!(marker, b'`' | b'~') {
            return None;
        }
        let length = bytes[indent..].iter().take_while(|b| **b == marker).count();
        let info = &bytes[indent + length..];
        (length >= 3 && !(marker == b'`' && info.contains(&b'`')))
            .then_some(Fence { marker, length })
    }

    fn closes(self, line: &str) -> bool {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let run = bytes[indent..]
            .iter()
            .take_while(|b| **b == self.marker)
            .count();
        indent <= 3
            && run >= self.length
            && bytes[indent + run..]
                .iter()
                .all(|b| matches!(b, b' ' | b'\t'))
    }
}

/// A link reference definition on one line: `[label]: destination "title"`.
struct Definition<'a> {
    indent: &'a str,
    label: &'a str,
    destination: &'a str,
    rest: &'a str,
}

impl<'a> Definition<'a> {
    fn parse(line: &'a str) -> Option<Definition<'a>> {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        if indent > 3 || bytes.get(indent) != Some(&b'[') {
            return None;
        }
        let close = indent + 1 + bytes[indent + 1..].iter().position(|b| *b == b']')?;
        let label = &line[indent + 1..close];
        if label.trim().is_empty() || label.starts_with('^') || label.contains('[') {
            return None;
        }
        let after = line[close + 1..].strip_prefix(':')?;
        let spaced = after.trim_start_matches([' ', '\t']);
        let (destination, rest) = if let Some(angled) = spaced.strip_prefix('<') {
            let end = angled.find('>')?;
            (&angled[..end], &angled[end + 1..])
        } else {
            let end = spaced.find([' ', '\t']).unwrap_or(spaced.len());
            (&spaced[..end], &spaced[end..])
        };
        (!destination.is_empty()).then_some(Definition {
            indent: &line[..indent],
            label,
            destination,
            rest,
        })
    }
}

/// Where a link ends and where it points.
struct Link<'a> {
    text: &'a str,
    destination: &'a str,
    /// Just past the link's last byte.
    end: usize,
}

/// The rewritten text so far.
struct Writer<'d> {
    definitions: &'d HashMap<String, String>,
    out: String,
    defanged: usize,
}

impl<'d> Writer<'d> {
    /// A fenced code block: the content as written, between fences longer than any backtick run in
    /// it, with no info string.
    fn fenced(&mut self, content: &[&str]) {
        let longest = content
            .iter()
            .map(|line| longest_run(line.as_bytes(), b'`'))
            .max()
            .unwrap_or(0);
        let fence = "`".repeat((longest + 1).max(3));
        self.out.push_str(&fence);
        for line in content {
            self.out.push('\n');
            self.out.push_str(line);
        }
        self.out.push('\n');
        self.out.push_str(&fence);
    }

    /// One line outside code blocks.
    fn line(&mut self, line: &str) {
        if could_be_table_delimiter(line) {
            // Written so that no table can start here (a table would split code spans at `|`).
            let start = line.len() - line.trim_start().len();
            self.out.push_str(&line[..start]);
            self.out.push('\\');
            self.inline(&line[start..], 0);
        } else if let Some(definition) = Definition::parse(line) {
            self.defanged += 1;
            self.out.push_str(definition.indent);
            self.out.push_str("\\[");
            self.inline(definition.label, MAX_NESTING);
            self.out.push_str("\\]: ");
            self.out.push_str(&code_span(definition.destination));
            self.inline(definition.rest, 0);
        } else {
            self.inline(line, 0);
        }
    }

    /// Text within one line, written under the invariant. `plain` is where the text not yet written
    /// starts; a URL or an address found at `:` or `@` may start inside it.
    fn inline(&mut self, text: &str, depth: usize) {
        let bytes = text.as_bytes();
        let mut plain = 0;
        let mut at = 0;
        while at < bytes.len() {
            let handled = match bytes[at] {
                b'\\' => Some((at, at + 1, "\\\\".to_owned())),
                b'`' => Some(backticks(text, at)),
                b'$' => Some((at, at + 1, "\\$".to_owned())),
                b'~' if bytes[at..].starts_with(b"~~~") => Some((at, at + 1, "\\~".to_owned())),
                b']' => Some((at, at + 1, "\\]".to_owned())),
                b'[' => Some(self.bracket(text, at, depth)),
                b'!' if bytes.get(at + 1) == Some(&b'[') => self.image(text, at, depth),
                b'<' => Some(self.angle(text, at)),
                b'&' if is_character_reference(&bytes[at..]) => {
                    Some((at, at + 1, "&amp;".to_owned()))
                }
                b':' => url_with_scheme(text, plain, at),
                b'w' | b'W' if at == 0 || !bytes[at - 1].is_ascii_alphanumeric() => {
                    url_from_www(text, at)
                }
                b'@' => email_around(text, plain, at),
                _ => None,
            };
            match handled {
                Some((start, end, written)) => {
                    self.out.push_str(&text[plain..start]);
                    if self.out.ends_with('`') && written.starts_with('`') {
                        // Two code spans side by side would read as one longer delimiter.
                        self.out.push(' ');
                    }
                    self.out.push_str(&written);
                    at = end;
                    plain = end;
                }
                None => at += 1,
            }
        }
        self.out.push_str(&text[plain..]);
    }

    /// A `[`: the sanitizer's marker, a link, or an escaped bracket.
    fn bracket(&mut self, text: &str, at: usize, depth: usize) -> (usize, usize, String) {
        if let Some(end) = redaction_marker(text, at) {
            let kind = &text[at + 1..end - 1];
            let risky = matches!(text.as_bytes().get(end), Some(b'(' | b'[' | b':'));
            let written = if risky {
                format!("\\[{kind}\\]")
            } else {
                format!("[{kind}]")
            };
            return (at, end, written);
        }
        let Some(link) = self.link(text, at, depth) else {
            return (at, at + 1, "\\[".to_owned());
        };
        self.defanged += 1;
        let shown = self.nested(link.text, depth);
        let target = code_span(link.destination);
        let written = if link.text.trim() == link.destination || shown.trim().is_empty() {
            target
        } else if target.is_empty() {
            shown
        } else {
            format!("{shown} ({target})")
        };
        (at, link.end, written)
    }

    /// `![`: an image shown as text naming its source, or `None` (the `[` is then handled alone).
    fn image(&mut self, text: &str, at: usize, depth: usize) -> Option<(usize, usize, String)> {
        let link = self.link(text, at + 1, depth)?;
        self.defanged += 1;
        let alt = self.nested(link.text, depth);
        let source = code_span(link.destination);
        let written = match (alt.trim().is_empty(), source.is_empty()) {
            (true, true) => "(image)".to_owned(),
            (true, false) => format!("(image: {source})"),
            (false, true) => format!("{alt} (image)"),
            (false, false) => format!("{alt} (image: {source})"),
        };
        Some((at, link.end, written))
    }

    /// Link text, written by a writer of its own one level deeper (its links count here too).
    fn nested(&mut self, text: &str, depth: usize) -> String {
        let mut inner = Writer {
            definitions: self.definitions,
            out: String::new(),
            defanged: 0,
        };
        inner.inline(text, depth + 1);
        self.defanged += inner.defanged;
        inner.out
    }

    /// The link whose `[` is at `at`: inline (`[text](destination "title")`), full (`[text][label]`),
    /// collapsed (`[text][]`) or shortcut (`[text]`) with a definition in the text.
    fn link<'t>(&self, text: &'t str, at: usize, depth: usize) -> Option<Link<'t>>
    where
        'd: 't,
    {
        if depth >= MAX_NESTING {
            return None;
        }
        let bytes = text.as_bytes();
        let close = matching_bracket(bytes, at)?;
        let label = &text[at + 1..close];
        match bytes.get(close + 1) {
            Some(b'(') => inline_destination(text, close + 2).map(|(destination, end)| Link {
                text: label,
                destination,
                end,
            }),
            Some(b'[') => {
                let end = close
                    + 2
                    + bytes[close + 2..]
                        .iter()
                        .take(MAX_LINK_SPAN)
                        .position(|b| matches!(b, b']' | b'['))?;
                if bytes[end] != b']' {
                    return None;
                }
                let reference = &text[close + 2..end];
                let reference = if reference.trim().is_empty() {
                    label
                } else {
                    reference
                };
                self.defined(reference).map(|destination| Link {
                    text: label,
                    destination,
                    end: end + 1,
                })
            }
            _ => self.defined(label).map(|destination| Link {
                text: label,
                destination,
                end: close + 1,
            }),
        }
    }

    fn defined(&self, label: &str) -> Option<&'d str> {
        self.definitions
            .get(&normalized_label(label))
            .map(String::as_str)
    }

    /// A `<`: an autolink (any scheme, or an e-mail address) shown as a code span, anything else
    /// (HTML) with the `<` written `&lt;`.
    fn angle(&mut self, text: &str, at: usize) -> (usize, usize, String) {
        let bytes = text.as_bytes();
        let end = bytes[at + 1..]
            .iter()
            .take(MAX_LINK_SPAN)
            .position(|b| b.is_ascii_whitespace() || matches!(b, b'<' | b'>'))
            .map(|offset| at + 1 + offset)
            .filter(|end| bytes[*end] == b'>');
        if let Some(end) = end {
            let inner = &text[at + 1..end];
            if is_autolink_target(inner) {
                self.defanged += 1;
                return (at, end + 1, code_span(inner));
            }
        }
        (at, at + 1, "&lt;".to_owned())
    }
}

/// A backtick run at `at`: a code span when a run of the same length closes it on this line, else
/// each backtick escaped.
fn backticks(text: &str, at: usize) -> (usize, usize, String) {
    let bytes = text.as_bytes();
    let length = bytes[at..].iter().take_while(|b| **b == b'`').count();
    let mut search = at + length;
    while search < bytes.len() {
        if bytes[search] != b'`' {
            search += 1;
            continue;
        }
        let run = bytes[search..].iter().take_while(|b| **b == b'`').count();
        if run == length {
            let content = &text[at + length..search];
            let stripped = content.len() >= 2
                && content.starts_with(' ')
                && content.ends_with(' ')
                && content.trim() != "";
            let content = if stripped {
                &content[1..content.len() - 1]
            } else {
                content
            };
            return (at, search + run, code_span(content));
        }
        search += run;
    }
    (at, at + length, "\\`".repeat(length))
}

/// The `]` that closes the `[` at `at`, brackets nested, within [`MAX_LINK_SPAN`].
fn matching_bracket(bytes: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0_usize;
    for (offset, byte) in bytes[at..].iter().enumerate().take(MAX_LINK_SPAN) {
        match byte {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at + offset);
                }
            }
            _ => {}
        }
    }
    None
}

/// After `](`: the destination (angle brackets removed) and the end of the link past its `)`.
fn inline_destination(text: &str, from: usize) -> Option<(&str, usize)> {
    let bytes = text.as_bytes();
    let limit = bytes.len().min(from + MAX_LINK_SPAN);
    let skip_blanks = |mut at: usize| {
        while at < limit && matches!(bytes[at], b' ' | b'\t') {
            at += 1;
        }
        at
    };
    let mut at = skip_blanks(from);
    let destination = if bytes.get(at) == Some(&b'<') {
        let end = at + 1 + bytes[at + 1..limit].iter().position(|b| *b == b'>')?;
        let destination = &text[at + 1..end];
        at = end + 1;
        destination
    } else {
        let start = at;
        let mut parens = 0_usize;
        while at < limit {
            match bytes[at] {
                b' ' | b'\t' => break,
                b'(' => parens += 1,
                b')' if parens == 0 => break,
                b')' => parens -= 1,
                _ => {}
            }
            at += 1;
        }
        &text[start..at]
    };
    at = skip_blanks(at);
    if let Some(&quote) = bytes.get(at).filter(|b| matches!(b, b'"' | b'\'' | b'(')) {
        let closing = if quote == b'(' { b')' } else { quote };
        let end = at + 1 + bytes[at + 1..limit].iter().position(|b| *b == closing)?;
        at = skip_blanks(end + 1);
    }
    (bytes.get(at) == Some(&b')')).then_some((destination, at + 1))
}

/// The end of the sanitizer's `[REDACTED:kind]` marker starting at `at`.
fn redaction_marker(text: &str, at: usize) -> Option<usize> {
    const OPENING: &str = "[REDACTED:";
    let rest = text[at..].strip_prefix(OPENING)?;
    let kind = rest
        .bytes()
        .take(41)
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        .count();
    (kind > 0 && rest.as_bytes().get(kind) == Some(&b']')).then_some(at + OPENING.len() + kind + 1)
}

/// At a `:`: a URL whose scheme ends here (any scheme before `//`, or one of [`BARE_SCHEMES`]),
/// starting no earlier than `plain`. Its start, its end and its code span.
fn url_with_scheme(text: &str, plain: usize, colon: usize) -> Option<(usize, usize, String)> {
    let bytes = text.as_bytes();
    let mut start = colon;
    while start > plain
        && colon - start < MAX_SCHEME
        && (bytes[start - 1].is_ascii_alphanumeric()
            || matches!(bytes[start - 1], b'+' | b'.' | b'-'))
    {
        start -= 1;
    }
    while start < colon && !bytes[start].is_ascii_alphabetic() {
        start += 1;
    }
    let scheme = &bytes[start..colon];
    let wanted = !scheme.is_empty()
        && (bytes[colon + 1..].starts_with(b"//")
            || BARE_SCHEMES
                .iter()
                .any(|bare| bare.as_bytes().eq_ignore_ascii_case(scheme)));
    let end = url_end(bytes, colon + 1);
    (wanted && end > colon + 1).then(|| (start, end, code_span(&text[start..end])))
}

/// At a `w`: a `www.` host, which forges link without a scheme.
fn url_from_www(text: &str, at: usize) -> Option<(usize, usize, String)> {
    let bytes = text.as_bytes();
    if !bytes[at..].get(..4)?.eq_ignore_ascii_case(b"www.") {
        return None;
    }
    let end = url_end(bytes, at + 4);
    Some((at, end, code_span(&text[at..end])))
}

/// Where a URL that reaches `from` ends: at whitespace or a character that cannot continue it, with
/// trailing punctuation and unbalanced closing brackets left out, as forges do.
fn url_end(bytes: &[u8], from: usize) -> usize {
    let mut end = from
        + bytes[from..]
            .iter()
            .position(|b| b.is_ascii_whitespace() || matches!(b, b'<' | b'>' | b'`' | b'"' | b'\''))
            .unwrap_or(bytes.len() - from);
    let count = |of: u8| bytes[from..end].iter().filter(|b| **b == of).count();
    let (mut parens, mut brackets) = (
        count(b'(') as isize - count(b')') as isize,
        count(b'[') as isize - count(b']') as isize,
    );
    while end > from {
        match bytes[end - 1] {
            b'.' | b',' | b':' | b';' | b'!' | b'?' | b'*' | b'_' | b'~' => {}
            b')' if parens < 0 => parens += 1,
            b']' if brackets < 0 => brackets += 1,
            _ => break,
        }
        end -= 1;
    }
    end
}

/// At an `@`: an e-mail address around it (`local@domain.tld`, the local part starting no earlier
/// than `plain`), which forges link as `mailto:`.
fn email_around(text: &str, plain: usize, at: usize) -> Option<(usize, usize, String)> {
    let bytes = text.as_bytes();
    let mut start = at;
    while start > plain && is_local_byte(bytes[start - 1]) {
        start -= 1;
    }
    let end = email_domain_end(bytes, at + 1)?;
    (start < at).then(|| (start, end, code_span(&text[start..end])))
}

/// The end of the domain of an address whose `@` is just before `from`: labels of letters, digits,
/// `-` and `_` with at least one dot.
fn email_domain_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut end = from
        + bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            .count();
    while end > from && matches!(bytes[end - 1], b'.' | b'-' | b'_') {
        end -= 1;
    }
    let domain = &bytes[from..end];
    (domain.contains(&b'.') && !domain.starts_with(b".")).then_some(end)
}

fn is_local_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'+' | b'_' | b'-')
}

/// What CommonMark takes between `<` and `>` as a link: a scheme of 2 to 32 characters and a colon,
/// or an e-mail address.
fn is_autolink_target(inner: &str) -> bool {
    let bytes = inner.as_bytes();
    let scheme = bytes
        .iter()
        .take(MAX_SCHEME + 1)
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
        .count();
    let schemed = (2..=MAX_SCHEME).contains(&scheme)
        && bytes[0].is_ascii_alphabetic()
        && bytes.get(scheme) == Some(&b':');
    let local = bytes.iter().take_while(|b| is_local_byte(**b)).count();
    let emailed = local > 0
        && bytes.get(local) == Some(&b'@')
        && email_domain_end(bytes, local + 1) == Some(bytes.len());
    schemed || emailed
}

/// Whether `bytes` starts with a character reference (`&amp;`, `&#60;`, `&#x3C;`), which would
/// render as the character it names.
fn is_character_reference(bytes: &[u8]) -> bool {
    let rest = &bytes[1..];
    let (digit, body): (fn(&u8) -> bool, &[u8]) = match rest {
        [b'#', b'x' | b'X', body @ ..] => (u8::is_ascii_hexdigit, body),
        [b'#', body @ ..] => (u8::is_ascii_digit, body),
        body => (u8::is_ascii_alphanumeric, body),
    };
    let length = body.iter().take(32).take_while(|b| digit(b)).count();
    length > 0 && body.get(length) == Some(&b';')
}

/// A line a table's delimiter row could be: only `|`, `-`, `:` and blanks, with a `-`.
fn could_be_table_delimiter(line: &str) -> bool {
    line.contains('-')
        && line
            .bytes()
            .all(|b| matches!(b, b'|' | b'-' | b':' | b' ' | b'\t'))
}

fn longest_run(bytes: &[u8], of: u8) -> usize {
    bytes
        .split(|b| *b != of)
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
