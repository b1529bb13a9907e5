//! The inbox is the list of briefs stet can see; each brief is read on its own, so one bad file is
//! shown as invalid instead of hiding the others.
//!
//! A repository ships its inbox, so it is bounded like any input from outside (DESIGN §5 row 23,
//! §8): before any brief is read, the number of briefs and their total size (from the directory
//! listing and each file's metadata) are checked against [`InboxLimits`], and an inbox past either
//! is refused whole, naming the count, the limit and the setting that raises it. What parsing the
//! briefs would cost is bounded too: their TOML marks, counted while reading them, before any is
//! parsed ([`MAX_INBOX_MARKS`]).

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
    #[error(
        "{}: not read: it holds {count} briefs and stet reads at most {limit} (setting `inbox.max_briefs` in your configuration raises it; a repository's stet.toml may only lower it)",
        dir.display()
    )]
    TooManyBriefs {
        dir: PathBuf,
        count: u64,
        limit: u64,
    },
    #[error(
        "{}: not read: its briefs hold {bytes} bytes together and stet reads at most {limit} (setting `inbox.max_total_bytes` in your configuration raises it; a repository's stet.toml may only lower it)",
        dir.display()
    )]
    TooLarge {
        dir: PathBuf,
        bytes: u64,
        limit: u64,
    },
    #[error(
        "{}: not parsed: its briefs hold {marks} TOML keys, values and brackets together and stet parses at most {limit} (briefs are a title, a target and some items of prose each)",
        dir.display()
    )]
    TooCostly {
        dir: PathBuf,
        marks: usize,
        limit: usize,
    },
}

/// Most TOML marks (about one per key, value or table; [`crate::toml_marks`]) the briefs of an
/// inbox may hold together: a thousand ordinary briefs hold a few tens of thousands. Built in, like
/// [`crate::brief::MAX_BRIEF_MARKS`]: past it the theater's first frame would wait on the parser.
pub const MAX_INBOX_MARKS: usize = 131_072;

/// Most briefs an inbox may hold by default (`inbox.max_briefs`).
pub const DEFAULT_MAX_BRIEFS: u64 = 1000;

/// Most bytes the briefs of an inbox may hold together by default (`inbox.max_total_bytes`): 16 MiB.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;

/// How much of an inbox stet reads: past either bound the inbox is refused before any brief is
/// read, so what listing it costs (time, memory) is bounded whatever the repository holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxLimits {
    /// Most `*.toml` files (`inbox.max_briefs`).
    pub max_briefs: u64,
    /// Most bytes of those files together, by their size on disk (`inbox.max_total_bytes`).
    pub max_total_bytes: u64,
}

impl Default for InboxLimits {
    fn default() -> Self {
        InboxLimits {
            max_briefs: DEFAULT_MAX_BRIEFS,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
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

    /// [`Inbox::load_within`] under the default [`InboxLimits`].
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_within(dir, &InboxLimits::default())
    }

    /// Reads every `*.toml` directly inside `dir` (not in subdirectories), ordered by the bytes of
    /// the file name. A directory that does not exist is an empty inbox. The inbox is the
    /// repository's, so links are not followed: `dir` or its parent (`.stet`) being a link is an
    /// error, and a brief that is a link is an invalid entry, unread (its errors would quote
    /// whatever file of the user's it points at). More files than `limits.max_briefs`, or more
    /// bytes in them together than `limits.max_total_bytes`, refuse the inbox before any is read.
    pub fn load_within(dir: &Path, limits: &InboxLimits) -> Result<Self> {
        refuse_links(dir)?;
        let read_directory_error = |error| InboxError::ReadDirectory {
            dir: dir.to_owned(),
            error,
        };
        let listing = match std::fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(error) => return Err(read_directory_error(error)),
        };
        // Past the limit only the count goes on, so a huge directory costs no memory per name.
        let mut paths = Vec::new();
        let (mut count, mut bytes) = (0u64, 0u64);
        for entry in listing {
            let entry = entry.map_err(read_directory_error)?;
            let is_toml = Path::new(&entry.file_name())
                .extension()
                .is_some_and(|extension| extension == "toml");
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !is_toml || kind.is_dir() {
                continue;
            }
            count += 1;
            if kind.is_file() {
                bytes = bytes.saturating_add(entry.metadata().map_or(0, |metadata| metadata.len()));
            }
            if count <= limits.max_briefs {
                paths.push(entry.path());
            }
        }
        if count > limits.max_briefs {
            return Err(InboxError::TooManyBriefs {
                dir: dir.to_owned(),
                count,
                limit: limits.max_briefs,
            });
        }
        if bytes > limits.max_total_bytes {
            return Err(InboxError::TooLarge {
                dir: dir.to_owned(),
                bytes,
                limit: limits.max_total_bytes,
            });
        }
        paths.sort_by(|left, right| {
            let left = left.file_name().map(OsStr::as_encoded_bytes);
            let right = right.file_name().map(OsStr::as_encoded_bytes);
            left.cmp(&right)
        });
        // Every brief read before any is parsed: past MAX_INBOX_MARKS together the inbox is refused
        // for the cost of reading it (at most max_total_bytes), never of parsing it.
        let mut marks = 0usize;
        let read: Vec<(PathBuf, ReadBrief)> = paths
            .into_iter()
            .map(|path| {
                let text = read_unlinked(&path);
                if let Ok((_, text)) = &text {
                    marks = marks.saturating_add(crate::toml_marks::count(text));
                }
                (path, text)
            })
            .collect();
        if marks > MAX_INBOX_MARKS {
            return Err(InboxError::TooCostly {
                dir: dir.to_owned(),
                marks,
                limit: MAX_INBOX_MARKS,
            });
        }
        let entries = read
            .into_iter()
            .map(|(path, text)| InboxEntry {
                brief: text.and_then(|(id, text)| Brief::parse(&id, &path, &text)),
                path,
            })
            .collect();
        Ok(Self { entries })
    }

    /// The brief `id` of the inbox `dir` (`<dir>/<id>.toml`), read as [`Inbox::load_within`] reads
    /// each: `dir` or its parent being a link is an error, and a brief that is a link is refused
    /// unread. For a brief named on the command line, which a repository could otherwise point
    /// at any file of the user's.
    pub fn load_one(dir: &Path, id: &str) -> Result<InboxEntry> {
        refuse_links(dir)?;
        let path = dir.join(format!("{id}.toml"));
        Ok(InboxEntry {
            brief: read_brief(&path),
            path,
        })
    }

    /// Every brief file, valid or not, in file-name order.
    pub fn entries(&self) -> &[InboxEntry] {
        &self.entries
    }
}

/// Refuses an inbox `dir` that is a link, or whose parent (`.stet`) is one.
fn refuse_links(dir: &Path) -> Result<()> {
    for link in [Some(dir), dir.parent()].into_iter().flatten() {
        let is_link =
            std::fs::symlink_metadata(link).is_ok_and(|metadata| metadata.file_type().is_symlink());
        if is_link {
            return Err(InboxError::Link {
                link: link.to_owned(),
            });
        }
    }
    Ok(())
}

/// A brief file's id and text, or why it was not read.
type ReadBrief = std::result::Result<(String, String), BriefError>;

/// One brief file of the inbox, checked and parsed, refused unread when it is a link.
fn read_brief(path: &Path) -> std::result::Result<Brief, BriefError> {
    read_unlinked(path).and_then(|(id, text)| Brief::parse(&id, path, &text))
}

/// The id and text of one brief file of the inbox, refused unread when it is a link (its errors
/// would quote whatever file of the user's it points at).
fn read_unlinked(path: &Path) -> ReadBrief {
    let is_link =
        std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_symlink());
    if is_link {
        Err(BriefError::Link {
            file: path.to_owned(),
        })
    } else {
        Brief::read_file(path)
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
    fn a_brief_named_alone_is_read_as_the_listing_reads_it() {
        let root = tempfile::tempdir().unwrap();
        let inbox = root.path().join("repo/.stet/briefs");
        std::fs::create_dir_all(&inbox).unwrap();
        let brief = "title = \"T\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n";
        std::fs::write(root.path().join("host.toml"), brief).unwrap();
        std::fs::write(inbox.join("own.toml"), brief).unwrap();
        std::os::unix::fs::symlink(root.path().join("host.toml"), inbox.join("leak.toml")).unwrap();
        assert!(Inbox::load_one(&inbox, "own").unwrap().brief.is_ok());
        let linked = Inbox::load_one(&inbox, "leak").unwrap().brief;
        assert!(matches!(linked, Err(BriefError::Link { .. })), "{linked:?}");

        let other = root.path().join("other/.stet");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&inbox, other.join("briefs")).unwrap();
        assert!(matches!(
            Inbox::load_one(&other.join("briefs"), "own"),
            Err(InboxError::Link { .. })
        ));
    }

    #[test]
    fn an_inbox_past_its_marks_is_refused_before_any_brief_is_parsed() {
        let root = tempfile::tempdir().unwrap();
        let inbox = root.path().join("briefs");
        std::fs::create_dir(&inbox).unwrap();
        // Each under the brief's own bound, together past the inbox's.
        let per_brief = crate::brief::MAX_BRIEF_MARKS / 3 - 10;
        let costly = format!(
            "title = \"T\"\nworkflow = \"implement\"\nitems = [{}]\n",
            "{text=\"a\"},".repeat(per_brief)
        );
        let needed = MAX_INBOX_MARKS / (per_brief * 3) + 1;
        for index in 0..needed {
            std::fs::write(inbox.join(format!("b{index:03}.toml")), &costly).unwrap();
        }
        let error = Inbox::load(&inbox).unwrap_err();
        assert!(matches!(error, InboxError::TooCostly { .. }), "{error}");
        assert!(error.to_string().contains("not parsed"), "{error}");
        std::fs::remove_file(inbox.join("b000.toml")).unwrap();
        let loaded = Inbox::load(&inbox).unwrap();
        assert_eq!(loaded.entries().len(), needed - 1);
    }

    #[test]
    fn an_inbox_past_its_limits_is_refused_before_any_brief_is_read() {
        let root = tempfile::tempdir().unwrap();
        let inbox = root.path().join("briefs");
        std::fs::create_dir(&inbox).unwrap();
        let brief = "title = \"T\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n";
        for index in 0..5 {
            std::fs::write(inbox.join(format!("b{index}.toml")), brief).unwrap();
        }
        std::fs::write(inbox.join("notes.txt"), "not a brief").unwrap();
        let size = u64::try_from(brief.len()).unwrap();
        let at_the_limits = InboxLimits {
            max_briefs: 5,
            max_total_bytes: 5 * size,
        };
        let loaded = Inbox::load_within(&inbox, &at_the_limits).unwrap();
        assert_eq!(loaded.entries().len(), 5);
        assert!(loaded.entries().iter().all(|entry| entry.brief.is_ok()));

        let fewer = InboxLimits {
            max_briefs: 4,
            ..at_the_limits
        };
        let error = Inbox::load_within(&inbox, &fewer).unwrap_err();
        assert!(
            matches!(
                error,
                InboxError::TooManyBriefs {
                    count: 5,
                    limit: 4,
                    ..
                }
            ),
            "{error}"
        );
        for said in ["holds 5 briefs", "at most 4", "`inbox.max_briefs`"] {
            assert!(error.to_string().contains(said), "{error}");
        }

        let smaller = InboxLimits {
            max_total_bytes: 5 * size - 1,
            ..at_the_limits
        };
        let error = Inbox::load_within(&inbox, &smaller).unwrap_err();
        assert!(matches!(error, InboxError::TooLarge { .. }), "{error}");
        for said in [
            format!("{} bytes", 5 * size),
            format!("at most {}", 5 * size - 1),
            "`inbox.max_total_bytes`".to_owned(),
        ] {
            assert!(error.to_string().contains(&said), "{error}");
        }
    }

    #[test]
    fn a_missing_directory_is_an_empty_inbox() {
        let root = tempfile::tempdir().unwrap();
        let inbox = Inbox::load(&root.path().join("absent")).unwrap();
        assert!(inbox.entries().is_empty());
    }
}
