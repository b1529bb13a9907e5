//! The form's only way onto the disk: a directory under the repository opened one component at a
//! time from the repository's root, none of them followed when it is a link, and files created and
//! removed relative to it. A link that appears under the repository while the theater runs (a `git
//! pull` in another terminal) then makes a save fail with a message, instead of writing wherever it
//! points (DESIGN §5 row 16).

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Why a directory under the repository could not be opened or written in. Every message names the
/// path.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum BeneathError {
    #[error(
        "{}: not written: it is a link, and stet writes nothing through a link under the repository (a link could point at any directory of yours)",
        path.display()
    )]
    Link { path: PathBuf },

    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

/// A directory under a repository, open without any link followed below the repository's root.
#[derive(Debug)]
pub(super) struct Beneath {
    directory: OwnedFd,
    path: PathBuf,
}

impl Beneath {
    /// Opens `root` (the repository, as the person named it), then each of `components` inside the
    /// previous one, making a missing one; a component that is a link is [`BeneathError::Link`].
    pub(super) fn open(root: &Path, components: &[&str]) -> Result<Beneath, BeneathError> {
        let directory = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|error| io_error("open the repository", root, error))?;
        let mut beneath = Beneath {
            directory,
            path: root.to_owned(),
        };
        for component in components {
            beneath = beneath.child(component)?;
        }
        Ok(beneath)
    }

    /// The directory `name` inside this one, made when missing, opened without following a link.
    fn child(self, name: &str) -> Result<Beneath, BeneathError> {
        let path = self.path.join(name);
        match rustix::fs::mkdirat(&self.directory, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(error) => return Err(io_error("create the directory", &path, error)),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.directory, name, flags, Mode::empty()) {
            Ok(directory) => Ok(Beneath { directory, path }),
            Err(error) if self.is_link(name) => {
                tracing::debug!(path = %path.display(), %error, "a link under the repository");
                Err(BeneathError::Link { path })
            }
            Err(error) => Err(io_error("open the directory", &path, error)),
        }
    }

    fn is_link(&self, name: &str) -> bool {
        rustix::fs::statat(&self.directory, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
    }

    /// The directory's path, for messages.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the file `name` in this directory for writing; an existing name, a link included, is
    /// `AlreadyExists` and is left as it is.
    pub(super) fn create_new(&self, name: &str) -> io::Result<File> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        rustix::fs::openat(
            &self.directory,
            name,
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map(File::from)
        .map_err(io::Error::from)
    }

    /// Removes the file `name` from this directory.
    pub(super) fn remove(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.directory, name, AtFlags::empty()).map_err(io::Error::from)
    }
}

fn io_error(action: &'static str, path: &Path, error: Errno) -> BeneathError {
    BeneathError::Io {
        action,
        path: path.to_owned(),
        error: error.into(),
    }
}
