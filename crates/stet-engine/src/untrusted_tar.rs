//! The one way the host reads a tar stream someone else wrote — the agent's workspace as the engine's
//! archive API hands it back in copy mode (issue #33, DESIGN §5 row 22): the container is the blast
//! boundary (ADR-0018 row 1), so the stream is untrusted input under the same rules as the tree walk
//! of [`crate::untrusted_tree`]: no absolute path, no `..`, links stored as links and never followed
//! (a later entry through one is refused), devices and fifos refused, every size and count bounded,
//! and all or nothing — on any violation the directory being written is removed and nothing is
//! accepted.
//!
//! The reader is a small one of its own, not the `tar` crate's: that crate reads a PAX or GNU
//! long-name header whole whatever size it claims, and takes a stream cut at an entry boundary for
//! its end. Here every header is 512 bytes, an extension header is read within
//! [`MAX_EXTENSION_BYTES`], file contents are copied in fixed-size chunks, and the stream must end
//! with its zero block: memory stays bounded whatever the stream claims.
//!
//! Entries are written below a fresh directory, each parent opened relative to its own parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` and each file created with `O_CREAT | O_EXCL |
//! O_NOFOLLOW`, so nothing the stream says can reach outside it. The result is then walked by the
//! trusted import like any workspace.

use std::fs::File;
use std::io::{self, Read, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::untrusted_tree::{self, FileError};

/// The largest extension header (a PAX record set, a GNU long name or link target) read.
pub const MAX_EXTENSION_BYTES: u64 = 64 * 1024;

/// The longest path an entry may name, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The longest single path component, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Tar's block size: every header, and every entry's data padded to it.
const BLOCK: usize = 512;

/// How much file content is copied at once.
const CHUNK: usize = 64 * 1024;

/// Bounds on what a tar stream may hold, as the import's limits bound a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarLimits {
    /// Entries of any kind, extension headers included.
    pub max_entries: u64,
    /// Largest single file, in bytes.
    pub max_file_bytes: u64,
    /// Sum of the sizes of every file and link target, in bytes.
    pub max_total_bytes: u64,
    /// Deepest directory nesting.
    pub max_depth: usize,
}

/// Why a tar stream was refused. Paths are the stream's, shown with replacement characters where
/// they are not UTF-8.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum TarError {
    #[error("the archive ends before its end marker; it is incomplete")]
    Truncated,
    #[error("a header of the archive is malformed: {0}")]
    BadHeader(&'static str),
    #[error("{path:?} in the archive is an absolute path")]
    Absolute { path: String },
    #[error("{path:?} in the archive names a parent directory (`..`)")]
    ParentComponent { path: String },
    #[error("{path:?} in the archive is not a usable name: {detail}")]
    BadName { path: String, detail: &'static str },
    #[error("{path:?} in the archive goes through a symbolic link or a file")]
    ThroughLink { path: String },
    #[error("{path:?} appears twice in the archive")]
    Duplicate { path: String },
    #[error("{path:?} in the archive is a {kind}; devices and fifos are refused")]
    Special { path: String, kind: &'static str },
    #[error("{path:?} in the archive is of an unknown type {kind:?}")]
    UnknownType { path: String, kind: char },
    #[error("{path:?} in the archive is a hard link to {target:?}, which is not a file before it")]
    BadHardLink { path: String, target: String },
    #[error("the archive holds more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("{path:?} in the archive is {size} bytes; files larger than {limit} bytes are refused")]
    FileTooLarge { path: String, size: u64, limit: u64 },
    #[error("the archive's files add up to more than {limit} bytes")]
    TotalTooLarge { limit: u64 },
    #[error("an extension header of the archive claims {size} bytes; at most {limit} are read")]
    ExtensionTooLarge { size: u64, limit: u64 },
    #[error("{path:?} in the archive is nested deeper than {limit} directories")]
    TooDeep { path: String, limit: usize },
    #[error("{} already exists; an archive is only written to a fresh directory", path.display())]
    DestinationExists { path: PathBuf },
    #[error("reading the archive: {0}")]
    Read(#[source] io::Error),
    #[error("{operation} {path:?}: {source}")]
    Write {
        path: String,
        operation: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the archive was not read to its end: stopped")]
    Interrupted,
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extracted {
    /// Entries written (directories, files, links).
    pub entries: u64,
    /// File and link target bytes written.
    pub bytes: u64,
}

/// Writes the tar stream `reader` into `destination`, which must not exist yet (its parent must):
/// all or nothing, `destination` removed again on any refusal or error. `interrupted` is asked
/// before each entry.
pub fn extract_until(
    reader: impl Read,
    destination: &Path,
    limits: TarLimits,
    interrupted: &dyn Fn() -> bool,
) -> Result<Extracted, TarError> {
    match std::fs::create_dir(destination) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            return Err(TarError::DestinationExists {
                path: destination.to_owned(),
            });
        }
        Err(source) => {
            return Err(TarError::Write {
                path: destination.display().to_string(),
                operation: "creating",
                source,
            });
        }
    }
    let written = untrusted_tree::open_root(destination)
        .map_err(|errno| TarError::Write {
            path: destination.display().to_string(),
            operation: "opening",
            source: errno.into(),
        })
        .and_then(|root| {
            Extraction {
                input: Blocks { inner: reader },
                root,
                limits,
                done: Extracted::default(),
            }
            .run(interrupted)
        });
    if written.is_err() {
        // The refusal is what the caller needs; a directory left behind is the sweep's. It holds
        // only what this extraction made: directories, files and links, which the removal unlinks
        // without following.
        let _ = std::fs::remove_dir_all(destination);
    }
    written
}

/// The stream, read in whole blocks; an early end is [`TarError::Truncated`].
struct Blocks<R> {
    inner: R,
}

impl<R: Read> Blocks<R> {
    fn exact(&mut self, buffer: &mut [u8]) -> Result<(), TarError> {
        self.inner.read_exact(buffer).map_err(|error| {
            if error.kind() == io::ErrorKind::UnexpectedEof {
                TarError::Truncated
            } else {
                TarError::Read(error)
            }
        })
    }

    /// The next block, or `None` at a clean end of the stream (no byte of a block read).
    fn block(&mut self) -> Result<Option<[u8; BLOCK]>, TarError> {
        let mut block = [0; BLOCK];
        let mut filled = 0;
        while filled < BLOCK {
            match self.inner.read(&mut block[filled..]) {
                Ok(0) if filled == 0 => return Ok(None),
                Ok(0) => return Err(TarError::Truncated),
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(TarError::Read(error)),
            }
        }
        Ok(Some(block))
    }

    /// Skips the padding after `size` bytes of data.
    fn pad(&mut self, size: u64) -> Result<(), TarError> {
        let rest = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
        let mut padding = [0; BLOCK];
        self.exact(&mut padding[..usize::try_from(rest).unwrap_or(0)])
    }

    /// An extension header's data, at most [`MAX_EXTENSION_BYTES`], padding skipped.
    fn extension(&mut self, size: u64) -> Result<Vec<u8>, TarError> {
        if size > MAX_EXTENSION_BYTES {
            return Err(TarError::ExtensionTooLarge {
                size,
                limit: MAX_EXTENSION_BYTES,
            });
        }
        let mut data = vec![0; usize::try_from(size).unwrap_or(0)];
        self.exact(&mut data)?;
        self.pad(size)?;
        Ok(data)
    }
}

/// A parsed 512-byte header.
struct Header {
    kind: u8,
    name: Vec<u8>,
    link: Vec<u8>,
    size: u64,
    mode: u32,
}

/// The bytes of a NUL-terminated header field.
fn field(bytes: &[u8]) -> &[u8] {
    bytes.split(|byte| *byte == 0).next().unwrap_or_default()
}

/// A numeric header field: octal, NUL- or space-terminated, or GNU's base-256.
fn number(bytes: &[u8]) -> Result<u64, TarError> {
    if bytes.first().is_some_and(|first| first & 0x80 != 0) {
        let mut value: u64 = u64::from(bytes[0] & 0x7f);
        for byte in &bytes[1..] {
            value = value
                .checked_mul(256)
                .and_then(|value| value.checked_add(u64::from(*byte)))
                .ok_or(TarError::BadHeader("a number is too large"))?;
        }
        return Ok(value);
    }
    let text = field(bytes);
    let digits = text.trim_ascii();
    if digits.is_empty() {
        return Ok(0);
    }
    digits.iter().try_fold(0u64, |value, digit| match digit {
        b'0'..=b'7' => value
            .checked_mul(8)
            .and_then(|value| value.checked_add(u64::from(digit - b'0')))
            .ok_or(TarError::BadHeader("a number is too large")),
        _ => Err(TarError::BadHeader("a number is not octal")),
    })
}

impl Header {
    fn parse(block: &[u8; BLOCK]) -> Result<Header, TarError> {
        let stored = number(&block[148..156])?;
        let unsigned: u64 = block
            .iter()
            .enumerate()
            .map(|(index, byte)| {
                if (148..156).contains(&index) {
                    u64::from(b' ')
                } else {
                    u64::from(*byte)
                }
            })
            .sum();
        if stored != unsigned {
            return Err(TarError::BadHeader("its checksum does not match"));
        }
        let mut name = field(&block[0..100]).to_vec();
        if &block[257..263] == b"ustar\0" {
            let prefix = field(&block[345..500]);
            if !prefix.is_empty() {
                let mut full = prefix.to_vec();
                full.push(b'/');
                full.extend_from_slice(&name);
                name = full;
            }
        }
        Ok(Header {
            kind: block[156],
            name,
            link: field(&block[157..257]).to_vec(),
            size: number(&block[124..136])?,
            mode: u32::try_from(number(&block[100..108])? & 0o7777).unwrap_or(0),
        })
    }
}

/// What extension headers said about the next entry.
#[derive(Default)]
struct Overrides {
    name: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
}

impl Overrides {
    /// Applies the `path`, `linkpath` and `size` records of a PAX extended header.
    fn pax(&mut self, mut data: &[u8]) -> Result<(), TarError> {
        const BAD: TarError = TarError::BadHeader("a PAX record is malformed");
        while !data.is_empty() {
            let space = data.iter().position(|byte| *byte == b' ').ok_or(BAD)?;
            let length: usize = std::str::from_utf8(&data[..space])
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or(BAD)?;
            if length <= space + 1 || length > data.len() || data[length - 1] != b'\n' {
                return Err(BAD);
            }
            let record = &data[space + 1..length - 1];
            let equals = record.iter().position(|byte| *byte == b'=').ok_or(BAD)?;
            let (key, value) = (&record[..equals], &record[equals + 1..]);
            match key {
                b"path" => self.name = Some(value.to_vec()),
                b"linkpath" => self.link = Some(value.to_vec()),
                b"size" => {
                    self.size = Some(
                        std::str::from_utf8(value)
                            .ok()
                            .and_then(|text| text.parse().ok())
                            .ok_or(BAD)?,
                    );
                }
                _ => {}
            }
            data = &data[length..];
        }
        Ok(())
    }
}

/// A GNU long name or link target: its data up to the first NUL.
fn long_name(data: Vec<u8>) -> Vec<u8> {
    field(&data).to_vec()
}

/// The stream's path as shown in errors.
fn shown(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// A path's components, `.` and empty ones dropped: refused when absolute, with `..`, with a NUL, or
/// past the lengths Linux allows.
fn components(path: &[u8]) -> Result<Vec<&[u8]>, TarError> {
    let bad = |detail| TarError::BadName {
        path: shown(path),
        detail,
    };
    if path.first() == Some(&b'/') {
        return Err(TarError::Absolute { path: shown(path) });
    }
    if path.contains(&0) {
        return Err(bad("it holds a NUL byte"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(bad("it is longer than 4096 bytes"));
    }
    let mut parts = Vec::new();
    for part in path.split(|byte| *byte == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(TarError::ParentComponent { path: shown(path) }),
            _ if part.len() > MAX_NAME_BYTES => {
                return Err(bad("a component is longer than 255 bytes"));
            }
            _ => parts.push(part),
        }
    }
    Ok(parts)
}

/// One extraction under way.
struct Extraction<R> {
    input: Blocks<R>,
    root: OwnedFd,
    limits: TarLimits,
    done: Extracted,
}

impl<R: Read> Extraction<R> {
    fn run(mut self, interrupted: &dyn Fn() -> bool) -> Result<Extracted, TarError> {
        let mut overrides = Overrides::default();
        let mut seen: u64 = 0;
        loop {
            if interrupted() {
                return Err(TarError::Interrupted);
            }
            let block = self.input.block()?.ok_or(TarError::Truncated)?;
            if block.iter().all(|byte| *byte == 0) {
                // The end marker is two zero blocks; a stream that stops after the first is complete
                // too (some writers leave the second out), but not one that goes on with anything else.
                return match self.input.block()? {
                    Some(next) if next.iter().any(|byte| *byte != 0) => Err(TarError::BadHeader(
                        "an entry follows the end-of-archive marker",
                    )),
                    _ => Ok(self.done),
                };
            }
            seen += 1;
            if seen > self.limits.max_entries {
                return Err(TarError::TooManyEntries {
                    limit: self.limits.max_entries,
                });
            }
            let header = Header::parse(&block)?;
            let size = overrides.size.unwrap_or(header.size);
            match header.kind {
                b'x' => overrides.pax(&self.input.extension(header.size)?)?,
                b'g' => drop(self.input.extension(header.size)?),
                b'L' => overrides.name = Some(long_name(self.input.extension(header.size)?)),
                b'K' => overrides.link = Some(long_name(self.input.extension(header.size)?)),
                kind => {
                    let taken = std::mem::take(&mut overrides);
                    let name = taken.name.unwrap_or(header.name);
                    let link = taken.link.unwrap_or(header.link);
                    self.entry(kind, &name, &link, size, header.mode)?;
                }
            }
        }
    }

    /// Opens the directory holding `parts`' last component, refusing a link or a file on the way.
    fn parent(&self, path: &[u8], parts: &[&[u8]]) -> Result<OwnedFd, TarError> {
        if parts.len() > self.limits.max_depth {
            return Err(TarError::TooDeep {
                path: shown(path),
                limit: self.limits.max_depth,
            });
        }
        let mut directory =
            rustix::io::dup(&self.root).map_err(|errno| write_error(path, "opening", errno))?;
        for part in &parts[..parts.len().saturating_sub(1)] {
            directory =
                untrusted_tree::open_directory(&directory, *part).map_err(|errno| match errno {
                    Errno::NOTDIR | Errno::LOOP => TarError::ThroughLink { path: shown(path) },
                    Errno::NOENT => TarError::BadName {
                        path: shown(path),
                        detail: "its directory is not in the archive before it",
                    },
                    errno => write_error(path, "opening a directory of", errno),
                })?;
        }
        Ok(directory)
    }

    fn count_bytes(&mut self, path: &[u8], size: u64) -> Result<(), TarError> {
        if size > self.limits.max_file_bytes {
            return Err(TarError::FileTooLarge {
                path: shown(path),
                size,
                limit: self.limits.max_file_bytes,
            });
        }
        self.done.bytes = self.done.bytes.saturating_add(size);
        if self.done.bytes > self.limits.max_total_bytes {
            return Err(TarError::TotalTooLarge {
                limit: self.limits.max_total_bytes,
            });
        }
        Ok(())
    }

    fn entry(
        &mut self,
        kind: u8,
        path: &[u8],
        link: &[u8],
        size: u64,
        mode: u32,
    ) -> Result<(), TarError> {
        let parts = components(path)?;
        let special = |kind| TarError::Special {
            path: shown(path),
            kind,
        };
        match kind {
            b'3' => return Err(special("character device")),
            b'4' => return Err(special("block device")),
            b'6' => return Err(special("fifo")),
            b'0' | b'\0' | b'1' | b'2' | b'5' => {}
            other => {
                return Err(TarError::UnknownType {
                    path: shown(path),
                    kind: char::from(other),
                });
            }
        }
        let Some(name) = parts.last() else {
            // The archive's own top directory (`./`): the destination itself.
            return match kind {
                b'5' => Ok(()),
                _ => Err(TarError::BadName {
                    path: shown(path),
                    detail: "only a directory may stand for the archive's top",
                }),
            };
        };
        let parent = self.parent(path, &parts)?;
        self.done.entries += 1;
        match kind {
            b'5' => self.directory(&parent, name, path),
            b'2' => self.symlink(&parent, name, path, link),
            b'1' => self.hard_link(&parent, name, path, link),
            _ => self.file(&parent, name, path, size, mode),
        }?;
        if kind != b'0' && kind != b'\0' {
            // A directory, link or hard link carries no data of its own; a writer that gave one a size
            // is skipped over it.
            self.skip(size)?;
        }
        Ok(())
    }

    fn skip(&mut self, size: u64) -> Result<(), TarError> {
        let mut rest = size;
        let mut buffer = [0; BLOCK];
        while rest > 0 {
            let now = usize::try_from(rest.min(BLOCK as u64)).unwrap_or(BLOCK);
            self.input.exact(&mut buffer[..now])?;
            rest -= now as u64;
        }
        self.input.pad(size)
    }

    fn directory(&mut self, parent: &OwnedFd, name: &[u8], path: &[u8]) -> Result<(), TarError> {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => Ok(()),
            // A directory named again (after its own entries, as some writers do) is the same one.
            Err(Errno::EXIST) => match untrusted_tree::open_directory(parent, name) {
                Ok(_) => Ok(()),
                Err(_) => Err(TarError::Duplicate { path: shown(path) }),
            },
            Err(errno) => Err(write_error(path, "creating the directory", errno)),
        }
    }

    fn symlink(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        path: &[u8],
        target: &[u8],
    ) -> Result<(), TarError> {
        if target.is_empty() || target.contains(&0) || target.len() > MAX_PATH_BYTES {
            return Err(TarError::BadName {
                path: shown(path),
                detail: "its link target is empty, holds a NUL byte or is longer than 4096 bytes",
            });
        }
        self.count_bytes(path, target.len() as u64)?;
        rustix::fs::symlinkat(target, parent, name).map_err(|errno| match errno {
            Errno::EXIST => TarError::Duplicate { path: shown(path) },
            errno => write_error(path, "creating the link", errno),
        })
    }

    /// A hard link becomes a copy of the file it names, which must be a regular file the archive
    /// wrote before it (a link or anything outside is refused, never followed).
    fn hard_link(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        path: &[u8],
        target: &[u8],
    ) -> Result<(), TarError> {
        let bad = || TarError::BadHardLink {
            path: shown(path),
            target: shown(target),
        };
        let target_parts = match components(target) {
            Ok(parts) if !parts.is_empty() => parts,
            _ => return Err(bad()),
        };
        let target_parent = self.parent(target, &target_parts).map_err(|_| bad())?;
        let source = untrusted_tree::open_file(
            &target_parent,
            *target_parts.last().unwrap_or(&&b""[..]),
            self.limits.max_file_bytes,
        )
        .map_err(|error| match error {
            FileError::TooLarge { size, limit } => TarError::FileTooLarge {
                path: shown(path),
                size,
                limit,
            },
            _ => bad(),
        })?;
        self.count_bytes(path, source.size())?;
        let executable = source.owner_may_execute();
        let mut output = create(parent, name, path, if executable { 0o100 } else { 0 })?;
        source
            .copy_to(&mut output)
            .map(drop)
            .map_err(|error| TarError::Write {
                path: shown(path),
                operation: "copying the file it links",
                source: io::Error::other(error),
            })
    }

    fn file(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        path: &[u8],
        size: u64,
        mode: u32,
    ) -> Result<(), TarError> {
        self.count_bytes(path, size)?;
        let mut output = create(parent, name, path, mode)?;
        let mut rest = size;
        let mut buffer = vec![0; CHUNK];
        while rest > 0 {
            let now = usize::try_from(rest.min(CHUNK as u64)).unwrap_or(CHUNK);
            self.input.exact(&mut buffer[..now])?;
            output
                .write_all(&buffer[..now])
                .map_err(|source| TarError::Write {
                    path: shown(path),
                    operation: "writing",
                    source,
                })?;
            rest -= now as u64;
        }
        self.input.pad(size)
    }
}

/// Creates the file `name` in `parent`, refusing one already there (a link included): executable by
/// its owner when `mode` says so, as git records it.
fn create(parent: &OwnedFd, name: &[u8], path: &[u8], mode: u32) -> Result<File, TarError> {
    let permissions = if mode & 0o100 != 0 { 0o755 } else { 0o644 };
    rustix::fs::openat(
        parent,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(permissions),
    )
    .map(File::from)
    .map_err(|errno| match errno {
        Errno::EXIST => TarError::Duplicate { path: shown(path) },
        errno => write_error(path, "creating", errno),
    })
}

fn write_error(path: &[u8], operation: &'static str, errno: Errno) -> TarError {
    TarError::Write {
        path: shown(path),
        operation,
        source: errno.into(),
    }
}

#[cfg(test)]
mod tests;
