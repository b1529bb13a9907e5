//! Where stet keeps its state — `$XDG_STATE_HOME/stet`, by default `~/.local/state/stet` — made
//! private and proven writable before anything is written there. When it cannot be, the user gets
//! one line naming the directory that failed and what to do, not a stack of causes: an unset `HOME`,
//! a home or state directory that is not theirs, a read-only or full filesystem.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the state directory cannot be used; shown as the problem and then its fix, on one line.
#[derive(Debug)]
pub enum StateDirError {
    /// Neither `XDG_STATE_HOME` nor `HOME` is set.
    Unset,
    /// `HOME` is set to a relative path (the value given).
    RelativeHome(PathBuf),
    /// `failed` is the directory that could not be made or written, on the way to `state`.
    ReadOnly {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
    },
    /// The filesystem has no space left.
    Full {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
    },
    /// The directory is not writable by this user.
    Denied {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
        /// This process's uid.
        uid: u32,
    },
    /// Something on the way is not a directory.
    NotADirectory {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
    },
    /// Any other I/O failure.
    Unusable {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// A directory (or link) on the way belongs to another account, which could swap or plant
    /// what stet keeps (its journal says what stet removes).
    Foreign {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
        /// The uid that owns `failed`.
        owner: u32,
        /// This process's uid.
        uid: u32,
    },
    /// A directory on the way is writable by every account and not sticky.
    OpenToOthers {
        /// The state directory stet was to use.
        state: PathBuf,
        /// The directory on the way to `state` that failed.
        failed: PathBuf,
    },
}

impl StateDirError {
    /// What is wrong, naming the directory that failed.
    pub fn problem(&self) -> String {
        let cannot = |failed: &Path, why: &str, state: &Path| {
            format!(
                "{}: {why}, so stet cannot keep its state in {}",
                failed.display(),
                state.display()
            )
        };
        match self {
            StateDirError::Unset => {
                "neither XDG_STATE_HOME nor HOME is set, so stet has nowhere to keep its state"
                    .to_owned()
            }
            StateDirError::RelativeHome(home) => format!(
                "HOME is {}, not an absolute path, so stet has nowhere to keep its state",
                home.display()
            ),
            StateDirError::ReadOnly { state, failed } => {
                cannot(failed, "read-only filesystem", state)
            }
            StateDirError::Full { state, failed } => cannot(failed, "no space left", state),
            StateDirError::Denied { state, failed, uid } => {
                cannot(failed, &format!("not writable by you (uid {uid})"), state)
            }
            StateDirError::NotADirectory { state, failed } => {
                cannot(failed, "not a directory", state)
            }
            StateDirError::Unusable {
                state,
                failed,
                source,
            } => cannot(failed, &source.to_string(), state),
            StateDirError::Foreign {
                state,
                failed,
                owner,
                uid,
            } => cannot(
                failed,
                &format!("belongs to uid {owner}, neither you (uid {uid}) nor root"),
                state,
            ),
            StateDirError::OpenToOthers { state, failed } => {
                cannot(failed, "writable by every account", state)
            }
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> &'static str {
        match self {
            StateDirError::Unset | StateDirError::RelativeHome(_) => {
                "set HOME to your home directory (or XDG_STATE_HOME to a directory of yours)"
            }
            StateDirError::ReadOnly { .. } => {
                "set XDG_STATE_HOME to a directory on a writable filesystem"
            }
            StateDirError::Full { .. } => {
                "free space on that filesystem, or set XDG_STATE_HOME to a directory elsewhere"
            }
            StateDirError::Denied { .. } => {
                "fix that directory's owner or mode, or set XDG_STATE_HOME to a directory of yours"
            }
            StateDirError::NotADirectory { .. } => {
                "move it away, or set XDG_STATE_HOME to a directory of yours"
            }
            StateDirError::Unusable { .. } | StateDirError::Foreign { .. } => {
                "set XDG_STATE_HOME to a directory of yours"
            }
            StateDirError::OpenToOthers { .. } => {
                "set XDG_STATE_HOME to a directory only you can write"
            }
        }
    }
}

impl std::fmt::Display for StateDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem(), self.fix())
    }
}

/// Its message already says what the underlying error was.
impl std::error::Error for StateDirError {}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, StateDirError>;

/// `$XDG_STATE_HOME/stet`, or `$HOME/.local/state/stet`, as this process's environment says.
pub fn locate() -> Result<PathBuf> {
    locate_in(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// [`locate`] from the two variables' values. A relative `XDG_STATE_HOME` is ignored, as the XDG
/// specification asks; a relative `HOME` is refused (stet's state would move with the current
/// directory).
pub fn locate_in(xdg_state_home: Option<OsString>, home: Option<OsString>) -> Result<PathBuf> {
    let xdg = xdg_state_home
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute());
    let base = match xdg {
        Some(dir) => dir,
        None => {
            let home = home
                .filter(|home| !home.is_empty())
                .map(PathBuf::from)
                .ok_or(StateDirError::Unset)?;
            if !home.is_absolute() {
                return Err(StateDirError::RelativeHome(home));
            }
            home.join(".local").join("state")
        }
    };
    Ok(base.join("stet"))
}

/// [`locate`], then [`prepare`].
pub fn prepare_default() -> Result<PathBuf> {
    let state = locate()?;
    prepare(&state)?;
    Ok(state)
}

/// Makes `state` (mode 0700, and every parent it has to make) and proves it writable by creating
/// and removing a file in it. Every directory on the way that exists already must be this
/// account's or root's, and not writable by every account unless sticky (as `/tmp` is); a link on
/// the way must be this account's or root's too. Otherwise another account could plant a journal
/// record naming what stet should remove.
pub fn prepare(state: &Path) -> Result<()> {
    check_trusted_path(state, rustix::process::geteuid().as_raw())?;
    crate::private_files::create_dir_all(state).map_err(|error| {
        // A directory that could not be made for want of permission names the one above it.
        let denied = matches!(error.source.kind(), std::io::ErrorKind::PermissionDenied);
        let failed = match error.path.parent() {
            Some(parent) if denied && std::fs::symlink_metadata(&error.path).is_err() => {
                parent.to_owned()
            }
            _ => error.path,
        };
        classify(state, failed, error.source)
    })?;
    let probe = state.join(format!(".write-test-{}", std::process::id()));
    let written = crate::private_files::options()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut file| {
            let wrote = file.write_all(b"stet").and_then(|()| file.sync_all());
            let _ = std::fs::remove_file(&probe);
            wrote
        });
    written.map_err(|source| classify(state, state.to_owned(), source))
}

/// What [`prepare`] would find, making nothing (`stet doctor`): `Ok(true)` when `state` is a
/// directory this account may write, `Ok(false)` when it is not there yet and the nearest directory
/// above it that is may be written (the first dispatch makes it), the error [`prepare`] would give
/// otherwise.
pub fn inspect(state: &Path) -> Result<bool> {
    use rustix::fs::Access;
    check_trusted_path(state, rustix::process::geteuid().as_raw())?;
    let existing = state
        .ancestors()
        .find(|dir| std::fs::symlink_metadata(dir).is_ok())
        .unwrap_or(Path::new("/"));
    let metadata = std::fs::metadata(existing)
        .map_err(|source| classify(state, existing.to_owned(), source))?;
    if !metadata.is_dir() {
        return Err(StateDirError::NotADirectory {
            state: state.to_owned(),
            failed: existing.to_owned(),
        });
    }
    rustix::fs::access(existing, Access::WRITE_OK | Access::EXEC_OK)
        .map_err(|errno| classify(state, existing.to_owned(), errno.into()))?;
    Ok(existing == state)
}

/// Checks the part of `state`'s path that exists: each link on it, and each directory it resolves
/// to, belongs to `uid` or root; no directory is writable by every account unless it is sticky.
fn check_trusted_path(state: &Path, uid: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(existing) = state
        .ancestors()
        .find(|dir| std::fs::symlink_metadata(dir).is_ok())
    else {
        return Ok(());
    };
    let foreign = |failed: &Path, owner: u32| StateDirError::Foreign {
        state: state.to_owned(),
        failed: failed.to_owned(),
        owner,
        uid,
    };
    let outside = outside_owner();
    let trusted_owner = |owner: u32| owner == uid || owner == 0 || Some(owner) == outside;
    // The links as they are spelled: a link another account made can point anywhere later.
    for prefix in existing.ancestors() {
        if let Ok(metadata) = std::fs::symlink_metadata(prefix)
            && metadata.file_type().is_symlink()
            && !trusted_owner(metadata.uid())
        {
            return Err(foreign(prefix, metadata.uid()));
        }
    }
    // The directories they lead to.
    let canonical = std::fs::canonicalize(existing)
        .map_err(|source| classify(state, existing.to_owned(), source))?;
    for prefix in canonical.ancestors() {
        let metadata = std::fs::metadata(prefix)
            .map_err(|source| classify(state, prefix.to_owned(), source))?;
        if !trusted_owner(metadata.uid()) {
            return Err(foreign(prefix, metadata.uid()));
        }
        let sticky = metadata.mode() & 0o1000 != 0;
        if metadata.is_dir() && metadata.mode() & 0o002 != 0 && !sticky {
            return Err(StateDirError::OpenToOthers {
                state: state.to_owned(),
                failed: prefix.to_owned(),
            });
        }
    }
    Ok(())
}

/// In a user namespace other than the machine's own, files whose owners are outside it show the
/// kernel's overflow uid: root's `/`, `/tmp` and `/home` among them. stet inside such a namespace
/// cannot tell root from other accounts out there, so that uid is taken as root's.
fn outside_owner() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let identity = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if identity {
        return None;
    }
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The one-line error for `source`, met at `failed` while preparing `state`.
fn classify(state: &Path, failed: PathBuf, source: std::io::Error) -> StateDirError {
    use rustix::io::Errno;
    let state = state.to_owned();
    let errno = source.raw_os_error().map(Errno::from_raw_os_error);
    match errno {
        Some(Errno::ROFS) => StateDirError::ReadOnly { state, failed },
        Some(Errno::NOSPC | Errno::DQUOT) => StateDirError::Full { state, failed },
        Some(Errno::ACCESS | Errno::PERM) => StateDirError::Denied {
            state,
            failed,
            uid: rustix::process::geteuid().as_raw(),
        },
        Some(Errno::NOTDIR | Errno::EXIST) => StateDirError::NotADirectory {
            state,
            failed: first_non_directory(&failed).unwrap_or(failed),
        },
        _ => StateDirError::Unusable {
            state,
            failed,
            source,
        },
    }
}

/// The first component of `path` that exists and is not a directory.
fn first_non_directory(path: &Path) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    ancestors
        .into_iter()
        .find(|dir| std::fs::metadata(dir).is_ok_and(|metadata| !metadata.is_dir()))
        .map(Path::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_state_dir_follows_xdg_then_home() {
        let at = |xdg: Option<&str>, home: Option<&str>| {
            locate_in(xdg.map(OsString::from), home.map(OsString::from))
        };
        assert_eq!(
            at(Some("/x/state"), Some("/home/m")).unwrap(),
            Path::new("/x/state/stet")
        );
        assert_eq!(
            at(None, Some("/home/m")).unwrap(),
            Path::new("/home/m/.local/state/stet")
        );
        assert_eq!(
            at(Some("relative"), Some("/home/m")).unwrap(),
            Path::new("/home/m/.local/state/stet"),
            "a relative XDG_STATE_HOME is ignored"
        );
        let unset = at(None, None).unwrap_err().to_string();
        assert!(unset.contains("set HOME"), "{unset}");
        assert!(matches!(at(Some(""), Some("")), Err(StateDirError::Unset)));
        let relative = at(None, Some("home")).unwrap_err().to_string();
        assert!(relative.contains("not an absolute path"), "{relative}");
    }

    #[test]
    fn a_prepared_state_dir_is_private_and_keeps_no_probe() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("home/.local/state/stet");
        prepare(&state).unwrap();
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::write(&home, "not a directory").unwrap();
        let state = home.join(".local/state/stet");
        let error = prepare(&state).unwrap_err();
        assert!(
            matches!(&error, StateDirError::NotADirectory { failed, .. } if *failed == home),
            "{error}"
        );
        let line = error.to_string();
        assert!(line.contains("set XDG_STATE_HOME"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn a_directory_open_to_every_account_on_the_way_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("shared");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let state = open.join("state/stet");
        let error = prepare(&state).unwrap_err();
        assert!(
            matches!(&error, StateDirError::OpenToOthers { failed, .. } if *failed == open),
            "{error}"
        );
        assert!(!state.exists(), "nothing was made below it");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        prepare(&state).unwrap();
    }

    #[test]
    fn every_filesystem_refusal_is_one_line_with_the_path_and_the_fix() {
        let state = Path::new("/srv/state/stet");
        let cases = [
            (
                rustix::io::Errno::ROFS,
                "read-only filesystem",
                "writable filesystem",
            ),
            (rustix::io::Errno::NOSPC, "no space left", "free space"),
            (rustix::io::Errno::DQUOT, "no space left", "free space"),
            (
                rustix::io::Errno::ACCESS,
                "not writable by you",
                "owner or mode",
            ),
        ];
        for (errno, what, fix) in cases {
            let source = std::io::Error::from_raw_os_error(errno.raw_os_error());
            let line = classify(state, state.to_owned(), source).to_string();
            assert!(line.starts_with("/srv/"), "{line}");
            assert!(line.contains(what) && line.contains(fix), "{line}");
            assert!(line.contains("/srv/state/stet"), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }
}
