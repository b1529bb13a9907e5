//! Copy mode (`[runtime] mounts = "copy"`, issue #33): the workspace and the outputs reach the
//! sandbox through the engine's archive API instead of bind mounts, so the container shares no
//! host path. In: a tar stream written from the host directory stet made (the materialized base,
//! the harness's staged files), every entry the sandbox user's. Out: the container's directory as
//! a tar stream, read as untrusted input by [`crate::untrusted_tar`] into a fresh directory that
//! replaces the host's copy only once all of it was accepted.

use std::fs::Metadata;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::dispatch::remove_tree::remove_tree;
use crate::git::import::{ImportLimits, MAX_DEPTH};
use crate::runtime::{
    ContainerRuntime, MountMode, OUTPUTS_MOUNT, RuntimeError, SandboxUser, WORKSPACE_MOUNT,
};
use crate::untrusted_tar::{TarError, TarLimits, extract_until};

/// How a dispatch's workspace and outputs reach its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mounts {
    /// Bind mounts of the host's directories.
    #[default]
    Bind,
    /// Copies through the engine's archive API; what comes back is read within these bounds.
    Copy(TarLimits),
}

impl Mounts {
    /// Copies, what comes back read within the import's own bounds.
    pub fn copy(import: ImportLimits) -> Mounts {
        Mounts::Copy(TarLimits {
            max_entries: import.max_files,
            max_file_bytes: import.max_file_bytes,
            max_total_bytes: import.max_total_bytes,
            max_depth: MAX_DEPTH,
        })
    }

    /// The socket directory `dir` as the container mounts it: in bind mode, as it is; in copy mode
    /// not at all (the channels ride the relay's exec stream, [`crate::dispatch::channel_stream`]).
    pub fn socket_mount(self, dir: &Option<PathBuf>) -> Option<PathBuf> {
        match self {
            Mounts::Bind => dir.clone(),
            Mounts::Copy(_) => None,
        }
    }

    /// Whether the sandbox user is handed the socket directory and its sockets: in bind mode, where
    /// the relay in the sandbox connects to them; in copy mode they stay stet's own, private to the
    /// host (only stet's demultiplexer connects).
    pub fn shares_sockets(self) -> bool {
        self == Mounts::Bind
    }

    /// The runtime's side of it.
    pub fn mode(self) -> MountMode {
        match self {
            Mounts::Bind => MountMode::Bind,
            Mounts::Copy(_) => MountMode::Copy,
        }
    }
}

/// Why a copy into or out of the sandbox failed.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum CopyError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("the sandbox's {what} was refused: {source}")]
    Refused {
        what: &'static str,
        #[source]
        source: TarError,
    },
    #[error("{}: {operation}: {source}", path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("copying ended abnormally: {0}")]
    Task(String),
}

/// How many chunks wait between the engine and the tar reader or writer: memory stays at a few
/// MiB whatever the directory's size.
const CHUNKS_IN_FLIGHT: usize = 16;

/// The size of a chunk the tar writer hands to the engine.
const CHUNK: usize = 256 * 1024;

/// Copies the contents of the host directory `source` into `target` of the running `container`,
/// every entry owned by `user`. Links are copied as links, never followed.
pub async fn copy_in(
    runtime: &Arc<dyn ContainerRuntime>,
    container: &str,
    source: &Path,
    target: &str,
    user: SandboxUser,
) -> Result<(), CopyError> {
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let walked = source.to_owned();
    let writer = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(ChannelWriter {
            sender,
            buffer: Vec::with_capacity(CHUNK),
        });
        builder.follow_symlinks(false);
        append_tree(&mut builder, &walked, Path::new("."), user)?;
        builder
            .into_inner()
            .and_then(ChannelWriter::finish)
            .map_err(|source| CopyError::Io {
                path: walked.clone(),
                operation: "writing the archive of",
                source,
            })
    });
    let uploaded = runtime.copy_in(container, target, receiver).await;
    let written = writer
        .await
        .map_err(|error| CopyError::Task(error.to_string()))?;
    // The engine's refusal explains a writer cut short; the writer's own failure otherwise.
    uploaded?;
    written
}

/// Appends the contents of `directory` (named `name` in the archive) to `builder`.
fn append_tree<W: Write>(
    builder: &mut tar::Builder<W>,
    directory: &Path,
    name: &Path,
    user: SandboxUser,
) -> Result<(), CopyError> {
    let io_error = |path: &Path, operation| {
        let path = path.to_owned();
        move |source| CopyError::Io {
            path,
            operation,
            source,
        }
    };
    let mut entries = std::fs::read_dir(directory)
        .map_err(io_error(directory, "listing"))?
        .map(|entry| entry.map(|entry| entry.file_name()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error(directory, "listing"))?;
    entries.sort();
    for entry in entries {
        let path = directory.join(&entry);
        let named = name.join(&entry);
        let metadata = std::fs::symlink_metadata(&path).map_err(io_error(&path, "reading"))?;
        let mut header = header_for(&metadata, user);
        let file_type = metadata.file_type();
        if file_type.is_dir() {
            builder
                .append_data(&mut header, &named, io::empty())
                .map_err(io_error(&path, "archiving"))?;
            append_tree(builder, &path, &named, user)?;
        } else if file_type.is_symlink() {
            let target = std::fs::read_link(&path).map_err(io_error(&path, "reading"))?;
            builder
                .append_link(&mut header, &named, target)
                .map_err(io_error(&path, "archiving"))?;
        } else if file_type.is_file() {
            let file = std::fs::File::open(&path).map_err(io_error(&path, "opening"))?;
            builder
                .append_data(&mut header, &named, file.take(metadata.len()))
                .map_err(io_error(&path, "archiving"))?;
        }
        // Anything else (stet's own directories hold no special file) is not copied.
    }
    Ok(())
}

/// A header for `metadata`'s entry, owned by `user`, its permissions and time kept.
fn header_for(metadata: &Metadata, user: SandboxUser) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(metadata, tar::HeaderMode::Complete);
    header.set_uid(u64::from(user.uid));
    header.set_gid(u64::from(user.gid));
    header.set_mode(metadata.mode() & 0o7777);
    header
}

/// Hands what the tar writer writes to the engine in chunks of [`CHUNK`].
struct ChannelWriter {
    sender: mpsc::Sender<Bytes>,
    buffer: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.sender
            .blocking_send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the engine stopped reading"))
    }

    fn finish(mut self) -> io::Result<()> {
        self.send()
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads what the engine hands over, chunk by chunk, for the blocking tar reader.
struct ChannelReader {
    receiver: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let taken = self.current.len().min(buffer.len());
        buffer[..taken].copy_from_slice(&self.current.split_to(taken));
        Ok(taken)
    }
}

/// Copies the contents of `source` in the running `container` over the host directory
/// `destination`: read as untrusted input within `limits` into a fresh directory next to it, which
/// replaces `destination` only once every entry was accepted. `what` names it in a refusal.
pub async fn copy_out(
    runtime: &Arc<dyn ContainerRuntime>,
    container: &str,
    source: &str,
    destination: &Path,
    limits: TarLimits,
    what: &'static str,
) -> Result<(), CopyError> {
    let incoming = destination.with_extension("incoming");
    if incoming.exists() {
        remove_tree(&incoming).map_err(|source| CopyError::Io {
            path: incoming.clone(),
            operation: "removing",
            source,
        })?;
    }
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let (target, replaced) = (incoming.clone(), destination.to_owned());
    let reader = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader {
            receiver,
            current: Bytes::new(),
        };
        extract_until(reader, &target, limits, &|| false)
            .map_err(|source| CopyError::Refused { what, source })?;
        let io_error = |operation| {
            let path = replaced.clone();
            move |source| CopyError::Io {
                path,
                operation,
                source,
            }
        };
        remove_tree(&replaced).map_err(io_error("removing the earlier copy of"))?;
        std::fs::rename(&target, &replaced).map_err(io_error("moving the copy to"))
    });
    let downloaded = runtime.copy_out(container, source, sender).await;
    let read = reader
        .await
        .map_err(|error| CopyError::Task(error.to_string()))?;
    // The engine's error explains a stream that ended early; the reader's refusal otherwise.
    downloaded?;
    read
}

/// After a process in copy mode: the container's outputs and workspace over the host's copies
/// `outputs` and `workspace`, each read within `limits`.
pub async fn bring_back(
    runtime: &Arc<dyn ContainerRuntime>,
    container: &str,
    (outputs, workspace): (&Path, &Path),
    limits: TarLimits,
) -> Result<(), CopyError> {
    for (source, destination, what) in [
        (OUTPUTS_MOUNT, outputs, "outputs"),
        (WORKSPACE_MOUNT, workspace, "workspace"),
    ] {
        copy_out(runtime, container, source, destination, limits, what).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
