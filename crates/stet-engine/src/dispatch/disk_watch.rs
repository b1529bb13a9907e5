//! Holds a dispatch's disk use to its bound while the agent runs, the base's files counted from the
//! first byte. The workspace and outputs are bind
//! mounts of host directories, which no engine option caps on Docker 20.10 or 28; so stet bounds them
//! itself: `RLIMIT_FSIZE` in the sandbox stops any one file at the bound, and this watch looks at the
//! filesystem four times a second. When free space has fallen by more than the bound since the start
//! it measures the two directories (a walk, only then), and when they have grown past the bound, or
//! free space is under the floor, the dispatch ends `failed` with the figures.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType};

use crate::human::shown_bytes;
use crate::untrusted_tree::{self, Listing};

/// How often the filesystem is looked at.
const INTERVAL: Duration = Duration::from_millis(250);

/// The disk bound of a dispatch whose import takes at most `import_max_total_bytes` of content:
/// twice that, and at least 256 MiB more, so that what an import would take always fits with the
/// filesystem's block overhead (many small files take more blocks than bytes).
pub fn bound_for(import_max_total_bytes: u64) -> u64 {
    import_max_total_bytes
        .saturating_mul(2)
        .max(import_max_total_bytes.saturating_add(256 * 1024 * 1024))
}

/// The disk bound of a dispatch whose workspace was materialized from a base of `base_bytes` in
/// `base_entries` entries: [`bound_for`] the import, plus the base's files twice (in the workspace,
/// and in its disposable repository's pack, which can hold them uncompressible) and a block for each
/// entry.
pub fn bound_with_base(import_max_total_bytes: u64, base_bytes: u64, base_entries: u64) -> u64 {
    bound_for(import_max_total_bytes)
        .saturating_add(base_bytes.saturating_mul(2))
        .saturating_add(base_entries.saturating_mul(4096))
}

/// The free space a dispatch starts with at least and never takes the filesystem below.
pub const DEFAULT_FLOOR_BYTES: u64 = 256 * 1024 * 1024;

/// The most entries one measuring walk visits; past it the directories count as over the bound
/// (more than an import would take anyway).
const MAX_WALKED: u64 = 4_000_000;

/// The most bytes of subdirectory names one measuring walk holds at once (the names of each
/// directory's subdirectories, kept while they are walked, on every level of the path walked), each
/// counted with what holding it costs ([`HELD_PER_NAME`]): an agent's directory of a million
/// subdirectories would otherwise cost the host a quarter of a GiB with 255-byte names, and some
/// 80 MiB with one-byte names. Past it the measurement is incomplete.
const MAX_HELD_NAME_BYTES: usize = 8 << 20;

/// What holding one name costs beyond its bytes: its allocation's header and rounding, and its slot
/// in the list (a `CString`'s box, up to twice over while the list grows).
const HELD_PER_NAME: usize = 64;

/// How many directories deep one measuring walk goes (as deep as the import does); a deeper tree is
/// measured as incomplete, which, with free space falling past the bound, ends the dispatch.
const MAX_DEPTH: usize = 256;

/// What can go wrong looking at the disk.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum DiskWatchError {
    #[error("cannot read the free space of the filesystem holding {path}: {source}")]
    Statvfs {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the filesystem holding {path} has {free} free, under the floor of {floor} a dispatch keeps free; free some space and dispatch again"
    )]
    UnderFloor {
        path: PathBuf,
        free: String,
        floor: String,
    },
    #[error(
        "the workspace and outputs already hold {held}, past the dispatch's disk bound of {bound}"
    )]
    OverBound { held: String, bound: String },
}

/// A dispatch's disk bound, watched.
#[derive(Debug)]
pub struct DiskWatch {
    /// The directories the agent writes (workspace, outputs), on one filesystem.
    places: Vec<PathBuf>,
    /// How much they may hold, what they held at the start included.
    limit_bytes: u64,
    floor_bytes: u64,
    free_at_start: u64,
    used_at_start: u64,
}

impl DiskWatch {
    /// Measures `places` and the free space of their filesystem; refuses to start under the floor, or
    /// with `places` already holding more than `limit_bytes`.
    pub fn start(
        places: Vec<PathBuf>,
        limit_bytes: u64,
        floor_bytes: u64,
    ) -> Result<DiskWatch, DiskWatchError> {
        let first = places
            .first()
            .cloned()
            .unwrap_or_else(|| PathBuf::from("/"));
        let stat = statvfs(&first)?;
        let free_at_start = free_bytes(&stat);
        if free_at_start < floor_bytes || short_of_inodes(&stat).is_some() {
            return Err(DiskWatchError::UnderFloor {
                path: first,
                free: shown_bytes(free_at_start),
                floor: shown_bytes(floor_bytes),
            });
        }
        let used_at_start: u64 = places.iter().map(|place| allocated(place).bytes).sum();
        if used_at_start > limit_bytes {
            return Err(DiskWatchError::OverBound {
                held: shown_bytes(used_at_start),
                bound: shown_bytes(limit_bytes),
            });
        }
        Ok(DiskWatch {
            places,
            limit_bytes,
            floor_bytes,
            free_at_start,
            used_at_start,
        })
    }

    /// Resolves with the reason the dispatch must end once a bound is crossed; never otherwise.
    pub async fn breach(&self) -> String {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Some(reason) = self.look().await {
                return reason;
            }
        }
    }

    /// One look: the reason to stop, if there is one.
    async fn look(&self) -> Option<String> {
        let first = self.places.first()?;
        let stat = match statvfs(first) {
            Ok(stat) => stat,
            Err(error) => return Some(error.to_string()),
        };
        let free = free_bytes(&stat);
        if free < self.floor_bytes {
            return Some(format!(
                "the filesystem holding the dispatch has {} free, under the floor of {} a dispatch keeps free",
                shown_bytes(free),
                shown_bytes(self.floor_bytes)
            ));
        }
        if let Some(inodes) = short_of_inodes(&stat) {
            return Some(format!(
                "the filesystem holding the dispatch has {inodes} inodes free, under the floor a dispatch keeps free"
            ));
        }
        let room = self.limit_bytes.saturating_sub(self.used_at_start);
        if self.free_at_start.saturating_sub(free) <= room {
            return None;
        }
        // Free space fell by more than the bound: measure whether the agent is why.
        self.measured_breach().await
    }

    /// The places measured against the bound: the reason to stop when they hold more than it (what
    /// they held at the start included), or could not be measured whole.
    async fn measured_breach(&self) -> Option<String> {
        let places = self.places.clone();
        let measured = tokio::task::spawn_blocking(move || {
            places.iter().map(|place| allocated(place)).fold(
                Measured {
                    bytes: 0,
                    complete: true,
                },
                Measured::plus,
            )
        })
        .await
        .unwrap_or(Measured {
            bytes: u64::MAX,
            complete: false,
        });
        let grown = measured.bytes.saturating_sub(self.used_at_start);
        if measured.bytes > self.limit_bytes {
            return Some(format!(
                "the agent's workspace and outputs grew by {} to {}, past the dispatch's disk bound of {} (derived from import.max_total_bytes and the base's size, whose files count from the first byte)",
                shown_bytes(grown),
                shown_bytes(measured.bytes),
                shown_bytes(self.limit_bytes)
            ));
        }
        if !measured.complete {
            return Some(format!(
                "the agent's workspace and outputs could not be measured whole while free space fell by more than the dispatch's disk bound of {}",
                shown_bytes(self.limit_bytes.saturating_sub(self.used_at_start))
            ));
        }
        None
    }
}

/// The free space a filesystem has for an unprivileged writer.
fn free_bytes(stat: &rustix::fs::StatVfs) -> u64 {
    stat.f_bavail.saturating_mul(stat.f_frsize)
}

fn statvfs(path: &Path) -> Result<rustix::fs::StatVfs, DiskWatchError> {
    rustix::fs::statvfs(path).map_err(|errno| DiskWatchError::Statvfs {
        path: path.to_owned(),
        source: errno.into(),
    })
}

/// The free inodes of a filesystem when it is short of them (empty files take inodes, not blocks):
/// fewer free than a twentieth of them, or than 65,536, whichever is less. `None` otherwise, and on
/// a filesystem that counts no inodes.
fn short_of_inodes(stat: &rustix::fs::StatVfs) -> Option<u64> {
    if stat.f_files == 0 {
        return None;
    }
    let floor = (stat.f_files / 20).min(65_536);
    (stat.f_favail < floor).then_some(stat.f_favail)
}

/// What a walk measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Bytes allocated on disk (sparse files count what they hold, preallocated ones all of it).
    bytes: u64,
    /// Every entry was read.
    complete: bool,
}

impl Measured {
    fn plus(self, other: Measured) -> Measured {
        Measured {
            bytes: self.bytes.saturating_add(other.bytes),
            complete: self.complete && other.complete,
        }
    }
}

/// The disk space allocated under `root`, links not followed. The agent is still running while this
/// walks, so every directory is opened relative to its parent without following links
/// (`untrusted_tree`): a directory swapped for a link between its listing and its opening is refused,
/// never walked into. A tree deeper than [`MAX_DEPTH`] is measured as incomplete.
fn allocated(root: &Path) -> Measured {
    allocated_holding(root, MAX_HELD_NAME_BYTES)
}

/// [`allocated`], holding at most `held_bound` bytes of names at once.
fn allocated_holding(root: &Path, held_bound: usize) -> Measured {
    let mut walk = Measuring {
        measured: Measured {
            bytes: 0,
            complete: true,
        },
        walked: 0,
        held: 0,
        held_bound,
    };
    match untrusted_tree::open_root(root) {
        Ok(top) => walk.directory(top, 0),
        Err(_) => walk.measured.complete = false,
    }
    if walk.walked > MAX_WALKED {
        return Measured {
            bytes: u64::MAX,
            complete: false,
        };
    }
    walk.measured
}

/// One measuring walk: what it has found so far and how many entries it has visited.
struct Measuring {
    measured: Measured,
    walked: u64,
    /// The bytes of the subdirectory names held now, on every level (at most `held_bound`).
    held: usize,
    /// [`MAX_HELD_NAME_BYTES`], but in tests.
    held_bound: usize,
}

impl Measuring {
    /// Adds what `directory` (at `depth` below the top) and everything under it take; one descriptor
    /// per level stays open while its subdirectories are walked.
    fn directory(&mut self, directory: OwnedFd, depth: usize) {
        let held = self.held;
        self.walk_directory(directory, depth);
        self.held = held;
    }

    /// [`Measuring::directory`], its subdirectories' names counted in `held` until it returns.
    fn walk_directory(&mut self, directory: OwnedFd, depth: usize) {
        let Ok(parent) = rustix::io::fcntl_dupfd_cloexec(&directory, 0) else {
            self.measured.complete = false;
            return;
        };
        let Ok(listing) = Listing::new(directory) else {
            self.measured.complete = false;
            return;
        };
        let mut subdirectories = Vec::new();
        for entry in listing {
            self.walked += 1;
            if self.walked > MAX_WALKED {
                return;
            }
            let Ok(entry) = entry else {
                self.measured.complete = false;
                continue;
            };
            let Ok(stat) = rustix::fs::statat(&parent, &entry.name, AtFlags::SYMLINK_NOFOLLOW)
            else {
                self.measured.complete = false;
                continue;
            };
            let blocks = u64::try_from(stat.st_blocks).unwrap_or(0);
            self.measured.bytes = self
                .measured
                .bytes
                .saturating_add(blocks.saturating_mul(512));
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
                self.held = self
                    .held
                    .saturating_add(entry.name.as_bytes().len() + HELD_PER_NAME);
                if self.held > self.held_bound {
                    self.measured.complete = false;
                    return;
                }
                subdirectories.push(entry.name);
            }
        }
        for name in subdirectories {
            if depth + 1 > MAX_DEPTH {
                self.measured.complete = false;
                return;
            }
            match untrusted_tree::open_directory(&parent, &name) {
                Ok(child) => self.directory(child, depth + 1),
                Err(_) => self.measured.complete = false,
            }
            if self.walked > MAX_WALKED {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The attack: while the disk watch measures, the agent (still running) swaps a directory it
    /// listed for a link to a host directory; the walk lists by path, so it follows the link and
    /// measures what lies outside the tree.
    #[test]
    fn a_directory_swapped_for_a_link_mid_measure_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![1u8; 8 * 1024 * 1024]).unwrap();
        for filler in 0..64 {
            std::fs::write(dir.path().join(format!("f{filler}")), "x").unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipping = {
            let (root, target, stop) = (
                dir.path().to_owned(),
                outside.path().to_owned(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::create_dir(root.join("d"));
                    let _ = std::fs::remove_dir(root.join("d"));
                    let _ = std::os::unix::fs::symlink(&target, root.join("d"));
                    let _ = std::fs::remove_file(root.join("d"));
                }
            })
        };
        let escaped = (0..20_000).any(|_| allocated(dir.path()).bytes >= 8 * 1024 * 1024);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipping.join().unwrap();
        assert!(
            !escaped,
            "the measuring walk followed a link out of the tree"
        );
    }

    /// The names a walk holds in the tests below: 64 KiB, so that they pass it with hundreds of
    /// directories rather than the real bound's hundred thousand.
    const TEST_HELD_BOUND: usize = 64 << 10;

    /// Subdirectories whose names add up past what a walk holds make the measurement incomplete,
    /// not a host allocation the size of their names.
    #[test]
    fn subdirectory_names_past_the_held_bound_make_the_measurement_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let long = "n".repeat(250);
        let count = TEST_HELD_BOUND / (long.len() + HELD_PER_NAME) + 1;
        for index in 0..count {
            std::fs::create_dir(dir.path().join(format!("{index:06}{}", &long[6..]))).unwrap();
        }
        assert!(!allocated_holding(dir.path(), TEST_HELD_BOUND).complete);
        let within = tempfile::tempdir().unwrap();
        for index in 0..count - 2 {
            std::fs::create_dir(within.path().join(format!("{index:06}{}", &long[6..]))).unwrap();
        }
        assert!(
            allocated_holding(within.path(), TEST_HELD_BOUND).complete,
            "the control"
        );
    }

    /// Short names cost the host more than their bytes: 6-byte names, an eighth of the bound in
    /// bytes, past it once what holding each costs is counted.
    #[test]
    fn many_short_subdirectory_names_are_counted_with_what_holding_them_costs() {
        let dir = tempfile::tempdir().unwrap();
        let count = TEST_HELD_BOUND / (6 + HELD_PER_NAME) + 1;
        for index in 0..count {
            std::fs::create_dir(dir.path().join(format!("{index:06}"))).unwrap();
        }
        assert!(count * 6 < TEST_HELD_BOUND / 8);
        assert!(!allocated_holding(dir.path(), TEST_HELD_BOUND).complete);
    }

    /// A tree deeper than the walk goes is measured as incomplete, never as small.
    #[test]
    fn a_tree_deeper_than_the_walk_goes_is_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let mut deep = dir.path().to_owned();
        for _ in 0..=MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("hidden"), vec![1u8; 1024 * 1024]).unwrap();
        assert!(!allocated(dir.path()).complete);
        let control = tempfile::tempdir().unwrap();
        let mut within = control.path().to_owned();
        for _ in 0..MAX_DEPTH - 1 {
            within.push("d");
        }
        std::fs::create_dir_all(&within).unwrap();
        std::fs::write(within.join("seen"), vec![1u8; 1024 * 1024]).unwrap();
        let measured = allocated(control.path());
        assert!(measured.complete, "the control, within the depth");
        assert!(measured.bytes >= 1024 * 1024, "{}", measured.bytes);
    }

    #[test]
    fn allocated_space_counts_what_files_hold_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/b"), vec![1u8; 64 * 1024]).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![1u8; 1024 * 1024]).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let measured = allocated(dir.path());
        assert!(measured.complete);
        assert!(
            (128 * 1024..512 * 1024).contains(&measured.bytes),
            "{}",
            measured.bytes
        );
    }

    #[test]
    fn a_dispatch_does_not_start_under_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let error = DiskWatch::start(vec![dir.path().to_owned()], 1 << 30, u64::MAX).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&dir.path().display().to_string())
                && message.contains("under the floor"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn growth_past_the_bound_is_a_breach_with_its_figures() {
        let dir = tempfile::tempdir().unwrap();
        let watch = DiskWatch::start(vec![dir.path().to_owned()], 256 * 1024, 0).unwrap();
        let first = watch.look().await;
        assert!(first.is_none(), "{first:?}");
        std::fs::write(dir.path().join("fill"), vec![7u8; 2 * 1024 * 1024]).unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(20), watch.breach())
            .await
            .unwrap();
        assert!(
            reason.contains("grew by 2 MiB") && reason.contains("bound of 256 KiB"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn space_another_writer_takes_is_not_the_agents() {
        let watched = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let watch = DiskWatch::start(vec![watched.path().to_owned()], 256 * 1024, 0).unwrap();
        std::fs::write(elsewhere.path().join("fill"), vec![7u8; 4 * 1024 * 1024]).unwrap();
        rustix::fs::fsync(std::fs::File::open(elsewhere.path().join("fill")).unwrap()).unwrap();
        // Free space fell by more than the bound, but the watched directories did not grow.
        assert_eq!(watch.look().await, None);
    }

    #[tokio::test]
    async fn what_the_places_hold_at_the_start_counts_against_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base"), vec![7u8; 2 * 1024 * 1024]).unwrap();
        let error = DiskWatch::start(vec![dir.path().to_owned()], 1024 * 1024, 0).unwrap_err();
        assert!(error.to_string().contains("already hold 2 MiB"), "{error}");
        let watch = DiskWatch::start(vec![dir.path().to_owned()], 3 * 1024 * 1024, 0).unwrap();
        std::fs::write(dir.path().join("more"), vec![7u8; 2 * 1024 * 1024]).unwrap();
        rustix::fs::fsync(std::fs::File::open(dir.path().join("more")).unwrap()).unwrap();
        // Measured as a look does once free space fell past the room (which other writers on a
        // shared filesystem, freeing space, can delay but not forgo).
        let reason = watch.measured_breach().await.unwrap();
        assert!(
            reason.contains("grew by 2 MiB to 4 MiB") && reason.contains("bound of 3 MiB"),
            "{reason}"
        );
    }

    #[test]
    fn the_bound_leaves_room_for_what_an_import_takes() {
        assert_eq!(bound_with_base(1 << 30, 0, 0), 2 << 30);
        assert_eq!(
            bound_with_base(1 << 30, 1 << 20, 10),
            (2 << 30) + (2 << 20) + 40960
        );
        assert_eq!(bound_for(1 << 30), 2 << 30);
        assert_eq!(bound_for(300_000), 300_000 + (256 << 20));
        assert_eq!(bound_for(u64::MAX), u64::MAX);
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(shown_bytes(8 << 30), "8.0 GiB");
        assert_eq!(shown_bytes(512 << 20), "512 MiB");
        assert_eq!(shown_bytes(1), "1 KiB");
    }
}
