//! `stet completions <shell>` and `stet man`: the shell completion script and the man page, both
//! generated from the same clap definition the command line parses, so they never fall behind it.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use super::args::Cli;

/// The shells `stet completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script for `shell` to stdout.
pub(crate) fn completions(shell: CompletionShell) -> anyhow::Result<ExitCode> {
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "stet", &mut out);
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the man page, stet(1), as roff to stdout: its options, each subcommand with what it
/// does, the exit codes and the version.
pub(crate) fn man() -> anyhow::Result<ExitCode> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&page)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
