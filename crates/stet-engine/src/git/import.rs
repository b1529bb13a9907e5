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

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, ObjectType, Oid, Repository, RepositoryOpenFlags, Signature};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use self::diff::result_diff;
pub(crate) use self::names::names_git_directory;
use self::walk::{CheckoutIgnores, Walk};
use crate::untrusted_tree;
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
    /// Sum of the lengths of the paths the change names, in bytes: each new entry listed (of any
    /// kind, as [`ImportLimits::max_files`] counts them), and each path the result adds, changes or
    /// deletes against the parent. stet holds each changed path several times (the diff, the
    /// review gate's reading, its matching, the events), so this bounds that memory.
    pub max_path_bytes: u64,
}

/// [`ImportLimits::max_path_bytes`] by default: 4 MiB, some 100,000 paths of 40 bytes (about the
/// mean length in large trees such as Linux's) or 1,000 paths of 4 KiB.
pub const DEFAULT_MAX_PATH_BYTES: u64 = 4 * 1024 * 1024;

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_files: 200_000,
            max_file_bytes: 100 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
            max_path_bytes: DEFAULT_MAX_PATH_BYTES,
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
    /// The patch does not show all of it (past a bound of [`crate::git::text_budget`]).
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
    /// Unified diff text (lossy where the content is not UTF-8), at most
    /// [`crate::git::text_budget::MAX_PATCH_BYTES`] and a
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

    #[error(
        "the agent's change names at least {figure} bytes of paths (new entries, or paths added, changed and deleted, counted together); stet imports at most {limit} (setting `import.max_path_bytes`: your configuration may raise it, a repository's stet.toml may only lower it)"
    )]
    PathsTooLong { figure: u64, limit: u64 },

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

/// The diff of a commit an earlier import made against its parent, within the same budgets (a
/// result a crashed dispatch had collected, shown again by the sweep's salvage).
pub fn committed_diff(
    repository: &Path,
    parent: &CommitSha,
    commit: &CommitSha,
) -> std::result::Result<ResultDiff, git2::Error> {
    let repository = Repository::open_ext(
        repository,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&OsStr>(),
    )?;
    let tree = |sha: &CommitSha| {
        repository
            .find_commit(git2::Oid::from_str(sha.as_str())?)
            .and_then(|found| found.tree())
    };
    result_diff(&repository, &tree(parent)?, &tree(commit)?, &|| false)
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
        path_bytes: 0,
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
    // Before anything lists the change's paths (the diff, the gate), their bytes are counted.
    change_paths::within(
        &repository,
        &parent_tree,
        &tree,
        request.limits.max_path_bytes,
        interrupted,
    )?;

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

fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

mod change_paths;
mod diff;
mod names;
mod objects;
#[cfg(test)]
mod tests;
mod walk;
