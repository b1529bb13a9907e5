//! The files stet keeps for a user are that user's alone: every directory it makes in its state is
//! mode 0700 and every file 0600, whatever the umask. Logs, run records, review records, the journal
//! and dispatch directories all go through here, so no other account on the machine can read a
//! transcript, a diff or a journal of credentials, and no umask can make them so.
//!
//! Modes are set explicitly after creation (a umask only ever takes bits away, and a strict one
//! such as 0277 would leave stet unable to use its own directory), and an existing directory or file
//! of stet's that an older version made readable to others is tightened when it is next used.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of every directory stet makes in its state.
pub const DIRECTORY_MODE: u32 = 0o700;
/// The mode of every file stet writes in its state.
pub const FILE_MODE: u32 = 0o600;

/// A directory that could not be made (or made private): the one that failed, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", .path.display())]
pub struct PrivateDirError {
    /// The directory that failed: `path` itself or one of the parents being made.
    pub path: PathBuf,
    /// What the filesystem said.
    #[source]
    pub source: io::Error,
}

/// Creates `path` and any missing parents, each new one mode 0700, and makes `path` itself 0700
/// (tightening it if it existed).
pub fn create_dir_all(path: &Path) -> Result<(), PrivateDirError> {
    let failed = |dir: &Path| {
        let path = dir.to_owned();
        move |source| PrivateDirError { path, source }
    };
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(dir) = current {
        if std::fs::symlink_metadata(dir).is_ok() {
            break;
        }
        missing.push(dir);
        current = dir.parent();
    }
    for dir in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(DIRECTORY_MODE).create(dir) {
            Ok(()) => set_mode(dir, DIRECTORY_MODE).map_err(failed(dir))?,
            // Made meanwhile by another process (two dispatches starting at once).
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(failed(dir)(error)),
        }
    }
    tighten(path, DIRECTORY_MODE).map_err(failed(path))
}

/// Options that create a file mode 0600 (for `create_new`, `append` or `truncate` as the caller
/// adds); the mode is made exact by [`seal`] once the file is open.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Makes an open file exactly mode 0600 (the umask may have taken bits, or the file existed with
/// others).
pub fn seal(file: &File) -> io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
}

/// Writes `contents` to `path` (created or truncated), mode 0600.
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    seal(&file)?;
    file.write_all(contents)
}

/// Makes an existing directory or file exactly `mode` when it is not already.
fn tighten(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    if metadata.mode() & 0o7777 != mode {
        set_mode(path, mode)?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn every_directory_made_is_private_and_an_open_one_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_all(&deep).unwrap();
        for made in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&dir.path().join(made)), 0o700, "{made}");
        }
        std::fs::set_permissions(&deep, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir_all(&deep).unwrap();
        assert_eq!(mode(&deep), 0o700);
        assert_ne!(
            mode(dir.path()),
            0o000,
            "an existing parent is left as it is"
        );
    }

    #[test]
    fn files_are_private_even_when_they_existed_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("record.json");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&file, b"new").unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        let fresh = dir.path().join("fresh");
        let opened = options()
            .append(true)
            .create_new(true)
            .open(&fresh)
            .unwrap();
        seal(&opened).unwrap();
        assert_eq!(mode(&fresh), 0o600);
    }
}
