//! Transcript search (`/`, `n`, `N`): the query as a literal pattern, smart-case, and the walk from the
//! item in view to the nearest match, wrapping at either end of the ring the way `less` does.

use regex::{Regex, RegexBuilder};

use crate::app::view::{BoundedRing, TranscriptLine};

/// The longest query the prompt accepts, in characters.
pub const MAX_QUERY_CHARS: usize = 256;

/// Which way `n` walks from the item in view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Towards the start of the transcript (what `/` and `n` do: the newest output is at the end).
    Older,
    /// Towards the end (`N`).
    Newer,
}

/// A committed search: the query and the pattern matched against each item's text.
#[derive(Debug, Clone)]
pub struct Search {
    query: String,
    pattern: Regex,
}

impl PartialEq for Search {
    fn eq(&self, other: &Search) -> bool {
        self.query == other.query
    }
}

/// Where the nearest match is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The ring index of the matching item.
    pub index: usize,
    /// Whether the walk went past one end of the ring and came round from the other.
    pub wrapped: bool,
}

impl Search {
    /// A search for `query` taken literally; case-insensitive unless it has an upper-case letter.
    /// `None` for an empty query.
    pub fn new(query: &str) -> Option<Search> {
        if query.is_empty() {
            return None;
        }
        let pattern = RegexBuilder::new(&regex::escape(query))
            .case_insensitive(!query.chars().any(char::is_uppercase))
            .build()
            .ok()?;
        Some(Search {
            query: query.to_owned(),
            pattern,
        })
    }

    /// What was searched for, as typed.
    pub fn query(&self) -> &str {
        &self.query
    }

    /// The pattern, for highlighting what matched.
    pub fn pattern(&self) -> &Regex {
        &self.pattern
    }

    /// The nearest item matching, walking `direction` from ring index `from` (which itself counts
    /// only when `include_from`), wrapping round once.
    pub fn find(
        &self,
        ring: &BoundedRing<TranscriptLine>,
        from: usize,
        direction: Direction,
        include_from: bool,
    ) -> Option<Found> {
        let items = ring.items();
        let len = items.len();
        if len == 0 {
            return None;
        }
        let from = from.min(len - 1);
        let first_step = usize::from(!include_from);
        (first_step..=len).find_map(|step| {
            let (index, wrapped) = match direction {
                Direction::Older => match from.checked_sub(step) {
                    Some(index) => (index, false),
                    None => (from + len - step, true),
                },
                Direction::Newer => {
                    let index = from + step;
                    if index < len {
                        (index, false)
                    } else {
                        (index - len, true)
                    }
                }
            };
            self.pattern
                .is_match(items[index].text.as_str())
                .then_some(Found { index, wrapped })
        })
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use std::sync::Arc;
    use stet_protocol::event::ItemKind;

    use crate::app::view::ClippedText;
    use stet_sanitize::sanitize::TokenSanitizer;

    fn ring(texts: &[&str]) -> BoundedRing<TranscriptLine> {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let mut ring = BoundedRing::new(16);
        for text in texts {
            ring.push(TranscriptLine {
                kind: ItemKind::Output,
                text: ClippedText::new(sanitizer.sanitize(text)),
            });
        }
        ring
    }

    #[test]
    fn smart_case_and_literal_queries() {
        let items = ring(&["Error: disk", "all fine", "error again", "a.b (x)"]);
        let lower = Search::new("error").unwrap();
        assert_eq!(
            lower.find(&items, 3, Direction::Older, true),
            Some(Found {
                index: 2,
                wrapped: false
            })
        );
        let upper = Search::new("Error").unwrap();
        assert_eq!(
            upper.find(&items, 3, Direction::Older, true).unwrap().index,
            0
        );
        let literal = Search::new("a.b (x)").unwrap();
        assert_eq!(
            literal
                .find(&items, 3, Direction::Older, true)
                .unwrap()
                .index,
            3
        );
        assert!(
            Search::new("a.c")
                .unwrap()
                .find(&items, 3, Direction::Older, true)
                .is_none()
        );
        assert!(Search::new("").is_none());
    }

    #[test]
    fn walking_skips_the_current_item_and_wraps_both_ways() {
        let items = ring(&["hit", "miss", "hit", "miss"]);
        let search = Search::new("hit").unwrap();
        assert_eq!(
            search.find(&items, 2, Direction::Older, false),
            Some(Found {
                index: 0,
                wrapped: false
            })
        );
        assert_eq!(
            search.find(&items, 0, Direction::Older, false),
            Some(Found {
                index: 2,
                wrapped: true
            })
        );
        assert_eq!(
            search.find(&items, 2, Direction::Newer, false),
            Some(Found {
                index: 0,
                wrapped: true
            })
        );
        assert_eq!(
            search
                .find(&items, 2, Direction::Older, true)
                .unwrap()
                .index,
            2
        );
        let single = ring(&["hit"]);
        assert_eq!(
            search.find(&single, 0, Direction::Newer, false),
            Some(Found {
                index: 0,
                wrapped: true
            }),
            "the only match is found again after a full turn"
        );
        assert!(search.find(&ring(&[]), 0, Direction::Older, true).is_none());
    }
}
