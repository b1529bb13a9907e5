//! The secret scan of what a result adds, before it leaves the host: the added lines of every changed
//! file (every file read as text, binary ones included) and the names of the paths go through the
//! sanitizer's shape rules and known values.
//!
//! Besides the added text as it is, the scan reads it rewritten the ways a secret is commonly hidden
//! or wrapped: without whitespace (a value wrapped over lines, base64 at 76 columns), without the
//! quotes and operators that join string pieces (`"ghp_…" + "…"`), without NUL bytes (UTF-16 text in
//! a binary file), and base64-decoded. A known value is looked for in every reading; shape rules only
//! where their context survives the rewriting (tokens, not `password = …` keywords). A shape match
//! whose text the base already held (a moved file, an edited line around an old fixture) is not new
//! and is not reported; a known value always is. Removed lines are not read: they are not pushed.
//! Keyword rules (`password`, `api-key`, …), tuned for logs, count in a file only for a literal that
//! looks like a secret, so ordinary code (`password = request.form["password"]`) is not held.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use regex::bytes::Regex;

use super::{SecretFinding, printable};
use crate::dispatch::sanitize::{Detection, TokenSanitizer};
use crate::git::changes::{PathChange, ResultChanges};

/// Shape rules that look for a value after a keyword: their context is prose and code, so they count
/// only on the text as written, and only for a plausible literal.
const KEYWORD_KINDS: &[&str] = &[
    "password",
    "api-key",
    "authorization",
    "basic-auth",
    "url-credentials",
];

/// Quoted values that stand for a secret without being one.
const PLACEHOLDERS: &[&str] = &[
    "password",
    "passwd",
    "changeme",
    "example",
    "placeholder",
    "secret",
    "redacted",
    "dummy",
    "test",
];

/// The shortest run of base64 characters decoded and read again.
const MIN_BASE64_RUN: usize = 24;

/// Whitespace and invisible format characters: what a value wrapped or padded over lines is spread by.
static SPREAD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"[\s\x{00AD}\x{200B}-\x{200F}\x{202A}-\x{202E}\x{2060}-\x{2064}\x{2066}-\x{206F}\x{FEFF}]+",
    )
    .ok()
});

/// What joins two pieces of a string: a closing quote, an operator or a line continuation, and an
/// opening quote (`" + "`, `"\n  "`, `' .. '`), or a backslash line continuation.
static JOINERS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"["'`]\s*(?:\+|\.\.?|&|\|\||\\)?\s*["'`]|\\\r?\n"#).ok());

static NULS: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?-u:\x00)+").ok());

static BASE64_RUNS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_-]{24,}").ok());

/// What the base held (the diff's removed lines), read each way the added text is read, so a value
/// already there is recognized however a reading rewrote it.
struct Base {
    written: Vec<u8>,
    spread: Vec<u8>,
    joined: Vec<u8>,
    spread_joined: Vec<u8>,
    unnulled: Vec<u8>,
}

impl Base {
    fn new(removed: &[u8]) -> Base {
        let spread = View::without(removed, SPREAD.as_ref()).text;
        Base {
            written: removed.to_vec(),
            joined: View::without(removed, JOINERS.as_ref()).text,
            spread_joined: View::without(&spread, JOINERS.as_ref()).text,
            unnulled: View::without(removed, NULS.as_ref()).text,
            spread,
        }
    }
}

pub(super) fn scan(changes: &ResultChanges, sanitizer: &Arc<TokenSanitizer>) -> Vec<SecretFinding> {
    let base = Base::new(&changes.removed);
    let mut findings = Vec::new();
    for change in changes
        .changes
        .iter()
        .filter(|change| change.after.is_some())
    {
        let mut file = FileFindings {
            path: printable(&change.path),
            seen: HashSet::new(),
            found: Vec::new(),
        };
        let name = change.path.as_bytes();
        for detection in sanitizer.detect(name) {
            file.add(None, name, &detection, true, &base.written);
        }
        scan_added(change, sanitizer, &base, &mut file);
        file.found.sort_by_key(|finding| finding.line);
        findings.extend(file.found);
    }
    findings
}

fn scan_added(
    change: &PathChange,
    sanitizer: &Arc<TokenSanitizer>,
    base: &Base,
    file: &mut FileFindings,
) {
    let added = &change.added;
    let text = added.text.as_slice();
    if text.is_empty() {
        return;
    }
    for detection in sanitizer.detect(text) {
        file.add(
            added.line_at(detection.start),
            text,
            &detection,
            true,
            &base.written,
        );
    }
    let spread = View::without(text, SPREAD.as_ref());
    let joined = View::without(text, JOINERS.as_ref());
    let spread_joined = View::without(&spread.text, JOINERS.as_ref());
    let unnulled = change.binary.then(|| View::without(text, NULS.as_ref()));
    // Each reading, and the reading it was made from when that is not the added text itself.
    let readings = [
        Some((&spread, None, &base.spread)),
        Some((&joined, None, &base.joined)),
        Some((&spread_joined, Some(&spread), &base.spread_joined)),
        unnulled.as_ref().map(|view| (view, None, &base.unnulled)),
    ];
    for (view, made_from, held_before) in readings.into_iter().flatten() {
        for detection in sanitizer.detect(&view.text) {
            let offset = view.original(detection.start);
            let offset = made_from.map_or(offset, |earlier: &View| earlier.original(offset));
            file.add(
                added.line_at(offset),
                &view.text,
                &detection,
                false,
                held_before,
            );
        }
    }
    for view in [&View::whole(text), &spread] {
        for (start, decoded) in base64_decodings(&view.text) {
            let line = added.line_at(view.original(start));
            for detection in sanitizer.detect(&decoded) {
                file.add(line, &decoded, &detection, true, &base.written);
            }
        }
    }
}

/// The findings of one file, each line and kind once.
struct FileFindings {
    path: String,
    seen: HashSet<(Option<usize>, String)>,
    found: Vec<SecretFinding>,
}

impl FileFindings {
    /// Adds what `detection` found in `text` (on `line`), unless it is an ordinary value a keyword
    /// rule caught, a shape match the base already held (`held_before`, read the same way), or
    /// (`as_written` false: a rewritten reading) a keyword rule out of its context.
    fn add(
        &mut self,
        line: Option<usize>,
        text: &[u8],
        detection: &Detection,
        as_written: bool,
        held_before: &[u8],
    ) {
        let kind = &*detection.kind;
        if !detection.known {
            let keyword = KEYWORD_KINDS.contains(&kind);
            if keyword && !(as_written && plausible_literal(kind, text, detection)) {
                return;
            }
            let value = &text[detection.start..detection.end.min(text.len())];
            if !value.is_empty() && memchr::memmem::find(held_before, value).is_some() {
                return;
            }
        }
        if self.seen.insert((line, kind.to_owned())) {
            self.found.push(SecretFinding {
                path: self.path.clone(),
                line,
                kind: kind.to_owned(),
                known: detection.known,
            });
        }
    }
}

/// Whether what a keyword rule masked is a literal that could be a secret, not code or a
/// placeholder: no call, index, template or variable; quoted and not a placeholder, or secret-like.
fn plausible_literal(kind: &str, text: &[u8], detection: &Detection) -> bool {
    let value = &text[detection.start..detection.end.min(text.len())];
    if value.iter().any(|byte| b"()[]{}$<>%`".contains(byte)) {
        return false;
    }
    let before = detection
        .start
        .checked_sub(1)
        .and_then(|at| text.get(at))
        .copied();
    let after = text.get(detection.end).copied();
    if matches!(after, Some(b'(' | b'[')) {
        return false;
    }
    let secret = match kind {
        "url-credentials" | "basic-auth" => value
            .iter()
            .position(|byte| *byte == b':')
            .map_or(value, |colon| &value[colon + 1..]),
        _ => value,
    };
    let quoted = matches!(before, Some(b'"' | b'\'')) && after == before;
    if quoted && !matches!(kind, "url-credentials" | "basic-auth") {
        return secret.len() >= 6 && !is_placeholder(secret);
    }
    secret_like(secret)
}

fn is_placeholder(value: &[u8]) -> bool {
    let lower = value.to_ascii_lowercase();
    PLACEHOLDERS.iter().any(|word| lower == word.as_bytes())
        || lower.iter().all(|byte| Some(byte) == lower.first())
}

/// Random-looking: letters and digits mixed, long enough, not an identifier written in snake or
/// screaming case or as a dotted path.
fn secret_like(value: &[u8]) -> bool {
    let letters = value.iter().any(u8::is_ascii_alphabetic);
    let digits = value.iter().any(u8::is_ascii_digit);
    if value.len() < 8 || !letters || !digits {
        return false;
    }
    let text = String::from_utf8_lossy(value);
    let words: Vec<&str> = text.split(['_', '.']).collect();
    let identifier = words.len() > 1
        && words.iter().all(|word| {
            !word.is_empty()
                && (word
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    || word
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
        });
    !identifier
}

/// Text with some spans cut out, and where each kept piece was in the text it came from.
struct View {
    text: Vec<u8>,
    /// `(offset in this view, offset in the original)` where each kept piece starts.
    pieces: Vec<(usize, usize)>,
}

impl View {
    fn whole(text: &[u8]) -> View {
        View {
            text: text.to_vec(),
            pieces: vec![(0, 0)],
        }
    }

    /// `text` without the spans `cut` matches (the whole text when the pattern is missing).
    fn without(text: &[u8], cut: Option<&Regex>) -> View {
        let Some(cut) = cut else {
            return View::whole(text);
        };
        let mut view = View {
            text: Vec::with_capacity(text.len()),
            pieces: Vec::new(),
        };
        let mut from = 0;
        for found in cut.find_iter(text) {
            view.keep(text, from, found.start());
            from = found.end();
        }
        view.keep(text, from, text.len());
        view
    }

    fn keep(&mut self, text: &[u8], start: usize, end: usize) {
        if start < end {
            self.pieces.push((self.text.len(), start));
            self.text.extend_from_slice(&text[start..end]);
        }
    }

    /// The offset in the original of this view's byte at `offset`.
    fn original(&self, offset: usize) -> usize {
        let index = self.pieces.partition_point(|(start, _)| *start <= offset);
        match index
            .checked_sub(1)
            .and_then(|index| self.pieces.get(index))
        {
            Some((start, original)) => original + (offset - start),
            None => 0,
        }
    }
}

/// Each run of base64 characters long enough to hide a secret, decoded at each alignment it can
/// start at: `(offset of the run, decoded bytes)`.
fn base64_decodings(text: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let Some(runs) = BASE64_RUNS.as_ref() else {
        return Vec::new();
    };
    let mut decoded = Vec::new();
    for run in runs.find_iter(text) {
        let bytes = run.as_bytes();
        let standard = !bytes.iter().any(|b| matches!(b, b'-' | b'_'));
        let url_safe = !bytes.iter().any(|b| matches!(b, b'+' | b'/'));
        for shift in 0..4 {
            let candidate = &bytes[shift.min(bytes.len())..];
            let usable = &candidate[..candidate.len() - candidate.len() % 4];
            if usable.len() < MIN_BASE64_RUN {
                continue;
            }
            let attempt = if standard {
                STANDARD_NO_PAD.decode(usable)
            } else if url_safe {
                URL_SAFE_NO_PAD.decode(usable)
            } else {
                continue;
            };
            if let Ok(bytes) = attempt {
                decoded.push((run.start(), bytes));
            }
        }
    }
    decoded
}

#[cfg(test)]
mod tests;
