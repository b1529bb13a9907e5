//! Where a dispatch's model-gateway socket lives, so that no state directory is too long for it.
//!
//! A unix socket's path holds at most [`SOCKET_PATH_MAX`] bytes, and the state directory's path is
//! the user's to choose, of any length: the socket cannot live under it. It goes in a short per-user
//! runtime directory instead: `$XDG_RUNTIME_DIR/stet` where that directory is usable and short
//! enough, `/tmp/stet-<uid>` otherwise. Below it, one directory per installation (named by the
//! state directory's label, so installations sharing an account never sweep each other) and one per
//! dispatch, which is journaled so the sweep reclaims it after a crash.
//!
//! Every directory on the way is checked with `lstat`, never following a link: it must be a real
//! directory, owned by this account, with no access for group or others. Another local account
//! therefore cannot reach, replace or pre-plant a dispatch's socket; a directory that fails the
//! check is refused with a line saying how to fix it, before anything is provisioned.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use stet_protocol::event::DispatchId;
use stet_sandbox::relay::SOCKET_NAME;

/// The longest path a unix socket address holds on Linux (`sun_path` is 108 bytes with its NUL).
pub const SOCKET_PATH_MAX: usize = 107;

/// The per-user directory used when `$XDG_RUNTIME_DIR` is unset or unusable: `/tmp/stet-<uid>`.
const FALLBACK_PARENT: &str = "/tmp";

/// The only mode stet gives the directories it makes here.
const PRIVATE_MODE: u32 = 0o700;

/// Why the socket place cannot be used; shown as the problem and then its fix, on one line.
#[derive(Debug)]
pub enum SocketDirError {
    /// A symbolic link where the directory should be.
    Link {
        /// The directory concerned.
        path: PathBuf,
    },
    /// Something other than a directory is there.
    NotDirectory {
        /// The directory concerned.
        path: PathBuf,
    },
    /// The directory belongs to another account.
    Foreign {
        /// The directory concerned.
        path: PathBuf,
        /// The uid that owns it.
        owner: u32,
        /// This process's uid.
        uid: u32,
    },
    /// Other accounts can reach into the directory.
    Open {
        /// The directory concerned.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The directory cannot be made.
    Create {
        /// The directory concerned.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// The directory cannot be examined.
    Inspect {
        /// The directory concerned.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// A dispatch's directory already exists.
    Taken {
        /// The directory concerned.
        path: PathBuf,
    },
}

impl SocketDirError {
    /// What is wrong, naming the directory.
    pub fn problem(&self) -> String {
        match self {
            SocketDirError::Link { path } => {
                format!(
                    "{} is a symbolic link, not a directory of yours",
                    path.display()
                )
            }
            SocketDirError::NotDirectory { path } => {
                format!("{} is not a directory", path.display())
            }
            SocketDirError::Foreign { path, owner, uid } => format!(
                "{} belongs to uid {owner}, not to you (uid {uid})",
                path.display()
            ),
            SocketDirError::Open { path, mode } => format!(
                "{} has mode {mode:04o}, so other accounts could reach a dispatch's model gateway",
                path.display()
            ),
            SocketDirError::Create { path, source } => {
                format!("{} cannot be created: {source}", path.display())
            }
            SocketDirError::Inspect { path, source } => {
                format!("{} cannot be read: {source}", path.display())
            }
            SocketDirError::Taken { path } => format!(
                "{} already exists, so it is not this dispatch's own",
                path.display()
            ),
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> String {
        match self {
            SocketDirError::Link { path } | SocketDirError::NotDirectory { path } => format!(
                "remove {} (stet makes it again, private), or set XDG_RUNTIME_DIR to a private directory of yours",
                path.display()
            ),
            SocketDirError::Foreign { .. } => "another account made it: have it removed, or set XDG_RUNTIME_DIR to a private directory of yours (mode 0700)".to_owned(),
            SocketDirError::Open { path, .. } => format!("run `chmod 700 {}`", path.display()),
            SocketDirError::Create { .. } | SocketDirError::Inspect { .. } => {
                "set XDG_RUNTIME_DIR to a private directory of yours (mode 0700)".to_owned()
            }
            SocketDirError::Taken { .. } => "run `stet sweep`".to_owned(),
        }
    }
}

impl fmt::Display for SocketDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.problem(), self.fix())
    }
}

/// Its message already says what the underlying error was.
impl std::error::Error for SocketDirError {}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SocketDirError>;

/// Where this installation's gateway sockets go, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPlace {
    /// `$XDG_RUNTIME_DIR/stet` or `/tmp/stet-<uid>`: the account's own.
    base: PathBuf,
    /// `<base>/<installation label>`: one directory per dispatch below it.
    root: PathBuf,
    /// The account that must own every directory on the way.
    uid: u32,
    /// Why `$XDG_RUNTIME_DIR` was not used, when it was not.
    fallback: Option<String>,
}

impl SocketPlace {
    /// The place for this process (its effective uid and `XDG_RUNTIME_DIR`) and the installation
    /// whose state lives in `state_dir`.
    pub fn for_installation(state_dir: &Path) -> SocketPlace {
        SocketPlace::choose(
            std::env::var_os("XDG_RUNTIME_DIR"),
            rustix::process::geteuid().as_raw(),
            &crate::runtime::state_label(state_dir),
        )
    }

    /// `$XDG_RUNTIME_DIR/stet/<installation>` when `runtime_dir` is an absolute directory owned by
    /// `uid` with no access for others and short enough for a socket path below it; otherwise
    /// `/tmp/stet-<uid>/<installation>`, with the reason kept for `stet doctor`.
    pub fn choose(runtime_dir: Option<OsString>, uid: u32, installation: &str) -> SocketPlace {
        let fallback = |reason: String| {
            let base = Path::new(FALLBACK_PARENT).join(format!("stet-{uid}"));
            SocketPlace {
                root: base.join(installation),
                base,
                uid,
                fallback: Some(reason),
            }
        };
        let Some(runtime_dir) = runtime_dir.filter(|dir| !dir.is_empty()) else {
            return fallback("XDG_RUNTIME_DIR is not set".to_owned());
        };
        let runtime_dir = PathBuf::from(runtime_dir);
        if let Err(problem) = usable_runtime_dir(&runtime_dir, uid) {
            return fallback(format!(
                "XDG_RUNTIME_DIR {} {problem}",
                runtime_dir.display()
            ));
        }
        let base = runtime_dir.join("stet");
        let place = SocketPlace {
            root: base.join(installation),
            base,
            uid,
            fallback: None,
        };
        let longest = place.longest_socket_path();
        if longest > SOCKET_PATH_MAX {
            return fallback(format!(
                "XDG_RUNTIME_DIR {} is too long: a socket below it would take {longest} bytes of the {SOCKET_PATH_MAX} a unix socket path holds",
                runtime_dir.display()
            ));
        }
        place
    }

    /// This installation's directory, holding one directory per dispatch.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Why `$XDG_RUNTIME_DIR` was not used (`None` when it was).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The directory of `dispatch`'s socket (named by the dispatch id's 32 hex digits, to stay short).
    pub fn dispatch_dir(&self, dispatch: DispatchId) -> PathBuf {
        self.root.join(dispatch.hex())
    }

    /// The dispatch whose directory `path` names, if it is one of this place's.
    pub fn dispatch_of(&self, path: &Path) -> Option<DispatchId> {
        if path.parent() != Some(self.root.as_path()) {
            return None;
        }
        DispatchId::from_hex(path.file_name()?.to_str()?)
    }

    /// The length in bytes of the longest socket path this place gives out.
    pub fn longest_socket_path(&self) -> usize {
        self.dispatch_dir(DispatchId::new())
            .join(SOCKET_NAME)
            .as_os_str()
            .len()
    }

    /// Makes the account's directory and this installation's below it (mode 0700) when missing, and
    /// checks both without following links: real directories, this account's, closed to others.
    pub fn prepare(&self) -> Result<()> {
        ensure_private_dir(&self.base, self.uid)?;
        ensure_private_dir(&self.root, self.uid)
    }

    /// Checks the place as [`SocketPlace::prepare`] does, without making anything: `Ok(false)` when
    /// this installation's directory does not exist (there is nothing in it), `Ok(true)` when it and
    /// the account's directory above it are real directories of this account's, closed to others.
    /// The sweep lists and removes only below a place that passes.
    pub fn inspect(&self) -> Result<bool> {
        for path in [&self.base, &self.root] {
            match std::fs::symlink_metadata(path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(source) => {
                    return Err(SocketDirError::Inspect {
                        path: path.clone(),
                        source,
                    });
                }
                Ok(metadata) => check_private(path, &metadata, self.uid)?,
            }
        }
        Ok(true)
    }

    /// Prepares the place and makes `dispatch`'s own directory in it, new (an existing one is
    /// refused) and mode 0700; returns its path.
    pub fn create_dispatch_dir(&self, dispatch: DispatchId) -> Result<PathBuf> {
        self.prepare()?;
        let path = self.dispatch_dir(dispatch);
        match std::fs::DirBuilder::new().mode(PRIVATE_MODE).create(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SocketDirError::Taken { path });
            }
            Err(source) => return Err(SocketDirError::Create { path, source }),
        }
        set_private_mode(&path)?;
        Ok(path)
    }

    /// The dispatch directories present below this installation's directory, as `(dispatch, path)`;
    /// none when the place is missing, and an error when it fails [`SocketPlace::inspect`] (it is
    /// then not listed: a link planted there is never followed).
    pub fn present(&self) -> Result<Vec<(DispatchId, PathBuf)>> {
        if !self.inspect()? {
            return Ok(Vec::new());
        }
        let inspect_error = |source| SocketDirError::Inspect {
            path: self.root.clone(),
            source,
        };
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(inspect_error(error)),
        };
        let mut present = Vec::new();
        for entry in entries {
            let path = entry.map_err(inspect_error)?.path();
            if let Some(dispatch) = self.dispatch_of(&path) {
                present.push((dispatch, path));
            }
        }
        Ok(present)
    }
}

impl fmt::Display for SocketPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root.display())?;
        if let Some(reason) = &self.fallback {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// Why `dir` cannot hold the account's runtime files (the XDG rule: an absolute directory owned by
/// the account, mode 0700), checked without following a link.
fn usable_runtime_dir(dir: &Path, uid: u32) -> std::result::Result<(), &'static str> {
    if !dir.is_absolute() {
        return Err("is not an absolute path");
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(|_| "does not exist")?;
    if metadata.file_type().is_symlink() {
        return Err("is a symbolic link");
    }
    if !metadata.is_dir() {
        return Err("is not a directory");
    }
    if metadata.uid() != uid {
        return Err("belongs to another account");
    }
    if metadata.mode() & 0o077 != 0 {
        return Err("is open to other accounts");
    }
    Ok(())
}

/// Makes `path` (mode 0700) unless it exists, then checks it without following links.
fn ensure_private_dir(path: &Path, uid: u32) -> Result<()> {
    match std::fs::DirBuilder::new().mode(PRIVATE_MODE).create(path) {
        Ok(()) => set_private_mode(path)?,
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(SocketDirError::Create {
                path: path.to_owned(),
                source,
            });
        }
    }
    let metadata = std::fs::symlink_metadata(path).map_err(|source| SocketDirError::Inspect {
        path: path.to_owned(),
        source,
    })?;
    check_private(path, &metadata, uid)
}

/// A real directory (`metadata` is from `lstat`), owned by `uid`, closed to group and others.
fn check_private(path: &Path, metadata: &std::fs::Metadata, uid: u32) -> Result<()> {
    let path = path.to_owned();
    if metadata.file_type().is_symlink() {
        return Err(SocketDirError::Link { path });
    }
    if !metadata.is_dir() {
        return Err(SocketDirError::NotDirectory { path });
    }
    if metadata.uid() != uid {
        return Err(SocketDirError::Foreign {
            path,
            owner: metadata.uid(),
            uid,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SocketDirError::Open { path, mode });
    }
    Ok(())
}

/// Gives a directory stet just made exactly mode 0700, whatever the umask took away.
fn set_private_mode(path: &Path) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_MODE)).map_err(
        |source| SocketDirError::Create {
            path: path.to_owned(),
            source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_usable_runtime_dir_is_chosen_and_its_sockets_fit() {
        let runtime = private_dir();
        let place = SocketPlace::choose(Some(runtime.path().into()), me(), "0123456789abcdef");
        assert_eq!(place.fallback_reason(), None);
        assert_eq!(
            place.root(),
            runtime.path().join("stet").join("0123456789abcdef")
        );
        assert!(place.longest_socket_path() <= SOCKET_PATH_MAX);
    }

    #[test]
    fn without_a_usable_runtime_dir_the_fallback_is_per_user_in_tmp() {
        let label = "0123456789abcdef";
        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = open.path().join("file");
        std::fs::write(&file, "").unwrap();
        let target = private_dir();
        let link = open.path().join("link");
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let long = private_dir();
        let too_long = long.path().join("x".repeat(60));
        std::fs::create_dir(&too_long).unwrap();
        std::fs::set_permissions(&too_long, std::fs::Permissions::from_mode(0o700)).unwrap();
        let cases: [(Option<OsString>, &str); 7] = [
            (None, "is not set"),
            (Some("".into()), "is not set"),
            (Some("relative/dir".into()), "absolute"),
            (Some(open.path().into()), "open to other accounts"),
            (Some(file.into()), "not a directory"),
            (Some(link.into()), "symbolic link"),
            (Some(too_long.into()), "too long"),
        ];
        for (runtime, why) in cases {
            let place = SocketPlace::choose(runtime.clone(), me(), label);
            let expected = PathBuf::from(format!("/tmp/stet-{}/{label}", me()));
            assert_eq!(place.root(), expected, "{runtime:?}");
            let reason = place.fallback_reason().unwrap();
            assert!(reason.contains(why), "{runtime:?}: {reason}");
            assert!(place.longest_socket_path() <= SOCKET_PATH_MAX);
        }
        let foreign = SocketPlace::choose(Some(private_dir().path().into()), me() + 1, label);
        assert!(
            foreign
                .fallback_reason()
                .unwrap()
                .contains("another account")
        );
    }

    #[test]
    fn the_longest_uid_and_label_still_fit_in_the_fallback() {
        let place = SocketPlace::choose(None, u32::MAX, &"f".repeat(16));
        assert!(place.longest_socket_path() <= SOCKET_PATH_MAX);
    }

    #[test]
    fn dispatch_dirs_are_made_private_new_and_found_again() {
        let runtime = private_dir();
        let place = SocketPlace::choose(Some(runtime.path().into()), me(), "feedfacefeedface");
        let dispatch = DispatchId::new();
        let dir = place.create_dispatch_dir(dispatch).unwrap();
        for path in [
            runtime.path().join("stet"),
            place.root().to_owned(),
            dir.clone(),
        ] {
            let metadata = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(metadata.mode() & 0o7777, 0o700, "{}", path.display());
            assert_eq!(metadata.uid(), me());
        }
        assert!(matches!(
            place.create_dispatch_dir(dispatch),
            Err(SocketDirError::Taken { .. })
        ));
        std::fs::create_dir(place.root().join("not-a-dispatch")).unwrap();
        assert_eq!(place.present().unwrap(), vec![(dispatch, dir)]);
    }

    #[test]
    fn a_planted_link_or_an_open_directory_is_refused() {
        let runtime = private_dir();
        let place = SocketPlace::choose(Some(runtime.path().into()), me(), "feedfacefeedface");
        let elsewhere = private_dir();
        std::os::unix::fs::symlink(elsewhere.path(), runtime.path().join("stet")).unwrap();
        let error = place.prepare().unwrap_err();
        assert!(matches!(error, SocketDirError::Link { .. }), "{error}");
        assert!(error.to_string().contains("; remove "), "{error}");

        std::fs::remove_file(runtime.path().join("stet")).unwrap();
        std::fs::create_dir(runtime.path().join("stet")).unwrap();
        std::fs::set_permissions(
            runtime.path().join("stet"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let error = place.prepare().unwrap_err();
        assert!(
            matches!(error, SocketDirError::Open { mode: 0o755, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("chmod 700"), "{error}");

        let foreign = SocketPlace {
            uid: me() + 1,
            ..place.clone()
        };
        std::fs::set_permissions(
            runtime.path().join("stet"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        let error = foreign.prepare().unwrap_err();
        assert!(matches!(error, SocketDirError::Foreign { .. }), "{error}");
    }
}
