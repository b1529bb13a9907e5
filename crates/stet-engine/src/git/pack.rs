//! Writes a version 2 pack and its index without compression: every object is a zlib stream of
//! stored blocks, so writing costs a copy and three checksums (SHA-1 of the pack and of the index,
//! CRC-32 and Adler-32 of each entry) instead of a delta search and deflate. The trusted import adds
//! its new objects to the user's repository this way, all at once (docs/benchmarks.md has the
//! figures).

use std::fs::{File, Permissions};
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Writes one pack and its index into a `pack` directory of an object store. Until
/// [`PackWriter::finish`] has given them their names, both are temporary files (`tmp_pack_stet_<id>`,
/// `tmp_idx_stet_<id>`, names git's own garbage collection knows) that are removed when the writer
/// is dropped, so a pack abandoned halfway leaves nothing behind.
pub(super) struct PackWriter {
    directory: PathBuf,
    staged: Staged,
    out: BufWriter<File>,
    hash: Sha1,
    crc: u32,
    offset: u64,
    entries: Vec<Entry>,
}

/// A temporary file, removed when dropped unless it was given its final name.
struct Staged {
    path: PathBuf,
    placed: bool,
}

impl Staged {
    fn new(directory: &Path, prefix: &str) -> Staged {
        Staged {
            path: directory.join(format!("{prefix}_{}", uuid::Uuid::new_v4().simple())),
            placed: false,
        }
    }

    /// Makes the file read-only, as git keeps packs, and gives it its final name.
    fn place(mut self, name: &Path) -> io::Result<()> {
        std::fs::set_permissions(&self.path, Permissions::from_mode(0o444))?;
        std::fs::rename(&self.path, name)?;
        self.placed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl PackWriter {
    /// Starts a temporary pack in `directory` with the header of a pack of `count` objects.
    pub(super) fn create(directory: &Path, count: usize) -> io::Result<PackWriter> {
        let count = u32::try_from(count)
            .map_err(|_| io::Error::other("more objects than a pack can hold"))?;
        let staged = Staged::new(directory, "tmp_pack_stet");
        let file = File::create_new(&staged.path)?;
        let mut writer = PackWriter {
            directory: directory.to_owned(),
            out: BufWriter::with_capacity(1 << 20, file),
            staged,
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

    /// Adds an entry copied as it is stored in another pack: the bytes of `source` at `stored` (its
    /// type and size header, then its compressed data), read through `buffer`. The
    /// copy's CRC-32 must be `crc`, the one the other pack's index records, or the entry is damaged
    /// and nothing more is written. `stop` is looked at between reads.
    pub(super) fn copy_entry(
        &mut self,
        id: Oid,
        source: &File,
        stored: Range<u64>,
        crc: u32,
        buffer: &mut [u8],
        stop: &AtomicBool,
    ) -> io::Result<()> {
        let mut name = [0; 20];
        name.copy_from_slice(id.as_bytes());
        let start = self.offset;
        self.crc = 0;
        let (offset, length) = (stored.start, stored.end.saturating_sub(stored.start));
        let mut done = 0_u64;
        while done < length {
            if stop.load(Ordering::Relaxed) {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
            }
            let take = usize::try_from(length - done)
                .unwrap_or(usize::MAX)
                .min(buffer.len());
            let chunk = &mut buffer[..take];
            source.read_exact_at(chunk, offset + done)?;
            self.put(chunk)?;
            done += take as u64;
        }
        if self.crc != crc {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the packed object {id} does not match the CRC its pack index records"),
            ));
        }
        self.entries.push(Entry {
            id: name,
            crc,
            offset: start,
        });
        Ok(())
    }

    /// Ends the pack with its checksum, writes the index, and gives both their final names; the
    /// index comes last, since git sees a pack only through its index. A pack of the same name is
    /// the same bytes: when one is already there, it is kept and this one dropped.
    ///
    /// Nothing is synced to disk, like libgit2's own object writes: a crash may lose the pack, never
    /// leave an index naming objects that are not there.
    pub(super) fn finish(mut self) -> io::Result<()> {
        let checksum = std::mem::replace(&mut self.hash, Sha1::new()).finish();
        self.out.write_all(&checksum)?;
        self.out.into_inner().map_err(|error| error.into_error())?;

        let name: String = checksum.iter().map(|byte| format!("{byte:02x}")).collect();
        let pack = self.directory.join(format!("pack-{name}.pack"));
        let index = self.directory.join(format!("pack-{name}.idx"));
        if pack.exists() && index.exists() {
            return Ok(());
        }
        let staged_index = Staged::new(&self.directory, "tmp_idx_stet");
        std::fs::write(
            &staged_index.path,
            index_bytes(&mut self.entries, &checksum),
        )?;
        self.staged.place(&pack)?;
        staged_index.place(&index).inspect_err(|_| {
            let _ = std::fs::remove_file(&pack);
        })
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

/// CRC-32 (IEEE), continuing from `crc`.
pub(super) fn crc32(crc: u32, bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(crc);
    hasher.update(bytes);
    hasher.finalize()
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

/// SHA-1 (FIPS 180-4), which names packs and closes pack and index files: the checksum of bytes stet
/// wrote, not a name it trusts, so the fast hash (SHA extensions where the processor has them)
/// rather than one detecting collisions.
pub(super) struct Sha1(sha1::Sha1);

impl Sha1 {
    pub(super) fn new() -> Sha1 {
        Sha1(sha1::Digest::new())
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        sha1::Digest::update(&mut self.0, bytes);
    }

    pub(super) fn finish(self) -> [u8; 20] {
        sha1::Digest::finalize(self.0).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::Repository;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn sha1_of(chunks: &[&[u8]]) -> String {
        let mut hash = Sha1::new();
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
        assert_eq!(crc32(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(crc32(0, b"1234"), b"56789"), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        let long = vec![0xff; 100_000];
        let (mut a, mut b) = (1_u64, 0_u64);
        for byte in &long {
            a = (a + u64::from(*byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(u64::from(adler32(&long)), (b << 16) | a);
    }

    #[test]
    fn a_written_pack_reads_back_through_libgit2() {
        let dir = tempfile::tempdir().unwrap();
        let repository = Repository::init_bare(dir.path()).unwrap();
        let large: Vec<u8> = (0..150_000_u32).map(|i| (i % 253) as u8).collect();
        let contents: [&[u8]; 4] = [b"", b"small\n", &large, &[0x0f; 16]];
        let directory = repository.path().join("objects").join("pack");
        let mut writer = PackWriter::create(&directory, contents.len()).unwrap();
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

    #[test]
    fn an_abandoned_pack_leaves_nothing_and_two_writers_never_share_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = PackWriter::create(dir.path(), 1).unwrap();
        let mut second = PackWriter::create(dir.path(), 1).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        drop(first);
        second
            .add(
                Oid::hash_object(ObjectType::Blob, b"x").unwrap(),
                ObjectType::Blob,
                b"x",
            )
            .unwrap();
        drop(second);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_same_pack_written_twice_is_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let id = Oid::hash_object(ObjectType::Blob, b"same\n").unwrap();
        for _ in 0..2 {
            let mut writer = PackWriter::create(dir.path(), 1).unwrap();
            writer.add(id, ObjectType::Blob, b"same\n").unwrap();
            writer.finish().unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names[0].ends_with(".idx") && names[1].ends_with(".pack"),
            "{names:?}"
        );
    }
}
