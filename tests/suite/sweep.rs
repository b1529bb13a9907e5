//! A real crash: a process that provisioned a sandbox is SIGKILLed; the next sweep reclaims its
//! container, its directories and its journal record, and never touches a live dispatch.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use stet_engine::credential::{CredentialProvider, LocalCredentialProvider};
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{CredentialRequest, DispatchSandbox, SandboxRequest};
use stet_engine::dispatch::service::DispatchService;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, SandboxUser,
};
use stet_protocol::event::DispatchId;

use super::support;

/// Set in the child process: the state directory it provisions into.
const CHILD_ENV: &str = "STET_TEST_SWEEP_CHILD_STATE";
const THIS_TEST: &str =
    "suite::sweep::a_killed_dispatch_is_reclaimed_by_the_next_sweep_and_a_live_one_is_not";

async fn provision(
    state_dir: &Path,
    runtime: Arc<DockerRuntime>,
    journal: &Journal,
) -> DispatchSandbox {
    let image = support::sandbox_image().await;
    let request = SandboxRequest {
        dispatch: DispatchId::new(),
        image: ImageRef::parse(&image.id, false).unwrap(),
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
        keepalive: vec!["/usr/local/bin/stet".into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: None,
        mounts: stet_engine::dispatch::copy_mode::Mounts::Bind,
        credential: Some(CredentialRequest {
            provider: Arc::new(LocalCredentialProvider::default()),
            repository: "demo/app".into(),
            branch: "stet/sweep".into(),
            ttl: Duration::from_secs(600),
            into_sandbox: true,
        }),
    };
    DispatchSandbox::provision(runtime, journal, state_dir, request)
        .await
        .unwrap()
}

/// The child's part: provision, say so, then wait to be killed.
async fn child(state_dir: &Path) {
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap());
    let journal = Journal::open(&state_dir.join("journal")).unwrap();
    let sandbox = provision(state_dir, runtime, &journal).await;
    println!("READY {}", sandbox.container());
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    panic!("the child was meant to be killed, not released");
}

#[tokio::test]
async fn a_killed_dispatch_is_reclaimed_by_the_next_sweep_and_a_live_one_is_not() {
    if let Some(state) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&state)).await;
        return;
    }
    support::sandbox_image().await;
    let state = tempfile::tempdir().unwrap();
    let mut crashed = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", THIS_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(crashed.stdout.take().unwrap()).lines();
    let container = loop {
        let line = lines
            .next()
            .expect("the child ended before provisioning")
            .unwrap();
        // libtest prints `test <name> ... ` before the test's own output, on the same line.
        if let Some((_, name)) = line.split_once("READY ") {
            break name.trim().to_owned();
        }
    };
    crashed.kill().unwrap();
    crashed.wait().unwrap();

    let runtime = Arc::new(DockerRuntime::connect().await.unwrap());
    let journal = Arc::new(Journal::open(&state.path().join("journal")).unwrap());
    assert!(
        runtime
            .client()
            .inspect_container(&container, None)
            .await
            .is_ok(),
        "the crash left its container"
    );
    assert_eq!(journal.orphans().unwrap().records.len(), 1);

    // A live dispatch of this process, which the sweep must leave alone.
    let live = provision(state.path(), runtime.clone(), &journal).await;

    // No provider here can revoke the dead child's credential (its provider lived in that process):
    // the sweep reports it as left to expire and still closes the record.
    let providers: Vec<Arc<dyn CredentialProvider>> = Vec::new();
    let service = DispatchService::new(runtime.clone(), journal.clone(), state.path(), providers);
    let report = service.sweep_orphans().await.unwrap();
    let live_still_there = runtime
        .client()
        .inspect_container(live.container(), None)
        .await
        .is_ok();
    let live_paths_exist = live.paths().workspace.exists();
    live.teardown().await;

    assert_eq!(
        report.containers_removed,
        vec![container.clone()],
        "{report}"
    );
    assert_eq!(report.records_closed, 1, "{report}");
    assert!(report.failures.is_empty(), "{report}");
    assert_eq!(report.credentials_left_to_expire.len(), 1, "{report}");
    assert!(
        report.credentials_left_to_expire[0].ends_with("(local)")
            && report.to_string().contains("expires at its TTL"),
        "{report}"
    );
    assert!(report.to_string().contains(&container));
    assert!(
        runtime
            .client()
            .inspect_container(&container, None)
            .await
            .is_err(),
        "reaped"
    );
    assert!(
        live_still_there && live_paths_exist,
        "a live dispatch is not an orphan"
    );
    let dispatches: Vec<_> = std::fs::read_dir(state.path().join("dispatches"))
        .unwrap()
        .collect();
    assert!(
        dispatches.is_empty(),
        "no directory is left: {dispatches:?}"
    );
    assert!(journal.records().unwrap().records.is_empty());
    assert!(
        service.sweep_orphans().await.unwrap().is_empty(),
        "a second sweep finds nothing"
    );
}
