//! The command line's shape: every command, flag and help text, as clap parses them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use stet_engine::harness::HarnessKind;

/// `stet --version`: the version, the commit it was built from and the build's profile.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("STET_COMMIT"),
    ", ",
    env!("STET_PROFILE"),
    " build)"
);

#[derive(Debug, Parser)]
#[command(
    name = "stet",
    version = VERSION,
    about = "Dispatch an AI coding agent into a locked-down container and watch it work",
    long_about = "Dispatch an AI coding agent into a locked-down container and watch it work.\n\n\
        stet keeps an inbox of briefs (.stet/briefs/*.toml). Dispatching one makes a private copy of the \
        code, runs the agent in a container with no network and no credentials of yours, shows the \
        sanitized transcript live, and then stet itself - never the container - pushes the branch and \
        opens the pull request.",
    after_help = "Exit codes:\n  0  done\n  1  failed\n  2  usage or configuration error\n  3  cancelled\n  \
        4  timed out\n  5  cost ceiling hit\n\nLogs: $XDG_STATE_HOME/stet/logs/ (filter with STET_LOG=debug)."
)]
pub(crate) struct Cli {
    /// Run without the terminal UI: dispatch the briefs given with --brief or --all and print the
    /// events as JSON Lines on stdout (human progress on stderr when it is a terminal).
    #[arg(long)]
    pub(crate) headless: bool,

    /// With --headless: push the result and open (or update) the pull request. Without it a run
    /// stops after collecting, keeping the commit at refs/stet/<dispatch id> and the diff in the run
    /// record.
    #[arg(long, requires = "headless")]
    pub(crate) push: bool,

    #[command(flatten)]
    pub(crate) dispatch: DispatchArgs,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// How briefs are dispatched (`--headless` and `stet demo`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DispatchArgs {
    /// A brief to dispatch: its id in the inbox (.stet/briefs/ID.toml) or a path to a brief file.
    /// Repeatable.
    #[arg(long = "brief", value_name = "ID|PATH")]
    pub(crate) briefs: Vec<String>,

    /// Dispatch every brief in the inbox.
    #[arg(long, conflicts_with = "briefs")]
    pub(crate) all: bool,

    /// Wall-clock limit on the agent's work, e.g. 90s, 20m, 1h (default: the configuration's, 30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) timeout: Option<std::time::Duration>,

    /// End a dispatch once its model cost reaches this many US dollars.
    #[arg(long = "cost-ceiling", value_name = "USD", value_parser = parse_ceiling)]
    pub(crate) cost_ceiling: Option<f64>,
}

/// `90s`, `20m`, `1h` or plain seconds.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
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

pub(crate) fn parse_ceiling(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!("{text:?} is not a positive number of US dollars")),
    }
}

/// A harness whose output `stet transcript` reads: one of the engine's kinds, by its name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HarnessName(pub(crate) HarnessKind);

impl clap::ValueEnum for HarnessName {
    fn value_variants<'a>() -> &'a [Self] {
        static NAMES: std::sync::LazyLock<Vec<HarnessName>> = std::sync::LazyLock::new(|| {
            HarnessKind::ALL.iter().copied().map(HarnessName).collect()
        });
        NAMES.as_slice()
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let output = match self.0 {
            HarnessKind::OpenHands => "The OpenHands V1 CLI, `--headless --json`",
            HarnessKind::Script => "`stet agent`, the scripted agent",
            HarnessKind::Codex => "The Codex CLI, `codex exec --json`",
            HarnessKind::Claude => "Claude Code, `claude -p --output-format stream-json`",
        };
        Some(clap::builder::PossibleValue::new(self.0.as_str()).help(output))
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    Sweep {
        /// Print what the sweep did as one JSON object (the schema in docs/json.md).
        #[arg(long)]
        json: bool,
    },

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
        /// Print the list, or the review, as one JSON object (the schema in docs/json.md).
        #[arg(long)]
        json: bool,
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
        /// With --list: print the list as one JSON object (the schema in docs/json.md).
        #[arg(long, requires = "list")]
        json: bool,
    },

    /// Check that a dispatch from here has what it needs, and say what to fix.
    #[command(
        long_about = "Check that a dispatch from here has what it needs, and say what to fix.\n\n\
            In the order a dispatch needs them: the configuration resolves (the user file, the \
            repository's stet.toml and the STET_* variables, each named); the Docker engine answers and \
            enforces the memory, swap, pids and cpu limits a sandbox relies on; the harness has its \
            model, and its image is pinned and present; the model endpoint answers GET /models with the \
            key a dispatch would send (never a billed request); the price table covers the model under a \
            cost ceiling; the state directory and the disk. Then, from inside a repository, the configured \
            forge: that it answers, accepts the token, and that the token may read, push to and propose \
            on each repository the checkout has as a remote there. Outside a repository it says what it \
            could not check. Nothing is changed, on disk or anywhere. Exits 1 if a check failed.",
        after_help = "Examples:\n  stet doctor\n  stet doctor --json | jq '.checks[] | select(.status != \"ok\")'"
    )]
    Doctor {
        /// Print the report as one JSON object (the schema in docs/json.md).
        #[arg(long)]
        json: bool,
    },

    /// Manage the offline sandbox image.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },

    /// Print the completion script for a shell (bash, zsh or fish) on stdout.
    #[command(
        after_help = "Examples:\n  source <(stet completions bash)\n  stet completions fish > ~/.config/fish/completions/stet.fish"
    )]
    Completions {
        /// The shell to complete in.
        shell: super::completions::CompletionShell,
    },

    /// Print stet's man page (roff) on stdout.
    #[command(
        after_help = "Examples:\n  stet man | man -l -\n  stet man > ~/.local/share/man/man1/stet.1"
    )]
    Man,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImageCommand {
    /// Build the sandbox image from the stet-sandbox executable and load it into Docker; print its ID
    /// and tag.
    #[command(
        long_about = "Build the sandbox image from the stet-sandbox executable and load it into Docker; \
            print its ID and tag.\n\n\
            The image holds that executable (the scripted agent, the container's main process and the \
            probe; nothing of the host's stet) at /usr/local/bin/stet, the shared libraries ldd names, \
            and a minimal /etc/passwd with the sandbox user 65532. No registry is needed. It is tagged \
            stet-sandbox:<12 hex of the executable's sha256>; building again from the same executable \
            reuses it.\n\n\
            It is the scripted agent's image. The real agents' images (the OpenHands CLI, the Codex CLI) \
            are built by docker/dispatch/build-offline --harness openhands|codex, which adds the same \
            executable to a Debian base holding the agent.",
        after_help = "Exit codes:\n  0  built or reused\n  2  Docker unreachable, or the image could not be built"
    )]
    BuildLocal {
        /// The stet-sandbox executable to package (default: the one installed beside this stet).
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
}
