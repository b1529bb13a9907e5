//! `stet --headless`: dispatches the briefs chosen and prints the events, for scripts.

use std::io::IsTerminal;
use std::process::ExitCode;

use stet_engine::dispatch::order::Delivery;
use stet_engine::headless::Output;

use super::EXIT_USAGE;
use super::args::DispatchArgs;
use super::session::{Session, engine_options, load_config, repository_root, select_briefs};

/// `stet --headless`: dispatches briefs of the repository in the current directory.
pub(crate) async fn headless(args: DispatchArgs, push: bool) -> anyhow::Result<ExitCode> {
    if args.briefs.is_empty() && !args.all {
        eprintln!("stet: --headless needs --brief ID|PATH (repeatable) or --all");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let root = repository_root("run stet --headless")?;
    let config = load_config(&root)?;
    // The repository's path is outside input (a clone's directory is named after its URL).
    eprintln!(
        "stet: configuration: {}",
        stet_sanitize::display::escaped_invisible(&config.repository_file.to_string())
    );
    let briefs = select_briefs(&root, &args, &config.inbox)?;
    let options = engine_options(root, config, &args)?;
    let delivery = if push { Delivery::Push } else { Delivery::Keep };
    let output = Output::JsonLines {
        progress: std::io::stderr().is_terminal(),
    };
    dispatch_and_watch(options, briefs, delivery, output).await
}

/// Assembles the engine (sweeping what earlier runs left), dispatches `briefs` and prints the events
/// until every dispatch finished or a signal cancelled them.
pub(crate) async fn dispatch_and_watch(
    options: stet_engine::engine::EngineOptions,
    briefs: Vec<stet_engine::brief::Brief>,
    delivery: Delivery,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let session = match Session::assemble(options).await? {
        Ok(session) => session,
        Err(code) => return Ok(code),
    };
    let Session {
        engine,
        interrupts,
        log_guard: _log_guard,
    } = session;
    // The dispatcher task ends with the runtime: the signal watcher keeps a handle to it.
    let (dispatcher, events, _dispatcher_task) = engine.start();
    let interrupted = interrupts.watch(dispatcher.clone());
    let mut stdout = std::io::stdout().lock();
    let code = stet_engine::headless::run(
        dispatcher.clone(),
        events,
        briefs,
        delivery,
        output,
        &mut stdout,
        interrupted,
    )
    .await;
    dispatcher.shutdown().await;
    Ok(ExitCode::from(code))
}
