//! The sandbox on the real Docker engine, each property proven by effect from inside the container
//! (the `stet probe` subcommand) and, where the engine can say it, by `inspect` too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use stet_engine::credential::{CREDENTIAL_ENV, LocalCredentialProvider, SecretValue};
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{
    CredentialRequest, DispatchSandbox, SandboxRequest, WorkspaceSource,
};
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    ContainerRuntime, DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, OutputChunk,
    OutputLine, OutputStream, Removal, SandboxProcess, SandboxUser, WORKSPACE_MOUNT,
};
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;

use super::support;

pub(super) const STET: &str = "/usr/local/bin/stet";

struct Fixture {
    _state: tempfile::TempDir,
    state_dir: std::path::PathBuf,
    journal: Journal,
    runtime: Arc<DockerRuntime>,
    provider: Arc<LocalCredentialProvider>,
}

async fn fixture() -> Fixture {
    let image_ready = support::sandbox_image().await;
    assert!(image_ready.id.starts_with("sha256:"));
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_owned();
    let journal = Journal::open(&state_dir.join("journal")).unwrap();
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap_or_else(|e| {
        panic!("these tests need the Docker engine: {e}");
    }));
    Fixture {
        _state: state,
        state_dir,
        journal,
        runtime,
        provider: Arc::new(LocalCredentialProvider::default()),
    }
}

impl Fixture {
    async fn sandbox(&self, limits: DispatchLimits, network: NetworkPolicy) -> DispatchSandbox {
        let request = request(limits, network, &self.provider).await;
        DispatchSandbox::provision(
            self.runtime.clone(),
            &self.journal,
            &self.state_dir,
            request,
        )
        .await
        .unwrap()
    }
}

pub(super) async fn request(
    limits: DispatchLimits,
    network: NetworkPolicy,
    provider: &Arc<LocalCredentialProvider>,
) -> SandboxRequest {
    let image = support::sandbox_image().await;
    SandboxRequest {
        dispatch: DispatchId::new(),
        image: ImageRef::parse(&image.id, false).unwrap(),
        limits,
        network,
        user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
        keepalive: vec![STET.into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: None,
        mounts: stet_engine::dispatch::copy_mode::Mounts::Bind,
        credential: Some(CredentialRequest {
            provider: provider.clone(),
            repository: "demo/app".into(),
            branch: "stet/test".into(),
            ttl: Duration::from_secs(600),
            into_sandbox: true,
        }),
    }
}

/// Runs a process in the sandbox; returns (exit code, stdout, stderr).
pub(super) async fn run(
    sandbox: &DispatchSandbox,
    argv: &[&str],
    env: &[(&str, &str)],
) -> (i64, String, String) {
    let process = SandboxProcess {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), SecretValue::new(v.to_string())))
            .collect::<BTreeMap<_, _>>(),
        workdir: WORKSPACE_MOUNT.into(),
    };
    let (sender, mut receiver) = mpsc::channel::<OutputChunk>(64);
    let collector = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(chunk) = receiver.recv().await {
            let target = if chunk.stream == OutputStream::Stdout {
                &mut out
            } else {
                &mut err
            };
            target.extend_from_slice(&chunk.bytes);
        }
        (
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        )
    });
    let exit = sandbox.run(&process, sender).await.unwrap();
    let (out, err) = collector.await.unwrap();
    assert!(!exit.oom_killed || exit.code == 137);
    (exit.code, out, err)
}

pub(super) async fn probe(sandbox: &DispatchSandbox, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut argv = vec![STET, "probe"];
    argv.extend_from_slice(args);
    let (code, out, err) = run(sandbox, &argv, env).await;
    assert_eq!(code, 0, "probe failed: {err}");
    serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("probe printed no JSON ({e}): {out}"))
}

async fn inspect(
    runtime: &DockerRuntime,
    container: &str,
) -> bollard::models::ContainerInspectResponse {
    runtime
        .client()
        .inspect_container(container, None)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_sandbox_is_locked_down_as_seen_from_inside_and_by_inspect() {
    let f = fixture().await;
    let sandbox = f
        .sandbox(DispatchLimits::default(), NetworkPolicy::None)
        .await;
    let report = probe(&sandbox, &[], &[]).await;
    let inspected = inspect(&f.runtime, sandbox.container()).await;
    sandbox.teardown().await;

    assert_ne!(report["uid"], 0, "{report}");
    assert_ne!(report["gid"], 0);
    assert_eq!(report["caps_all_dropped"], true, "{report}");
    assert_eq!(report["root_writable"], false);
    assert_eq!(report["tmp_writable"], true);
    assert_eq!(report["home_writable"], true);
    assert_eq!(report["workspace_writable"], true);
    assert_eq!(report["docker_socket_present"], false);
    let mounts = report["mounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["target"] == "/workspace"));
    assert!(mounts.iter().any(|m| m["target"] == "/outputs"));
    assert!(
        !mounts
            .iter()
            .any(|m| m["target"].as_str().unwrap_or("").contains("docker.sock"))
    );

    let host = inspected.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.privileged, Some(false));
    assert_eq!(host.memory_swap, host.memory);
    let binds: Vec<String> = inspected
        .mounts
        .unwrap()
        .into_iter()
        .filter(|m| m.typ.as_deref() == Some("bind"))
        .map(|m| m.destination.unwrap())
        .collect();
    assert_eq!(binds.len(), 2, "{binds:?}");
}

#[tokio::test]
async fn network_none_cannot_connect_and_an_allowed_network_can() {
    let f = fixture().await;
    let (_listener, address) = support::host_listener().await;
    for (network, expect_ok) in [(NetworkPolicy::None, false), (NetworkPolicy::Bridge, true)] {
        let request = request(DispatchLimits::default(), network, &f.provider).await;
        let sandbox =
            DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, request)
                .await
                .unwrap();
        let report = probe(&sandbox, &["--connect", &address], &[]).await;
        sandbox.teardown().await;
        let connect = &report["connect"][0];
        assert_eq!(connect["ok"], expect_ok, "{network:?}: {report}");
    }
}

#[tokio::test]
async fn the_pids_cap_stops_forking_and_the_container_survives() {
    let f = fixture().await;
    let limits = DispatchLimits {
        pids: 32,
        ..DispatchLimits::default()
    };
    let sandbox = f.sandbox(limits, NetworkPolicy::None).await;
    let report = probe(&sandbox, &["--fork-up-to", "200"], &[]).await;
    let after = probe(&sandbox, &[], &[]).await;
    sandbox.teardown().await;
    let started = report["forks"]["started"].as_u64().unwrap();
    assert!(started < 32, "{report}");
    assert!(started > 0, "{report}");
    assert!(
        !report["forks"]["error"].is_null(),
        "forking stopped with an error: {report}"
    );
    assert_eq!(
        after["caps_all_dropped"], true,
        "the sandbox still answers after the fork storm"
    );
}

#[tokio::test]
async fn an_allocation_beyond_the_memory_cap_is_killed() {
    let f = fixture().await;
    let limits = DispatchLimits {
        memory_bytes: 64 * 1024 * 1024,
        ..DispatchLimits::default()
    };
    let sandbox = f.sandbox(limits, NetworkPolicy::None).await;
    let allocate = SandboxProcess {
        argv: vec![
            STET.into(),
            "probe".into(),
            "--allocate-mb".into(),
            "512".into(),
        ],
        workdir: WORKSPACE_MOUNT.into(),
        ..SandboxProcess::default()
    };
    let (sender, mut receiver) = mpsc::channel(64);
    let drain = tokio::spawn(async move { while receiver.recv().await.is_some() {} });
    let exit = sandbox.run(&allocate, sender).await.unwrap();
    drain.await.unwrap();
    let survivor = probe(&sandbox, &[], &[]).await;
    sandbox.teardown().await;
    assert_eq!(exit.code, 137, "the over-allocating process is SIGKILLed");
    assert!(
        exit.oom_killed,
        "and reported as an OOM kill, its own outcome"
    );
    assert_eq!(survivor["caps_all_dropped"], true);
}

/// Bound: disk. One file cannot pass the sandbox's file-size cap: its writer is stopped there
/// (SIGXFSZ), and what reached the host's disk is at most the cap.
#[tokio::test]
async fn a_file_past_the_file_size_cap_stops_its_writer_at_the_cap() {
    let f = fixture().await;
    let cap = 8 * 1024 * 1024;
    let limits = DispatchLimits {
        file_bytes: cap,
        ..DispatchLimits::default()
    };
    let sandbox = f.sandbox(limits, NetworkPolicy::None).await;
    let (code, out, _) = run(
        &sandbox,
        &[STET, "probe", "--fill-mb", "64", "--fill-piece-mb", "64"],
        &[],
    )
    .await;
    let written = std::fs::metadata(sandbox.paths().workspace.join("stet-fill-0"))
        .unwrap()
        .len();
    let survivor = probe(&sandbox, &[], &[]).await;
    sandbox.teardown().await;
    assert_eq!(code, 128 + 25, "the writer is stopped by SIGXFSZ: {out}");
    assert!(
        written <= cap as u64,
        "{written} bytes reached the disk under a cap of {cap}"
    );
    assert_eq!(survivor["caps_all_dropped"], true);
}

#[tokio::test]
async fn the_credential_is_in_the_environment_and_nowhere_else() {
    let f = fixture().await;
    let sandbox = f
        .sandbox(DispatchLimits::default(), NetworkPolicy::None)
        .await;
    let report = probe(&sandbox, &["--find-env-in-cmdlines", CREDENTIAL_ENV], &[]).await;
    let inspected = serde_json::to_string(&inspect(&f.runtime, sandbox.container()).await).unwrap();
    sandbox.teardown().await;

    let found = &report["cmdlines_containing"][0];
    assert_eq!(
        found["env_has_value"], true,
        "the process has the credential: {report}"
    );
    assert_eq!(
        found["pids"].as_array().unwrap().len(),
        0,
        "no argv holds it: {report}"
    );
    assert_eq!(f.provider.live_count(), 0, "revoked by teardown");
    assert!(
        !inspected.contains("stet_"),
        "docker inspect does not show it"
    );
    assert!(!inspected.contains(CREDENTIAL_ENV), "not even its name");
}

#[tokio::test]
async fn a_host_only_credential_is_journaled_and_revoked_but_never_enters_the_sandbox() {
    use stet_engine::dispatch::journal::Resource;
    use stet_engine::forge::fallback::FallbackCredentialProvider;
    let f = fixture().await;
    let primary = format!("primary{}", uuid::Uuid::new_v4().simple());
    let fallback = Arc::new(FallbackCredentialProvider::new(
        SecretValue::new(primary.clone()),
        "the test has no narrow credential",
    ));

    let mut refused = request(DispatchLimits::default(), NetworkPolicy::None, &f.provider).await;
    let refused_dispatch = refused.dispatch;
    refused.credential = Some(CredentialRequest {
        provider: fallback.clone(),
        repository: "octo/app".into(),
        branch: "stet/test".into(),
        ttl: Duration::from_secs(600),
        into_sandbox: true,
    });
    let error = DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, refused)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("never enter a sandbox"),
        "{error}"
    );
    assert!(
        !stet_engine::dispatch::sandbox::SandboxPaths::under(&f.state_dir, None, refused_dispatch)
            .root
            .exists(),
        "the refused provisioning left files"
    );

    let mut host_only = request(DispatchLimits::default(), NetworkPolicy::None, &f.provider).await;
    host_only.credential = Some(CredentialRequest {
        provider: fallback,
        repository: "octo/app".into(),
        branch: "stet/test".into(),
        ttl: Duration::from_secs(600),
        into_sandbox: false,
    });
    let sandbox =
        DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, host_only)
            .await
            .unwrap();
    assert_eq!(
        sandbox
            .credential()
            .unwrap()
            .host_push_secret()
            .expose_secret(),
        primary,
        "the host push gets the credential"
    );
    let journaled = f.journal.records().unwrap().records;
    let credentials: Vec<_> = journaled
        .iter()
        .flat_map(|record| record.resources.iter())
        .filter(|r| matches!(r, Resource::Credential { provider, .. } if provider == "fallback"))
        .collect();
    assert_eq!(credentials.len(), 1, "{journaled:?}");
    let report = probe(&sandbox, &["--find-env-in-cmdlines", CREDENTIAL_ENV], &[]).await;
    assert_eq!(
        report["cmdlines_containing"][0]["env_has_value"], false,
        "the sandbox received the host's credential: {report}"
    );
    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
    assert!(f.journal.records().unwrap().records.is_empty());
}

#[tokio::test]
async fn teardown_leaves_nothing_revokes_once_and_can_be_called_again() {
    let f = fixture().await;
    let sandbox = f
        .sandbox(DispatchLimits::default(), NetworkPolicy::None)
        .await;
    let paths = sandbox.paths().clone();
    let container = sandbox.container().to_owned();
    std::fs::write(paths.workspace.join("agent-file"), "x").unwrap_or(());
    assert_eq!(f.provider.live_count(), 1);

    let first = sandbox.teardown().await;
    assert_eq!(first.first_failure(), None, "{first:?}");
    assert_eq!(
        first.steps.len(),
        4,
        "container, workspace, outputs, credential: {first:?}"
    );
    assert!(!paths.workspace.exists() && !paths.outputs.exists() && !paths.root.exists());
    assert_eq!(f.provider.live_count(), 0);
    let gone = f.runtime.client().inspect_container(&container, None).await;
    assert!(gone.is_err(), "the container is gone");
    assert!(
        f.journal.records().unwrap().records.is_empty(),
        "the journal record is closed"
    );

    let second = sandbox.teardown().await;
    assert_eq!(second, first, "a second teardown does nothing new");
    let (sender, _receiver) = mpsc::channel(1);
    assert!(
        sandbox
            .run(&SandboxProcess::default(), sender)
            .await
            .is_err(),
        "no run after teardown"
    );
}

#[tokio::test]
async fn the_workspace_starts_at_the_base_commit_owned_by_the_sandbox_user_and_goes_at_teardown() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture().await;
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
    std::fs::write(origin.path().join("src/lib.rs"), "uncommitted\n").unwrap();

    let mut request = request(DispatchLimits::default(), NetworkPolicy::None, &f.provider).await;
    request.workspace_source = Some(WorkspaceSource {
        repository: origin.path().to_owned(),
        base: base.clone(),
        fetch: None,
        limits: Default::default(),
    });
    let user = request.user;
    let sandbox = DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, request)
        .await
        .unwrap();
    let workspace = sandbox.paths().workspace.clone();
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/lib.rs")).unwrap(),
        "pub fn answer() -> u8 { 42 }\n",
        "the workspace holds the committed base, not the user's uncommitted edit"
    );
    assert_eq!(
        support::git(&workspace, &["-c", "safe.directory=*", "rev-parse", "HEAD"]),
        base.as_str()
    );
    assert_eq!(
        support::git(
            &workspace,
            &["-c", "safe.directory=*", "status", "--porcelain"]
        ),
        ""
    );
    for entry in ["src/lib.rs", "src", ".git", ".git/HEAD"] {
        let meta = std::fs::symlink_metadata(workspace.join(entry)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (user.uid, user.gid), "{entry}");
    }
    let report = probe(&sandbox, &[], &[]).await;
    assert_eq!(report["workspace_writable"], true, "{report}");
    assert_eq!(
        std::fs::read_to_string(origin.path().join("src/lib.rs")).unwrap(),
        "uncommitted\n"
    );
    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
    assert!(!workspace.exists());
}

#[tokio::test]
async fn a_container_that_died_before_exec_is_an_error_not_a_hang() {
    let f = fixture().await;
    let mut request = request(DispatchLimits::default(), NetworkPolicy::None, &f.provider).await;
    request.keepalive = vec![STET.into(), "--version".into()];
    let sandbox = DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, request)
        .await
        .unwrap();
    let exit = f.runtime.wait(sandbox.container()).await.unwrap();
    assert_eq!(exit.code, 0);
    assert!(!exit.oom_killed);
    let (sender, _receiver) = mpsc::channel(8);
    let process = SandboxProcess {
        argv: vec![STET.into(), "probe".into()],
        workdir: WORKSPACE_MOUNT.into(),
        ..SandboxProcess::default()
    };
    let error = sandbox.run(&process, sender).await.unwrap_err().to_string();
    let report = sandbox.teardown().await;
    assert!(error.contains("exec"), "{error}");
    assert_eq!(report.first_failure(), None);
}

#[tokio::test]
async fn a_tag_is_refused_and_a_missing_local_id_says_how_to_build_it() {
    let f = fixture().await;
    assert!(ImageRef::parse("stet-sandbox:latest", false).is_err());
    let missing = ImageRef::parse(&format!("sha256:{}", "0".repeat(64)), false).unwrap();
    let error = f
        .runtime
        .ensure_image(&missing, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("stet image build-local"), "{error}");
}

#[tokio::test]
async fn kill_stops_the_sandbox_and_wait_reports_the_signal() {
    let f = fixture().await;
    let sandbox = f
        .sandbox(DispatchLimits::default(), NetworkPolicy::None)
        .await;
    f.runtime.kill(sandbox.container()).await.unwrap();
    let exit = f.runtime.wait(sandbox.container()).await.unwrap();
    let again = f.runtime.kill(sandbox.container()).await;
    let report = sandbox.teardown().await;
    assert_eq!(exit.code, 137, "SIGKILL");
    assert!(!exit.oom_killed);
    assert!(
        again.is_ok(),
        "killing a stopped container is not an error: {again:?}"
    );
    assert_eq!(report.first_failure(), None);
}

#[tokio::test]
async fn a_twenty_megabyte_line_that_is_not_utf8_arrives_in_bounded_pieces() {
    let f = fixture().await;
    let sandbox = f
        .sandbox(DispatchLimits::default(), NetworkPolicy::None)
        .await;
    let process = SandboxProcess {
        argv: vec![
            STET.into(),
            "probe".into(),
            "--emit-line-mb".into(),
            "20".into(),
        ],
        workdir: WORKSPACE_MOUNT.into(),
        ..SandboxProcess::default()
    };
    // Framed as the engine frames it: redacted per stream, then cut into bounded pieces.
    let (sender, mut receiver) = mpsc::channel::<OutputChunk>(4);
    let collector = tokio::spawn(async move {
        let sanitizer =
            std::sync::Arc::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap());
        let mut framer = stet_engine::runtime::lines::OutputFramer::new(&sanitizer);
        let mut pieces = Vec::new();
        let mut record = |lines: Vec<OutputLine>| {
            for line in lines {
                pieces.push((line.stream, line.line.bytes.len(), line.line.continues));
            }
        };
        while let Some(chunk) = receiver.recv().await {
            record(framer.push(&chunk));
        }
        record(framer.finish());
        pieces
    });
    let exit = sandbox.run(&process, sender).await.unwrap();
    let pieces = collector.await.unwrap();
    sandbox.teardown().await;
    assert_eq!(exit.code, 0);
    assert!(!exit.oom_killed);
    assert!(
        pieces
            .iter()
            .all(|(stream, len, _)| *stream == OutputStream::Stdout
                && *len <= stet_engine::runtime::lines::MAX_LINE_BYTES)
    );
    assert_eq!(
        pieces.iter().map(|(_, len, _)| len).sum::<usize>(),
        20 * 1024 * 1024
    );
    let (last, rest) = pieces.split_last().unwrap();
    assert!(
        !last.2 && rest.iter().all(|piece| piece.2),
        "one line, split into continuing pieces"
    );
}

/// Two removals of one container at once (a sweep racing a teardown another process began) both
/// end with it gone, neither as an error: the second waits for the first's removal to complete.
#[tokio::test]
async fn concurrent_removals_of_one_container_both_succeed() {
    let f = fixture().await;
    for _ in 0..3 {
        let sandbox = f
            .sandbox(DispatchLimits::default(), NetworkPolicy::None)
            .await;
        let name = sandbox.container().to_owned();
        let (first, second) =
            tokio::join!(f.runtime.remove(&name, true), f.runtime.remove(&name, true));
        assert!(first.is_ok(), "{first:?}");
        assert!(second.is_ok(), "{second:?}");
        assert!(
            matches!(
                (first.unwrap(), second.unwrap()),
                (Removal::Removed, _) | (_, Removal::Removed)
            ),
            "one of them removed it"
        );
        assert_eq!(sandbox.teardown().await.first_failure(), None);
    }
}

/// The relay serves every row of its channel table, not only the model's: inside a real
/// `--network none` sandbox, an ask the scripted agent sends to a second channel's port arrives,
/// bytes and all, at that channel's socket on the host, and nothing reaches the model's.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_channel_of_the_relay_reaches_its_own_socket_on_the_host() {
    use stet_engine::dispatch::channels::DispatchChannels;
    use stet_engine::dispatch::socket_dir::SocketPlace;
    use stet_protocol::channel::Channel;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let f = fixture().await;
    let second = Channel::new("second", 4242).unwrap();
    let channels = DispatchChannels::with(vec![Channel::model(), second.clone()]);
    let mut request = request(DispatchLimits::default(), NetworkPolicy::None, &f.provider).await;
    request.keepalive = channels.keepalive(&request.keepalive);
    request.gateway = Some(SocketPlace::for_installation(&f.state_dir));
    let user = request.user;
    let sandbox = DispatchSandbox::provision(f.runtime.clone(), &f.journal, &f.state_dir, request)
        .await
        .unwrap();
    let dir = sandbox.paths().gateway.clone().unwrap();
    let listen = |name: &str| {
        let path = channels.host_socket(&dir, name).unwrap();
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // The relay runs as the sandbox user, and connecting needs write access to the socket.
        std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid)).unwrap();
        listener
    };
    let model = listen("model");
    let second_socket = listen("second");

    let prompt = "through the second channel";
    let outputs = sandbox.paths().outputs.clone();
    std::fs::write(
        outputs.join("scenario.toml"),
        format!("model = \"m\"\n[[step]]\nask = {{ prompt = \"{prompt}\" }}\n[[step]]\nfinish = \"asked\"\n"),
    )
    .unwrap();
    std::fs::write(outputs.join("task.md"), "# Task: ask\n").unwrap();
    let host = tokio::spawn(async move {
        let (mut stream, _) = second_socket.accept().await.unwrap();
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&received).contains(prompt) {
            let read = stream.read(&mut buffer).await.unwrap();
            if read == 0 {
                break;
            }
            received.extend_from_slice(&buffer[..read]);
        }
        stream
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&received).into_owned()
    });

    let url = format!("http://127.0.0.1:{}/v1", second.port());
    let (code, out, err) = run(
        &sandbox,
        &[
            STET,
            "agent",
            "run",
            "--scenario",
            "/outputs/scenario.toml",
            "--instructions",
            "/outputs/task.md",
            "--pace",
            "0",
        ],
        &[(stet_protocol::sandbox::MODEL_URL_ENV, url.as_str())],
    )
    .await;
    let received = tokio::time::timeout(Duration::from_secs(60), host)
        .await
        .expect("the ask reached the second channel's socket")
        .unwrap();
    let nothing_at_the_model = tokio::time::timeout(Duration::ZERO, model.accept()).await;
    sandbox.teardown().await;

    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        received.starts_with("POST /v1/chat/completions"),
        "{received}"
    );
    assert!(received.contains(prompt), "{received}");
    assert!(
        out.contains("503"),
        "the agent heard the host's answer: {out}"
    );
    assert!(
        nothing_at_the_model.is_err(),
        "a connection reached the model's socket"
    );
}
