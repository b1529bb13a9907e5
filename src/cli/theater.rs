//! `stet` with no command: the theater over the inbox of the repository in the current directory.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use stet_engine::brief::Brief;
use stet_engine::config::RepositoryFile;
use stet_engine::dispatch::dispatcher::DispatchHandle;
use stet_engine::dispatch::order::Delivery;
use stet_protocol::event::DispatchId;
use stet_tui::engine::EngineHandle;

use super::EXIT_USAGE;
use super::args::DispatchArgs;
use super::session::{Session, engine_options, load_config, repository_root};
use super::terminal::{TerminalSession, on_a_terminal, terminal_input, tty_hung_up};

/// `stet` with no command: the terminal theater over the inbox of the repository in the current
/// directory. Dispatches wait for review; `p` pushes and opens the pull request.
pub(crate) async fn theater(args: DispatchArgs) -> anyhow::Result<ExitCode> {
    if !args.briefs.is_empty() || args.all {
        eprintln!(
            "stet: --brief and --all choose what --headless dispatches; the theater shows the whole inbox"
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    if !on_a_terminal() {
        eprintln!(
            "stet: the theater needs a terminal; without one use `stet --headless --brief ID` (or `stet demo --headless`)"
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let root = repository_root("run stet")?;
    let config = load_config(&root)?;
    let inbox = stet_engine::inbox::Inbox::load_within(
        &stet_engine::inbox::Inbox::default_dir(&root),
        &config.inbox,
    )?;
    let options = engine_options(root, config, &args)?;
    Ok(open_theater(options, &inbox).await?.code)
}

/// How a theater session ended.
pub(crate) struct TheaterEnd {
    pub(crate) code: ExitCode,
    /// Whether the theater was drawn and the terminal is still there to print on (false when the
    /// engine could not be assembled: that error was printed instead; false when the terminal went
    /// away).
    pub(crate) shown: bool,
}

/// Assembles the engine `options` describe (sweeping what earlier runs left, reported on stderr
/// before the screen is taken), then runs the theater over `inbox` on the terminal until the person
/// quits, a signal ends it or the terminal goes away, and gives the terminal back (unless it went
/// away: then nothing more is written to it, and the exit code is 3 once every dispatch has been
/// cancelled and torn down). Dispatches wait for review; `p` pushes.
pub(crate) async fn open_theater(
    options: stet_engine::engine::EngineOptions,
    inbox: &stet_engine::inbox::Inbox,
) -> anyhow::Result<TheaterEnd> {
    use stet_tui::event_loop::Exit;
    let repository = options.repository.clone();
    let history = super::history::past_runs(&options.state_dir);
    let state_dir = options.state_dir.clone();
    let inbox_limits = options.config.inbox;
    let configuration = configuration_of(&options.config.repository_file);
    let session = match Session::assemble(options).await? {
        Ok(session) => session,
        Err(code) => return Ok(TheaterEnd { code, shown: false }),
    };
    let Session {
        engine,
        interrupts,
        log_guard: _log_guard,
    } = session;
    let ceiling = engine.parts.settings.cost_ceiling_usd;
    // Read after the engine's sweep, which salvages what crashed runs left.
    let salvaged = super::salvaged::for_theater(&state_dir, &repository);
    let (dispatcher, events, _dispatcher_task) = engine.start();
    let mut app = stet_tui::app::App::new(inbox.entries(), chrono::Utc::now());
    app.set_theme(stet_tui::theme::Theme::from_env());
    app.set_cost_ceiling(ceiling);
    app.set_configuration(configuration);
    app.set_history(history);
    app.set_salvaged(salvaged);
    // Without a watch (no inotify left, say) the inbox is still shown, as it was read at the start.
    let (_inbox_watch, reloads) = match super::inbox_watch::watch(&repository, inbox_limits) {
        Ok((watch, reloads)) => (Some(watch), reloads),
        Err(error) => {
            tracing::warn!(%error, "the inbox is not watched: a restart shows briefs changed on disk");
            (None, tokio::sync::mpsc::channel(1).1)
        }
    };
    let mut session = TerminalSession::enter()?;
    let input = terminal_input()?;
    let exit = stet_tui::event_loop::run(
        &mut session.terminal,
        app,
        input,
        events,
        interrupts.into_stream(),
        reloads,
        Arc::new(Engine(dispatcher.clone())),
        repository,
    )
    .await;
    // A SIGHUP someone sent by hand leaves the terminal there: that one is given back as usual.
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if matches!(exit, Ok(Exit::HungUp | Exit::Interrupted { hung_up: true }))
        && tty_hung_up(&std::io::stdin(), Some(&now)).unwrap_or(true)
    {
        session.hang_up();
    }
    let terminal_there = !session.is_gone();
    drop(session);
    let code = match exit {
        Ok(Exit::Quit) => {
            dispatcher.shutdown().await;
            ExitCode::SUCCESS
        }
        Ok(Exit::HungUp) => {
            // The loop ended once every dispatch had torn down; this only confirms it.
            dispatcher.shutdown().await;
            tracing::info!("the terminal went away: every dispatch was cancelled and torn down");
            ExitCode::from(super::EXIT_CANCELLED)
        }
        Ok(Exit::Interrupted { .. }) => {
            tracing::warn!("interrupted again: exiting before every teardown finished");
            if terminal_there {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: interrupted again: exiting now; the next stet launch (or `stet sweep`) reclaims what is left"
                );
            }
            ExitCode::from(super::EXIT_CANCELLED)
        }
        Err(error) => {
            tracing::error!(%error, "the theater stopped: cancelling every dispatch");
            if terminal_there {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: {}; cancelling every dispatch and waiting for teardown",
                    super::session::shown_error(&error)
                );
            }
            dispatcher.shutdown().await;
            ExitCode::FAILURE
        }
    };
    Ok(TheaterEnd {
        code,
        shown: terminal_there,
    })
}

/// What the theater's status line says of the repository's configuration file; `None` when there is
/// none.
fn configuration_of(file: &RepositoryFile) -> Option<stet_tui::app::Configuration> {
    file.status().map(|text| stet_tui::app::Configuration {
        text,
        trusted: matches!(file, RepositoryFile::Trusted { .. }),
    })
}

/// The engine's handle as the theater asks it: dispatches wait for review.
struct Engine(DispatchHandle);

#[async_trait::async_trait]
impl EngineHandle for Engine {
    async fn dispatch(&self, brief: Brief) -> Result<DispatchId, String> {
        self.0
            .dispatch(brief, Delivery::Review)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    async fn cancel(&self, dispatch: DispatchId) -> Result<(), String> {
        self.0
            .cancel(dispatch)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    async fn approve(&self, dispatch: DispatchId) -> Result<(), String> {
        self.0
            .approve(dispatch)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    async fn discard(&self, dispatch: DispatchId) -> Result<(), String> {
        self.0
            .discard(dispatch)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    async fn patch(&self, dispatch: DispatchId) -> Result<String, String> {
        self.0
            .patch(dispatch)
            .await
            .map_err(|refusal| refusal.to_string())
    }

    async fn shutdown(&self) {
        self.0.shutdown().await;
    }

    async fn hang_up(&self) {
        self.0.shutdown_because("the terminal went away").await;
    }
}
