//! An engine reached over SSH (`[runtime] host = "ssh://…"`), for real: this machine's own `sshd`
//! (started by the client for each connection, in inetd mode, through the client configuration's
//! `ProxyCommand`, so no port is opened) with keys made at test time, and the real `ssh` client
//! reading a configuration the test writes; on the far side `docker system dial-stdio` reaches
//! this machine's engine. The demo runs end to end through it, every connection of it through
//! `ssh`; a host whose key is not known is refused, by name, without a prompt and without a hang.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use stet_protocol::state::Phase;

use super::accounts::running_as_root;
use super::headless::{Home, assert_nothing_left, docker_ready, run};

/// The name the test's SSH configuration gives the far side.
const REMOTE: &str = "stet-remote";

/// A host that never answers: its connection is a `ProxyCommand` that says nothing.
const SILENT: &str = "stet-silent";

/// A private SSH world: the server's and the client's keys, the server's configuration, a client
/// configuration naming [`REMOTE`], and an `ssh` first in `PATH` that reads it and counts its runs.
struct SshWorld {
    dir: tempfile::TempDir,
}

impl SshWorld {
    fn new(known: bool) -> SshWorld {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "/usr/sbin/sshd is not installed: this test needs it (scripts/test installs openssh-server as root)"
        );
        if running_as_root() {
            // sshd run by root checks for its privilege separation directory, which the package's
            // service would make at boot.
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        for key in ["host_key", "id"] {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path.join(key))
                .status()
                .unwrap();
            assert!(status.success(), "ssh-keygen {key}");
        }
        std::fs::copy(path.join("id.pub"), path.join("authorized_keys")).unwrap();
        let host_key = std::fs::read_to_string(path.join("host_key.pub")).unwrap();
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        let known_hosts = if known {
            format!("{REMOTE} {}\n", host_key.join(" "))
        } else {
            String::new()
        };
        std::fs::write(path.join("known_hosts"), known_hosts).unwrap();
        let p = path.display();
        std::fs::write(
            path.join("sshd_config"),
            format!(
                "HostKey {p}/host_key\nAuthorizedKeysFile {p}/authorized_keys\nUsePAM no\nStrictModes no\nPidFile none\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n"
            ),
        )
        .unwrap();
        std::fs::write(
            path.join("ssh_config"),
            format!(
                "Host {REMOTE}\n  IdentityFile {p}/id\n  IdentitiesOnly yes\n  UserKnownHostsFile {p}/known_hosts\n  StrictHostKeyChecking yes\n  ProxyCommand /usr/sbin/sshd -i -f {p}/sshd_config -E {p}/sshd.log\nHost {SILENT}\n  ProxyCommand sleep 600\n"
            ),
        )
        .unwrap();
        let bin = path.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let shim = bin.join("ssh");
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\necho \"$*\" >> {p}/ssh-runs\necho $$ >> {p}/ssh-pids\nexec /usr/bin/ssh -F {p}/ssh_config \"$@\"\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        SshWorld { dir }
    }

    /// `PATH` with the counting `ssh` first.
    fn path_variable(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Each `ssh` command line run so far.
    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("ssh-runs"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `stet demo --headless` for a fresh home whose engine is `ssh://host`, with this world's
    /// `ssh` first in `PATH`.
    fn demo_at(&self, host: &str) -> (Home, Command) {
        let home = Home::new();
        home.add_user_config(&format!("[runtime]\nhost = \"ssh://{host}\"\n"));
        let mut demo = home.demo();
        demo.env("PATH", self.path_variable())
            .env_remove("DOCKER_HOST");
        (home, demo)
    }
}

/// The processes whose command line names `dir` (the world's `ssh` and `sshd`), as `pid command`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid: PathBuf = entry.path();
        let Ok(cmdline) = std::fs::read(pid.join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&dir.display().to_string()) {
            found.push(format!("{} {cmdline}", pid.display()));
        }
    }
    found
}

#[test]
fn the_demo_runs_end_to_end_on_an_engine_reached_over_ssh() {
    docker_ready();
    let world = SshWorld::new(true);
    let (home, demo) = world.demo_at(REMOTE);
    let finished = run(demo);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert_eq!(finished.outcome().0, Phase::Done, "{finished:#?}");
    let runs = world.runs();
    assert!(
        !runs.is_empty()
            && runs.iter().all(|run| run.ends_with(&format!(
                "-T -o BatchMode=yes -o ConnectTimeout=15 -- {REMOTE} docker system dial-stdio"
            ))),
        "every connection to the engine goes through ssh: {runs:?}"
    );
    assert_nothing_left(&home, finished.dispatch());
    assert_eq!(
        processes_naming(world.path()),
        Vec::<String>::new(),
        "no ssh or sshd of the run is left"
    );
}

#[test]
fn an_engine_host_whose_ssh_key_is_unknown_is_refused_by_name_without_a_prompt() {
    docker_ready();
    let world = SshWorld::new(false);
    let (_home, demo) = world.demo_at(REMOTE);
    let finished = run(demo);
    assert_ne!(finished.code(), Some(0), "{finished:#?}");
    let said = format!("{}{}", finished.stdout, finished.stderr);
    assert!(
        said.contains(&format!("ssh://{REMOTE}")) && said.contains("dial-stdio"),
        "the error names the engine's address and how to see why: {said}"
    );
    assert!(!world.runs().is_empty(), "ssh was tried");
    assert_eq!(processes_naming(world.path()), Vec::<String>::new());
}

/// Found by attack: stet SIGKILLed while its `ssh` was still connecting left that `ssh` running
/// for good (it had no timeout, and nothing told it stet was gone). It now gives up after
/// `ConnectTimeout`; once connected, it ends with its stdin.
#[test]
fn an_ssh_still_connecting_does_not_outlive_a_sigkilled_stet() {
    use stet_engine::runtime::endpoint::SSH_CONNECT_TIMEOUT_SECS;
    let world = SshWorld::new(true);
    let (_home, mut demo) = world.demo_at(SILENT);
    demo.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // The shim writes its process id into a fifo here: read as it comes, with a bound.
    let fifo = world.path().join("ssh-pids");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let reader = rustix::fs::open(
        &fifo,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let mut stet = demo.spawn().unwrap();
    assert!(
        readable_within(&reader, Duration::from_secs(30)),
        "stet started no ssh"
    );
    let mut pid = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(reader), &mut pid).unwrap_or_default();
    let ssh: i32 = pid.trim().parse().unwrap_or_else(|_| panic!("{pid:?}"));
    stet.kill().unwrap();
    stet.wait().unwrap();
    // Its end, heard through a pidfd (it is not this process's child).
    let ssh_pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(ssh).unwrap(),
        rustix::process::PidfdFlags::empty(),
    );
    match ssh_pidfd {
        Ok(pidfd) => {
            let bound = Duration::from_secs(u64::from(SSH_CONNECT_TIMEOUT_SECS) + 10);
            assert!(
                readable_within(&pidfd, bound),
                "ssh {ssh} still runs {bound:?} after stet was killed: {:?}",
                processes_naming(world.path())
            );
        }
        // Already gone.
        Err(rustix::io::Errno::SRCH) => {}
        Err(error) => panic!("pidfd_open({ssh}): {error}"),
    }
    assert_eq!(processes_naming(world.path()), Vec::<String>::new());
}

/// Whether `fd` becomes readable (a fifo's data, a pidfd's process end) within `bound`.
fn readable_within(fd: &impl std::os::fd::AsFd, bound: Duration) -> bool {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let timeout = rustix::event::Timespec {
        tv_sec: i64::try_from(bound.as_secs()).unwrap(),
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&timeout)).unwrap() == 1
}
