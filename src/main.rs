//! The `stet` command line: parses arguments and hands each command to the library.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::{Parser, Subcommand};

use stet::dispatch::branch::BranchValidator;
use stet::dispatch::credential::{CredentialProvider, LocalCredentialProvider};
use stet::dispatch::journal::Journal;
use stet::dispatch::order::Delivery;
use stet::dispatch::sanitize::{KnownValue, Redactor, SanitizerHandle, TokenSanitizer};
use stet::dispatch::service::DispatchService;
use stet::headless::Output;
use stet::logging;
use stet::runtime::docker::DockerRuntime;
use stet::ui::event_loop::Interrupt;

/// Exit code for usage and configuration errors (DESIGN §6).
const EXIT_USAGE: u8 = 2;

/// How much `stet sanitize` reads at a time.
const SANITIZE_CHUNK: usize = 128 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "stet",
    version,
    about = "Dispatch an AI coding agent into a locked-down container and watch it work",
    long_about = "Dispatch an AI coding agent into a locked-down container and watch it work.\n\n\
        stet keeps an inbox of briefs (.stet/briefs/*.toml). Dispatching one makes a private copy of the \
        code, runs the agent in a container with no network and no credentials of yours, shows the \
        sanitized transcript live, and then stet itself - never the container - pushes the branch and \
        opens the pull request.",
    after_help = "Exit codes:\n  0  done\n  1  failed\n  2  usage or configuration error\n  3  cancelled\n  \
        4  timed out\n  5  cost ceiling hit\n\nLogs: $XDG_STATE_HOME/stet/logs/ (filter with STET_LOG=debug)."
)]
struct Cli {
    /// Run without the terminal UI: dispatch the briefs given with --brief or --all and print the
    /// events as JSON Lines on stdout (human progress on stderr when it is a terminal).
    #[arg(long)]
    headless: bool,

    /// With --headless: push the result and open (or update) the pull request. Without it a run
    /// stops after collecting, keeping the commit at refs/stet/<dispatch id> and the diff in the run
    /// record.
    #[arg(long, requires = "headless")]
    push: bool,

    #[command(flatten)]
    dispatch: DispatchArgs,

    #[command(subcommand)]
    command: Option<Command>,
}

/// How briefs are dispatched (`--headless` and `stet demo`).
#[derive(Debug, Clone, clap::Args)]
struct DispatchArgs {
    /// A brief to dispatch: its id in the inbox (.stet/briefs/ID.toml) or a path to a brief file.
    /// Repeatable.
    #[arg(long = "brief", value_name = "ID|PATH")]
    briefs: Vec<String>,

    /// Dispatch every brief in the inbox.
    #[arg(long, conflicts_with = "briefs")]
    all: bool,

    /// Wall-clock limit on the agent's work, e.g. 90s, 20m, 1h (default: the configuration's, 30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<std::time::Duration>,

    /// End a dispatch once its model cost reaches this many US dollars.
    #[arg(long = "cost-ceiling", value_name = "USD", value_parser = parse_ceiling)]
    cost_ceiling: Option<f64>,
}

/// `90s`, `20m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((index, _)) => text.split_at(index),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 20m or 1h"))?;
    let seconds = match unit {
        "s" => value,
        "m" => value.saturating_mul(60),
        "h" => value.saturating_mul(3600),
        _ => return Err(format!("{text:?}: the unit must be s, m or h")),
    };
    if seconds == 0 {
        return Err("the timeout must be longer than zero".to_owned());
    }
    Ok(std::time::Duration::from_secs(seconds))
}

fn parse_ceiling(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!("{text:?} is not a positive number of US dollars")),
    }
}

/// The harnesses whose output `stet transcript` reads.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum HarnessName {
    /// The OpenHands V1 CLI, `--headless --json`.
    Openhands,
    /// `stet agent`, the scripted agent.
    Script,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole theater on a scratch repository: the local forge, the offline sandbox image and
    /// the scripted agent, with nothing to configure but Docker.
    #[command(
        long_about = "Run the whole theater on a scratch repository: the local forge, the offline sandbox \
            image and the scripted agent, with nothing to configure but Docker.\n\n\
            Creates (or recreates) a small program with two briefs under $XDG_STATE_HOME/stet/demo (or \
            --dir) and builds the offline sandbox image from this stet binary if it is missing. On a \
            terminal it then opens the theater on the scratch repository's inbox: Enter dispatches a \
            brief, and once the run waits for review p pushes it and opens the pull request. Otherwise \
            (or with --headless, --brief or --all) it dispatches the first brief (or those chosen) and \
            pushes: a container with no network runs the scripted agent, which edits several files, runs \
            the program's checks and prints a planted fake secret that shows up redacted; stet then \
            commits the result, pushes the branch to the scratch forge and opens a pull request there \
            (see `stet reviews`). Progress is printed for a person; --headless prints the JSON Lines \
            events instead.",
        after_help = "Examples:\n  stet demo\n  stet demo --pace 0 --headless\n  stet demo --all --dir /tmp/stet-demo"
    )]
    Demo {
        /// Where the scratch repository goes (default $XDG_STATE_HOME/stet/demo).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// How fast the scripted agent works: pauses are multiplied by this (0 = no pauses).
        #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
        pace: f64,
        /// Dispatch without the theater and print the events as JSON Lines instead of progress
        /// for a person.
        #[arg(long)]
        headless: bool,
        #[command(flatten)]
        dispatch: DispatchArgs,
    },

    /// The scripted agent: acts out a scenario inside the sandbox (used by `stet demo` and the tests).
    #[command(hide = true)]
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },

    /// Copy standard input to standard output with secrets replaced by [REDACTED:<kind>].
    #[command(
        long_about = "Copy standard input to standard output with secrets replaced by [REDACTED:<kind>].\n\n\
            Recognises tokens by shape (GitHub, OpenAI, Anthropic, Slack, AWS, GitLab, npm, Hugging Face, \
            Stripe, Google, JWTs), PEM private keys, Authorization headers, password lines, curl -u, and \
            credentials in URLs. Streams in constant memory: a secret split across reads is still caught, \
            and bytes that are not UTF-8 pass through unchanged.",
        after_help = "Examples:\n  \
            journalctl -u ci | stet sanitize > ci.log\n  \
            stet sanitize --known-value-env GITHUB_TOKEN < build.log > build.clean.log"
    )]
    Sanitize {
        /// Also mask the exact value of this environment variable, and its base64, URL and JSON
        /// encodings. Repeatable.
        #[arg(long = "known-value-env", value_name = "NAME")]
        known_value_env: Vec<String>,

        /// Print how many bytes were read and how many secrets were masked to standard error.
        #[arg(long)]
        stats: bool,
    },

    /// Check a branch name against stet's rules; print it if valid (exit 0), else the reason (exit 1).
    #[command(
        long_about = "Check a branch name against stet's rules; print it if valid (exit 0), else the reason \
            (exit 1).\n\nThe rules are git's own ref-format rules plus stricter ones: no traversal, no \
            whitespace or control characters, ASCII only, not a protected name (main, master, develop, \
            trunk, HEAD), not the base branch, and nothing that reads like a ref or a commit SHA.",
        after_help = "Examples:\n  stet check-branch stet/fix-login --base main\n  stet check-branch '../evil'"
    )]
    CheckBranch {
        /// The branch name to check.
        name: String,
        /// The base branch the new branch must differ from.
        #[arg(long, value_name = "BASE")]
        base: Option<String>,
    },

    /// Reclaim what crashed dispatches left behind: containers, workspaces, outputs, credentials.
    #[command(
        long_about = "Reclaim what crashed dispatches left behind: containers, workspaces, outputs, credentials.\n\n\
            Every resource a dispatch creates is journaled in $XDG_STATE_HOME/stet/journal before it exists. \
            A sweep cleans up the records whose stet process is gone, and this installation's sandbox \
            containers that belong to no live dispatch. Live dispatches of other stet processes are never \
            touched. Prints what it did; exits 1 if something could not be cleaned up (it stays journaled)."
    )]
    Sweep,

    /// Replay a captured harness output as stet's event lines (JSON Lines on stdout).
    #[command(
        long_about = "Replay a captured harness output as stet's event lines (JSON Lines on stdout).\n\n\
            Reads what an agent program printed (a file, or - for standard input), frames, parses and \
            sanitizes it exactly as a live dispatch does, and prints one event per transcript item, the \
            final usage when --outputs names the run's outputs directory, and a `finished` event with the \
            outcome stet would draw from this output alone. Exits 0 when that outcome is done, 1 when it \
            is failed, 2 when the capture cannot be read. Use it to debug a harness, or to see how a \
            new harness version's output reads.",
        after_help = "Examples:\n  stet transcript run.stdout\n  openhands --headless --json -t '...' | stet transcript -"
    )]
    Transcript {
        /// The captured output, or - for standard input.
        path: PathBuf,
        /// Which harness printed it.
        #[arg(long, value_enum, default_value = "openhands")]
        harness: HarnessName,
        /// The run's outputs directory, for the final usage the harness recorded there.
        #[arg(long, value_name = "DIR")]
        outputs: Option<PathBuf>,
        /// The brief id the events carry.
        #[arg(long, value_name = "ID", default_value = "replay")]
        brief: String,
    },

    /// List the local forge's pull requests (review records), or show one.
    #[command(
        long_about = "List the local forge's pull requests (review records), or show one.\n\n\
            With the local forge (the default, no account needed) a dispatch's branch is pushed into a \
            repository on disk and its pull request is recorded in $XDG_STATE_HOME/stet/reviews/<n>.json. \
            Without a number this lists them; with one it prints its title, branches and body.",
        after_help = "Examples:\n  stet reviews\n  stet reviews 3"
    )]
    Reviews {
        /// The review to show.
        number: Option<u64>,
    },

    /// Let a repository's stet.toml set machine settings, until its content changes.
    #[command(
        long_about = "Let a repository's stet.toml set machine settings, until its content changes.\n\n\
            A repository's own stet.toml is untrusted: it may only tighten project settings (add protected \
            paths; lower limits, timeouts and ceilings; keep the network off). Machine settings - anything \
            naming a command, an environment variable, a URL, a path outside the repository, an image, a \
            credential provider, the network, a model, a price table or a scenario - come from your own \
            configuration ($XDG_CONFIG_HOME/stet/config.toml), the environment or flags. `stet trust` records \
            the file's path and the SHA-256 of its content in $XDG_STATE_HOME/stet/trust/trusted.json; from \
            then on that file, at that path, may set what your own configuration may (its protected paths \
            still only add), until one byte of it changes. A copy of it elsewhere is not trusted. It prints \
            what the trust allows.",
        after_help = "Examples:\n  stet trust\n  stet trust ~/src/app\n  stet trust --list\n  stet trust --revoke"
    )]
    Trust {
        /// The repository (its directory or its stet.toml); default: the repository of the current
        /// directory.
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
        /// Take the trust back: the file may only tighten project settings again.
        #[arg(long, conflicts_with = "list")]
        revoke: bool,
        /// List the trusted files, and whether each still holds the content that was trusted.
        #[arg(long, conflicts_with = "path")]
        list: bool,
    },

    /// Check that this machine can run stet's sandboxes, and say what to fix.
    #[command(
        long_about = "Check that this machine can run stet's sandboxes, and say what to fix.\n\n\
            Checks that the Docker engine answers, that it enforces the memory, swap, pids and cpu limits a \
            sandbox relies on, whether the offline sandbox image for this stet binary is present, and the \
            free space of the state directory. Exits 1 if a check failed."
    )]
    Doctor,

    /// Keep a sandbox container alive until it is stopped (the container's main process).
    #[command(hide = true)]
    SandboxIdle {
        /// Also relay the model port on the container's loopback (127.0.0.1:4141) to the gateway's
        /// unix socket at this path.
        #[arg(long, value_name = "SOCKET")]
        relay: Option<PathBuf>,
    },

    /// Manage the offline sandbox image.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },

    /// Print, as one JSON object, what this sandbox allows; runs inside the sandbox image.
    #[command(
        long_about = "Print, as one JSON object, what this sandbox allows; runs inside the sandbox image.\n\n\
            Always reports uid, gid, capabilities, which of /, /tmp, $HOME and /workspace are writable, the \
            mounts and whether a Docker socket is present. The options add active checks. It never connects \
            anywhere not given with --connect. With --allocate-mb past the memory limit the process is \
            killed (exit 137): that is the answer.",
        after_help = "Examples:\n  \
            stet probe --connect 10.0.0.1:443 --fork-up-to 64\n  \
            SECRET=... stet probe --find-env-in-cmdlines SECRET"
    )]
    Probe {
        /// Try a TCP connection to this IP:PORT (2 s timeout). Repeatable.
        #[arg(long, value_name = "IP:PORT")]
        connect: Vec<std::net::SocketAddr>,

        /// Start up to N child processes, hold them all, and report how many started.
        #[arg(long, value_name = "N")]
        fork_up_to: Option<u32>,

        /// Allocate and write N MiB, printing progress to standard error.
        #[arg(long, value_name = "N")]
        allocate_mb: Option<u64>,

        /// Write N MiB into /workspace (files of --fill-piece-mb each), flushed as it goes.
        #[arg(long, value_name = "N")]
        fill_mb: Option<u64>,

        /// The size of each file --fill-mb writes.
        #[arg(long, value_name = "N", default_value_t = 16)]
        fill_piece_mb: u64,

        /// Report which processes carry the value of the environment variable NAME in their command
        /// line (the value is read from the environment, never passed as an argument). Repeatable.
        #[arg(long = "find-env-in-cmdlines", value_name = "NAME")]
        find_env_in_cmdlines: Vec<String>,

        /// Report the probe's whole environment.
        #[arg(long)]
        environment: bool,

        /// Block until standard input closes (the children of --fork-up-to run this).
        #[arg(
            long,
            hide = true,
            conflicts_with_all = ["connect", "fork_up_to", "allocate_mb", "find_env_in_cmdlines"]
        )]
        hold: bool,

        /// Write one line of N MiB of bytes that are not UTF-8 to standard output, then stop: checks
        /// that the sandbox's output path bounds what it buffers.
        #[arg(
            long,
            hide = true,
            value_name = "N",
            conflicts_with_all = ["connect", "fork_up_to", "allocate_mb", "find_env_in_cmdlines", "hold"]
        )]
        emit_line_mb: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Act out a scenario, printing the agent's records as JSON Lines.
    Run {
        #[arg(long, value_name = "PATH")]
        scenario: PathBuf,
        #[arg(long, value_name = "PATH")]
        instructions: PathBuf,
        #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
        pace: f64,
        #[arg(long, value_name = "DIR", default_value = stet::runtime::WORKSPACE_MOUNT)]
        workspace: PathBuf,
    },
    /// Run a checks file (the demo program's tests); exit 0 when every check passes.
    Check {
        file: PathBuf,
        #[arg(long, value_name = "DIR", default_value = ".")]
        root: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build the sandbox image from a stet executable and load it into Docker; print its ID and tag.
    #[command(
        long_about = "Build the sandbox image from a stet executable and load it into Docker; print its \
            ID and tag.\n\n\
            The image holds the executable at /usr/local/bin/stet, the shared libraries ldd names, and a \
            minimal /etc/passwd with the sandbox user 65532. No registry is needed. It is tagged \
            stet-sandbox:<12 hex of the executable's sha256>; building again from the same executable \
            reuses it.",
        after_help = "Exit codes:\n  0  built or reused\n  2  Docker unreachable, or the image could not be built"
    )]
    BuildLocal {
        /// The stet executable to package (default: this one).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    keep_the_owners_access();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // The terminal may be gone (a hung-up session): a failed write must not panic.
            let _ = writeln!(std::io::stderr(), "stet: {err:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Takes the owner's bits out of the umask (keeping what it withholds from group and others): a
/// umask such as 0277 would have git make directories stet itself cannot write into. What stet
/// keeps private it makes 0600/0700 whatever the umask.
fn keep_the_owners_access() {
    use rustix::fs::Mode;
    let inherited = rustix::process::umask(Mode::from_raw_mode(0o077));
    rustix::process::umask(Mode::from_raw_mode(inherited.as_raw_mode() & 0o077));
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::CheckBranch { name, base }) => Ok(check_branch(&name, base.as_deref())),
        Some(Command::Sanitize {
            known_value_env,
            stats,
        }) => sanitize(&known_value_env, stats),
        Some(Command::Image {
            command: ImageCommand::BuildLocal { binary },
        }) => block_on(image_build_local(binary)),
        Some(Command::Sweep) => block_on(sweep()),
        Some(Command::Doctor) => block_on(doctor()),
        Some(Command::Trust { path, revoke, list }) => trust(path, revoke, list),
        Some(Command::Reviews { number }) => reviews(number),
        Some(Command::Transcript {
            path,
            harness,
            outputs,
            brief,
        }) => transcript(&path, harness, outputs.as_deref(), brief),
        Some(Command::Demo {
            dir,
            pace,
            headless,
            dispatch,
        }) => dispatch_runtime(demo(dir, pace, headless || cli.headless, dispatch)),
        Some(Command::Agent { command }) => agent(command),
        Some(Command::SandboxIdle { relay }) => block_on(sandbox_idle(relay)),
        Some(Command::Probe {
            connect,
            fork_up_to,
            allocate_mb,
            fill_mb,
            fill_piece_mb,
            find_env_in_cmdlines,
            environment,
            hold,
            emit_line_mb,
        }) => {
            if hold {
                stet::probe::hold(&mut std::io::stdin().lock())?;
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(megabytes) = emit_line_mb {
                stet::probe::emit_line(megabytes, &mut std::io::stdout().lock())?;
                return Ok(ExitCode::SUCCESS);
            }
            let report = stet::probe::run(&stet::probe::ProbeRequest {
                connect,
                fork_up_to,
                allocate_mb,
                fill_mb,
                fill_piece_mb,
                find_env_in_cmdlines,
                environment,
            })?;
            stet::probe::write_report(&report, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        None if cli.headless => dispatch_runtime(headless(cli.dispatch, cli.push)),
        None => dispatch_runtime(theater(cli.dispatch)),
    }
}

/// Runs a dispatching command on a runtime with worker threads (git and the import run on the
/// blocking pool while events flow).
/// When the command is over, work still on the blocking pool (an import or a review gate a cancelled
/// dispatch no longer waits for; its teardown is done) is given this long before stet exits anyway.
const BLOCKING_WORK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

fn dispatch_runtime(
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

/// SIGINT, SIGTERM and SIGHUP, listened to from before the first dispatch starts, each told apart:
/// a second SIGINT/SIGTERM exits at once, a SIGHUP never does (a hangup may deliver several).
struct Interrupts {
    streams: Vec<(Interrupt, tokio::signal::unix::Signal)>,
}

impl Interrupts {
    fn install() -> anyhow::Result<Interrupts> {
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
    fn into_stream(self) -> impl futures_util::Stream<Item = Interrupt> + Unpin {
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
    fn watch(
        mut self,
        dispatcher: stet::dispatch::dispatcher::DispatchHandle,
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
            std::process::exit(i32::from(stet::headless::EXIT_CANCELLED));
        });
        async move {
            if fired.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// `stet --headless`: dispatches briefs of the repository in the current directory.
async fn headless(args: DispatchArgs, push: bool) -> anyhow::Result<ExitCode> {
    if args.briefs.is_empty() && !args.all {
        eprintln!("stet: --headless needs --brief ID|PATH (repeatable) or --all");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let root = repository_root("run stet --headless")?;
    let config = load_config(&root)?;
    eprintln!("stet: configuration: {}", config.repository_file);
    let briefs = select_briefs(&root, &args)?;
    let options = engine_options(root, config, &args)?;
    let delivery = if push { Delivery::Push } else { Delivery::Keep };
    let output = Output::JsonLines {
        progress: std::io::stderr().is_terminal(),
    };
    dispatch_and_watch(options, briefs, delivery, output).await
}

/// The root of the git repository the current directory is in; `what` says what to run from it.
fn repository_root(what: &str) -> anyhow::Result<PathBuf> {
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
fn load_config(root: &std::path::Path) -> anyhow::Result<stet::config::Config> {
    let trust = stet::config::trust::TrustStore::in_state_dir(&stet::state_dir::locate()?);
    Ok(stet::config::Config::load(Some(root), &trust)?)
}

/// The engine for the repository at `root` as its configuration and the flags describe it: the
/// harness, the sandbox image, the limits.
fn engine_options(
    root: PathBuf,
    config: stet::config::Config,
    args: &DispatchArgs,
) -> anyhow::Result<stet::engine::EngineOptions> {
    use stet::engine::{EngineOptions, ImageChoice};
    let harness = harness_from_config(&config)?;
    let image = match &config.dispatch.image {
        Some(text) => ImageChoice::Configured(stet::runtime::ImageRef::parse(text, false)?),
        None if harness.name() == "script" => ImageChoice::Offline,
        None => anyhow::bail!(
            "no sandbox image is configured for the {} harness: set [dispatch] image = \"<name>@sha256:<digest>\" in stet.toml (see docker/dispatch/README.md)",
            harness.name()
        ),
    };
    Ok(EngineOptions {
        repository: root,
        state_dir: stet::state_dir::prepare_default()?,
        timeout: args.timeout.unwrap_or(config.dispatch.timeout),
        cost_ceiling_usd: args.cost_ceiling.or(config.dispatch.cost_ceiling_usd),
        concurrency: config.dispatch.concurrency,
        network: network_policy(&config),
        image,
        harness,
        config,
    })
}

/// `stet` with no command: the terminal theater over the inbox of the repository in the current
/// directory. Dispatches wait for review; `p` pushes and opens the pull request.
async fn theater(args: DispatchArgs) -> anyhow::Result<ExitCode> {
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
    let inbox = stet::inbox::Inbox::load(&stet::inbox::Inbox::default_dir(&root))?;
    let options = engine_options(root, config, &args)?;
    Ok(open_theater(options, &inbox).await?.code)
}

/// Whether standard input and standard output are both a terminal, as the theater needs.
fn on_a_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// How a theater session ended.
struct TheaterEnd {
    code: ExitCode,
    /// Whether the theater was drawn and the terminal is still there to print on (false when the
    /// engine could not be assembled: that error was printed instead; false when the terminal went
    /// away).
    shown: bool,
}

/// Assembles the engine `options` describe (sweeping what earlier runs left, reported on stderr
/// before the screen is taken), then runs the theater over `inbox` on the terminal until the person
/// quits, a signal ends it or the terminal goes away, and gives the terminal back (unless it went
/// away: then nothing more is written to it, and the exit code is 3 once every dispatch has been
/// cancelled and torn down). Dispatches wait for review; `p` pushes.
async fn open_theater(
    options: stet::engine::EngineOptions,
    inbox: &stet::inbox::Inbox,
) -> anyhow::Result<TheaterEnd> {
    use stet::ui::event_loop::Exit;
    let directories = stet::ui::event_loop::Directories {
        runs: options.state_dir.join(stet::dispatch::record::RUNS_DIR),
        inbox: stet::inbox::Inbox::default_dir(&options.repository),
    };
    let configuration = stet::ui::app::Configuration::of(&options.config.repository_file);
    let interrupts = Interrupts::install()?;
    let sanitizer = SanitizerHandle::new(TokenSanitizer::new()?);
    let _log_guard = install_logging(&sanitizer);
    let engine = match stet::engine::Engine::assemble(options, &sanitizer).await {
        Ok(engine) => engine,
        Err(error) => {
            eprintln!("stet: {error}");
            return Ok(TheaterEnd {
                code: ExitCode::from(EXIT_USAGE),
                shown: false,
            });
        }
    };
    if !engine.sweep.is_empty() {
        tracing::info!(report = ?engine.sweep, "launch sweep");
        eprint!(
            "stet: swept what earlier runs left behind:\n{}",
            engine.sweep
        );
    }
    let ceiling = engine.parts.settings.cost_ceiling_usd;
    let (dispatcher, events, _dispatcher_task) = engine.start();
    let mut app = stet::ui::app::App::new(inbox.entries(), chrono::Utc::now());
    app.set_theme(stet::ui::theme::Theme::from_env());
    app.set_cost_ceiling(ceiling);
    app.set_configuration(configuration);
    let mut session = TerminalSession::enter()?;
    let input = terminal_input()?;
    let exit = stet::ui::event_loop::run(
        &mut session.terminal,
        app,
        input,
        events,
        interrupts.into_stream(),
        dispatcher.clone(),
        directories,
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
            ExitCode::from(stet::headless::EXIT_CANCELLED)
        }
        Ok(Exit::Interrupted { .. }) => {
            tracing::warn!("interrupted again: exiting before every teardown finished");
            if terminal_there {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: interrupted again: exiting now; the next stet launch (or `stet sweep`) reclaims what is left"
                );
            }
            ExitCode::from(stet::headless::EXIT_CANCELLED)
        }
        Err(error) => {
            tracing::error!(%error, "the theater stopped: cancelling every dispatch");
            if terminal_there {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: {error}; cancelling every dispatch and waiting for teardown"
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

/// The terminal in raw mode on the alternate screen, given back as it was when this is dropped (on
/// return, on error, and while a panic on this thread unwinds) — unless it went away meanwhile, when
/// nothing more is written to it. A panic hook installed before the terminal is touched restores it
/// too, before the panic message is printed.
struct TerminalSession {
    terminal: ratatui::Terminal<ratatui::backend::CrosstermBackend<TtyWriter>>,
    /// Set once the terminal is known to be gone: by a write that failed so, or by [`Self::hang_up`].
    gone: Arc<AtomicBool>,
}

impl TerminalSession {
    fn enter() -> anyhow::Result<TerminalSession> {
        let gone = Arc::new(AtomicBool::new(false));
        install_restoring_panic_hook(Arc::clone(&gone));
        crossterm::terminal::enable_raw_mode().context("putting the terminal in raw mode")?;
        let entered = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::event::EnableMouseCapture,
            crossterm::cursor::Hide
        )
        .context("switching to the alternate screen")
        .and_then(|()| TtyWriter::new(Arc::clone(&gone)))
        .and_then(|writer| {
            ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(writer))
                .context("measuring the terminal")
        });
        match entered {
            Ok(terminal) => Ok(TerminalSession { terminal, gone }),
            Err(error) => {
                restore_terminal(&gone);
                Err(error)
            }
        }
    }

    /// The terminal went away: nothing more is written to it, not even what restores it.
    fn hang_up(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        restore_terminal(&self.gone);
    }
}

/// The terminal's keys, mouse and resizes, ending with an EIO error once the terminal hangs up.
/// crossterm's reader does not notice a tty that hung up (it reads it again and again:
/// crossterm-rs/crossterm#793), so the tty itself is watched as well.
fn terminal_input() -> anyhow::Result<
    impl futures_util::Stream<Item = std::io::Result<crossterm::event::Event>> + Unpin,
> {
    use futures_util::StreamExt;
    let hangup = futures_util::stream::once(stdin_hangup()?).map(Err);
    Ok(futures_util::stream::select(
        crossterm::event::EventStream::new(),
        Box::pin(hangup),
    ))
}

/// Resolves, with an EIO error, once the terminal on standard input hangs up: a thread of its own
/// waits for it in poll(2) ([`tty_hung_up`]).
fn stdin_hangup() -> anyhow::Result<impl Future<Output = std::io::Error>> {
    let tty = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("watching the terminal for a hangup")?;
    let (hung_up, told) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("stet-hangup".to_owned())
        .spawn(move || {
            loop {
                match tty_hung_up(&tty, None) {
                    Ok(true) => {
                        let _ = hung_up.send(());
                        return;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "cannot watch the terminal for a hangup");
                        return;
                    }
                }
            }
        })
        .context("watching the terminal for a hangup")?;
    Ok(async move {
        if told.await.is_err() {
            // Not watched after all (the warning is in the log): never a hangup from here.
            std::future::pending::<()>().await;
        }
        std::io::Error::from(rustix::io::Errno::IO)
    })
}

/// Whether the terminal `tty` has hung up, waiting at most `timeout` for it (`None`: until it
/// does). poll(2) is asked for no event at all, so only the hangup (or error) condition the kernel
/// always reports wakes it.
fn tty_hung_up(
    tty: &impl AsFd,
    timeout: Option<&rustix::event::Timespec>,
) -> rustix::io::Result<bool> {
    use rustix::event::{PollFd, PollFlags};
    loop {
        let mut watched = [PollFd::new(tty, PollFlags::empty())];
        match rustix::event::poll(&mut watched, timeout) {
            Ok(_) => {
                let gone = PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL;
                return Ok(watched[0].revents().intersects(gone));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error),
        }
    }
}

/// Where the theater draws: standard output's file, with what is drawn held until the frame is
/// flushed (no buffer of std's that would still try to write it at exit). A flush that finds the
/// terminal gone ([`stet::ui::event_loop::terminal_gone`]) says so (the event loop then hangs up)
/// and marks it gone; from then on whatever is written is dropped, so nothing — the cursor ratatui
/// shows again when dropped included — reaches a dead terminal or fails there.
struct TtyWriter {
    file: std::fs::File,
    frame: Vec<u8>,
    gone: Arc<AtomicBool>,
}

impl TtyWriter {
    fn new(gone: Arc<AtomicBool>) -> anyhow::Result<TtyWriter> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .context("opening the terminal for drawing")?;
        Ok(TtyWriter {
            file: std::fs::File::from(fd),
            frame: Vec::new(),
            gone,
        })
    }
}

impl Write for TtyWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if !self.gone.load(Ordering::SeqCst) {
            self.frame.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let frame = std::mem::take(&mut self.frame);
        if self.gone.load(Ordering::SeqCst) {
            return Ok(());
        }
        let written = self.file.write_all(&frame).and_then(|()| self.file.flush());
        if let Err(error) = &written
            && stet::ui::event_loop::terminal_gone(error)
        {
            self.gone.store(true, Ordering::SeqCst);
        }
        written
    }
}

/// Leaves raw mode and the alternate screen, unless the terminal is `gone`; safe to call more than
/// once.
fn restore_terminal(gone: &AtomicBool) {
    if gone.load(Ordering::SeqCst) {
        return;
    }
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::event::DisableMouseCapture,
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

/// A panic on the thread that draws restores the terminal before the message is printed. A panic
/// on another thread (an engine task; the dispatcher turns it into a failed dispatch), or any panic
/// once the terminal is `gone`, goes to the log only, so it never scribbles over the theater nor
/// writes to a terminal that went away.
fn install_restoring_panic_hook(gone: Arc<AtomicBool>) {
    let ui_thread = std::thread::current().id();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == ui_thread && !gone.load(Ordering::SeqCst) {
            restore_terminal(&gone);
            previous(info);
        } else {
            tracing::error!(panic = %info, "panicked");
        }
    }));
}

/// `stet demo`: the scratch repository, the offline image, the scripted agent and the local forge.
/// On a terminal, without `--headless`, `--brief` or `--all`, it opens the theater over the scratch
/// repository's inbox and dispatches nothing by itself; otherwise it dispatches the first brief (or
/// those chosen) and pushes, printing progress for a person or the JSON Lines events.
async fn demo(
    dir: Option<PathBuf>,
    pace: f64,
    headless: bool,
    args: DispatchArgs,
) -> anyhow::Result<ExitCode> {
    use stet::engine::{EngineOptions, ImageChoice};
    use stet::harness::script::{ScenarioSource, ScriptHarness};
    if !(pace.is_finite() && (0.0..=stet::agent::MAX_PACE).contains(&pace)) {
        eprintln!(
            "stet: --pace {pace} is out of range (0 to {})",
            stet::agent::MAX_PACE
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let state_dir = stet::state_dir::prepare_default()?;
    let dir = dir.unwrap_or_else(|| state_dir.join("demo"));
    let setup = stet::demo::prepare(&dir)?;
    // The scratch forge was made anew: pull requests of an earlier demo refer to branches it no
    // longer holds.
    stet::forge::local::LocalForge::new(setup.remote.clone(), &state_dir).close_open_reviews()?;
    // Only the demo's own configuration: nothing the user configured changes what the demo does.
    // stet wrote that file itself, so it is trusted: `stet` run in the scratch repository reads it
    // as the demo does, until its content changes.
    let written = stet::config::repository::read(&setup.repo)?
        .context("the demo's scratch repository has no stet.toml")?;
    stet::config::trust::TrustStore::in_state_dir(&state_dir)
        .trust(&written.path, &written.hash)?;
    let mut config = stet::config::Config::from_files(&[stet::config::ConfigFile::new(
        written.path,
        written.text,
        stet::config::FileRole::TrustedRepository,
    )])?;
    // The demo's own deterministic model on loopback, behind the real gateway: the agent's asks go
    // through the relay and the gateway meters them, with no account anywhere.
    let model = stet::scripted_model::ScriptedModel::serve(std::net::SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        0,
    )))
    .await
    .context("starting the demo's scripted model")?;
    config.model.base_url = Some(model.base_url());
    let where_it_is = format!(
        "stet demo: scratch repository {} (forge: {})",
        setup.repo.display(),
        setup.remote.display()
    );
    let closing_hint = format!(
        "see the pull request with `stet reviews`; the run records are under {}/runs",
        state_dir.display()
    );
    let options = EngineOptions {
        repository: setup.repo.clone(),
        state_dir,
        timeout: args.timeout.unwrap_or(config.dispatch.timeout),
        cost_ceiling_usd: args.cost_ceiling.or(config.dispatch.cost_ceiling_usd),
        concurrency: config.dispatch.concurrency,
        network: stet::runtime::NetworkPolicy::None,
        image: ImageChoice::Offline,
        harness: Arc::new(ScriptHarness::new(ScenarioSource::Demo, pace)),
        config,
    };
    if !headless && args.briefs.is_empty() && !args.all && on_a_terminal() {
        let inbox = stet::inbox::Inbox::load(&stet::inbox::Inbox::default_dir(&setup.repo))?;
        // Nothing goes to stdout while the theater owns the screen; the hints come after it (not
        // at all when the terminal hung up).
        let end = open_theater(options, &inbox).await?;
        model.shutdown().await;
        if end.shown {
            let _ = writeln!(std::io::stdout(), "{where_it_is}\n{closing_hint}");
        }
        return Ok(end.code);
    }
    let briefs = select_briefs(
        &setup.repo,
        &DispatchArgs {
            all: args.all,
            briefs: if args.briefs.is_empty() && !args.all {
                setup
                    .briefs
                    .first()
                    .map(|path| vec![path.display().to_string()])
                    .unwrap_or_default()
            } else {
                args.briefs.clone()
            },
            ..args.clone()
        },
    )?;
    let output = if headless {
        Output::JsonLines {
            progress: std::io::stderr().is_terminal(),
        }
    } else {
        let _ = writeln!(std::io::stdout(), "{where_it_is}");
        Output::Human
    };
    let code = dispatch_and_watch(options, briefs, Delivery::Push, output).await?;
    if !headless {
        // After a run whose terminal hung up, there is nobody to tell.
        let _ = writeln!(std::io::stdout(), "{closing_hint}");
    }
    model.shutdown().await;
    Ok(code)
}

/// Assembles the engine (sweeping what earlier runs left), dispatches `briefs` and prints the events
/// until every dispatch finished or a signal cancelled them.
async fn dispatch_and_watch(
    options: stet::engine::EngineOptions,
    briefs: Vec<stet::brief::Brief>,
    delivery: Delivery,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let interrupts = Interrupts::install()?;
    let handle = SanitizerHandle::new(TokenSanitizer::new()?);
    let _log_guard = install_logging(&handle);
    let engine = match stet::engine::Engine::assemble(options, &handle).await {
        Ok(engine) => engine,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "stet: {error}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    if !engine.sweep.is_empty() {
        tracing::info!(report = ?engine.sweep, "launch sweep");
        let _ = write!(
            std::io::stderr(),
            "stet: swept what earlier runs left behind:\n{}",
            engine.sweep
        );
    }
    // The dispatcher task ends with the runtime: the signal watcher keeps a handle to it.
    let (dispatcher, events, _dispatcher_task) = engine.start();
    let interrupted = interrupts.watch(dispatcher.clone());
    let mut stdout = std::io::stdout().lock();
    let code = stet::headless::run(
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

/// The briefs named by `--brief` (inbox ids or paths) or `--all`; any brief that does not parse is
/// an error naming its file.
fn select_briefs(
    root: &std::path::Path,
    args: &DispatchArgs,
) -> anyhow::Result<Vec<stet::brief::Brief>> {
    use stet::brief::Brief;
    let inbox = stet::inbox::Inbox::default_dir(root);
    let mut briefs = Vec::new();
    if args.all {
        let listed = stet::inbox::Inbox::load(&inbox)?;
        for entry in listed.entries() {
            match &entry.brief {
                Ok(brief) => briefs.push(brief.clone()),
                Err(error) => anyhow::bail!("{error}"),
            }
        }
        if briefs.is_empty() {
            anyhow::bail!("--all: the inbox {} holds no briefs", inbox.display());
        }
        return Ok(briefs);
    }
    for name in &args.briefs {
        let is_path = name.contains('/') || name.ends_with(".toml");
        let path = if is_path {
            PathBuf::from(name)
        } else {
            inbox.join(format!("{name}.toml"))
        };
        briefs.push(Brief::from_file(&path)?);
    }
    Ok(briefs)
}

fn network_policy(config: &stet::config::Config) -> stet::runtime::NetworkPolicy {
    if config.dispatch.allow_network {
        stet::runtime::NetworkPolicy::Bridge
    } else {
        stet::runtime::NetworkPolicy::None
    }
}

fn harness_from_config(
    config: &stet::config::Config,
) -> anyhow::Result<Arc<dyn stet::harness::Harness>> {
    use stet::config::HarnessKind;
    use stet::harness::script::{ScenarioSource, ScriptHarness};
    let harness = &config.harness;
    Ok(match harness.kind {
        HarnessKind::Script => Arc::new(ScriptHarness::new(
            match &harness.script.scenario {
                Some(path) => ScenarioSource::File(path.clone()),
                None => ScenarioSource::Demo,
            },
            harness.script.pace,
        )),
        HarnessKind::OpenHands => Arc::new(stet::harness::openhands::OpenHandsHarness::new(
            harness.openhands_settings()?,
        )),
    })
}

/// `stet agent ...`: runs inside the sandbox.
fn agent(command: AgentCommand) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    let code = match command {
        AgentCommand::Run {
            scenario,
            instructions,
            pace,
            workspace,
        } => stet::agent::run(
            &stet::agent::AgentOptions {
                scenario,
                instructions,
                pace,
                workspace,
            },
            &mut stdout,
        )?,
        AgentCommand::Check { file, root } => stet::agent::check(&file, &root, &mut stdout)?,
    };
    Ok(ExitCode::from(code))
}

/// Runs an async command on a small runtime of its own.
fn block_on(
    command: impl std::future::Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(command)
}

/// The engine, or the exit-2 message saying it is unreachable.
async fn connect_engine() -> Result<DockerRuntime, ExitCode> {
    DockerRuntime::connect().await.map_err(|err| {
        let _ = writeln!(std::io::stderr(), "stet: {err}");
        ExitCode::from(EXIT_USAGE)
    })
}

async fn image_build_local(binary: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let binary = match binary {
        Some(binary) => binary,
        None => std::env::current_exe()
            .context("finding the running stet executable (pass --binary PATH)")?,
    };
    let engine = match connect_engine().await {
        Ok(engine) => engine,
        Err(code) => return Ok(code),
    };
    let image = stet::image::build_local(engine.client(), &binary)
        .await
        .with_context(|| format!("building the sandbox image from {}", binary.display()))?;
    println!("{} {}", image.id, image.tag);
    Ok(ExitCode::SUCCESS)
}

async fn sweep() -> anyhow::Result<ExitCode> {
    let state_dir = stet::state_dir::prepare_default()?;
    let handle = SanitizerHandle::new(TokenSanitizer::new()?);
    let _log_guard = install_logging(&handle);
    let engine = match connect_engine().await {
        Ok(engine) => engine,
        Err(code) => return Ok(code),
    };
    let journal = Arc::new(Journal::open(&state_dir.join("journal"))?);
    let providers: Vec<Arc<dyn CredentialProvider>> =
        vec![Arc::new(LocalCredentialProvider::default())];
    let service = DispatchService::new(Arc::new(engine), journal, &state_dir, providers);
    let report = service.sweep_orphans().await?;
    tracing::info!(?report, "sweep finished");
    print!("{report}");
    Ok(if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn transcript(
    path: &std::path::Path,
    harness: HarnessName,
    outputs: Option<&std::path::Path>,
    brief: String,
) -> anyhow::Result<ExitCode> {
    use stet::harness::replay::{ReplayError, ReplayLabels, replay};
    let sanitizer = Arc::new(TokenSanitizer::new()?);
    let labels = ReplayLabels {
        dispatch: stet::dispatch::event::DispatchId::new(),
        brief,
    };
    let (mut parser, usage) = match harness {
        HarnessName::Openhands => {
            let usage = match outputs {
                Some(outputs) => stet::harness::openhands::final_usage(outputs, &sanitizer)?,
                None => None,
            };
            let parser: Box<dyn stet::harness::OutputParser> = Box::new(
                stet::harness::openhands::OpenHandsOutput::new(Arc::clone(&sanitizer)),
            );
            (parser, usage)
        }
        HarnessName::Script => {
            let parser: Box<dyn stet::harness::OutputParser> = Box::new(
                stet::harness::script::ScriptParser::new(Arc::clone(&sanitizer)),
            );
            (parser, None)
        }
    };
    let mut stdout = std::io::stdout().lock();
    let replayed = if path == std::path::Path::new("-") {
        replay(
            std::io::stdin().lock(),
            &mut stdout,
            parser.as_mut(),
            usage,
            &labels,
            &sanitizer,
        )
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the capture {}", path.display()))?;
        replay(
            file,
            &mut stdout,
            parser.as_mut(),
            usage,
            &labels,
            &sanitizer,
        )
    };
    match replayed {
        Ok(outcome) => Ok(ExitCode::from(outcome.exit_code().unwrap_or(1))),
        // The reader went away (`| head`): like any filter, stop quietly.
        Err(ReplayError::Write(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => Err(error.into()),
    }
}

fn reviews(number: Option<u64>) -> anyhow::Result<ExitCode> {
    let dir = stet::state_dir::locate()?.join(stet::forge::local::REVIEWS_DIR);
    let records = stet::forge::local::read_reviews(&dir)?;
    let mut out = std::io::stdout().lock();
    match number {
        None if records.is_empty() => writeln!(out, "no reviews yet in {}", dir.display())?,
        None => {
            for record in &records {
                writeln!(
                    out,
                    "#{:<4} {:<6} {} -> {}  {}  ({} at {}, updated {})",
                    record.number,
                    record.state.as_str(),
                    record.head,
                    record.base,
                    stet::dispatch::display::one_line(&record.title),
                    record.repo,
                    record.remote.display(),
                    record.updated.format("%Y-%m-%d %H:%M")
                )?;
            }
        }
        Some(number) => match records.iter().find(|record| record.number == number) {
            Some(record) => writeln!(
                out,
                "#{} {} ({})\n{} -> {} in {}\nopened {}, updated {}\n\n{}",
                record.number,
                stet::dispatch::display::one_line(&record.title),
                record.state.as_str(),
                record.head,
                record.base,
                record.remote.display(),
                record.created.format("%Y-%m-%d %H:%M"),
                record.updated.format("%Y-%m-%d %H:%M"),
                stet::dispatch::display::without_invisible(&record.body).text
            )?,
            None => {
                eprintln!("stet: no review #{number} in {}", dir.display());
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// `stet trust`: trusts, revokes or lists repository configuration files.
fn trust(path: Option<PathBuf>, revoke: bool, list: bool) -> anyhow::Result<ExitCode> {
    use stet::config::{Config, REPOSITORY_FILE, repository};
    let store = stet::config::trust::TrustStore::in_state_dir(&stet::state_dir::locate()?);
    let mut out = std::io::stdout().lock();
    if list {
        let entries = store.entries()?;
        if entries.is_empty() {
            writeln!(
                out,
                "no trusted files (the record is {})",
                store.file().display()
            )?;
        }
        for entry in entries {
            let now = match entry.path.parent().map(repository::read) {
                Some(Ok(Some(found))) if entry.covers(&found.path, &found.hash) => "trusted",
                Some(Ok(Some(_))) => "changed since: not trusted",
                Some(Ok(None)) => "gone",
                None | Some(Err(_)) => "unreadable: not trusted",
            };
            writeln!(
                out,
                "{}  sha256 {}  since {}  ({now})",
                entry.path.display(),
                entry.sha256.chars().take(12).collect::<String>(),
                entry.trusted_at.format("%Y-%m-%d %H:%M"),
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let root = match path {
        Some(named) => repository::root_of(&named)?,
        None => repository_root("run stet trust")?,
    };
    if revoke {
        let file = repository::file_path(&root)?;
        if store.revoke(&file)? {
            writeln!(
                out,
                "no longer trusted: {}: it may only tighten project settings again",
                file.display()
            )?;
        } else {
            writeln!(out, "{} was not trusted", file.display())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let found = repository::read(&root)?
        .with_context(|| format!("{} has no {REPOSITORY_FILE} to trust", root.display()))?;
    let allowed = Config::refused_untrusted(&found)?;
    store.trust(&found.path, &found.hash)?;
    writeln!(
        out,
        "trusted {} (sha256 {})",
        found.path.display(),
        found.hash
    )?;
    if allowed.is_empty() {
        writeln!(
            out,
            "it sets nothing a repository's file may not set anyway"
        )?;
    } else {
        writeln!(out, "it may now set:")?;
        for refusal in &allowed {
            writeln!(out, "  line {}: {}", refusal.line, refusal.field)?;
        }
    }
    writeln!(
        out,
        "until its content changes; `stet trust --revoke` takes the trust back"
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn doctor() -> anyhow::Result<ExitCode> {
    let binary = std::env::current_exe().context("finding the running stet executable")?;
    let docker = bollard::Docker::connect_with_defaults().map_err(|err| err.to_string());
    let report = stet::doctor::diagnose(docker, stet::state_dir::locate(), &binary).await;
    print!("{report}");
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A sandbox's main process: waits for SIGTERM or SIGINT (as PID 1 it must handle them itself),
/// relaying the model port to the gateway socket `relay` meanwhile when one is given. A relay that
/// cannot listen ends it at once with exit code 1.
async fn sandbox_idle(relay: Option<PathBuf>) -> anyhow::Result<ExitCode> {
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
    let address = stet::relay::RELAY_ADDR
        .parse()
        .context("reading the relay address")?;
    match stet::relay::relay(address, socket, stopped).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("stet sandbox-idle: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn check_branch(name: &str, base: Option<&str>) -> ExitCode {
    match BranchValidator::default().validate(name, base) {
        Ok(()) => {
            println!("{name}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("stet: invalid branch name {name:?}: {err}");
            ExitCode::FAILURE
        }
    }
}

fn sanitize(known_value_env: &[String], stats: bool) -> anyhow::Result<ExitCode> {
    let mut known = Vec::new();
    for name in known_value_env {
        let value = std::env::var(name).with_context(|| {
            format!("--known-value-env {name}: the environment variable {name} is not set")
        })?;
        let label = format!("env-{}", name.to_ascii_lowercase().replace('_', "-"));
        let label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(40)
            .collect();
        known.push(
            KnownValue::new(&label, &value).with_context(|| format!("--known-value-env {name}"))?,
        );
    }
    let handle = SanitizerHandle::new(TokenSanitizer::with_known_values(known)?);
    let _log_guard = install_logging(&handle);
    let sanitizer: Arc<TokenSanitizer> = handle.current();

    // Unbuffered handles: the redactor already works in large chunks.
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let mut redactor = Redactor::new(sanitizer);
    let mut chunk = vec![0u8; SANITIZE_CHUNK];
    let mut out = Vec::with_capacity(SANITIZE_CHUNK + 4096);
    let mut read_bytes: u64 = 0;
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err).context("reading standard input"),
        };
        read_bytes += n as u64;
        redactor.push(&chunk[..n], &mut out);
        if !write_or_stop(&mut output, &out)? {
            return Ok(ExitCode::SUCCESS);
        }
        out.clear();
    }
    redactor.finish(&mut out);
    if !write_or_stop(&mut output, &out)? {
        return Ok(ExitCode::SUCCESS);
    }
    tracing::info!(
        bytes = read_bytes,
        masked = redactor.masked(),
        "stet sanitize finished"
    );
    if stats {
        eprintln!(
            "stet sanitize: {read_bytes} bytes read, {} secrets masked",
            redactor.masked()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes`; returns `false` when the reader went away (a closed pipe is not an error for a filter).
fn write_or_stop(output: &mut std::fs::File, bytes: &[u8]) -> anyhow::Result<bool> {
    match output.write_all(bytes) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(err).context("writing standard output"),
    }
}

/// Logs go to files only; if the state directory is unusable the command still runs, and says so.
fn install_logging(handle: &SanitizerHandle) -> Option<logging::LogGuard> {
    let installed = stet::state_dir::locate()
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
