//! Shared helpers for the suites that need the real Docker engine: a client that fails loudly when the
//! engine is missing, the sandbox image built once per test process, and containers that are always
//! removed.
//!
//! Every test has its own tokio runtime, and a bollard client is bound to the runtime that created its
//! connection pool, so clients are made per use and only plain data is kept in globals.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use stet_engine::image::SandboxImage;

/// Label every test container carries, so a leak is easy to find and sweep.
pub(super) const TEST_LABEL: &str = "dev.stet.test";

/// A Docker client with default settings. Panics when the engine cannot be reached: CI has Docker, and a
/// test that needs it must fail, never skip silently.
pub(super) fn docker() -> Docker {
    let host = stet_engine::runtime::docker::docker_host();
    let unreachable = |err: &dyn std::fmt::Display| -> ! {
        panic!("Docker is unreachable at {host}: {err}; these tests need a running Docker engine")
    };
    let docker = Docker::connect_with_defaults().unwrap_or_else(|err| unreachable(&err));
    // Building the client does not touch the engine; a plain connect proves something listens there.
    if let Some(path) = host.strip_prefix("unix://") {
        std::os::unix::net::UnixStream::connect(path).unwrap_or_else(|err| unreachable(&err));
    } else if let Some(address) = host
        .strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("http://"))
    {
        std::net::TcpStream::connect(address).unwrap_or_else(|err| unreachable(&err));
    }
    docker
}

/// The sandbox image built from this build's `stet-sandbox` binary, once per test process; across processes the
/// image's label makes the build a lookup.
pub(super) async fn sandbox_image() -> SandboxImage {
    static IMAGE: OnceCell<SandboxImage> = OnceCell::const_new();
    IMAGE
        .get_or_init(|| async {
            let binary = Path::new(env!("CARGO_BIN_EXE_stet-sandbox"));
            stet_engine::runtime::docker::offline_image::build_local(&docker(), binary)
                .await
                .unwrap_or_else(|err| {
                    panic!(
                        "building the sandbox image from {}: {err}",
                        binary.display()
                    )
                })
        })
        .await
        .clone()
}

/// What a container run to completion left behind.
#[derive(Debug)]
pub(super) struct Finished {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
}

/// Creates a container named `stet-test-<uuid>` and labelled [`TEST_LABEL`] from `body`, starts it,
/// waits for it to exit and reads its logs. The container is removed before this returns or panics.
pub(super) async fn run_to_completion(docker: &Docker, mut body: ContainerCreateBody) -> Finished {
    let name = format!("stet-test-{}", uuid::Uuid::new_v4());
    body.labels
        .get_or_insert_with(HashMap::new)
        .insert(TEST_LABEL.to_owned(), "1".to_owned());
    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            body,
        )
        .await;
    if let Err(err) = created {
        panic!("creating container {name}: {err}");
    }
    let outcome = start_wait_and_read(docker, &name).await;
    let removed = docker
        .remove_container(
            &name,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await;
    let finished = outcome.unwrap_or_else(|err| panic!("running container {name}: {err}"));
    if let Err(err) = removed {
        panic!("removing container {name}: {err}");
    }
    finished
}

async fn start_wait_and_read(
    docker: &Docker,
    name: &str,
) -> Result<Finished, bollard::errors::Error> {
    docker.start_container(name, None).await?;
    let mut exit_code = None;
    let mut waits = docker.wait_container(name, None);
    while let Some(item) = waits.next().await {
        exit_code = Some(match item {
            Ok(response) => response.status_code,
            Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => code,
            Err(err) => return Err(err),
        });
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut logs = docker.logs(
        name,
        Some(
            LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .build(),
        ),
    );
    while let Some(item) = logs.next().await {
        match item? {
            LogOutput::StdOut { message } => stdout.extend_from_slice(&message),
            LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
            LogOutput::StdIn { .. } | LogOutput::Console { .. } => {}
        }
    }
    Ok(Finished {
        exit_code: exit_code.unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// The address of the default bridge's gateway (the host, seen from a bridged container).
pub(super) async fn bridge_gateway() -> Ipv4Addr {
    let network = docker().inspect_network("bridge", None).await.unwrap();
    let config = network
        .ipam
        .and_then(|ipam| ipam.config)
        .and_then(|configs| configs.into_iter().next())
        .expect("the default bridge network has an IPAM config");
    if let Some(gateway) = config.gateway.filter(|g| !g.is_empty()) {
        return gateway.parse().unwrap();
    }
    // Docker gives the bridge the first address of its subnet when it does not say so.
    let subnet = config.subnet.expect("the default bridge has a subnet");
    let (base, _) = subnet.split_once('/').unwrap();
    let base: Ipv4Addr = base.parse().unwrap();
    Ipv4Addr::from(u32::from(base) + 1)
}

/// A listener on the host's side of the default bridge (our own server), and the `IP:PORT` a
/// container connects to when its network allows it.
pub(super) async fn host_listener() -> (std::net::TcpListener, String) {
    let gateway = bridge_gateway().await;
    let listener = std::net::TcpListener::bind((gateway, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, format!("{gateway}:{port}"))
}

/// Runs git with a fixed identity and no user or system configuration; returns trimmed stdout.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Whether process `pid` still runs: one that is gone, a zombie (`Z`) or dead (`X`) has ended.
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .next()
                .map(str::to_owned)
        })
        .is_some_and(|state| state != "Z" && state != "X")
}

/// The processes, in whatever state, whose command line holds every one of `needles`.
pub(super) fn processes_naming(needles: &[&str]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                let line = String::from_utf8_lossy(&line);
                needles.iter().all(|needle| line.contains(needle))
            })
        })
        .collect()
}

/// Provenance as a dispatch would report it, with no usage reported.
pub(super) fn provenance(
    credential_kind: &str,
    base: &str,
    commit: &str,
) -> stet_engine::forge::Provenance {
    stet_engine::forge::Provenance {
        dispatch: stet_protocol::event::DispatchId::new(),
        image: "stet-sandbox:test".into(),
        harness: "script".into(),
        harness_version: None,
        model: None,
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
        peak_reserved_usd: None,
        network: "none".into(),
        egress: None,
        credential_kind: credential_kind.into(),
        redactions: 3,
        duration: std::time::Duration::from_secs(5),
        base: stet_sanitize::branch::CommitSha::parse(base).unwrap(),
        commit: stet_sanitize::branch::CommitSha::parse(commit).unwrap(),
    }
}

/// A multi-threaded runtime whose worker serves a test's own listeners (a fake API, a scripted model)
/// while the stet binary runs.
pub(super) fn serving_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}
