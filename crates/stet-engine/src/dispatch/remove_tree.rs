//! Removes a directory tree the agent wrote (a workspace, an outputs directory) without ever
//! following a link, whatever the agent did to it: directories it made read-only or unreadable are
//! opened up through their descriptor, and a tree deeper than the open-file limit is taken apart a
//! bounded number of levels at a time, so no agent can make its files outlive the dispatch.
//!
//! Everything goes through descriptors (`openat`, `unlinkat`, `renameat` with `O_NOFOLLOW`), never
//! through a path below the top: a link the agent swaps in mid-removal is unlinked, not followed.
//! At most [`MAX_OPEN_LEVELS`] directories are open at once; a subtree below that depth is moved up
//! to the top directory under a fresh name and removed on a later pass.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::untrusted_tree;

/// How many directories are open at once, at most (plus the top one).
const MAX_OPEN_LEVELS: usize = 32;

/// Removes the tree at `path`: the directory and everything in it, or the file or link that is
/// there instead. A tree that is already gone is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !metadata.is_dir() {
        return ignore_gone(std::fs::remove_file(path));
    }
    let top = match open_directory(rustix::fs::CWD, path) {
        Ok(top) => top,
        Err(Errno::NOENT) => return Ok(()),
        // Swapped for a link or a file since the `lstat`: remove that instead.
        Err(Errno::LOOP | Errno::NOTDIR) => return ignore_gone(std::fs::remove_file(path)),
        Err(errno) => return Err(errno.into()),
    };
    let mut moved = 0u64;
    while empty(&top, &top, 0, &mut moved)? {}
    drop(top);
    ignore_gone(std::fs::remove_dir(path))
}

fn ignore_gone(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes everything in `dir` (at `depth` below `top`); returns whether a subtree too deep to open
/// was moved up into `top`, so another pass is needed.
fn empty(dir: &OwnedFd, top: &OwnedFd, depth: usize, moved: &mut u64) -> io::Result<bool> {
    let mut again = false;
    loop {
        let names = entries(dir)?;
        if names.is_empty() {
            return Ok(again);
        }
        for (name, kind) in names {
            if kind != FileType::Directory {
                ignore_gone(
                    rustix::fs::unlinkat(dir, &name, AtFlags::empty()).map_err(Into::into),
                )?;
                continue;
            }
            if depth + 1 >= MAX_OPEN_LEVELS {
                *moved += 1;
                let fresh = OsString::from(format!(".stet-removing-{moved}"));
                rustix::fs::renameat(dir, &name, top, &fresh)?;
                again = true;
                continue;
            }
            match open_child(dir, &name) {
                Ok(child) => {
                    again |= empty(&child, top, depth + 1, moved)?;
                    drop(child);
                    ignore_gone(
                        rustix::fs::unlinkat(dir, &name, AtFlags::REMOVEDIR).map_err(Into::into),
                    )?;
                }
                Err(Errno::NOENT) => {}
                // Swapped for something that is not a directory: unlink whatever it is now.
                Err(Errno::LOOP | Errno::NOTDIR) => ignore_gone(
                    rustix::fs::unlinkat(dir, &name, AtFlags::empty()).map_err(Into::into),
                )?,
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// The names in `dir` with their types (looked up without following links when the directory does
/// not say), a batch at a time.
fn entries(dir: &OwnedFd) -> io::Result<Vec<(OsString, FileType)>> {
    /// Enough to make progress; the caller reads again until the directory is empty.
    const BATCH: usize = 4096;
    let mut listing = Dir::read_from(dir)?;
    let mut names = Vec::new();
    while names.len() < BATCH {
        let Some(entry) = listing.next() else { break };
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsString::from_vec(name.to_vec());
        let kind = match untrusted_tree::entry_type(dir, &name, entry.file_type()) {
            Ok(kind) => kind,
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(errno.into()),
        };
        names.push((name, kind));
    }
    Ok(names)
}

fn open_directory(at: impl AsFd, path: impl rustix::path::Arg) -> rustix::io::Result<OwnedFd> {
    let directory = untrusted_tree::open_directory(at, path)?;
    make_owner_writable(&directory)?;
    Ok(directory)
}

/// Opens the directory `name` in `dir`, first opening up one the agent made unreadable.
fn open_child(dir: &OwnedFd, name: &OsString) -> rustix::io::Result<OwnedFd> {
    match open_directory(dir, name) {
        Err(Errno::ACCESS) => {
            // No read or search permission: open it by path only (no permission needed, no link
            // followed) and give its owner access back through that descriptor's own name.
            let handle = rustix::fs::openat(
                dir,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let by_descriptor =
                format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&handle));
            rustix::fs::chmod(by_descriptor.as_str(), Mode::RWXU)?;
            open_directory(dir, name)
        }
        other => other,
    }
}

/// Gives the directory's owner read, write and search permission, so its entries can be removed.
fn make_owner_writable(directory: &OwnedFd) -> rustix::io::Result<()> {
    let stat = rustix::fs::fstat(directory)?;
    let mode = Mode::from_raw_mode(stat.st_mode);
    if !mode.contains(Mode::RWXU) {
        rustix::fs::fchmod(directory, mode | Mode::RWXU)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_with_read_only_and_unreadable_directories_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        let locked = root.join("a/b");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::fs::create_dir(root.join("closed")).unwrap();
        std::fs::write(root.join("closed/inside"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link-to-etc")).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(root.join("closed"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert!(
            Path::new("/etc/passwd").exists(),
            "the link target is untouched"
        );
        remove_tree(&root).unwrap();
    }

    #[test]
    fn a_tree_far_deeper_than_the_open_levels_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("outputs");
        std::fs::create_dir(&root).unwrap();
        let mut at = std::fs::File::open(&root).unwrap();
        for level in 0..1200 {
            rustix::fs::mkdirat(&at, "d", Mode::RWXU).unwrap();
            if level % 300 == 0 {
                rustix::fs::openat(&at, "f", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR).unwrap();
            }
            at = std::fs::File::from(
                rustix::fs::openat(&at, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
                    .unwrap(),
            );
        }
        drop(at);
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_link_or_a_file_in_place_of_the_tree_is_removed_and_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "x").unwrap();
        let link = dir.path().join("workspace");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(std::fs::symlink_metadata(&link).is_err());
        assert!(target.join("keep").exists());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        remove_tree(&file).unwrap();
        assert!(!file.exists());
    }
}
