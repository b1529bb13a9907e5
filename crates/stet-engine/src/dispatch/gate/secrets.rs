//! The secret scan of what a result adds, before it leaves the host: the added lines of every changed
//! file (every file read as text, binary ones included) and the names of the paths go through the
//! sanitizer's shape rules and known values.
//!
//! Besides the added text as it is, the scan reads it rewritten the ways a secret is commonly hidden
//! or wrapped: without whitespace (a value wrapped over lines, base64 at 76 columns), without the
//! quotes and operators that join string pieces (`"ghp_…" + "…"`), without NUL bytes (UTF-16 text in
//! a binary file), and base64- or hex-decoded. A known value is looked for in every reading; shape rules only
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

use super::{Interrupted, SecretFinding, printable};
use crate::git::changes::{PathChange, ResultChanges};
use stet_sanitize::sanitize::{Detection, TokenSanitizer};

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

/// The shortest run of encoded characters decoded and read again.
const MIN_ENCODED_RUN: usize = 24;

/// The longest piece of an encoded run decoded at once.
const MAX_DECODED_RUN: usize = 64 * 1024;

/// How much consecutive pieces of a long run share: more than the base64 of the longest known value.
const DECODED_OVERLAP: usize = 2 * 1024;

/// The most findings of each sort reported for one file (the gate holds the result at the first).
pub(crate) const MAX_FINDINGS_PER_FILE: usize = 16;

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

static HEX_RUNS: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"[0-9A-Fa-f]{16,}").ok());

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

/// What the result adds that looks like a secret (the tests' shorthand).
#[cfg(test)]
pub(super) fn scan(changes: &ResultChanges, sanitizer: &Arc<TokenSanitizer>) -> Vec<SecretFinding> {
    // Never told to stop, it reads everything.
    scan_until(changes, sanitizer, &|| false).unwrap_or_default()
}

/// What the result adds that looks like a secret, ending with [`Interrupted`] once `interrupted`
/// says so (asked at each changed path and each reading of its content).
pub(super) fn scan_until(
    changes: &ResultChanges,
    sanitizer: &Arc<TokenSanitizer>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Vec<SecretFinding>, Interrupted> {
    let base = Base::new(&changes.removed);
    let mut findings = Vec::new();
    for change in changes
        .changes
        .iter()
        .filter(|change| change.after.is_some())
    {
        if interrupted() {
            return Err(Interrupted);
        }
        let mut file = FileFindings {
            path: printable(&change.path),
            seen: HashSet::new(),
            found: Vec::new(),
        };
        let name = change.path.as_bytes();
        for detection in sanitizer.detect(name) {
            file.add(None, name, &detection, true, &base.written);
        }
        scan_added(change, sanitizer, &base, &mut file, interrupted)?;
        file.found.sort_by_key(|finding| finding.line);
        findings.extend(file.found);
    }
    Ok(findings)
}

fn scan_added(
    change: &PathChange,
    sanitizer: &Arc<TokenSanitizer>,
    base: &Base,
    file: &mut FileFindings,
    interrupted: &dyn Fn() -> bool,
) -> Result<(), Interrupted> {
    let added = &change.added;
    let text = added.text.as_slice();
    if text.is_empty() {
        return Ok(());
    }
    let stop = || {
        if interrupted() {
            Err(Interrupted)
        } else {
            Ok(())
        }
    };
    let line_of = |offset: usize| added.line_at(offset);
    for detection in sanitizer.detect(text) {
        file.add(
            line_of(detection.start),
            text,
            &detection,
            true,
            &base.written,
        );
    }
    stop()?;
    file.read_decoded(text, sanitizer, &base.written, line_of);
    stop()?;
    // One rewritten reading at a time, so no more than two copies of the text are alive at once.
    {
        let joined = View::without(text, JOINERS.as_ref());
        file.read(&joined.text, sanitizer, &base.joined, |offset| {
            line_of(joined.original(offset))
        });
    }
    if change.binary {
        let unnulled = View::without(text, NULS.as_ref());
        file.read(&unnulled.text, sanitizer, &base.unnulled, |offset| {
            line_of(unnulled.original(offset))
        });
    }
    stop()?;
    let spread = View::without(text, SPREAD.as_ref());
    file.read(&spread.text, sanitizer, &base.spread, |offset| {
        line_of(spread.original(offset))
    });
    stop()?;
    file.read_decoded(&spread.text, sanitizer, &base.written, |offset| {
        line_of(spread.original(offset))
    });
    stop()?;
    let spread_joined = View::without(&spread.text, JOINERS.as_ref());
    file.read(
        &spread_joined.text,
        sanitizer,
        &base.spread_joined,
        |offset| line_of(spread.original(spread_joined.original(offset))),
    );
    Ok(())
}

/// The findings of one file, each line and kind once, at most [`MAX_FINDINGS_PER_FILE`] of each
/// sort (by shape, known values).
struct FileFindings {
    path: String,
    seen: HashSet<(Option<usize>, String)>,
    found: Vec<SecretFinding>,
}

impl FileFindings {
    /// Reads a rewritten `text`: known values and token shapes (keyword rules lose their context in
    /// a rewriting); `line_of` maps an offset in `text` to its line.
    fn read(
        &mut self,
        text: &[u8],
        sanitizer: &Arc<TokenSanitizer>,
        held_before: &[u8],
        line_of: impl Fn(usize) -> Option<usize>,
    ) {
        for detection in sanitizer.detect(text) {
            self.add(
                line_of(detection.start),
                text,
                &detection,
                false,
                held_before,
            );
        }
    }

    /// Reads every encoded run of `text` decoded (base64 at each alignment, hex).
    fn read_decoded(
        &mut self,
        text: &[u8],
        sanitizer: &Arc<TokenSanitizer>,
        held_before: &[u8],
        line_of: impl Fn(usize) -> Option<usize>,
    ) {
        decodings(text, |start, decoded| {
            let line = line_of(start);
            for detection in sanitizer.detect(decoded) {
                self.add(line, decoded, &detection, true, held_before);
            }
        });
    }

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
        let sorted = self
            .found
            .iter()
            .filter(|finding| finding.known == detection.known)
            .count();
        if sorted < MAX_FINDINGS_PER_FILE && self.seen.insert((line, kind.to_owned())) {
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

/// Each encoded run of `text` long enough to hide a secret, decoded: base64 at each alignment it can
/// start at, hex at both. `each` gets the run's offset and the decoded bytes. A run longer than
/// [`MAX_DECODED_RUN`] is decoded in overlapping windows, so the memory it takes stays bounded.
fn decodings(text: &[u8], mut each: impl FnMut(usize, &[u8])) {
    if let Some(runs) = BASE64_RUNS.as_ref() {
        for run in runs.find_iter(text) {
            for (offset, window) in windows(run.as_bytes()) {
                let standard = !window.iter().any(|b| matches!(b, b'-' | b'_'));
                let url_safe = !window.iter().any(|b| matches!(b, b'+' | b'/'));
                for shift in 0..4 {
                    let candidate = &window[shift.min(window.len())..];
                    let usable = &candidate[..candidate.len() - candidate.len() % 4];
                    if usable.len() < MIN_ENCODED_RUN {
                        continue;
                    }
                    let decoded = if standard {
                        STANDARD_NO_PAD.decode(usable)
                    } else if url_safe {
                        URL_SAFE_NO_PAD.decode(usable)
                    } else {
                        continue;
                    };
                    if let Ok(decoded) = decoded {
                        each(run.start() + offset, &decoded);
                    }
                }
            }
        }
    }
    if let Some(runs) = HEX_RUNS.as_ref() {
        for run in runs.find_iter(text) {
            for (offset, window) in windows(run.as_bytes()) {
                for shift in 0..2 {
                    let digits = &window[shift.min(window.len())..];
                    let decoded: Vec<u8> = digits
                        .chunks_exact(2)
                        .filter_map(|pair| {
                            let pair = std::str::from_utf8(pair).ok()?;
                            u8::from_str_radix(pair, 16).ok()
                        })
                        .collect();
                    each(run.start() + offset, &decoded);
                }
            }
        }
    }
}

/// `run` in windows of at most [`MAX_DECODED_RUN`] bytes, each starting a multiple of 4 bytes in and
/// overlapping the next by more than any known value's encoding: `(offset, window)`.
fn windows(run: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let step = MAX_DECODED_RUN - DECODED_OVERLAP;
    (0..run.len())
        .step_by(step)
        .take_while(move |start| *start == 0 || start + DECODED_OVERLAP < run.len())
        .map(move |start| (start, &run[start..(start + MAX_DECODED_RUN).min(run.len())]))
}

#[cfg(test)]
mod tests;
