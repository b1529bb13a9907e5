//! Issue 33's engine matrix, end to end: the `stet` binary as a user runs it, pointed by its own
//! configuration at an engine the test started — rootful Podman in bind mode (its default, a local
//! socket) and in copy mode, and a remote Docker engine (TLS, its own network and mount namespaces,
//! copy mode by default), and the local Docker engine in copy mode — runs the demo from brief to pull request, is cancelled, times out, and is
//! SIGKILLed and reclaimed by `stet sweep` on that engine. On the remote engine its inspect shows no
//! host path while the agent runs, and `mounts = "bind"` is refused before anything is made.
//!
//! Each case is one test over one engine, so that an engine is started once for its four cases;
//! a failure names the case. Engines need root (as the suite runs in CI's root lane); an ordinary
//! account is refused by each engine with a message saying so, which is what these tests check then.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bollard::query_parameters::ListContainersOptionsBuilder;

use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{ContainerRuntime, DISPATCH_LABEL};
use stet_protocol::event::{DispatchId, EventKind};
use stet_protocol::state::Phase;

use super::accounts::running_as_root;
use super::engines::{Service, assert_no_host_path, loaded, podman, remote_docker};
use super::headless::{
    Finished, Home, Project, Watched, assert_nothing_left, forever, run, run_text, signal,
    toml_string,
};

/// What a test looks at in the agent's running container: the demo's home, the dispatch.
type Inspect<'a> = dyn Fn(&Home, DispatchId) + 'a;

/// An engine the test started, and how stet is pointed at it.
struct Target {
    /// The engine's service when the test started one (`None`: the local Docker engine).
    _service: Option<Service>,
    /// The engine's address, for messages.
    host: String,
    runtime: Arc<DockerRuntime>,
    /// The `[runtime]` table of the user's configuration.
    config: String,
    /// What stet's environment adds (the remote engine's TLS material).
    env: Vec<(&'static str, String)>,
    /// Serves the test's own requests to the engine.
    tokio: tokio::runtime::Runtime,
}

impl Target {
    /// Rootful Podman, with `mounts` when given (else its default for a local socket).
    fn podman(mounts: Option<&str>) -> Target {
        let service = podman(None);
        let mut config = format!(
            "\n[runtime]\nengine = \"podman\"\nhost = {}\n",
            toml_string(Path::new(&service.endpoint.host))
        );
        if let Some(mounts) = mounts {
            config.push_str(&format!("mounts = \"{mounts}\"\n"));
        }
        Target::started(service, config, Vec::new())
    }

    /// The remote engine, reached as `DOCKER_HOST`-style settings say (host in the configuration,
    /// TLS from the environment), with no `mounts` setting: copy is its default.
    fn remote() -> Target {
        let service = remote_docker();
        let config = format!(
            "\n[runtime]\nhost = {}\n",
            toml_string(Path::new(&service.endpoint.host))
        );
        let certs = service.endpoint.tls.clone().unwrap().directory;
        let env = vec![
            ("DOCKER_TLS_VERIFY", "1".to_owned()),
            ("DOCKER_CERT_PATH", certs.display().to_string()),
        ];
        Target::started(service, config, env)
    }

    /// The local Docker engine (the one the suite's other tests use), in copy mode.
    fn local_copy() -> Target {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = tokio.block_on(async {
            let runtime = Arc::new(
                DockerRuntime::connect()
                    .await
                    .expect("the local Docker engine"),
            );
            loaded(&runtime).await;
            runtime
        });
        Target {
            _service: None,
            host: runtime.endpoint().host.clone(),
            runtime,
            config: "\n[runtime]\nmounts = \"copy\"\n".to_owned(),
            env: Vec::new(),
            tokio,
        }
    }

    fn started(service: Service, config: String, env: Vec<(&'static str, String)>) -> Target {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = tokio.block_on(async {
            let runtime = service.connect().await;
            // What stet would load itself, loaded once here so each case does not race to.
            loaded(&runtime).await;
            runtime
        });
        Target {
            host: service.endpoint.host.clone(),
            _service: Some(service),
            runtime,
            config,
            env,
            tokio,
        }
    }

    /// `command` pointed at this engine.
    fn point(&self, mut command: Command) -> Command {
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command.env_remove("DOCKER_HOST");
        command
    }

    /// A notes project playing `scenario` on this engine.
    fn project(&self, scenario: &str) -> Project {
        let project = Project::new(scenario);
        project.home.add_user_config(&self.config);
        project
    }

    /// The names of the containers this engine holds for `dispatch`, running or not.
    fn containers_of(&self, dispatch: DispatchId) -> Vec<String> {
        let filters = HashMap::from([("label", vec![format!("{DISPATCH_LABEL}={dispatch}")])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        self.tokio.block_on(async {
            self.runtime
                .client()
                .list_containers(Some(options))
                .await
                .unwrap()
                .into_iter()
                .flat_map(|summary| summary.names.unwrap_or_default())
                .map(|name| name.trim_start_matches('/').to_owned())
                .collect()
        })
    }

    /// Nothing of `dispatch` is left on the host or on this engine.
    fn assert_nothing_left(&self, home: &Home, dispatch: DispatchId, case: &str) {
        assert_eq!(
            self.containers_of(dispatch),
            Vec::<String>::new(),
            "{case}: containers of {dispatch} on {}",
            self.host
        );
        assert_nothing_left(home, dispatch);
    }

    /// The demo, headless, end to end: brief to pull request, the change pushed; `inspect`, when
    /// given, looks at the agent's container while it runs.
    fn demo(&self, inspect: Option<&Inspect<'_>>) {
        let home = Home::new();
        home.add_user_config(&self.config);
        let mut command = self.point(home.stet());
        command
            .args(["demo", "--headless", "--pace", "1", "--dir"])
            .arg(home.demo_dir());
        let mut watched = Watched::start(command);
        let running = watched.until_running();
        assert_eq!(
            self.containers_of(running.dispatch),
            [running.dispatch.to_string()],
            "demo: the agent's container is on {}",
            self.host
        );
        if let Some(inspect) = inspect {
            inspect(&home, running.dispatch);
        }
        let finished = watched.finish();
        assert_eq!(finished.code(), Some(0), "demo: {finished:#?}");
        assert_eq!(finished.outcome().0, Phase::Done, "demo");
        let pushed = finished
            .events
            .iter()
            .any(|event| matches!(event.kind, EventKind::Pushed { .. }));
        assert!(pushed, "demo: nothing was pushed: {finished:#?}");
        assert!(
            finished
                .events
                .iter()
                .any(|event| matches!(event.kind, EventKind::PullRequest { .. })),
            "demo: no pull request: {finished:#?}"
        );
        finished.torn_down_cleanly();
        self.assert_nothing_left(&home, finished.dispatch(), "demo");
        // The launch-time limits probe passed on this engine and is remembered, once.
        let cache = home
            .state()
            .join(stet_engine::runtime::limits_cache::CACHE_FILE);
        let passes: Vec<String> = serde_json::from_slice(
            &std::fs::read(&cache).unwrap_or_else(|e| panic!("{}: {e}", cache.display())),
        )
        .unwrap();
        assert_eq!(passes.len(), 1, "{passes:?}");
    }

    /// SIGINT while the agent works: exit 3, cancelled, torn down there.
    fn cancel(&self) {
        let project = self.project(&forever());
        let mut watched = Watched::start(self.point(project.headless(&["--timeout", "2m"])));
        watched.until("the first transcript item", |event| {
            matches!(event.kind, EventKind::Transcript(_))
        });
        assert!(signal(watched.pid(), "INT").success());
        let finished = watched.finish();
        assert_eq!(finished.code(), Some(3), "cancel: {finished:#?}");
        assert_eq!(finished.outcome().0, Phase::Cancelled, "cancel");
        finished.torn_down_cleanly();
        self.assert_nothing_left(&project.home, finished.dispatch(), "cancel");
    }

    /// An agent that never finishes, under a 3 s timeout: exit 4, timed out, torn down there.
    fn timeout(&self) {
        let project = self.project(&forever());
        let finished: Finished = run(self.point(project.headless(&["--timeout", "3s"])));
        assert_eq!(finished.code(), Some(4), "timeout: {finished:#?}");
        let (outcome, _, reason) = finished.outcome();
        assert_eq!(outcome, Phase::TimedOut, "timeout");
        assert_eq!(
            reason.as_deref(),
            Some("the dispatch ran past its wall-clock timeout of 3 s")
        );
        finished.torn_down_cleanly();
        self.assert_nothing_left(&project.home, finished.dispatch(), "timeout");
    }

    /// stet SIGKILLed while the agent works, its container left on this engine; `stet sweep`
    /// reclaims it there, and a second sweep finds nothing.
    fn sigkill_then_sweep(&self) {
        let project = self.project(&forever());
        let home = &project.home;
        let mut watched = Watched::start(self.point(project.headless(&["--timeout", "2m"])));
        let running = watched.until("the first transcript item", |event| {
            matches!(event.kind, EventKind::Transcript(_))
        });
        let dispatch = running.dispatch;
        let status = watched.kill();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert_eq!(
            self.containers_of(dispatch),
            [dispatch.to_string()],
            "sigkill: the killed stet left its container on {}",
            self.host
        );
        let mut sweep = self.point(home.stet());
        sweep.arg("sweep");
        let swept = run_text(sweep);
        assert_eq!(swept.code(), Some(0), "sweep: {swept:#?}");
        assert!(
            swept
                .stdout
                .lines()
                .any(|line| line == format!("removed container {dispatch}")),
            "sweep: {}",
            swept.stdout
        );
        assert!(
            swept.stdout.contains("closed 1 journal record(s)"),
            "{}",
            swept.stdout
        );
        self.assert_nothing_left(home, dispatch, "sigkill + sweep");
        let mut again = self.point(home.stet());
        again.arg("sweep");
        let again = run_text(again);
        assert_eq!(
            again.stdout, "nothing to sweep: no dispatch left anything behind\n",
            "{again:#?}"
        );
    }
}

/// As an ordinary account: no rootful engine to start, and stet pointed at a missing Podman socket
/// says so and exits 2.
fn refused_without_root() {
    let home = Home::new();
    home.add_user_config(
        "[runtime]\nengine = \"podman\"\nhost = \"unix:///nonexistent/podman.sock\"\n",
    );
    let mut command = home.demo();
    command.env_remove("DOCKER_HOST");
    let finished = run_text(command);
    assert_eq!(finished.code(), Some(2), "{finished:#?}");
    assert!(
        finished
            .stderr
            .contains("Podman is not reachable at unix:///nonexistent/podman.sock"),
        "{}",
        finished.stderr
    );
}

#[test]
fn rootful_podman_in_bind_mode_runs_the_demo_cancels_times_out_and_is_swept() {
    if !running_as_root() {
        return refused_without_root();
    }
    let podman = Target::podman(None);
    podman.demo(None);
    podman.cancel();
    podman.timeout();
    podman.sigkill_then_sweep();
}

#[test]
fn rootful_podman_in_copy_mode_runs_the_demo_cancels_times_out_and_is_swept() {
    if !running_as_root() {
        return refused_without_root();
    }
    let podman = Target::podman(Some("copy"));
    let runtime = podman.runtime.clone();
    let inspect = |home: &Home, dispatch: DispatchId| {
        let inspected = podman
            .tokio
            .block_on(
                runtime
                    .client()
                    .inspect_container(&dispatch.to_string(), None),
            )
            .unwrap();
        // No host path at all (the channels ride the exec stream); the workspace and outputs are
        // the engine's volumes.
        assert_no_host_path(&inspected, &[home.path()]);
        let mounts = inspected.mounts.clone().unwrap_or_default();
        for target in ["/workspace", "/outputs"] {
            let mount = mounts
                .iter()
                .find(|mount| mount.destination.as_deref() == Some(target))
                .unwrap_or_else(|| panic!("no {target} mount: {mounts:?}"));
            assert_eq!(mount.typ.as_deref(), Some("volume"), "{mount:?}");
            let source = mount.source.clone().unwrap_or_default();
            assert!(
                !source.starts_with(&home.path().display().to_string()),
                "{source}"
            );
        }
    };
    podman.demo(Some(&inspect));
    podman.cancel();
    podman.timeout();
    podman.sigkill_then_sweep();
}

#[test]
fn the_local_engine_in_copy_mode_runs_the_demo_with_no_host_path_cancels_times_out_and_is_swept() {
    let local = Target::local_copy();
    let inspect = |home: &Home, dispatch: DispatchId| {
        let inspected = local
            .tokio
            .block_on(
                local
                    .runtime
                    .client()
                    .inspect_container(&dispatch.to_string(), None),
            )
            .unwrap();
        assert_no_host_path(&inspected, &[home.path()]);
    };
    local.demo(Some(&inspect));
    local.cancel();
    local.timeout();
    local.sigkill_then_sweep();
}

#[test]
fn the_remote_engine_in_copy_mode_runs_the_demo_with_no_host_path_cancels_times_out_and_is_swept() {
    if !running_as_root() {
        return refused_without_root();
    }
    let remote = Target::remote();
    // Bind mounts asked of it are refused before anything is made, naming the setting.
    let project = remote.project(&forever());
    project.home.add_user_config("mounts = \"bind\"\n");
    let refused = run_text(remote.point(project.headless(&[])));
    assert_ne!(refused.code(), Some(0), "{refused:#?}");
    assert!(
        refused.stderr.contains("[runtime] mounts = \"bind\"")
            && refused.stderr.contains(&remote.host),
        "{}",
        refused.stderr
    );
    assert!(
        remote
            .tokio
            .block_on(remote.runtime.list_sandboxes())
            .unwrap()
            .is_empty()
    );

    let inspect = |home: &Home, dispatch: DispatchId| {
        let inspected = remote
            .tokio
            .block_on(
                remote
                    .runtime
                    .client()
                    .inspect_container(&dispatch.to_string(), None),
            )
            .unwrap();
        assert_no_host_path(&inspected, &[home.path()]);
    };
    remote.cancel();
    remote.timeout();
    remote.sigkill_then_sweep();
    // The demo's agent reaches its model through the gateway's channel, over the exec stream: a
    // bind mount of the socket directory would name a path this engine cannot see.
    remote.demo(Some(&inspect));
}

/// The real agent on rootful Podman, in bind and in copy mode: the OpenHands dispatch image (built
/// on the local engine, then loaded into Podman through its image-load API by the docker CLI), its
/// terminal edit pushed, the model key kept on the host, nothing left on Podman.
#[test]
fn the_live_openhands_agent_runs_on_rootful_podman_in_both_modes_and_its_edit_is_pushed() {
    use super::openhands_live::live_image;
    if !running_as_root() {
        return refused_without_root();
    }
    let image = live_image();
    let podman = Target::podman(None);
    // Podman's store is the machine's: the gigabyte loaded here goes with the test, failed or not.
    let _unload = Unload(image.clone());
    let copied = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker save {image} | docker -H {} load",
            podman.host
        ))
        .env_remove("DOCKER_HOST")
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "loading {image} into Podman: {}",
        String::from_utf8_lossy(&copied.stderr)
    );
    let present = podman
        .tokio
        .block_on(podman.runtime.client().inspect_image(&image))
        .unwrap_or_else(|error| panic!("{image} is not in Podman by its id: {error}"));
    assert_eq!(present.id.as_deref(), Some(image.as_str()));
    // Bind mode (the local socket's default), then copy mode on the same engine and image.
    for mounts in [None, Some("copy")] {
        live_dispatch_on(&podman, mounts);
    }
}

/// The real agent on the local Docker engine in copy mode: its workspace in through the archive
/// API, its model over the exec stream, its terminal edit pushed, nothing left.
#[test]
fn the_live_openhands_agent_runs_on_the_local_engine_in_copy_mode_and_its_edit_is_pushed() {
    let _image = super::openhands_live::live_image();
    live_dispatch_on(&Target::local_copy(), None);
}

/// The real agent on the remote engine (TLS, its own network and mount namespaces), in copy mode,
/// its default there: the OpenHands dispatch image loaded into it through its image-load API, the
/// workspace in through the archive API, the model over the exec stream, the edit pushed. The
/// engine's store (vfs, about 2.1 GB for the image's two layers) goes with the engine.
#[test]
fn the_live_openhands_agent_runs_on_the_remote_engine_in_copy_mode_and_its_edit_is_pushed() {
    use super::openhands_live::live_image;
    if !running_as_root() {
        return refused_without_root();
    }
    let image = live_image();
    let remote = Target::remote();
    // Saved from the local engine, loaded into the remote one with its TLS material.
    let tls: Vec<String> = remote
        .env
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let loaded = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker save {image} | env {} docker -H {} load",
            tls.join(" "),
            remote.host
        ))
        .env_remove("DOCKER_HOST")
        .output()
        .unwrap();
    assert!(
        loaded.status.success(),
        "loading {image} into the remote engine: {}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    live_dispatch_on(&remote, None);
}

/// One live OpenHands dispatch on `podman`'s engine (rootful Podman, the local or the remote
/// engine) with `mounts` when given: the edit pushed, the agent not root, the key kept on the
/// host, nothing left.
fn live_dispatch_on(podman: &Target, mounts: Option<&str>) {
    use super::openhands_live::{Live, finish, terminal};
    let case = format!("live, mounts {mounts:?}");
    let live = Live::new(|_| {
        vec![
            terminal("printf 'one\\ntwo\\nthree\\nfour\\n' > src/notes.txt; id -u > uid.txt"),
            finish("Added a fourth note."),
        ]
    });
    live.live.project.home.add_user_config(&podman.config);
    if let Some(mounts) = mounts {
        live.live
            .project
            .home
            .add_user_config(&format!("mounts = \"{mounts}\"\n"));
    }
    let mut watched = Watched::start(podman.point(live.headless(&["--push"])));
    let running = watched.until_running();
    assert_eq!(
        podman.containers_of(running.dispatch),
        [running.dispatch.to_string()],
        "{case}: the agent runs on {}",
        podman.host
    );
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(0), "{case}: {finished:#?}");
    assert_eq!(finished.outcome(), (Phase::Done, 0, None), "{case}");
    let remote = &live.live.project.remote;
    assert_eq!(
        finished.pushed_file(remote, "src/notes.txt"),
        "one\ntwo\nthree\nfour\n",
        "{case}"
    );
    let uid: u32 = finished
        .pushed_file(remote, "uid.txt")
        .trim()
        .parse()
        .unwrap();
    assert_ne!(uid, 0, "{case}: the agent ran as root");
    live.assert_keyed_by_the_host();
    assert!(!finished.stdout.contains(&live.live.key), "{case}");
    finished.torn_down_cleanly();
    podman.assert_nothing_left(&live.live.project.home, finished.dispatch(), &case);
}

/// Removes an image from rootful Podman's store when dropped.
struct Unload(String);

impl Drop for Unload {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rmi", "--force", &self.0])
            .output();
    }
}
