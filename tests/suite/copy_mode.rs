//! Copy mode (`[runtime] mounts = "copy"`, issue #33) on the real Docker engine: the container's
//! spec names no host path for the workspace or the outputs (asserted on `inspect`), the base goes
//! in and the agent's work comes back through the archive API, and the demo runs end to end with
//! the same pushed change as in bind mode.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{DispatchSandbox, SandboxRequest, WorkspaceSource};
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, OutputChunk, SandboxProcess,
    SandboxUser, WORKSPACE_MOUNT,
};
use stet_protocol::event::{DispatchId, EventKind};
use stet_protocol::state::Phase;
use stet_sanitize::branch::CommitSha;

use super::headless::{Home, Watched, docker_ready, run};
use super::support;

const STET: &str = "/usr/local/bin/stet";

/// Runs `argv` in the sandbox; its exit code and standard output.
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
            if chunk.stream == stet_engine::runtime::OutputStream::Stdout {
                out.extend_from_slice(&chunk.bytes);
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    let exit = sandbox.run(&process, sender).await.unwrap();
    (exit.code, collector.await.unwrap())
}

#[tokio::test]
async fn copy_mode_shares_no_host_path_and_brings_the_agents_work_back() {
    let image = support::sandbox_image().await;
    let state = tempfile::tempdir().unwrap();
    let journal = Journal::open(&state.path().join("journal")).unwrap();
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap_or_else(|error| {
        panic!("this test needs the Docker engine: {error}");
    }));
    let origin = tempfile::tempdir().unwrap();
    support::git(origin.path(), &["init", "-q", "-b", "main"]);
    std::fs::create_dir(origin.path().join("src")).unwrap();
    std::fs::write(
        origin.path().join("src/lib.rs"),
        "pub fn answer() -> u8 { 42 }\n",
    )
    .unwrap();
    support::git(origin.path(), &["add", "."]);
    support::git(origin.path(), &["commit", "-q", "-m", "base"]);
    let base = CommitSha::parse(&support::git(origin.path(), &["rev-parse", "HEAD"])).unwrap();
    let user = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap();
    let request = SandboxRequest {
        dispatch: DispatchId::new(),
        image: ImageRef::parse(&image.id, false).unwrap(),
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user,
        keepalive: vec![STET.into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: Some(WorkspaceSource {
            repository: origin.path().to_owned(),
            base: base.clone(),
            fetch: None,
            limits: Default::default(),
        }),
        mounts: Mounts::copy(ImportLimits::default()),
        credential: None,
    };
    let dispatch = request.dispatch;
    let sandbox = DispatchSandbox::provision(runtime.clone(), &journal, state.path(), request)
        .await
        .unwrap();
    // What the harness stages in the outputs directory goes in before the first process.
    std::fs::write(sandbox.paths().outputs.join("task.md"), "the task\n").unwrap();

    let inspected = runtime
        .client()
        .inspect_container(sandbox.container(), None)
        .await
        .unwrap();
    let host = inspected.host_config.clone().unwrap();
    assert_eq!(host.binds, None);
    assert_eq!(host.readonly_rootfs, Some(true));
    let mounts = inspected.mounts.clone().unwrap();
    let targets: Vec<_> = mounts
        .iter()
        .map(|mount| mount.destination.clone().unwrap())
        .collect();
    assert_eq!(targets.len(), 2, "{mounts:?}");
    for mount in &mounts {
        assert_eq!(mount.typ.as_deref(), Some("volume"), "{mount:?}");
        let source = mount.source.clone().unwrap_or_default();
        assert!(
            !source.starts_with(&state.path().display().to_string()),
            "{source} is stet's own directory"
        );
    }
    for wanted in ["/workspace", "/outputs"] {
        assert!(targets.iter().any(|target| target == wanted), "{targets:?}");
    }

    let (code, report) = exec(&sandbox, &[STET, "probe", "--fill-mb", "1"]).await;
    assert_eq!(code, 0, "{report}");
    let report: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(report["workspace_writable"], true, "{report}");
    assert_eq!(report["uid"], user.uid, "{report}");
    // The base went in (the probe ran inside it) and the agent's work came back beside it.
    let workspace = &sandbox.paths().workspace;
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/lib.rs")).unwrap(),
        "pub fn answer() -> u8 { 42 }\n"
    );
    assert!(workspace.join(".git/HEAD").is_file());
    assert_eq!(
        std::fs::metadata(workspace.join("stet-fill-0"))
            .unwrap()
            .len(),
        1024 * 1024
    );
    // The staged file went in and came back with the container's outputs.
    assert_eq!(
        std::fs::read_to_string(sandbox.paths().outputs.join("task.md")).unwrap(),
        "the task\n"
    );

    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
    // The container's volumes went with it.
    let volumes = runtime
        .client()
        .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
        .await
        .unwrap();
    let left: Vec<_> = volumes
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|volume| {
            volume.labels.get(stet_engine::runtime::DISPATCH_LABEL) == Some(&dispatch.to_string())
        })
        .map(|volume| volume.name)
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// What the branch the demo pushed changes against `main`, in the demo's bare remote: each path with
/// its blobs before and after (the base's `stet.toml` names the home, so whole trees differ).
fn pushed_change(home: &Home, finished: &super::headless::Finished) -> String {
    let branch = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Pushed { branch, .. } => Some(branch.as_str().to_owned()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("nothing was pushed: {finished:#?}"));
    support::git(
        &home.demo_dir().join("remote.git"),
        &["diff-tree", "-r", "main", &format!("refs/heads/{branch}")],
    )
}

#[test]
fn the_demo_runs_end_to_end_in_copy_mode_and_pushes_the_change_bind_mode_pushes() {
    docker_ready();
    let bind = Home::new();
    let bound = run(bind.demo());
    assert_eq!(bound.code(), Some(0), "{bound:#?}");
    let copy = Home::new();
    copy.add_user_config("[runtime]\nmounts = \"copy\"\n");
    // At pace 1 the agent is still at work when the run enters `running`: its container is there to
    // inspect.
    let mut command = copy.stet();
    command
        .args(["demo", "--headless", "--pace", "1", "--dir"])
        .arg(copy.demo_dir());
    let mut watched = Watched::start(command);
    let running = watched.until_running();
    let inspected = std::process::Command::new("docker")
        .args(["inspect", "--format"])
        .arg("{{json .HostConfig.Binds}} {{range .Mounts}}{{.Type}}:{{.Source}}:{{.Destination}} {{end}}")
        .arg(running.dispatch.to_string())
        .output()
        .unwrap();
    let inspected = String::from_utf8(inspected.stdout).unwrap();
    // No bind mount at all, not even the channels' socket directory: two volumes and nothing else.
    assert!(inspected.starts_with("null "), "{inspected}");
    let mounts: Vec<&str> = inspected.split_whitespace().skip(1).collect();
    assert_eq!(mounts.len(), 2, "{inspected}");
    for target in ["/workspace", "/outputs"] {
        assert!(
            mounts
                .iter()
                .any(|mount| mount.starts_with("volume:") && mount.ends_with(&format!(":{target}"))),
            "{inspected}"
        );
    }
    assert!(!inspected.contains("bind:"), "{inspected}");
    assert!(!inspected.contains("/run/stet"), "{inspected}");
    let host_mounts = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{json .HostConfig.Mounts}}"])
        .arg(running.dispatch.to_string())
        .output()
        .unwrap();
    let host_mounts = String::from_utf8(host_mounts.stdout).unwrap();
    assert!(!host_mounts.contains("\"Source\""), "{host_mounts}");
    assert!(!host_mounts.contains("\"bind\""), "{host_mounts}");
    let state = copy.state().display().to_string();
    assert!(!host_mounts.contains(&state), "{host_mounts}");
    let copied = watched.finish();
    assert_eq!(copied.code(), Some(0), "{copied:#?}");
    assert_eq!(copied.outcome().0, Phase::Done);
    let change = pushed_change(&copy, &copied);
    assert!(change.contains("src/main.rs"), "{change}");
    assert_eq!(change, pushed_change(&bind, &bound));
    // The gateway metered the same requests over the stream as over the socket directory.
    assert_eq!(usage_of(&copied), usage_of(&bound));
    assert!(!usage_of(&copied).is_empty(), "{copied:#?}");
    assert_eq!(copied.warnings(), bound.warnings());
    super::headless::assert_nothing_left(&copy, copied.dispatch());
}

/// The tokens of each `usage` event of a run, in order.
fn usage_of(finished: &super::headless::Finished) -> Vec<(u64, u64)> {
    finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => Some((usage.input_tokens, usage.output_tokens)),
            _ => None,
        })
        .collect()
}

/// A copy-mode sandbox of `image` on `runtime`, with no channel of its own (the test attaches them).
pub(super) async fn bare_copy_sandbox(
    state: &std::path::Path,
    runtime: &Arc<DockerRuntime>,
    image: &ImageRef,
) -> DispatchSandbox {
    let journal = Journal::open(&state.join("journal")).unwrap();
    let request = SandboxRequest {
        dispatch: DispatchId::new(),
        image: image.clone(),
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
        keepalive: vec![STET.into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: None,
        mounts: Mounts::copy(ImportLimits::default()),
        credential: None,
    };
    DispatchSandbox::provision(runtime.clone(), &journal, state, request)
        .await
        .unwrap()
}

/// The local engine and the sandbox image in it.
async fn local_engine() -> (Arc<DockerRuntime>, ImageRef) {
    let image = support::sandbox_image().await;
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap_or_else(|error| {
        panic!("this test needs the Docker engine: {error}");
    }));
    (runtime, ImageRef::parse(&image.id, false).unwrap())
}

/// Over the exec stream of `runtime` (Docker, or Podman's compatible API), the egress channel carries
/// a tunnel the scripted agent opens both ways, each way past a connection's credit window: the
/// agent sends `BYTES` to a host end that reads them all and then answers as many.
pub(super) async fn a_tunnel_rides_the_exec_stream_both_ways(
    runtime: Arc<DockerRuntime>,
    image: ImageRef,
) {
    use stet_engine::dispatch::channel_stream::attach_channels;
    use stet_engine::dispatch::channels::DispatchChannels;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const BYTES: u64 = 3_000_000;

    let state = tempfile::tempdir().unwrap();
    let sandbox = bare_copy_sandbox(state.path(), &runtime, &image).await;
    let ends = tempfile::tempdir().unwrap();
    let listener = tokio::net::UnixListener::bind(ends.path().join("egress.sock")).unwrap();
    let proxy = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        socket
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .unwrap();
        let mut sink = Vec::new();
        let got = socket.read_to_end(&mut sink).await.unwrap();
        socket.write_all(&vec![b'z'; got]).await.unwrap();
        socket.shutdown().await.unwrap();
        (String::from_utf8_lossy(&head).into_owned(), got)
    });
    let channels = DispatchChannels::for_dispatch(false, true);
    let dyn_runtime: Arc<dyn stet_engine::runtime::ContainerRuntime> = runtime.clone();
    let stream = attach_channels(&dyn_runtime, sandbox.container(), &channels, ends.path())
        .await
        .unwrap();
    let outputs = &sandbox.paths().outputs;
    std::fs::write(
        outputs.join("scenario.toml"),
        super::headless::scenario(&[
            &format!("tunnel = {{ target = \"example.test:443\", upload = {BYTES} }}"),
            "finish = \"Tunnelled.\"",
        ]),
    )
    .unwrap();
    std::fs::write(outputs.join("task.md"), "tunnel\n").unwrap();
    let mut env = BTreeMap::new();
    for (name, value) in channels.sandbox_env() {
        env.insert(name, stet_engine::credential::SecretValue::new(value));
    }
    let process = SandboxProcess {
        argv: [
            STET,
            "agent",
            "run",
            "--scenario",
            "/outputs/scenario.toml",
            "--instructions",
            "/outputs/task.md",
        ]
        .map(str::to_owned)
        .to_vec(),
        env,
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
    let said = collector.await.unwrap();
    assert_eq!(exit.code, 0, "{said}");
    assert!(
        said.contains(&format!("(sent {BYTES}, received {BYTES})")),
        "{said}"
    );
    let (head, got) = proxy.await.unwrap();
    assert!(
        head.starts_with("CONNECT example.test:443 HTTP/1.1"),
        "{head}"
    );
    assert_eq!(got as u64, BYTES);
    let stopped = stream.stop().await;
    assert!(stopped.stopped(), "{stopped}");
    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
}

#[tokio::test]
async fn on_the_local_engine_a_tunnel_rides_the_exec_stream_both_ways() {
    let (runtime, image) = local_engine().await;
    a_tunnel_rides_the_exec_stream_both_ways(runtime, image).await;
}

/// The host end of the model channel in a private directory: a unix socket that counts the
/// connections it accepts.
struct HostEnd {
    dir: tempfile::TempDir,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    arrived: Arc<tokio::sync::Notify>,
}

impl HostEnd {
    fn start() -> HostEnd {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::UnixListener::bind(dir.path().join("model.sock")).unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (counting, telling) = (Arc::clone(&accepted), Arc::clone(&arrived));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                telling.notify_one();
                drop(socket);
            }
        });
        HostEnd {
            dir,
            accepted,
            arrived,
        }
    }

    /// Waits (at most a minute) for the first connection.
    async fn first_connection(&self) {
        if self.accepted() == 0 {
            tokio::time::timeout(std::time::Duration::from_secs(60), self.arrived.notified())
                .await
                .expect("no connection reached the host end");
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What a process exec'd in the sandbox in place of the relay writes on its stdout is read as the
/// untrusted stream it is: garbage ends the channel stream with the violation named, dials no host
/// end, and leaves the sandbox running; the real relay attached next serves the channel's port.
#[tokio::test]
async fn a_hostile_stream_ends_the_channels_and_not_the_sandbox_and_the_relay_serves_over_the_stream()
 {
    use stet_engine::dispatch::channel_stream::{ChannelStream, Ended, attach_channels};
    use stet_engine::dispatch::channels::DispatchChannels;
    use stet_engine::runtime::ContainerRuntime as _;

    let state = tempfile::tempdir().unwrap();
    let (runtime, image) = local_engine().await;
    let sandbox = bare_copy_sandbox(state.path(), &runtime, &image).await;
    let end = HostEnd::start();
    let hostile = SandboxProcess {
        argv: [STET, "probe", "--emit-line-mb", "1"]
            .map(str::to_owned)
            .to_vec(),
        env: BTreeMap::new(),
        workdir: WORKSPACE_MOUNT.into(),
    };
    let attached = runtime
        .exec_attached(sandbox.container(), &hostile)
        .await
        .unwrap();
    let mut stream = ChannelStream::over(
        attached,
        vec!["model".to_owned()],
        vec![end.dir.path().join("model.sock")],
    );
    let ended = stream.ended().await;
    assert!(matches!(ended.ended, Ended::Violation(_)), "{ended:?}");
    assert!(ended.to_string().contains("broke the protocol"), "{ended}");
    assert_eq!(stream.stop().await, ended, "stopping later changes nothing");
    assert_eq!(end.accepted(), 0, "the garbage made the host dial");

    // The sandbox goes on.
    let (code, _) = exec(&sandbox, &[STET, "probe"]).await;
    assert_eq!(code, 0);

    // The real relay, attached as an exec: its port answers inside the sandbox, and the probe's
    // connection rides the stream to the host end.
    let dyn_runtime: Arc<dyn stet_engine::runtime::ContainerRuntime> = runtime.clone();
    let channels = DispatchChannels::for_dispatch(true, false);
    let stream = attach_channels(&dyn_runtime, sandbox.container(), &channels, end.dir.path())
        .await
        .unwrap();
    // It listens once attached: the probe's connection is accepted at once.
    let (code, report) = exec(&sandbox, &[STET, "probe", "--connect", "127.0.0.1:4141"]).await;
    assert_eq!(code, 0, "{report}");
    let report: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(report["connect"][0]["ok"], true, "{report}");
    // The host end is dialled once the connection's open frame has come through.
    end.first_connection().await;
    let stopped = stream.stop().await;
    assert_eq!(stopped.ended, Ended::Stopped, "{stopped}");

    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
}

/// An agent that kills its own relay cuts itself off the allowed hosts, not the dispatch: the run
/// goes on to its end and the run record says why the channels ended.
#[test]
fn an_agent_that_ends_its_channel_stream_loses_egress_and_the_dispatch_goes_on() {
    use super::headless::{Project, scenario};
    docker_ready();
    let index = super::egress::Loopback::http("reached");
    // Its own command line must not name the relay, or it would kill itself.
    let kill_relay = "r=relay; for p in /proc/[0-9]*; do case \\\"$(tr \\\"\\\\000\\\" \\\" \\\" < $p/cmdline 2>/dev/null)\\\" in *sandbox-$r\\\\ --stdio*) kill ${p#/proc/} && echo killed the relay;; esac; done";
    let project = Project::new(&scenario(&[
        &format!("run = [\"/bin/sh\", \"-c\", \"{kill_relay}\"]"),
        &format!(
            "fetch = {{ url = \"http://localhost:{}/after\" }}",
            index.port()
        ),
        "finish = \"Tried after cutting the relay.\"",
    ]));
    project.allow_egress(&[format!("localhost:{}", index.port())], "");
    project.home.add_user_config(&format!(
        "\n[dispatch]\nimage = \"{}\"\n\n[runtime]\nmounts = \"copy\"\n",
        super::live::live_image("openhands")
    ));
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let output = super::egress::output_of(&finished);
    assert!(output.contains("killed the relay"), "{output}{finished:#?}");
    assert_eq!(index.connections(), 0, "{output}");
    let warnings = finished.warnings();
    assert!(
        warnings.iter().any(|warning| warning.contains("channels")
            && warning.contains("are cut")
            && warning.contains("closed the channel stream")),
        "{warnings:#?}"
    );
    finished.torn_down_cleanly();
}
