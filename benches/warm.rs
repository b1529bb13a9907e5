//! What the warm pool (`[runtime] warm = N`, issue #33) saves a dispatch, on the real Docker
//! engine, and what its idle containers cost. In turns, so that a change in the machine's load
//! touches every way alike, each turn measures:
//!
//! - `docker run --rm`: the docker CLI running `stet --version` in a fresh container of the same
//!   image (`--network none`), to its removal: what a container costs the usual way;
//! - a fresh sandbox: [`DispatchSandbox::provision_until`] in copy mode with no pool, from the
//!   request to a started, hardened container with its (empty) workspace copied in, then the same
//!   with one exec of `stet --version` in it;
//! - a warm sandbox: the same, its container claimed from a pool of one (refilled, untimed, before
//!   the turn's claim).
//!
//! Every sandbox is torn down after its turn (untimed). Then a pool of [`MEMORY_POOL`] is filled
//! and each idle container's memory read from its cgroup through the engine's stats: `usage`, and
//! `usage` less the page cache (what `docker stats` shows). The load average is printed before and
//! after.
//!
//! `cargo bench --bench warm` (about a minute on 2 cores once built); `STET_BENCH_TURNS` sets the
//! number of turns (default 15). The engine is the one `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and
//! `DOCKER_CERT_PATH` name (the docker CLI's rules, which the timed `docker run` follows too);
//! `STET_BENCH_ENGINE=podman` says it is Podman's service (stet then adds what Podman needs, and
//! so does the `docker run`). `benches/support/engines-provision.py --warm` runs it on rootful
//! Podman and on a remote engine it starts.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::pool::{WarmPool, WarmShape};
use stet_engine::dispatch::sandbox::{DispatchSandbox, SandboxRequest};
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::{DockerRuntime, endpoint_from_environment};
use stet_engine::runtime::endpoint::Engine;
use stet_engine::runtime::{
    ContainerRuntime, DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, RuntimeSetup,
    SandboxProcess, SandboxUser, state_label,
};
use stet_protocol::event::DispatchId;

/// The program every way runs (the offline image's only executable).
const STET: &str = "/usr/local/bin/stet";

/// How many idle containers the memory measurement keeps.
const MEMORY_POOL: usize = 4;

fn or_die<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|error| panic!("{what}: {error}"))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|error| format!("unknown ({error})"))
}

struct Bench {
    runtime: Arc<DockerRuntime>,
    journal: Arc<Journal>,
    state: tempfile::TempDir,
    shape: WarmShape,
}

impl Bench {
    fn request(&self) -> SandboxRequest {
        SandboxRequest {
            dispatch: DispatchId::new(),
            image: self.shape.image.clone(),
            limits: self.shape.limits,
            network: NetworkPolicy::None,
            user: self.shape.user,
            keepalive: self.shape.keepalive.clone(),
            workspace_source: None,
            gateway: None,
            credential: None,
            mounts: Mounts::copy(ImportLimits::default()),
        }
    }

    /// (ready, ready and one process run) for a sandbox from `pool`, or a fresh one.
    async fn sandbox(&self, pool: Option<&WarmPool>) -> (Duration, Duration) {
        let never = CancellationToken::new();
        let runtime: Arc<dyn ContainerRuntime> = self.runtime.clone();
        let request = self.request();
        let dispatch = request.dispatch.to_string();
        let started = Instant::now();
        let sandbox = DispatchSandbox::provision_until(
            runtime,
            &self.journal,
            self.state.path(),
            request,
            &never,
            None,
            pool,
        )
        .await
        .unwrap_or_else(|failure| panic!("provisioning: {}", failure.error));
        let ready = started.elapsed();
        assert_eq!(
            pool.is_some(),
            sandbox.container() != dispatch,
            "a warm sandbox comes from the pool, a fresh one not"
        );
        let process = SandboxProcess {
            argv: vec![STET.to_owned(), "--version".to_owned()],
            workdir: "/".to_owned(),
            ..SandboxProcess::default()
        };
        let (output, mut drained) = mpsc::channel(16);
        let reader = tokio::spawn(async move { while drained.recv().await.is_some() {} });
        let exit = or_die(
            self.runtime
                .exec(sandbox.container(), &process, output)
                .await,
            "exec",
        );
        let ran = started.elapsed();
        assert_eq!(exit.code, 0);
        let _ = reader.await;
        let torn = sandbox.teardown().await;
        assert!(torn.first_failure().is_none(), "{torn:?}");
        (ready, ran)
    }
}

/// `docker run --rm` of the image, to the container's removal.
fn docker_run(engine: Engine, image: &str) -> Duration {
    // What `docker run` needs on Podman besides the image (runc fails with its default ulimits).
    let podman_ulimits: &[&str] = if engine == Engine::Podman {
        &[
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=16384:16384",
        ]
    } else {
        &[]
    };
    let started = Instant::now();
    let status = or_die(
        std::process::Command::new("docker")
            .args(["run", "--rm", "--network", "none", "--entrypoint", STET])
            .args(podman_ulimits)
            .args([image, "--version"])
            .stdout(std::process::Stdio::null())
            .status(),
        "docker run",
    );
    let elapsed = started.elapsed();
    assert!(status.success(), "docker run: {status}");
    elapsed
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Median, minimum and maximum, in milliseconds.
fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let median = samples[samples.len() / 2];
    format!(
        "median {:7.1} ms  min {:7.1}  max {:7.1}",
        millis(median),
        millis(samples[0]),
        millis(samples[samples.len() - 1])
    )
}

/// The memory of `container` as its cgroup counts it: (usage, usage less the page cache), bytes.
async fn memory(runtime: &DockerRuntime, container: &str) -> (u64, u64) {
    use futures_util::StreamExt as _;
    let options = bollard::query_parameters::StatsOptionsBuilder::default()
        .stream(false)
        .build();
    let mut stats = runtime.client().stats(container, Some(options));
    let stats = or_die(
        stats
            .next()
            .await
            .unwrap_or_else(|| panic!("no stats for {container}")),
        "stats",
    );
    let memory = stats.memory_stats.unwrap_or_default();
    let usage = memory.usage.unwrap_or_default();
    let cache = memory
        .stats
        .and_then(|stats| stats.get("cache").or(stats.get("inactive_file")).copied())
        .unwrap_or_default();
    (usage, usage.saturating_sub(cache))
}

/// The resident memory of the engine's shim process that holds the container `id` (outside its
/// cgroup: the host pays it too), in KiB, when one names it on its command line.
fn shim_rss_kib(id: &str) -> Option<u64> {
    let processes = std::fs::read_dir("/proc").ok()?;
    for process in processes.flatten() {
        let cmdline = std::fs::read(process.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
        let holds = words
            .first()
            .is_some_and(|program| program.ends_with(b"containerd-shim-runc-v2"))
            && words
                .windows(2)
                .any(|pair| pair[0] == b"-id" && pair[1] == id.as_bytes());
        if holds {
            let status = std::fs::read_to_string(process.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok());
        }
    }
    None
}

fn main() {
    let turns: usize = std::env::var("STET_BENCH_TURNS")
        .ok()
        .and_then(|turns| turns.parse().ok())
        .unwrap_or(15);
    let engine = or_die(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
        "runtime",
    );
    engine.block_on(async {
        let kind = match std::env::var("STET_BENCH_ENGINE").as_deref() {
            Ok("podman") => Engine::Podman,
            Ok("docker") | Err(_) => Engine::Docker,
            Ok(other) => panic!("STET_BENCH_ENGINE={other:?}: use docker or podman"),
        };
        let endpoint = or_die(endpoint_from_environment(kind, None), "the engine's address");
        println!("engine: {} at {}", kind.as_str(), endpoint.host);
        let runtime = Arc::new(or_die(DockerRuntime::connect_to(&endpoint).await, "the engine"));
        let binary = Path::new(env!("CARGO_BIN_EXE_stet-sandbox"));
        let image = or_die(runtime.offline_image(binary).await, "the offline image");
        let state = or_die(tempfile::tempdir(), "state directory");
        let journal = Arc::new(or_die(
            Journal::open(&state.path().join("journal")),
            "journal",
        ));
        let shape = WarmShape {
            image: or_die(ImageRef::parse(&image.id, false), "image id"),
            limits: DispatchLimits::default(),
            user: or_die(SandboxUser::for_invoker(DEFAULT_SANDBOX_UID), "user"),
            keepalive: vec![STET.to_owned(), "sandbox-idle".to_owned()],
            state_label: state_label(state.path()),
        };
        let bench = Bench {
            runtime: runtime.clone(),
            journal: journal.clone(),
            state,
            shape: shape.clone(),
        };
        println!("image {} ({turns} turns)", image.id);
        println!("load average before: {}", load_average());
        let pool = WarmPool::start(runtime.clone(), journal.clone(), 1, shape.clone());
        // One of each, untimed: the engine's and the page cache's first-time costs.
        pool.ready(1).await;
        docker_run(kind, &image.id);
        bench.sandbox(None).await;
        bench.sandbox(Some(&pool)).await;

        let (mut docker, mut fresh, mut fresh_ran, mut warm, mut warm_ran) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for turn in 0..turns {
            // Each way goes first in turn.
            for way in (0..3).map(|step| (turn + step) % 3) {
                match way {
                    0 => docker.push(docker_run(kind, &image.id)),
                    1 => {
                        let (ready, ran) = bench.sandbox(None).await;
                        fresh.push(ready);
                        fresh_ran.push(ran);
                    }
                    _ => {
                        pool.ready(1).await;
                        let (ready, ran) = bench.sandbox(Some(&pool)).await;
                        warm.push(ready);
                        warm_ran.push(ran);
                    }
                }
            }
        }
        println!(
            "docker run --rm (to removal)       {}",
            summary(docker.clone())
        );
        println!("fresh sandbox, ready               {}", summary(fresh));
        println!("fresh sandbox, ready + one exec    {}", summary(fresh_ran));
        println!(
            "warm sandbox, ready                {}",
            summary(warm.clone())
        );
        println!("warm sandbox, ready + one exec     {}", summary(warm_ran));
        docker.sort();
        warm.sort();
        let ratio = millis(warm[warm.len() / 2]) / millis(docker[docker.len() / 2]);
        println!("warm ready / docker run --rm (medians): {ratio:.2}");
        pool.drain().await;

        let pool = WarmPool::start(runtime.clone(), journal.clone(), MEMORY_POOL, shape);
        pool.ready(MEMORY_POOL).await;
        for container in pool.idle() {
            let (usage, less_cache) = memory(&runtime, &container).await;
            let inspected = or_die(
                runtime.client().inspect_container(&container, None).await,
                "inspect",
            );
            let shim = inspected
                .id
                .as_deref()
                .and_then(shim_rss_kib)
                .map_or_else(|| "not found".to_owned(), |kib| format!("{:.2} MiB", kib as f64 / 1024.0));
            println!(
                "idle {container}: usage {:.2} MiB, less page cache {:.2} MiB; its shim's RSS {shim}",
                usage as f64 / 1048576.0,
                less_cache as f64 / 1048576.0
            );
        }
        pool.drain().await;
        println!("load average after: {}", load_average());
    });
}
