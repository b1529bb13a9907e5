//! One session of a dispatching command, assembled in one place: the async runtime, the signals, the
//! logs, the sanitizer and the engine the configuration and the flags describe.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use stet_engine::logging;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};
use stet_tui::event_loop::Interrupt;

use super::EXIT_USAGE;
use super::args::DispatchArgs;

/// Runs a dispatching command on a runtime with worker threads (git and the import run on the
/// blocking pool while events flow).
/// When the command is over, work still on the blocking pool (an import or a review gate a cancelled
/// dispatch no longer waits for; its teardown is done) is given this long before stet exits anyway.
pub(crate) const BLOCKING_WORK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) fn dispatch_runtime(
    command: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = runtime.block_on(command);
    runtime.shutdown_timeout(BLOCKING_WORK_GRACE);
    outcome
}

/// Runs an async command on a small runtime of its own.
pub(crate) fn block_on(
    command: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(command)
}

/// SIGINT, SIGTERM and SIGHUP, listened to from before the first dispatch starts, each told apart:
/// a second SIGINT/SIGTERM exits at once, a SIGHUP never does (a hangup may deliver several).
pub(crate) struct Interrupts {
    streams: Vec<(Interrupt, tokio::signal::unix::Signal)>,
}

impl Interrupts {
    pub(crate) fn install() -> anyhow::Result<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut streams = Vec::new();
        for (interrupt, kind) in [
            (Interrupt::Stop, SignalKind::interrupt()),
            (Interrupt::Stop, SignalKind::terminate()),
            (Interrupt::HangUp, SignalKind::hangup()),
        ] {
            streams.push((
                interrupt,
                signal(kind).context("installing the signal handlers")?,
            ));
        }
        Ok(Interrupts { streams })
    }

    /// Resolves at the next of the three signals, saying which kind it was.
    async fn next(&mut self) -> Interrupt {
        let waits = self.streams.iter_mut().map(|(interrupt, stream)| {
            Box::pin(async move {
                stream.recv().await;
                *interrupt
            })
        });
        futures_util::future::select_all(waits).await.0
    }

    /// One item per signal, for the theater's event loop.
    pub(crate) fn into_stream(self) -> impl futures_util::Stream<Item = Interrupt> + Unpin {
        Box::pin(futures_util::stream::unfold(
            self,
            |mut interrupts| async move {
                let interrupt = interrupts.next().await;
                Some((interrupt, interrupts))
            },
        ))
    }

    /// Watches for signals on its own task, so a consumer stuck writing to a slow reader never
    /// delays a cancel: the first signal of any kind cancels every dispatch (and resolves the
    /// returned future); a second SIGINT/SIGTERM exits at once with code 3 (the journal lets the next
    /// launch reclaim what is left). SIGHUPs after the first signal change nothing: the teardown
    /// goes on.
    pub(crate) fn watch(
        mut self,
        dispatcher: stet_engine::dispatch::dispatcher::DispatchHandle,
    ) -> impl Future<Output = ()> {
        let (first, fired) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let interrupt = self.next().await;
            tracing::info!(?interrupt, "signalled: cancelling every dispatch");
            let _ = first.send(());
            tokio::spawn(async move { dispatcher.shutdown().await });
            let mut stops = u32::from(interrupt == Interrupt::Stop);
            while stops < 2 {
                if self.next().await == Interrupt::Stop {
                    stops += 1;
                }
            }
            tracing::warn!("interrupted again: exiting before every teardown finished");
            let _ = writeln!(
                std::io::stderr(),
                "stet: interrupted again: exiting now; the next stet launch (or `stet sweep`) reclaims what is left"
            );
            std::process::exit(i32::from(super::EXIT_CANCELLED));
        });
        async move {
            if fired.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Logs go to files only; if the state directory is unusable the command still runs, and says so.
pub(crate) fn install_logging(handle: &SanitizerHandle) -> Option<logging::LogGuard> {
    let installed = stet_engine::state_dir::locate()
        .map_err(anyhow::Error::from)
        .and_then(|dir| {
            logging::install(&dir.join("logs"), handle.clone()).map_err(anyhow::Error::from)
        });
    match installed {
        Ok(guard) => Some(guard),
        Err(err) => {
            eprintln!("stet: warning: logging disabled: {err}");
            None
        }
    }
}

/// The root of the git repository the current directory is in; `what` says what to run from it.
pub(crate) fn repository_root(what: &str) -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let repository = git2::Repository::discover(&cwd).with_context(|| {
        format!(
            "{} is not inside a git repository: {what} from the repository the briefs are for",
            cwd.display()
        )
    })?;
    Ok(repository
        .workdir()
        .unwrap_or_else(|| repository.path())
        .to_owned())
}

/// The configuration for the repository at `root`: the user's, the repository's `stet.toml` (trusted
/// when the user's trust record holds its path and content) and the environment.
pub(crate) fn load_config(root: &std::path::Path) -> anyhow::Result<stet_engine::config::Config> {
    let trust =
        stet_engine::config::trust::TrustStore::in_state_dir(&stet_engine::state_dir::locate()?);
    Ok(stet_engine::config::Config::load(Some(root), &trust)?)
}

/// The engine for the repository at `root` as its configuration and the flags describe it: the
/// harness (from the harness registry), the sandbox image, the limits.
pub(crate) fn engine_options(
    root: PathBuf,
    config: stet_engine::config::Config,
    args: &DispatchArgs,
) -> anyhow::Result<stet_engine::engine::EngineOptions> {
    use stet_engine::engine::{EngineOptions, ImageChoice};
    let harness = stet_engine::harness::from_settings(config.harness.settings()?);
    let image = match &config.dispatch.image {
        Some(text) => ImageChoice::Configured(stet_engine::runtime::ImageRef::parse(text, false)?),
        None if harness.runs_in_offline_image() => ImageChoice::Offline,
        None => anyhow::bail!(
            "no sandbox image is configured for the {} harness: set [dispatch] image = \"<name>@sha256:<digest>\" (or a local image ID) in your configuration ({}), or {}=<reference> for one run; a repository's stet.toml may set it only once you run `stet trust` on it (see docs/agents.md)",
            harness.name(),
            stet_engine::config::user_file_shown(),
            stet_engine::config::ENV_IMAGE
        ),
    };
    Ok(EngineOptions {
        repository: root,
        state_dir: stet_engine::state_dir::prepare_default()?,
        timeout: args.timeout.unwrap_or(config.dispatch.timeout),
        cost_ceiling_usd: args.cost_ceiling.or(config.dispatch.cost_ceiling_usd),
        concurrency: config.dispatch.concurrency,
        network: network_policy(&config),
        image,
        harness,
        config,
    })
}

pub(crate) fn network_policy(
    config: &stet_engine::config::Config,
) -> stet_engine::runtime::NetworkPolicy {
    if config.dispatch.allow_network {
        stet_engine::runtime::NetworkPolicy::Bridge
    } else {
        stet_engine::runtime::NetworkPolicy::None
    }
}

/// The briefs named by `--brief` (inbox ids or paths) or `--all` (the inbox read within `limits`);
/// any brief that does not parse is an error naming its file.
pub(crate) fn select_briefs(
    root: &std::path::Path,
    args: &DispatchArgs,
    limits: &stet_engine::inbox::InboxLimits,
) -> anyhow::Result<Vec<stet_engine::brief::Brief>> {
    use stet_engine::brief::Brief;
    let inbox = stet_engine::inbox::Inbox::default_dir(root);
    let mut briefs = Vec::new();
    if args.all {
        let listed = stet_engine::inbox::Inbox::load_within(&inbox, limits)?;
        // Every invalid brief is named at once, so one run lists all there is to fix.
        let mut invalid = Vec::new();
        for entry in listed.entries() {
            match &entry.brief {
                Ok(brief) => briefs.push(brief.clone()),
                Err(error) => invalid.push(error.to_string()),
            }
        }
        if !invalid.is_empty() {
            anyhow::bail!(
                "--all: {} brief(s) of the inbox cannot be dispatched, so none is:\n  {}",
                invalid.len(),
                invalid.join("\n  ")
            );
        }
        if briefs.is_empty() {
            anyhow::bail!("--all: the inbox {} holds no briefs", inbox.display());
        }
        return Ok(briefs);
    }
    for name in &args.briefs {
        let is_path = name.contains('/') || name.ends_with(".toml");
        // A path is the person's to name; an id is read from the repository's inbox, which is
        // the repository's, so no link there is followed.
        let brief = if is_path {
            Brief::from_file(&PathBuf::from(name))?
        } else {
            stet_engine::inbox::Inbox::load_one(&inbox, name)?.brief?
        };
        briefs.push(brief);
    }
    Ok(briefs)
}

/// What a dispatching command runs on: the signals it listens to, the logs, and the engine.
pub(crate) struct Session {
    pub(crate) engine: stet_engine::engine::Engine,
    pub(crate) interrupts: Interrupts,
    pub(crate) log_guard: Option<logging::LogGuard>,
}

impl Session {
    /// Listens for signals from before anything starts, installs the logs, assembles the engine
    /// `options` describe and reports on stderr what its launch sweep reclaimed. An engine that
    /// cannot be assembled (no Docker, a bad configuration) is printed and answered with exit code 2.
    pub(crate) async fn assemble(
        options: stet_engine::engine::EngineOptions,
    ) -> anyhow::Result<Result<Session, ExitCode>> {
        let interrupts = Interrupts::install()?;
        let sanitizer = SanitizerHandle::new(TokenSanitizer::new()?);
        let log_guard = install_logging(&sanitizer);
        let engine = match stet_engine::engine::Engine::assemble(options, &sanitizer).await {
            Ok(engine) => engine,
            Err(error) => {
                let _ = writeln!(std::io::stderr(), "stet: {}", shown_error(&error));
                return Ok(Err(ExitCode::from(EXIT_USAGE)));
            }
        };
        if !engine.sweep.is_empty() {
            tracing::info!(report = ?engine.sweep, "launch sweep");
            let _ = write!(
                std::io::stderr(),
                "stet: swept what earlier runs left behind:\n{}",
                shown_error(&engine.sweep)
            );
        }
        Ok(Ok(Session {
            engine,
            interrupts,
            log_guard,
        }))
    }
}

/// An error as stet prints it on a terminal: its text, which may quote a brief, a repository, the
/// engine or a forge, under the display policy (escape sequences, C1 controls and invisible or
/// text-direction characters never reach the terminal; DESIGN §5 row 19).
pub(crate) fn shown_error(error: &dyn std::fmt::Display) -> String {
    stet_sanitize::display::without_invisible(&format!("{error:#}"))
        .text
        .into_owned()
}
