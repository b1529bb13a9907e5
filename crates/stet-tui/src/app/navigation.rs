//! Where the person is looking: the focused pane and the transcript's scroll position, kept apart
//! from what the engine said so moving around never touches the dispatch state.

/// The pane that arrow keys act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Focus {
    /// The inbox of briefs (the start).
    #[default]
    Inbox,
    /// The selected dispatch's transcript.
    Transcript,
}

impl Focus {
    /// The pane `Tab` moves to.
    pub fn next(self) -> Focus {
        match self {
            Focus::Inbox => Focus::Transcript,
            Focus::Transcript => Focus::Inbox,
        }
    }
}

/// How much of each scrolling view the last frame showed, so a page key scrolls by a page of the
/// pane's own height (the event loop measures it after each frame; 0 until then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pages {
    /// Diff lines the review gate shows at once.
    pub diff: usize,
    /// Rows of the transcript pane.
    pub transcript: usize,
    /// Rows of the help overlay.
    pub help: usize,
    /// Help lines below the overlay when it shows its first line (0: it shows them all).
    pub help_hidden: usize,
}

impl Pages {
    /// A page of `rows`, never less than one line.
    pub fn page(rows: usize) -> usize {
        rows.saturating_sub(1).max(1)
    }
}

/// The transcript's scroll position: following the tail, or pinned to one item.
///
/// A pinned position names the item by its absolute number (items dropped from the ring count), so
/// new items arriving below and old ones leaving above do not move what the person is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TranscriptScroll {
    /// `None` follows the tail; `Some(n)` keeps item `n` in view.
    pinned: Option<u64>,
    /// The pinned item is a search's match: it is shown near the top with the items after it
    /// below, rather than at the bottom.
    in_context: bool,
}

impl TranscriptScroll {
    /// Whether the pane follows the tail as items arrive.
    pub fn is_following(&self) -> bool {
        self.pinned.is_none()
    }

    /// Whether the pinned item is shown with the items after it (a search's match).
    pub fn in_context(&self) -> bool {
        self.pinned.is_some() && self.in_context
    }

    /// The ring index of the item the pane is pinned to (at its bottom unless
    /// [`Self::in_context`]; the last item when following), for a ring of `len` items after
    /// `dropped` older ones; `None` when the ring is empty.
    pub fn bottom(&self, dropped: u64, len: usize) -> Option<usize> {
        let last = len.checked_sub(1)?;
        Some(match self.pinned {
            None => last,
            Some(item) => usize::try_from(item.saturating_sub(dropped))
                .unwrap_or(last)
                .min(last),
        })
    }

    /// Moves `lines` items towards the start; this stops following. Nothing to scroll, no change.
    pub fn up(&mut self, lines: usize, dropped: u64, len: usize) -> bool {
        let Some(bottom) = self.bottom(dropped, len) else {
            return false;
        };
        let target = dropped + bottom.saturating_sub(lines) as u64;
        let before = *self;
        self.in_context &= self.pinned.is_some();
        self.pinned = Some(target);
        *self != before
    }

    /// Moves `lines` items towards the end; reaching the last item follows the tail again.
    pub fn down(&mut self, lines: usize, dropped: u64, len: usize) -> bool {
        let Some(bottom) = self.bottom(dropped, len) else {
            return false;
        };
        if self.pinned.is_none() {
            return false;
        }
        let target = bottom.saturating_add(lines);
        self.pinned = (target + 1 < len).then(|| dropped + target as u64);
        true
    }

    /// Keeps item `item` (an absolute number, dropped items counted) in view with the items after
    /// it, as a search's match is shown.
    pub fn pin(&mut self, item: u64) {
        self.pinned = Some(item);
        self.in_context = true;
    }

    /// Follows the tail again; returns whether it was pinned.
    pub fn follow(&mut self) -> bool {
        self.pinned.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrolling_up_pins_and_scrolling_back_down_follows_again() {
        let mut scroll = TranscriptScroll::default();
        assert_eq!(scroll.bottom(0, 10), Some(9));
        assert!(scroll.up(3, 0, 10));
        assert!(!scroll.is_following());
        assert_eq!(scroll.bottom(0, 10), Some(6));
        assert!(scroll.down(2, 0, 10));
        assert_eq!(scroll.bottom(0, 10), Some(8));
        assert!(scroll.down(5, 0, 10));
        assert!(scroll.is_following());
    }

    #[test]
    fn a_pinned_item_stays_put_while_the_ring_moves() {
        let mut scroll = TranscriptScroll::default();
        scroll.up(2, 0, 10);
        assert_eq!(scroll.bottom(0, 10), Some(7));
        assert_eq!(scroll.bottom(3, 10), Some(4), "three dropped, same item");
        assert_eq!(
            scroll.bottom(20, 10),
            Some(0),
            "the item left: the oldest kept"
        );
    }

    #[test]
    fn the_top_and_an_empty_ring_are_limits() {
        let mut scroll = TranscriptScroll::default();
        assert!(!scroll.up(1, 0, 0));
        assert!(scroll.is_following());
        scroll.up(100, 5, 10);
        assert_eq!(scroll.bottom(5, 10), Some(0));
        assert!(!scroll.up(1, 5, 10), "already at the top");
        assert!(scroll.follow());
        assert!(!scroll.follow());
    }
}
