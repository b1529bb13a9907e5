//! How much of a result stet reads as text on the host (DESIGN §5 row 23): the import's limits bound
//! what is imported, not what stet allocates reading it back, so each reader of the result's content
//! works within a budget stated here and stops at it before converting or sanitizing anything.
//!
//! A file's content is diffed as text only when each side is at most [`MAX_DIFF_FILE_BYTES`] and
//! [`MAX_DIFF_FILE_LINES`] lines (the diff's own memory grows with the lines it compares); a larger
//! file is shown as cut in the review and held by the gate, never silently passed. The patch text is
//! built within [`MAX_PATCH_BYTES`] as it is converted, so invalid UTF-8 cannot make it grow past it.

use git2::{DiffDelta, DiffFile, FileMode, Repository};

/// The most of a result's patch stet keeps as text (the review's diff and the run record's); a
/// longer one is cut with a note, and the commit holds all of it.
pub const MAX_PATCH_BYTES: usize = 4 * 1024 * 1024;

/// The largest side of a file diffed as text, in bytes.
pub const MAX_DIFF_FILE_BYTES: u64 = 1024 * 1024;

/// The most lines a side of a file diffed as text may have.
pub const MAX_DIFF_FILE_LINES: usize = 32 * 1024;

/// Why a changed file's content is not read as text: the side past a bound, and by how much.
pub fn too_large(
    repository: &Repository,
    delta: &DiffDelta<'_>,
) -> Result<Option<String>, git2::Error> {
    for file in [delta.old_file(), delta.new_file()] {
        if let Some(reason) = side_too_large(repository, &file)? {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// Why one side of a change is not read as text, when it is past a bound.
pub fn side_too_large(
    repository: &Repository,
    file: &DiffFile<'_>,
) -> Result<Option<String>, git2::Error> {
    if !file.exists()
        || !matches!(
            file.mode(),
            FileMode::Blob | FileMode::BlobExecutable | FileMode::BlobGroupWritable
        )
    {
        return Ok(None);
    }
    let (size, _) = repository.odb()?.read_header(file.id())?;
    let size = size as u64;
    if size > MAX_DIFF_FILE_BYTES {
        return Ok(Some(format!(
            "{size} bytes; the review reads at most {MAX_DIFF_FILE_BYTES} bytes of a file as text"
        )));
    }
    let blob = repository.find_blob(file.id())?;
    let lines = memchr::memchr_iter(b'\n', blob.content()).count();
    if lines > MAX_DIFF_FILE_LINES {
        return Ok(Some(format!(
            "{lines} lines; the review reads at most {MAX_DIFF_FILE_LINES} lines of a file as text"
        )));
    }
    Ok(None)
}

/// Text built within a byte budget, converted as it is added: bytes that are not UTF-8 become
/// U+FFFD, and nothing past the budget is converted or kept.
#[derive(Debug)]
pub struct BoundedText {
    text: String,
    budget: usize,
    /// Something was left out.
    cut: bool,
}

impl BoundedText {
    /// Empty text that will hold at most `budget` bytes.
    pub fn new(budget: usize) -> BoundedText {
        BoundedText {
            text: String::new(),
            budget,
            cut: false,
        }
    }

    /// Appends `bytes` converted, as far as the budget allows; whether all of it fitted.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        if self.cut {
            return false;
        }
        for chunk in bytes.utf8_chunks() {
            let valid = chunk.valid();
            let room = self.budget - self.text.len();
            if valid.len() > room {
                self.text.push_str(crate::human::truncate(valid, room));
                self.cut = true;
                return false;
            }
            self.text.push_str(valid);
            if !chunk.invalid().is_empty() {
                if self.budget - self.text.len() < char::REPLACEMENT_CHARACTER.len_utf8() {
                    self.cut = true;
                    return false;
                }
                self.text.push(char::REPLACEMENT_CHARACTER);
            }
        }
        true
    }

    /// Whether something was left out.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Appends `note` whatever the budget (the marker saying what was cut).
    pub fn note(&mut self, note: &str) {
        self.text.push_str(note);
    }

    /// The text.
    pub fn into_string(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bytes_never_take_the_text_past_its_budget() {
        let mut text = BoundedText::new(10);
        assert!(!text.push(&[0xff; 100]));
        assert!(text.is_cut());
        let text = text.into_string();
        assert_eq!(text, "\u{fffd}".repeat(3));
        assert!(text.len() <= 10);
    }

    #[test]
    fn the_cut_keeps_whole_characters_and_nothing_after_it() {
        let mut text = BoundedText::new(4);
        assert!(text.push(b"ab"));
        assert!(!text.push("cé".as_bytes()));
        assert!(!text.push(b"d"));
        text.note("[cut]");
        assert_eq!(text.into_string(), "abc[cut]");
    }
}
