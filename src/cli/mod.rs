//! The command line, one file per command or family of commands: [`args`] is what clap parses,
//! [`run`] hands each command to its module, and [`session`] assembles the engine for the commands
//! that dispatch, once.

pub(crate) mod args;
mod completions;
mod demo;
mod filters;
mod headless;
mod history;
mod inbox_watch;
mod json;
mod maintenance;
mod salvaged;
mod session;
mod sink;
mod terminal;
mod theater;

use std::process::ExitCode;

use args::{Cli, Command, ImageCommand};
pub(crate) use session::shown_error;

/// Exit code for usage and configuration errors (DESIGN §6).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Exit code when a run was interrupted by SIGINT/SIGTERM or its terminal hung up (every dispatch
/// cancelled; DESIGN §6).
pub(crate) const EXIT_CANCELLED: u8 = 3;

/// Runs the command `cli` names; `stet` alone is the theater, `stet --headless` the scripted run.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::CheckBranch { name, base }) => {
            Ok(filters::check_branch(&name, base.as_deref()))
        }
        Some(Command::Sanitize {
            known_value_env,
            stats,
        }) => filters::sanitize(&known_value_env, stats),
        Some(Command::Image {
            command: ImageCommand::BuildLocal { binary },
        }) => session::block_on(maintenance::image_build_local(binary)),
        Some(Command::Sweep { json }) => session::block_on(maintenance::sweep(json)),
        Some(Command::Completions { shell }) => completions::completions(shell),
        Some(Command::Man) => completions::man(),
        Some(Command::Doctor { json }) => session::block_on(maintenance::doctor(json)),
        Some(Command::Trust {
            path,
            revoke,
            list,
            json,
        }) => maintenance::trust(path, revoke, list, json),
        Some(Command::Reviews { number, json }) => maintenance::reviews(number, json),
        Some(Command::Transcript {
            path,
            harness,
            outputs,
            brief,
        }) => filters::transcript(&path, harness, outputs.as_deref(), brief),
        Some(Command::Demo {
            dir,
            pace,
            headless,
            dispatch,
        }) => session::dispatch_runtime(demo::demo(dir, pace, headless || cli.headless, dispatch)),
        None if cli.headless => {
            session::dispatch_runtime(headless::headless(cli.dispatch, cli.push))
        }
        None => session::dispatch_runtime(theater::theater(cli.dispatch)),
    }
}
