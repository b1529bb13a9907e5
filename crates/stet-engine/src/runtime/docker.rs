//! `DockerRuntime`: [`ContainerRuntime`] and [`RuntimeSetup`] on the Docker Engine API (bollard),
//! and [`hardened_create_body`], the one function that turns a [`SandboxSpec`] into the engine's
//! configuration (ADR-0018 row 1, DESIGN §5 row 11).

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::StartExecResults;
use bollard::models::{
    ContainerCreateBody, ExecConfig, HostConfig, Mount, MountType, MountVolumeOptions,
    MountVolumeOptionsDriverConfig,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, DownloadFromContainerOptionsBuilder,
    EventsOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::endpoint::{Endpoint, Engine};
use super::{
    ContainerExit, ContainerRuntime, DISPATCH_LABEL, DispatchLimits, ExecExit, GATEWAY_MOUNT,
    ImageRef, MountMode, NetworkPolicy, OUTPUTS_MOUNT, OutputChunk, OutputStream, PullProgress,
    Removal, Result, RuntimeError, RuntimeKind, RuntimeSetup, SANDBOX_HOME, STATE_LABEL,
    SandboxContainer, SandboxProcess, SandboxSpec, WARM_LABEL, WORKSPACE_MOUNT,
};
use crate::check::Check;
use crate::image::SandboxImage;

mod attached;
mod checks;
pub mod enforce;
pub mod offline_image;
mod ssh;

/// Where the Docker client connects when nothing else says.
pub use super::endpoint::DEFAULT_DOCKER_HOST;

/// Where the Docker client connects: `DOCKER_HOST`, or the default socket.
pub fn docker_host() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned())
}

/// An engine that speaks the Docker Engine API (Docker, or Podman's compatible service), reached at
/// its [`Endpoint`].
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    endpoint: Endpoint,
}

impl DockerRuntime {
    /// Waits (at most [`REMOVAL_WAIT`]) for a removal already in progress to complete.
    async fn await_removal(&self, container: &str) -> Result<Removal> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("removed")
            .build();
        let mut stream = self.docker.wait_container(container, Some(options));
        match tokio::time::timeout(REMOVAL_WAIT, stream.next()).await {
            Err(_) => Err(RuntimeError::Engine {
                container: container.to_owned(),
                operation: "remove",
                detail: format!(
                    "another removal of it was in progress and had not completed after {}s",
                    REMOVAL_WAIT.as_secs()
                ),
            }),
            Ok(Some(Err(error))) if is_status(&error, 404) => Ok(Removal::AlreadyGone),
            // It was there when asked and is gone now.
            Ok(Some(Ok(_)) | None | Some(Err(BollardError::DockerContainerWaitError { .. }))) => {
                Ok(Removal::Removed)
            }
            Ok(Some(Err(error))) => Err(engine_error(container, "remove", error)),
        }
    }

    /// Connects to the Docker engine the environment names (`DOCKER_HOST`, the docker context,
    /// else the local socket) and pings it.
    pub async fn connect() -> Result<DockerRuntime> {
        DockerRuntime::connect_to(&endpoint_from_environment(Engine::Docker, None)?).await
    }

    /// Connects to `endpoint` and pings the engine, so an unreachable daemon is reported here, by
    /// name.
    pub async fn connect_to(endpoint: &Endpoint) -> Result<DockerRuntime> {
        let runtime = DockerRuntime::unconnected_to(endpoint).map_err(|detail| {
            RuntimeError::Unreachable {
                engine: endpoint.engine,
                endpoint: Some(endpoint.host.clone()),
                detail,
            }
        })?;
        if let Err(error) = runtime.docker.ping().await {
            return Err(socket_denied(&endpoint.host).unwrap_or_else(|| {
                RuntimeError::Unreachable {
                    engine: endpoint.engine,
                    endpoint: Some(endpoint.host.clone()),
                    detail: error.to_string(),
                }
            }));
        }
        Ok(runtime)
    }

    /// The engine's client as the environment describes it, without reaching the engine: `stet
    /// doctor`'s checks do; `Err` says why no client could be made.
    pub fn unconnected() -> std::result::Result<DockerRuntime, String> {
        let endpoint =
            endpoint_from_environment(Engine::Docker, None).map_err(|error| error.to_string())?;
        DockerRuntime::unconnected_to(&endpoint)
    }

    /// A client for `endpoint`, without reaching the engine; `Err` says why none could be made.
    pub fn unconnected_to(endpoint: &Endpoint) -> std::result::Result<DockerRuntime, String> {
        let docker = match &endpoint.tls {
            Some(tls) => Docker::connect_with_ssl(
                &endpoint.host,
                &tls.key(),
                &tls.cert(),
                &tls.ca(),
                CLIENT_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            ),
            None if let Some(target) = endpoint.ssh() => ssh::client(target, CLIENT_TIMEOUT_SECS),
            None if endpoint.host.starts_with("unix://") => Docker::connect_with_unix(
                &endpoint.host,
                CLIENT_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            ),
            None => Docker::connect_with_http(
                &endpoint.host,
                CLIENT_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            ),
        }
        .map_err(|error| error.to_string())?;
        Ok(DockerRuntime {
            docker,
            endpoint: endpoint.clone(),
        })
    }

    /// The engine client, for callers that need more than the sandbox seam (the tests).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Where and which engine this is.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// The engine's spec of an exec of `process`, its stdout and stderr attached, and its stdin when
/// `stdin` (the channel stream's relay); never a terminal. The environment's secrets go only here.
pub(super) fn exec_config(process: &SandboxProcess, stdin: bool) -> ExecConfig {
    let env = process
        .env
        .iter()
        .map(|(key, value)| format!("{key}={}", value.expose_secret()))
        .collect();
    ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        attach_stdin: Some(stdin),
        tty: Some(false),
        cmd: Some(process.argv.clone()),
        env: Some(env),
        working_dir: Some(process.workdir.clone()),
        ..Default::default()
    }
}

/// The endpoint for `engine` at `configured` (else as the environment says), for this account.
pub fn endpoint_from_environment(engine: Engine, configured: Option<&str>) -> Result<Endpoint> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    super::endpoint::resolve(
        engine,
        configured,
        &|name| std::env::var(name).ok(),
        home.as_deref(),
        rustix::process::geteuid().as_raw(),
    )
    .map_err(RuntimeError::from)
}

/// How long one request to the engine may wait for its answer's headers (bollard's default).
const CLIENT_TIMEOUT_SECS: u64 = 120;

#[async_trait]
impl RuntimeSetup for DockerRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Docker
    }

    async fn offline_image(&self, binary: &Path) -> crate::image::Result<SandboxImage> {
        offline_image::build_local(&self.docker, binary).await
    }

    async fn diagnose(&self, binary: &Path) -> Vec<Check> {
        checks::engine_checks(self, binary).await
    }

    async fn check_limits(&self, image: &ImageRef, limits: &DispatchLimits) -> Result<()> {
        DockerRuntime::check_limits(self, image, limits).await
    }

    async fn check_limits_as(
        &self,
        name: &str,
        image: &ImageRef,
        limits: &DispatchLimits,
    ) -> Result<()> {
        DockerRuntime::check_limits_as(self, name, image, limits).await
    }

    async fn fingerprint(&self) -> Option<String> {
        let info = self.docker.info().await.ok()?;
        let id = info.id.filter(|id| !id.is_empty())?;
        let shown = |value: Option<String>| value.unwrap_or_else(|| "?".to_owned());
        Some(format!(
            "{} at {}; id {id}; version {}; driver {}; cgroup driver {}; cgroup v{}; kernel {}; memory {:?} swap {:?} pids {:?} cfs quota {:?}; security {}",
            self.endpoint.engine.as_str(),
            self.endpoint.host,
            shown(info.server_version),
            shown(info.driver),
            shown(info.cgroup_driver.map(|driver| driver.to_string())),
            shown(info.cgroup_version.map(|version| version.to_string())),
            shown(info.kernel_version),
            info.memory_limit,
            info.swap_limit,
            info.pids_limit,
            info.cpu_cfs_quota,
            info.security_options.unwrap_or_default().join(","),
        ))
    }

    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    async fn image_present(&self, image: &ImageRef) -> std::result::Result<bool, String> {
        match self.docker.inspect_image(image.as_str()).await {
            Ok(_) => Ok(true),
            Err(error) if is_status(&error, 404) => Ok(false),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// [`RuntimeError::SocketDenied`] when `host` is a unix socket this account may not connect to
/// (present, but open only to a group the account is not in).
pub fn socket_denied(host: &str) -> Option<RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let socket = Path::new(host.strip_prefix("unix://")?);
    let refused = std::os::unix::net::UnixStream::connect(socket).err()?;
    if refused.kind() != std::io::ErrorKind::PermissionDenied {
        return None;
    }
    let gid = std::fs::metadata(socket).ok()?.gid();
    Some(RuntimeError::SocketDenied {
        socket: socket.to_owned(),
        uid: rustix::process::geteuid().as_raw(),
        group: super::name_for_id(
            &std::fs::read_to_string("/etc/group").unwrap_or_default(),
            gid,
        ),
    })
}

/// The hardened container configuration of a sandbox. Pure: unit-tested for what is set and for
/// what is never set (no privilege, no host namespaces, no Docker socket, no other mounts).
pub fn hardened_create_body(spec: &SandboxSpec) -> Result<ContainerCreateBody> {
    if spec.user.uid == 0 || spec.user.gid == 0 {
        return Err(RuntimeError::RootUser);
    }
    if spec.mounts == MountMode::Bind {
        check_mount_source(&spec.workspace)?;
        check_mount_source(&spec.outputs)?;
    }
    if let Some(gateway) = &spec.gateway {
        check_mount_source(gateway)?;
    }
    let (entrypoint, cmd) = match spec.keepalive.split_first() {
        Some((program, args)) => (vec![program.clone()], args.to_vec()),
        None => {
            return Err(RuntimeError::Engine {
                container: spec.container_name(),
                operation: "create",
                detail: "the sandbox has no keepalive process".to_owned(),
            });
        }
    };
    let user = format!("{}:{}", spec.user.uid, spec.user.gid);
    let tmpfs_options = |mode: &str| {
        format!(
            "rw,nosuid,nodev,size={},uid={},gid={},mode={mode}",
            spec.limits.tmpfs_bytes, spec.user.uid, spec.user.gid
        )
    };
    let bind = |source: &Path, target: &str, read_only: bool| Mount {
        target: Some(target.to_owned()),
        source: Some(source.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    };
    // Copy mode: an anonymous volume of the local driver, a size-bounded tmpfs owned by the sandbox
    // user, removed with the container (`v`); the engine's archive API reaches it, which it does not
    // a container's own tmpfs (Docker 20.10 archives the directory underneath, and refuses to write
    // into a container whose root file system is read-only anywhere but a volume).
    let volume = |target: &str| Mount {
        target: Some(target.to_owned()),
        typ: Some(MountType::VOLUME),
        read_only: Some(false),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            labels: Some(HashMap::from([(
                DISPATCH_LABEL.to_owned(),
                spec.dispatch.to_string(),
            )])),
            driver_config: Some(MountVolumeOptionsDriverConfig {
                name: Some("local".to_owned()),
                options: Some(HashMap::from([
                    ("type".to_owned(), "tmpfs".to_owned()),
                    ("device".to_owned(), "tmpfs".to_owned()),
                    (
                        "o".to_owned(),
                        format!(
                            "nosuid,nodev,size={},uid={},gid={},mode=0700",
                            spec.limits.file_bytes, spec.user.uid, spec.user.gid
                        ),
                    ),
                ])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut mounts = match spec.mounts {
        MountMode::Bind => vec![
            bind(&spec.workspace, WORKSPACE_MOUNT, false),
            bind(&spec.outputs, OUTPUTS_MOUNT, false),
        ],
        MountMode::Copy => vec![volume(WORKSPACE_MOUNT), volume(OUTPUTS_MOUNT)],
    };
    if let Some(gateway) = &spec.gateway {
        mounts.push(bind(gateway, GATEWAY_MOUNT, true));
    }
    let network_mode = match spec.network {
        NetworkPolicy::None => "none",
        NetworkPolicy::Bridge => "bridge",
    };
    Ok(ContainerCreateBody {
        image: Some(spec.image.as_str().to_owned()),
        entrypoint: Some(entrypoint),
        cmd: Some(cmd),
        user: Some(user),
        env: Some(vec![format!("HOME={SANDBOX_HOME}")]),
        working_dir: Some(WORKSPACE_MOUNT.to_owned()),
        hostname: Some("sandbox".to_owned()),
        labels: Some(
            [
                (DISPATCH_LABEL, Some(spec.dispatch.to_string())),
                (STATE_LABEL, Some(spec.state_label.clone())),
                (WARM_LABEL, spec.warm.clone()),
            ]
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), value?)))
            .collect(),
        ),
        attach_stdin: Some(false),
        open_stdin: Some(false),
        tty: Some(false),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some(network_mode.to_owned()),
            memory: Some(spec.limits.memory_bytes),
            memory_swap: Some(spec.limits.memory_bytes),
            nano_cpus: Some(spec.limits.nano_cpus),
            pids_limit: Some(spec.limits.pids),
            ulimits: Some(vec![bollard::models::ResourcesUlimits {
                name: Some("fsize".to_owned()),
                soft: Some(spec.limits.file_bytes),
                hard: Some(spec.limits.file_bytes),
            }]),
            cap_drop: Some(vec!["ALL".to_owned()]),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([
                ("/tmp".to_owned(), tmpfs_options("1777")),
                (SANDBOX_HOME.to_owned(), tmpfs_options("0700")),
            ])),
            privileged: Some(false),
            ipc_mode: Some("private".to_owned()),
            auto_remove: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A bind source must be an absolute, real directory (not a symlink an agent could have redirected).
fn check_mount_source(path: &Path) -> Result<()> {
    let problem = |problem| RuntimeError::MountSource {
        path: path.to_owned(),
        problem,
    };
    if !path.is_absolute() {
        return Err(problem("a sandbox mount must be an absolute path"));
    }
    let metadata =
        std::fs::symlink_metadata(path).map_err(|_| problem("a sandbox mount must exist"))?;
    if metadata.file_type().is_symlink() {
        return Err(problem("a sandbox mount must not be a symbolic link"));
    }
    if !metadata.is_dir() {
        return Err(problem("a sandbox mount must be a directory"));
    }
    Ok(())
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

impl DockerRuntime {
    /// Whether the engine reported an OOM kill in `container` since `since` (unix seconds).
    async fn oom_since(&self, container: &str, since: u64) -> Result<bool> {
        let filters = HashMap::from([("container", vec![container]), ("event", vec!["oom"])]);
        let options = EventsOptionsBuilder::default()
            .since(&since.to_string())
            .until(&(unix_seconds() + 1).to_string())
            .filters(&filters)
            .build();
        let mut events = self.docker.events(Some(options));
        let mut seen = false;
        while let Some(event) = events.next().await {
            event.map_err(|error| engine_error(container, "reading oom events", error))?;
            seen = true;
        }
        Ok(seen)
    }
}

/// The flags whose silent dropping by the engine would leave a sandbox unbounded.
/// How long a removal waits for another removal of the same container already in progress.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

const ENFORCED_FLAGS: [(&str, &str); 4] = [
    ("memory", "--memory"),
    ("swap", "--memory-swap"),
    ("pids", "--pids-limit"),
    ("cpu", "--cpus"),
];

fn dropped_limit(warnings: &[String]) -> Option<RuntimeError> {
    warnings.iter().find_map(|warning| {
        let lower = warning.to_ascii_lowercase();
        ENFORCED_FLAGS
            .iter()
            .find(|(word, _)| lower.contains(word))
            .map(|(_, flag)| RuntimeError::LimitNotEnforced {
                flag,
                warning: warning.clone(),
            })
    })
}

fn is_status(error: &BollardError, status: u16) -> bool {
    matches!(error, BollardError::DockerResponseServerError { status_code, .. } if *status_code == status)
}

fn engine_error(container: &str, operation: &'static str, error: BollardError) -> RuntimeError {
    RuntimeError::Engine {
        container: container.to_owned(),
        operation,
        detail: error.to_string(),
    }
}

fn classify_pull_error(image: &ImageRef, error: BollardError) -> RuntimeError {
    let detail = match &error {
        BollardError::DockerStreamError { error } => error.clone(),
        BollardError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let lower = detail.to_ascii_lowercase();
    let image_name = image.to_string();
    if ["unauthorized", "denied", "authentication required"]
        .iter()
        .any(|word| lower.contains(word))
    {
        RuntimeError::PullDenied {
            image: image_name,
            detail,
        }
    } else if lower.contains("not found") || lower.contains("manifest unknown") {
        RuntimeError::ImageNotFound {
            image: image_name,
            hint: format!(" and the registry does not have it ({detail})"),
        }
    } else {
        RuntimeError::Pull {
            image: image_name,
            detail,
        }
    }
}

#[async_trait]
impl ContainerRuntime for DockerRuntime {
    async fn ensure_image(
        &self,
        image: &ImageRef,
        progress: Option<mpsc::Sender<PullProgress>>,
    ) -> Result<()> {
        match self.docker.inspect_image(image.as_str()).await {
            Ok(_) => return Ok(()),
            Err(error) if is_status(&error, 404) => {}
            Err(error) => return Err(engine_error(image.as_str(), "inspecting the image", error)),
        }
        if let ImageRef::LocalId { id } = image {
            return Err(RuntimeError::ImageNotFound {
                image: id.clone(),
                hint: " (an image id cannot be pulled; build the offline image with `stet image build-local`)"
                    .to_owned(),
            });
        }
        let options = CreateImageOptionsBuilder::default()
            .from_image(image.as_str())
            .build();
        let mut stream = self.docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|error| classify_pull_error(image, error))?;
            if let Some(sender) = &progress {
                let detail = info.progress_detail.unwrap_or_default();
                let update = PullProgress {
                    layer: info.id,
                    status: info.status.unwrap_or_default(),
                    current_bytes: detail.current.and_then(|v| u64::try_from(v).ok()),
                    total_bytes: detail.total.and_then(|v| u64::try_from(v).ok()),
                };
                // A consumer that stopped listening does not stop the pull.
                let _ = sender.send(update).await;
            }
        }
        match self.docker.inspect_image(image.as_str()).await {
            Ok(_) => Ok(()),
            Err(error) => Err(classify_pull_error(image, error)),
        }
    }

    async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<String> {
        let name = spec.container_name();
        let mut body = hardened_create_body(spec)?;
        enforce::adjust_for_engine(&mut body, self.endpoint.engine);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|error| engine_error(&name, "create", error))?;
        if let Some(refused) = dropped_limit(&created.warnings) {
            self.remove(&name, true).await?;
            return Err(refused);
        }
        // By effect: what the engine recorded, not what it said (rootless Podman on cgroup v1
        // drops the caps without a warning in the API).
        let recorded = match self.docker.inspect_container(&name, None).await {
            Ok(inspected) => inspected.host_config.unwrap_or_default(),
            Err(error) => {
                let error = engine_error(&name, "inspect", error);
                self.remove(&name, true).await?;
                return Err(error);
            }
        };
        if let Err(refused) = self.refuse_unapplied(&recorded, &spec.limits).await {
            self.remove(&name, true).await?;
            return Err(refused);
        }
        if let Err(error) = self.docker.start_container(&name, None).await {
            let error = engine_error(&name, "start", error);
            self.remove(&name, true).await?;
            return Err(error);
        }
        Ok(name)
    }

    async fn exec(
        &self,
        container: &str,
        process: &SandboxProcess,
        output: mpsc::Sender<OutputChunk>,
    ) -> Result<ExecExit> {
        let started_at = unix_seconds();
        let config = exec_config(process, false);
        let created = self
            .docker
            .create_exec(container, config)
            .await
            .map_err(|error| engine_error(container, "exec create", error))?;
        let started = self
            .docker
            .start_exec(&created.id, None)
            .await
            .map_err(|error| engine_error(container, "exec start", error))?;
        if let StartExecResults::Attached {
            output: mut frames, ..
        } = started
        {
            while let Some(frame) = frames.next().await {
                let (stream, bytes) =
                    match frame.map_err(|error| engine_error(container, "exec output", error))? {
                        LogOutput::StdOut { message } | LogOutput::Console { message } => {
                            (OutputStream::Stdout, message)
                        }
                        LogOutput::StdErr { message } => (OutputStream::Stderr, message),
                        LogOutput::StdIn { .. } => continue,
                    };
                let chunk = OutputChunk {
                    stream,
                    bytes: bytes.to_vec(),
                };
                output
                    .send(chunk)
                    .await
                    .map_err(|_| RuntimeError::OutputClosed {
                        container: container.to_owned(),
                    })?;
            }
        }
        let inspected = self
            .docker
            .inspect_exec(&created.id)
            .await
            .map_err(|error| engine_error(container, "exec inspect", error))?;
        let code = inspected.exit_code.ok_or_else(|| RuntimeError::Engine {
            container: container.to_owned(),
            operation: "exec inspect",
            detail: "the engine reported no exit code".to_owned(),
        })?;
        // SIGKILL: the engine reports an `oom` event for the container when the OOM killer did it.
        let oom_killed = code == 137 && self.oom_since(container, started_at).await?;
        Ok(ExecExit { code, oom_killed })
    }

    async fn exec_attached(
        &self,
        container: &str,
        process: &SandboxProcess,
    ) -> Result<super::AttachedProcess> {
        attached::exec_attached(&self.docker, container, process).await
    }

    async fn kill(&self, container: &str) -> Result<()> {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match self.docker.kill_container(container, Some(options)).await {
            Ok(()) => Ok(()),
            // Gone already, or not running: either way nothing is left to kill.
            Err(error) if is_status(&error, 404) || is_status(&error, 409) => Ok(()),
            Err(error) => Err(engine_error(container, "kill", error)),
        }
    }

    async fn remove(&self, container: &str, force: bool) -> Result<Removal> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(force)
            .v(true)
            .build();
        match self.docker.remove_container(container, Some(options)).await {
            Ok(()) => Ok(Removal::Removed),
            Err(error) if is_status(&error, 404) => Ok(Removal::AlreadyGone),
            // Another removal (say, by a process killed half-way through its teardown) is under
            // way: the container is gone once it completes, which the engine tells us.
            Err(error)
                if is_status(&error, 409) && error.to_string().contains("already in progress") =>
            {
                self.await_removal(container).await
            }
            Err(error) => Err(engine_error(container, "remove", error)),
        }
    }

    async fn wait(&self, container: &str) -> Result<ContainerExit> {
        let mut stream = self.docker.wait_container(container, None);
        let code = match stream.next().await {
            Some(Ok(response)) => response.status_code,
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => code,
            Some(Err(error)) => return Err(engine_error(container, "wait", error)),
            None => {
                return Err(RuntimeError::Engine {
                    container: container.to_owned(),
                    operation: "wait",
                    detail: "the engine ended the wait without a status".to_owned(),
                });
            }
        };
        let inspected = self
            .docker
            .inspect_container(container, None)
            .await
            .map_err(|error| engine_error(container, "inspect", error))?;
        let oom_killed = inspected.state.and_then(|s| s.oom_killed).unwrap_or(false);
        Ok(ContainerExit { code, oom_killed })
    }

    fn location(&self) -> Option<super::endpoint::EngineLocation> {
        Some(self.endpoint.location())
    }

    async fn copy_in(
        &self,
        container: &str,
        path: &str,
        archive: mpsc::Receiver<bytes::Bytes>,
    ) -> Result<()> {
        let options = UploadToContainerOptionsBuilder::default()
            .path(path)
            .build();
        let chunks = futures_util::stream::unfold(archive, |mut archive| async move {
            archive.recv().await.map(|chunk| (chunk, archive))
        });
        self.docker
            .upload_to_container(container, Some(options), bollard::body_stream(chunks))
            .await
            .map_err(|error| engine_error(container, "copy in", error))
    }

    async fn copy_out(
        &self,
        container: &str,
        path: &str,
        archive: mpsc::Sender<bytes::Bytes>,
    ) -> Result<()> {
        // `<path>/.`: the directory's contents, named `./…`, not the directory under its own name.
        let contents = format!("{}/.", path.trim_end_matches('/'));
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(&contents)
            .build();
        let mut chunks = self
            .docker
            .download_from_container(container, Some(options));
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|error| engine_error(container, "copy out", error))?;
            if archive.send(chunk).await.is_err() {
                // The reader refused the stream and stopped: the refusal is its to report.
                break;
            }
        }
        Ok(())
    }

    async fn list_sandboxes(&self) -> Result<Vec<SandboxContainer>> {
        let filters = HashMap::from([("label", vec![DISPATCH_LABEL])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|error| engine_error("*", "list", error))?;
        Ok(containers
            .into_iter()
            .filter_map(|summary| {
                let name = summary.names?.first()?.trim_start_matches('/').to_owned();
                let labels = summary.labels?;
                let dispatch = labels.get(DISPATCH_LABEL)?.clone();
                let state_label = labels.get(STATE_LABEL).cloned();
                let state = summary.state.map(|s| s.to_string()).unwrap_or_default();
                Some(SandboxContainer {
                    name,
                    dispatch,
                    state_label,
                    state,
                    warm: labels.contains_key(WARM_LABEL),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
