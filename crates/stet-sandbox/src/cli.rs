//! The command line of the `stet-sandbox` executable, the one program in the sandbox image (where it
//! is `/usr/local/bin/stet`, so a scenario's `stet agent check` and the container's `stet
//! sandbox-idle` read as they always did): `agent`, `speak`, `sandbox-idle`, `sandbox-relay` and
//! `probe`, and nothing that belongs on the host.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stet_protocol::channel::{ChannelError, ChannelTable};

use crate::agent::{self, AgentError, AgentOptions};
use crate::probe::{self, ProbeError, ProbeRequest};
use crate::relay::{self, RelayError};
use crate::speaker::{self, SpeakerError};

/// Exit code for a command that could not run at all (as the host's `stet` uses for usage errors).
const EXIT_USAGE: u8 = 2;

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum CliError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Speaker(#[from] SpeakerError),
    #[error("sandbox-idle: {0}")]
    Relay(#[from] RelayError),
    #[error("sandbox-idle: {0}")]
    Channel(#[from] ChannelError),
    #[error("sandbox-relay: {0}")]
    RelayChannel(#[source] ChannelError),
    #[error("sandbox-idle: installing the {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        source: std::io::Error,
    },
    #[error("sandbox-idle: starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// The sandbox side's command line.
#[derive(Debug, Parser)]
#[command(
    name = "stet",
    version,
    about = "stet's sandbox side: the scripted agent, the container's main process and the probe",
    long_about = "stet's sandbox side: the scripted agent, the container's main process and the probe. \
        It runs inside the sandbox image; the host's stet starts it there."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The scripted agent: acts out a scenario inside the sandbox (used by `stet demo` and the tests).
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },

    /// Run a harness program as the one process that speaks for the agent (the engine starts every
    /// harness program this way).
    #[command(
        long_about = "Run a harness program as the one process that speaks for the agent (the engine \
            starts every harness program this way).\n\n\
            This process makes itself non-dumpable first, so no other process of the sandbox's user can \
            open its output through /proc or trace it; it gives the program pipes of its own as stdout \
            and stderr and relays them; once the program has exited it relays what they already hold and \
            nothing more, and says so on stderr when another process still held them open. It exits \
            with the program's exit code (128 + the signal for a program a signal ended).",
        after_help = "Example:\n  stet speak -- stet agent run --scenario /outputs/scenario.toml --instructions /outputs/task.md"
    )]
    Speak {
        /// The harness program and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "PROGRAM"
        )]
        argv: Vec<OsString>,
    },

    /// Keep a sandbox container alive until it is stopped (the container's main process).
    SandboxIdle {
        /// The directory of the host's sockets, one per channel (the relay's transport).
        #[arg(long = "socket-dir", value_name = "DIR", requires = "channels")]
        socket_dir: Option<PathBuf>,
        /// Also relay this channel: its port on the container's loopback (127.0.0.1:PORT) to the
        /// socket NAME.sock in the socket directory (the model gateway's is model=4141). Repeatable.
        #[arg(long = "channel", value_name = "NAME=PORT", requires = "socket_dir")]
        channels: Vec<String>,
    },

    /// Relay the sandbox's channels over this process's stdin/stdout (copy mode: the host starts it
    /// as an exec and attaches to it; no host path is shared).
    #[command(
        long_about = "Relay the sandbox's channels over this process's stdin/stdout (copy mode: the host \
            starts it as an exec and attaches to it; no host path is shared).\n\n\
            It makes itself non-dumpable first, so no other process of the sandbox's user can open its \
            standard output through /proc or trace it. Each channel's port on the container's loopback is listened on; every connection accepted \
            there rides standard output and input as frames, to the host's end of that channel. \
            Standard output carries frames only; diagnostics go to standard error. It ends when the \
            host closes standard input (exit 0) or sends what the protocol does not allow (exit 1).",
        after_help = "Example:\n  stet sandbox-relay --stdio --channel model=4141 --channel egress=4142"
    )]
    SandboxRelay {
        /// Carry the channels over stdin/stdout (the one transport of this command).
        #[arg(long, required = true)]
        stdio: bool,
        /// Relay this channel: its port on the container's loopback (127.0.0.1:PORT). Repeatable.
        #[arg(long = "channel", value_name = "NAME=PORT", required = true)]
        channels: Vec<String>,
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
        #[command(flatten)]
        request: ProbeRequest,

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
        #[arg(long, value_name = "DIR", default_value = stet_protocol::sandbox::WORKSPACE_MOUNT)]
        workspace: PathBuf,
    },
    /// Run a checks file (the demo program's tests); exit 0 when every check passes.
    Check {
        file: PathBuf,
        #[arg(long, value_name = "DIR", default_value = ".")]
        root: PathBuf,
    },
}

/// Parses the command line and runs the command; an error is one line on stderr and exit code 2.
pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "stet: {error}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Agent { command } => agent_command(command),
        Command::Speak { argv } => speak(&argv),
        Command::SandboxIdle {
            socket_dir,
            channels,
        } => {
            let table = match socket_dir {
                Some(dir) => Some(ChannelTable::parse(&dir, &channels)?),
                None => None,
            };
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(CliError::Runtime)?
                .block_on(sandbox_idle(table))
        }
        Command::SandboxRelay { stdio, channels } => {
            debug_assert!(stdio, "clap requires --stdio");
            let table = ChannelTable::parse_stdio(&channels).map_err(CliError::RelayChannel)?;
            // Its stdout is the host's stream: no other process of the sandbox's user may open it
            // through /proc, write frames into it, or trace it.
            speaker::keep_voice_private()?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(CliError::Runtime)?
                .block_on(sandbox_relay(table))
        }
        Command::Probe {
            request,
            hold,
            emit_line_mb,
        } => probe_command(&request, hold, emit_line_mb),
    }
}

/// `stet agent ...`.
fn agent_command(command: AgentCommand) -> Result<ExitCode, CliError> {
    let mut stdout = std::io::stdout().lock();
    let code = match command {
        AgentCommand::Run {
            scenario,
            instructions,
            pace,
            workspace,
        } => {
            // Its children run as the same user: its stdout must be out of their reach.
            speaker::keep_voice_private()?;
            agent::run(
                &AgentOptions {
                    scenario,
                    instructions,
                    pace,
                    workspace,
                },
                &mut stdout,
            )?
        }
        AgentCommand::Check { file, root } => agent::check(&file, &root, &mut stdout)?,
    };
    Ok(ExitCode::from(code))
}

/// `stet speak -- <program> [args]`: non-dumpable before anything else, then the program run through.
/// A program the image does not have ends it with 127, one it has but cannot run with 126, as a
/// shell would: the host reads either as an image that is not its harness's.
fn speak(argv: &[OsString]) -> Result<ExitCode, CliError> {
    speaker::keep_voice_private()?;
    let spoken = speaker::speak(
        argv,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    match spoken {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error @ speaker::SpeakerError::Start { .. }) => {
            let missing = matches!(
                &error,
                speaker::SpeakerError::Start { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound
            );
            let _ = writeln!(std::io::stderr(), "stet: {error}");
            Ok(ExitCode::from(if missing { 127 } else { 126 }))
        }
        Err(error) => Err(error.into()),
    }
}

/// A sandbox's main process: waits for SIGTERM or SIGINT (as PID 1 it must handle them itself),
/// relaying the channels of `table` to the host's sockets meanwhile when one is given. A relay that
/// cannot listen ends it at once with exit code 1.
async fn sandbox_idle(table: Option<ChannelTable>) -> Result<ExitCode, CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let installing = |signal: &'static str| move |source| CliError::Signal { signal, source };
    let mut terminate = signal(SignalKind::terminate()).map_err(installing("SIGTERM"))?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(installing("SIGINT"))?;
    let stopped = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    let Some(table) = table else {
        stopped.await;
        return Ok(ExitCode::SUCCESS);
    };
    match relay::relay_channels(&table, stopped).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "stet sandbox-idle: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `stet sandbox-relay --stdio`: the channels of `table` over stdin/stdout until the host closes
/// stdin (exit 0); a port that cannot be listened on, or a stream the host broke, is one line on
/// stderr and exit 1.
async fn sandbox_relay(table: ChannelTable) -> Result<ExitCode, CliError> {
    let relayed = relay::relay_stdio(
        &table,
        tokio::io::stdin(),
        tokio::io::stdout(),
        std::future::pending(),
    )
    .await;
    match relayed {
        Ok(stet_pump::mux::Ended::Closed | stet_pump::mux::Ended::Stopped) => Ok(ExitCode::SUCCESS),
        Ok(ended) => {
            let _ = writeln!(std::io::stderr(), "stet sandbox-relay: {ended}");
            Ok(ExitCode::FAILURE)
        }
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "stet sandbox-relay: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `stet probe`: what a test asks of the sandbox from inside it, reported as JSON on stdout; `hold`
/// waits for stdin to close, `emit_line_mb` prints one line of that many MiB.
fn probe_command(
    request: &ProbeRequest,
    hold: bool,
    emit_line_mb: Option<usize>,
) -> Result<ExitCode, CliError> {
    if hold {
        probe::hold(&mut std::io::stdin().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(megabytes) = emit_line_mb {
        probe::emit_line(megabytes, &mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = probe::run(request)?;
    probe::write_report(&report, &mut std::io::stdout().lock())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_probe_options_parse_into_the_request() {
        let cli = Cli::try_parse_from([
            "stet",
            "probe",
            "--connect",
            "10.0.0.1:443",
            "--fork-up-to",
            "8",
            "--find-env-in-cmdlines",
            "SECRET",
        ])
        .unwrap();
        let Command::Probe { request, hold, .. } = cli.command else {
            panic!("not a probe: {cli:?}");
        };
        assert_eq!(request.connect, ["10.0.0.1:443".parse().unwrap()]);
        assert_eq!(request.fork_up_to, Some(8));
        assert_eq!(request.fill_piece_mb, 16);
        assert_eq!(request.find_env_in_cmdlines, ["SECRET"]);
        assert!(!hold);
    }

    #[test]
    fn speak_takes_the_harness_programs_argv_whole() {
        let cli = Cli::try_parse_from([
            "stet",
            "speak",
            "--",
            "python3",
            "-c",
            "print(1)",
            "--headless",
            "-f",
            "x",
        ])
        .unwrap();
        let Command::Speak { argv } = cli.command else {
            panic!("not speak: {cli:?}");
        };
        assert_eq!(
            argv,
            ["python3", "-c", "print(1)", "--headless", "-f", "x"].map(OsString::from)
        );
        assert!(
            Cli::try_parse_from(["stet", "speak"]).is_err(),
            "a program is needed"
        );
        assert!(Cli::try_parse_from(["stet", "speak", "--"]).is_err());
    }

    #[test]
    fn hold_conflicts_with_the_active_checks() {
        let refused = Cli::try_parse_from(["stet", "probe", "--hold", "--connect", "10.0.0.1:1"]);
        assert!(refused.is_err(), "{refused:?}");
    }

    /// The attack: an agent runs `/usr/local/bin/stet` with the host's command lines, hoping one of
    /// them reaches code of the host's (the sanitizer's rules to probe, the trust store, the local
    /// forge's reviews, a transcript replay, the headless dispatcher). None parses.
    #[test]
    fn no_command_line_of_the_hosts_stet_parses_here() {
        for argv in [
            &["stet"][..],
            &["stet", "--headless", "--all"],
            &["stet", "sanitize"],
            &["stet", "check-branch", "main"],
            &["stet", "trust", "--list"],
            &["stet", "reviews"],
            &["stet", "transcript", "-"],
            &["stet", "image", "build-local"],
        ] {
            let refused = Cli::try_parse_from(argv);
            assert!(refused.is_err(), "{argv:?} parsed: {refused:?}");
        }
    }

    #[test]
    fn sandbox_idle_reads_its_channel_table_and_refuses_a_row_outside_the_format() {
        let cli = Cli::try_parse_from([
            "stet",
            "sandbox-idle",
            "--socket-dir",
            "/run/stet",
            "--channel",
            "model=4141",
        ])
        .unwrap();
        let Command::SandboxIdle {
            socket_dir,
            channels,
        } = cli.command
        else {
            panic!("not sandbox-idle: {cli:?}");
        };
        assert_eq!(socket_dir, Some(PathBuf::from("/run/stet")));
        assert_eq!(channels, ["model=4141"]);
        for half in [
            &["stet", "sandbox-idle", "--channel", "model=4141"][..],
            &["stet", "sandbox-idle", "--socket-dir", "/run/stet"],
        ] {
            assert!(Cli::try_parse_from(half).is_err(), "{half:?} parsed");
        }
        for row in ["../model=4141", "model=0", "model", "Model=4141"] {
            let cli = Cli::try_parse_from([
                "stet",
                "sandbox-idle",
                "--socket-dir",
                "/run/stet",
                "--channel",
                row,
            ])
            .unwrap();
            let error = run(cli).unwrap_err();
            assert!(matches!(error, CliError::Channel(_)), "{row}: {error:?}");
            assert!(
                error.to_string().starts_with("sandbox-idle: channel"),
                "{error}"
            );
        }
    }

    #[test]
    fn host_commands_are_not_here() {
        for host_only in ["demo", "doctor", "image", "sweep"] {
            let refused = Cli::try_parse_from(["stet", host_only]);
            assert!(refused.is_err(), "{host_only} parsed: {refused:?}");
        }
    }

    #[test]
    fn sandbox_relay_needs_stdio_and_a_channel_and_refuses_a_row_outside_the_format() {
        let cli = Cli::try_parse_from([
            "stet",
            "sandbox-relay",
            "--stdio",
            "--channel",
            "model=4141",
            "--channel",
            "egress=4142",
        ])
        .unwrap();
        let Command::SandboxRelay { stdio, channels } = cli.command else {
            panic!("not sandbox-relay: {cli:?}");
        };
        assert!(stdio);
        assert_eq!(channels, ["model=4141", "egress=4142"]);
        for argv in [
            &["stet", "sandbox-relay", "--channel", "model=4141"][..],
            &["stet", "sandbox-relay", "--stdio"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
        let error = run(Cli::try_parse_from([
            "stet",
            "sandbox-relay",
            "--stdio",
            "--channel",
            "model=4141",
            "--channel",
            "model=4142",
        ])
        .unwrap())
        .unwrap_err();
        assert!(
            error.to_string().starts_with("sandbox-relay: channel"),
            "{error}"
        );
    }
}
