//! Red-team tests of the channel stream (issue #33) against a real container on the real Docker
//! engine, as a hostile agent in a copy-mode sandbox would attack it: a process in place of the
//! relay that stops reading the host's frames must not hold the host's stop (nor the dispatch
//! with it), and a process of the sandbox's user cannot reach the real relay's stdin or stdout
//! through `/proc` (the relay is non-dumpable) to forge frames.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use stet_engine::dispatch::channel_stream::{ChannelStream, Ended, attach_channels};
use stet_engine::dispatch::channels::DispatchChannels;
use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{DispatchSandbox, SandboxRequest};
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    ContainerRuntime as _, DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy,
    OutputChunk, SandboxProcess, SandboxUser, WORKSPACE_MOUNT,
};
use stet_protocol::event::DispatchId;

const STET: &str = "/usr/local/bin/stet";

/// A copy-mode sandbox of the OpenHands image (it has a shell and Python, as an agent's would),
/// with no channel of its own: the test attaches them.
async fn hostile_copy_sandbox(state: &std::path::Path) -> (Arc<DockerRuntime>, DispatchSandbox) {
    let image = tokio::task::spawn_blocking(|| super::live::live_image("openhands"))
        .await
        .unwrap();
    let journal = Journal::open(&state.join("journal")).unwrap();
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap_or_else(|error| {
        panic!("this test needs the Docker engine: {error}");
    }));
    let request = SandboxRequest {
        dispatch: DispatchId::new(),
        image: ImageRef::parse(&image, false).unwrap(),
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
        keepalive: vec![STET.into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: None,
        mounts: Mounts::copy(ImportLimits::default()),
        credential: None,
    };
    let sandbox = DispatchSandbox::provision(runtime.clone(), &journal, state, request)
        .await
        .unwrap();
    (runtime, sandbox)
}

/// Runs `argv` in the sandbox as its user: the exit code and standard output and error.
async fn exec(sandbox: &DispatchSandbox, argv: &[&str]) -> (i64, String) {
    let process = SandboxProcess {
        argv: argv.iter().map(|arg| (*arg).to_owned()).collect(),
        env: BTreeMap::new(),
        workdir: WORKSPACE_MOUNT.into(),
    };
    let (sender, mut receiver) = mpsc::channel::<OutputChunk>(64);
    let collector = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(chunk) = receiver.recv().await {
            out.extend_from_slice(&chunk.bytes);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    let exit = sandbox.run(&process, sender).await.unwrap();
    (exit.code, collector.await.unwrap())
}

/// A host end that answers every connection with an endless stream (a model reply, a download
/// through the proxy), counting the connections it accepted.
fn endless_end(path: &std::path::Path) -> Arc<AtomicUsize> {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counting = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let block = vec![b'r'; 64 * 1024];
                while socket.write_all(&block).await.is_ok() {}
            });
        }
    });
    accepted
}

/// This process's open descriptors (a figure for the report).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// Opens 32 connections on the model channel, reads 2 MiB of what the host sends, leaves a
/// marker, and never reads again (as an agent that stopped its relay with SIGSTOP would leave the
/// stream).
const STOPS_READING: &str = r#"
import os, struct, sys, time
out = sys.stdout.buffer
for connection in range(32):
    out.write(struct.pack(">BII", 1, connection, 5) + b"model")
out.flush()
got = 0
while got < 2 * 1024 * 1024:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    got += len(chunk)
open("stopped-reading", "w").write(str(got))
time.sleep(3600)
"#;

/// A process exec'd in place of the relay that takes the host's replies, then stops reading its
/// stdin while the host still has megabytes for it: the host's stop still ends the stream (cut,
/// and saying so), the sandbox goes on, and it tears down cleanly.
#[tokio::test]
async fn a_process_in_place_of_the_relay_that_stops_reading_cannot_hold_the_hosts_stop() {
    let state = tempfile::tempdir().unwrap();
    let (runtime, sandbox) = hostile_copy_sandbox(state.path()).await;
    let ends = tempfile::tempdir().unwrap();
    let accepted = endless_end(&ends.path().join("model.sock"));
    let fds_before = open_fds();
    let hostile = SandboxProcess {
        argv: ["python3", "-c", STOPS_READING].map(str::to_owned).to_vec(),
        env: BTreeMap::new(),
        workdir: WORKSPACE_MOUNT.into(),
    };
    let attached = runtime
        .exec_attached(sandbox.container(), &hostile)
        .await
        .unwrap();
    let stream = ChannelStream::over(
        attached,
        vec!["model".to_owned()],
        vec![ends.path().join("model.sock")],
    );
    // Until the process says it stopped reading (each exec paces the next).
    let mut stopped_reading = None;
    for _ in 0..300 {
        let (code, said) = exec(&sandbox, &["cat", "stopped-reading"]).await;
        if code == 0 {
            stopped_reading = Some(said);
            break;
        }
    }
    let got = stopped_reading.expect("the hostile process never stopped reading");
    assert_eq!(accepted.load(Ordering::SeqCst), 32);
    let fds_during = open_fds();
    let stopping = tokio::time::timeout(Duration::from_secs(60), stream.stop());
    let end = stopping
        .await
        .expect("the host's stop waited on a relay that reads nothing");
    assert!(
        matches!(&end.ended, Ended::Broken(why) if why.contains("read none")),
        "{end}"
    );
    let fds_after = open_fds();
    eprintln!(
        "the process read {got} bytes then stopped; descriptors of the test process: {fds_before} before, {fds_during} while held, {fds_after} after the stop"
    );
    // The sandbox goes on.
    let (code, said) = exec(&sandbox, &[STET, "probe"]).await;
    assert_eq!(code, 0, "{said}");
    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
}

/// Finds the relay (`sandbox-relay --stdio`) among the sandbox's processes and tries, as the
/// sandbox's user, to open its stdout for writing and its stdin for reading, and to read its
/// memory: each must be refused. Prints the relay's uid and its own, then what each attempt got.
const REACH_THE_RELAY: &str = r#"
import os
relay = None
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if b"sandbox-relay" in cmdline and b"--stdio" in cmdline:
        relay = pid
print("relay", relay)
status = open(f"/proc/{relay}/status").read()
uid = [line for line in status.splitlines() if line.startswith("Uid:")][0].split()[1]
print("relay-uid", uid, "my-uid", os.getuid())
for path, flags in ((f"/proc/{relay}/fd/1", os.O_WRONLY), (f"/proc/{relay}/fd/0", os.O_RDONLY), (f"/proc/{relay}/mem", os.O_RDONLY)):
    try:
        fd = os.open(path, flags)
        if flags == os.O_WRONLY:
            os.write(fd, b"\x02\x00\x00\x00\x07\x00\x00\x00\x01X")
        print("OPENED", path)
    except OSError as error:
        print("refused", path, error.errno)
"#;

/// The real relay runs as the sandbox's own user, so an agent can signal it; but it is
/// non-dumpable, so the agent can neither open its stdout to forge frames nor its stdin to read
/// the host's, nor read its memory: the host's stream sees no frame the relay did not write.
#[tokio::test]
async fn a_sandbox_process_cannot_open_the_relays_stdin_or_stdout_through_proc() {
    let state = tempfile::tempdir().unwrap();
    let (runtime, sandbox) = hostile_copy_sandbox(state.path()).await;
    let ends = tempfile::tempdir().unwrap();
    let accepted = endless_end(&ends.path().join("model.sock"));
    let dyn_runtime: Arc<dyn stet_engine::runtime::ContainerRuntime> = runtime.clone();
    let channels = DispatchChannels::for_dispatch(true, false);
    let stream = attach_channels(&dyn_runtime, sandbox.container(), &channels, ends.path())
        .await
        .unwrap();
    let mut said = String::new();
    for _ in 0..50 {
        let (code, out) = exec(&sandbox, &["python3", "-c", REACH_THE_RELAY]).await;
        said = out;
        if code == 0 && !said.contains("relay None") {
            break;
        }
    }
    eprintln!("{said}");
    assert!(said.contains("relay-uid"), "{said}");
    assert!(!said.contains("OPENED"), "{said}");
    assert_eq!(said.matches("refused").count(), 3, "{said}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a forged frame dialled");
    let end = stream.stop().await;
    assert_eq!(end.ended, Ended::Stopped, "{end}");
    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
}

/// The agent's step: eight downloads through the egress proxy at the channel's port, read side by
/// side until each gave 512 KiB (the host keeps a window of each in flight), then the relay stopped with SIGSTOP —
/// it runs as the agent's own user, so the agent may signal it — while the host still has
/// megabytes for it.
const STOP_THE_RELAY: &str = r#"
import os, selectors, signal, socket
port = PORT
flowing = selectors.DefaultSelector()
read = {}
for _ in range(8):
    s = socket.create_connection(("127.0.0.1", 4142))
    s.sendall(b"GET http://localhost:%d/ HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (port, port))
    s.setblocking(False)
    flowing.register(s, selectors.EVENT_READ)
    read[s] = 0
# All eight read side by side, so that every one has the host's window in flight.
while min(read.values()) < 512 * 1024:
    for key, _ in flowing.select():
        chunk = key.fileobj.recv(65536)
        if not chunk:
            read[key.fileobj] = 1 << 30
            flowing.unregister(key.fileobj)
            continue
        read[key.fileobj] += len(chunk)
name = b"sandbox-" + b"relay"
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        args = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
    except OSError:
        continue
    if any(arg.endswith(name) for arg in args) and b"--stdio" in args:
        os.kill(int(pid), signal.SIGSTOP)
        print("stopped the relay", pid)
"#;

/// An agent that stops its own relay (SIGSTOP) while the host has megabytes in flight for it: the
/// host's writer is stuck on a stream nobody reads. The dispatch must still end (by its timeout if
/// the agent waits on its stopped relay), tear its container down and say in its run record that
/// the channels were cut; before the fix it waited on that writer for ever, timeout or not.
#[test]
fn an_agent_that_stops_its_relay_cannot_hold_the_dispatch_open() {
    use super::headless::{Project, Watched, docker_ready, scenario, signal};
    docker_ready();
    let body = "d".repeat(16 << 20);
    let downloads = super::egress::Loopback::http(&body);
    let script = STOP_THE_RELAY.replace("PORT", &downloads.port().to_string());
    let project = Project::new(&scenario(&[
        &format!("run = [\"python3\", \"-c\", '''{script}''']"),
        "finish = \"Stopped the relay.\"",
    ]));
    project.allow_egress(&[format!("localhost:{}", downloads.port())], "");
    project.home.add_user_config(&format!(
        "\n[dispatch]\nimage = \"{}\"\n\n[runtime]\nmounts = \"copy\"\n",
        super::live::live_image("openhands")
    ));
    let watched = Watched::start(project.headless(&["--timeout", "60s"]));
    // A watchdog, not a synchronisation: a dispatch that has not ended in four minutes hangs.
    let pid = watched.pid();
    let (ended, watching) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watching.recv_timeout(Duration::from_secs(240)).is_err() {
            signal(pid, "KILL");
            return true;
        }
        false
    });
    let finished = watched.finish();
    let _ = ended.send(());
    let hung = watchdog.join().unwrap();
    assert!(
        !hung,
        "the dispatch hung on its stopped relay and was killed: {finished:#?}"
    );
    assert!(matches!(finished.code(), Some(0 | 4)), "{finished:#?}");
    let output = super::egress::output_of(&finished);
    assert!(
        output.contains("stopped the relay"),
        "{output}{finished:#?}"
    );
    // Whether the host's writer is still stuck when the dispatch stops depends on how much of the
    // frames in flight the engine's stdin path (dockerd, the shim, the exec's pipe) took before the
    // relay stopped: on a loaded machine it can take all of them, and the stop then ends the stream
    // cleanly (CI saw it so, with no warning). That the host's stop never waits on a reader that
    // reads nothing is held for certain by
    // `stet_pump::mux::redteam::a_relay_that_stops_reading_cannot_hold_the_hosts_stop`; here, the
    // dispatch ends and is torn down whichever way it went.
    finished.torn_down_cleanly();
}
