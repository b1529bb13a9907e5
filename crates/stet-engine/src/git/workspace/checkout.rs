//! The base's files written to disk as streams, never held whole (DESIGN §5 row 23). libgit2 reads a
//! packed object only whole, so the blobs come from git's own `cat-file --batch`, which streams a
//! blob that is not a delta, through a pipe and a fixed buffer (or, for a large blob, spliced by the
//! kernel) into each file; the disposable repository gets its objects from `git pack-objects`, which
//! copies their compressed form (never an uncompressed copy), but for the large blobs stet copies
//! out of the user's packs itself (`reuse`) and the largest it leaves out (`partial`). Both git
//! commands run on the user's repository with replacement refs off and the environment's `GIT_*`
//! variables removed, and read nothing of the base but its objects.
//!
//! The tree is walked twice in the same order: by a thread that asks `cat-file` for each blob, and
//! by the writer that takes each answer in turn, so the pipe never waits on the other side.

use std::ffi::{CString, OsStr};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use git2::{FileMode, IndexEntry, IndexTime, ObjectType, Oid, Repository};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::pipe::SpliceFlags;

use super::{Context, Result, WorkspaceError};
use crate::git::isolated::isolated;

/// The buffer each blob streams through, and the most one splice moves.
const STREAM_BUFFER: usize = 1 << 20;

/// What is left of a blob from this size on goes from the pipe to the file by `splice`.
const SPLICED_FROM: u64 = 64 << 10;

/// The pipe from `cat-file`, larger than the default 64 KiB so each side wakes less often.
const PIPE_BYTES: usize = 1 << 20;

/// One step of the walk, in tree order.
enum Step<'n> {
    /// Into a directory of this name.
    Enter(&'n [u8]),
    /// Out of the last directory entered.
    Leave,
    /// A file, a symbolic link or a submodule.
    Leaf { name: &'n [u8], id: Oid, mode: i32 },
}

/// Walks `tree` depth first in tree order, which is also the index's order of paths.
fn walk(
    repository: &Repository,
    tree: Oid,
    visit: &mut dyn FnMut(Step<'_>) -> Result<()>,
    context: &Context<'_>,
) -> Result<()> {
    let tree = repository
        .find_tree(tree)
        .map_err(context.git("reading a tree of the base"))?;
    for entry in tree.iter() {
        match entry.kind() {
            Some(ObjectType::Tree) => {
                visit(Step::Enter(entry.name_bytes()))?;
                walk(repository, entry.id(), visit, context)?;
                visit(Step::Leave)?;
            }
            _ => visit(Step::Leaf {
                name: entry.name_bytes(),
                id: entry.id(),
                mode: entry.filemode(),
            })?,
        }
    }
    Ok(())
}

fn is_blob(mode: i32) -> bool {
    mode != i32::from(FileMode::Commit)
}

/// A git command on the user's repository, with nothing from the environment deciding which
/// objects it reads.
fn git_on(source: &Repository, context: &Context<'_>) -> Command {
    let mut command = isolated(Command::new("git"));
    command
        .arg("--git-dir")
        .arg(source.path())
        .current_dir(context.repository);
    command
}

/// Starts `git pack-objects` writing one pack of `objects` (the base commit, its trees and blobs)
/// into `pack_directory`, reusing the compressed objects of the user's store, searching no delta.
pub(super) fn start_pack(
    source: &Repository,
    pack_directory: &Path,
    objects: Vec<Oid>,
    context: &Context<'_>,
) -> Result<PackJob> {
    let mut child = git_on(source, context)
        // Past the threshold git streams a blob it has to deflate anew rather than holding it.
        .args([
            "-c",
            "core.bigFileThreshold=1m",
            "pack-objects",
            "--quiet",
            "--window=0",
        ])
        .arg("--non-empty")
        .arg(pack_directory.join("pack"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| context.io("starting git pack-objects for", source))?;
    let stdin = child.stdin.take();
    let feeder = std::thread::spawn(move || -> std::io::Result<()> {
        let Some(stdin) = stdin else {
            return Ok(());
        };
        let mut stdin = BufWriter::new(stdin);
        for id in objects {
            writeln!(stdin, "{id}")?;
        }
        stdin.flush()
    });
    // Read on a thread of its own, so the child never waits on a full pipe while `finish` polls it.
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(stderr) = stderr {
            let mut stderr = stderr;
            let _ = (&mut stderr).take(MAX_TOOL_STDERR).read_to_end(&mut kept);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        }
        kept
    });
    Ok(PackJob {
        child,
        feeder,
        errors,
    })
}

/// How much of a tool's error output is kept for its error.
const MAX_TOOL_STDERR: u64 = 64 << 10;

/// How often a waiting [`PackJob::finish`] asks whether the materialization was told to stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// A running `git pack-objects`.
pub(super) struct PackJob {
    child: Child,
    feeder: std::thread::JoinHandle<std::io::Result<()>>,
    errors: std::thread::JoinHandle<Vec<u8>>,
}

impl PackJob {
    /// Stops the pack being written (the checkout failed or was stopped) and reaps the process; what
    /// it wrote goes with the workspace.
    pub(super) fn abort(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.feeder.join();
        let _ = self.errors.join();
    }

    /// Waits for the pack to be written, or, told to stop meanwhile, ends it.
    pub(super) fn finish(mut self, context: &Context<'_>) -> Result<()> {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(source) => {
                    self.abort();
                    return Err(context.io("waiting for git pack-objects for", source));
                }
            }
            if let Err(stopped) = context.stop_point() {
                self.abort();
                return Err(stopped);
            }
            std::thread::sleep(STOP_POLL);
        };
        let fed = self
            .feeder
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let stderr = self
            .errors
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if !status.success() {
            return Err(context.tool("git pack-objects", status, &stderr));
        }
        fed.map_err(|source| {
            context.io("listing the base's objects to git pack-objects for", source)
        })
    }
}

/// Writes the files of `tree` under `destination` and returns the index entries that describe them
/// (stat data included), in the index's order, streaming each blob from `git cat-file --batch`.
pub(super) fn check_out(
    source: &Repository,
    tree: Oid,
    destination: &Path,
    context: &Context<'_>,
) -> Result<Vec<IndexEntry>> {
    let mut child = git_on(source, context)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| context.io("starting git cat-file for", source))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(context.io(
            "reading git cat-file's pipes for",
            std::io::Error::other("no pipe"),
        ));
    };
    // Only a speed-up: a system that caps pipes lower keeps the default.
    let _ = rustix::pipe::fcntl_setpipe_size(&stdout, PIPE_BYTES);
    let (written, asked) = std::thread::scope(|scope| {
        let asking = scope.spawn(|| ask(stdin, tree, context));
        let written = write_tree(tree, destination, stdout, source, context);
        if written.is_err() {
            // Stopped or failed: `cat-file` is ended now, not when it next writes to a closed pipe,
            // and the asking side's next write fails.
            let _ = child.kill();
        }
        let asked = asking
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (written, asked)
    });
    let output = child
        .wait_with_output()
        .map_err(|source| context.io("waiting for git cat-file for", source))?;
    let index = written?;
    asked?;
    if !output.status.success() {
        return Err(context.tool("git cat-file", output.status, &output.stderr));
    }
    Ok(index)
}

/// The asking side: names each blob of `tree` to `cat-file`, in walk order, on its own handle of the
/// repository.
fn ask(stdin: ChildStdin, tree: Oid, context: &Context<'_>) -> Result<()> {
    let source = super::open(context.repository, context)?;
    let mut stdin = BufWriter::new(stdin);
    walk(
        &source,
        tree,
        &mut |step| {
            if let Step::Leaf { id, mode, .. } = step
                && is_blob(mode)
            {
                context.stop_point()?;
                writeln!(stdin, "{id}")
                    .map_err(|source| context.io("asking git cat-file for a blob of", source))?;
            }
            Ok(())
        },
        context,
    )?;
    stdin
        .flush()
        .map_err(|source| context.io("asking git cat-file for a blob of", source))
}

/// The writing side: every directory, file, link and submodule of `tree`, in walk order.
fn write_tree(
    tree: Oid,
    destination: &Path,
    stdout: ChildStdout,
    source: &Repository,
    context: &Context<'_>,
) -> Result<Vec<IndexEntry>> {
    let mut index = Vec::new();
    let root = crate::untrusted_tree::open_root(destination)
        .map_err(|errno| context.io("opening the workspace", errno.into()))?;
    let mut writer = Writer {
        blobs: BufReader::with_capacity(STREAM_BUFFER, stdout),
        directories: vec![root],
        path: Vec::new(),
        lengths: Vec::new(),
        index: &mut index,
        context,
    };
    walk(source, tree, &mut |step| writer.step(step), context)?;
    drop(writer);
    Ok(index)
}

/// The writer's state: the open directories from the root down, and the path there.
struct Writer<'a> {
    blobs: BufReader<ChildStdout>,
    directories: Vec<OwnedFd>,
    path: Vec<u8>,
    lengths: Vec<usize>,
    index: &'a mut Vec<IndexEntry>,
    context: &'a Context<'a>,
}

impl Writer<'_> {
    fn step(&mut self, step: Step<'_>) -> Result<()> {
        self.context.stop_point()?;
        match step {
            Step::Enter(name) => {
                self.push(name);
                let parent = self.current()?;
                let name = c_name(name, self.context)?;
                let made = rustix::fs::mkdirat(parent, &name, Mode::from_raw_mode(0o755))
                    .and_then(|()| crate::untrusted_tree::open_directory(parent, &name));
                let directory = made.map_err(|errno| self.failed("creating", errno.into()))?;
                self.directories.push(directory);
                Ok(())
            }
            Step::Leave => {
                self.directories.pop();
                if let Some(length) = self.lengths.pop() {
                    self.path.truncate(length);
                }
                Ok(())
            }
            Step::Leaf { name, id, mode } => {
                self.push(name);
                let written = self.leaf(name, id, mode);
                if let Some(length) = self.lengths.pop() {
                    self.path.truncate(length);
                }
                written
            }
        }
    }

    fn push(&mut self, name: &[u8]) {
        self.lengths.push(self.path.len());
        if !self.path.is_empty() {
            self.path.push(b'/');
        }
        self.path.extend_from_slice(name);
    }

    fn current(&self) -> Result<&OwnedFd> {
        self.directories
            .last()
            .ok_or_else(|| self.failed("creating", std::io::Error::other("no directory open")))
    }

    fn leaf(&mut self, name: &[u8], id: Oid, mode: i32) -> Result<()> {
        let c = c_name(name, self.context)?;
        let parent = self
            .current()?
            .try_clone()
            .map_err(|source| self.failed("creating", source))?;
        if mode == i32::from(FileMode::Commit) {
            rustix::fs::mkdirat(&parent, &c, Mode::from_raw_mode(0o755))
                .map_err(|errno| self.failed("creating", errno.into()))?;
            return self.add(id, mode, None);
        }
        let size = self.blob_header(id)?;
        if mode == i32::from(FileMode::Link) {
            let mut target = vec![0; usize::try_from(size).unwrap_or(usize::MAX)];
            self.blobs
                .read_exact(&mut target)
                .map_err(|source| self.failed("reading the link target of", source))?;
            self.blob_end()?;
            rustix::fs::symlinkat(target.as_slice(), &parent, &c)
                .map_err(|errno| self.failed("creating", errno.into()))?;
        } else {
            let executable = mode & 0o111 != 0;
            let file = rustix::fs::openat(
                &parent,
                &c,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(if executable { 0o755 } else { 0o644 }),
            )
            .map_err(|errno| self.failed("creating", errno.into()))?;
            let mut file = std::fs::File::from(file);
            self.stream(size, &mut file)?;
            self.blob_end()?;
        }
        self.add(id, mode, Some((&parent, &c)))
    }

    /// Reads `cat-file`'s header line for the blob `id` and returns its size.
    fn blob_header(&mut self, id: Oid) -> Result<u64> {
        let mut line = Vec::new();
        (&mut self.blobs)
            .take(128)
            .read_until(b'\n', &mut line)
            .map_err(|source| self.failed("reading from git cat-file", source))?;
        let text = String::from_utf8_lossy(&line);
        let mut fields = text.trim_end().split(' ');
        let expected = id.to_string();
        match (fields.next(), fields.next(), fields.next()) {
            (Some(named), Some("blob"), Some(size)) if named == expected => {
                size.parse().map_err(|_| self.unexpected(&text))
            }
            _ => Err(self.unexpected(&text)),
        }
    }

    fn unexpected(&self, line: &str) -> WorkspaceError {
        self.failed(
            "reading from git cat-file",
            std::io::Error::other(format!("unexpected answer {:?}", line.trim_end())),
        )
    }

    /// The newline `cat-file` ends each object with.
    fn blob_end(&mut self) -> Result<()> {
        let mut end = [0_u8];
        self.blobs
            .read_exact(&mut end)
            .map_err(|source| self.failed("reading from git cat-file", source))?;
        if end != *b"\n" {
            return Err(self.unexpected("a blob longer than its header said"));
        }
        Ok(())
    }

    /// Copies `size` bytes of the pipe into `file`: what the reader holds already through its
    /// buffer, and the rest of a large blob spliced from the pipe into the file by the kernel, so its
    /// bytes are copied once rather than into the buffer and out again.
    fn stream(&mut self, size: u64, file: &mut std::fs::File) -> Result<()> {
        let mut left = size;
        while left > 0 {
            self.context.stop_point()?;
            if left >= SPLICED_FROM && self.blobs.buffer().is_empty() {
                return self.splice(left, file);
            }
            let buffer = match self.blobs.fill_buf() {
                Ok(buffer) => buffer,
                Err(source) => return Err(self.failed("reading from git cat-file", source)),
            };
            if buffer.is_empty() {
                return Err(self.unexpected("a blob shorter than its header said"));
            }
            let take = buffer
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            let result = file.write_all(&buffer[..take]);
            result.map_err(|source| self.failed("writing", source))?;
            self.blobs.consume(take);
            left -= take as u64;
        }
        Ok(())
    }

    /// Moves the next `left` bytes of the pipe into `file`, the reader's buffer being empty.
    fn splice(&mut self, mut left: u64, file: &std::fs::File) -> Result<()> {
        while left > 0 {
            self.context.stop_point()?;
            let take = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(STREAM_BUFFER);
            let moved = rustix::pipe::splice(
                self.blobs.get_ref(),
                None,
                file,
                None,
                take,
                SpliceFlags::MOVE,
            );
            match moved {
                Ok(0) => return Err(self.unexpected("a blob shorter than its header said")),
                Ok(moved) => left -= moved as u64,
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(self.failed("writing", errno.into())),
            }
        }
        Ok(())
    }

    /// Adds the entry at the current path to the index, with the stat data of what was written.
    fn add(&mut self, id: Oid, mode: i32, written: Option<(&OwnedFd, &CString)>) -> Result<()> {
        let mut entry = IndexEntry {
            ctime: IndexTime::new(0, 0),
            mtime: IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: if mode == i32::from(FileMode::Commit) || mode == i32::from(FileMode::Link) {
                mode as u32
            } else if mode & 0o111 != 0 {
                u32::from(FileMode::BlobExecutable)
            } else {
                u32::from(FileMode::Blob)
            },
            uid: 0,
            gid: 0,
            file_size: 0,
            id,
            flags: self.path.len().min(0xfff) as u16,
            flags_extended: 0,
            path: self.path.clone(),
        };
        if let Some((parent, name)) = written {
            let stat = rustix::fs::statat(parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|errno| self.failed("reading the stat data of", errno.into()))?;
            // Truncated to 32 bits, as git and libgit2 store them.
            entry.ctime = IndexTime::new(stat.st_ctime as i32, stat.st_ctime_nsec as u32);
            entry.mtime = IndexTime::new(stat.st_mtime as i32, stat.st_mtime_nsec as u32);
            entry.dev = stat.st_dev as u32;
            entry.ino = stat.st_ino as u32;
            entry.uid = stat.st_uid;
            entry.gid = stat.st_gid;
            entry.file_size = stat.st_size as u32;
        }
        self.index.push(entry);
        Ok(())
    }

    fn failed(&self, operation: &'static str, source: std::io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            path: self.context.destination.join(OsStr::from_bytes(&self.path)),
            operation,
            source,
        }
    }
}

fn c_name(name: &[u8], context: &Context<'_>) -> Result<CString> {
    CString::new(name).map_err(|_| WorkspaceError::Malformed {
        commit: context.base.clone(),
        detail: format!(
            "a name holds a NUL byte: {:?}",
            String::from_utf8_lossy(name)
        ),
    })
}
