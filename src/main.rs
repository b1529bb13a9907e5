//! The `stet` command line: parses arguments and hands each command to the library.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stet::dispatch::branch::BranchValidator;
use stet::dispatch::sanitize::{KnownValue, Redactor, SanitizerHandle, TokenSanitizer};
use stet::logging;

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
        None => {
            let what = if cli.headless {
                "`stet --headless` arrives with the dispatch engine"
            } else {
                "the terminal theater arrives with the TUI"
            };
            anyhow::bail!(
                "{what}; available now: `stet sanitize`, `stet check-branch` (see `stet --help`)"
            )
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
