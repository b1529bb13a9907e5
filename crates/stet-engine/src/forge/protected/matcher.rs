//! The protected rules compiled once into one bit-parallel position automaton (issue 27): a path is
//! matched against every rule at once, with a fixed number of word operations per character of the
//! path (one bit per pattern character, 64 to a word), so no pattern's shape, `**` or `*`, makes the
//! review gate's cost grow faster than the path it reads.
//!
//! A folded path is read as the characters `/s1/s2/…/sn` (one `/` before each segment, an empty
//! segment as a lone `/`). Each rule becomes a row of positions, each consuming one character:
//! a segment's `/`, its literals, `?` (any character but `/`) and `*` (the same, repeatable, may be
//! skipped); `**` becomes `/` followed by a position that takes any character, `/` included, and an
//! exit that takes none, the three skippable as a whole: between two segment boundaries that is "any
//! number of whole segments".
//! Every rule's row starts with a start position no character reaches, so rows never run into each
//! other, and the first rule whose last position is live at the end is the one the path falls under.

use std::collections::HashMap;

use super::{Glob, Segment};

/// A set of positions, one bit each, 64 to a word.
type Bits = Vec<u64>;

/// What the positions of one word of the automaton are, each mask a bit per position.
#[derive(Debug, Clone, Copy, Default)]
struct Masks {
    /// Each rule's start position: where a match begins, reached by no character.
    starts: u64,
    /// Each rule's last position: live once the whole path is read, the rule matches.
    lasts: u64,
    /// `*` and the position of `**` that takes any character: they repeat.
    loops: u64,
    /// `*`: it may take nothing.
    runs: u64,
    /// The position of `**` that takes any character: it may take nothing once its `/` is read.
    anys: u64,
    /// The exit of `**`: reached from its any-character position, or from before its `/` when the
    /// whole `**` takes nothing.
    exits: u64,
    /// Positions that take `/`.
    slash: u64,
    /// Positions that take any character but `/`.
    other: u64,
}

/// Every rule's positions, word by word.
#[derive(Debug, Clone, Default)]
pub(super) struct Matcher {
    /// The first position of each rule, in rule order.
    bases: Vec<usize>,
    words: Vec<Masks>,
    /// Positions that take one character exactly, by that character.
    literals: HashMap<char, Bits>,
}

/// What one position takes.
#[derive(Clone, Copy)]
enum Takes {
    Nothing,
    Slash,
    Literal(char),
    OneOther,
    RunOfOther,
    DepthSlash,
    Anything,
    DepthExit,
}

impl Matcher {
    /// The automaton of `rules`, each a pattern's segments, tried in this order.
    pub(super) fn compile<'a>(rules: impl IntoIterator<Item = &'a [Segment]>) -> Matcher {
        let mut positions: Vec<Takes> = Vec::new();
        let mut bases = Vec::new();
        for segments in rules {
            bases.push(positions.len());
            positions.push(Takes::Nothing);
            let mut previous_any_depth = false;
            for segment in segments {
                match segment {
                    // `**/**` is `**`: one group of positions, so no chain of skips is longer than
                    // `close` follows.
                    Segment::AnyDepth if previous_any_depth => {}
                    Segment::AnyDepth => {
                        positions.extend([Takes::DepthSlash, Takes::Anything, Takes::DepthExit])
                    }
                    Segment::Glob(glob) => {
                        positions.push(Takes::Slash);
                        positions.extend(glob.iter().map(|element| match element {
                            Glob::Literal(character) => Takes::Literal(*character),
                            Glob::AnyOne => Takes::OneOther,
                            Glob::AnyRun => Takes::RunOfOther,
                        }));
                    }
                }
                previous_any_depth = matches!(segment, Segment::AnyDepth);
            }
        }
        let count = positions.len().div_ceil(64);
        let mut words = vec![Masks::default(); count];
        let mut literals: HashMap<char, Bits> = HashMap::new();
        for (index, takes) in positions.iter().enumerate() {
            let bit = 1u64 << (index % 64);
            let masks = &mut words[index / 64];
            match takes {
                Takes::Nothing => masks.starts |= bit,
                Takes::Slash | Takes::DepthSlash => masks.slash |= bit,
                Takes::OneOther => masks.other |= bit,
                Takes::RunOfOther => {
                    masks.other |= bit;
                    masks.loops |= bit;
                    masks.runs |= bit;
                }
                Takes::Anything => {
                    masks.slash |= bit;
                    masks.other |= bit;
                    masks.loops |= bit;
                    masks.anys |= bit;
                }
                Takes::DepthExit => masks.exits |= bit,
                Takes::Literal(character) => {
                    literals.entry(*character).or_insert_with(|| vec![0; count])[index / 64] |= bit;
                }
            }
        }
        for end in bases.iter().skip(1).copied().chain([positions.len()]) {
            let last = end - 1;
            words[last / 64].lasts |= 1 << (last % 64);
        }
        Matcher {
            bases,
            words,
            literals,
        }
    }

    /// The index of the first rule the folded path `segments` falls under, if any.
    pub(super) fn first_match(&self, segments: &[Vec<char>]) -> Option<usize> {
        let mut live: Bits = Vec::with_capacity(self.words.len());
        let mut below = 0;
        for masks in &self.words {
            below = close(masks.starts, below, masks);
            live.push(below);
        }
        for segment in segments {
            for character in std::iter::once(&'/').chain(segment) {
                if !self.step(&mut live, *character) {
                    return None;
                }
            }
        }
        let (word, bits) = live
            .iter()
            .zip(&self.words)
            .map(|(live, masks)| live & masks.lasts)
            .enumerate()
            .find(|(_, bits)| *bits != 0)?;
        let position = word * 64 + bits.trailing_zeros() as usize;
        Some(self.bases.partition_point(|base| *base <= position) - 1)
    }

    /// Reads one character, from the lowest word up: each live position hands on to the next one
    /// (or to itself, for a repeating one) where that one takes `character`, and what that makes
    /// live without a character is added. Whether any position is still live.
    fn step(&self, live: &mut [u64], character: char) -> bool {
        let literal = self.literals.get(&character);
        // The word below this one, as it was before the character and as it is now.
        let (mut below_before, mut below_now) = (0u64, 0u64);
        let mut any = 0;
        for (word, masks) in self.words.iter().enumerate() {
            let before = live[word];
            let takes = if character == '/' {
                masks.slash
            } else {
                masks.other | literal.map_or(0, |bits| bits[word])
            };
            let taken = ((before << 1) | (below_before >> 63) | (before & masks.loops)) & takes;
            let now = close(taken, below_now, masks);
            live[word] = now;
            (below_before, below_now) = (before, now);
            any |= now;
        }
        any != 0
    }
}

/// `bits` (one word) with what is live without taking a character added, `below` being the word
/// below, already closed: past a `*`; past a whole `**` (a `*` may end the segment before it); past
/// the any-character position of `**` once its `/` is read; to the exit of `**` from there. In this
/// order no chain of skips needs another round (`**/**` was made one `**`).
fn close(mut bits: u64, below: u64, masks: &Masks) -> u64 {
    bits |= ((bits << 1) | (below >> 63)) & masks.runs;
    bits |= ((bits << 3) | (below >> 61)) & masks.exits;
    bits |= ((bits << 1) | (below >> 63)) & masks.anys;
    bits |= ((bits << 1) | (below >> 63)) & masks.exits;
    bits
}
