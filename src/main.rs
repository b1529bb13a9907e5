//! The `stet` executable: parses the command line and runs the command ([`cli`]).

#[cfg(test)]
mod build_info;
mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    keep_the_owners_access();
    let parsed = cli::args::Cli::parse();
    match cli::run(parsed) {
        Ok(code) => code,
        Err(err) => {
            // The terminal may be gone (a hung-up session): a failed write must not panic.
            let _ = writeln!(std::io::stderr(), "stet: {}", cli::shown_error(&err));
            ExitCode::from(cli::EXIT_USAGE)
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
