//! A base fetched from a remote that is a local path, by git's plumbing and no transport: the
//! branch's tip read from the remote, the base checked to be on it, then `pack-objects` in the
//! remote piped into `index-pack` in the user's repository. libgit2's local transport packed in
//! the host's process, where a large repository took its memory and no stop reached the packing;
//! `git fetch` reads `remote.*`, `url.*` and `protocol.*` settings of the user's repository and
//! starts `upload-pack` through a shell. Each git here is a direct child of stet: in a process group
//! of its own (killed whole at the stop), killed too if stet dies (a parent-death signal), with
//! its address space bounded, the `GIT_*` variables of the environment removed, and nothing of the
//! user's repository configuration able to start a program or another transport.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use git2::Repository;
use rustix::process::{Pid, Resource, Rlimit, Signal, kill_process_group};
use tokio_util::sync::CancellationToken;

use super::leftovers::PackLeftovers;
use super::{PushError, Result};
use crate::git::isolated::isolated;
use stet_sanitize::branch::CommitSha;

/// How often a wait for git asks whether the dispatch was told to stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How much of git's error output is kept for an error.
const MAX_STDERR: u64 = 16 << 10;

/// The address space each git process may take: a pack's delta against a huge base is resolved in
/// memory, so a remote of a few hundred KiB could otherwise make git hold GiBs.
pub(super) const MAX_GIT_ADDRESS_SPACE: u64 = 1 << 30;

/// What every git process of the fetch runs with beyond [`isolated`]'s small pack windows: caches
/// small, blobs past 1 MiB streamed rather than searched for deltas, no maintenance.
const BOUNDED_SETTINGS: [&str; 7] = [
    "core.deltaBaseCacheLimit=16m",
    "core.bigFileThreshold=1m",
    "pack.windowMemory=64m",
    "pack.deltaCacheSize=16m",
    "pack.threads=1",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// What a fetch is asked for.
pub(super) struct LocalFetch<'a> {
    /// The user's repository, opened, and its path for errors.
    pub opened: &'a Repository,
    pub repository: &'a Path,
    /// The remote as configured (an absolute path or a `file:///` URL) and the branch.
    pub url: &'a str,
    pub branch: &'a str,
    /// The base commit the branch must lead to.
    pub commit: &'a CommitSha,
}

impl LocalFetch<'_> {
    /// Brings `commit` and what it needs into the user's repository, from `refs/heads/<branch>` of
    /// the remote: no ref, no `FETCH_HEAD`, no tag written. Fails, writing nothing, when the branch
    /// does not lead to the commit; ends with [`PushError::Stopped`] once `stop` is cancelled, its
    /// processes killed and the temporary packs they wrote removed.
    pub(super) fn run(&self, stop: &CancellationToken) -> Result<()> {
        let remote = self.remote_git_dir()?;
        let tip = self.git_in(&remote, stop, |git| {
            git.args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
                .arg(format!("refs/heads/{}^{{commit}}", self.branch));
        })?;
        let tip = match tip {
            (status, stdout, _) if status.success() => {
                String::from_utf8_lossy(&stdout).trim().to_owned()
            }
            (_, _, stderr) => {
                return Err(self.failed(format!(
                    "the remote has no branch {} ({})",
                    self.branch,
                    shown_stderr(&stderr)
                )));
            }
        };
        let (leads, _, _) = self.git_in(&remote, stop, |git| {
            git.args(["merge-base", "--is-ancestor", "--end-of-options"])
                .args([self.commit.as_str(), tip.as_str()]);
        })?;
        if !leads.success() {
            return Err(self.failed(format!(
                "the branch no longer leads to {}: it moved since preflight",
                self.commit
            )));
        }
        // The commit, and each tip the remote holds that the user's repository has too, as rev-list
        // lines: what is packed, and then what must be complete.
        let revisions = std::iter::once(self.commit.as_str().to_owned())
            .chain(
                self.haves_in(&remote, stop)?
                    .iter()
                    .map(|have| format!("^{have}")),
            )
            .map(|line| format!("{line}\n"))
            .collect::<String>()
            .into_bytes();
        let leftovers = PackLeftovers::before(&self.opened.commondir().join("objects"));
        let copied = self.copy(&remote, &revisions, stop);
        if copied.is_err() {
            leftovers.remove();
        }
        let pack = copied?;
        let connected = self.check_connected(&revisions, stop);
        if connected.is_err() {
            leftovers.remove_pack(&pack);
        }
        connected
    }

    /// Checks, in the user's repository, that the commit and everything it reaches are there now, as
    /// `git fetch` does: a remote that is shallow or grafted packs a commit without its parents,
    /// which would leave the repository broken.
    fn check_connected(&self, revisions: &[u8], stop: &CancellationToken) -> Result<()> {
        let user = self.opened.commondir().to_path_buf();
        let (status, _, stderr) = self.git_fed(&user, stop, revisions.to_vec(), |git| {
            git.args(["rev-list", "--objects", "--quiet", "--stdin"]);
        })?;
        if status.success() {
            return Ok(());
        }
        Err(self.failed(format!(
            "the remote's history of {} is incomplete (a shallow or grafted repository), so nothing of it was kept: {}",
            self.commit,
            shown_stderr(&stderr)
        )))
    }

    /// The remote's git directory: `<path>/.git` when there is one, the path itself otherwise.
    fn remote_git_dir(&self) -> Result<PathBuf> {
        let path = match self.url.strip_prefix("file://") {
            Some(path) => PathBuf::from(std::ffi::OsStr::from_bytes(
                &percent_encoding::percent_decode_str(path).collect::<Vec<u8>>(),
            )),
            None => PathBuf::from(self.url),
        };
        let dotted = path.join(".git");
        let git_dir = if dotted.symlink_metadata().is_ok() {
            dotted
        } else {
            path
        };
        if git_dir.symlink_metadata().is_err() {
            return Err(self.failed(format!(
                "there is no repository at {}: it does not exist",
                git_dir.display()
            )));
        }
        Ok(git_dir)
    }

    /// The tips of the user's refs that the remote holds as commits: what it need not send.
    fn haves_in(&self, remote: &Path, stop: &CancellationToken) -> Result<Vec<String>> {
        let mut tips: Vec<String> = self
            .opened
            .references()
            .map_err(|err| {
                self.failed(format!("listing the repository's refs: {}", err.message()))
            })?
            .filter_map(|reference| reference.ok()?.target().map(|id| id.to_string()))
            .collect();
        tips.sort();
        tips.dedup();
        if tips.is_empty() {
            return Ok(tips);
        }
        let asked = tips
            .iter()
            .map(|tip| format!("{tip}\n"))
            .collect::<String>();
        let (status, stdout, stderr) = self.git_fed(remote, stop, asked.into_bytes(), |git| {
            git.args(["cat-file", "--batch-check=%(objectname) %(objecttype)"]);
        })?;
        if !status.success() {
            return Err(self.failed(format!("git cat-file {status}: {}", shown_stderr(&stderr))));
        }
        Ok(String::from_utf8_lossy(&stdout)
            .lines()
            .filter_map(|line| line.strip_suffix(" commit").map(str::to_owned))
            .collect())
    }

    /// `pack-objects` in the remote, of what `revisions` name (the commit and everything it needs
    /// but what the haves hold), piped into `index-pack` in the user's repository; the name of the
    /// pack it wrote.
    fn copy(&self, remote: &Path, revisions: &[u8], stop: &CancellationToken) -> Result<String> {
        let mut packing = git_on(remote);
        packing
            .args([
                "pack-objects",
                "--revs",
                "--thin",
                "--stdout",
                "--quiet",
                "--delta-base-offset",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut packer = Group::spawn(packing)
            .map_err(|err| self.failed(format!("starting git pack-objects: {err}")))?;
        let feeder = feed(packer.0.stdin.take(), revisions.to_vec());
        let packed = packer
            .0
            .stdout
            .take()
            .ok_or_else(|| self.failed("git pack-objects gave no output".to_owned()))?;
        let mut indexing = git_on(self.opened.commondir());
        indexing
            .args(["index-pack", "--stdin", "--fix-thin"])
            .stdin(Stdio::from(packed))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut indexer = Group::spawn(indexing)
            .map_err(|err| self.failed(format!("starting git index-pack: {err}")))?;
        let packer_errors = drain(packer.0.stderr.take());
        let indexer_errors = drain(indexer.0.stderr.take());
        let indexer_said = drain(indexer.0.stdout.take());
        let (packed, indexed) = (self.wait(&mut packer, stop), self.wait(&mut indexer, stop));
        drop((packer, indexer));
        let _ = feeder.join();
        let (packer_errors, indexer_errors) = (joined(packer_errors), joined(indexer_errors));
        let indexer_said = joined(indexer_said);
        let (packed, indexed) = (packed?, indexed?);
        if !packed.success() {
            return Err(self.failed(format!(
                "git pack-objects {packed}: {}",
                shown_stderr(&packer_errors)
            )));
        }
        if !indexed.success() {
            return Err(self.failed(format!(
                "git index-pack {indexed}: {}",
                shown_stderr(&indexer_errors)
            )));
        }
        // `pack\t<name>` (or `keep\t<name>`): the pack index-pack wrote.
        let said = String::from_utf8_lossy(&indexer_said);
        let name = said
            .split_whitespace()
            .nth(1)
            .filter(|name| name.bytes().all(|byte| byte.is_ascii_hexdigit()))
            .ok_or_else(|| self.failed(format!("git index-pack named no pack: {}", said.trim())))?;
        Ok(name.to_owned())
    }

    /// Runs git in `git_dir` to its end, with nothing on its input.
    fn git_in(
        &self,
        git_dir: &Path,
        stop: &CancellationToken,
        args: impl FnOnce(&mut Command),
    ) -> Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
        self.git_fed(git_dir, stop, Vec::new(), args)
    }

    /// Runs git in `git_dir` to its end with `input` on its standard input; its status, output and
    /// error output (each bounded).
    fn git_fed(
        &self,
        git_dir: &Path,
        stop: &CancellationToken,
        input: Vec<u8>,
        args: impl FnOnce(&mut Command),
    ) -> Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
        let mut command = git_on(git_dir);
        args(&mut command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child =
            Group::spawn(command).map_err(|err| self.failed(format!("starting git: {err}")))?;
        let feeder = feed(child.0.stdin.take(), input);
        let output = drain(child.0.stdout.take());
        let errors = drain(child.0.stderr.take());
        let status = self.wait(&mut child, stop);
        drop(child);
        let _ = feeder.join();
        let (output, errors) = (joined(output), joined(errors));
        Ok((status?, output, errors))
    }

    /// Waits for `child`, or, once `stop` is cancelled, kills its group.
    fn wait(&self, child: &mut Group, stop: &CancellationToken) -> Result<ExitStatus> {
        loop {
            if stop.is_cancelled() {
                child.kill();
                return Err(PushError::Stopped {
                    url: self.url.to_owned(),
                });
            }
            match child.0.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) => std::thread::sleep(STOP_POLL),
                Err(err) => {
                    child.kill();
                    return Err(self.failed(format!("waiting for git: {err}")));
                }
            }
        }
    }

    fn failed(&self, detail: String) -> PushError {
        PushError::FetchFailed {
            url: self.url.to_owned(),
            branch: self.branch.to_owned(),
            repository: self.repository.to_owned(),
            detail,
        }
    }
}

/// git on `git_dir` with nothing from the environment deciding what it reads or runs, started by
/// [`guarded`].
fn git_on(git_dir: &Path) -> Command {
    let mut command = isolated(guarded("git"));
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .args(BOUNDED_SETTINGS.iter().flat_map(|setting| ["-c", setting]))
        .arg("--git-dir")
        .arg(git_dir)
        .current_dir(git_dir);
    command
}

/// `program` in a process group of its own, and, where util-linux's `setpriv` is installed (as on
/// every common distribution), sent SIGKILL by the kernel if stet dies: `setpriv` sets the
/// parent-death signal and execs the program in the same process.
fn guarded(program: &str) -> Command {
    static SETPRIV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let available = *SETPRIV.get_or_init(|| {
        Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    let mut command = if available {
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--", program]);
        command
    } else {
        Command::new(program)
    };
    command.process_group(0);
    command
}

/// Writes `input` to a child's standard input on a thread of its own, then closes it.
fn feed(
    stdin: Option<std::process::ChildStdin>,
    input: Vec<u8>,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        let Some(mut stdin) = stdin else {
            return Ok(());
        };
        stdin.write_all(&input)
    })
}

/// Reads a child's pipe on a thread of its own, keeping its first [`MAX_STDERR`] bytes.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = (&mut pipe).take(MAX_STDERR).read_to_end(&mut kept);
            let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        }
        kept
    })
}

fn joined(handle: std::thread::JoinHandle<Vec<u8>>) -> Vec<u8> {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// git's error lines (at most three, without control characters), bounded.
fn shown_stderr(stderr: &[u8]) -> String {
    let lines: Vec<String> = BufReader::new(stderr)
        .lines()
        .map_while(std::result::Result::ok)
        .map(|line| line.chars().filter(|c| !c.is_control()).collect::<String>())
        .map(|line| line.trim().to_owned())
        .filter(|line| !line.is_empty())
        .take(3)
        .collect();
    if lines.is_empty() {
        return "no message".to_owned();
    }
    crate::human::truncate(&lines.join(" / "), 1024).to_owned()
}

/// A child leading a process group of its own; dropping it kills the whole group and reaps the
/// leader.
struct Group(Child);

impl Group {
    /// Starts `command` (made by [`guarded`]) and bounds its address space to
    /// [`MAX_GIT_ADDRESS_SPACE`] before it has done more than start.
    fn spawn(mut command: Command) -> std::io::Result<Group> {
        let group = Group(command.spawn()?);
        let limit = Rlimit {
            current: Some(MAX_GIT_ADDRESS_SPACE),
            maximum: Some(MAX_GIT_ADDRESS_SPACE),
        };
        if let Some(pid) = Pid::from_raw(group.0.id() as i32) {
            rustix::process::prlimit(Some(pid), Resource::As, limit)?;
        }
        Ok(group)
    }

    fn kill(&mut self) {
        if let Some(leader) = Pid::from_raw(self.0.id() as i32) {
            let _ = kill_process_group(leader, Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.kill();
        }
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_git_runs_in_a_group_of_its_own_with_its_address_space_bounded() {
        let mut command = guarded("sh");
        command
            .args(["-c", "read go; cat /proc/self/limits /proc/self/stat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = Group::spawn(command).unwrap();
        child.0.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut text = String::new();
        child
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        let address_space = text
            .lines()
            .find(|line| line.starts_with("Max address space"))
            .unwrap();
        assert!(
            address_space.contains(&MAX_GIT_ADDRESS_SPACE.to_string()),
            "{address_space}"
        );
        let stat = text.lines().last().unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        // `cat`'s process group (the third field after its name) is the shell's own id.
        assert_eq!(fields[2], child.0.id().to_string(), "{stat}");
    }

    #[test]
    fn git_says_at_most_three_lines_without_controls() {
        let said = shown_stderr(b"fatal: one\n\n\x1b[31mtwo\x1b[0m\nthree\nfour\n");
        assert_eq!(said, "fatal: one / [31mtwo[0m / three");
    }
}
