//! The warm pool (`[runtime] warm = N`, issue #33) on the real Docker engine: it fills to N and
//! never past it, a claim is refilled in the background, a claimed container is removed with its
//! dispatch and never handed out again, a pooled container is hardened exactly as a fresh sandbox
//! (by `inspect` and by `stet probe`), a headless dispatch runs in a pooled container, nothing of
//! the pool is left once stet exits (or is told to by SIGTERM), and `stet sweep` reclaims the pool
//! of a SIGKILLed stet.

use std::collections::BTreeSet;
use std::sync::Arc;

use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::{Journal, Resource};
use stet_engine::dispatch::pool::{WarmPool, WarmShape};
use stet_engine::dispatch::sandbox::{DispatchSandbox, SandboxRequest};
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, STATE_LABEL, SandboxUser,
    WARM_LABEL, state_label,
};
use stet_protocol::event::DispatchId;
use stet_protocol::state::Phase;

use super::headless::{
    Project, Watched, containers_where, docker_ready, forever, run, run_text, scenario, signal,
};
use super::runtime::{STET, probe};
use super::support;

struct Fixture {
    state: tempfile::TempDir,
    journal: Arc<Journal>,
    runtime: Arc<DockerRuntime>,
    image: ImageRef,
}

async fn fixture() -> Fixture {
    let image = support::sandbox_image().await;
    let state = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::open(&state.path().join("journal")).unwrap());
    let runtime = Arc::new(DockerRuntime::connect().await.unwrap_or_else(|error| {
        panic!("this test needs the Docker engine: {error}");
    }));
    Fixture {
        state,
        journal,
        runtime,
        image: ImageRef::parse(&image.id, false).unwrap(),
    }
}

impl Drop for Fixture {
    /// A test that failed before its drain leaves no container running: this installation's go
    /// (the journal, in a temporary directory, would never be swept).
    fn drop(&mut self) {
        let label = format!("label={STATE_LABEL}={}", state_label(self.state.path()));
        let listed = std::process::Command::new("docker")
            .args(["ps", "--all", "--quiet", "--filter", &label])
            .output();
        let Ok(listed) = listed else { return };
        let names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !names.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "--force", "--volumes"])
                .args(&names)
                .output();
        }
    }
}

impl Fixture {
    fn shape(&self) -> WarmShape {
        WarmShape {
            image: self.image.clone(),
            limits: DispatchLimits::default(),
            user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
            keepalive: vec![STET.into(), "sandbox-idle".into()],
            state_label: state_label(self.state.path()),
        }
    }

    fn pool(&self, size: usize) -> Arc<WarmPool> {
        WarmPool::start(
            self.runtime.clone(),
            self.journal.clone(),
            size,
            self.shape(),
        )
    }

    /// A copy-mode request of the pool's shape: no workspace source, no credential, no channel.
    fn request(&self) -> SandboxRequest {
        let shape = self.shape();
        SandboxRequest {
            dispatch: DispatchId::new(),
            image: shape.image,
            limits: shape.limits,
            network: NetworkPolicy::None,
            user: shape.user,
            keepalive: shape.keepalive,
            workspace_source: None,
            gateway: None,
            credential: None,
            mounts: Mounts::copy(ImportLimits::default()),
        }
    }

    /// The names of this installation's containers Docker lists, running or not, with `label`
    /// too when given.
    async fn listed(&self, label: Option<&str>) -> BTreeSet<String> {
        let ours = format!("{STATE_LABEL}={}", state_label(self.state.path()));
        let labels: Vec<String> = [Some(ours), label.map(str::to_owned)]
            .into_iter()
            .flatten()
            .collect();
        let filters = std::collections::HashMap::from([("label", labels)]);
        let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        self.runtime
            .client()
            .list_containers(Some(options))
            .await
            .unwrap()
            .into_iter()
            .flat_map(|summary| summary.names.unwrap_or_default())
            .map(|name| name.trim_start_matches('/').to_owned())
            .collect()
    }

    async fn containers(&self) -> BTreeSet<String> {
        self.listed(None).await
    }

    /// The containers the journal's records hold, whoever owns them.
    fn journaled(&self) -> BTreeSet<String> {
        let scan = self.journal.records().unwrap();
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
        scan.records
            .iter()
            .flat_map(|record| &record.resources)
            .filter_map(|resource| match resource {
                Resource::Container { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A sandbox for `request`, its container claimed from `pool`.
async fn from_pool(f: &Fixture, pool: &WarmPool, request: SandboxRequest) -> DispatchSandbox {
    let never = tokio_util::sync::CancellationToken::new();
    let runtime = pool.runtime();
    let state = f.state.path();
    DispatchSandbox::provision_until(
        runtime,
        &f.journal,
        state,
        request,
        &never,
        None,
        Some(pool),
    )
    .await
    .unwrap_or_else(|failure| panic!("{}", failure.error))
}

/// The most containers the pool ever held or was starting, as its status said at each change.
fn most_held(pool: &WarmPool) -> tokio::task::JoinHandle<usize> {
    let mut status = pool.watch();
    tokio::spawn(async move {
        let mut most = 0;
        while status.changed().await.is_ok() {
            let now = *status.borrow_and_update();
            most = most.max(now.idle + now.starting);
        }
        most
    })
}

#[tokio::test]
async fn the_pool_fills_to_its_size_refills_a_claim_and_never_hands_a_claimed_container_out_again()
{
    let f = fixture().await;
    let pool = f.pool(2);
    let most = most_held(&pool);
    pool.ready(2).await;
    let first: BTreeSet<String> = pool.idle().into_iter().collect();
    assert_eq!(first.len(), 2, "{first:?}");
    // Each is running, labelled as the pool's, and journaled before it existed.
    assert_eq!(f.containers().await, first);
    assert_eq!(f.listed(Some(WARM_LABEL)).await, first);
    assert_eq!(f.journaled(), first);

    let request = f.request();
    let dispatch = request.dispatch;
    let sandbox = from_pool(&f, &pool, request).await;
    let claimed = sandbox.container().to_owned();
    assert!(first.contains(&claimed), "{claimed} is not of the pool");
    assert_ne!(claimed, dispatch.to_string());
    assert_eq!(pool.status().claimed, 1);
    // The dispatch's record holds it now; the pool's record of it is closed.
    let scan = f.journal.records().unwrap();
    let holders: Vec<_> = scan
        .records
        .iter()
        .filter(|record| {
            record.resources.iter().any(
                |resource| matches!(resource, Resource::Container { name, .. } if *name == claimed),
            )
        })
        .map(|record| record.dispatch)
        .collect();
    assert_eq!(holders, [dispatch]);
    // A sweep meanwhile (another stet's launch) leaves every one of them: the claimed container,
    // labelled with the pool's closed record, is held by name in the dispatch's live record.
    let sweeper = stet_engine::dispatch::service::DispatchService::new(
        f.runtime.clone(),
        f.journal.clone(),
        f.state.path(),
        Vec::new(),
    );
    let swept = sweeper.sweep_orphans().await.unwrap();
    assert!(swept.containers_removed.is_empty(), "{swept:?}");
    assert!(f.containers().await.contains(&claimed));
    // The claimed sandbox works: the probe runs in it, in its own workspace copy.
    let report = probe(&sandbox, &[], &[]).await;
    assert_eq!(report["workspace_writable"], true, "{report}");

    // Refilled in the background, with a new container.
    pool.ready(2).await;
    let second: BTreeSet<String> = pool.idle().into_iter().collect();
    assert_eq!(second.len(), 2);
    assert!(!second.contains(&claimed));
    assert_eq!(
        f.containers().await.len(),
        3,
        "two idle and the claimed one"
    );

    let torn = sandbox.teardown().await;
    assert_eq!(torn.first_failure(), None, "{torn:?}");
    assert!(
        !f.containers().await.contains(&claimed),
        "the claimed container went with its dispatch"
    );
    assert_eq!(f.containers().await, second);

    // The next claims are other containers; the claimed one never comes back.
    let mut seen = BTreeSet::from([claimed]);
    for _ in 0..2 {
        let sandbox = from_pool(&f, &pool, f.request()).await;
        assert!(seen.insert(sandbox.container().to_owned()), "{seen:?}");
        sandbox.teardown().await;
    }
    pool.ready(2).await;
    assert!(pool.idle().iter().all(|name| !seen.contains(name)));

    pool.drain().await;
    assert_eq!(
        f.containers().await,
        BTreeSet::new(),
        "the drained pool left containers"
    );
    assert_eq!(f.journal.records().unwrap().records.len(), 0);
    drop(pool);
    assert_eq!(
        most.await.unwrap(),
        2,
        "the pool never held more than its size"
    );
}

#[tokio::test]
async fn a_pooled_sandbox_is_hardened_exactly_as_a_fresh_one() {
    let f = fixture().await;
    let pool = f.pool(1);
    pool.ready(1).await;
    let pooled = from_pool(&f, &pool, f.request()).await;
    let fresh =
        DispatchSandbox::provision(f.runtime.clone(), &f.journal, f.state.path(), f.request())
            .await
            .unwrap();
    assert_ne!(pooled.container(), fresh.container());

    let inspect = |name: String| {
        let runtime = f.runtime.clone();
        async move {
            let mut inspected = runtime
                .client()
                .inspect_container(&name, None)
                .await
                .unwrap();
            let mut config = inspected.config.take().unwrap();
            config.labels = None;
            let host = inspected.host_config.take().unwrap();
            let mounts: Vec<(String, String, bool)> = inspected
                .mounts
                .take()
                .unwrap()
                .into_iter()
                .map(|mount| {
                    (
                        mount.typ.map(|t| t.to_string()).unwrap_or_default(),
                        mount.destination.unwrap_or_default(),
                        mount.rw.unwrap_or_default(),
                    )
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            (config, normalized(host), mounts)
        }
    };
    let (pooled_config, pooled_host, pooled_mounts) = inspect(pooled.container().to_owned()).await;
    let (fresh_config, fresh_host, fresh_mounts) = inspect(fresh.container().to_owned()).await;
    assert_eq!(pooled_config, fresh_config);
    assert_eq!(pooled_host, fresh_host);
    assert_eq!(pooled_mounts, fresh_mounts);
    assert_eq!(pooled_host.network_mode.as_deref(), Some("none"));
    assert_eq!(pooled_host.readonly_rootfs, Some(true));
    assert_eq!(pooled_host.cap_drop, Some(vec!["ALL".to_owned()]));

    // By effect, from inside: the same user, capabilities, read-only root, mounts, limits.
    // The order the engine mounts the two volumes in is its own.
    let sorted = |mut report: serde_json::Value| {
        if let Some(mounts) = report["mounts"].as_array_mut() {
            mounts.sort_by_key(|mount| mount.to_string());
        }
        report
    };
    let pooled_report = sorted(probe(&pooled, &[], &[]).await);
    let fresh_report = sorted(probe(&fresh, &[], &[]).await);
    assert_eq!(pooled_report, fresh_report);
    assert_eq!(pooled_report["caps_all_dropped"], true, "{pooled_report}");
    assert_eq!(pooled_report["root_writable"], false);
    assert_eq!(pooled_report["docker_socket_present"], false);
    assert_ne!(pooled_report["uid"], 0);

    assert_eq!(pooled.teardown().await.first_failure(), None);
    assert_eq!(fresh.teardown().await.first_failure(), None);
    pool.drain().await;
    assert_eq!(f.containers().await, BTreeSet::new());
}

/// The host configuration with what differs between any two containers of one spec cleared.
fn normalized(mut host: bollard::models::HostConfig) -> bollard::models::HostConfig {
    host.mounts = host.mounts.map(|mounts| {
        mounts
            .into_iter()
            .map(|mut mount| {
                // The volumes' labels name their container.
                if let Some(options) = mount.volume_options.as_mut() {
                    options.labels = None;
                }
                mount
            })
            .collect()
    });
    host
}

/// A headless project configured for copy mode and a pool of `warm`.
fn warm_project(scenario: &str, warm: usize) -> Project {
    let project = Project::new(scenario);
    project
        .home
        .add_user_config(&format!("\n[runtime]\nmounts = \"copy\"\nwarm = {warm}\n"));
    project
}

/// The containers of the installation at `state`, and which of them are the pool's.
fn installation_containers(state: &std::path::Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let ours: BTreeSet<String> =
        containers_where("label", format!("{STATE_LABEL}={}", state_label(state)))
            .into_iter()
            .collect();
    let warm: BTreeSet<String> = containers_where("label", WARM_LABEL.to_owned())
        .into_iter()
        .filter(|name| ours.contains(name))
        .collect();
    (ours, warm)
}

#[test]
fn a_headless_dispatch_runs_in_a_pooled_container_and_nothing_of_the_pool_outlives_stet() {
    docker_ready();
    let project = warm_project(
        &scenario(&[
            "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\n\" }",
            "finish = \"Done.\"",
        ]),
        1,
    );
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let dispatch = finished.dispatch();
    // Its teardown removed a container that is not named after it: the pool's.
    let torn = finished.torn_down_cleanly();
    let container = torn
        .iter()
        .find_map(|resource| resource.strip_prefix("container "))
        .unwrap_or_else(|| panic!("no container torn down: {torn:?}"));
    assert_ne!(container, dispatch.to_string(), "{torn:?}");
    assert!(finished.warnings().is_empty(), "{:?}", finished.warnings());
    let (ours, warm) = installation_containers(&project.home.state());
    assert_eq!(
        (ours.len(), warm.len()),
        (0, 0),
        "left after exit: {ours:?}"
    );
    super::headless::assert_nothing_left(&project.home, dispatch);
    assert_eq!(
        super::headless::files_under(&project.home.state().join("journal")),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn sigterm_stops_the_dispatch_and_removes_the_pool() {
    docker_ready();
    let project = warm_project(&forever(), 1);
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    let running = watched.until_running();
    let (ours, warm) = installation_containers(&project.home.state());
    assert!(
        !ours.contains(&running.dispatch.to_string()),
        "the dispatch made its own container: {ours:?}"
    );
    assert!(!warm.is_empty() && warm == ours, "{ours:?} {warm:?}");
    // `stet doctor` lists them, the pool's marked.
    let mut doctor = project.home.stet();
    doctor.current_dir(&project.repo).arg("doctor");
    let report = run_text(doctor).stdout;
    for name in &ours {
        assert!(
            report.contains(&format!("{name} (running, warm pool)")),
            "{name}:\n{report}"
        );
    }
    assert!(signal(watched.pid(), "TERM").success());
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(3), "{finished:#?}");
    let (ours, _) = installation_containers(&project.home.state());
    assert_eq!(ours, BTreeSet::new(), "left after SIGTERM");
    super::headless::assert_nothing_left(&project.home, running.dispatch);
}

#[test]
fn the_sweep_reclaims_the_pool_of_a_sigkilled_stet() {
    docker_ready();
    let project = warm_project(&forever(), 2);
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    watched.until_running();
    let (before, _) = installation_containers(&project.home.state());
    assert!(!before.is_empty());
    let status = watched.kill();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // Whatever the pool had started by the kill, and the claimed one, is journaled.
    let (left, _) = installation_containers(&project.home.state());
    assert!(left.is_superset(&before), "{before:?} {left:?}");

    let mut sweep = project.home.stet();
    sweep.arg("sweep");
    let swept = run_text(sweep);
    assert_eq!(swept.code(), Some(0), "{swept:#?}");
    for name in &left {
        assert!(
            swept.stdout.contains(&format!("removed container {name}")),
            "the sweep does not say it removed {name}:\n{}",
            swept.stdout
        );
    }
    let (after, _) = installation_containers(&project.home.state());
    assert_eq!(after, BTreeSet::new());
    assert_eq!(
        super::headless::files_under(&project.home.state().join("journal")),
        Vec::<std::path::PathBuf>::new()
    );
}

#[tokio::test]
async fn a_pool_that_cannot_start_a_container_never_holds_a_dispatch_back_and_says_so_once() {
    let f = fixture().await;
    // The pool's engine is not there (a socket nobody listens on); the dispatch's is.
    let socket = f.state.path().join("gone.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let host = format!("unix://{}", socket.display());
    let gone = stet_engine::runtime::docker::endpoint_from_environment(
        stet_engine::runtime::endpoint::Engine::Docker,
        Some(&host),
    )
    .unwrap();
    let unreachable = Arc::new(DockerRuntime::unconnected_to(&gone).unwrap());
    let pool = WarmPool::start(unreachable, f.journal.clone(), 1, f.shape());
    let mut status = pool.watch();
    status
        .wait_for(|status| status.failed > 0 && status.starting == 0)
        .await
        .unwrap();
    for turn in 0..2 {
        let request = f.request();
        let dispatch = request.dispatch;
        let never = tokio_util::sync::CancellationToken::new();
        let sandbox = DispatchSandbox::provision_until(
            f.runtime.clone(),
            &f.journal,
            f.state.path(),
            request,
            &never,
            None,
            Some(&pool),
        )
        .await
        .unwrap_or_else(|failure| panic!("{}", failure.error));
        assert_eq!(
            sandbox.container(),
            dispatch.to_string(),
            "a fresh container"
        );
        let notice = pool.take_notice();
        match turn {
            0 => assert!(
                notice.as_deref().is_some_and(|text| text
                    .starts_with("the warm pool could not start a sandbox on docker at unix://")
                    && text.contains("gone.sock")),
                "{notice:?}"
            ),
            _ => assert_eq!(notice, None, "said once"),
        }
        assert_eq!(sandbox.teardown().await.first_failure(), None);
    }
    pool.drain().await;
}

#[test]
fn the_demo_runs_end_to_end_from_the_pool_its_model_over_the_channel_stream() {
    docker_ready();
    let home = super::headless::Home::new();
    home.add_user_config("[runtime]\nmounts = \"copy\"\nwarm = 1\n");
    let finished = run(home.demo());
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert_eq!(finished.outcome().0, Phase::Done);
    let dispatch = finished.dispatch();
    let torn = finished.torn_down_cleanly();
    let container = torn
        .iter()
        .find_map(|resource| resource.strip_prefix("container "))
        .unwrap_or_else(|| panic!("no container torn down: {torn:?}"));
    assert_ne!(
        container,
        dispatch.to_string(),
        "a fresh container: {torn:?}"
    );
    assert!(finished.warnings().is_empty(), "{:?}", finished.warnings());
    // The agent asked the demo's model through the gateway: usage was metered.
    assert!(!finished.usages().is_empty(), "{finished:#?}");
    let (ours, _) = installation_containers(&home.state());
    assert_eq!(ours, BTreeSet::new(), "left after exit");
    super::headless::assert_nothing_left(&home, dispatch);
}

#[test]
fn a_pool_on_a_local_socket_without_copy_mode_is_refused_at_launch_before_any_container() {
    docker_ready();
    let home = super::headless::Home::new();
    // Mounts unset: the local socket gets bind mounts, which a pooled sandbox cannot have.
    home.add_user_config("[runtime]\nwarm = 1\n");
    let finished = run(home.demo());
    assert_ne!(finished.code(), Some(0), "{finished:#?}");
    let said = format!("{}{}", finished.stdout, finished.stderr);
    assert!(
        said.contains("runtime.warm = 1 needs copy mode")
            && said.contains("set runtime.mounts = \"copy\""),
        "{said}"
    );
    let (ours, _) = installation_containers(&home.state());
    assert_eq!(ours, BTreeSet::new(), "nothing was started");
}

#[tokio::test]
async fn an_image_change_drains_the_old_containers_and_the_pool_follows_the_new_image() {
    let f = fixture().await;
    let pool = f.pool(1);
    pool.ready(1).await;
    let old: BTreeSet<String> = pool.idle().into_iter().collect();
    // A second image: a never-started container of the first, committed.
    let docker = f.runtime.client();
    let scratch = format!("stet-warm-test-{}", DispatchId::new());
    let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
        .name(&scratch)
        .build();
    let body = bollard::models::ContainerCreateBody {
        image: Some(f.image.to_string()),
        ..Default::default()
    };
    docker.create_container(Some(options), body).await.unwrap();
    let commit = bollard::query_parameters::CommitContainerOptionsBuilder::default()
        .container(&scratch)
        .comment("stet warm pool test")
        .build();
    let committed = docker
        .commit_container(commit, bollard::models::ContainerConfig::default())
        .await
        .unwrap();
    let remove = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
        .force(true)
        .build();
    docker
        .remove_container(&scratch, Some(remove))
        .await
        .unwrap();
    let second = ImageRef::parse(&committed.id, false).unwrap();
    assert_ne!(second, f.image);

    let mut request = f.request();
    request.image = second.clone();
    let dispatch = request.dispatch;
    let fresh = from_pool(&f, &pool, request).await;
    assert_eq!(
        fresh.container(),
        dispatch.to_string(),
        "none of its image was ready"
    );
    // The pool now keeps a container of the new image, not one of the old.
    let mut status = pool.watch();
    status
        .wait_for(|status| status.idle == 1 && status.starting == 0)
        .await
        .unwrap();
    let follows = pool.idle();
    assert!(
        follows.iter().all(|name| !old.contains(name)),
        "{follows:?}"
    );
    let inspected = docker.inspect_container(&follows[0], None).await.unwrap();
    assert_eq!(inspected.image.as_deref(), Some(second.as_str()));
    let mut request = f.request();
    request.image = second.clone();
    let dispatch = request.dispatch;
    let warm = from_pool(&f, &pool, request).await;
    assert_ne!(warm.container(), dispatch.to_string());
    assert_eq!(fresh.teardown().await.first_failure(), None);
    assert_eq!(warm.teardown().await.first_failure(), None);
    pool.drain().await;
    assert_eq!(f.containers().await, BTreeSet::new());
    assert_eq!(f.journal.records().unwrap().records.len(), 0);
    let remove = bollard::query_parameters::RemoveImageOptionsBuilder::default()
        .force(true)
        .build();
    docker
        .remove_image(second.as_str(), Some(remove), None)
        .await
        .unwrap();
}
