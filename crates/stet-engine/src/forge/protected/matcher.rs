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

/// Every rule's positions, as masks over all of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Matcher {
    /// The first position of each rule, in rule order.
    bases: Vec<usize>,
    /// Each rule's start position: where a match begins, reached by no character.
    starts: Bits,
    /// Each rule's last position: live once the whole path is read, the rule matches.
    lasts: Bits,
    /// `*` and the position of `**` that takes any character: they repeat.
    loops: Bits,
    /// `*`: it may take nothing.
    runs: Bits,
    /// The position of `**` that takes any character: it may take nothing once its `/` is read.
    anys: Bits,
    /// The exit of `**`: reached from its any-character position, or from before its `/` when the
    /// whole `**` takes nothing.
    exits: Bits,
    /// Positions that take `/`.
    slash: Bits,
    /// Positions that take any character but `/`.
    other: Bits,
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
        let words = positions.len().div_ceil(64);
        let mut matcher = Matcher {
            starts: vec![0; words],
            lasts: vec![0; words],
            loops: vec![0; words],
            runs: vec![0; words],
            anys: vec![0; words],
            exits: vec![0; words],
            slash: vec![0; words],
            other: vec![0; words],
            literals: HashMap::new(),
            bases: Vec::new(),
        };
        for (index, takes) in positions.iter().enumerate() {
            let (word, bit) = (index / 64, 1u64 << (index % 64));
            let set = |mask: &mut Bits| mask[word] |= bit;
            match takes {
                Takes::Nothing => set(&mut matcher.starts),
                Takes::Slash | Takes::DepthSlash => set(&mut matcher.slash),
                Takes::OneOther => set(&mut matcher.other),
                Takes::RunOfOther => {
                    set(&mut matcher.other);
                    set(&mut matcher.loops);
                    set(&mut matcher.runs);
                }
                Takes::DepthExit => set(&mut matcher.exits),
                Takes::Anything => {
                    for mask in [
                        &mut matcher.slash,
                        &mut matcher.other,
                        &mut matcher.loops,
                        &mut matcher.anys,
                    ] {
                        set(mask);
                    }
                }
                Takes::Literal(character) => set(matcher
                    .literals
                    .entry(*character)
                    .or_insert_with(|| vec![0; words])),
            }
        }
        for end in bases.iter().skip(1).copied().chain([positions.len()]) {
            let last = end - 1;
            matcher.lasts[last / 64] |= 1 << (last % 64);
        }
        matcher.bases = bases;
        matcher
    }

    /// The index of the first rule the folded path `segments` falls under, if any.
    pub(super) fn first_match(&self, segments: &[Vec<char>]) -> Option<usize> {
        let mut live = self.starts.clone();
        self.close(&mut live);
        for segment in segments {
            for character in std::iter::once(&'/').chain(segment) {
                if !self.step(&mut live, *character) {
                    return None;
                }
            }
        }
        let (word, bits) = live
            .iter()
            .zip(&self.lasts)
            .map(|(live, last)| live & last)
            .enumerate()
            .find(|(_, bits)| *bits != 0)?;
        let position = word * 64 + bits.trailing_zeros() as usize;
        Some(self.bases.partition_point(|base| *base <= position) - 1)
    }

    /// Reads one character: each live position hands on to the next one (or to itself, for a
    /// repeating one) where that one takes `character`. Whether any position is still live.
    fn step(&self, live: &mut Bits, character: char) -> bool {
        let literal = self.literals.get(&character);
        let mut any = false;
        for word in (0..live.len()).rev() {
            let takes = if character == '/' {
                self.slash[word]
            } else {
                self.other[word] | literal.map_or(0, |bits| bits[word])
            };
            let next = (shifted(live, word, 1) | (live[word] & self.loops[word])) & takes;
            live[word] = next;
            any |= next != 0;
        }
        if any {
            self.close(live);
        }
        any
    }

    /// Adds what is live without taking a character, in the one order no chain of skips needs
    /// more: past a `*`; past a whole `**` (a `*` may end the segment before it); past the
    /// any-character position of `**` once its `/` is read; to the exit of `**` from there.
    fn close(&self, live: &mut Bits) {
        for (by, mask) in [
            (1, &self.runs),
            (3, &self.exits),
            (1, &self.anys),
            (1, &self.exits),
        ] {
            for word in (0..live.len()).rev() {
                live[word] |= shifted(live, word, by) & mask[word];
            }
        }
    }
}

/// Word `word` of `bits` shifted up by `by` (1 to 3) positions, carrying from the word below; read
/// from the top word down, so the word below is still unchanged.
fn shifted(bits: &[u64], word: usize, by: u32) -> u64 {
    let carry = match word.checked_sub(1) {
        Some(below) => bits[below] >> (64 - by),
        None => 0,
    };
    (bits[word] << by) | carry
}
