//! The one way the host reads a directory tree whose contents someone else chose — the workspace and
//! the outputs directory the agent leaves (DESIGN §5 row 10), a checkout of the user's repository
//! before it is handed over: the container is the blast boundary (ADR-0018 row 1), so a link or a
//! swapped entry in such a tree must not carry a host read past it, and a fifo or a huge file in it
//! must not stall or exhaust the host (row 6).
//!
//! Every directory is opened relative to its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY`;
//! an entry's type is the listing's, or else `lstat`'s (`statat` with `AT_SYMLINK_NOFOLLOW`); a file
//! is opened with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, kept only when the descriptor itself is a
//! regular file, and read up to a bound however much it grows meanwhile. What to walk, how deep, how
//! many entries, and what a refusal means stay with the walkers (`git/import.rs`,
//! `harness/openhands.rs`, `git/workspace.rs`, `dispatch/remove_tree.rs`): this module answers in
//! errnos and [`FileError`], which each maps into its own errors.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::path::Arg;

/// Why a file of an untrusted tree was not read.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum FileError {
    /// Opening failed: `ELOOP` for a link, `ENOENT` for an entry gone since it was listed.
    #[error("opening it: {0}")]
    Open(#[source] Errno),

    #[error("reading its status: {0}")]
    Stat(#[source] Errno),

    /// The descriptor is a fifo, a socket, a device or a directory.
    #[error("it is not a regular file")]
    NotRegular,

    /// `size` is what `fstat` said, or what was read once the file had grown past `limit`.
    #[error("it is {size} bytes, more than the {limit} read")]
    TooLarge { size: u64, limit: u64 },

    #[error("reading it: {0}")]
    Read(#[source] io::Error),
}

/// How a directory of an untrusted tree is opened: to list, as a directory only, never through a link.
fn directory_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the top of a tree. Only the last component of `path` is the tree's: a link in its place is
/// refused like anything else that is not a directory (Linux says `ENOTDIR` for both); the
/// directories leading to it are the caller's own.
pub fn open_root(path: &Path) -> rustix::io::Result<OwnedFd> {
    open_directory(rustix::fs::CWD, path)
}

/// Opens the directory `name` in `parent`, refusing a link, whatever it points at, like anything
/// else that is not a directory (Linux says `ENOTDIR` for both).
pub fn open_directory(parent: impl AsFd, name: impl Arg) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(parent, name, directory_flags(), Mode::empty())
}

/// One entry of a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name, without a `/`: never `.` or `..`.
    pub name: CString,
    /// As the directory gave it: [`FileType::Unknown`] where the file system does not say, which
    /// [`entry_type`] resolves.
    pub file_type: FileType,
}

/// The entries of one directory, `.` and `..` left out, in the order the directory gives them.
#[derive(Debug)]
pub struct Listing {
    directory: Dir,
}

impl Listing {
    /// Lists `directory`, which this listing now owns.
    pub fn new(directory: OwnedFd) -> rustix::io::Result<Listing> {
        Dir::new(directory).map(|directory| Listing { directory })
    }

    /// The listed directory, to open its entries relative to it.
    pub fn fd(&self) -> rustix::io::Result<BorrowedFd<'_>> {
        self.directory.fd()
    }
}

impl Iterator for Listing {
    type Item = rustix::io::Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let entry = match self.directory.read()? {
                Ok(entry) => entry,
                Err(errno) => return Some(Err(errno)),
            };
            let name = entry.file_name();
            if !matches!(name.to_bytes(), b"." | b"..") {
                return Some(Ok(Entry {
                    name: name.to_owned(),
                    file_type: entry.file_type(),
                }));
            }
        }
    }
}

/// The type of the entry `name` of `directory`: `listed` when the listing said, else the entry's own
/// (a link is a link, never what it points at).
pub fn entry_type(
    directory: impl AsFd,
    name: impl Arg,
    listed: FileType,
) -> rustix::io::Result<FileType> {
    match listed {
        FileType::Unknown => rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|stat| FileType::from_raw_mode(stat.st_mode)),
        known => Ok(known),
    }
}

/// A regular file of an untrusted tree, opened and checked against its bound, not yet read.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    size: u64,
    mode: rustix::fs::RawMode,
    limit: u64,
}

/// Opens the file `name` in `directory` to read at most `limit` bytes of it: a link is refused
/// without being followed, a fifo without waiting for a writer (`O_NONBLOCK`: should the entry have
/// become one since it was listed, the open returns at once and `fstat` refuses it), and a file
/// `fstat` says is larger than `limit`.
pub fn open_file(
    directory: impl AsFd,
    name: impl Arg,
    limit: u64,
) -> Result<RegularFile, FileError> {
    let opened = rustix::fs::openat(
        directory,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(FileError::Open)?;
    let stat = rustix::fs::fstat(&opened).map_err(FileError::Stat)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(FileError::NotRegular);
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > limit {
        return Err(FileError::TooLarge { size, limit });
    }
    Ok(RegularFile {
        file: File::from(opened),
        size,
        mode: stat.st_mode,
        limit,
    })
}

impl RegularFile {
    /// The size `fstat` gave when the file was opened; at most the limit.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The descriptor the file was opened as.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// The same file, to be read within a lower `limit`: refused if `fstat` said it is larger.
    pub fn within(mut self, limit: u64) -> Result<RegularFile, FileError> {
        if self.size > limit {
            return Err(FileError::TooLarge {
                size: self.size,
                limit,
            });
        }
        self.limit = self.limit.min(limit);
        Ok(self)
    }

    /// Whether the file's owner may execute it, which is what git records as an executable file.
    pub fn owner_may_execute(&self) -> bool {
        self.mode & 0o100 != 0
    }

    /// Copies the file's bytes to `output` in bounded chunks, refused once more than the limit turn
    /// up (it grew after it was opened); how many were copied.
    pub fn copy_to(self, output: &mut impl io::Write) -> Result<u64, FileError> {
        let limit = self.limit;
        let copied = io::copy(&mut self.file.take(limit.saturating_add(1)), output)
            .map_err(FileError::Read)?;
        if copied > limit {
            return Err(FileError::TooLarge {
                size: copied,
                limit,
            });
        }
        Ok(copied)
    }

    /// The file's bytes, refused once more than the limit turn up (it grew after it was opened).
    pub fn read(self) -> Result<Vec<u8>, FileError> {
        let mut bytes = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0));
        self.file
            .take(self.limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(FileError::Read)?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > self.limit {
            return Err(FileError::TooLarge {
                size: read,
                limit: self.limit,
            });
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests;
