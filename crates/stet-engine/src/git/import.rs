//! The trusted import of an agent's result (DESIGN §5 row 10): whatever the agent left in its workspace
//! becomes a commit in the user's repository object store, made by stet through git2 on the host.
//!
//! The workspace is untrusted output. It is never opened as a repository and git never runs on it:
//! its `.git` (whatever the agent turned it into), hooks, configuration, `.gitattributes` filters and
//! `fsmonitor` commands are never read as such. The files are walked directly, each directory opened
//! relative to its parent's descriptor without following symbolic links, so a link or a swapped
//! directory cannot lead the walk (or a read) outside the workspace. Links are stored as links,
//! special files are skipped unopened, and every path component that git would read as `.git` is left
//! out. The only configuration consulted is the user's own repository's ignore rules.
//!
//! The import is all or nothing. Its blobs, trees and commit are written to an in-memory object
//! store layered over the user's (a libgit2 mempack backend on a repository handle of the import's
//! own), and reach the user's object store only once everything succeeded, as one pack of exactly the
//! objects it lacked. An import refused for a limit, an unreadable entry, an interruption or any other
//! error leaves the object store as it was: no object, no temporary file. The price is memory: the
//! new objects are held until the end, at most `max_total_bytes` of content plus their trees.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, OsStr};
use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{
    Delta, ErrorCode, FileMode, ObjectType, Odb, OdbLookupFlags, Oid, Repository,
    RepositoryOpenFlags, Signature, Tree,
};
use rustix::fs::FileType;
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use super::pack::PackWriter;
use super::text_budget::{self, BoundedText, MAX_PATCH_BYTES};
use crate::untrusted_tree::{self, Entry, FileError, Listing};
use stet_protocol::event::ChangeKind;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizedText;

/// Deepest directory nesting the walk follows; each level holds one open descriptor.
pub const MAX_DEPTH: usize = 256;

/// How many ignored paths the summarized warning names.
const IGNORED_EXAMPLES: usize = 5;

/// How many warnings about single paths the import keeps; past it they are only counted (a
/// result of a million fifos is one warning more, not a million).
pub const MAX_PATH_WARNINGS: usize = 100;

/// The in-memory store's priority over the repository's own backends (libgit2 gives the loose
/// store 1 and packs 2): every write of the import lands there, and every read looks there first.
const IN_MEMORY_PRIORITY: i32 = 1000;

/// Bounds on what an import reads from the workspace. They apply to the agent's change: an entry
/// whose name the parent's tree holds at the same place is not counted, and a file whose content is
/// the parent's blob at its path (hashed as a stream, never read whole) is carried over without
/// counting its bytes, whatever its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Directory entries listed, of any kind (files, links, directories, skipped special files); the
    /// workspace's own `.git` counts as one, and a skipped ignored directory as one.
    pub max_files: u64,
    /// Largest single file (or link target), in bytes.
    pub max_file_bytes: u64,
    /// Sum of the sizes of every file and link target, in bytes.
    pub max_total_bytes: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_files: 200_000,
            max_file_bytes: 100 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// Author and committer of the imported commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name git records for author and committer.
    pub name: String,
    /// The email address git records for author and committer.
    pub email: String,
}

/// One import: the user's repository, the agent's workspace, and the commit the result builds on.
#[derive(Debug, Clone, Copy)]
pub struct ImportRequest<'a> {
    /// The user's repository, whose object store receives the commit.
    pub repository: &'a Path,
    /// The agent's workspace on the host: the tree to import, read without following links.
    pub workspace: &'a Path,
    /// The commit the imported tree is compared with and becomes the child of.
    pub parent: &'a CommitSha,
    /// Who the commit names as author and committer.
    pub identity: &'a Identity,
    /// The commit message, already sanitized.
    pub message: &'a SanitizedText,
    /// Bounds on how many entries and bytes the import reads.
    pub limits: ImportLimits,
}

/// Something in the workspace that was not imported, and why. Paths are relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportWarning {
    /// A fifo, socket or device: never opened, never imported.
    SpecialFileSkipped {
        /// Its path.
        path: String,
        /// What it is (`fifo`, `socket`, `character device`, `block device`).
        kind: &'static str,
    },
    /// A path component git would read as `.git` (any case, or a spelling that names `.git` on NTFS
    /// or HFS+): git trees must not carry one.
    GitDirectorySkipped {
        /// Its path.
        path: String,
    },
    /// A symbolic link named `.gitmodules`, which git refuses in a tree.
    GitmodulesLinkSkipped {
        /// Its path.
        path: String,
    },
    /// Paths that are new and ignored by the repository's ignore rules.
    IgnoredPathsSkipped {
        /// How many paths were skipped.
        count: usize,
        /// The first few of them.
        examples: Vec<String>,
    },
    /// The path is a submodule in the parent commit; it stays as it was and what the agent put there
    /// is not imported.
    SubmoduleKept {
        /// Its path.
        path: String,
    },
    /// An ignore file of the user's checkout (or a directory on its way) that is a symbolic link or
    /// not a regular file: libgit2 would read through it, so it is not read, and the new paths under
    /// its directory are imported without checking them against ignore rules.
    IgnoreRulesUnread {
        /// The `.gitignore` (or the directory) in the checkout, relative to its root.
        path: String,
    },
    /// A name git refuses in a tree.
    InvalidNameSkipped {
        /// Its path.
        path: String,
        /// What git objects to.
        detail: String,
    },
    /// Warnings about single paths past [`MAX_PATH_WARNINGS`], counted and not listed.
    PathWarningsNotListed {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for ImportWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportWarning::SpecialFileSkipped { path, kind } => {
                write!(f, "{path:?} is a {kind}; special files are not imported")
            }
            ImportWarning::GitDirectorySkipped { path } => write!(
                f,
                "{path:?} is named like a .git directory; it was left out of the result"
            ),
            ImportWarning::GitmodulesLinkSkipped { path } => write!(
                f,
                "{path:?} is a symbolic link named .gitmodules, which git refuses; it was left out"
            ),
            ImportWarning::IgnoredPathsSkipped { count, examples } => {
                write!(
                    f,
                    "{count} new path(s) ignored by the repository's ignore rules were not imported: "
                )?;
                for (index, example) in examples.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{example:?}")?;
                }
                if *count > examples.len() {
                    f.write_str(", …")?;
                }
                Ok(())
            }
            ImportWarning::IgnoreRulesUnread { path } => write!(
                f,
                "{path:?} in the repository is a symbolic link or not a regular file; stet does not read ignore rules through it, so the new paths under its directory were imported without checking them against ignore rules"
            ),
            ImportWarning::SubmoduleKept { path } => write!(
                f,
                "{path:?} is a submodule in the base commit; it was kept as it was and what the agent put there was not imported"
            ),
            ImportWarning::InvalidNameSkipped { path, detail } => {
                write!(f, "{path:?} cannot be stored in a git tree ({detail})")
            }
            ImportWarning::PathWarningsNotListed { count } => write!(
                f,
                "{count} more path(s) were left out for the reasons above; stet lists the first {MAX_PATH_WARNINGS}"
            ),
        }
    }
}

/// One changed path. A name that is not UTF-8 is shown with replacement characters here; the commit
/// keeps its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    /// The path, relative to the repository root.
    pub path: String,
    /// Added, modified, deleted, ...
    pub change: ChangeKind,
    /// Lines added; 0 for a binary file.
    pub insertions: usize,
    /// Lines removed; 0 for a binary file.
    pub deletions: usize,
    /// Git sees the content as binary, so no line counts.
    pub binary: bool,
    /// The patch does not show all of it (past a bound of [`text_budget`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The imported commit against its parent, computed from the two trees in the user's repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultDiff {
    /// Every changed path, in tree order.
    pub files: Vec<ChangedFile>,
    /// Lines added over all files.
    pub insertions: usize,
    /// Lines removed over all files.
    pub deletions: usize,
    /// Unified diff text (lossy where the content is not UTF-8), at most [`MAX_PATCH_BYTES`] and a
    /// note saying what was cut.
    pub patch: String,
}

/// What an import produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// A new commit in the user's object store (no ref points at it yet).
    Committed {
        /// The new commit.
        commit: CommitSha,
        /// It against the parent.
        diff: ResultDiff,
        /// What was left out.
        warnings: Vec<ImportWarning>,
    },
    /// The tree equals the parent's: nothing to push (a clear outcome, never an empty PR).
    Unchanged {
        /// What was left out.
        warnings: Vec<ImportWarning>,
    },
}

/// Why an import failed. Paths named by a `String` are relative to the workspace.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ImportError {
    #[error("the workspace {} is gone; nothing can be imported", path.display())]
    WorkspaceMissing { path: PathBuf },

    #[error("the workspace {} is not a directory", path.display())]
    WorkspaceNotDirectory { path: PathBuf },

    #[error(
        "{path:?} in the workspace changed while it was being imported; import again once nothing writes there"
    )]
    WorkspaceChanged { path: String },

    #[error("the workspace holds more than {limit} entries (files, links and directories)")]
    TooManyFiles { limit: u64 },

    #[error(
        "{path:?} in the workspace is {size} bytes; files larger than {limit} bytes are not imported"
    )]
    FileTooLarge { path: String, size: u64, limit: u64 },

    #[error("the workspace's files add up to more than {limit} bytes")]
    TotalTooLarge { limit: u64 },

    #[error("{path:?} in the workspace is nested deeper than {limit} directories")]
    TooDeep { path: String, limit: usize },

    #[error(
        "the parent commit {commit} is not in the object store of {}",
        repository.display()
    )]
    ParentMissing {
        commit: CommitSha,
        repository: PathBuf,
    },

    #[error("{operation} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("the import was interrupted; nothing was written to the repository")]
    Interrupted,

    #[error("{operation} {}: {source}", path.display())]
    Store {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{operation} in {}: {detail}", repository.display())]
    Git {
        repository: PathBuf,
        operation: &'static str,
        detail: String,
    },
}

/// Result of an import.
pub type Result<T> = std::result::Result<T, ImportError>;

/// Turns whatever the agent left in `request.workspace` into a commit on top of `request.parent` in the
/// user's repository, without running git on the workspace or opening it as a repository.
pub fn import(request: &ImportRequest<'_>) -> Result<Imported> {
    import_until(request, &|| false)
}

/// [`import`], stopping with [`ImportError::Interrupted`] as soon as `interrupted` says so (it is
/// asked before each workspace entry, at each line of the diff, and once more before anything is
/// written to the repository).
pub fn import_until(
    request: &ImportRequest<'_>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Imported> {
    let git = |operation: &'static str| {
        move |error: git2::Error| ImportError::Git {
            repository: request.repository.to_owned(),
            operation,
            detail: error.message().to_owned(),
        }
    };
    let open = || {
        Repository::open_ext(
            request.repository,
            RepositoryOpenFlags::NO_SEARCH,
            std::iter::empty::<&OsStr>(),
        )
        .map_err(git("opening the repository"))
    };
    // What the repository holds, read without the import's own writes.
    let stored = open()?;
    let store = stored.odb().map_err(git("opening the object store"))?;
    // The handle the import writes through: the same store under an in-memory one.
    let repository = open()?;
    let odb = repository.odb().map_err(git("opening the object store"))?;
    odb.add_new_mempack_backend(IN_MEMORY_PRIORITY)
        .map_err(git("adding an in-memory object store"))?;
    let parent = find_parent(&repository, request)?;
    let parent_tree = parent.tree().map_err(git("reading the parent tree"))?;

    let root = open_workspace(request.workspace)?;
    let mut walk = Walk {
        repository: &repository,
        odb,
        store,
        created: Vec::new(),
        seen: HashSet::new(),
        interrupted,
        request,
        ignores: repository.workdir().map(CheckoutIgnores::new),
        entries: 0,
        total_bytes: 0,
        warnings: Vec::new(),
        warnings_not_listed: 0,
        ignored: 0,
        ignored_examples: Vec::new(),
    };
    let tree = match walk.directory(root, b"", Some(&parent_tree), 0)? {
        Some(tree) => tree,
        None => {
            let empty = repository
                .treebuilder(None)
                .and_then(|empty| empty.write())
                .map_err(git("writing the empty tree"))?;
            walk.created(empty, ObjectType::Tree);
            empty
        }
    };
    let mut warnings = std::mem::take(&mut walk.warnings);
    if walk.warnings_not_listed > 0 {
        warnings.push(ImportWarning::PathWarningsNotListed {
            count: walk.warnings_not_listed,
        });
    }
    if walk.ignored > 0 {
        warnings.push(ImportWarning::IgnoredPathsSkipped {
            count: walk.ignored,
            examples: std::mem::take(&mut walk.ignored_examples),
        });
    }
    if tree == parent_tree.id() {
        return Ok(Imported::Unchanged { warnings });
    }

    let tree = repository
        .find_tree(tree)
        .map_err(git("reading the imported tree"))?;
    let signature = Signature::now(&request.identity.name, &request.identity.email)
        .map_err(git("making the commit signature"))?;
    let commit = repository
        .commit(
            None,
            &signature,
            &signature,
            request.message.as_str(),
            &tree,
            &[&parent],
        )
        .map_err(git("writing the commit"))?;
    walk.created(commit, ObjectType::Commit);
    let diff = result_diff(&repository, &parent_tree, &tree, interrupted);
    if interrupted() {
        return Err(ImportError::Interrupted);
    }
    let diff = diff.map_err(git("computing the diff"))?;
    let commit = CommitSha::parse(&commit.to_string()).map_err(|error| ImportError::Git {
        repository: request.repository.to_owned(),
        operation: "reading the new commit's id",
        detail: error.to_string(),
    })?;
    if interrupted() {
        return Err(ImportError::Interrupted);
    }
    walk.store_created()?;
    Ok(Imported::Committed {
        commit,
        diff,
        warnings,
    })
}

fn find_parent<'r>(
    repository: &'r Repository,
    request: &ImportRequest<'_>,
) -> Result<git2::Commit<'r>> {
    let missing = || ImportError::ParentMissing {
        commit: request.parent.clone(),
        repository: request.repository.to_owned(),
    };
    let oid = Oid::from_str(request.parent.as_str()).map_err(|_| missing())?;
    match repository.find_commit(oid) {
        Ok(commit) => Ok(commit),
        Err(error) if error.code() == ErrorCode::NotFound => Err(missing()),
        Err(error) => Err(ImportError::Git {
            repository: request.repository.to_owned(),
            operation: "reading the parent commit",
            detail: error.message().to_owned(),
        }),
    }
}

fn open_workspace(workspace: &Path) -> Result<OwnedFd> {
    untrusted_tree::open_root(workspace).map_err(|errno| match errno {
        Errno::NOENT => ImportError::WorkspaceMissing {
            path: workspace.to_owned(),
        },
        Errno::NOTDIR | Errno::LOOP => ImportError::WorkspaceNotDirectory {
            path: workspace.to_owned(),
        },
        errno => ImportError::Io {
            path: workspace.to_owned(),
            operation: "opening the workspace",
            source: errno.into(),
        },
    })
}

/// The parent's entry at the path being walked.
#[derive(Debug, Clone, Copy)]
struct Previous {
    id: Oid,
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

struct Walk<'a, 'r> {
    repository: &'r Repository,
    /// The repository's store under the in-memory one: what the walk writes and reads.
    odb: Odb<'r>,
    /// The repository's store alone, as it was before the import.
    store: Odb<'a>,
    /// The objects the import wrote that `store` lacks, in the order they were written.
    created: Vec<(Oid, ObjectType)>,
    seen: HashSet<Oid>,
    interrupted: &'a dyn Fn() -> bool,
    request: &'a ImportRequest<'a>,
    /// The user's checkout, whose ignore rules decide what is new; `None` for a bare repository,
    /// which has none.
    ignores: Option<CheckoutIgnores>,
    entries: u64,
    total_bytes: u64,
    warnings: Vec<ImportWarning>,
    /// Warnings about single paths past [`MAX_PATH_WARNINGS`].
    warnings_not_listed: usize,
    ignored: usize,
    ignored_examples: Vec<String>,
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
    fn directory(
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
            let new =
                previous.is_none_or(|tree| tree.get_name_bytes(entry.name.to_bytes()).is_none());
            self.count_entry(new)?;
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

    /// Notes an object the import wrote, if the repository's own store lacks it.
    fn created(&mut self, id: Oid, kind: ObjectType) {
        if !self.seen.contains(&id) && !self.store.exists_ext(id, OdbLookupFlags::NO_REFRESH) {
            self.seen.insert(id);
            self.created.push((id, kind));
        }
    }

    /// Writes the objects the import created into the repository's store, as one pack.
    fn store_created(&self) -> Result<()> {
        if self.created.is_empty() {
            return Ok(());
        }
        let directory = self.repository.commondir().join("objects").join("pack");
        let store_error = |operation: &'static str| {
            let path = directory.clone();
            move |source| ImportError::Store {
                path,
                operation,
                source,
            }
        };
        let mut pack = PackWriter::create(&directory, self.created.len())
            .map_err(store_error("writing the result's objects into"))?;
        for (id, kind) in &self.created {
            let object = self
                .odb
                .read(*id)
                .map_err(self.git("reading a new object back"))?;
            pack.add(*id, *kind, object.data())
                .map_err(store_error("writing the result's objects into"))?;
        }
        pack.finish()
            .map_err(store_error("writing the result's objects into"))
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

    /// The blob id of an opened file, hashed by libgit2 as it reads (never held whole), through the
    /// descriptor that was opened without following links.
    fn hashed(&self, opened: &untrusted_tree::RegularFile, path: &[u8]) -> Result<Oid> {
        let through = PathBuf::from(format!("/proc/self/fd/{}", opened.raw_fd()));
        Oid::hash_file(ObjectType::Blob, &through).map_err(|error| ImportError::Io {
            path: self.request.workspace.join(OsStr::from_bytes(path)),
            operation: "hashing",
            source: std::io::Error::other(error.message().to_owned()),
        })
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

    /// Hashes first and writes only content the repository does not hold yet (checking the parent's
    /// entry at this path first, then the whole store).
    fn blob(&mut self, content: &[u8], previous: Option<Previous>) -> Result<Oid> {
        let id = Oid::hash_object(ObjectType::Blob, content).map_err(self.git("hashing a file"))?;
        if previous.is_some_and(|entry| entry.id == id)
            || self.seen.contains(&id)
            || self.store.exists_ext(id, OdbLookupFlags::NO_REFRESH)
        {
            return Ok(id);
        }
        let written = self
            .odb
            .write(ObjectType::Blob, content)
            .map_err(self.git("writing a blob"))?;
        self.created(written, ObjectType::Blob);
        Ok(written)
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

    fn count_entry(&mut self, new: bool) -> Result<()> {
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

    fn git(&self, operation: &'static str) -> impl FnOnce(git2::Error) -> ImportError + '_ {
        move |error| ImportError::Git {
            repository: self.request.repository.to_owned(),
            operation,
            detail: error.message().to_owned(),
        }
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
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
struct CheckoutIgnores {
    checkout: PathBuf,
    /// Each directory of the checkout asked about, and whether its ignore rules may be read.
    readable: HashMap<Vec<u8>, bool>,
}

impl CheckoutIgnores {
    fn new(checkout: &Path) -> CheckoutIgnores {
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

fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// Whether git would read this path component as `.git`: in any case; with the characters HFS+
/// ignores; with the trailing dots and spaces, `\`, or `:stream` suffix NTFS drops; or as NTFS's short
/// name `git~1`.
pub(crate) fn names_git_directory(name: &[u8]) -> bool {
    folds_to(name, b".git") || folds_to(name, b"git~1")
}

/// Compares a path component with a lowercase ASCII `needle` the way the case-insensitive file systems
/// git protects against would: ASCII case folded, HFS+'s ignorable code points dropped, and NTFS's
/// trailing dots and spaces, `:` stream suffix or `\` separator after the name cut off.
fn folds_to(name: &[u8], needle: &[u8]) -> bool {
    match std::str::from_utf8(name) {
        // Any other non-ASCII character becomes a byte no needle holds.
        Ok(text) => folded_matches(
            text.chars()
                .filter(|character| !is_hfs_ignorable(*character))
                .map(|character| u8::try_from(character.to_ascii_lowercase()).unwrap_or(0xff)),
            needle,
        ),
        Err(_) => folded_matches(name.iter().map(u8::to_ascii_lowercase), needle),
    }
}

fn folded_matches(mut folded: impl Iterator<Item = u8>, needle: &[u8]) -> bool {
    if !needle
        .iter()
        .all(|expected| folded.next() == Some(*expected))
    {
        return false;
    }
    match folded.next() {
        None | Some(b'\\' | b':') => true,
        Some(b' ' | b'.') => folded
            .take_while(|byte| *byte != b':')
            .all(|byte| matches!(byte, b' ' | b'.')),
        Some(_) => false,
    }
}

/// Code points HFS+ drops when it compares names.
fn is_hfs_ignorable(character: char) -> bool {
    matches!(
        character,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}

/// Per-file stats and the patch text of the imported tree against the parent's, the text within
/// [`MAX_PATCH_BYTES`] and each file diffed only within the bounds of [`text_budget`]; a file left
/// out of the text, wholly or partly, is marked `cut` and a note in the patch says so. Ends early
/// (with libgit2's "user" error) once `interrupted` says so, asked at every file and every line.
fn result_diff(
    repository: &Repository,
    parent: &Tree<'_>,
    imported: &Tree<'_>,
    interrupted: &dyn Fn() -> bool,
) -> std::result::Result<ResultDiff, git2::Error> {
    // Without typechange detection a file that became a link (or the reverse) is a deletion and an
    // addition of the same path, which is how git shows it: both contents appear in the patch.
    let diff = repository.diff_tree_to_tree(Some(parent), Some(imported), None)?;
    let mut files: Vec<ChangedFile> = Vec::new();
    let mut positions: HashMap<Vec<u8>, usize> = HashMap::new();
    for delta in diff.deltas() {
        let change = match delta.status() {
            Delta::Added => ChangeKind::Added,
            Delta::Deleted => ChangeKind::Deleted,
            _ => ChangeKind::Modified,
        };
        let path = delta_path(&delta).to_vec();
        if let Some(file) = positions
            .get(&path)
            .and_then(|position| files.get_mut(*position))
        {
            file.change = ChangeKind::TypeChanged;
            continue;
        }
        positions.insert(path.clone(), files.len());
        files.push(ChangedFile {
            path: lossy(&path),
            change,
            insertions: 0,
            deletions: 0,
            binary: false,
            cut: false,
        });
    }
    let mut patch = BoundedText::new(MAX_PATCH_BYTES);
    for index in 0..diff.deltas().len() {
        if interrupted() {
            return Err(git2::Error::from_str("interrupted"));
        }
        let Some(delta) = diff.get_delta(index) else {
            continue;
        };
        let Some(file) = positions
            .get(delta_path(&delta))
            .and_then(|position| files.get_mut(*position))
        else {
            continue;
        };
        if let Some(reason) = text_budget::too_large(repository, &delta)? {
            file.cut = true;
            let shown = format!(
                "diff --git a/{0} b/{0}\n[stet: the content of {0} is not shown: {reason}]\n",
                file.path
            );
            patch.push(shown.as_bytes());
            continue;
        }
        let Some(mut one) = git2::Patch::from_diff(&diff, index)? else {
            continue;
        };
        let mut whole = true;
        one.print(&mut |delta, _hunk, line| {
            if interrupted() {
                return false;
            }
            let origin = line.origin();
            file.binary |= delta.flags().is_binary();
            match origin {
                '+' => file.insertions += 1,
                '-' => file.deletions += 1,
                _ => {}
            }
            if matches!(origin, '+' | '-' | ' ') {
                whole &= patch.push(&[origin as u8]);
            }
            whole &= patch.push(line.content());
            true
        })?;
        file.cut |= !whole;
    }
    let cut = files.iter().filter(|file| file.cut).count();
    if patch.is_cut() {
        patch.note(&format!(
            "\n[stet: the patch stops here, at {MAX_PATCH_BYTES} bytes; {cut} file(s) are not shown whole, the commit holds all of it]\n"
        ));
    }
    let insertions = files.iter().map(|file| file.insertions).sum();
    let deletions = files.iter().map(|file| file.deletions).sum();
    Ok(ResultDiff {
        files,
        insertions,
        deletions,
        patch: patch.into_string(),
    })
}

fn delta_path<'d>(delta: &git2::DiffDelta<'d>) -> &'d [u8] {
    delta
        .new_file()
        .path_bytes()
        .or_else(|| delta.old_file().path_bytes())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
