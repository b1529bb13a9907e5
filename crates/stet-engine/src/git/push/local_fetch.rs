//! A base fetched from a remote that is a local path runs as git's own `fetch` in a process group of
//! its own: libgit2's local transport packs in the host's process, where a large repository takes
//! the host's memory and no stop reaches its delta search; a child has bounded windows and is killed
//! with everything it started the moment the dispatch stops.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use git2::Repository;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio_util::sync::CancellationToken;

use super::leftovers::PackLeftovers;
use super::{PushError, Result};

/// How often the wait for the child asks whether the dispatch was told to stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How much of git's error output is kept for the error.
const MAX_STDERR: u64 = 16 << 10;

/// Fetches `refs/heads/<branch>` from the local repository at `url` (an absolute path or a
/// `file:///` URL, checked by the caller) into `opened` (the user's repository at `repository`):
/// objects only, no ref, no `FETCH_HEAD`, no tags, no other transport. Ends with
/// [`PushError::Stopped`] once `stop` is cancelled, its processes killed and the temporary packs
/// they wrote removed.
pub(super) fn fetch_local(
    opened: &Repository,
    repository: &Path,
    url: &str,
    branch: &str,
    stop: &CancellationToken,
) -> Result<()> {
    let failed = |detail: String| PushError::FetchFailed {
        url: url.to_owned(),
        branch: branch.to_owned(),
        repository: repository.to_owned(),
        detail,
    };
    let leftovers = PackLeftovers::before(&opened.commondir().join("objects"));
    let mut child = Group::spawn(fetch_command(opened.path(), url, branch))
        .map_err(|err| failed(format!("starting git fetch: {err}")))?;
    let stderr = child.0.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut stderr) = stderr {
            let _ = (&mut stderr).take(MAX_STDERR).read_to_end(&mut kept);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        }
        kept
    });
    let status = loop {
        if stop.is_cancelled() {
            drop(child);
            leftovers.remove();
            let _ = errors.join();
            return Err(PushError::Stopped {
                url: url.to_owned(),
            });
        }
        match child.0.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(STOP_POLL),
            Err(err) => {
                drop(child);
                leftovers.remove();
                return Err(failed(format!("waiting for git fetch: {err}")));
            }
        }
    };
    // The group may outlive its leader (a grandchild holding the pipe): it goes now.
    drop(child);
    let stderr = errors
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    if status.success() {
        return Ok(());
    }
    leftovers.remove();
    Err(failed(format!(
        "git fetch {status}: {}",
        shown_stderr(&stderr)
    )))
}

/// `git fetch` with nothing from the environment deciding what it reads or runs: the `GIT_*`
/// variables removed, only the local transport allowed, no hook, maintenance or submodule, and
/// memory bounded in it and in the `upload-pack` it starts (`-c` settings reach git's children).
fn fetch_command(git_dir: &Path, url: &str, branch: &str) -> Command {
    let mut command = Command::new("git");
    for (name, _) in std::env::vars_os() {
        if name.as_bytes().starts_with(b"GIT_") {
            command.env_remove(name);
        }
    }
    command
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(BOUNDED_SETTINGS.iter().flat_map(|setting| ["-c", setting]))
        .arg("--git-dir")
        .arg(git_dir)
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-auto-maintenance",
            "--",
            url,
        ])
        .arg(format!("refs/heads/{branch}"))
        .current_dir(git_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// What every git process of the fetch runs with.
const BOUNDED_SETTINGS: [&str; 12] = [
    "protocol.allow=never",
    "protocol.file.allow=always",
    "core.packedGitWindowSize=1m",
    "core.packedGitLimit=64m",
    // Past this size a blob is streamed and never searched for a delta, on both sides.
    "core.bigFileThreshold=1m",
    "pack.windowMemory=64m",
    "pack.deltaCacheSize=16m",
    "pack.threads=1",
    // Always a pack, never loose objects: a stop leaves only temporary packs, which are removed.
    "fetch.unpackLimit=1",
    "transfer.unpackLimit=1",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// The last line git wrote, without control characters, bounded.
fn shown_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let last = text
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("no message");
    let clean: String = last.chars().filter(|c| !c.is_control()).collect();
    crate::human::truncate(&clean, 512).to_owned()
}

/// A child leading a process group of its own; dropping it kills the whole group and reaps the
/// leader.
struct Group(Child);

impl Group {
    fn spawn(mut command: Command) -> std::io::Result<Group> {
        command.process_group(0).spawn().map(Group)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(leader) = Pid::from_raw(self.0.id() as i32) {
            let _ = kill_process_group(leader, Signal::KILL);
        }
        let _ = self.0.wait();
    }
}
