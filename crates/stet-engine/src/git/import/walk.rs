//! The walk of the agent's workspace for the import: each directory opened relative to its
//! parent's descriptor without following links and listed against the import's limits, what git
//! refuses or the user's ignore rules leave out set aside with a warning, and each file, link and
//! directory turned into the blob or tree it becomes (the writing of those objects is
//! `objects.rs`'s).

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, OsStr};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{FileMode, ObjectType, Odb, Oid, Repository, Tree};
use rustix::fs::FileType;
use rustix::io::Errno;

use super::names::{folds_to, names_git_directory};
use super::{
    IGNORED_EXAMPLES, ImportError, ImportRequest, ImportWarning, MAX_DEPTH, MAX_PATH_WARNINGS,
    Result, lossy,
};
use crate::untrusted_tree::{self, Entry, FileError, Listing};

/// The parent's entry at the path being walked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Previous {
    pub(super) id: Oid,
    mode: i32,
}

impl Previous {
    fn is(self, mode: FileMode) -> bool {
        self.mode == i32::from(mode)
    }
}

/// What a walked entry is, as far as the walk is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Directory,
    File,
    Link,
    Special(&'static str),
}

impl Kind {
    fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::Directory => Kind::Directory,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Link,
            FileType::Fifo => Kind::Special("fifo"),
            FileType::Socket => Kind::Special("socket"),
            FileType::CharacterDevice => Kind::Special("character device"),
            FileType::BlockDevice => Kind::Special("block device"),
            FileType::Unknown => Kind::Special("file of unknown type"),
        }
    }
}

/// One import's walk: the handles it reads and writes through, and what it has counted so far.
pub(super) struct Walk<'a, 'r> {
    pub(super) repository: &'r Repository,
    /// The repository's store under the in-memory one: what the walk writes and reads.
    pub(super) odb: Odb<'r>,
    /// The repository's store alone, as it was before the import.
    pub(super) store: Odb<'a>,
    /// The objects the import wrote that `store` lacks, in the order they were written.
    pub(super) created: Vec<(Oid, ObjectType)>,
    pub(super) seen: HashSet<Oid>,
    pub(super) interrupted: &'a dyn Fn() -> bool,
    pub(super) request: &'a ImportRequest<'a>,
    /// The user's checkout, whose ignore rules decide what is new; `None` for a bare repository,
    /// which has none.
    pub(super) ignores: Option<CheckoutIgnores>,
    pub(super) entries: u64,
    /// The lengths of the paths of the new entries listed so far, summed.
    pub(super) path_bytes: u64,
    pub(super) total_bytes: u64,
    pub(super) warnings: Vec<ImportWarning>,
    /// Warnings about single paths past [`MAX_PATH_WARNINGS`].
    pub(super) warnings_not_listed: usize,
    pub(super) ignored: usize,
    pub(super) ignored_examples: Vec<String>,
}

impl Walk<'_, '_> {
    /// Keeps a warning about one path, or counts it once [`MAX_PATH_WARNINGS`] are kept.
    fn warn(&mut self, warning: ImportWarning) {
        if self.warnings.len() < MAX_PATH_WARNINGS {
            self.warnings.push(warning);
        } else {
            self.warnings_not_listed += 1;
        }
    }

    /// Walks one directory (already opened without following links) and writes its tree; `None` when
    /// nothing in it is imported, since git trees hold no empty directories.
    pub(super) fn directory(
        &mut self,
        directory: OwnedFd,
        path: &[u8],
        previous: Option<&Tree<'_>>,
        depth: usize,
    ) -> Result<Option<Oid>> {
        let mut listing =
            Listing::new(directory).map_err(|errno| self.io(path, "listing", errno))?;
        let mut names = Vec::new();
        for entry in listing.by_ref() {
            let entry = entry.map_err(|errno| self.io(path, "listing", errno))?;
            // Counted as listed, so a directory of millions of entries stops the walk early; a name
            // the parent holds here is the base's, bounded when it was materialized.
            let name = entry.name.to_bytes();
            let new = previous.is_none_or(|tree| tree.get_name_bytes(name).is_none());
            self.count_entry(new, path.len() + usize::from(!path.is_empty()) + name.len())?;
            names.push(entry);
        }
        names.sort_unstable_by(|left, right| left.name.cmp(&right.name));
        let dirfd = listing
            .fd()
            .map_err(|errno| self.io(path, "listing", errno))?;

        let mut builder = self
            .repository
            .treebuilder(None)
            .map_err(self.git("starting a tree"))?;
        for Entry { name, file_type } in names {
            let child = join(path, name.to_bytes());
            if let Some((id, mode)) =
                self.entry(dirfd, &name, file_type, &child, previous, depth)?
                && let Err(error) = builder.insert(name.to_bytes(), id, i32::from(mode))
            {
                self.warn(ImportWarning::InvalidNameSkipped {
                    path: lossy(&child),
                    detail: error.message().to_owned(),
                });
            }
        }
        if builder.is_empty() {
            return Ok(None);
        }
        let tree = builder.write().map_err(self.git("writing a tree"))?;
        self.created(tree, ObjectType::Tree);
        Ok(Some(tree))
    }

    /// What one listed entry contributes to its directory's tree: `None` when it is left out.
    fn entry(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        file_type: FileType,
        path: &[u8],
        previous: Option<&Tree<'_>>,
        depth: usize,
    ) -> Result<Option<(Oid, FileMode)>> {
        let bytes = name.to_bytes();
        if depth == 0 && bytes == b".git" {
            return Ok(None);
        }
        if names_git_directory(bytes) {
            self.warn(ImportWarning::GitDirectorySkipped { path: lossy(path) });
            return Ok(None);
        }
        let previous = previous.and_then(|tree| {
            tree.get_name_bytes(bytes).map(|entry| Previous {
                id: entry.id(),
                mode: entry.filemode(),
            })
        });
        let kind = untrusted_tree::entry_type(dirfd, name, file_type)
            .map(Kind::of)
            .map_err(|errno| self.opening_error(path, errno))?;
        if let Some(submodule) = previous.filter(|entry| entry.is(FileMode::Commit)) {
            if !self.is_empty_directory(dirfd, name, path, kind)? {
                self.warn(ImportWarning::SubmoduleKept { path: lossy(path) });
            }
            return Ok(Some((submodule.id, FileMode::Commit)));
        }
        if previous.is_none() && self.is_ignored(path, kind)? {
            return Ok(None);
        }
        match kind {
            Kind::Directory => {
                if depth + 1 >= MAX_DEPTH {
                    return Err(ImportError::TooDeep {
                        path: lossy(path),
                        limit: MAX_DEPTH,
                    });
                }
                let subtree = previous
                    .filter(|entry| entry.is(FileMode::Tree))
                    .map(|entry| self.repository.find_tree(entry.id))
                    .transpose()
                    .map_err(self.git("reading a tree of the parent commit"))?;
                let opened = untrusted_tree::open_directory(dirfd, name)
                    .map_err(|errno| self.opening_error(path, errno))?;
                Ok(self
                    .directory(opened, path, subtree.as_ref(), depth + 1)?
                    .map(|tree| (tree, FileMode::Tree)))
            }
            Kind::File => self.file(dirfd, name, path, previous).map(Some),
            Kind::Link if folds_to(bytes, b".gitmodules") => {
                self.warn(ImportWarning::GitmodulesLinkSkipped { path: lossy(path) });
                Ok(None)
            }
            Kind::Link => self.link(dirfd, name, path, previous).map(Some),
            Kind::Special(kind) => {
                self.warn(ImportWarning::SpecialFileSkipped {
                    path: lossy(path),
                    kind,
                });
                Ok(None)
            }
        }
    }

    /// Reads one regular file through a descriptor opened without following links and checked to be
    /// a regular file, and returns its blob, written only when the object store lacks it.
    fn file(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        path: &[u8],
        previous: Option<Previous>,
    ) -> Result<(Oid, FileMode)> {
        let limit = self.request.limits.max_file_bytes;
        // The parent's blob here, and its size: a file of that size may be the base's, unchanged.
        let carried = previous
            .filter(|entry| entry.is(FileMode::Blob) || entry.is(FileMode::BlobExecutable))
            .and_then(|entry| {
                let (size, _) = self.store.read_header(entry.id).ok()?;
                Some((entry.id, size as u64))
            });
        let refused = |error| match error {
            FileError::Open(errno) => self.opening_error(path, errno),
            FileError::Stat(errno) => self.io(path, "reading", errno),
            FileError::NotRegular => ImportError::WorkspaceChanged { path: lossy(path) },
            FileError::TooLarge { size, limit } => ImportError::FileTooLarge {
                path: lossy(path),
                size,
                limit,
            },
            FileError::Read(source) => ImportError::Io {
                path: self.request.workspace.join(OsStr::from_bytes(path)),
                operation: "reading",
                source,
            },
        };
        let opened_limit = carried.map_or(limit, |(_, size)| size.max(limit));
        let opened = untrusted_tree::open_file(dirfd, name, opened_limit).map_err(refused)?;
        let executable = opened.owner_may_execute();
        let mode = if executable {
            FileMode::BlobExecutable
        } else {
            FileMode::Blob
        };
        if let Some((id, size)) = carried
            && opened.size() == size
            && self.hashed(&opened, path)? == id
        {
            return Ok((id, mode));
        }
        let opened = opened.within(limit).map_err(refused)?;
        if self.total_bytes.saturating_add(opened.size()) > self.request.limits.max_total_bytes {
            return Err(ImportError::TotalTooLarge {
                limit: self.request.limits.max_total_bytes,
            });
        }
        let content = opened.read().map_err(refused)?;
        let read = u64::try_from(content.len()).unwrap_or(u64::MAX);
        self.add_bytes(read)?;
        Ok((self.blob(&content, previous)?, mode))
    }

    /// A symbolic link becomes a blob holding its target; the target itself is never looked at.
    fn link(
        &mut self,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        path: &[u8],
        previous: Option<Previous>,
    ) -> Result<(Oid, FileMode)> {
        let target = rustix::fs::readlinkat(dirfd, name, Vec::new())
            .map_err(|errno| self.opening_error(path, errno))?;
        let target = target.as_bytes();
        let limit = self.request.limits.max_file_bytes;
        let size = u64::try_from(target.len()).unwrap_or(u64::MAX);
        if size > limit {
            return Err(ImportError::FileTooLarge {
                path: lossy(path),
                size,
                limit,
            });
        }
        self.add_bytes(size)?;
        Ok((self.blob(target, previous)?, FileMode::Link))
    }

    fn is_empty_directory(
        &self,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        path: &[u8],
        kind: Kind,
    ) -> Result<bool> {
        if kind != Kind::Directory {
            return Ok(false);
        }
        let opened = untrusted_tree::open_directory(dirfd, name)
            .map_err(|errno| self.opening_error(path, errno))?;
        let mut listing = Listing::new(opened).map_err(|errno| self.io(path, "listing", errno))?;
        match listing.next() {
            None => Ok(true),
            Some(Ok(_)) => Ok(false),
            Some(Err(errno)) => Err(self.io(path, "listing", errno)),
        }
    }

    /// Whether a path the parent commit does not have is ignored by the user's repository.
    fn is_ignored(&mut self, path: &[u8], kind: Kind) -> Result<bool> {
        let Some(ignores) = self.ignores.as_mut() else {
            return Ok(false);
        };
        if !ignores.readable_for(path, &mut self.warnings) {
            return Ok(false);
        }
        let mut query = path.to_vec();
        if kind == Kind::Directory {
            query.push(b'/');
        }
        let ignored = self
            .repository
            .is_path_ignored(Path::new(OsStr::from_bytes(&query)))
            .map_err(self.git("reading the ignore rules"))?;
        if ignored {
            self.ignored += 1;
            if self.ignored_examples.len() < IGNORED_EXAMPLES {
                self.ignored_examples.push(lossy(&query));
            }
        }
        Ok(ignored)
    }

    /// Counts one listed entry whose path is `path_length` bytes long, against the limits when it
    /// is `new` (a name the parent's tree lacks at that place).
    fn count_entry(&mut self, new: bool, path_length: usize) -> Result<()> {
        if (self.interrupted)() {
            return Err(ImportError::Interrupted);
        }
        if !new {
            return Ok(());
        }
        self.entries += 1;
        if self.entries > self.request.limits.max_files {
            return Err(ImportError::TooManyFiles {
                limit: self.request.limits.max_files,
            });
        }
        let length = u64::try_from(path_length).unwrap_or(u64::MAX);
        self.path_bytes = self.path_bytes.saturating_add(length);
        if self.path_bytes > self.request.limits.max_path_bytes {
            return Err(ImportError::PathsTooLong {
                figure: self.path_bytes,
                limit: self.request.limits.max_path_bytes,
            });
        }
        Ok(())
    }

    fn add_bytes(&mut self, size: u64) -> Result<()> {
        self.total_bytes = self.total_bytes.saturating_add(size);
        if self.total_bytes > self.request.limits.max_total_bytes {
            return Err(ImportError::TotalTooLarge {
                limit: self.request.limits.max_total_bytes,
            });
        }
        Ok(())
    }

    /// An entry that vanished or changed type between being listed and being opened.
    fn opening_error(&self, path: &[u8], errno: Errno) -> ImportError {
        match errno {
            Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::NXIO | Errno::INVAL => {
                ImportError::WorkspaceChanged { path: lossy(path) }
            }
            errno => self.io(path, "opening", errno),
        }
    }

    fn io(&self, path: &[u8], operation: &'static str, errno: Errno) -> ImportError {
        ImportError::Io {
            path: self.request.workspace.join(OsStr::from_bytes(path)),
            operation,
            source: errno.into(),
        }
    }

    pub(super) fn git(
        &self,
        operation: &'static str,
    ) -> impl FnOnce(git2::Error) -> ImportError + '_ {
        move |error| ImportError::Git {
            repository: self.request.repository.to_owned(),
            operation,
            detail: error.message().to_owned(),
        }
    }
}

pub(super) fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(parent.len() + 1 + name.len());
    if !parent.is_empty() {
        path.extend_from_slice(parent);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// The ignore rules of the user's checkout, as far as libgit2 may read them: it follows links, and a
/// hostile repository can make a `.gitignore`, or a directory on its way, a link to anything on the
/// host (or to a fifo that would stall the import), so such a file is not read at all.
pub(super) struct CheckoutIgnores {
    checkout: PathBuf,
    /// Each directory of the checkout asked about, and whether its ignore rules may be read.
    readable: HashMap<Vec<u8>, bool>,
}

impl CheckoutIgnores {
    pub(super) fn new(checkout: &Path) -> CheckoutIgnores {
        CheckoutIgnores {
            checkout: checkout.to_owned(),
            readable: HashMap::new(),
        }
    }

    /// Whether libgit2 may read every ignore file that decides about `path`: each directory of the
    /// user's checkout above it is a real directory, and its `.gitignore` absent or a regular file.
    fn readable_for(&mut self, path: &[u8], warnings: &mut Vec<ImportWarning>) -> bool {
        // The checkout's root, then each directory above `path`.
        for end in std::iter::once(0).chain(memchr::memchr_iter(b'/', path)) {
            let directory = &path[..end];
            let readable = match self.readable.get(directory) {
                Some(readable) => *readable,
                None => {
                    let readable = self.checked(directory, warnings);
                    self.readable.insert(directory.to_vec(), readable);
                    readable
                }
            };
            if !readable {
                return false;
            }
        }
        true
    }

    /// [`CheckoutIgnores::readable_for`] of one directory, looked at without following links; a
    /// warning names the first file or directory that is not read.
    fn checked(&self, directory: &[u8], warnings: &mut Vec<ImportWarning>) -> bool {
        let place = self.checkout.join(OsStr::from_bytes(directory));
        if !directory.is_empty() && !absent_or(&place, std::fs::Metadata::is_dir) {
            warnings.push(ImportWarning::IgnoreRulesUnread {
                path: lossy(directory),
            });
            return false;
        }
        if !absent_or(&place.join(".gitignore"), std::fs::Metadata::is_file) {
            let mut relative = directory.to_vec();
            if !relative.is_empty() {
                relative.push(b'/');
            }
            relative.extend_from_slice(b".gitignore");
            warnings.push(ImportWarning::IgnoreRulesUnread {
                path: lossy(&relative),
            });
            return false;
        }
        true
    }
}

/// Whether `path` is absent, or there and `wanted` by its own metadata (a link's, never its
/// target's).
fn absent_or(path: &Path, wanted: fn(&std::fs::Metadata) -> bool) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => wanted(&metadata),
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
    }
}
