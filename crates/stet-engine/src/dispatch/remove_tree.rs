//! Removes a directory tree the agent wrote (a workspace, an outputs directory) without ever
//! following a link, whatever the agent did to it: directories it made read-only or unreadable are
//! opened up through their descriptor, and a tree deeper than the open-file limit is taken apart a
//! bounded number of levels at a time, so no agent can make its files outlive the dispatch.
//!
//! Everything goes through descriptors (`openat`, `unlinkat`, `renameat` with `O_NOFOLLOW`), never
//! through a path below the top: a link the agent swaps in mid-removal is unlinked, not followed.
//! At most [`MAX_OPEN_LEVELS`] directories are open at once; a subtree below that depth is moved up
//! to the top directory under a fresh name and removed on a later pass.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
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
    let top = match open_child(rustix::fs::CWD, path.as_os_str()) {
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
                let fresh = unused_name(top, moved)?;
                rustix::fs::renameat(dir, &name, top, &fresh)?;
                again = true;
                continue;
            }
            match open_child(dir.as_fd(), &name) {
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

/// A name nothing in `top` has, for a subtree moved up into it: the agent may have left entries
/// named as earlier removals named theirs, and moving a directory onto one fails (onto a file, a link
/// or a directory that is not empty) or replaces it (an empty directory). Nothing else writes the
/// tree while it is removed.
fn unused_name(top: &OwnedFd, moved: &mut u64) -> io::Result<OsString> {
    loop {
        *moved += 1;
        let fresh = OsString::from(format!(".stet-removing-{moved}"));
        match rustix::fs::statat(top, &fresh, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Ok(fresh),
            Ok(_) => {}
            Err(errno) => return Err(errno.into()),
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

/// Opens the directory `name` in `dir` (or the top of the tree, `dir` being the working directory),
/// first opening up one the agent made unreadable.
fn open_child(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
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

    /// The attack: the agent leaves, at the top of its tree, entries named as the removal names the
    /// subtrees it moves up (`.stet-removing-<n>`: a file, a link, a directory that is not empty),
    /// beside trees deeper than the removal keeps open: moving one up onto such a name fails, the
    /// same way on every retry, and the agent's files outlive the dispatch and every sweep.
    #[test]
    fn entries_named_like_the_removals_own_do_not_stop_a_deep_tree_being_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        std::fs::create_dir(&root).unwrap();
        let top = std::fs::File::open(&root).unwrap();
        let trees = 16;
        for tree in 1..=trees {
            let name = format!("deep-{tree}");
            rustix::fs::mkdirat(&top, name.as_str(), Mode::RWXU).unwrap();
            let mut at = std::fs::File::from(
                rustix::fs::openat(&top, name.as_str(), OFlags::DIRECTORY, Mode::empty()).unwrap(),
            );
            for _ in 0..MAX_OPEN_LEVELS + 4 {
                rustix::fs::mkdirat(&at, "d", Mode::RWXU).unwrap();
                at = std::fs::File::from(
                    rustix::fs::openat(&at, "d", OFlags::DIRECTORY, Mode::empty()).unwrap(),
                );
            }
            // Interleaved with the trees, so whichever order the directory lists them in, some
            // tree is moved up before the entry holding its name is removed.
            let taken = format!(".stet-removing-{tree}");
            match tree % 3 {
                0 => std::fs::write(root.join(&taken), "agent").unwrap(),
                1 => std::os::unix::fs::symlink("/etc", root.join(&taken)).unwrap(),
                _ => {
                    std::fs::create_dir(root.join(&taken)).unwrap();
                    std::fs::write(root.join(&taken).join("inside"), "agent").unwrap();
                }
            }
        }
        drop(top);

        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert!(
            Path::new("/etc/passwd").exists(),
            "the link target is untouched"
        );
    }

    /// Runs `act` on a thread of its own without root's permission overrides (dropped from that
    /// thread alone; an ordinary account has none), so it meets file modes as stet run by an ordinary
    /// account does.
    fn as_an_ordinary_account<T: Send + 'static>(act: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
            let mut sets = capabilities(None).unwrap();
            sets.effective
                .remove(CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH);
            set_capabilities(None, sets).unwrap();
            act()
        })
        .join()
        .unwrap()
    }

    /// The attack: run as an ordinary account, stet gives the sandbox that account's uid, so the
    /// agent owns the top of its workspace (the mount point) and may take every permission off it:
    /// the removal could then open neither it nor anything in it, on every retry.
    #[test]
    fn a_top_directory_the_agent_made_unreadable_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        std::fs::create_dir_all(root.join("inside")).unwrap();
        std::fs::write(root.join("inside/f"), "agent").unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o000)).unwrap();

        let removing = root.clone();
        let removed = as_an_ordinary_account(move || remove_tree(&removing));
        removed.unwrap();
        assert!(
            std::fs::symlink_metadata(&root).is_err(),
            "the tree is still there"
        );
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
