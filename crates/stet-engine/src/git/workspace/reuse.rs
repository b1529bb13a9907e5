//! Large blobs copied into the disposable repository as the user's pack stores them (DESIGN §5 row
//! 23). `git pack-objects` copies a stored object too, but checks its CRC with zlib's and hashes the
//! new pack with collision detection: about 5 s of processor time for a 1 GiB blob, on top of the
//! copy. For each blob of at least [`REUSED_FROM`] bytes (and below `partial::LEFT_OUT_FROM`, past
//! which the disposable repository holds no copy at all) stet finds the entry through the pack's
//! index, checks that it is a whole blob (not a delta) of the size its header gave and no longer
//! than any zlib stream of that size, and copies its compressed bytes through a fixed buffer into a
//! pack of its own, checking the CRC the index records. A blob that is loose, stored as a delta, in
//! another object store, or in a pack whose index cannot be read is left to `git pack-objects`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use git2::Oid;
use rustix::fs::{FileType, Mode, OFlags};

use super::{Context, Result};
use crate::git::pack::PackWriter;

/// Blobs from this size on are copied by stet; smaller ones cost `git pack-objects` little.
pub(super) const REUSED_FROM: u64 = 1 << 20;

/// The buffer a copied entry goes through: small enough for the processor's cache, where the copy,
/// its SHA-1 and its CRC-32 read it.
const COPY_BUFFER: usize = 256 << 10;

/// How often waiting for the copy asks the dispatch's stop.
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The index's header and fan-out table.
const INDEX_HEADER: u64 = 8 + 256 * 4;

/// Pack index entries read in one go while looking for where an entry ends.
const OFFSETS_READ: usize = 16 << 10;

/// A blob and its size.
type BlobSize = (Oid, u64);

/// One entry of a user's pack to copy.
struct Stored {
    id: Oid,
    offset: u64,
    length: u64,
    crc: u32,
}

/// The entries to copy out of one pack.
struct PackEntries {
    pack: File,
    entries: Vec<Stored>,
}

/// What stet copies itself, pack by pack.
pub(super) struct Reuse {
    packs: Vec<PackEntries>,
}

/// Sorts `blobs` (id and size) into the entries stet copies and the ids left to `git pack-objects`.
/// Nothing here fails: whatever cannot be located for certain is left to git.
pub(super) fn locate(objects: &Path, blobs: Vec<(Oid, u64)>) -> (Reuse, Vec<Oid>) {
    let (mut wanted, mut left): (Vec<BlobSize>, Vec<BlobSize>) = blobs
        .into_iter()
        .partition(|(_, size)| *size >= REUSED_FROM);
    let mut packs = Vec::new();
    if !wanted.is_empty() {
        for index in pack_indexes(&objects.join("pack")) {
            if wanted.is_empty() {
                break;
            }
            if let Some(found) = in_pack(&index, &mut wanted) {
                packs.push(found);
            }
        }
    }
    left.append(&mut wanted);
    let left = left.into_iter().map(|(id, _)| id).collect();
    (Reuse { packs }, left)
}

impl Reuse {
    /// How many entries stet copies.
    pub(super) fn count(&self) -> usize {
        self.packs.iter().map(|pack| pack.entries.len()).sum()
    }

    /// Starts copying the entries into one new pack in `pack_directory`, on a thread of its own.
    pub(super) fn start(self, pack_directory: PathBuf) -> CopyJob {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = std::thread::spawn(move || self.copy(&pack_directory, &stopped));
        CopyJob { handle, stop }
    }

    fn copy(self, pack_directory: &Path, stop: &AtomicBool) -> io::Result<()> {
        let mut writer = PackWriter::create(pack_directory, self.count())?;
        let mut buffer = vec![0; COPY_BUFFER];
        for pack in &self.packs {
            for entry in &pack.entries {
                writer.copy_entry(
                    entry.id,
                    &pack.pack,
                    entry.offset..entry.offset + entry.length,
                    entry.crc,
                    &mut buffer,
                    stop,
                )?;
            }
        }
        writer.finish()
    }
}

/// The copy running beside the checkout.
pub(super) struct CopyJob {
    handle: JoinHandle<io::Result<()>>,
    stop: Arc<AtomicBool>,
}

impl CopyJob {
    /// Stops the copy (the checkout failed); its temporary pack is removed.
    pub(super) fn abort(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }

    /// Waits for the pack to be written, asking the dispatch's stop every [`STOP_POLL`]: a stop
    /// ends the copy (a pack it had not finished is removed; the workspace goes with the dispatch).
    pub(super) fn finish(self, context: &Context<'_>) -> Result<()> {
        loop {
            if let Err(stopped) = context.stop_point() {
                self.abort();
                return Err(stopped);
            }
            if self.handle.is_finished() {
                break;
            }
            std::thread::sleep(STOP_POLL);
        }
        self.handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            .map_err(|source| context.io("copying the large blobs of", source))
    }
}

/// The pack indexes of an object store's `pack` directory, in name order.
fn pack_indexes(directory: &Path) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut indexes: Vec<PathBuf> = listing
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|extension| extension == "idx")
                && path
                    .file_name()
                    .is_some_and(|name| name.as_encoded_bytes().starts_with(b"pack-"))
        })
        .collect();
    indexes.sort();
    indexes
}

/// A regular file opened for reading, never through a link, never waiting on a FIFO.
fn open_regular(path: &Path) -> Option<(File, u64)> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    Some((File::from(fd), u64::try_from(stat.st_size).ok()?))
}

fn read_u32(file: &File, at: u64) -> Option<u32> {
    let mut bytes = [0; 4];
    file.read_exact_at(&mut bytes, at).ok()?;
    Some(u32::from_be_bytes(bytes))
}

fn read_u64(file: &File, at: u64) -> Option<u64> {
    let mut bytes = [0; 8];
    file.read_exact_at(&mut bytes, at).ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// One version 2 pack index and the pack beside it.
struct PackIndex {
    index: File,
    count: u64,
    fanout: Vec<u32>,
    pack: File,
    pack_size: u64,
}

impl PackIndex {
    fn open(index_path: &Path) -> Option<PackIndex> {
        let (index, index_size) = open_regular(index_path)?;
        let mut header = vec![0; INDEX_HEADER as usize];
        index.read_exact_at(&mut header, 0).ok()?;
        if header[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
            return None;
        }
        let fanout: Vec<u32> = header[8..]
            .chunks_exact(4)
            .map(|bytes| u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            .collect();
        if fanout.windows(2).any(|pair| pair[0] > pair[1]) {
            return None;
        }
        let count = u64::from(*fanout.last()?);
        // Names, CRCs and 32-bit offsets, then the two checksums at least.
        if index_size < INDEX_HEADER + count * 28 + 40 {
            return None;
        }
        let (pack, pack_size) = open_regular(&index_path.with_extension("pack"))?;
        let mut pack_header = [0; 8];
        pack.read_exact_at(&mut pack_header, 0).ok()?;
        let known_version = pack_header[4..] == [0, 0, 0, 2] || pack_header[4..] == [0, 0, 0, 3];
        if pack_header[..4] != *b"PACK" || !known_version || pack_size < 12 + 20 {
            return None;
        }
        Some(PackIndex {
            index,
            count,
            fanout,
            pack,
            pack_size,
        })
    }

    /// The position of `id` in the index, by binary search within its fan-out bucket.
    fn position(&self, id: Oid) -> Option<u64> {
        let first = usize::from(id.as_bytes()[0]);
        let mut low = if first == 0 {
            0
        } else {
            u64::from(self.fanout[first - 1])
        };
        let mut high = u64::from(self.fanout[first]);
        let mut name = [0; 20];
        while low < high {
            let middle = low + (high - low) / 2;
            self.index
                .read_exact_at(&mut name, INDEX_HEADER + middle * 20)
                .ok()?;
            match name.as_slice().cmp(id.as_bytes()) {
                std::cmp::Ordering::Equal => return Some(middle),
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
            }
        }
        None
    }

    fn crc(&self, position: u64) -> Option<u32> {
        read_u32(&self.index, INDEX_HEADER + self.count * 20 + position * 4)
    }

    fn offset(&self, position: u64) -> Option<u64> {
        let small = read_u32(&self.index, INDEX_HEADER + self.count * 24 + position * 4)?;
        self.resolve(small)
    }

    /// A 32-bit offset as written, or the 64-bit one it points to.
    fn resolve(&self, small: u32) -> Option<u64> {
        if small & 0x8000_0000 == 0 {
            return Some(u64::from(small));
        }
        let large = u64::from(small & 0x7fff_ffff);
        read_u64(&self.index, INDEX_HEADER + self.count * 28 + large * 8)
    }

    /// Where each entry at `starts` (sorted) ends: at the next entry of the pack, or at its
    /// trailing checksum. Every offset of the index is read once, in pieces.
    fn ends(&self, starts: &[u64]) -> Option<Vec<u64>> {
        let mut ends = vec![self.pack_size - 20; starts.len()];
        let mut raw = vec![0; OFFSETS_READ * 4];
        let table = INDEX_HEADER + self.count * 24;
        let mut done = 0_u64;
        while done < self.count {
            let take = usize::try_from(self.count - done)
                .unwrap_or(usize::MAX)
                .min(OFFSETS_READ);
            let chunk = &mut raw[..take * 4];
            self.index.read_exact_at(chunk, table + done * 4).ok()?;
            for bytes in chunk.chunks_exact(4) {
                let offset =
                    self.resolve(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))?;
                let after = starts.partition_point(|start| *start < offset);
                if let Some(before) = after.checked_sub(1) {
                    ends[before] = ends[before].min(offset);
                }
            }
            done += take as u64;
        }
        Some(ends)
    }

    /// Whether the entry at `offset`, `length` bytes long, is a whole blob of `size` bytes whose
    /// compressed form is no longer than zlib makes it.
    fn holds_blob(&self, offset: u64, length: u64, size: u64) -> bool {
        let mut header = [0; 16];
        let readable = usize::try_from(length).unwrap_or(usize::MAX).min(16);
        if readable == 0
            || self
                .pack
                .read_exact_at(&mut header[..readable], offset)
                .is_err()
        {
            return false;
        }
        const BLOB: u8 = 3;
        if (header[0] >> 4) & 0x07 != BLOB {
            return false;
        }
        let mut stored = u64::from(header[0] & 0x0f);
        let mut shift = 4;
        let mut used = 1;
        let mut more = header[0] & 0x80 != 0;
        while more {
            let Some(byte) = header[..readable].get(used) else {
                return false;
            };
            if shift > 57 {
                return false;
            }
            stored |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            used += 1;
            more = byte & 0x80 != 0;
        }
        // zlib's own bound for a stream of `size` bytes, with room for a header and checksum.
        let bound = size + (size >> 12) + (size >> 14) + (size >> 25) + 64;
        stored == size && length > used as u64 && length - (used as u64) <= bound
    }
}

/// The entries of `wanted` that the pack at `index_path` holds as whole blobs; each found is taken
/// out of `wanted`.
fn in_pack(index_path: &Path, wanted: &mut Vec<(Oid, u64)>) -> Option<PackEntries> {
    let index = PackIndex::open(index_path)?;
    let mut found = Vec::new();
    let mut rest = Vec::new();
    for (id, size) in wanted.drain(..) {
        let located = index
            .position(id)
            .and_then(|position| Some((index.offset(position)?, index.crc(position)?)));
        match located {
            Some((offset, crc)) if offset >= 12 && offset < index.pack_size - 20 => {
                found.push((id, size, offset, crc));
            }
            _ => rest.push((id, size)),
        }
    }
    if found.is_empty() {
        *wanted = rest;
        return None;
    }
    found.sort_by_key(|(_, _, offset, _)| *offset);
    let starts: Vec<u64> = found.iter().map(|(_, _, offset, _)| *offset).collect();
    let Some(ends) = index.ends(&starts) else {
        rest.extend(found.into_iter().map(|(id, size, _, _)| (id, size)));
        *wanted = rest;
        return None;
    };
    let mut entries = Vec::new();
    for ((id, size, offset, crc), end) in found.into_iter().zip(ends) {
        let length = end.saturating_sub(offset);
        if index.holds_blob(offset, length, size) {
            entries.push(Stored {
                id,
                offset,
                length,
                crc,
            });
        } else {
            rest.push((id, size));
        }
    }
    *wanted = rest;
    if entries.is_empty() {
        return None;
    }
    Some(PackEntries {
        pack: index.pack,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(repository: &Path, args: &[&str]) -> String {
        let output = Command::new("git")
            .arg("-C")
            .arg(repository)
            .args(["-c", "user.name=t", "-c", "user.email=t@stet.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// Lines of text, `lines` of them, the `changed`th one different.
    fn text(lines: usize, changed: usize) -> Vec<u8> {
        (0..lines)
            .map(|line| {
                if line == changed {
                    format!("this line was changed {line}\n")
                } else {
                    format!("line {line} of a large file that compresses well\n")
                }
            })
            .collect::<String>()
            .into_bytes()
    }

    /// A repository with the given files committed and packed as `git gc` packs them.
    fn packed(files: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, Vec<(Oid, u64)>) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"]);
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "files"]);
        git(dir.path(), &["gc", "-q", "--aggressive"]);
        let blobs = files
            .iter()
            .map(|(name, content)| {
                let id = git(dir.path(), &["rev-parse", &format!("HEAD:{name}")]);
                (Oid::from_str(&id).unwrap(), content.len() as u64)
            })
            .collect();
        (dir, blobs)
    }

    #[test]
    fn a_large_whole_blob_is_copied_compressed_and_the_rest_left_to_git() {
        let large = text(60_000, usize::MAX);
        let (dir, blobs) = packed(&[("large.txt", large.clone()), ("small.txt", text(3, 1))]);
        let (reuse, left) = locate(&dir.path().join(".git/objects"), blobs.clone());
        assert_eq!(reuse.count(), 1);
        assert_eq!(left, vec![blobs[1].0], "the small blob goes to git");
        let stored = &reuse.packs[0].entries[0];
        assert!(
            stored.length < large.len() as u64 / 10,
            "{} bytes copied for {}: the compressed form, not the content",
            stored.length,
            large.len()
        );

        let target = tempfile::tempdir().unwrap();
        git(target.path(), &["init", "-q", "--bare"]);
        let job = reuse.start(target.path().join("objects/pack"));
        job.finish(&Context {
            repository: dir.path(),
            base: &stet_sanitize::branch::CommitSha::parse(&"0".repeat(40)).unwrap(),
            destination: target.path(),
            stopped: &|| false,
        })
        .unwrap();
        let id = blobs[0].0.to_string();
        let copied = Command::new("git")
            .arg("-C")
            .arg(target.path())
            .args(["cat-file", "blob", &id])
            .output()
            .unwrap();
        assert!(copied.status.success(), "{copied:?}");
        assert_eq!(copied.stdout, large);
        git(target.path(), &["fsck", "--full", "--no-dangling"]);
        let pack = std::fs::read_dir(target.path().join("objects/pack"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.extension().is_some_and(|e| e == "idx"))
            .unwrap();
        git(target.path(), &["verify-pack", pack.to_str().unwrap()]);
    }

    #[test]
    fn a_blob_stored_as_a_delta_or_missing_is_left_to_git() {
        let (dir, blobs) = packed(&[("one.txt", text(60_000, 10)), ("two.txt", text(60_000, 20))]);
        let mut missing = blobs.clone();
        missing.push((Oid::from_str(&"ab".repeat(20)).unwrap(), 2 << 20));
        let (reuse, left) = locate(&dir.path().join(".git/objects"), missing);
        assert_eq!(reuse.count(), 1, "one of the two is a delta of the other");
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.contains(&Oid::from_str(&"ab".repeat(20)).unwrap()));
    }

    #[test]
    fn a_copy_whose_crc_differs_from_the_index_fails_and_leaves_no_pack() {
        let large = text(60_000, usize::MAX);
        let (dir, blobs) = packed(&[("large.txt", large)]);
        let (mut reuse, _) = locate(&dir.path().join(".git/objects"), blobs);
        reuse.packs[0].entries[0].crc ^= 1;
        let target = tempfile::tempdir().unwrap();
        let error = reuse
            .copy(target.path(), &AtomicBool::new(false))
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_stop_ends_the_wait_for_the_copy() {
        let large = text(60_000, usize::MAX);
        let (dir, blobs) = packed(&[("large.txt", large)]);
        let (reuse, _) = locate(&dir.path().join(".git/objects"), blobs);
        assert_eq!(reuse.count(), 1);
        let target = tempfile::tempdir().unwrap();
        let job = reuse.start(target.path().to_owned());
        let error = job
            .finish(&Context {
                repository: dir.path(),
                base: &stet_sanitize::branch::CommitSha::parse(&"0".repeat(40)).unwrap(),
                destination: target.path(),
                stopped: &|| true,
            })
            .unwrap_err();
        assert!(
            matches!(error, super::super::WorkspaceError::Stopped { .. }),
            "{error}"
        );
    }
}
