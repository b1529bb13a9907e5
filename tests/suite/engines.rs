//! stet on engines other than the local Docker, each started by the test itself and stopped at its
//! end: rootful Podman (every hardening row proven by effect with `stet probe`), rootless Podman on
//! this cgroup v1 host (refused before anything runs, with its reason and fix), and a second
//! `dockerd` on loopback TCP with TLS (certificates made at test time by openssl) as a remote engine.
//!
//! The engines are started by `engine_services` (socket activation, no polling for readiness).
//! Rootful Podman and a second `dockerd` need root; as an ordinary account
//! (CI's non-root lane) those tests prove what that account gets instead, and the rootless refusal
//! runs as that account itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use stet_engine::credential::LocalCredentialProvider;
use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::DispatchSandbox;
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::endpoint::{self, Endpoint, Engine};
use stet_engine::runtime::{
    ContainerRuntime, DispatchLimits, ImageRef, MountMode, NetworkPolicy, RuntimeError,
    RuntimeSetup,
};

use super::accounts::running_as_root;
use super::engine_services::ROOTLESS_ACCOUNT;
pub(super) use super::engine_services::{Service, podman, remote_docker};
use super::runtime::{probe, request};

fn sandbox_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_stet-sandbox"))
}

/// Loads the offline image into the engine through its image-load API; returns it pinned by id.
pub(super) async fn loaded(runtime: &DockerRuntime) -> ImageRef {
    let image = runtime
        .offline_image(&sandbox_binary())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "loading the offline image into {:?}: {e}",
                runtime.endpoint()
            )
        });
    let inspected = runtime.client().inspect_image(&image.id).await.unwrap();
    assert_eq!(inspected.id.as_deref(), Some(image.id.as_str()));
    ImageRef::parse(&image.id, false).unwrap()
}

/// Every hardening row of a sandbox on `runtime`, by effect from inside and by the engine's inspect,
/// with the workspace and outputs reaching it as `mounts` says (copy mode: no host path in its spec).
async fn hardened_by_effect(runtime: Arc<DockerRuntime>, image: &ImageRef, mounts: Mounts) {
    let state = tempfile::tempdir().unwrap();
    let journal = Journal::open(&state.path().join("journal")).unwrap();
    let provider = Arc::new(LocalCredentialProvider::default());
    let limits = DispatchLimits {
        memory_bytes: 128 * 1024 * 1024,
        pids: 32,
        nano_cpus: 500_000_000,
        ..DispatchLimits::default()
    };
    let mut sandbox_request = request(limits, NetworkPolicy::None, &provider).await;
    sandbox_request.image = image.clone();
    sandbox_request.mounts = mounts;
    let sandbox =
        DispatchSandbox::provision(runtime.clone(), &journal, state.path(), sandbox_request)
            .await
            .unwrap_or_else(|e| panic!("provisioning on {:?}: {e}", runtime.endpoint()));
    let report = probe(&sandbox, &["--connect", "1.1.1.1:443"], &[]).await;
    let forks = probe(&sandbox, &["--fork-up-to", "200"], &[]).await;
    let allocate = stet_engine::runtime::SandboxProcess {
        argv: ["/usr/local/bin/stet", "probe", "--allocate-mb", "512"]
            .map(str::to_owned)
            .to_vec(),
        workdir: stet_engine::runtime::WORKSPACE_MOUNT.into(),
        ..Default::default()
    };
    let (sender, mut receiver) = tokio::sync::mpsc::channel(64);
    let drain = tokio::spawn(async move { while receiver.recv().await.is_some() {} });
    let oom = sandbox.run(&allocate, sender).await.unwrap();
    drain.await.unwrap();
    let inspected = runtime
        .client()
        .inspect_container(sandbox.container(), None)
        .await
        .unwrap();
    sandbox.teardown().await;
    if mounts.mode() == MountMode::Copy {
        assert_no_host_path(&inspected, &[state.path()]);
    }
    let host = inspected.host_config.unwrap();

    assert_ne!(report["uid"], 0, "{report}");
    assert_ne!(report["gid"], 0, "{report}");
    assert_eq!(report["caps_all_dropped"], true, "{report}");
    assert_eq!(report["no_new_privs"], true, "{report}");
    assert_eq!(report["root_writable"], false, "{report}");
    assert_eq!(report["tmp_writable"], true, "{report}");
    assert_eq!(report["connect"][0]["ok"], false, "network none: {report}");
    let started = forks["forks"]["started"].as_u64().unwrap();
    assert!(started > 0 && started < 32, "pids cap 32: {forks}");
    assert_eq!(oom.code, 137, "512 MB under a 128 MB cap is SIGKILLed");
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.memory, Some(limits.memory_bytes));
    assert_eq!(host.pids_limit, Some(limits.pids));
    assert_eq!(host.nano_cpus, Some(limits.nano_cpus));
}

/// A container's spec, as the engine's inspect gives it, names no host path: no bind mount (a bind
/// whose source is a path), only volumes of the engine's own, and none of `paths` (stet's
/// directories) anywhere in it.
pub(super) fn assert_no_host_path(
    inspected: &bollard::models::ContainerInspectResponse,
    paths: &[&Path],
) {
    let host = inspected.host_config.clone().unwrap_or_default();
    // Podman lists volumes among the binds too, by name: a source that is a path is a host's.
    for bind in host.binds.iter().flatten() {
        assert!(!bind.starts_with('/'), "a host path is bound: {bind}");
    }
    for mount in host.mounts.iter().flatten() {
        assert_eq!(
            mount.typ,
            Some(bollard::models::MountType::VOLUME),
            "{mount:?}"
        );
    }
    for mount in inspected.mounts.iter().flatten() {
        assert_eq!(mount.typ.as_deref(), Some("volume"), "{mount:?}");
    }
    let text = serde_json::to_string(inspected).unwrap();
    for path in paths {
        let path = path.display().to_string();
        assert!(!text.contains(&path), "{path} is in the spec: {text}");
    }
}

#[tokio::test]
async fn rootful_podman_runs_the_hardened_sandbox_and_every_row_holds_by_effect() {
    if !running_as_root() {
        // An ordinary account has no rootful Podman: what it gets is a refusal that says so.
        let error = stet_engine::runtime::connect(stet_engine::runtime::EngineChoice {
            engine: Engine::Podman,
            host: Some("unix:///nonexistent/podman.sock"),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("Podman is not reachable at unix:///nonexistent/podman.sock"),
            "{error}"
        );
        return;
    }
    let service = podman(None);
    let runtime = service.connect().await;
    let version = runtime.client().version().await.unwrap();
    assert!(
        version
            .components
            .unwrap_or_default()
            .iter()
            .any(|c| c.name == "Podman Engine"),
        "this is Podman"
    );
    let image = loaded(&runtime).await;
    runtime
        .check_limits(&image, &DispatchLimits::default())
        .await
        .unwrap();
    hardened_by_effect(runtime.clone(), &image, Mounts::Bind).await;
    hardened_by_effect(
        runtime.clone(),
        &image,
        Mounts::copy(ImportLimits::default()),
    )
    .await;
    assert!(runtime.list_sandboxes().await.unwrap().is_empty());
}

/// Whether this host runs cgroup v1 (no unified hierarchy at /sys/fs/cgroup).
fn cgroup_v1() -> bool {
    !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

#[tokio::test]
async fn rootless_podman_on_cgroup_v1_is_refused_before_anything_runs_with_the_reason_and_fix() {
    let account = running_as_root().then_some(ROOTLESS_ACCOUNT);
    if let Some(account) = account {
        assert!(
            Command::new("id")
                .arg(account)
                .output()
                .unwrap()
                .status
                .success(),
            "account {account} is missing: scripts/test --setup makes it"
        );
    }
    let service = podman(account);
    let runtime = service.connect().await;
    let image = loaded(&runtime).await;
    let refused = runtime
        .check_limits(&image, &DispatchLimits::default())
        .await;
    if !cgroup_v1() {
        // cgroup v2: enforced when the controllers are delegated; refused, with the fix, when not.
        if let Err(error) = refused {
            assert!(error.to_string().contains("Delegate="), "{error}");
        }
        return;
    }
    let error = refused.unwrap_err();
    assert!(
        matches!(error, RuntimeError::LimitsNotEnforced { .. }),
        "{error}"
    );
    let text = error.to_string();
    for says in [
        "Podman at unix://",
        "memory 4294967296 asked, 0 recorded",
        "pids 512 asked, 0 recorded",
        "cgroup v1",
        "cgroup v2",
        "Delegate=memory pids cpu",
    ] {
        assert!(text.contains(says), "{says:?} missing from: {text}");
    }
    // The dispatch path refuses the same, and leaves no container behind. (As root, the service
    // runs as another account, which may not reach root's dispatch directories to mount them.)
    if !running_as_root() {
        let state = tempfile::tempdir().unwrap();
        let journal = Journal::open(&state.path().join("journal")).unwrap();
        let provider = Arc::new(LocalCredentialProvider::default());
        let mut sandbox_request =
            request(DispatchLimits::default(), NetworkPolicy::None, &provider).await;
        sandbox_request.image = image.clone();
        let provisioned =
            DispatchSandbox::provision(runtime.clone(), &journal, state.path(), sandbox_request)
                .await;
        let Err(error) = provisioned else {
            panic!("a sandbox was provisioned on an engine that drops its limits");
        };
        let error = error.to_string();
        assert!(error.contains("would not enforce every limit"), "{error}");
        assert!(runtime.list_sandboxes().await.unwrap().is_empty());
    }
    // And `stet doctor` says so.
    let checks = runtime.diagnose(&sandbox_binary()).await;
    let effect = checks
        .iter()
        .find(|check| check.name == "limits by effect")
        .unwrap_or_else(|| panic!("no limits check: {checks:?}"));
    assert!(format!("{effect:?}").contains("cgroup v2"), "{effect:?}");
}

#[tokio::test]
async fn a_remote_docker_engine_over_tls_takes_the_image_and_runs_the_hardened_sandbox() {
    if !running_as_root() {
        // An ordinary account starts no dockerd; plain TCP off loopback is refused for it as for all.
        let env = |name: &str| (name == "DOCKER_HOST").then(|| "tcp://192.0.2.1:2375".to_owned());
        let error = endpoint::resolve(Engine::Docker, None, &env, None, 1000).unwrap_err();
        assert!(error.to_string().contains("DOCKER_TLS_VERIFY"), "{error}");
        return;
    }
    let service = remote_docker();
    assert!(service.endpoint.tls.is_some() && service.endpoint.is_remote());
    let runtime = service.connect().await;
    let info = runtime.client().info().await.unwrap();
    assert_eq!(
        info.driver.as_deref(),
        Some("vfs"),
        "the second engine, not the first"
    );
    let image = loaded(&runtime).await;
    runtime
        .check_limits(&image, &DispatchLimits::default())
        .await
        .unwrap();
    hardened_by_effect(
        runtime.clone(),
        &image,
        Mounts::copy(ImportLimits::default()),
    )
    .await;
    // What it cannot see: a host directory (this test's, with a file in it) named by a bind mount
    // is refused, as any host path leaking into a spec would be.
    let leak = tempfile::tempdir().unwrap();
    std::fs::write(leak.path().join("host-only"), "this machine's\n").unwrap();
    let refused = leaked_bind(&runtime, &image, leak.path()).await;
    assert!(
        refused.contains("bind source path does not exist")
            && refused.contains(&leak.path().display().to_string()),
        "{refused}"
    );
    // Without the client certificate the engine does not answer.
    let plain = Endpoint {
        tls: None,
        ..service.endpoint.clone()
    };
    assert!(DockerRuntime::connect_to(&plain).await.is_err());
}

/// Creates (never starts) a container of `image` on `runtime` with a bind mount of `path`; the
/// engine's refusal, as text (a container it made after all is removed, and the test fails).
async fn leaked_bind(runtime: &DockerRuntime, image: &ImageRef, path: &Path) -> String {
    use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
    let name = format!(
        "stet-leak-{}",
        stet_engine::credential::random_token(8)
            .unwrap()
            .to_lowercase()
    );
    let body = ContainerCreateBody {
        image: Some(image.as_str().to_owned()),
        cmd: Some(vec!["/usr/local/bin/stet".into(), "sandbox-idle".into()]),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(vec![Mount {
                typ: Some(MountType::BIND),
                source: Some(path.display().to_string()),
                target: Some("/leak".into()),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
        .name(&name)
        .build();
    match runtime.client().create_container(Some(options), body).await {
        Err(error) => error.to_string(),
        Ok(_) => {
            let _ = runtime.remove(&name, true).await;
            panic!(
                "the engine made a container bind-mounting {}",
                path.display()
            );
        }
    }
}

/// Set in the child process of the sweep test: its state directory, Podman's address, the image.
const CHILD_STATE: &str = "STET_TEST_ENGINES_CHILD_STATE";
const CHILD_HOST: &str = "STET_TEST_ENGINES_CHILD_HOST";
const CHILD_IMAGE: &str = "STET_TEST_ENGINES_CHILD_IMAGE";
const SWEEP_TEST: &str =
    "suite::engines::a_crashed_dispatchs_container_is_reclaimed_on_the_engine_the_journal_names";

/// The child's part: provision on Podman, say so, then wait to be killed.
async fn crashing_child(state: &Path, host: &str, image: &str) {
    let endpoint = endpoint::resolve(Engine::Podman, Some(host), &|_| None, None, 0).unwrap();
    let runtime = Arc::new(DockerRuntime::connect_to(&endpoint).await.unwrap());
    let journal = Journal::open(&state.join("journal")).unwrap();
    let provider = Arc::new(LocalCredentialProvider::default());
    let mut sandbox_request =
        request(DispatchLimits::default(), NetworkPolicy::None, &provider).await;
    sandbox_request.image = ImageRef::parse(image, false).unwrap();
    let sandbox = DispatchSandbox::provision(runtime, &journal, state, sandbox_request)
        .await
        .unwrap();
    println!("READY {}", sandbox.container());
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    panic!("the child was meant to be killed, not released");
}

/// A dispatch on Podman is SIGKILLed; the next sweep runs with the local Docker engine configured,
/// and still reclaims the container on Podman, where the journal says it lives.
#[tokio::test]
async fn a_crashed_dispatchs_container_is_reclaimed_on_the_engine_the_journal_names() {
    use std::io::BufRead;
    if let (Some(state), Ok(host), Ok(image)) = (
        std::env::var_os(CHILD_STATE),
        std::env::var(CHILD_HOST),
        std::env::var(CHILD_IMAGE),
    ) {
        crashing_child(Path::new(&state), &host, &image).await;
        return;
    }
    if !running_as_root() {
        // Rootful Podman needs root; rootless Podman here refuses to run a sandbox at all.
        return;
    }
    let service = podman(None);
    let podman_runtime = service.connect().await;
    let image = loaded(&podman_runtime).await;
    let state = tempfile::tempdir().unwrap();
    let mut crashed = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", SWEEP_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_STATE, state.path())
        .env(CHILD_HOST, &service.endpoint.host)
        .env(CHILD_IMAGE, image.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(crashed.stdout.take().unwrap()).lines();
    let container = loop {
        let line = lines
            .next()
            .expect("the child ended before provisioning")
            .unwrap();
        if let Some((_, name)) = line.split_once("READY ") {
            break name.trim().to_owned();
        }
    };
    crashed.kill().unwrap();
    crashed.wait().unwrap();
    assert!(
        podman_runtime
            .client()
            .inspect_container(&container, None)
            .await
            .is_ok(),
        "the crash left its container on Podman"
    );

    let docker = Arc::new(DockerRuntime::connect().await.unwrap());
    let journal = Arc::new(Journal::open(&state.path().join("journal")).unwrap());
    let sweeper = stet_engine::dispatch::service::DispatchService::new(
        docker,
        journal.clone(),
        state.path(),
        Vec::new(),
    );
    let report = sweeper.sweep_orphans().await.unwrap();
    assert!(report.containers_removed.contains(&container), "{report:?}");
    assert!(
        podman_runtime
            .client()
            .inspect_container(&container, None)
            .await
            .is_err(),
        "the container is gone from Podman"
    );
    assert!(journal.orphans().unwrap().records.is_empty(), "{report:?}");
}

/// On rootful Podman (its Docker-compatible API) and on the remote engine over TLS, the relay's
/// channels ride the engine's exec stream in copy mode: a tunnel of 3 MB each way.
#[tokio::test]
async fn the_channel_stream_carries_a_tunnel_on_rootful_podman_and_on_the_remote_engine() {
    if !running_as_root() {
        // An ordinary account starts neither engine; the local engine's case is in copy_mode.
        return;
    }
    let service = podman(None);
    let runtime = service.connect().await;
    let image = loaded(&runtime).await;
    super::copy_mode::a_tunnel_rides_the_exec_stream_both_ways(runtime, image).await;
    let service = remote_docker();
    let runtime = service.connect().await;
    let image = loaded(&runtime).await;
    super::copy_mode::a_tunnel_rides_the_exec_stream_both_ways(runtime, image).await;
}
