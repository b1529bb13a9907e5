//! The review gate's diff: the sanitized patch stet wrote to the run record from its trusted import,
//! held as one string with its line starts so a 16 MiB patch scrolls without being split up.

/// A patch as lines, indexable without copying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchText {
    text: String,
    /// Byte offset of every line's start.
    starts: Vec<usize>,
}

impl PatchText {
    /// The patch `text`, its line starts found once.
    pub fn new(text: String) -> PatchText {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|newline| newline + 1));
        if starts.last() == Some(&text.len()) {
            starts.pop();
        }
        PatchText { text, starts }
    }

    /// How many lines the patch has.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the patch is empty (nothing changed).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Line `index` without its newline; `None` past the end.
    pub fn line(&self, index: usize) -> Option<&str> {
        let start = *self.starts.get(index)?;
        let end = self
            .starts
            .get(index + 1)
            .copied()
            .unwrap_or(self.text.len());
        let line = self.text.get(start..end)?;
        Some(line.strip_suffix('\n').unwrap_or(line))
    }
}

/// Where the patch of a dispatch stands in the theater.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchState {
    /// The result was collected; the patch is being read from the run record.
    Loading,
    /// The patch, read.
    Loaded(PatchText),
    /// The run record's patch could not be read; the reason says why.
    Unavailable(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_indexed_without_their_newlines() {
        let patch = PatchText::new("diff --git a/x b/x\n+one\n-two\n".to_owned());
        assert_eq!(patch.len(), 3);
        assert_eq!(patch.line(0), Some("diff --git a/x b/x"));
        assert_eq!(patch.line(2), Some("-two"));
        assert_eq!(patch.line(3), None);
    }

    #[test]
    fn a_last_line_without_newline_and_an_empty_patch() {
        let patch = PatchText::new("a\n\nb".to_owned());
        assert_eq!(patch.len(), 3);
        assert_eq!(patch.line(1), Some(""));
        assert_eq!(patch.line(2), Some("b"));
        let empty = PatchText::new(String::new());
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        assert_eq!(empty.line(0), None);
    }
}
