//! Every account can run stet, whatever its directories: the built binary as an ordinary user would
//! run it, with a home under `/home/<name>`, no `XDG_RUNTIME_DIR` or a private one, a state
//! directory of any length and any umask. What it keeps is that account's alone, what a crash leaves
//! is found by the sweep, and a broken environment gets one line naming the path and the fix.
//!
//! The checks that another account cannot read or connect need a second account: they run when the
//! suite runs as root (which can act as one); as an ordinary user the modes and owners are the proof.
//! CI runs the suite both ways.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use stet_engine::dispatch::journal::Resource;
use stet_engine::dispatch::socket_dir::{SOCKET_PATH_MAX, SocketPlace};
use stet_protocol::event::{DispatchId, Event, EventKind};
use stet_protocol::state::Phase;

use super::headless::{STET_VARIABLES, containers_of, docker_ready, files_under};

/// An account other than the one running the tests, for the checks only root can make.
pub(super) const OTHER_UID: u32 = 65534;

pub(super) fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub(super) fn running_as_root() -> bool {
    me() == 0
}

/// A user's directories: a home at `<tmp>/home/margaret` and the state wherever the test says.
pub(super) struct Account {
    pub(super) root: tempfile::TempDir,
    pub(super) state_home: PathBuf,
    /// `XDG_RUNTIME_DIR`, when the test gives the account one.
    pub(super) runtime_dir: Option<PathBuf>,
}

impl Account {
    /// An account whose `XDG_STATE_HOME` is `state_home` below its temporary root (`None`: the XDG
    /// default, `~/.local/state`).
    pub(super) fn new(state_home: Option<&str>) -> Account {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home/margaret");
        std::fs::create_dir_all(&home).unwrap();
        let state_home = match state_home {
            Some(relative) => root.path().join(relative),
            None => home.join(".local/state"),
        };
        Account {
            root,
            state_home,
            runtime_dir: None,
        }
    }

    pub(super) fn home(&self) -> PathBuf {
        self.root.path().join("home/margaret")
    }

    pub(super) fn state(&self) -> PathBuf {
        self.state_home.join("stet")
    }

    /// Gives the account a private `XDG_RUNTIME_DIR` (mode 0700, as a login session has).
    pub(super) fn with_runtime_dir(mut self) -> Account {
        let dir = self.root.path().join("run/user");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        self.runtime_dir = Some(dir);
        self
    }

    /// The stet binary, copied where another account can run it when the tests run as root (the
    /// build directory may be in root's home), with the stet-sandbox it packages beside it as
    /// installed.
    pub(super) fn binary(&self) -> PathBuf {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_stet"));
        if !running_as_root() {
            return built;
        }
        let copy = self.root.path().join("bin/stet");
        if !copy.exists() {
            std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
            for (from, to) in [
                (built.as_path(), copy.clone()),
                (
                    Path::new(env!("CARGO_BIN_EXE_stet-sandbox")),
                    stet_engine::image::sandbox_executable_beside(&copy),
                ),
            ] {
                std::fs::copy(from, &to).unwrap();
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        copy
    }

    /// Where this account's gateway sockets go, as stet chooses it.
    pub(super) fn sockets(&self) -> SocketPlace {
        SocketPlace::choose(
            self.runtime_dir.clone().map(Into::into),
            me(),
            &stet_engine::runtime::state_label(&self.state()),
        )
    }

    /// `stet <args>` as this account: its home and directories, none of the caller's `STET_*` or XDG
    /// settings, run through `sh` after the shell commands `setup` (a umask, a ulimit).
    pub(super) fn stet(&self, setup: &str, args: &[&str]) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("{setup}; exec \"$0\" \"$@\""))
            .arg(self.binary())
            .args(args)
            .env("HOME", self.home())
            .env("XDG_STATE_HOME", &self.state_home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(self.home())
            .stdin(Stdio::null());
        if let Some(dir) = &self.runtime_dir {
            command.env("XDG_RUNTIME_DIR", dir);
        }
        for variable in STET_VARIABLES {
            command.env_remove(variable);
        }
        command
    }
}

fn events(stdout: &[u8]) -> Vec<Event> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

pub(super) fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Whether `OTHER_UID` can open `path` (root only; `cat` gives up with the reason).
fn other_account_reads(path: &Path) -> Result<(), String> {
    let output = Command::new("cat")
        .arg(path)
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Every directory below `dir` (itself included) is 0700 and every file 0600, this account's.
fn assert_private_tree(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    assert_eq!(std::fs::metadata(dir).unwrap().uid(), me());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        if metadata.is_dir() {
            assert_private_tree(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            assert_eq!(metadata.uid(), me(), "{}", path.display());
        }
    }
}

#[test]
fn the_demo_works_with_a_state_dir_of_any_length_and_keeps_its_files_private() {
    docker_ready();
    // More than 200 bytes before `stet/`: a socket below it could never fit in 107.
    let long = format!("deep/{}/state", "a-long-directory-name".repeat(9));
    let account = Account::new(Some(&long));
    assert!(account.state().as_os_str().len() > 200);
    let run = account
        .stet("umask 000", &["demo", "--headless", "--pace", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let events = events(&run.stdout);
    let dispatch = events[0].dispatch;
    assert!(
        events
            .iter()
            .any(|event| matches!(event.kind, EventKind::Usage(_))),
        "the agent asked the model through the gateway: {events:#?}"
    );
    assert!(matches!(
        events.last().map(|event| &event.kind),
        Some(EventKind::Finished {
            outcome: Phase::Done,
            ..
        })
    ));

    // Nothing is left: no container, no dispatch or socket directory, no journal record.
    assert_eq!(containers_of(dispatch), Vec::<String>::new());
    let sockets = account.sockets();
    assert!(sockets.longest_socket_path() <= SOCKET_PATH_MAX);
    assert!(!sockets.dispatch_dir(dispatch).exists());
    assert_eq!(std::fs::read_dir(sockets.root()).unwrap().count(), 0);
    let state = account.state();
    assert_eq!(
        std::fs::read_dir(state.join("dispatches")).unwrap().count(),
        0
    );
    assert_eq!(std::fs::read_dir(state.join("journal")).unwrap().count(), 0);

    // Under umask 000, everything stet keeps is still this account's alone.
    assert_eq!(mode(&state), 0o700);
    for kept in ["logs", "runs", "reviews", "journal", "dispatches"] {
        assert_private_tree(&state.join(kept));
    }
    let kept = [
        files_under(&state.join("logs")),
        files_under(&state.join("runs")),
        files_under(&state.join("reviews")),
    ]
    .concat();
    assert!(
        kept.len() >= 5,
        "logs, the run record and a review: {kept:?}"
    );
    if running_as_root() {
        for file in &kept {
            let refused = other_account_reads(file).unwrap_err();
            assert!(refused.contains("Permission denied"), "{refused}");
        }
    }
}

#[test]
fn a_killed_dispatch_leaves_its_socket_dir_to_the_sweep_and_no_other_account_reaches_it() {
    docker_ready();
    let account = Account::new(None).with_runtime_dir();
    let mut child = account
        .stet(
            "umask 022",
            &["demo", "--headless", "--pace", "1", "--timeout", "2m"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kept open until the process is killed: a closed pipe would end the dispatch on its own.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The agent is at work once its first model answer is metered: the gateway is up.
    let mut dispatch = None;
    for line in lines.by_ref() {
        let event: Event = serde_json::from_str(&line.unwrap()).unwrap();
        dispatch = Some(event.dispatch);
        if matches!(event.kind, EventKind::Usage(_)) {
            break;
        }
    }
    let dispatch: DispatchId = dispatch.expect("the demo printed events");
    let sockets = account.sockets();
    let socket_dir = sockets.dispatch_dir(dispatch);
    let socket = socket_dir.join(stet_sandbox::relay::SOCKET_NAME);
    assert!(
        socket_dir.starts_with(account.runtime_dir.as_ref().unwrap()),
        "the socket is in the account's runtime directory: {}",
        socket_dir.display()
    );
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    for dir in [sockets.root(), socket_dir.as_path()] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    if running_as_root() {
        // Neither another account nor the sandbox's own uid, on the host, gets as far as the
        // socket: the path does not resolve for them (connecting needs it to).
        for uid in [OTHER_UID, stet_engine::runtime::DEFAULT_SANDBOX_UID] {
            let output = Command::new("cat")
                .arg(&socket)
                .uid(uid)
                .gid(uid)
                .output()
                .unwrap();
            let refused = String::from_utf8_lossy(&output.stderr);
            assert!(
                refused.contains("Permission denied"),
                "uid {uid}: {refused}"
            );
        }
    }

    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);
    let journal = account.state().join("journal");
    let record = std::fs::read_dir(&journal)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().contains(&dispatch.to_string()))
        .expect("the killed dispatch's journal record");
    let journaled = std::fs::read_to_string(&record).unwrap();
    let wanted = serde_json::to_string(&Resource::SocketDir {
        path: socket_dir.clone(),
    })
    .unwrap();
    assert!(journaled.contains(&wanted), "{journaled}");
    assert!(socket_dir.exists());

    let swept = account.stet("umask 022", &["sweep"]).output().unwrap();
    let report = String::from_utf8_lossy(&swept.stdout);
    assert_eq!(swept.status.code(), Some(0), "{report}");
    assert!(
        report
            .lines()
            .any(|line| line == format!("removed {}", socket_dir.display())),
        "{report}"
    );
    assert!(!socket_dir.exists());
    assert_eq!(containers_of(dispatch), Vec::<String>::new());
    assert_eq!(std::fs::read_dir(&journal).unwrap().count(), 0);
}

/// The one line `stet sweep` prints on standard error, asserting it fails with exit 2.
fn one_line_error(output: Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn an_unset_or_unusable_home_is_one_line_naming_the_path_and_the_fix() {
    let account = Account::new(None);
    let mut unset = account.stet("umask 022", &["sweep"]);
    unset.env_remove("HOME").env_remove("XDG_STATE_HOME");
    let line = one_line_error(unset.output().unwrap());
    assert!(
        line.starts_with("stet: neither XDG_STATE_HOME nor HOME is set")
            && line.contains("set HOME to your home directory"),
        "{line}"
    );

    let file_home = account.root.path().join("home-is-a-file");
    std::fs::write(&file_home, "").unwrap();
    let mut file = account.stet("umask 022", &["sweep"]);
    file.env("HOME", &file_home).env_remove("XDG_STATE_HOME");
    let line = one_line_error(file.output().unwrap());
    assert!(
        line.starts_with(&format!("stet: {}: not a directory", file_home.display())),
        "{line}"
    );

    // A home the account may not write: as root, the other account in a home that is root's.
    let locked = account.root.path().join("locked-home");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let mut denied = account.stet("umask 022", &["sweep"]);
    denied.env("HOME", &locked).env_remove("XDG_STATE_HOME");
    if running_as_root() {
        std::fs::set_permissions(account.root.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        denied.uid(OTHER_UID).gid(OTHER_UID);
    }
    let line = one_line_error(denied.output().unwrap());
    assert!(
        line.starts_with(&format!("stet: {}: not writable by you", locked.display()))
            && line.contains("set XDG_STATE_HOME"),
        "{line}"
    );
}

/// `stet sweep` with its state on a fresh tmpfs mounted with `options`, after `prepare` ran in the
/// mount, inside a mount namespace of its own (`unshare`, as any account may).
fn sweep_on_tmpfs(account: &Account, options: &str, prepare: &str) -> Output {
    let mount = account.root.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let script = format!(
        "mount -t tmpfs -o {options} tmpfs \"$1\" && {prepare} && XDG_STATE_HOME=\"$1/state\" exec \"$0\" sweep"
    );
    let mut command = Command::new("unshare");
    command
        .args(["--map-root-user", "--mount", "sh", "-c", &script])
        .arg(account.binary())
        .arg(&mount)
        .env("HOME", account.home())
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null());
    command.output().unwrap()
}

#[test]
fn a_read_only_or_full_filesystem_is_one_line_naming_the_path_and_the_fix() {
    let account = Account::new(None);
    let read_only = one_line_error(sweep_on_tmpfs(&account, "ro,size=1m", "true"));
    assert!(
        read_only.contains("/mnt/state: read-only filesystem, so stet cannot keep its state in ")
            && read_only.contains("set XDG_STATE_HOME to a directory on a writable filesystem"),
        "{read_only}"
    );

    let account = Account::new(None);
    let full = one_line_error(sweep_on_tmpfs(
        &account,
        "size=64k",
        "mkdir -p \"$1/state/stet\" && (dd if=/dev/zero of=\"$1/fill\" bs=4k 2>/dev/null; true)",
    ));
    assert!(
        full.contains("/mnt/state/stet: no space left") && full.contains("free space"),
        "{full}"
    );
}

#[test]
fn a_docker_socket_closed_to_the_account_says_so() {
    let account = Account::new(None);
    // As root: another account against the real engine's socket (root's and the docker group's).
    // As an ordinary user: a socket of the user's own with no permission for anyone.
    let closed = account.root.path().join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut sweep = account.stet("umask 022", &["sweep"]);
    let socket = if running_as_root() {
        std::fs::set_permissions(account.root.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let home = account.home();
        std::os::unix::fs::chown(&home, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
        sweep.uid(OTHER_UID).gid(OTHER_UID);
        PathBuf::from("/var/run/docker.sock")
    } else {
        closed.clone()
    };
    sweep.env("DOCKER_HOST", format!("unix://{}", socket.display()));
    let line = one_line_error(sweep.output().unwrap());
    assert!(
        line.starts_with(&format!(
            "stet: Docker's socket {} is there, but you (uid ",
            socket.display()
        )) && line.contains("may not use it")
            && line.contains("usermod -aG"),
        "{line}"
    );
    assert!(!line.contains("is the daemon running"), "{line}");
}
