//! The container runtime seam (ADR-0018 rows 1 and 9): what stet needs from an engine to run one
//! locked-down sandbox ([`ContainerRuntime`]), to make the offline image present and to report on
//! itself for `stet doctor` ([`RuntimeSetup`]), described so that the engine adapter
//! ([`docker::DockerRuntime`]) is the only code that speaks the engine's API. The runtime a
//! configuration names (`[runtime] kind`) is made in one place, [`connect`] (or [`unconnected`]
//! for the doctor): a new runtime is its module, a kind and a line in each.

pub mod docker;
pub mod endpoint;
pub mod limits_cache;
pub mod lines;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::check::Check;
use crate::credential::SecretValue;
use crate::image::SandboxImage;
use stet_protocol::event::DispatchId;

pub use lines::FramedLine;

/// The label every sandbox container carries: `dev.stet.dispatch=<dispatch id>`.
pub const DISPATCH_LABEL: &str = "dev.stet.dispatch";

/// The label naming the state directory (hence the journal) that owns a sandbox, so a sweep only
/// reclaims its own installation's containers: `dev.stet.state=<`[`state_label`]`>`.
pub const STATE_LABEL: &str = "dev.stet.state";

/// The label of a warm pool's idle sandbox (`[runtime] warm`, [`crate::dispatch::pool`]): the
/// image it was started for. A claimed one keeps it (a running container's labels are fixed).
pub const WARM_LABEL: &str = "dev.stet.warm";

/// A short, stable name for a state directory: 16 hex digits of the SHA-256 of its canonical path.
pub fn state_label(state_dir: &std::path::Path) -> String {
    use sha2::Digest as _;
    let canonical = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_owned());
    let digest = sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Where the workspace and the outputs directory appear inside a sandbox (the engine ↔ sandbox
/// contract's constant: the scripted agent works there by default).
pub const WORKSPACE_MOUNT: &str = stet_protocol::sandbox::WORKSPACE_MOUNT;
/// Where the outputs directory appears inside a sandbox, read-write.
pub const OUTPUTS_MOUNT: &str = "/outputs";
/// Where the model gateway's socket directory is mounted, read-only (connecting to a socket needs no
/// write access to the mount).
pub const GATEWAY_MOUNT: &str = stet_protocol::sandbox::GATEWAY_MOUNT;
/// The sandbox user's home directory (a tmpfs).
pub const SANDBOX_HOME: &str = "/home/stet";

/// The unprivileged user a sandbox runs as when stet itself runs as root.
pub const DEFAULT_SANDBOX_UID: u32 = 65532;

/// Why the container engine could not do what stet asked of it.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum RuntimeError {
    #[error("{} is not reachable{}: {detail}; is the daemon running?", .engine.display_name(), endpoint_hint(.endpoint))]
    Unreachable {
        engine: endpoint::Engine,
        endpoint: Option<String>,
        detail: String,
    },
    #[error(transparent)]
    Endpoint(#[from] endpoint::EndpointError),
    #[error(
        "{engine} at {host} would not enforce every limit a sandbox relies on: {reason}; stet refuses to dispatch there. Fix: {fix}"
    )]
    LimitsNotEnforced {
        engine: &'static str,
        host: String,
        reason: String,
        fix: &'static str,
    },
    #[error(
        "Docker's socket {} is there, but you (uid {uid}) may not use it{}: add yourself to that group (`sudo usermod -aG {} $USER`, then log in again), or point DOCKER_HOST at an engine you may use",
        .socket.display(),
        .group.as_ref().map(|g| format!(": it is open to group {g} only")).unwrap_or_default(),
        .group.as_deref().unwrap_or("docker")
    )]
    SocketDenied {
        socket: std::path::PathBuf,
        uid: u32,
        /// The socket's group, by name, when `/etc/group` names it.
        group: Option<String>,
    },
    #[error(
        "image {0:?} is not pinned: use name@sha256:<digest> or a local image id sha256:<id> (a tag can be moved underneath a dispatch)"
    )]
    UnpinnedImage(String),
    #[error("image {image:?} is not present locally{hint}")]
    ImageNotFound { image: String, hint: String },
    #[error(
        "pulling {image} was refused by the registry: {detail}; log in to the registry (docker login) first"
    )]
    PullDenied { image: String, detail: String },
    #[error("pulling {image} failed: {detail}")]
    Pull { image: String, detail: String },
    #[error("the engine did not apply {flag} ({warning}); refusing to run a sandbox without it")]
    LimitNotEnforced { flag: &'static str, warning: String },
    #[error("{path}: {problem}")]
    MountSource {
        path: PathBuf,
        problem: &'static str,
    },
    #[error("the sandbox user must not be root (uid 0)")]
    RootUser,
    #[error("container {container}: {operation} failed: {detail}")]
    Engine {
        container: String,
        operation: &'static str,
        detail: String,
    },
    #[error("the output receiver went away while {container} was still running a process")]
    OutputClosed { container: String },
}

fn endpoint_hint(endpoint: &Option<String>) -> String {
    endpoint
        .as_ref()
        .map(|e| format!(" at {e}"))
        .unwrap_or_default()
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RuntimeError>;

/// An image reference stet will run: immutable unless explicitly allowed otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// `repository@sha256:<64 hex>`: pulled by digest if missing.
    Digest {
        /// The reference as written, `repository@sha256:<64 hex>`.
        reference: String,
    },
    /// `sha256:<64 hex>`: an image id present in the engine (e.g. the offline sandbox image).
    LocalId {
        /// The image id as written, `sha256:<64 hex>`.
        id: String,
    },
    /// A mutable tag, accepted only when the configuration allows unpinned images (development).
    Unpinned {
        /// The tagged reference as written.
        reference: String,
    },
}

impl ImageRef {
    /// Parses `text`; a tag is refused unless `allow_unpinned`.
    pub fn parse(text: &str, allow_unpinned: bool) -> Result<ImageRef> {
        if is_sha256_id(text) {
            return Ok(ImageRef::LocalId {
                id: text.to_owned(),
            });
        }
        if let Some((name, digest)) = text.split_once('@')
            && !name.is_empty()
            && !name.contains(char::is_whitespace)
            && is_sha256_id(digest)
        {
            return Ok(ImageRef::Digest {
                reference: text.to_owned(),
            });
        }
        if allow_unpinned && !text.is_empty() && !text.contains(char::is_whitespace) {
            tracing::warn!(
                image = text,
                "running an unpinned image: its tag can be moved underneath a dispatch (allowed for development only)"
            );
            return Ok(ImageRef::Unpinned {
                reference: text.to_owned(),
            });
        }
        Err(RuntimeError::UnpinnedImage(text.to_owned()))
    }

    /// The reference as the engine takes it.
    pub fn as_str(&self) -> &str {
        match self {
            ImageRef::Digest { reference } | ImageRef::Unpinned { reference } => reference,
            ImageRef::LocalId { id } => id,
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_sha256_id(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Resource caps of one sandbox (ADR-0018 row 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchLimits {
    /// Memory and memory+swap (equal: no swap).
    pub memory_bytes: i64,
    /// CPU quota in billionths of a CPU.
    pub nano_cpus: i64,
    /// Most processes and threads at once.
    pub pids: i64,
    /// Size of each tmpfs (`/tmp`, the home directory).
    pub tmpfs_bytes: i64,
    /// The largest file a sandbox process may write or allocate (`RLIMIT_FSIZE`): one file cannot
    /// take more than the dispatch's disk bound between two of the disk watch's looks.
    pub file_bytes: i64,
}

impl Default for DispatchLimits {
    fn default() -> Self {
        DispatchLimits {
            memory_bytes: 4 * 1024 * 1024 * 1024,
            nano_cpus: 2_000_000_000,
            pids: 512,
            tmpfs_bytes: 512 * 1024 * 1024,
            file_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// Whether the sandbox gets a network (ADR-0018 row 1: none unless the guardrail allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// No network at all, not even loopback to the host: the default.
    None,
    /// The engine's default bridge network: only when the guardrail allows network access.
    Bridge,
}

/// The uid:gid a sandbox runs as; never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxUser {
    /// The user id the sandbox's processes run as.
    pub uid: u32,
    /// The group id the sandbox's processes run as.
    pub gid: u32,
}

impl SandboxUser {
    /// The invoking user, or `fallback:fallback` when stet runs as root.
    pub fn for_invoker(fallback: u32) -> std::io::Result<SandboxUser> {
        use std::os::unix::fs::MetadataExt;
        let me = std::fs::metadata("/proc/self")?;
        Ok(if me.uid() == 0 {
            SandboxUser {
                uid: fallback,
                gid: fallback,
            }
        } else {
            SandboxUser {
                uid: me.uid(),
                gid: me.gid(),
            }
        })
    }
}

/// Who on this host already uses `uid`: an account `/etc/passwd` names, or a process of this pid
/// namespace (a container's processes, in pid namespaces of their own, do not count). A host
/// process with a sandbox's uid could reach that sandbox's files through `/proc/<pid>/root`, so
/// stet, running as root, never runs sandboxes as a uid the host uses.
pub fn host_use_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if let Some(name) = name_for_id(&passwd, uid) {
        return Some(format!("the account {name:?} (/etc/passwd)"));
    }
    let own_namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let uses = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .is_some_and(|ids| ids.split_whitespace().any(|id| id == uid.to_string()));
        let here =
            std::fs::read_link(entry.path().join("ns/pid")).ok() == Some(own_namespace.clone());
        if uses && here {
            return Some(format!("process {pid}"));
        }
    }
    None
}

/// The name a `/etc/passwd`- or `/etc/group`-format `text` gives `id` (its third field).
pub(crate) fn name_for_id(text: &str, id: u32) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let listed = fields.nth(1)?.parse::<u32>().ok()?;
        (listed == id && !name.is_empty()).then(|| name.to_owned())
    })
}

/// Everything needed to create one sandbox container.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The dispatch this sandbox belongs to; also the container's name.
    pub dispatch: DispatchId,
    /// The image the container runs.
    pub image: ImageRef,
    /// Bind-mounted read-write at [`WORKSPACE_MOUNT`] in [`MountMode::Bind`]; in
    /// [`MountMode::Copy`] the directory whose copy goes in and out through the archive API.
    pub workspace: PathBuf,
    /// Bind-mounted read-write at [`OUTPUTS_MOUNT`] in [`MountMode::Bind`]; copied like the
    /// workspace in [`MountMode::Copy`].
    pub outputs: PathBuf,
    /// Whether the workspace and the outputs are bind mounts or copies in tmpfs volumes of their
    /// own, each at most [`DispatchLimits::file_bytes`].
    pub mounts: MountMode,
    /// The model gateway's socket directory, bind-mounted read-only at [`GATEWAY_MOUNT`]; `None`
    /// when the dispatch has no gateway.
    pub gateway: Option<PathBuf>,
    /// CPU, memory, process, tmpfs and file-size caps of the container.
    pub limits: DispatchLimits,
    /// Whether the container gets a network.
    pub network: NetworkPolicy,
    /// The uid:gid the container's processes run as.
    pub user: SandboxUser,
    /// The container's main process; it only has to stay alive while processes are exec'd into it.
    pub keepalive: Vec<String>,
    /// The value of [`STATE_LABEL`]: which installation's journal owns this sandbox.
    pub state_label: String,
    /// The value of [`WARM_LABEL`] when the sandbox is started idle for the warm pool.
    pub warm: Option<String>,
}

impl SandboxSpec {
    /// The container's name: the dispatch id.
    pub fn container_name(&self) -> String {
        self.dispatch.to_string()
    }
}

/// One process to run in a sandbox. `argv` is an array, never a shell string; secrets travel only in
/// `env`, whose values `Debug` withholds.
#[derive(Debug, Clone, Default)]
pub struct SandboxProcess {
    /// The program and its arguments, run without a shell.
    pub argv: Vec<String>,
    /// The process's environment; the only way a secret reaches a sandbox.
    pub env: BTreeMap<String, SecretValue>,
    /// The working directory inside the sandbox.
    pub workdir: String,
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// The process's standard output.
    Stdout,
    /// The process's standard error.
    Stderr,
}

/// A piece of a process's output as the engine delivered it: any length, not split at lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream the bytes came from.
    pub stream: OutputStream,
    /// The bytes as delivered, unsanitized.
    pub bytes: Vec<u8>,
}

/// One framed line of a process's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// The stream the line came from.
    pub stream: OutputStream,
    /// The line, framed and sanitized.
    pub line: FramedLine,
}

/// A process running in a sandbox with its standard streams attached as bytes, not lines: what
/// the host writes to `input` is its stdin, `output` its stdout, `errors` its stderr (the
/// engine's stream demultiplexed; no TTY). The relay's channel stream rides it (copy mode). The
/// holder must keep reading `errors`, or `output` stalls behind it; dropping `input` closes stdin.
pub struct AttachedProcess {
    /// The process's standard input.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// The process's standard output.
    pub output: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    /// The process's standard error.
    pub errors: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
}

impl fmt::Debug for AttachedProcess {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("AttachedProcess { .. }")
    }
}

/// How an exec'd process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecExit {
    /// The process's exit code.
    pub code: i64,
    /// The kernel's OOM killer ended it for exceeding the sandbox's memory cap.
    pub oom_killed: bool,
}

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerExit {
    /// The container's exit code.
    pub code: i64,
    /// The kernel killed it for exceeding its memory cap.
    pub oom_killed: bool,
}

/// Whether a removal found something to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Something was there and is removed now.
    Removed,
    /// Nothing by that name was there.
    AlreadyGone,
}

/// Progress of an image pull, as the theater shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProgress {
    /// The layer id the status is about; `None` for a message about the whole pull.
    pub layer: Option<String>,
    /// The engine's status text (`Downloading`, `Pull complete`, ...).
    pub status: String,
    /// Bytes of the layer transferred so far, when the engine reports it.
    pub current_bytes: Option<u64>,
    /// Size of the layer in bytes, when the engine reports it.
    pub total_bytes: Option<u64>,
}

/// A sandbox container the engine knows about, as the sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxContainer {
    /// The container's name (`stet-dispatch-<uuid>`).
    pub name: String,
    /// The value of [`DISPATCH_LABEL`].
    pub dispatch: String,
    /// The value of [`STATE_LABEL`], if the container has one.
    pub state_label: Option<String>,
    /// The engine's state word for it (`running`, `exited`, ...).
    pub state: String,
    /// Whether it was started for the warm pool (it carries [`WARM_LABEL`]).
    pub warm: bool,
}

/// What stet needs from a container engine.
#[async_trait]
pub trait ContainerRuntime: Send + Sync + fmt::Debug {
    /// Makes `image` present locally, pulling by digest with progress if needed.
    async fn ensure_image(
        &self,
        image: &ImageRef,
        progress: Option<mpsc::Sender<PullProgress>>,
    ) -> Result<()>;
    /// Creates and starts the hardened container described by `spec`; returns its name.
    async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<String>;
    /// Runs `process` in `container`, sending its output as it comes to `output`; returns how it
    /// ended.
    async fn exec(
        &self,
        container: &str,
        process: &SandboxProcess,
        output: mpsc::Sender<OutputChunk>,
    ) -> Result<ExecExit>;
    /// Starts `process` in `container` with its stdin, stdout and stderr attached as byte streams
    /// ([`AttachedProcess`]); it runs until its stdin closes or it ends on its own, and ends with
    /// the container at the latest.
    async fn exec_attached(
        &self,
        container: &str,
        _process: &SandboxProcess,
    ) -> Result<AttachedProcess> {
        Err(RuntimeError::Engine {
            container: container.to_owned(),
            operation: "exec attached",
            detail:
                "this runtime cannot attach to a process's stdin and stdout; use mounts = \"bind\""
                    .to_owned(),
        })
    }
    /// Sends SIGKILL to the container's processes.
    async fn kill(&self, container: &str) -> Result<()>;
    /// Removes the container (with `force`, even while running).
    async fn remove(&self, container: &str, force: bool) -> Result<Removal>;
    /// Waits for the container's main process to end.
    async fn wait(&self, container: &str) -> Result<ContainerExit>;
    /// Every container carrying [`DISPATCH_LABEL`], running or not.
    async fn list_sandboxes(&self) -> Result<Vec<SandboxContainer>>;
    /// Which engine the containers live on, for the journal; `None` for a runtime with no address.
    fn location(&self) -> Option<endpoint::EngineLocation> {
        None
    }
    /// Writes the tar stream `archive` (its chunks, in order) into the directory `path` of the
    /// running `container`, through the engine's archive API ([`MountMode::Copy`]); each entry
    /// belongs to the uid and gid its header names.
    async fn copy_in(
        &self,
        container: &str,
        path: &str,
        archive: mpsc::Receiver<bytes::Bytes>,
    ) -> Result<()> {
        drop(archive);
        Err(RuntimeError::Engine {
            container: container.to_owned(),
            operation: "copy in",
            detail: format!(
                "this runtime cannot copy into a sandbox ({path}); use mounts = \"bind\""
            ),
        })
    }
    /// Streams the contents of the directory `path` of the running `container` as a tar stream
    /// (entries named `./…`) into `archive`, through the engine's archive API: untrusted input, for
    /// [`crate::untrusted_tar`].
    async fn copy_out(
        &self,
        container: &str,
        path: &str,
        archive: mpsc::Sender<bytes::Bytes>,
    ) -> Result<()> {
        drop(archive);
        Err(RuntimeError::Engine {
            container: container.to_owned(),
            operation: "copy out",
            detail: format!(
                "this runtime cannot copy out of a sandbox ({path}); use mounts = \"bind\""
            ),
        })
    }
}

/// What a container engine does for stet besides running sandboxes: the part of it that is set up
/// and checked rather than used per dispatch.
#[async_trait]
pub trait RuntimeSetup: ContainerRuntime {
    /// Which runtime this is.
    fn kind(&self) -> RuntimeKind;
    /// Makes the offline sandbox image of the stet-sandbox executable `binary` present in the
    /// engine, loading it only when it is not there yet, and returns it.
    async fn offline_image(&self, binary: &Path) -> crate::image::Result<SandboxImage>;
    /// What `stet doctor` reports about the engine, changing nothing: whether it answers, whether
    /// it enforces the limits a sandbox relies on, whether the offline image of `binary` is there.
    /// Every problem names its fix.
    async fn diagnose(&self, binary: &Path) -> Vec<Check>;
    /// Whether `image` is present in the engine, asking only (nothing is pulled or loaded): what
    /// `stet doctor` says of the configured dispatch image. `Err` says why the engine could not tell.
    async fn image_present(&self, image: &ImageRef) -> std::result::Result<bool, String>;
    /// Refuses (with the reason and the fix) an engine that would not enforce every one of
    /// `limits`, found by effect with a container of `image` (present) that is created, read back
    /// and removed, never started.
    async fn check_limits(&self, image: &ImageRef, limits: &DispatchLimits) -> Result<()>;
    /// [`RuntimeSetup::check_limits`] with its probe container named `name`, so that the caller
    /// can journal it before it exists.
    async fn check_limits_as(
        &self,
        name: &str,
        image: &ImageRef,
        limits: &DispatchLimits,
    ) -> Result<()>;
    /// Everything the outcome of [`RuntimeSetup::check_limits`] depends on in the engine, as one
    /// text ([`limits_cache`]); `None` when the engine does not say who it is (then it is probed
    /// at every launch).
    async fn fingerprint(&self) -> Option<String> {
        None
    }
    /// Which engine this is and where it listens.
    fn endpoint(&self) -> &endpoint::Endpoint;
}

crate::kinds::kinds! {
    /// How the workspace and the outputs reach the sandbox (`[runtime] mounts`, a machine setting):
    /// bind mounts of the host's directories, or copies through the engine's archive API into
    /// tmpfs volumes of the dispatch's own, so that no host path is shared (issue #33).
    pub enum MountMode {
        /// Bind mounts of the dispatch's directories under the state directory.
        #[default]
        Bind = "bind",
        /// Copies in and out through the engine's archive API.
        Copy = "copy",
    }
}

crate::kinds::kinds! {
    /// Which container engine runs the sandboxes.
    pub enum RuntimeKind {
        /// The Docker Engine API: `DOCKER_HOST`, else the local socket.
        #[default]
        Docker = "docker",
    }
}

/// Which runtime, which engine behind it and where (`[runtime] kind`, `engine`, `host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineChoice<'a> {
    /// The runtime adapter.
    pub kind: RuntimeKind,
    /// The engine that serves its API.
    pub engine: endpoint::Engine,
    /// Its address, when configured (else the environment's, else the engine's usual socket).
    pub host: Option<&'a str>,
}

/// The runtime `choice` names, connected: an engine that does not answer is an error that says so.
pub async fn connect(choice: EngineChoice<'_>) -> Result<Arc<dyn RuntimeSetup>> {
    Ok(match choice.kind {
        RuntimeKind::Docker => {
            let endpoint = docker::endpoint_from_environment(choice.engine, choice.host)?;
            Arc::new(docker::DockerRuntime::connect_to(&endpoint).await?)
        }
    })
}

/// The runtime `choice` names, made without reaching its engine (`stet doctor`, whose checks do);
/// `Err` says why it could not be made.
pub fn unconnected(choice: EngineChoice<'_>) -> std::result::Result<Arc<dyn RuntimeSetup>, String> {
    Ok(match choice.kind {
        RuntimeKind::Docker => {
            let endpoint = docker::endpoint_from_environment(choice.engine, choice.host)
                .map_err(|error| error.to_string())?;
            Arc::new(docker::DockerRuntime::unconnected_to(&endpoint)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_registry_makes_every_kind_as_itself() {
        for kind in RuntimeKind::ALL {
            let choice = EngineChoice {
                kind: *kind,
                ..EngineChoice::default()
            };
            let runtime = unconnected(choice).unwrap();
            assert_eq!(runtime.kind(), *kind);
            assert_eq!(RuntimeKind::from_name(kind.as_str()), Some(*kind));
        }
        assert_eq!(RuntimeKind::from_name("podman"), None);
        assert_eq!(RuntimeKind::default(), RuntimeKind::Docker);
    }

    const HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn only_digests_and_image_ids_are_pinned() {
        let digest = format!("127.0.0.1:5000/stet-sandbox@sha256:{HEX}");
        assert_eq!(
            ImageRef::parse(&digest, false).unwrap(),
            ImageRef::Digest {
                reference: digest.clone()
            }
        );
        let id = format!("sha256:{HEX}");
        assert_eq!(
            ImageRef::parse(&id, false).unwrap(),
            ImageRef::LocalId { id: id.clone() }
        );
        for unpinned in [
            "python:3.12",
            "ghcr.io/o/stet-openhands:latest",
            "ubuntu",
            &format!("sha256:{}", &HEX[1..]),
            &format!("sha256:{}", HEX.to_uppercase()),
            &format!("@sha256:{HEX}"),
            &format!("repo@sha256:{HEX}0"),
            "",
        ] {
            assert!(
                matches!(
                    ImageRef::parse(unpinned, false),
                    Err(RuntimeError::UnpinnedImage(_))
                ),
                "{unpinned}"
            );
        }
        assert_eq!(
            ImageRef::parse("python:3.12", true).unwrap(),
            ImageRef::Unpinned {
                reference: "python:3.12".into()
            }
        );
    }

    #[test]
    fn state_labels_are_stable_per_directory_and_differ_between_directories() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_eq!(state_label(a.path()), state_label(a.path()));
        assert_ne!(state_label(a.path()), state_label(b.path()));
        assert_eq!(state_label(a.path()).len(), 16);
    }

    #[test]
    fn root_maps_to_the_fallback_user_and_others_keep_their_ids() {
        let user = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap();
        assert_ne!(user.uid, 0);
        assert_ne!(user.gid, 0);
    }

    #[test]
    fn the_secret_env_of_a_process_is_not_debug_printed() {
        let process = SandboxProcess {
            argv: vec!["stet".into(), "agent".into()],
            env: BTreeMap::from([(
                "STET_GIT_CREDENTIAL".into(),
                SecretValue::new("canary-value-1".into()),
            )]),
            workdir: WORKSPACE_MOUNT.into(),
        };
        assert!(!format!("{process:?}").contains("canary-value-1"));
    }
}
