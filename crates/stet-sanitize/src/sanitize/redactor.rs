//! [`Redactor`], the streaming half of the sanitizer: it scans one stream through a bounded carry
//! buffer, judges each trigger by the rule book, and masks or withholds so that feeding a stream in
//! any pieces gives exactly the output of feeding it whole.

use std::sync::Arc;

use super::rules::{self, Action, LOOKBACK, MAX_LEAD, WINDOW};
use super::split::{self, Examined};
use super::{
    Detection, Hit, MARKER, Meaning, PRIVATE_KEY_CAP, PRIVATE_KEY_END, Scanner, TokenSanitizer,
};
/// What the redactor is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Scanning,
    /// Inside a PEM private-key block: bytes are withheld until its END line.
    WithholdingPrivateKey {
        withheld: usize,
        /// Where the block began, counted from the start of the stream.
        opened: usize,
    },
    /// A token ran past the look-ahead window: its remaining token bytes are dropped.
    SwallowingToken,
    /// A token ended a line: the line break passes, then the run of the token family's alphabet
    /// that starts the next line is dropped (the token's second half, [`split`]).
    Continuing {
        /// The family's index in [`split::FAMILIES`].
        family: usize,
        /// Whether the line break was passed.
        broke: bool,
    },
}

/// A streaming redactor over one stream. Holds back at most a look-ahead window plus context.
#[derive(Debug)]
pub struct Redactor {
    sanitizer: Arc<TokenSanitizer>,
    /// Unsent input, preceded by up to [`LOOKBACK`] bytes already sent (context for rules).
    buffer: Vec<u8>,
    /// Start of the unsent part of `buffer`.
    sent: usize,
    /// Where the next trigger search starts (`>= sent`).
    scan: usize,
    /// End of the last masked or withheld span: no rule may start before it.
    barrier: usize,
    mode: Mode,
    /// How many secrets were masked so far.
    masked: u64,
    /// Each scanner's next hit, cached while the buffer is unchanged.
    lookaheads: Vec<Option<Lookahead>>,
    /// How many bytes of the stream were dropped from the front of `buffer`.
    consumed: usize,
    /// What was masked, where, when the caller asked to know ([`TokenSanitizer::detect`]).
    pub(super) detections: Option<Vec<Detection>>,
    /// A mask decided at a trigger well before it (`curl … -u user:pass`): applied once every
    /// trigger between has been judged, so a secret there is not skipped.
    deferred: Option<Deferred>,
}

/// A mask to apply at `start..end` (buffer offsets) once the scan reaches it.
#[derive(Debug, Clone)]
struct Deferred {
    start: usize,
    end: usize,
    kind: Arc<str>,
    known: bool,
}

/// What the scanner decided at one trigger.
enum Verdict {
    /// Not a secret: search again from the next byte.
    Clean,
    /// Mask `start..end`, then continue in `mode`.
    Mask {
        start: usize,
        end: usize,
        kind: Arc<str>,
        known: bool,
        then: Mode,
    },
    /// A private-key block opens here; the marker comes once it closes.
    OpenPrivateKey { start: usize, end: usize },
}

impl Redactor {
    /// A redactor of one stream, with an empty carry.
    pub fn new(sanitizer: Arc<TokenSanitizer>) -> Redactor {
        Redactor {
            lookaheads: vec![None; sanitizer.scanners.len()],
            sanitizer,
            buffer: Vec::new(),
            sent: 0,
            scan: 0,
            barrier: 0,
            mode: Mode::Scanning,
            masked: 0,
            consumed: 0,
            detections: None,
            deferred: None,
        }
    }

    /// How many secrets this redactor has masked.
    pub fn masked(&self) -> u64 {
        self.masked
    }

    fn mark(&mut self, out: &mut Vec<u8>, kind: &str) {
        out.extend_from_slice(MARKER);
        out.extend_from_slice(kind.as_bytes());
        out.push(b']');
        self.masked += 1;
    }

    /// Notes a masked span (stream offsets) when detections are being kept.
    fn note(&mut self, start: usize, end: usize, kind: &str, known: bool) {
        if let Some(detections) = self.detections.as_mut() {
            detections.push(Detection {
                start,
                end,
                kind: Arc::from(kind),
                known,
            });
        }
    }

    /// Feeds the next piece of the stream; appends whatever can already be decided to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.buffer.extend_from_slice(chunk);
        self.forget_lookahead();
        self.process(out, false);
        self.compact();
    }

    /// Ends the stream: decides everything still held back and appends it to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.process(out, true);
        self.consumed += self.buffer.len();
        self.buffer.clear();
        self.sent = 0;
        self.scan = 0;
        self.barrier = 0;
        self.mode = Mode::Scanning;
        self.deferred = None;
        self.forget_lookahead();
    }

    fn forget_lookahead(&mut self) {
        self.lookaheads.fill(None);
    }

    fn process(&mut self, out: &mut Vec<u8>, at_end: bool) {
        loop {
            let more = match self.mode {
                Mode::Scanning => self.scan_step(out, at_end),
                Mode::WithholdingPrivateKey { withheld, opened } => {
                    self.withhold_step(out, at_end, withheld, opened)
                }
                Mode::SwallowingToken => self.swallow_step(at_end),
                Mode::Continuing { family, broke } => {
                    self.continue_step(out, at_end, family, broke)
                }
            };
            if !more {
                return;
            }
        }
    }

    /// The earliest trigger at or after `scan`; at one position the earlier scanner wins.
    fn next_hit(&mut self) -> Option<Hit> {
        let mut best: Option<Hit> = None;
        for (scanner, cache) in self
            .sanitizer
            .scanners
            .iter()
            .zip(self.lookaheads.iter_mut())
        {
            let hit = lookahead(cache, scanner, &self.buffer, self.scan);
            if let Some(hit) = hit
                && best.is_none_or(|b| hit.start < b.start)
            {
                best = Some(hit);
            }
        }
        best
    }

    /// Sends everything before `until` (if not sent yet).
    fn send_until(&mut self, out: &mut Vec<u8>, until: usize) {
        if until > self.sent {
            out.extend_from_slice(&self.buffer[self.sent..until]);
            self.sent = until;
        }
    }

    /// One trigger search and decision; returns whether to keep going.
    fn scan_step(&mut self, out: &mut Vec<u8>, at_end: bool) -> bool {
        let len = self.buffer.len();
        let hit = self.next_hit();
        if let Some(deferred) = self
            .deferred
            .take_if(|d| hit.is_none_or(|h| d.start <= h.start))
        {
            // Every trigger before it was judged; what a mask or a withheld key there covered is not
            // masked twice.
            let start = deferred.start.max(self.barrier).max(self.sent);
            if start < deferred.end {
                self.send_until(out, start);
                self.mark(out, &deferred.kind);
                let at = self.consumed;
                self.note(
                    at + start,
                    at + deferred.end,
                    &deferred.kind,
                    deferred.known,
                );
                self.sent = deferred.end;
                self.scan = deferred.end;
                self.barrier = deferred.end;
            }
            return true;
        }
        if at_end && hit.is_none() {
            self.send_until(out, len);
            self.scan = len;
            return false;
        }
        // A trigger may still be arriving at the end of the buffer; a rule may start before it.
        let incomplete_from = len.saturating_sub(self.sanitizer.longest_trigger - 1);
        let decidable = |h: &Hit| {
            at_end
                || h.start + WINDOW <= len
                || (self.line_ends_after(h.start).is_some() && !self.split_pending(h))
        };
        let Some(hit) = hit.filter(decidable) else {
            // Not enough look-ahead to decide: send only what no later decision can mask. No rule
            // spans a line end, so every line before the undecided one can go (a live transcript
            // line is not held back for the next).
            let resume = hit
                .map_or(incomplete_from, |h| h.start.min(incomplete_from))
                .max(self.scan);
            let settled = self.last_line_end(hit.map_or(len, |h| h.start));
            self.scan = resume.max(settled);
            self.send_until(out, resume.saturating_sub(MAX_LEAD).max(settled));
            return false;
        };
        match self.judge(hit, at_end) {
            Verdict::Clean => {
                self.scan = hit.start + 1;
            }
            Verdict::Mask {
                start,
                end,
                kind,
                known,
                then: Mode::Scanning,
            } if start > hit.end && self.trigger_between(hit.start + 1, start) => {
                self.deferred = Some(Deferred {
                    start,
                    end,
                    kind,
                    known,
                });
                self.scan = hit.start + 1;
            }
            Verdict::Mask {
                start,
                end,
                kind,
                known,
                then,
            } => {
                self.send_until(out, start);
                self.mark(out, &kind);
                self.note(self.consumed + start, self.consumed + end, &kind, known);
                self.sent = end;
                self.scan = end;
                self.barrier = end;
                self.mode = then;
            }
            Verdict::OpenPrivateKey { start, end } => {
                self.send_until(out, start);
                self.sent = end;
                self.scan = end;
                self.barrier = end;
                self.mode = Mode::WithholdingPrivateKey {
                    withheld: 0,
                    opened: self.consumed + start,
                };
            }
        }
        true
    }

    /// Where the first line end at or after `from` (within the look-ahead window) ends: a newline
    /// that no continuation backslash escapes. No rule's match, context or trigger crosses one.
    fn line_ends_after(&self, from: usize) -> Option<usize> {
        let until = self.buffer.len().min(from + WINDOW);
        memchr::memchr_iter(b'\n', &self.buffer[from..until])
            .map(|offset| from + offset)
            .find(|&at| !continued(&self.buffer[..at]))
            .map(|at| at + 1)
    }

    /// Just past the last line end in the unsent bytes before `until` (`sent` when there is none).
    fn last_line_end(&self, until: usize) -> usize {
        let unsent = &self.buffer[self.sent..until];
        memchr::memrchr_iter(b'\n', unsent)
            .map(|offset| self.sent + offset)
            .find(|&at| !continued(&self.buffer[..at]))
            .map_or(self.sent, |at| at + 1)
    }

    /// The end of a shape's mask over `start..end`, pushed past every known value that begins inside
    /// it: a shape that stops within a known secret (`password: <word>` before a password holding a
    /// space) must not leave the secret's rest in the clear.
    fn past_known_values(&self, start: usize, mut end: usize) -> usize {
        let Some(known) = self
            .sanitizer
            .scanners
            .first()
            .filter(|_| !self.sanitizer.known_labels.is_empty())
        else {
            return end;
        };
        let mut from = start;
        while let Some(hit) = known.find(&self.buffer, from) {
            if hit.start >= end {
                break;
            }
            end = end.max(hit.end);
            from = hit.start + 1;
        }
        end
    }

    /// Decides what the trigger `hit` is.
    fn judge(&self, hit: Hit, at_end: bool) -> Verdict {
        let sanitizer = &self.sanitizer;
        let rule_ids = match hit.meaning {
            Meaning::Known(label) => {
                return Verdict::Mask {
                    start: hit.start,
                    end: hit.end,
                    kind: Arc::clone(&sanitizer.known_labels[label]),
                    known: true,
                    then: Mode::Scanning,
                };
            }
            Meaning::Trigger(index) => &sanitizer.book.triggers[index].rules,
        };
        if let Some(verdict) = self.split_verdict(hit, at_end) {
            return verdict;
        }
        for &id in rule_ids {
            let rule = &sanitizer.book.rules[id];
            let Some(start) = hit
                .start
                .checked_sub(rule.lead)
                .filter(|s| *s >= self.barrier)
            else {
                continue;
            };
            let window = &self.buffer[start..(hit.start + WINDOW).min(self.buffer.len())];
            if !(rule.quick)(window) || !self.context_allows(rule.before, start) {
                continue;
            }
            let Some((whole, secret)) = rule.matched(window) else {
                continue;
            };
            // A marker is never a secret: sanitizing sanitized text changes nothing.
            if memchr::memmem::find(secret.as_bytes(), MARKER).is_some()
                || !(rule.accept)(secret.as_bytes())
                || (rule.yields_to_shapes
                    && self.shape_matches_at(
                        start + secret.start(),
                        start + secret.end(),
                        start + window.len(),
                        at_end,
                    ))
            {
                continue;
            }
            let shape_end = start + secret.end();
            let end = self.past_known_values(start + secret.start(), shape_end);
            return match rule.action {
                Action::Mask => Verdict::Mask {
                    start: start + secret.start(),
                    end,
                    kind: Arc::clone(&rule.label),
                    known: false,
                    // A match that reaches the window's end may continue past it.
                    then: if end == shape_end && shape_end == hit.start + WINDOW && !at_end {
                        Mode::SwallowingToken
                    } else {
                        self.after_mask(start + secret.start(), end)
                    },
                },
                Action::OpenPrivateKey => Verdict::OpenPrivateKey {
                    start,
                    end: start + whole.end(),
                },
            };
        }
        Verdict::Clean
    }

    /// Whether some trigger starts in `from..until`.
    fn trigger_between(&self, from: usize, until: usize) -> bool {
        let haystack = &self.buffer[..until];
        self.sanitizer
            .scanners
            .iter()
            .any(|scanner| scanner.find(haystack, from).is_some())
    }

    /// Whether a rule that does not yield masks the whole value `at..value_end` (its trigger starting
    /// at `at`): a later hit masks it under that rule's name. A shape that would mask only part of
    /// the value, or that its own test refuses, does not take it.
    /// It looks no further than `window_end`, where the value's own rule looked: a stream decides as
    /// the whole would.
    fn shape_matches_at(
        &self,
        at: usize,
        value_end: usize,
        window_end: usize,
        at_end: bool,
    ) -> bool {
        // At the end of the stream nothing comes after the window: its end is a real one.
        let window_is_all = at_end && window_end == self.buffer.len();
        let book = &self.sanitizer.book;
        let rest = &self.buffer[at..window_end];
        book.triggers
            .iter()
            .filter(|trigger| rest.starts_with(trigger.literal.as_bytes()))
            .flat_map(|trigger| &trigger.rules)
            .map(|&id| &book.rules[id])
            .any(|rule| {
                rule.lead == 0
                    && !rule.yields_to_shapes
                    && rule.action == Action::Mask
                    && self.context_allows(rule.before, at)
                    && (rule.quick)(rest)
                    // A shape whose match reaches the end of what was looked at may go on past it
                    // (`\b` there proves nothing): not confirmed.
                    && rule.matched(rest).is_some_and(|(whole, secret)| {
                        (rule.accept)(secret.as_bytes())
                            && at + secret.end() >= value_end
                            && (window_is_all || at + whole.end() < window_end)
                    })
            })
    }

    /// Whether the context allows a rule to start at `at`; the end of a mask counts as a token
    /// boundary (a token glued to a masked one is still a token).
    fn context_allows(&self, before: rules::Before, at: usize) -> bool {
        (before == rules::Before::TokenBoundary && at == self.barrier && at > 0)
            || rules::context_allows(before, &self.buffer, at)
    }

    /// Inside a private-key block: look for its END line, withholding everything before it.
    fn withhold_step(
        &mut self,
        out: &mut Vec<u8>,
        at_end: bool,
        withheld: usize,
        opened: usize,
    ) -> bool {
        let len = self.buffer.len();
        let budget = PRIVATE_KEY_CAP - withheld;
        let search_end = len.min(self.sent + budget);
        let pending = &self.buffer[self.sent..search_end];
        let mut from = 0;
        while let Some(offset) = memchr::memmem::find(&pending[from..], PRIVATE_KEY_END) {
            let at = from + offset;
            let end_line = &self.buffer[self.sent + at..len];
            if let Some(found_end) = self
                .sanitizer
                .private_key_end
                .find(end_line)
                .map(|m| m.end())
            {
                self.mark(out, "private-key");
                self.sent += at + found_end;
                self.note(opened, self.consumed + self.sent, "private-key", false);
                self.scan = self.sent;
                self.barrier = self.sent;
                self.mode = Mode::Scanning;
                return true;
            }
            if !at_end && end_line.len() < rules::MAX_KEY_LINE && !end_line.contains(&b'\n') {
                // The END line may still be arriving.
                self.advance_withheld(at, withheld, opened);
                return false;
            }
            from = at + 1;
        }
        if withheld + pending.len() >= PRIVATE_KEY_CAP || at_end {
            // No END within the cap (or before the stream ended): fail closed, nothing withheld is sent.
            self.mark(out, "private-key-unterminated");
            self.sent = search_end;
            let end = self.consumed + self.sent;
            self.note(opened, end, "private-key-unterminated", false);
            self.scan = search_end;
            self.barrier = search_end;
            self.mode = Mode::Scanning;
            return !at_end || self.sent < len;
        }
        // Keep what could be the start of a split END marker.
        let keep = PRIVATE_KEY_END.len() - 1;
        self.advance_withheld(pending.len().saturating_sub(keep), withheld, opened);
        false
    }

    fn advance_withheld(&mut self, by: usize, withheld: usize, opened: usize) {
        self.sent += by;
        self.scan = self.sent;
        self.barrier = self.sent;
        self.mode = Mode::WithholdingPrivateKey {
            withheld: withheld + by,
            opened,
        };
    }

    /// Whether `hit` is a token prefix whose line ended but whose next line has not yet shown
    /// whether it goes on with the token.
    fn split_pending(&self, hit: &Hit) -> bool {
        self.splits_at(hit)
            .is_some_and(|bytes| split::examine(bytes, false) == Examined::Pending)
    }

    /// The bytes from `hit` to the look-ahead window's end, when the hit is a token prefix that a
    /// line break may cut (a family's trigger, at a token boundary, past the last mask).
    fn splits_at(&self, hit: &Hit) -> Option<&[u8]> {
        let Meaning::Trigger(index) = hit.meaning else {
            return None;
        };
        let applies = hit.start >= self.barrier
            && split::applies(self.sanitizer.book.triggers[index].literal)
            && self.context_allows(rules::Before::TokenBoundary, hit.start);
        applies.then(|| &self.buffer[hit.start..self.buffer.len().min(hit.start + WINDOW)])
    }

    /// A token broken by a line end at `hit`: its first line's part is masked, the rest dropped.
    fn split_verdict(&self, hit: Hit, at_end: bool) -> Option<Verdict> {
        let bytes = self.splits_at(&hit)?;
        let complete = at_end || hit.start + WINDOW <= self.buffer.len();
        let Examined::Found { line_break, family } = split::examine(bytes, complete) else {
            return None;
        };
        Some(Verdict::Mask {
            start: hit.start,
            end: hit.start + line_break,
            kind: Arc::from(split::FAMILIES[family].label),
            known: false,
            then: Mode::Continuing {
                family,
                broke: false,
            },
        })
    }

    /// What follows a mask over `start..end`: a family's token masked up to a line end may go on at
    /// the start of the next line.
    fn after_mask(&self, start: usize, end: usize) -> Mode {
        let ends_line = split::line_break(&self.buffer[end..]).is_some();
        match split::continued_family(&self.buffer[start..end]) {
            Some(family) if ends_line => Mode::Continuing {
                family,
                broke: false,
            },
            _ => Mode::Scanning,
        }
    }

    /// After a token that ended a line: passes the line break, then drops the run of the token's
    /// alphabet that starts the next line, in whatever reads it arrives.
    fn continue_step(
        &mut self,
        out: &mut Vec<u8>,
        at_end: bool,
        family: usize,
        broke: bool,
    ) -> bool {
        if !broke {
            let rest = &self.buffer[self.sent..];
            let Some(width) = split::line_break(rest) else {
                if rest == b"\r" && !at_end {
                    return false;
                }
                self.mode = Mode::Scanning;
                return true;
            };
            let until = self.sent + width;
            self.send_until(out, until);
            self.scan = until;
            self.barrier = until;
        }
        let rest = &self.buffer[self.sent..];
        let dropped = split::run(rest, split::FAMILIES[family].alphabet);
        self.sent += dropped;
        self.scan = self.sent;
        self.barrier = self.sent;
        let end = self.consumed + self.sent;
        if let Some(last) = self.detections.as_mut().and_then(|d| d.last_mut()) {
            last.end = last.end.max(end);
        }
        if dropped < rest.len() || at_end {
            self.mode = Mode::Scanning;
            return dropped < rest.len();
        }
        self.mode = Mode::Continuing {
            family,
            broke: true,
        };
        false
    }

    /// Drops token bytes after a token longer than the window.
    fn swallow_step(&mut self, at_end: bool) -> bool {
        let rest = &self.buffer[self.sent..];
        let run = rest
            .iter()
            .take_while(|b| rules::is_token_byte(**b))
            .count();
        self.sent += run;
        self.scan = self.sent;
        self.barrier = self.sent;
        if run < rest.len() || at_end {
            self.mode = Mode::Scanning;
            return run < rest.len();
        }
        false
    }

    /// Drops sent bytes from the buffer, keeping [`LOOKBACK`] bytes of context.
    fn compact(&mut self) {
        if self.sent > 2 * LOOKBACK && self.sent > self.buffer.len() / 2 {
            let drop = self.sent - LOOKBACK;
            self.buffer.drain(..drop);
            self.consumed += drop;
            self.sent -= drop;
            self.scan -= drop;
            self.barrier = self.barrier.saturating_sub(drop);
            // A deferred mask a withheld key went past is covered already.
            self.deferred = self
                .deferred
                .take()
                .filter(|d| d.end > drop)
                .map(|d| Deferred {
                    start: d.start.saturating_sub(drop),
                    end: d.end - drop,
                    ..d
                });
            self.forget_lookahead();
        }
    }
}

/// Whether the newline after `before` continues its line (a shell continuation, `\\` or `\\\r`),
/// which the `curl -u` rule reads across.
fn continued(before: &[u8]) -> bool {
    before.ends_with(b"\\") || before.ends_with(b"\\\r")
}

/// The cached next hit of one scanner at or after `scan`, searching again only when needed.
fn lookahead(
    cache: &mut Option<Lookahead>,
    scanner: &Scanner,
    haystack: &[u8],
    scan: usize,
) -> Option<Hit> {
    if let Some(cached) = cache {
        let still_valid = cached.from <= scan && cached.hit.is_none_or(|hit| hit.start >= scan);
        if still_valid {
            return cached.hit;
        }
    }
    let hit = scanner.find(haystack, scan);
    *cache = Some(Lookahead { from: scan, hit });
    hit
}

/// A scanner's next hit at or after `from`, valid until the buffer changes.
#[derive(Debug, Clone, Copy)]
struct Lookahead {
    from: usize,
    hit: Option<Hit>,
}
