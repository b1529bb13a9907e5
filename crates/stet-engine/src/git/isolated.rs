//! git as stet runs it on a repository: none of the environment's `GIT_*` variables decides which
//! repository, objects or replacements it reads, and packs are mapped in small windows (git maps
//! them in windows of 1 GiB, which a large blob would make resident) so its memory stays flat.

use std::os::unix::ffi::OsStrExt;
use std::process::Command;

/// `command` (git, or a wrapper that execs it) with the environment's `GIT_*` variables removed,
/// replacement refs off and small pack windows; the caller adds `--git-dir` and the subcommand.
pub(crate) fn isolated(mut command: Command) -> Command {
    for (name, _) in std::env::vars_os() {
        if name.as_bytes().starts_with(b"GIT_") {
            command.env_remove(name);
        }
    }
    command.env("GIT_NO_REPLACE_OBJECTS", "1").args([
        "-c",
        "core.packedGitWindowSize=1m",
        "-c",
        "core.packedGitLimit=64m",
    ]);
    command
}
