//! The `stet` command line: parses arguments and hands each command to the library.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stet::dispatch::branch::BranchValidator;
use stet::dispatch::credential::{CredentialProvider, LocalCredentialProvider};
use stet::dispatch::journal::Journal;
use stet::dispatch::sanitize::{KnownValue, Redactor, SanitizerHandle, TokenSanitizer};
use stet::dispatch::service::DispatchService;
use stet::logging;
use stet::runtime::docker::DockerRuntime;

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
    /// Run without the terminal UI and print JSON Lines events (the dispatch engine is not built yet).
    #[arg(long)]
    headless: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

/// The harnesses whose output `stet transcript` reads.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum HarnessName {
    /// The OpenHands V1 CLI, `--headless --json`.
    Openhands,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    SandboxIdle,

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

        /// Report which processes carry the value of the environment variable NAME in their command
        /// line (the value is read from the environment, never passed as an argument). Repeatable.
        #[arg(long = "find-env-in-cmdlines", value_name = "NAME")]
        find_env_in_cmdlines: Vec<String>,

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
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("stet: {err:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
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
        Some(Command::Reviews { number }) => reviews(number),
        Some(Command::Transcript {
            path,
            harness: HarnessName::Openhands,
            outputs,
            brief,
        }) => transcript(&path, outputs.as_deref(), brief),
        Some(Command::SandboxIdle) => block_on(sandbox_idle()),
        Some(Command::Probe {
            connect,
            fork_up_to,
            allocate_mb,
            find_env_in_cmdlines,
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
                find_env_in_cmdlines,
            })?;
            stet::probe::write_report(&report, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let what = if cli.headless {
                "`stet --headless` arrives with the dispatch engine"
            } else {
                "the terminal theater arrives with the TUI"
            };
            anyhow::bail!(
                "{what}; available now: `stet sanitize`, `stet check-branch`, `stet doctor`, `stet sweep`, `stet image build-local` (see `stet --help`)"
            )
        }
    }
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
        eprintln!("stet: {err}");
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
    let handle = SanitizerHandle::new(TokenSanitizer::new()?);
    let _log_guard = install_logging(&handle);
    let state_dir = logging::state_dir()?;
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
    outputs: Option<&std::path::Path>,
    brief: String,
) -> anyhow::Result<ExitCode> {
    use stet::harness::replay::{ReplayError, ReplayLabels, replay_openhands};
    let sanitizer = Arc::new(TokenSanitizer::new()?);
    let labels = ReplayLabels {
        dispatch: stet::dispatch::event::DispatchId::new(),
        brief,
    };
    let mut stdout = std::io::stdout().lock();
    let replayed = if path == std::path::Path::new("-") {
        replay_openhands(
            std::io::stdin().lock(),
            &mut stdout,
            outputs,
            &labels,
            &sanitizer,
        )
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the capture {}", path.display()))?;
        replay_openhands(file, &mut stdout, outputs, &labels, &sanitizer)
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
    let dir = logging::state_dir()?.join(stet::forge::local::REVIEWS_DIR);
    let records = stet::forge::local::read_reviews(&dir)?;
    let mut out = std::io::stdout().lock();
    match number {
        None if records.is_empty() => writeln!(out, "no reviews yet in {}", dir.display())?,
        None => {
            for record in &records {
                writeln!(
                    out,
                    "#{:<4} {:<6} {} -> {}  {}  ({}, updated {})",
                    record.number,
                    record.state.as_str(),
                    record.head,
                    record.base,
                    printable(&record.title),
                    record.repo,
                    record.updated.format("%Y-%m-%d %H:%M")
                )?;
            }
        }
        Some(number) => match records.iter().find(|record| record.number == number) {
            Some(record) => writeln!(
                out,
                "#{} {} ({})\n{} -> {} in {}\nopened {}, updated {}\n\n{}",
                record.number,
                printable(&record.title),
                record.state.as_str(),
                record.head,
                record.base,
                record.remote.display(),
                record.created.format("%Y-%m-%d %H:%M"),
                record.updated.format("%Y-%m-%d %H:%M"),
                printable(&record.body)
            )?,
            None => {
                eprintln!("stet: no review #{number} in {}", dir.display());
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Text safe to print on a terminal: control characters (an agent's escape sequences) become U+FFFD,
/// except newlines and tabs.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                char::REPLACEMENT_CHARACTER
            } else {
                c
            }
        })
        .collect()
}

async fn doctor() -> anyhow::Result<ExitCode> {
    let state_dir = logging::state_dir()?;
    let binary = std::env::current_exe().context("finding the running stet executable")?;
    let docker = bollard::Docker::connect_with_defaults().map_err(|err| err.to_string());
    let report = stet::doctor::diagnose(docker, &state_dir, &binary).await;
    print!("{report}");
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A sandbox's main process: waits for SIGTERM or SIGINT (as PID 1 it must handle them itself).
async fn sandbox_idle() -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(ExitCode::SUCCESS)
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
    let installed =
        logging::state_dir().and_then(|dir| logging::install(&dir.join("logs"), handle.clone()));
    match installed {
        Ok(guard) => Some(guard),
        Err(err) => {
            eprintln!("stet: warning: logging disabled: {err}");
            None
        }
    }
}
