//! `TokenSanitizer`: the one seam every byte passes before it reaches a sink (ADR-0018 row 2, DESIGN §5
//! row 12) — terminal, headless stdout, run record, log files, PR body, commit message, error text.
//!
//! It masks secrets by shape (token prefixes, auth headers, URL userinfo, PEM private keys, …) and by
//! known value (the exact credentials stet holds, in their common encodings). It works on streams:
//! [`Redactor`] keeps a bounded carry buffer so a secret split across reads is still caught, and feeding
//! a stream in any pieces gives exactly the output of feeding it whole.

mod known;
mod redactor;
mod rules;
mod split;

use std::sync::{Arc, RwLock};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};
use serde::{Deserialize, Serialize};

pub use known::{KnownValue, MAX_KNOWN_VALUE_LEN, MIN_KNOWN_VALUE_LEN};
pub use redactor::Redactor;
use rules::{RuleBook, Scan};

/// Everything that can go wrong building a sanitizer.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum SanitizeError {
    #[error("built-in sanitizer rule {kind:?} does not compile: {source}")]
    Rule {
        kind: &'static str,
        source: Box<regex::Error>,
    },
    #[error("the sanitizer's trigger automaton could not be built: {0}")]
    Automaton(#[from] aho_corasick::BuildError),
    #[error(
        "known value {label:?} is {len} bytes long; values to mask must be {MIN_KNOWN_VALUE_LEN} to {MAX_KNOWN_VALUE_LEN} bytes"
    )]
    KnownValueLength { label: String, len: usize },
    #[error("known-value label {0:?} must be 1-40 characters of lowercase letters, digits and '-'")]
    KnownValueLabel(String),
    #[error(
        "known value {label:?} holds a line break; a value to mask must be one line (trim the newline a file or command added)"
    )]
    KnownValueLineBreak { label: String },
}

/// The result of building a sanitizer.
pub type Result<T> = std::result::Result<T, SanitizeError>;

/// A PEM block with no END line within this many bytes is withheld up to here, then output resumes.
pub const PRIVATE_KEY_CAP: usize = 64 * 1024;

/// Where a private key's END line may begin (colour codes may follow before `END`).
const PRIVATE_KEY_END: &[u8] = b"-----";

/// How every mask begins: `[REDACTED:<kind>]`.
const MARKER: &[u8] = b"[REDACTED:";

/// What a trigger hit stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    /// A spelling of a known value; the index of its label.
    Known(usize),
    /// A shape-rule trigger; its index in the rule book.
    Trigger(usize),
}

/// One trigger literal found in the buffer.
#[derive(Debug, Clone, Copy)]
struct Hit {
    start: usize,
    end: usize,
    meaning: Meaning,
}

/// One way of finding trigger literals.
#[derive(Debug)]
enum Scanner {
    /// Many literals at once (SIMD Teddy while there are at most 64); `meanings[pattern id]`.
    Automaton {
        automaton: AhoCorasick,
        meanings: Vec<Meaning>,
    },
    /// One frequent literal, which memmem finds again cheaply after each hit.
    Literal {
        finder: Box<memchr::memmem::Finder<'static>>,
        meaning: Meaning,
    },
}

impl Scanner {
    fn find(&self, haystack: &[u8], from: usize) -> Option<Hit> {
        match self {
            Scanner::Automaton {
                automaton,
                meanings,
            } => automaton
                .find(Input::new(haystack).span(from..haystack.len()))
                .map(|found| Hit {
                    start: found.start(),
                    end: found.end(),
                    meaning: meanings[found.pattern().as_usize()],
                }),
            Scanner::Literal { finder, meaning } => {
                finder.find(&haystack[from..]).map(|offset| Hit {
                    start: from + offset,
                    end: from + offset + finder.needle().len(),
                    meaning: *meaning,
                })
            }
        }
    }
}

/// The compiled, immutable redaction engine. Cheap to share behind an `Arc`; see [`SanitizerHandle`]
/// for a sanitizer that learns known values over time.
#[derive(Debug)]
pub struct TokenSanitizer {
    book: RuleBook,
    /// In priority order: at one position, an earlier scanner's hit wins (known values first).
    scanners: Vec<Scanner>,
    known_labels: Vec<Arc<str>>,
    known_values: Vec<KnownValue>,
    longest_trigger: usize,
    private_key_end: regex::bytes::Regex,
}

impl TokenSanitizer {
    /// A sanitizer with the shape rules only.
    pub fn new() -> Result<TokenSanitizer> {
        TokenSanitizer::with_known_values(Vec::new())
    }

    /// A sanitizer with the shape rules and these exact values.
    pub fn with_known_values(known_values: Vec<KnownValue>) -> Result<TokenSanitizer> {
        let book = RuleBook::builtin()?;
        let mut scanners = Vec::new();
        let mut longest_trigger = 1;

        let mut spellings = Vec::new();
        let mut known_labels = Vec::new();
        let mut known_meanings = Vec::new();
        for value in &known_values {
            known_labels.push(Arc::<str>::from(value.label()));
            for spelling in value.spellings() {
                longest_trigger = longest_trigger.max(spelling.len());
                known_meanings.push(Meaning::Known(known_labels.len() - 1));
                spellings.push(spelling);
            }
        }
        if !spellings.is_empty() {
            scanners.push(Scanner::Automaton {
                automaton: AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(spellings.iter().map(|s| s.as_bytes()))?,
                meanings: known_meanings,
            });
        }

        let mut groups: [(Vec<&str>, Vec<Meaning>); 2] = Default::default();
        for (index, trigger) in book.triggers.iter().enumerate() {
            longest_trigger = longest_trigger.max(trigger.literal.len());
            let group = match trigger.scan {
                Scan::Frequent => {
                    scanners.push(Scanner::Literal {
                        finder: Box::new(
                            memchr::memmem::Finder::new(trigger.literal.as_bytes()).into_owned(),
                        ),
                        meaning: Meaning::Trigger(index),
                    });
                    continue;
                }
                Scan::Shared => &mut groups[0],
                Scan::Rare => &mut groups[1],
            };
            group.0.push(trigger.literal);
            group.1.push(Meaning::Trigger(index));
        }
        for (literals, meanings) in groups {
            scanners.push(Scanner::Automaton {
                automaton: AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(&literals)?,
                meanings,
            });
        }

        let private_key_end = regex::bytes::RegexBuilder::new(rules::PRIVATE_KEY_END_PATTERN)
            .unicode(false)
            .build()
            .map_err(|source| SanitizeError::Rule {
                kind: "private-key",
                source: Box::new(source),
            })?;
        Ok(TokenSanitizer {
            book,
            scanners,
            known_labels,
            known_values,
            longest_trigger,
            private_key_end,
        })
    }

    /// The same rules plus one more known value.
    pub fn with_known_value(&self, value: KnownValue) -> Result<TokenSanitizer> {
        let mut known = self.known_values.clone();
        known.push(value);
        TokenSanitizer::with_known_values(known)
    }

    /// Redacts a whole input at once (the same engine as streaming, fed in one piece).
    pub fn redact(self: &Arc<Self>, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        let mut redactor = Redactor::new(Arc::clone(self));
        redactor.push(input, &mut out);
        redactor.finish(&mut out);
        out
    }

    /// Every secret in `input`, in order, without redacting anything: where the shape rules and the
    /// known values found one (the same decisions [`TokenSanitizer::redact`] makes), with its kind.
    pub fn detect(self: &Arc<Self>, input: &[u8]) -> Vec<Detection> {
        let mut sink = Vec::new();
        let mut redactor = Redactor::new(Arc::clone(self));
        redactor.detections = Some(Vec::new());
        redactor.push(input, &mut sink);
        redactor.finish(&mut sink);
        redactor.detections.unwrap_or_default()
    }

    /// Redacts a string, producing text that can be shown anywhere: first made visible by the one
    /// display policy (escape sequences, controls, bidirectional and zero-width characters gone, so a
    /// token split by an invisible character is whole again), then masked.
    pub fn sanitize(self: &Arc<Self>, input: &str) -> SanitizedText {
        let visible = crate::display::invisible::without_invisible(input).text;
        let out = self.redact(visible.as_bytes());
        SanitizedText(match String::from_utf8(out) {
            Ok(text) => text,
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        })
    }
}

/// One secret found in an input by [`TokenSanitizer::detect`]: the byte range it would be masked
/// over, the kind its marker names (a rule's label or a known value's), and whether it is a value
/// stet itself handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// Where the match begins (a byte offset).
    pub start: usize,
    /// Where the match ends (a byte offset, exclusive).
    pub end: usize,
    /// The rule's or the known value's label, as the mask shows it.
    pub kind: Arc<str>,
    /// Whether it matched a known value rather than a shape.
    pub known: bool,
}

/// Text that has passed through the sanitizer. Event and error payloads hold this type, so anything
/// shown to a person was redacted when it was created. Deserializing trusts its source: it exists to
/// read back stet's own records, which were sanitized when they were written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct SanitizedText(String);

impl SanitizedText {
    /// The sanitized text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sanitized text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for SanitizedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A sanitizer shared by every sink of the process, which learns the values stet handles as it
/// mints or reads them (credentials, tokens, keys).
#[derive(Debug, Clone)]
pub struct SanitizerHandle {
    current: Arc<RwLock<Arc<TokenSanitizer>>>,
}

impl SanitizerHandle {
    /// A handle over `sanitizer`; clones share it.
    pub fn new(sanitizer: TokenSanitizer) -> SanitizerHandle {
        SanitizerHandle {
            current: Arc::new(RwLock::new(Arc::new(sanitizer))),
        }
    }

    /// The sanitizer as it is now; streams started from it keep the values it knew.
    pub fn current(&self) -> Arc<TokenSanitizer> {
        match self.current.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Adds a value to mask from now on, in every sink that asks for [`SanitizerHandle::current`].
    pub fn register(&self, value: KnownValue) -> Result<()> {
        let mut guard = match self.current.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let next = guard.with_known_value(value)?;
        *guard = Arc::new(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
