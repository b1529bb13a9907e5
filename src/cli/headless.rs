//! `stet --headless`: dispatches the briefs chosen, hands the engine's events to the sink the
//! command chose (JSON Lines on stdout, the schema in `docs/events.md`) and exits with the code of
//! DESIGN §6. `stet demo` watches its dispatches here too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use tokio::sync::mpsc;

use stet_engine::brief::Brief;
use stet_engine::dispatch::dispatcher::DispatchHandle;
use stet_engine::dispatch::order::Delivery;
use stet_protocol::event::{DispatchId, Event, EventKind};

use super::args::DispatchArgs;
use super::session::{Session, engine_options, load_config, repository_root, select_briefs};
use super::sink::{EventSink, JsonLines};
use super::{EXIT_CANCELLED, EXIT_USAGE};

/// `stet --headless`: dispatches briefs of the repository in the current directory.
pub(crate) async fn headless(args: DispatchArgs, push: bool) -> anyhow::Result<ExitCode> {
    if args.briefs.is_empty() && !args.all {
        eprintln!("stet: --headless needs --brief ID|PATH (repeatable) or --all");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let root = repository_root("run stet --headless")?;
    let config = load_config(&root)?;
    // A repository file changes what a run may do, so it is named; its absence is only `stet
    // doctor`'s to say. The repository's path is outside input (a clone's directory is named after
    // its URL).
    if config.repository_file != stet_engine::config::RepositoryFile::None {
        eprintln!(
            "stet: configuration: {}",
            stet_sanitize::display::escaped_invisible(&config.repository_file.to_string())
        );
    }
    let briefs = select_briefs(&root, &args, &config.inbox)?;
    let options = engine_options(root, config, &args)?;
    let delivery = if push { Delivery::Push } else { Delivery::Keep };
    let mut sink = JsonLines::new(std::io::stdout(), std::io::stderr().is_terminal());
    dispatch_and_watch(options, briefs, delivery, &mut sink).await
}

/// Assembles the engine (sweeping what earlier runs left), dispatches `briefs` and prints the events
/// to `sink` until every dispatch finished or a signal cancelled them.
pub(crate) async fn dispatch_and_watch(
    options: stet_engine::engine::EngineOptions,
    briefs: Vec<Brief>,
    delivery: Delivery,
    sink: &mut dyn EventSink,
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
    let code = watch(
        dispatcher.clone(),
        events,
        briefs,
        delivery,
        sink,
        interrupted,
    )
    .await;
    dispatcher.shutdown().await;
    Ok(ExitCode::from(code))
}

/// Dispatches `briefs`, hands each of `events` to `sink` until every accepted dispatch finished, and
/// returns the exit code: the highest code among the dispatches (0 when all are done), 2 when one
/// was refused, 3 when `interrupted` fired (everything is cancelled and torn down first). A sink
/// whose reader went away cancels every dispatch: nobody is watching.
async fn watch(
    handle: DispatchHandle,
    mut events: mpsc::Receiver<Event>,
    briefs: Vec<Brief>,
    delivery: Delivery,
    sink: &mut dyn EventSink,
    interrupted: impl Future<Output = ()>,
) -> u8 {
    let mut code = 0u8;
    let mut pending: BTreeSet<DispatchId> = BTreeSet::new();
    for brief in briefs {
        let id = brief.id.clone();
        match handle.dispatch(brief, delivery).await {
            Ok(dispatch) => {
                pending.insert(dispatch);
            }
            Err(error) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: brief {}: {}",
                    stet_sanitize::display::escaped_invisible(&id),
                    stet_sanitize::display::without_invisible(&error.to_string()).text
                );
                code = code.max(EXIT_USAGE);
            }
        }
    }
    let mut outcomes: BTreeMap<DispatchId, u8> = BTreeMap::new();
    let mut stopping = false;
    let mut writing = true;
    tokio::pin!(interrupted);
    let mut shutdown = None;
    while !pending.is_empty() {
        tokio::select! {
            () = &mut interrupted, if !stopping => {
                stopping = true;
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: interrupted; cancelling and tearing down every dispatch (interrupt again to exit at once)"
                );
                let handle = handle.clone();
                shutdown = Some(tokio::spawn(async move { handle.shutdown().await }));
            }
            event = events.recv() => {
                let Some(event) = event else { break };
                if let EventKind::Finished { exit_code, .. } = &event.kind {
                    pending.remove(&event.dispatch);
                    outcomes.insert(event.dispatch, *exit_code);
                }
                if writing && let Err(error) = sink.show(&event) {
                    // The reader went away: nobody is watching, so nothing should go on.
                    writing = false;
                    tracing::warn!(%error, "stdout closed; cancelling every dispatch");
                    if !stopping {
                        stopping = true;
                        let handle = handle.clone();
                        shutdown = Some(tokio::spawn(async move { handle.shutdown().await }));
                    }
                }
            }
        }
    }
    if let Some(shutdown) = shutdown {
        let _ = shutdown.await;
    }
    if stopping && writing {
        return EXIT_CANCELLED;
    }
    outcomes.values().fold(code, |worst, code| worst.max(*code))
}
