//! The inbox is the list of briefs stet can see; each brief is read on its own, so one bad file is
//! shown as invalid instead of hiding the others.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use crate::brief::{Brief, BriefError};

/// Why the inbox directory itself could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("cannot list the inbox directory {}: {error}", dir.display())]
    ReadDirectory { dir: PathBuf, error: io::Error },
}

/// Result of loading the inbox.
pub type Result<T> = std::result::Result<T, InboxError>;

/// One `*.toml` file in the inbox and what came of reading it.
#[derive(Debug)]
pub struct InboxEntry {
    pub path: PathBuf,
    pub brief: std::result::Result<Brief, BriefError>,
}

/// The briefs in one directory, ordered by file name.
#[derive(Debug, Default)]
pub struct Inbox {
    entries: Vec<InboxEntry>,
}

impl Inbox {
    /// Where a repository keeps its briefs: `<repo_root>/.stet/briefs`.
    pub fn default_dir(repo_root: &Path) -> PathBuf {
        repo_root.join(".stet").join("briefs")
    }

    /// Reads every `*.toml` directly inside `dir` (not in subdirectories), ordered by the bytes of
    /// the file name. A directory that does not exist is an empty inbox.
    pub fn load(dir: &Path) -> Result<Self> {
        let read_directory_error = |error| InboxError::ReadDirectory {
            dir: dir.to_owned(),
            error,
        };
        let listing = match std::fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(error) => return Err(read_directory_error(error)),
        };
        let mut paths = Vec::new();
        for entry in listing {
            let entry = entry.map_err(read_directory_error)?;
            let path = entry.path();
            let is_directory = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if path
                .extension()
                .is_some_and(|extension| extension == "toml")
                && !is_directory
            {
                paths.push(path);
            }
        }
        paths.sort_by(|left, right| {
            let left = left.file_name().map(OsStr::as_encoded_bytes);
            let right = right.file_name().map(OsStr::as_encoded_bytes);
            left.cmp(&right)
        });
        let entries = paths
            .into_iter()
            .map(|path| InboxEntry {
                brief: Brief::from_file(&path),
                path,
            })
            .collect();
        Ok(Self { entries })
    }

    /// Every brief file, valid or not, in file-name order.
    pub fn entries(&self) -> &[InboxEntry] {
        &self.entries
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_is_under_dot_stet() {
        assert_eq!(
            Inbox::default_dir(Path::new("/repo")),
            PathBuf::from("/repo/.stet/briefs")
        );
    }

    #[test]
    fn a_missing_directory_is_an_empty_inbox() {
        let root = tempfile::tempdir().unwrap();
        let inbox = Inbox::load(&root.path().join("absent")).unwrap();
        assert!(inbox.entries().is_empty());
    }
}
