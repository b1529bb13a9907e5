//! The launch-time limits probe on the real Docker engine: journaled before its container exists,
//! so a stet that dies while that container exists leaves a record by which the next sweep removes
//! it; a whole probe leaves nothing; and what a pass is remembered by (the engine's fingerprint)
//! is stable for one engine and names it.
//!
//! To die at a known point, the child process reaches Docker through a proxy of this test's that
//! forwards every request but the probe's read-back (`GET /containers/stet-limits-probe-…/json`),
//! which is sent only once the create has been answered: the child is SIGKILLed while it waits.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use stet_engine::dispatch::journal::{Journal, Resource};
use stet_engine::dispatch::service::DispatchService;
use stet_engine::engine::journaled_probe;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::endpoint::{self, Engine};
use stet_engine::runtime::{DispatchLimits, ImageRef, RuntimeSetup};

use super::support;

const CHILD_STATE: &str = "STET_TEST_PROBE_CHILD_STATE";
const CHILD_HOST: &str = "STET_TEST_PROBE_CHILD_HOST";
const CHILD_IMAGE: &str = "STET_TEST_PROBE_CHILD_IMAGE";
const CUT_TEST: &str =
    "suite::limits_probe::a_stet_killed_during_the_probe_leaves_a_record_the_sweep_reclaims_it_by";

/// The engine at `host` (a unix socket).
async fn runtime_at(host: &str) -> Arc<DockerRuntime> {
    let endpoint = endpoint::resolve(Engine::Docker, Some(host), &|_| None, None, 0).unwrap();
    Arc::new(DockerRuntime::connect_to(&endpoint).await.unwrap())
}

/// Forwards connections on `socket` to the local Docker engine, holding back (never forwarding)
/// the first request that reads a probe container back; `held` hears of it.
async fn proxy(listener: UnixListener, held: mpsc::Sender<()>) {
    let engine = stet_engine::runtime::docker::docker_host();
    let engine = engine.strip_prefix("unix://").unwrap().to_owned();
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            return;
        };
        let mut upstream = UnixStream::connect(&engine).await.unwrap();
        let held = held.clone();
        tokio::spawn(async move {
            let (mut client_read, mut client_write) = client.split();
            let (mut upstream_read, mut upstream_write) = upstream.split();
            let up = async {
                let mut buffer = vec![0; 64 * 1024];
                loop {
                    let read = client_read.read(&mut buffer).await.unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    let chunk = &buffer[..read];
                    let text = String::from_utf8_lossy(chunk);
                    if text.starts_with("GET ")
                        && text.contains("/containers/stet-limits-probe-")
                        && text.contains("/json")
                    {
                        let _ = held.send(()).await;
                        std::future::pending::<()>().await;
                    }
                    if upstream_write.write_all(chunk).await.is_err() {
                        return;
                    }
                }
            };
            let down = tokio::io::copy(&mut upstream_read, &mut client_write);
            tokio::select! {
                () = up => {}
                _ = down => {}
            }
        });
    }
}

/// The child's part: the probe through the proxy, journaled in `state`; it never ends by itself.
async fn child(state: &Path, host: &str, image: &str) {
    let runtime = runtime_at(host).await;
    let journal = Journal::open(&state.join("journal")).unwrap();
    println!("PROBING");
    let image = ImageRef::parse(image, false).unwrap();
    let _ = journaled_probe(
        runtime.as_ref(),
        &journal,
        &image,
        &DispatchLimits::default(),
    )
    .await;
    panic!("the probe ended although its read-back was held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stet_killed_during_the_probe_leaves_a_record_the_sweep_reclaims_it_by() {
    if let (Some(state), Ok(host), Ok(image)) = (
        std::env::var_os(CHILD_STATE),
        std::env::var(CHILD_HOST),
        std::env::var(CHILD_IMAGE),
    ) {
        return child(Path::new(&state), &host, &image).await;
    }
    let image = support::sandbox_image().await;
    let image = ImageRef::parse(&image.id, false).unwrap();
    let state = tempfile::tempdir().unwrap();
    let socket = state.path().join("docker-proxy.sock");
    let (held_sender, mut held) = mpsc::channel(1);
    tokio::spawn(proxy(UnixListener::bind(&socket).unwrap(), held_sender));
    let host = format!("unix://{}", socket.display());

    let mut killed = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CUT_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_STATE, state.path())
        .env(CHILD_HOST, &host)
        .env(CHILD_IMAGE, image.as_str())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = killed.stdout.take().unwrap();
    let started = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .any(|line| line.is_ok_and(|line| line.contains("PROBING")))
    });
    assert!(started.await.unwrap(), "the child ended before probing");
    held.recv().await.expect("the probe's read-back never came");
    killed.kill().unwrap();
    killed.wait().unwrap();

    // The record names the probe container, which exists: the create was answered.
    let journal = Arc::new(Journal::open(&state.path().join("journal")).unwrap());
    let orphans = journal.orphans().unwrap();
    assert_eq!(orphans.records.len(), 1, "{orphans:?}");
    let name = match orphans.records[0].resources.as_slice() {
        [Resource::Container { name, .. }] => name.clone(),
        other => panic!("the record holds {other:?}"),
    };
    assert!(name.starts_with("stet-limits-probe-"), "{name}");
    let docker = Arc::new(DockerRuntime::connect().await.unwrap());
    assert!(
        docker.client().inspect_container(&name, None).await.is_ok(),
        "the killed probe left {name}"
    );
    let probes = vec![name];
    let sweeper = DispatchService::new(docker.clone(), journal.clone(), state.path(), Vec::new());
    let report = sweeper.sweep_orphans().await.unwrap();
    assert_eq!(report.containers_removed, probes, "{report:?}");
    assert_eq!(report.records_closed, 1, "{report:?}");
    assert!(journal.orphans().unwrap().records.is_empty());
    assert!(
        docker
            .client()
            .inspect_container(&probes[0], None)
            .await
            .is_err(),
        "{} is gone",
        probes[0]
    );
}

#[tokio::test]
async fn a_whole_probe_leaves_no_record_and_the_engines_fingerprint_is_stable() {
    let image = support::sandbox_image().await;
    let image = ImageRef::parse(&image.id, false).unwrap();
    let state = tempfile::tempdir().unwrap();
    let journal = Journal::open(&state.path().join("journal")).unwrap();
    let runtime = DockerRuntime::connect().await.unwrap();
    journaled_probe(&runtime, &journal, &image, &DispatchLimits::default())
        .await
        .unwrap();
    assert!(journal.records().unwrap().records.is_empty());
    let fingerprint = runtime.fingerprint().await.expect("Docker says who it is");
    assert_eq!(runtime.fingerprint().await.as_ref(), Some(&fingerprint));
    for says in [
        "docker at unix://",
        "id ",
        "version ",
        "cgroup v",
        "kernel ",
    ] {
        assert!(fingerprint.contains(says), "{says:?}: {fingerprint}");
    }
}
