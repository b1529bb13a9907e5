//! The commands that run inside the sandbox: `stet agent`, `stet sandbox-idle` and `stet probe`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::args::AgentCommand;

/// `stet agent ...`: runs inside the sandbox.
pub(crate) fn agent(command: AgentCommand) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    let code = match command {
        AgentCommand::Run {
            scenario,
            instructions,
            pace,
            workspace,
        } => stet_engine::agent::run(
            &stet_engine::agent::AgentOptions {
                scenario,
                instructions,
                pace,
                workspace,
            },
            &mut stdout,
        )?,
        AgentCommand::Check { file, root } => stet_engine::agent::check(&file, &root, &mut stdout)?,
    };
    Ok(ExitCode::from(code))
}

/// A sandbox's main process: waits for SIGTERM or SIGINT (as PID 1 it must handle them itself),
/// relaying the model port to the gateway socket `relay` meanwhile when one is given. A relay that
/// cannot listen ends it at once with exit code 1.
pub(crate) async fn sandbox_idle(relay: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let stopped = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    let Some(socket) = relay else {
        stopped.await;
        return Ok(ExitCode::SUCCESS);
    };
    let address = stet_engine::relay::RELAY_ADDR
        .parse()
        .context("reading the relay address")?;
    match stet_engine::relay::relay(address, socket, stopped).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("stet sandbox-idle: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `stet probe`: what a test asks of the sandbox from inside it, reported as JSON on stdout; `hold`
/// waits for stdin to close, `emit_line_mb` prints one line of that many MiB.
pub(crate) fn probe(
    request: &stet_engine::probe::ProbeRequest,
    hold: bool,
    emit_line_mb: Option<usize>,
) -> anyhow::Result<ExitCode> {
    if hold {
        stet_engine::probe::hold(&mut std::io::stdin().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(megabytes) = emit_line_mb {
        stet_engine::probe::emit_line(megabytes, &mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = stet_engine::probe::run(request)?;
    stet_engine::probe::write_report(&report, &mut std::io::stdout().lock())?;
    Ok(ExitCode::SUCCESS)
}
