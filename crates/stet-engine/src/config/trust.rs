//! Which repository files the user trusted (`stet trust`): each is recorded by its path and the
//! SHA-256 of its content in `$XDG_STATE_HOME/stet/trust/trusted.json` (directory 0700, file 0600,
//! replaced atomically). A trusted file may set machine settings until one byte of it changes, the
//! way `direnv allow` works; the same content at another path (a copy in another repository) is not
//! trusted, and one path holds one trusted content at a time.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The directory under the state directory that holds the trust record.
pub const TRUST_DIR: &str = "trust";

/// The trust record's file name.
pub const TRUST_FILE: &str = "trusted.json";

/// The version of the record's format.
const FORMAT_VERSION: u32 = 1;

/// The largest trust record read, in bytes.
const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// Why the trust record could not be read or written.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum TrustError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error(
        "{}: the trust record is not one stet wrote (line {line}, column {column}); remove it and trust the files again",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    #[error(
        "{}: others may write to it (mode {mode:o}), so stet does not believe what it says; make it private (chmod go-w) or remove it",
        path.display()
    )]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error("{}: only a path that is UTF-8 can be trusted", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("{}: the trust record is larger than {MAX_RECORD_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, TrustError>;

/// The SHA-256 of a file's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    pub(crate) fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// The first 12 hex digits, for a person to recognise it by.
    pub fn short(&self) -> String {
        self.to_string().chars().take(12).collect()
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// One trusted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The file's absolute path, its directory resolved (`canonicalize`), the file itself not a link.
    pub path: PathBuf,
    /// The SHA-256 of the content that was trusted, as 64 lowercase hex digits.
    pub sha256: String,
    /// When the user trusted it.
    pub trusted_at: DateTime<Utc>,
}

impl TrustEntry {
    /// Whether this entry trusts `hash` at `path`.
    pub fn covers(&self, path: &Path, hash: &ContentHash) -> bool {
        self.path == path && self.sha256 == hash.to_string()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    version: u32,
    files: Vec<TrustEntry>,
}

/// The user's trust record, in a state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    dir: PathBuf,
}

impl TrustStore {
    /// The record under `state_dir` (`$XDG_STATE_HOME/stet`); nothing is read or made yet.
    pub fn in_state_dir(state_dir: &Path) -> TrustStore {
        TrustStore {
            dir: state_dir.join(TRUST_DIR),
        }
    }

    /// The record's file.
    pub fn file(&self) -> PathBuf {
        self.dir.join(TRUST_FILE)
    }

    /// Every trusted file, in the order they were trusted.
    pub fn entries(&self) -> Result<Vec<TrustEntry>> {
        Ok(self.read()?.files)
    }

    /// Whether the file at `path` with content `hash` is trusted.
    pub fn is_trusted(&self, path: &Path, hash: &ContentHash) -> Result<bool> {
        Ok(self
            .read()?
            .files
            .iter()
            .any(|entry| entry.covers(path, hash)))
    }

    /// Trusts `hash` at `path`, replacing what was trusted at that path before.
    pub fn trust(&self, path: &Path, hash: &ContentHash) -> Result<TrustEntry> {
        if path.to_str().is_none() {
            return Err(TrustError::NotUtf8 {
                path: path.to_owned(),
            });
        }
        let mut record = self.read()?;
        record.files.retain(|entry| entry.path != path);
        let entry = TrustEntry {
            path: path.to_owned(),
            sha256: hash.to_string(),
            trusted_at: Utc::now(),
        };
        record.files.push(entry.clone());
        self.write(&record)?;
        Ok(entry)
    }

    /// Forgets `path`; returns whether it was trusted.
    pub fn revoke(&self, path: &Path) -> Result<bool> {
        let mut record = self.read()?;
        let before = record.files.len();
        record.files.retain(|entry| entry.path != path);
        if record.files.len() == before {
            return Ok(false);
        }
        self.write(&record)?;
        Ok(true)
    }

    fn read(&self) -> Result<Record> {
        let file = self.file();
        let io = |action| {
            let path = file.clone();
            move |source| TrustError::Io {
                path: path.clone(),
                action,
                source,
            }
        };
        let opened = match std::fs::File::open(&file) {
            Ok(opened) => opened,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Record {
                    version: FORMAT_VERSION,
                    files: Vec::new(),
                });
            }
            Err(error) => return Err(io("read the trust record")(error)),
        };
        for (path, metadata) in [
            (
                self.dir.clone(),
                std::fs::metadata(&self.dir).map_err(io("read the trust directory"))?,
            ),
            (
                file.clone(),
                opened.metadata().map_err(io("read the trust record"))?,
            ),
        ] {
            let mode = metadata.permissions().mode() & 0o7777;
            if mode & 0o022 != 0 {
                return Err(TrustError::WritableByOthers { path, mode });
            }
        }
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(opened, MAX_RECORD_BYTES + 1),
            &mut text,
        )
        .map_err(io("read the trust record"))?;
        if text.len() as u64 > MAX_RECORD_BYTES {
            return Err(TrustError::TooLarge { path: file });
        }
        let record: Record = serde_json::from_str(&text).map_err(|error| TrustError::Corrupt {
            path: file.clone(),
            line: error.line(),
            column: error.column(),
        })?;
        if record.version != FORMAT_VERSION {
            return Err(TrustError::Corrupt {
                path: file,
                line: 1,
                column: 1,
            });
        }
        Ok(record)
    }

    /// Writes `record` to a new private file beside the record, syncs it and renames it over the
    /// record, so a reader sees the old record or the new one, never half of one.
    fn write(&self, record: &Record) -> Result<()> {
        let io = |path: &Path, action| {
            let path = path.to_owned();
            move |source| TrustError::Io {
                path: path.clone(),
                action,
                source,
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(&self.dir, "create the trust directory"))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(&self.dir, "make the trust directory private"))?;
        let mut text = serde_json::to_string_pretty(record).map_err(|error| TrustError::Io {
            path: self.file(),
            action: "encode the trust record",
            source: std::io::Error::other(error),
        })?;
        text.push('\n');
        let temporary = self.dir.join(format!(
            ".{TRUST_FILE}.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.sync_all()
            })
            .map_err(io(&temporary, "write the trust record"))
            .and_then(|()| {
                std::fs::rename(&temporary, self.file())
                    .map_err(io(&self.file(), "replace the trust record"))
            });
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written?;
        std::fs::File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io(&self.dir, "sync the trust directory"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trusted_content_is_trusted_at_its_path_only_until_it_changes() {
        let state = tempfile::tempdir().unwrap();
        let store = TrustStore::in_state_dir(state.path());
        let path = Path::new("/src/app/stet.toml");
        let hash = ContentHash::of(b"[dispatch]\nimage = \"x\"\n");
        assert!(!store.is_trusted(path, &hash).unwrap(), "nothing yet");
        store.trust(path, &hash).unwrap();
        assert!(store.is_trusted(path, &hash).unwrap());
        assert!(
            !store
                .is_trusted(path, &ContentHash::of(b"[dispatch]\nimage = \"y\"\n"))
                .unwrap(),
            "another content at the same path"
        );
        assert!(
            !store
                .is_trusted(Path::new("/src/other/stet.toml"), &hash)
                .unwrap(),
            "the same content at another path"
        );

        let newer = ContentHash::of(b"# newer\n");
        store.trust(path, &newer).unwrap();
        assert!(store.is_trusted(path, &newer).unwrap());
        assert!(
            !store.is_trusted(path, &hash).unwrap(),
            "one content per path"
        );
        assert_eq!(store.entries().unwrap().len(), 1);

        assert!(store.revoke(path).unwrap());
        assert!(!store.revoke(path).unwrap(), "already revoked");
        assert!(!store.is_trusted(path, &newer).unwrap());
    }

    #[test]
    fn the_record_is_private_and_replaced_whole() {
        let state = tempfile::tempdir().unwrap();
        let store = TrustStore::in_state_dir(state.path());
        store
            .trust(Path::new("/a/stet.toml"), &ContentHash::of(b"a"))
            .unwrap();
        store
            .trust(Path::new("/b/stet.toml"), &ContentHash::of(b"b"))
            .unwrap();
        let dir_mode = std::fs::metadata(state.path().join(TRUST_DIR))
            .unwrap()
            .permissions()
            .mode();
        let file_mode = std::fs::metadata(store.file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(file_mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(state.path().join(TRUST_DIR))
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, [TRUST_FILE], "no temporary file is left");
        let paths: Vec<_> = store
            .entries()
            .unwrap()
            .into_iter()
            .map(|entry| entry.path)
            .collect();
        assert_eq!(
            paths,
            [Path::new("/a/stet.toml"), Path::new("/b/stet.toml")]
        );
    }

    #[test]
    fn a_record_others_may_write_or_stet_did_not_write_is_not_believed() {
        let state = tempfile::tempdir().unwrap();
        let store = TrustStore::in_state_dir(state.path());
        let path = Path::new("/a/stet.toml");
        let hash = ContentHash::of(b"a");
        store.trust(path, &hash).unwrap();
        std::fs::set_permissions(store.file(), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            store.is_trusted(path, &hash),
            Err(TrustError::WritableByOthers { .. })
        ));
        std::fs::set_permissions(store.file(), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(store.file(), "{\"version\": 1, \"files\": [oops]}").unwrap();
        let error = store.is_trusted(path, &hash).unwrap_err();
        assert!(
            matches!(error, TrustError::Corrupt { line: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn the_hash_is_sha256_in_hex() {
        assert_eq!(
            ContentHash::of(b"abc").to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ContentHash::of(b"abc").short(), "ba7816bf8f01");
    }
}
