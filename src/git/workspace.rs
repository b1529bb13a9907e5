//! Provisioning of a dispatch's workspace (DESIGN §5 row 10): the files of the base commit, copied out
//! of the user's repository into the directory the sandbox created, with a disposable `.git` of the
//! workspace's own so the agent can run `git status` and `git diff`. The user's repository is only
//! read: its working tree, index, refs and configuration stay exactly as they were. stet never opens
//! this workspace as a repository again; its result comes back through [`crate::git::import`].

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{
    ErrorCode, FileMode, IndexTime, ObjectType, Oid, Repository, RepositoryInitOptions,
    RepositoryOpenFlags,
};
use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid};

use crate::dispatch::branch::CommitSha;
use crate::runtime::SandboxUser;

/// Why a workspace could not be materialized.
#[derive(Debug, thiserror::Error)]
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
    pub files: u64,
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
/// so `git status` inside the workspace is clean without reading a file.
pub fn materialize(
    repository: &Path,
    base: &CommitSha,
    destination: &Path,
    owner: SandboxUser,
) -> Result<Materialized> {
    let context = Context {
        repository,
        base,
        destination,
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

    let target = Repository::init_opts(
        destination,
        RepositoryInitOptions::new()
            .external_template(false)
            .no_reinit(true)
            .mkdir(false),
    )
    .map_err(context.git("creating the disposable repository"))?;
    copy_and_check_out(source, &target, commit, &context)?;
    // A fresh handle sees only the disposable repository's own objects, so a commit missing from the
    // pack fails here rather than in the agent's first git command.
    drop(target);
    let target = Repository::open_ext(
        destination,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&OsStr>(),
    )
    .map_err(context.git("reopening the disposable repository"))?;
    write_shallow_boundary(&target, base)?;
    target
        .set_head_detached(commit)
        .map_err(context.git("detaching HEAD at the base commit"))?;

    let created_by =
        std::fs::symlink_metadata(target.path()).map_err(|source| WorkspaceError::Io {
            path: target.path().to_owned(),
            operation: "reading the owner of",
            source,
        })?;
    let handed_over = created_by.uid() != owner.uid || created_by.gid() != owner.gid;
    if handed_over {
        hand_over(destination, owner)?;
    }
    count_and_restat(&target, destination, handed_over.then_some(owner), &context)
}

/// Writes the disposable repository's pack and checks the base tree out, at the same time when it
/// can: the checkout reads the user's object store through an alternate that exists only in this
/// process's handle (never in `objects/info/alternates`), while another thread writes the pack.
fn copy_and_check_out(
    source: Repository,
    target: &Repository,
    commit: Oid,
    context: &Context<'_>,
) -> Result<()> {
    let pack_directory = target.path().join("objects").join("pack");
    let objects = source.commondir().join("objects");
    let Some(alternate) = objects.to_str() else {
        // libgit2 takes an alternate's path as UTF-8 only: copy first, then check out from the copy.
        copy_objects(&source, &pack_directory, commit, context)?;
        return check_out(target, commit, context);
    };
    std::thread::scope(|scope| {
        let copying = scope.spawn(move || copy_objects(&source, &pack_directory, commit, context));
        let checked_out = target
            .odb()
            .and_then(|odb| odb.add_disk_alternate(alternate))
            .map_err(context.git("reading the repository's objects from the disposable one"))
            .and_then(|()| check_out(target, commit, context));
        let copied = copying
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        copied.and(checked_out)
    })
}

/// Writes the base tree's files and an index with their stat data. Filters stay off: the workspace
/// holds the exact bytes of each blob, which is what the import reads back, so a file the agent did
/// not touch is never reported as changed.
fn check_out(target: &Repository, commit: Oid, context: &Context<'_>) -> Result<()> {
    let tree = target
        .find_commit(commit)
        .and_then(|commit| commit.tree())
        .map_err(context.git("reading the base tree"))?;
    target
        .checkout_tree(
            tree.as_object(),
            Some(CheckoutBuilder::new().force().disable_filters(true)),
        )
        .map_err(context.git("checking out the base tree"))
}

/// The three paths every error of one materialization names.
struct Context<'a> {
    repository: &'a Path,
    base: &'a CommitSha,
    destination: &'a Path,
}

impl Context<'_> {
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
    let object = match source.find_object(oid, None) {
        Ok(object) => object,
        Err(error) if error.code() == ErrorCode::NotFound => {
            return Err(WorkspaceError::BaseMissing {
                commit: context.base.clone(),
                repository: context.repository.to_owned(),
            });
        }
        Err(error) => return Err(context.git("looking up the base commit")(error)),
    };
    match object.kind() {
        Some(ObjectType::Commit) => Ok(oid),
        kind => Err(WorkspaceError::BaseNotCommit {
            commit: context.base.clone(),
            repository: context.repository.to_owned(),
            kind: kind
                .map_or("object of unknown type", |kind| kind.str())
                .to_owned(),
        }),
    }
}

/// Copies the base commit and every tree and blob it reaches (not its history) into one pack in the
/// disposable repository's object store.
///
/// The pack is written here rather than by libgit2's pack builder: that one searches for deltas and
/// deflates every object, which took 2.7–5 s for 50,000 files against 0.8 s for this stored pack
/// (docs/benchmarks.md). A disposable repository trades the space for the time.
fn copy_objects(
    source: &Repository,
    directory: &Path,
    commit: Oid,
    context: &Context<'_>,
) -> Result<()> {
    let objects = reachable_objects(source, commit, context)?;
    let odb = source
        .odb()
        .map_err(context.git("opening the repository's object store"))?;
    let io = |source| WorkspaceError::Io {
        path: directory.to_owned(),
        operation: "writing the base commit's objects into",
        source,
    };
    let mut pack = pack::PackWriter::create(directory, objects.len()).map_err(io)?;
    for id in objects {
        let object = odb
            .read(id)
            .map_err(context.git("reading an object of the base commit"))?;
        pack.add(id, object.kind(), object.data()).map_err(io)?;
    }
    pack.finish().map_err(io)
}

/// The base commit, then its trees and blobs in walk order, each once; submodule commits are not
/// objects of this repository and are left out.
fn reachable_objects(source: &Repository, commit: Oid, context: &Context<'_>) -> Result<Vec<Oid>> {
    let root = source
        .find_commit(commit)
        .map_err(context.git("reading the base commit"))?
        .tree_id();
    let mut seen = HashSet::from([commit, root]);
    let mut trees = vec![root];
    let mut blobs = Vec::new();
    let mut next = 0;
    while let Some(id) = trees.get(next).copied() {
        next += 1;
        let tree = source
            .find_tree(id)
            .map_err(context.git("reading a tree of the base commit"))?;
        for entry in tree.iter() {
            let list = match entry.kind() {
                Some(ObjectType::Tree) => &mut trees,
                Some(ObjectType::Blob) => &mut blobs,
                _ => continue,
            };
            if seen.insert(entry.id()) {
                list.push(entry.id());
            }
        }
    }
    Ok([commit].into_iter().chain(trees).chain(blobs).collect())
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
    let directory = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| handover_error(root, errno))?;
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
    let mut entries = Dir::new(directory).map_err(|errno| handover_error(path, errno))?;
    let mut subdirectories = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(|errno| handover_error(path, errno))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let dirfd = entries.fd().map_err(|errno| handover_error(path, errno))?;
        rustix::fs::chownat(dirfd, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW).map_err(
            |errno| handover_error(&path.join(OsStr::from_bytes(name.to_bytes())), errno),
        )?;
        let is_directory = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
                .map_err(|errno| handover_error(path, errno))?,
            _ => false,
        };
        if is_directory {
            subdirectories.push(name.to_owned());
        }
    }
    for name in subdirectories {
        let child = path.join(OsStr::from_bytes(name.to_bytes()));
        let dirfd = entries.fd().map_err(|errno| handover_error(path, errno))?;
        let directory = rustix::fs::openat(
            dirfd,
            name.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
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

/// Counts the checked-out entries and, when their owner changed after the checkout wrote the index,
/// records their new stat data (owner and change time) so git still sees every file as unchanged.
fn count_and_restat(
    target: &Repository,
    destination: &Path,
    restat: Option<SandboxUser>,
    context: &Context<'_>,
) -> Result<Materialized> {
    let mut index = target
        .index()
        .map_err(context.git("reading the workspace index"))?;
    let mut counted = Materialized { files: 0, bytes: 0 };
    let entries: Vec<_> = index.iter().collect();
    for mut entry in entries {
        if entry.mode == u32::from(FileMode::Commit) {
            continue;
        }
        counted.files += 1;
        counted.bytes += u64::from(entry.file_size);
        if restat.is_some() {
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
            index
                .add(&entry)
                .map_err(context.git("updating the workspace index"))?;
        }
    }
    if let Some(owner) = restat {
        index
            .write()
            .map_err(context.git("writing the workspace index"))?;
        let path = target.path().join("index");
        std::os::unix::fs::lchown(&path, Some(owner.uid), Some(owner.gid)).map_err(|source| {
            WorkspaceError::Io {
                path,
                operation: "handing to the sandbox user",
                source,
            }
        })?;
    }
    Ok(counted)
}

/// A version 2 pack and its index, written without compression: every object is a zlib stream of
/// stored blocks, so writing costs a copy and three checksums (SHA-1 of the pack and of the index, CRC32
/// and Adler-32 of each entry) instead of a delta search and deflate.
mod pack {
    use std::fs::{File, Permissions};
    use std::io::{self, BufWriter, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use git2::{ObjectType, Oid};

    /// Largest stored deflate block.
    const STORED_BLOCK: usize = 0xffff;

    /// Offsets from here on go to the index's table of 64-bit offsets.
    const LARGE_OFFSET: u64 = 0x8000_0000;

    /// zlib header: deflate with a 32 KiB window, "fastest" level; a multiple of 31 as zlib requires.
    const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

    struct Entry {
        id: [u8; 20],
        crc: u32,
        offset: u64,
    }

    pub(super) struct PackWriter {
        directory: PathBuf,
        temporary: PathBuf,
        out: BufWriter<File>,
        hash: Sha1,
        crc: u32,
        offset: u64,
        entries: Vec<Entry>,
    }

    impl PackWriter {
        /// Starts `directory/tmp_pack_stet` with the header of a pack of `count` objects.
        pub(super) fn create(directory: &Path, count: usize) -> io::Result<PackWriter> {
            let temporary = directory.join("tmp_pack_stet");
            let count = u32::try_from(count)
                .map_err(|_| io::Error::other("more objects than a pack can hold"))?;
            let mut writer = PackWriter {
                directory: directory.to_owned(),
                out: BufWriter::with_capacity(1 << 20, File::create_new(&temporary)?),
                temporary,
                hash: Sha1::new(),
                crc: 0,
                offset: 0,
                entries: Vec::new(),
            };
            writer.put(b"PACK")?;
            writer.put(&2_u32.to_be_bytes())?;
            writer.put(&count.to_be_bytes())?;
            Ok(writer)
        }

        pub(super) fn add(&mut self, id: Oid, kind: ObjectType, data: &[u8]) -> io::Result<()> {
            let code: u8 = match kind {
                ObjectType::Commit => 1,
                ObjectType::Tree => 2,
                ObjectType::Blob => 3,
                ObjectType::Tag => 4,
                ObjectType::Any => return Err(io::Error::other("an object of unknown type")),
            };
            let mut name = [0; 20];
            name.copy_from_slice(id.as_bytes());
            let offset = self.offset;
            self.crc = 0;

            // Type and size: 4 bits of size in the first byte, then 7 per byte, low bits first.
            let mut size = data.len() as u64;
            let mut header = vec![(code << 4) | (size & 0x0f) as u8];
            size >>= 4;
            while size > 0 {
                if let Some(last) = header.last_mut() {
                    *last |= 0x80;
                }
                header.push((size & 0x7f) as u8);
                size >>= 7;
            }
            self.put(&header)?;

            self.put(&ZLIB_HEADER)?;
            let mut blocks = data.chunks(STORED_BLOCK).peekable();
            if blocks.peek().is_none() {
                self.put(&[1, 0, 0, 0xff, 0xff])?;
            }
            while let Some(block) = blocks.next() {
                let last = u8::from(blocks.peek().is_none());
                let length = block.len() as u16;
                let [low, high] = length.to_le_bytes();
                let [not_low, not_high] = (!length).to_le_bytes();
                self.put(&[last, low, high, not_low, not_high])?;
                self.put(block)?;
            }
            self.put(&adler32(data).to_be_bytes())?;

            self.entries.push(Entry {
                id: name,
                crc: self.crc,
                offset,
            });
            Ok(())
        }

        /// Ends the pack with its checksum, writes the index, and gives both their final names; the
        /// index comes last, since git sees a pack only through its index.
        pub(super) fn finish(mut self) -> io::Result<()> {
            let checksum = std::mem::replace(&mut self.hash, Sha1::new()).finish();
            self.out.write_all(&checksum)?;
            // No fsync: the repository is disposable, and a crash takes the whole workspace with it.
            self.out.into_inner().map_err(|error| error.into_error())?;

            let name: String = checksum.iter().map(|byte| format!("{byte:02x}")).collect();
            let pack = self.directory.join(format!("pack-{name}.pack"));
            std::fs::rename(&self.temporary, &pack)?;
            std::fs::set_permissions(&pack, Permissions::from_mode(0o444))?;
            let index = self.directory.join(format!("pack-{name}.idx"));
            let temporary = self.directory.join("tmp_idx_stet");
            std::fs::write(&temporary, index_bytes(&mut self.entries, &checksum))?;
            std::fs::set_permissions(&temporary, Permissions::from_mode(0o444))?;
            std::fs::rename(temporary, index)
        }

        fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.out.write_all(bytes)?;
            self.hash.update(bytes);
            self.crc = crc32(self.crc, bytes);
            self.offset += bytes.len() as u64;
            Ok(())
        }
    }

    /// A version 2 pack index: fan-out table, sorted names, CRC32s, offsets, checksums.
    fn index_bytes(entries: &mut [Entry], pack_checksum: &[u8; 20]) -> Vec<u8> {
        entries.sort_unstable_by_key(|entry| entry.id);
        let mut out = Vec::with_capacity(1032 + entries.len() * 28 + 40);
        out.extend_from_slice(&[0xff, b't', b'O', b'c']);
        out.extend_from_slice(&2_u32.to_be_bytes());
        let mut below = 0_u32;
        for first in 0..=255_u8 {
            below += entries
                .iter()
                .skip(below as usize)
                .take_while(|entry| entry.id[0] == first)
                .count() as u32;
            out.extend_from_slice(&below.to_be_bytes());
        }
        for entry in entries.iter() {
            out.extend_from_slice(&entry.id);
        }
        for entry in entries.iter() {
            out.extend_from_slice(&entry.crc.to_be_bytes());
        }
        let mut large = Vec::new();
        for entry in entries.iter() {
            let small = if entry.offset < LARGE_OFFSET {
                entry.offset as u32
            } else {
                large.push(entry.offset);
                0x8000_0000 | (large.len() as u32 - 1)
            };
            out.extend_from_slice(&small.to_be_bytes());
        }
        for offset in large {
            out.extend_from_slice(&offset.to_be_bytes());
        }
        out.extend_from_slice(pack_checksum);
        let mut hash = Sha1::new();
        hash.update(&out);
        out.extend_from_slice(&hash.finish());
        out
    }

    const CRC_TABLE: [u32; 256] = crc_table();

    const fn crc_table() -> [u32; 256] {
        let mut table = [0; 256];
        let mut index = 0;
        while index < 256 {
            let mut value = index as u32;
            let mut bit = 0;
            while bit < 8 {
                value = if value & 1 == 1 {
                    0xedb8_8320 ^ (value >> 1)
                } else {
                    value >> 1
                };
                bit += 1;
            }
            table[index] = value;
            index += 1;
        }
        table
    }

    /// CRC-32 (IEEE), continuing from `crc`.
    pub(super) fn crc32(crc: u32, bytes: &[u8]) -> u32 {
        let mut value = !crc;
        for byte in bytes {
            value = CRC_TABLE[((value ^ u32::from(*byte)) & 0xff) as usize] ^ (value >> 8);
        }
        !value
    }

    /// Adler-32, the checksum that ends a zlib stream.
    pub(super) fn adler32(bytes: &[u8]) -> u32 {
        const MODULUS: u32 = 65_521;
        // The most bytes that can be summed before `b` could overflow.
        const RUN: usize = 5552;
        let (mut a, mut b) = (1_u32, 0_u32);
        for run in bytes.chunks(RUN) {
            for byte in run {
                a += u32::from(*byte);
                b += a;
            }
            a %= MODULUS;
            b %= MODULUS;
        }
        (b << 16) | a
    }

    /// SHA-1 (FIPS 180-4), which names packs and closes pack and index files.
    pub(super) struct Sha1 {
        state: [u32; 5],
        block: [u8; 64],
        filled: usize,
        length: u64,
    }

    impl Sha1 {
        pub(super) fn new() -> Sha1 {
            Sha1 {
                state: [
                    0x6745_2301,
                    0xefcd_ab89,
                    0x98ba_dcfe,
                    0x1032_5476,
                    0xc3d2_e1f0,
                ],
                block: [0; 64],
                filled: 0,
                length: 0,
            }
        }

        pub(super) fn update(&mut self, mut bytes: &[u8]) {
            self.length += bytes.len() as u64;
            if self.filled > 0 {
                let take = bytes.len().min(64 - self.filled);
                self.block[self.filled..self.filled + take].copy_from_slice(&bytes[..take]);
                self.filled += take;
                bytes = &bytes[take..];
                if self.filled < 64 {
                    return;
                }
                let block = self.block;
                self.compress(&block);
                self.filled = 0;
            }
            let mut blocks = bytes.chunks_exact(64);
            for block in &mut blocks {
                let mut whole = [0; 64];
                whole.copy_from_slice(block);
                self.compress(&whole);
            }
            let rest = blocks.remainder();
            self.block[..rest.len()].copy_from_slice(rest);
            self.filled = rest.len();
        }

        pub(super) fn finish(mut self) -> [u8; 20] {
            let bits = self.length.wrapping_mul(8);
            let padding = if self.filled < 56 {
                56 - self.filled
            } else {
                120 - self.filled
            };
            let mut tail = vec![0; padding];
            tail[0] = 0x80;
            tail.extend_from_slice(&bits.to_be_bytes());
            self.update(&tail);
            let mut digest = [0; 20];
            for (chunk, word) in digest.chunks_exact_mut(4).zip(self.state) {
                chunk.copy_from_slice(&word.to_be_bytes());
            }
            digest
        }

        fn compress(&mut self, block: &[u8; 64]) {
            let mut schedule = [0_u32; 80];
            for (word, bytes) in schedule.iter_mut().zip(block.chunks_exact(4)) {
                *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            }
            for round in 16..80 {
                schedule[round] = (schedule[round - 3]
                    ^ schedule[round - 8]
                    ^ schedule[round - 14]
                    ^ schedule[round - 16])
                    .rotate_left(1);
            }
            let [mut a, mut b, mut c, mut d, mut e] = self.state;
            for (round, word) in schedule.iter().enumerate() {
                let (mix, constant) = match round {
                    0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                    20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                    40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                    _ => (b ^ c ^ d, 0xca62_c1d6_u32),
                };
                let next = a
                    .rotate_left(5)
                    .wrapping_add(mix)
                    .wrapping_add(e)
                    .wrapping_add(constant)
                    .wrapping_add(*word);
                e = d;
                d = c;
                c = b.rotate_left(30);
                b = a;
                a = next;
            }
            for (state, value) in self.state.iter_mut().zip([a, b, c, d, e]) {
                *state = state.wrapping_add(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn sha1_of(chunks: &[&[u8]]) -> String {
        let mut hash = pack::Sha1::new();
        for chunk in chunks {
            hash.update(chunk);
        }
        hex(&hash.finish())
    }

    #[test]
    fn sha1_matches_the_standard_vectors_however_the_input_is_split() {
        assert_eq!(sha1_of(&[]), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            sha1_of(&[b"abc"]),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            sha1_of(&[
                b"abcdbcdecdefdefgefghfghighijhi",
                b"jkijkljklmklmnlmnomnopnopq"
            ]),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        let million = vec![b'a'; 1_000_000];
        let (head, tail) = million.split_at(333_333);
        let (middle, tail) = tail.split_at(63);
        assert_eq!(
            sha1_of(&[head, middle, tail]),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }

    #[test]
    fn sha1_names_objects_as_git_does() {
        for length in [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000] {
            let data: Vec<u8> = (0..length).map(|i| (i * 7 % 251) as u8).collect();
            let header = format!("blob {length}\0");
            assert_eq!(
                sha1_of(&[header.as_bytes(), &data]),
                Oid::hash_object(ObjectType::Blob, &data)
                    .unwrap()
                    .to_string(),
                "{length} bytes"
            );
        }
    }

    #[test]
    fn the_zlib_and_pack_checksums_match_their_standard_vectors() {
        assert_eq!(pack::crc32(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(pack::crc32(pack::crc32(0, b"1234"), b"56789"), 0xcbf4_3926);
        assert_eq!(pack::adler32(b"Wikipedia"), 0x11e6_0398);
        let long = vec![0xff; 100_000];
        let (mut a, mut b) = (1_u64, 0_u64);
        for byte in &long {
            a = (a + u64::from(*byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(u64::from(pack::adler32(&long)), (b << 16) | a);
    }

    #[test]
    fn a_written_pack_reads_back_through_libgit2() {
        let dir = tempfile::tempdir().unwrap();
        let repository = Repository::init_bare(dir.path()).unwrap();
        let large: Vec<u8> = (0..150_000_u32).map(|i| (i % 253) as u8).collect();
        let contents: [&[u8]; 4] = [b"", b"small\n", &large, &[0x0f; 16]];
        let directory = repository.path().join("objects").join("pack");
        let mut writer = pack::PackWriter::create(&directory, contents.len()).unwrap();
        let mut ids = Vec::new();
        for content in contents {
            let id = Oid::hash_object(ObjectType::Blob, content).unwrap();
            writer.add(id, ObjectType::Blob, content).unwrap();
            ids.push(id);
        }
        writer.finish().unwrap();
        let reopened = Repository::open_bare(dir.path()).unwrap();
        for (id, content) in ids.into_iter().zip(contents) {
            assert_eq!(reopened.find_blob(id).unwrap().content(), content);
        }
        let names: Vec<String> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "a pack and its index, no temporary file: {names:?}"
        );
    }
}
