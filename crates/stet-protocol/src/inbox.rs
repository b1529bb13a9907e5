//! The inbox is the list of briefs stet can see; each brief is read on its own, so one bad file is
//! shown as invalid instead of hiding the others.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use crate::brief::{Brief, BriefError};

/// Why the inbox directory itself could not be listed.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum InboxError {
    #[error("cannot list the inbox directory {}: {error}", dir.display())]
    ReadDirectory { dir: PathBuf, error: io::Error },
    #[error(
        "{}: not read: the inbox is the repository's and must not be a link (a link could point at any directory of yours)",
        link.display()
    )]
    Link { link: PathBuf },
}

/// Result of loading the inbox.
pub type Result<T> = std::result::Result<T, InboxError>;

/// One `*.toml` file in the inbox and what came of reading it.
#[derive(Debug)]
pub struct InboxEntry {
    /// The file.
    pub path: PathBuf,
    /// The checked brief, or why the file was refused.
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
    /// the file name. A directory that does not exist is an empty inbox. The inbox is the
    /// repository's, so links are not followed: `dir` or its parent (`.stet`) being a link is an
    /// error, and a brief that is a link is an invalid entry, unread (its errors would quote
    /// whatever file of the user's it points at).
    pub fn load(dir: &Path) -> Result<Self> {
        for link in [Some(dir), dir.parent()].into_iter().flatten() {
            let is_link = std::fs::symlink_metadata(link)
                .is_ok_and(|metadata| metadata.file_type().is_symlink());
            if is_link {
                return Err(InboxError::Link {
                    link: link.to_owned(),
                });
            }
        }
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
            .map(|path| {
                let is_link = std::fs::symlink_metadata(&path)
                    .is_ok_and(|metadata| metadata.file_type().is_symlink());
                InboxEntry {
                    brief: if is_link {
                        Err(BriefError::Link { file: path.clone() })
                    } else {
                        Brief::from_file(&path)
                    },
                    path,
                }
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
    fn a_linked_brief_or_inbox_is_never_read() {
        let root = tempfile::tempdir().unwrap();
        let secret = format!("canary{}", uuid::Uuid::new_v4().simple());
        let host_file = root.path().join("host.toml");
        std::fs::write(&host_file, format!("items = \"{secret}\"\n")).unwrap();
        let inbox = root.path().join("repo/.stet/briefs");
        std::fs::create_dir_all(&inbox).unwrap();
        std::os::unix::fs::symlink(&host_file, inbox.join("leak.toml")).unwrap();
        let loaded = Inbox::load(&inbox).unwrap();
        let error = loaded.entries()[0].brief.as_ref().unwrap_err();
        assert!(matches!(error, BriefError::Link { .. }), "{error}");
        assert!(!error.to_string().contains(&secret), "{error}");

        let linked = root.path().join("linked/.stet");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(root.path(), linked.join("briefs")).unwrap();
        assert!(matches!(
            Inbox::load(&linked.join("briefs")),
            Err(InboxError::Link { .. })
        ));
        let dot_stet = root.path().join("other");
        std::fs::create_dir_all(&dot_stet).unwrap();
        std::os::unix::fs::symlink(root.path().join("repo/.stet"), dot_stet.join(".stet")).unwrap();
        assert!(matches!(
            Inbox::load(&dot_stet.join(".stet/briefs")),
            Err(InboxError::Link { .. })
        ));
    }

    #[test]
    fn a_missing_directory_is_an_empty_inbox() {
        let root = tempfile::tempdir().unwrap();
        let inbox = Inbox::load(&root.path().join("absent")).unwrap();
        assert!(inbox.entries().is_empty());
    }
}
