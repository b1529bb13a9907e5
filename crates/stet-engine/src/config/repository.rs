//! Reading a repository's own `stet.toml`, which is the repository's to write and so untrusted: only
//! a regular file directly at the root is read (a link could point at any file of the user's, a fifo
//! would block), at most [`MAX_FILE_BYTES`], and the bytes that are parsed are the bytes that are
//! hashed for trust.

use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::trust::ContentHash;
use super::{ConfigError, REPOSITORY_FILE, Result};

/// The largest `stet.toml` read, in bytes.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A repository's `stet.toml` as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryFileText {
    /// `<root>/stet.toml`, the root resolved (`canonicalize`); the path trust is recorded under.
    pub path: PathBuf,
    /// The file's contents.
    pub text: String,
    /// The SHA-256 of those contents, which trust is checked against.
    pub hash: ContentHash,
}

/// The `stet.toml` at the root of the repository `root`, or `None` when there is none.
pub fn read(root: &Path) -> Result<Option<RepositoryFileText>> {
    let path = file_path(root)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let descriptor = match rustix::fs::open(&path, flags, Mode::empty()) {
        Ok(descriptor) => descriptor,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(ConfigError::NotARegularFile { file: path }),
        Err(errno) => {
            return Err(ConfigError::Read {
                file: path,
                source: errno.into(),
            });
        }
    };
    let file = std::fs::File::from(descriptor);
    let read_error = |source| ConfigError::Read {
        file: path.clone(),
        source,
    };
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(ConfigError::NotARegularFile { file: path });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge {
            file: path,
            limit: MAX_FILE_BYTES,
        });
    }
    let hash = ContentHash::of(&bytes);
    let text = String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8 { file: path.clone() })?;
    Ok(Some(RepositoryFileText { path, text, hash }))
}

/// `<root>/stet.toml` with `root` resolved (`canonicalize`): the path trust is recorded under.
pub fn file_path(root: &Path) -> Result<PathBuf> {
    let root = std::fs::canonicalize(root).map_err(|source| ConfigError::Read {
        file: root.to_owned(),
        source,
    })?;
    Ok(root.join(REPOSITORY_FILE))
}

/// Where the file a person names for `stet trust` is: a repository's root directory, or its
/// `stet.toml` itself.
pub fn root_of(named: &Path) -> Result<PathBuf> {
    if named
        .file_name()
        .is_some_and(|name| name == REPOSITORY_FILE)
        && !named.is_dir()
    {
        Ok(match named.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        })
    } else if named.is_dir() {
        Ok(named.to_owned())
    } else {
        Err(ConfigError::NotARepositoryFile {
            named: named.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_and_hashed_as_read() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()).unwrap(), None);
        std::fs::write(
            root.path().join(REPOSITORY_FILE),
            "[dispatch]\nconcurrency = 1\n",
        )
        .unwrap();
        let found = read(root.path()).unwrap().unwrap();
        assert_eq!(
            found.path,
            std::fs::canonicalize(root.path())
                .unwrap()
                .join(REPOSITORY_FILE)
        );
        assert_eq!(found.text, "[dispatch]\nconcurrency = 1\n");
        assert_eq!(found.hash, ContentHash::of(found.text.as_bytes()));
    }

    #[test]
    fn a_link_a_fifo_a_directory_a_huge_or_binary_file_is_refused_unread() {
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("secret");
        std::fs::write(&secret, "host:5432:db:user:hunter2\n").unwrap();
        let file = root.path().join(REPOSITORY_FILE);
        std::os::unix::fs::symlink(&secret, &file).unwrap();
        let error = read(root.path()).unwrap_err();
        assert!(
            matches!(error, ConfigError::NotARegularFile { .. }),
            "{error}"
        );
        assert!(!error.to_string().contains("hunter2"), "{error}");

        std::fs::remove_file(&file).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &file,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            read(root.path()),
            Err(ConfigError::NotARegularFile { .. })
        ));

        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(matches!(
            read(root.path()),
            Err(ConfigError::NotARegularFile { .. })
        ));

        std::fs::remove_dir(&file).unwrap();
        std::fs::write(&file, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read(root.path()),
            Err(ConfigError::TooLarge { .. })
        ));

        std::fs::write(&file, [0xff, 0xfe, b'\n']).unwrap();
        assert!(matches!(
            read(root.path()),
            Err(ConfigError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn trust_names_a_root_or_its_file() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(root_of(root.path()).unwrap(), root.path());
        assert_eq!(
            root_of(&root.path().join(REPOSITORY_FILE)).unwrap(),
            root.path()
        );
        assert_eq!(
            root_of(Path::new(REPOSITORY_FILE)).unwrap(),
            PathBuf::from(".")
        );
        assert!(root_of(&root.path().join("other.toml")).is_err());
    }
}
