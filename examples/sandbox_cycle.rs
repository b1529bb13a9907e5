//! Measures stet's sandbox overhead (docs/benchmarks.md):
//! `sandbox_cycle once <image-id>` runs one provision → exec → teardown, for `hyperfine` against
//! `docker run --rm` of the same image; `sandbox_cycle cancel <image-id> <n>` measures, n times, how
//! long a teardown takes while a process is still running in the sandbox (cancel → all gone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use stet_engine::credential::LocalCredentialProvider;
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::sandbox::{CredentialRequest, DispatchSandbox, SandboxRequest};
use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, SandboxProcess, SandboxUser,
};
use stet_protocol::event::DispatchId;

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
    let (mode, image) = match args.as_slice() {
        [mode, image, ..] => (mode.as_str(), ImageRef::parse(image, false)?),
        _ => anyhow::bail!("usage: sandbox_cycle once|cancel <image-id> [n]"),
    };
    let state = tempfile::tempdir()?;
    let journal = Journal::open(&state.path().join("journal"))?;
    let runtime = Arc::new(DockerRuntime::connect().await?);
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
        other => anyhow::bail!("unknown mode {other:?}: use once or cancel"),
    }
    Ok(())
}
