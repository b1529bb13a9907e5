//! Measures stet's sandbox overhead (docs/benchmarks.md):
//! `sandbox_cycle once <image-id>` runs one provision → exec → teardown, for `hyperfine` against
//! `docker run --rm` of the same image; `sandbox_cycle cancel <image-id> <n>` measures, n times, how
//! long a teardown takes while a process is still running in the sandbox (cancel → all gone);
//! `sandbox_cycle provision <image-id> bind|copy <mb> <n>` measures, n times, provisioning with a
//! workspace of `mb` MiB (from a base commit) in either mode, and `docker run --rm` of the image.
//!
//! The engine is the one `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` name (the docker
//! CLI's rules, which the `docker run` it times follows too); `SANDBOX_CYCLE_ENGINE=podman` says it
//! is Podman's service (stet then adds what Podman needs, and so does the `docker run`). An image
//! of `offline:<path to stet-sandbox>` is the offline image, loaded into that engine first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stet_engine::credential::LocalCredentialProvider;
use stet_engine::dispatch::copy_mode::Mounts;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{
    CredentialRequest, DispatchSandbox, SandboxRequest, WorkspaceSource,
};
use stet_engine::git::import::ImportLimits;
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::endpoint::Engine;
use stet_engine::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, RuntimeSetup, SandboxProcess,
    SandboxUser,
};
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;

fn request(image: &ImageRef) -> anyhow::Result<SandboxRequest> {
    Ok(SandboxRequest {
        dispatch: DispatchId::new(),
        image: image.clone(),
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID)?,
        keepalive: vec!["/usr/local/bin/stet".into(), "sandbox-idle".into()],
        gateway: None,
        workspace_source: None,
        mounts: stet_engine::dispatch::copy_mode::Mounts::Bind,
        credential: Some(CredentialRequest {
            provider: Arc::new(LocalCredentialProvider::default()),
            repository: "bench/app".into(),
            branch: "stet/bench".into(),
            ttl: Duration::from_secs(600),
            into_sandbox: true,
        }),
    })
}

/// A repository at `path` whose one commit holds `megabytes` files of 1 MiB of random bytes.
fn base_of(path: &std::path::Path, megabytes: usize) -> anyhow::Result<CommitSha> {
    std::fs::create_dir_all(path)?;
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let output = std::process::Command::new("git")
            .arg("-C")
            .arg(path)
            .args([
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@stet.invalid",
            ])
            .args(args)
            .output()?;
        anyhow::ensure!(output.status.success(), "git {args:?}: {output:?}");
        Ok(String::from_utf8(output.stdout)?.trim().to_owned())
    };
    git(&["init", "-q", "-b", "main"])?;
    let mut random = std::fs::File::open("/dev/urandom")?;
    for index in 0..megabytes {
        let mut bytes = vec![0; 1024 * 1024];
        std::io::Read::read_exact(&mut random, &mut bytes)?;
        std::fs::write(path.join(format!("blob-{index}.bin")), bytes)?;
    }
    git(&["add", "."])?;
    git(&["commit", "-q", "-m", "base"])?;
    Ok(CommitSha::parse(&git(&["rev-parse", "HEAD"])?)?)
}

fn process(argv: &[&str]) -> SandboxProcess {
    SandboxProcess {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        workdir: "/workspace".into(),
        ..SandboxProcess::default()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let engine = match std::env::var("SANDBOX_CYCLE_ENGINE").as_deref() {
        Ok("podman") => Engine::Podman,
        Ok("docker") | Err(_) => Engine::Docker,
        Ok(other) => anyhow::bail!("SANDBOX_CYCLE_ENGINE={other:?}: use docker or podman"),
    };
    let endpoint = stet_engine::runtime::docker::endpoint_from_environment(engine, None)?;
    let runtime = Arc::new(DockerRuntime::connect_to(&endpoint).await?);
    let (mode, image) = match args.as_slice() {
        [mode, image, ..] => match image.strip_prefix("offline:") {
            Some(binary) => {
                let built = runtime.offline_image(std::path::Path::new(binary)).await?;
                (mode.as_str(), ImageRef::parse(&built.id, false)?)
            }
            None => (mode.as_str(), ImageRef::parse(image, false)?),
        },
        _ => anyhow::bail!("usage: sandbox_cycle once|cancel <image-id> [n]"),
    };
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
    let state = tempfile::tempdir()?;
    let journal = Journal::open(&state.path().join("journal"))?;
    match mode {
        "once" => {
            let sandbox =
                DispatchSandbox::provision(runtime, &journal, state.path(), request(&image)?)
                    .await?;
            let (sender, mut receiver) = tokio::sync::mpsc::channel(16);
            let drain = tokio::spawn(async move { while receiver.recv().await.is_some() {} });
            let code = sandbox
                .run(&process(&["/usr/local/bin/stet", "--version"]), sender)
                .await?
                .code;
            drain.await?;
            let report = sandbox.teardown().await;
            anyhow::ensure!(
                code == 0 && report.first_failure().is_none(),
                "cycle failed: {code} {report:?}"
            );
        }
        "cancel" => {
            let rounds: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(20);
            let mut timings = Vec::new();
            for _ in 0..rounds {
                let sandbox = Arc::new(
                    DispatchSandbox::provision(
                        runtime.clone(),
                        &journal,
                        state.path(),
                        request(&image)?,
                    )
                    .await?,
                );
                let (sender, mut receiver) = tokio::sync::mpsc::channel(16);
                let running = Arc::clone(&sandbox);
                // A process that runs until it is killed: the agent, mid-run.
                let agent = tokio::spawn(async move {
                    running
                        .run(&process(&["/usr/local/bin/stet", "sandbox-idle"]), sender)
                        .await
                });
                let drain = tokio::spawn(async move { while receiver.recv().await.is_some() {} });
                let cancelled = Instant::now();
                let report = sandbox.teardown().await;
                timings.push(cancelled.elapsed());
                anyhow::ensure!(
                    report.first_failure().is_none(),
                    "teardown failed: {report:?}"
                );
                let _ = agent.await;
                drain.await?;
            }
            timings.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            println!(
                "cancel → container, workspace, outputs gone and credential revoked, {rounds} runs: median {:.1} ms, min {:.1} ms, max {:.1} ms",
                ms(timings[rounds / 2]),
                ms(timings[0]),
                ms(timings[rounds - 1])
            );
        }
        "provision" => {
            let mounts = match args.get(2).map(String::as_str) {
                Some("bind") => Mounts::Bind,
                Some("copy") => Mounts::copy(ImportLimits::default()),
                _ => anyhow::bail!("usage: sandbox_cycle provision <image-id> bind|copy <mb> <n>"),
            };
            let megabytes: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(1);
            let rounds: usize = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(11);
            let repository = state.path().join("repository");
            let base = base_of(&repository, megabytes)?;
            let (mut provisioned, mut raw) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let mut wanted = request(&image)?;
                wanted.mounts = mounts;
                wanted.workspace_source = Some(WorkspaceSource {
                    repository: repository.clone(),
                    base: base.clone(),
                    fetch: None,
                    limits: Default::default(),
                });
                let started = Instant::now();
                let sandbox =
                    DispatchSandbox::provision(runtime.clone(), &journal, state.path(), wanted)
                        .await?;
                provisioned.push(started.elapsed());
                let report = sandbox.teardown().await;
                anyhow::ensure!(report.first_failure().is_none(), "teardown: {report:?}");
                let started = Instant::now();
                let status = std::process::Command::new("docker")
                    .args(["run", "--rm", "--network", "none"])
                    .args(podman_ulimits)
                    .arg(image.as_str())
                    .args(["/usr/local/bin/stet", "--version"])
                    .stdout(std::process::Stdio::null())
                    .status()?;
                raw.push(started.elapsed());
                anyhow::ensure!(status.success(), "docker run failed: {status}");
            }
            let median = |timings: &mut Vec<Duration>| {
                timings.sort();
                timings[timings.len() / 2].as_secs_f64() * 1000.0
            };
            println!(
                "{} at {}, {} mode, {megabytes} MiB workspace, {rounds} runs: provisioning median {:.1} ms; docker run --rm median {:.1} ms",
                engine.display_name(),
                endpoint.host,
                args[2],
                median(&mut provisioned),
                median(&mut raw)
            );
        }
        other => anyhow::bail!("unknown mode {other:?}: use once, cancel or provision"),
    }
    Ok(())
}
