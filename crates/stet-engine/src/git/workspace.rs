//! Provisioning of a dispatch's workspace (DESIGN §5 row 10): the files of the base commit, copied out
//! of the user's repository into the directory the sandbox created, with a disposable `.git` of the
//! workspace's own so the agent can run `git status` and `git diff` (without the largest blobs:
//! `partial`). The user's repository is only read: its working tree, index, refs and configuration
//! stay exactly as they were. stet never opens this workspace as a repository again; its result
//! comes back through [`crate::git::import`].

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use git2::{
    ErrorCode, FileMode, Index, IndexEntry, IndexEntryExtendedFlag, IndexTime, ObjectType, Oid,
    Repository, RepositoryInitOptions, RepositoryOpenFlags,
};
use rustix::fs::{AtFlags, FileType, Gid, Uid};

use self::survey::{MAX_COMMIT_BYTES, survey};
use crate::runtime::SandboxUser;
use crate::untrusted_tree::{self, Entry, Listing};
use stet_sanitize::branch::CommitSha;

mod checkout;
mod partial;
mod reuse;
mod survey;

pub use self::partial::LEFT_OUT_FROM;

/// Bounds on the base a workspace is materialized from (`[base]`), checked from object headers
/// before any file is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseLimits {
    /// Entries the checkout writes (files, links, submodules and directories), each path counted.
    pub max_files: u64,
    /// The largest file, in bytes.
    pub max_file_bytes: u64,
    /// The sizes of every file and link target, summed per path, in bytes.
    pub max_total_bytes: u64,
    /// The lengths of the paths the checkout writes (files, links, submodules and directories),
    /// summed, in bytes: the host holds each one while it writes the index.
    pub max_path_bytes: u64,
    /// How many directories deep a path may lie.
    pub max_depth: usize,
}

/// [`BaseLimits::max_path_bytes`] by default: 16 MiB, the default 200,000 entries at paths of 80
/// bytes on average, twice what large trees hold (Linux's run to about 40).
pub const DEFAULT_MAX_PATH_BYTES: u64 = 16 * 1024 * 1024;

impl Default for BaseLimits {
    fn default() -> Self {
        BaseLimits {
            max_files: 200_000,
            max_file_bytes: 1024 * 1024 * 1024,
            max_total_bytes: 2 * 1024 * 1024 * 1024,
            max_path_bytes: DEFAULT_MAX_PATH_BYTES,
            max_depth: 256,
        }
    }
}

/// Why a workspace could not be materialized.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum WorkspaceError {
    #[error("cannot open the repository {}: {source}", repository.display())]
    OpenRepository {
        repository: PathBuf,
        #[source]
        source: git2::Error,
    },

    #[error(
        "commit {commit} is not in the object store of {}; fetch it into that repository (for example `git fetch origin`) and dispatch again",
        repository.display()
    )]
    BaseMissing {
        commit: CommitSha,
        repository: PathBuf,
    },

    #[error(
        "the base {commit} holds {figure}, past {setting} = {limit}; stet refused it before reading a file (a repository's stet.toml may only lower {setting}, your own configuration may raise it)"
    )]
    OverLimit {
        commit: CommitSha,
        figure: String,
        limit: String,
        setting: &'static str,
    },

    #[error("the base {commit} cannot be materialized: {detail}")]
    Malformed { commit: CommitSha, detail: String },

    #[error(
        "materializing the base {commit} was stopped (the dispatch was cancelled or timed out); its git processes were ended"
    )]
    Stopped { commit: CommitSha },

    #[error("{commit} names a {kind} in {}, not a commit", repository.display())]
    BaseNotCommit {
        commit: CommitSha,
        repository: PathBuf,
        kind: String,
    },

    #[error(
        "the workspace destination {} is not empty; a workspace is materialized only into the empty directory its sandbox created",
        destination.display()
    )]
    DestinationNotEmpty { destination: PathBuf },

    #[error("the workspace destination {} is not a directory", destination.display())]
    DestinationNotDirectory { destination: PathBuf },

    #[error(
        "the workspace destination {} belongs to uid {uid}, not to stet; stet materializes into a directory of its own and hands every entry to the sandbox user itself",
        destination.display()
    )]
    DestinationNotOwned { destination: PathBuf, uid: u32 },

    #[error(
        "{program} failed ({status}) materializing {commit} from {}: {stderr}",
        repository.display()
    )]
    Tool {
        program: &'static str,
        commit: CommitSha,
        repository: PathBuf,
        status: String,
        stderr: String,
    },

    #[error("{operation} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{operation} while materializing commit {commit} of {} into {}: {source}",
        repository.display(),
        destination.display()
    )]
    Git {
        operation: &'static str,
        commit: CommitSha,
        repository: PathBuf,
        destination: PathBuf,
        #[source]
        source: git2::Error,
    },
}

/// Result of workspace provisioning.
pub type Result<T> = std::result::Result<T, WorkspaceError>;

/// What [`materialize`] wrote: the entries of the base commit's tree (files and symbolic links;
/// submodules are empty directories and not counted) and the sum of their sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Materialized {
    /// Files and symbolic links written.
    pub files: u64,
    /// Their sizes summed, in bytes.
    pub bytes: u64,
}

/// Materializes `base` from the user's repository into `destination` (an existing, empty directory that
/// the sandbox created) with its own disposable `.git`, and hands every entry to `owner`.
///
/// `destination` must still belong to stet's own user (libgit2 refuses to work in a repository someone
/// else owns); the hand-over to `owner`, when it is another user, includes `destination` itself.
///
/// The disposable repository holds only the base commit and its tree, with a `.git/shallow` file that
/// names the commit as a shallow boundary, HEAD detached at the commit and an index carrying stat data,
/// so `git status` inside the workspace is clean without reading a file. Blobs of [`LEFT_OUT_FROM`]
/// bytes or more are in the workspace's files only: the repository is then a partial clone that
/// cannot fetch them, and their index entries are skip-worktree (`partial` says why).
pub fn materialize(
    repository: &Path,
    base: &CommitSha,
    destination: &Path,
    owner: SandboxUser,
) -> Result<Materialized> {
    materialize_within(repository, base, destination, owner, &BaseLimits::default())
}

/// [`materialize`] within `limits`: the base's tree is measured from object headers first, and a
/// base past a limit is refused before any file is read or written.
pub fn materialize_within(
    repository: &Path,
    base: &CommitSha,
    destination: &Path,
    owner: SandboxUser,
    limits: &BaseLimits,
) -> Result<Materialized> {
    materialize_until(repository, base, destination, owner, limits, &|| false)
}

/// [`materialize_within`] that ends with [`WorkspaceError::Stopped`] once `stopped` says so (the
/// dispatch was cancelled or timed out): the survey asks at each tree entry, the checkout at each
/// entry and each MiB of a file, and its `git cat-file` and `git pack-objects` are killed and
/// reaped before it returns. What was written stays for the caller to remove.
pub fn materialize_until(
    repository: &Path,
    base: &CommitSha,
    destination: &Path,
    owner: SandboxUser,
    limits: &BaseLimits,
    stopped: &(dyn Fn() -> bool + Sync),
) -> Result<Materialized> {
    let context = Context {
        repository,
        base,
        destination,
        stopped,
    };
    refuse_unusable_destination(destination)?;
    let source = Repository::open_ext(
        repository,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&OsStr>(),
    )
    .map_err(|source| WorkspaceError::OpenRepository {
        repository: repository.to_owned(),
        source,
    })?;
    let commit = find_base(&source, &context)?;
    let root = source
        .find_commit(commit)
        .map_err(context.git("reading the base commit"))?
        .tree_id();
    let surveyed = survey(&source, root, limits, &context)?;

    let target = Repository::init_opts(
        destination,
        RepositoryInitOptions::new()
            .external_template(false)
            .no_reinit(true)
            .mkdir(false),
    )
    .map_err(context.git("creating the disposable repository"))?;
    let pack_directory = target.path().join("objects").join("pack");
    context.stop_point()?;
    // The largest blobs stay out; the large ones stet copies itself; the commit, the trees and the
    // rest go through git.
    let (kept, left_out) = partial::split(surveyed.blobs);
    let (reuse, left) = reuse::locate(&source.path().join("objects"), kept);
    let mut objects = vec![commit];
    objects.extend(surveyed.trees);
    objects.extend(left);
    let copy = (reuse.count() > 0).then(|| reuse.start(pack_directory.clone()));
    let pack = match checkout::start_pack(&source, &pack_directory, objects, &context) {
        Ok(pack) => pack,
        Err(error) => {
            if let Some(copy) = copy {
                copy.abort();
            }
            return Err(error);
        }
    };
    let index = match checkout::check_out(&source, root, destination, &context) {
        Ok(index) => index,
        Err(error) => {
            pack.abort();
            if let Some(copy) = copy {
                copy.abort();
            }
            return Err(error);
        }
    };
    let packed = pack.finish(&context);
    let copied = copy.map_or(Ok(()), |copy| copy.finish(&context));
    packed?;
    copied?;
    context.stop_point()?;
    // A fresh handle sees only the disposable repository's own objects, so a commit missing from the
    // pack fails here rather than in the agent's first git command.
    drop(target);
    let target = open(destination, &context)?;
    target
        .find_commit(commit)
        .map_err(context.git("reading the base commit from the disposable repository"))?;
    write_shallow_boundary(&target, base)?;
    target
        .set_head_detached(commit)
        .map_err(context.git("detaching HEAD at the base commit"))?;
    if !left_out.is_empty() {
        partial::promise(target.path(), &context)?;
    }

    let created_by =
        std::fs::symlink_metadata(target.path()).map_err(|source| WorkspaceError::Io {
            path: target.path().to_owned(),
            operation: "reading the owner of",
            source,
        })?;
    let handed_over = created_by.uid() != owner.uid || created_by.gid() != owner.gid;
    if handed_over {
        context.stop_point()?;
        hand_over(destination, owner)?;
    }
    context.stop_point()?;
    let files = write_index(
        target.path(),
        index,
        &left_out,
        destination,
        handed_over.then_some(owner),
        &context,
    )?;
    Ok(Materialized {
        files,
        bytes: surveyed.figures.bytes,
    })
}

/// Opens a repository at exactly `path`.
fn open(path: &Path, context: &Context<'_>) -> Result<Repository> {
    Repository::open_ext(
        path,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&OsStr>(),
    )
    .map_err(context.git("opening the repository"))
}

/// The three paths every error of one materialization names, and whether it was told to stop.
struct Context<'a> {
    repository: &'a Path,
    base: &'a CommitSha,
    destination: &'a Path,
    stopped: &'a (dyn Fn() -> bool + Sync),
}

impl Context<'_> {
    /// [`WorkspaceError::Stopped`] once the materialization was told to stop.
    fn stop_point(&self) -> Result<()> {
        if (self.stopped)() {
            Err(WorkspaceError::Stopped {
                commit: self.base.clone(),
            })
        } else {
            Ok(())
        }
    }

    fn io(&self, operation: &'static str, source: std::io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            path: self.repository.to_owned(),
            operation,
            source,
        }
    }

    fn tool(&self, program: &'static str, status: ExitStatus, stderr: &[u8]) -> WorkspaceError {
        let stderr = String::from_utf8_lossy(&stderr[..stderr.len().min(2048)]);
        WorkspaceError::Tool {
            program,
            commit: self.base.clone(),
            repository: self.repository.to_owned(),
            status: status.to_string(),
            stderr: stderr.trim().to_owned(),
        }
    }

    fn git(&self, operation: &'static str) -> impl FnOnce(git2::Error) -> WorkspaceError + '_ {
        move |source| WorkspaceError::Git {
            operation,
            commit: self.base.clone(),
            repository: self.repository.to_owned(),
            destination: self.destination.to_owned(),
            source,
        }
    }
}

fn refuse_unusable_destination(destination: &Path) -> Result<()> {
    let io = |operation| {
        move |source| WorkspaceError::Io {
            path: destination.to_owned(),
            operation,
            source,
        }
    };
    let metadata =
        std::fs::symlink_metadata(destination).map_err(io("reading the workspace destination"))?;
    if !metadata.is_dir() {
        return Err(WorkspaceError::DestinationNotDirectory {
            destination: destination.to_owned(),
        });
    }
    let mut entries =
        std::fs::read_dir(destination).map_err(io("listing the workspace destination"))?;
    if entries.next().is_some() {
        return Err(WorkspaceError::DestinationNotEmpty {
            destination: destination.to_owned(),
        });
    }
    // libgit2 refuses to open a repository someone else owns, and would leave a half-made `.git`.
    let process =
        std::fs::metadata("/proc/self").map_err(io("reading the owner of the process for"))?;
    if metadata.uid() != process.uid() {
        return Err(WorkspaceError::DestinationNotOwned {
            destination: destination.to_owned(),
            uid: metadata.uid(),
        });
    }
    Ok(())
}

fn find_base(source: &Repository, context: &Context<'_>) -> Result<Oid> {
    let oid = Oid::from_str(context.base.as_str()).map_err(context.git("reading the commit id"))?;
    let odb = source
        .odb()
        .map_err(context.git("opening the repository's object store"))?;
    // From the header: a commit object is read only once it is known to be one, and small.
    let (size, kind) = match odb.read_header(oid) {
        Ok(header) => header,
        Err(error) if error.code() == ErrorCode::NotFound => {
            return Err(WorkspaceError::BaseMissing {
                commit: context.base.clone(),
                repository: context.repository.to_owned(),
            });
        }
        Err(error) => return Err(context.git("looking up the base commit")(error)),
    };
    if kind != ObjectType::Commit {
        return Err(WorkspaceError::BaseNotCommit {
            commit: context.base.clone(),
            repository: context.repository.to_owned(),
            kind: kind.str().to_owned(),
        });
    }
    if size > MAX_COMMIT_BYTES {
        return Err(WorkspaceError::Malformed {
            commit: context.base.clone(),
            detail: format!(
                "its commit object is {size} bytes, more than the {MAX_COMMIT_BYTES} stet reads"
            ),
        });
    }
    Ok(oid)
}

/// `.git/shallow` tells git that the base commit's parents are missing on purpose.
fn write_shallow_boundary(target: &Repository, base: &CommitSha) -> Result<()> {
    let path = target.path().join("shallow");
    let io = |source| WorkspaceError::Io {
        path: path.clone(),
        operation: "writing",
        source,
    };
    let mut file = std::fs::File::create_new(&path).map_err(io)?;
    writeln!(file, "{base}").map_err(io)
}

/// Gives every entry under `root`, and `root` itself, to `owner` without following symbolic links.
fn hand_over(root: &Path, owner: SandboxUser) -> Result<()> {
    let uid = Uid::from_raw(owner.uid);
    let gid = Gid::from_raw(owner.gid);
    let directory = untrusted_tree::open_root(root).map_err(|errno| handover_error(root, errno))?;
    rustix::fs::fchown(&directory, Some(uid), Some(gid))
        .map_err(|errno| handover_error(root, errno))?;
    hand_over_entries(directory, root, uid, gid)
}

fn hand_over_entries(
    directory: rustix::fd::OwnedFd,
    path: &Path,
    uid: Uid,
    gid: Gid,
) -> Result<()> {
    let mut entries = Listing::new(directory).map_err(|errno| handover_error(path, errno))?;
    let mut subdirectories = Vec::new();
    while let Some(entry) = entries.next() {
        let Entry { name, file_type } = entry.map_err(|errno| handover_error(path, errno))?;
        let dirfd = entries.fd().map_err(|errno| handover_error(path, errno))?;
        rustix::fs::chownat(
            dirfd,
            &name,
            Some(uid),
            Some(gid),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|errno| handover_error(&path.join(OsStr::from_bytes(name.to_bytes())), errno))?;
        let file_type = untrusted_tree::entry_type(dirfd, &name, file_type)
            .map_err(|errno| handover_error(path, errno))?;
        if file_type == FileType::Directory {
            subdirectories.push(name);
        }
    }
    for name in subdirectories {
        let child = path.join(OsStr::from_bytes(name.to_bytes()));
        let dirfd = entries.fd().map_err(|errno| handover_error(path, errno))?;
        let directory = untrusted_tree::open_directory(dirfd, &name)
            .map_err(|errno| handover_error(&child, errno))?;
        hand_over_entries(directory, &child, uid, gid)?;
    }
    Ok(())
}

fn handover_error(path: &Path, errno: rustix::io::Errno) -> WorkspaceError {
    WorkspaceError::Io {
        path: path.to_owned(),
        operation: "handing to the sandbox user",
        source: errno.into(),
    }
}

/// Writes the checkout's index into `git_dir`, counting its files and links; when their owner
/// changed after they were written, their new stat data (owner and change time) goes in first, so
/// git still sees every file as unchanged. The entries of `left_out` blobs are skip-worktree.
///
/// The index is opened on its own, not through the repository: libgit2 refuses to add an entry
/// whose blob the repository lacks, as a left-out one is.
fn write_index(
    git_dir: &Path,
    entries: Vec<IndexEntry>,
    left_out: &HashSet<Oid>,
    destination: &Path,
    restat: Option<SandboxUser>,
    context: &Context<'_>,
) -> Result<u64> {
    let path = git_dir.join("index");
    let mut index = Index::open(&path).map_err(context.git("opening the workspace index"))?;
    let mut files = 0;
    for mut entry in entries {
        if left_out.contains(&entry.id) {
            entry.flags_extended |= IndexEntryExtendedFlag::SKIP_WORKTREE.bits();
        }
        if entry.mode != u32::from(FileMode::Commit) {
            files += 1;
        }
        if restat.is_some() && entry.mode != u32::from(FileMode::Commit) {
            let path = destination.join(OsStr::from_bytes(&entry.path));
            let metadata =
                std::fs::symlink_metadata(&path).map_err(|source| WorkspaceError::Io {
                    path,
                    operation: "reading the stat data of",
                    source,
                })?;
            entry.uid = metadata.uid();
            entry.gid = metadata.gid();
            // Truncated to 32 bits, as git and libgit2 store it.
            entry.ctime = IndexTime::new(metadata.ctime() as i32, metadata.ctime_nsec() as u32);
        }
        index
            .add(&entry)
            .map_err(context.git("writing the workspace index"))?;
    }
    index
        .write()
        .map_err(context.git("writing the workspace index"))?;
    if let Some(owner) = restat {
        std::os::unix::fs::lchown(&path, Some(owner.uid), Some(owner.gid)).map_err(|source| {
            WorkspaceError::Io {
                path,
                operation: "handing to the sandbox user",
                source,
            }
        })?;
    }
    Ok(files)
}

/// Whether `repository` holds `commit` (an unreadable repository counts as not holding it; the
/// materialization that follows names the real problem).
pub(crate) fn has_commit(repository: &Path, commit: &CommitSha) -> bool {
    git2::Repository::open(repository)
        .ok()
        .and_then(|repo| {
            let oid = git2::Oid::from_str(commit.as_str()).ok()?;
            repo.find_commit(oid).ok().map(|_| ())
        })
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha() -> CommitSha {
        CommitSha::parse("0123456789abcdef0123456789abcdef01234567").unwrap()
    }

    fn user() -> SandboxUser {
        SandboxUser {
            uid: 65532,
            gid: 65532,
        }
    }

    #[test]
    fn a_destination_that_is_a_link_or_missing_is_refused_before_the_repository_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let not_a_repository = dir.path().join("nowhere");
        let error = materialize(&not_a_repository, &sha(), &link, user()).unwrap_err();
        assert!(
            matches!(error, WorkspaceError::DestinationNotDirectory { .. }),
            "{error:?}"
        );
        let error =
            materialize(&not_a_repository, &sha(), &dir.path().join("gone"), user()).unwrap_err();
        assert!(matches!(error, WorkspaceError::Io { .. }), "{error:?}");
        assert!(error.to_string().contains("gone"));
    }

    #[test]
    fn a_path_that_is_not_a_repository_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let destination = dir.path().join("workspace");
        std::fs::create_dir(&destination).unwrap();
        let error =
            materialize(&dir.path().join("nowhere"), &sha(), &destination, user()).unwrap_err();
        assert!(
            matches!(error, WorkspaceError::OpenRepository { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("nowhere"));
    }
}
