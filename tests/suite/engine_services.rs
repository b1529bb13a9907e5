//! The engines the engine tests start for themselves, each stopped when the test drops it:
//! rootful or rootless Podman's API service, and a second `dockerd` as a remote engine (loopback TCP
//! with mutual TLS, certificates made by openssl at test time, its own network and mount
//! namespaces). Each is started on a socket the test made and is already listening on (socket
//! activation: `LISTEN_FDS`, the socket as fd 3), so a request waits in the backlog until the engine
//! answers: no polling for readiness.

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::endpoint::{self, Endpoint, Engine};

use super::accounts::running_as_root;

/// The account the rootless service runs as when the suite runs as root (`scripts/test` makes it,
/// with subordinate ids); as an ordinary user, the suite's own account.
pub(super) const ROOTLESS_ACCOUNT: &str = "stetpodman";

/// An engine process this test started; stopped (SIGTERM, then waited for) when dropped, so it can
/// stop what it started itself (containerd, conmon).
pub(super) struct Service {
    child: Child,
    pub(super) endpoint: Endpoint,
    log: PathBuf,
    /// Rootless Podman's runtime directory: its pause process outlives the service unless stopped.
    runtime_dir: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Connects to the engine; a failure quotes what the engine logged.
    pub(super) async fn connect(&self) -> Arc<DockerRuntime> {
        match DockerRuntime::connect_to(&self.endpoint).await {
            Ok(runtime) => Arc::new(runtime),
            Err(error) => panic!(
                "{error}; the engine logged: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let stop = |pid: i32| {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        };
        stop(self.child.id() as i32);
        let _ = self.child.wait();
        // What rootless Podman left running (its pause process) is found by the runtime
        // directory this test gave it, a path no other process has.
        if let Some(dir) = &self.runtime_dir {
            let mark = format!("XDG_RUNTIME_DIR={}", dir.display()).into_bytes();
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
                if environ.split(|byte| *byte == 0).any(|var| var == mark) {
                    stop(pid);
                }
            }
        }
    }
}

/// Runs `script` under `sh` with `listener` as fd 3 and `LISTEN_PID`/`LISTEN_FDS` naming it, as
/// `account` (root only) or as this account.
fn activated(listener: OwnedFd, script: &str, account: Option<&str>, log: &Path) -> Child {
    let script = format!("LISTEN_PID=$$ LISTEN_FDS=1 exec {script} 3<&0 </dev/null");
    let mut command = match account {
        Some(account) => {
            // setpriv execs (runuser would fork and leave the engine running past its own end).
            let home = format!("HOME=/home/{account}");
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid",
                account,
                "--regid",
                account,
                "--init-groups",
                "--",
            ]);
            command.args(["env", &home, "sh", "-c", &script]);
            command
        }
        None => {
            let mut command = Command::new("sh");
            command.args(["-c", &script]);
            command
        }
    };
    // Its working directory is the test's own: conmon writes files there (an `oom` marker when a
    // container is OOM-killed), which must not land in the checkout.
    if let Some(dir) = log.parent() {
        command.current_dir(dir);
    }
    command
        .stdin(Stdio::from(listener))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {script}: {e}"))
}

pub(super) fn need(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        found,
        "{program} is not installed: these tests need it (scripts/test installs it as root)"
    );
}

/// Podman's API service on a fresh socket: rootful as root, else rootless as `account`.
pub(super) fn podman(account: Option<&str>) -> Service {
    need("podman");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("podman.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut script = String::new();
    let mut rootless_dir = None;
    if let Some(account) = account {
        // Its own runtime directory, as a login would give it.
        let runtime_dir = dir.path().join("run");
        std::fs::create_dir(&runtime_dir).unwrap();
        std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let status = Command::new("chown")
            .arg(format!("{account}:"))
            .arg(&runtime_dir)
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "chown to {account}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        script = format!("env XDG_RUNTIME_DIR={} ", runtime_dir.display());
        rootless_dir = Some(runtime_dir);
    } else if !running_as_root() {
        script = format!("env XDG_RUNTIME_DIR={} ", dir.path().display());
        rootless_dir = Some(dir.path().to_owned());
    }
    // Exec sessions' conmon would otherwise linger 5 minutes after the service stops; at 0 an
    // exec session can be gone before its exit code is read.
    let conf = dir.path().join("containers.conf");
    std::fs::write(&conf, "[engine]\nexit_command_delay = 10\n").unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    if script.is_empty() {
        script.push_str("env ");
    }
    script.push_str(&format!(
        "CONTAINERS_CONF={} podman --runtime runc system service --time=0",
        conf.display()
    ));
    let log = dir.path().join("podman.log");
    let child = activated(listener.into(), &script, account, &log);
    Service {
        child,
        log,
        runtime_dir: rootless_dir,
        endpoint: endpoint::resolve(
            Engine::Podman,
            Some(&format!("unix://{}", socket.display())),
            &|_| None,
            None,
            rustix::process::geteuid().as_raw(),
        )
        .unwrap(),
        _dir: dir,
    }
}

/// Runs openssl with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority, a server certificate for 127.0.0.1 and a client certificate, made now.
fn certificates(dir: &Path) {
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(key);
    ca.extend([
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=stet-test-ca",
    ]);
    openssl(dir, &ca);
    for (name, subject, usage) in [
        (
            "server",
            "/CN=127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "client",
            "/CN=stet-test-client",
            "extendedKeyUsage=clientAuth\n",
        ),
    ] {
        let (key_file, cert_file) = match name {
            "server" => ("server-key.pem", "server-cert.pem"),
            _ => ("key.pem", "cert.pem"),
        };
        let csr = format!("{name}.csr");
        let ext = format!("{name}.ext");
        std::fs::write(dir.join(&ext), usage).unwrap();
        let mut request = vec!["req"];
        request.extend(key);
        request.extend(["-keyout", key_file, "-out", &csr, "-subj", subject]);
        openssl(dir, &request);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-out",
                cert_file,
                "-days",
                "1",
                "-extfile",
                &ext,
            ],
        );
    }
}

/// What the second engine must not see of this machine: the first engine's state (its data, its
/// exec root and socket under `/run`, containerd's and Podman's stores), the temporary directory
/// (where every test's state directory, dispatch directories and gateway sockets are), the home
/// directory and the checkout. Each is covered by an empty tmpfs in the engine's own mount
/// namespace, so a host path that leaks into a container's spec names nothing there.
fn hidden_from_the_remote_engine() -> Vec<PathBuf> {
    let mut hidden: Vec<PathBuf> = [
        "/tmp",
        "/run",
        "/var/lib/docker",
        "/var/lib/containerd",
        "/var/lib/containers",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    hidden.push(std::env::temp_dir());
    hidden.extend(std::env::var_os("HOME").map(PathBuf::from));
    hidden.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    hidden.sort();
    hidden.dedup();
    hidden.retain(|path| path.is_dir());
    hidden
}

/// A second Docker engine, as a remote one would be: its own data and exec roots (under
/// `/var/tmp`, since `/tmp` is hidden from it), its own network namespace, and its own mount
/// namespace in which [`hidden_from_the_remote_engine`] are empty; on loopback TCP with mutual TLS.
/// The endpoint is what `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` make of it.
pub(super) fn remote_docker() -> Service {
    need("dockerd");
    need("openssl");
    need("unshare");
    let dir = tempfile::Builder::new()
        .prefix("stet-remote-engine-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let root = dir.path();
    let certs = root.join("certs");
    std::fs::create_dir(&certs).unwrap();
    certificates(&certs);
    std::fs::write(root.join("empty.json"), "{}").unwrap();
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = |name: &str| root.join(name).display().to_string();
    let cert = |name: &str| certs.join(name).display().to_string();
    // Its own network namespace: a dockerd with `--bridge=none` deletes the `docker0` interface it
    // finds, which in the host's namespace is the first engine's bridge. The listening socket was
    // made in the host's namespace and stays there. Its own mount namespace (private propagation,
    // unshare's default): the tmpfs over what it must not see are its alone.
    let mut hide = String::new();
    for hidden in hidden_from_the_remote_engine() {
        let mode = if hidden == Path::new("/tmp") {
            "1777"
        } else {
            "0755"
        };
        hide.push_str(&format!(
            "mount -t tmpfs -o mode={mode},size=16m stet-hidden {} && ",
            hidden.display()
        ));
    }
    let script = format!(
        "unshare --net --mount sh -c '{hide}exec dockerd --config-file {} --data-root {} --exec-root {} --pidfile {} -H fd:// --bridge=none --iptables=false --ip-masq=false --storage-driver=vfs --tlsverify --tlscacert {} --tlscert {} --tlskey {}'",
        path("empty.json"),
        path("data"),
        path("exec"),
        path("dockerd.pid"),
        cert("ca.pem"),
        cert("server-cert.pem"),
        cert("server-key.pem"),
    );
    let log = root.join("dockerd.log");
    let child = activated(listener.into(), &script, None, &log);
    let host = format!("tcp://127.0.0.1:{port}");
    let certs_text = certs.display().to_string();
    let env = |name: &str| match name {
        "DOCKER_HOST" => Some(host.clone()),
        "DOCKER_TLS_VERIFY" => Some("1".to_owned()),
        "DOCKER_CERT_PATH" => Some(certs_text.clone()),
        _ => None,
    };
    let endpoint = endpoint::resolve(Engine::Docker, None, &env, None, 0).unwrap();
    Service {
        child,
        endpoint,
        log,
        runtime_dir: None,
        _dir: dir,
    }
}
