//! `DispatchSandbox`: one dispatch's container, workspace, outputs directory and credential, and the
//! single teardown that reclaims them all (ADR-0018's guaranteed-cleanup pattern, rows 2 and 7).
//!
//! Every resource is journaled before it is created and released in the journal after it is gone, so
//! a crash at any point is cleaned up by the next launch's sweep. `teardown()` cascades container →
//! workspace → outputs → credential, keeps going past a failing step, reports the first error, and
//! runs once: later calls return the first report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::credential::{CredentialProvider, RevokeOutcome, ScopedCredential};
use crate::dispatch::copy_mode::{CopyError, Mounts, bring_back, copy_in};
use crate::dispatch::journal::{Journal, JournalEntry, JournalError, Resource};
use crate::dispatch::remove_tree::remove_tree;
use crate::dispatch::socket_dir::{SocketDirError, SocketPlace};
use crate::git::origin_guard::TransferBounds;
use crate::git::push::{PushError, fetch_commit_until};
use crate::git::workspace::{BaseLimits, Materialized, WorkspaceError, materialize_until};
use crate::runtime::{
    ContainerRuntime, DispatchLimits, ExecExit, ImageRef, NetworkPolicy, OUTPUTS_MOUNT,
    OutputChunk, PullProgress, Removal, RuntimeError, SandboxProcess, SandboxSpec, SandboxUser,
    WORKSPACE_MOUNT, state_label,
};
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;

/// Why a dispatch's sandbox could not be provisioned or used.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum SandboxError {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{path}: {operation}: {source}")]
    Io {
        path: PathBuf,
        operation: &'static str,
        source: std::io::Error,
    },
    #[error("materializing the workspace failed: {0}")]
    Workspace(#[from] WorkspaceError),
    #[error("materializing the workspace ended abnormally: {0}")]
    WorkspaceTask(String),
    #[error("minting the scoped credential failed: {0}")]
    Credential(#[from] crate::credential::CredentialError),
    #[error(
        "credential provider {0:?} hands out values that must never enter a sandbox; the host pushes with it instead"
    )]
    CredentialNotForSandbox(&'static str),
    #[error("fetching the base commit the repository lacks failed: {0}")]
    Fetch(#[from] PushError),
    #[error("provisioning was stopped before the sandbox was complete")]
    Stopped,
    #[error("the sandbox of {0} was already torn down")]
    TornDown(DispatchId),
    #[error(
        "{path} is a symbolic link: a dispatch's files must stay inside the state directory {state_dir}"
    )]
    OutsideStateDir { path: PathBuf, state_dir: PathBuf },
    #[error("the model gateway's socket directory {0}")]
    SocketDir(#[from] SocketDirError),
    #[error("copy mode: {0}")]
    Copy(#[from] CopyError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SandboxError>;

/// Where a dispatch keeps its files: `<state>/dispatches/<dispatch id>/{workspace,outputs}`, and
/// the model gateway's socket directory in the account's runtime directory (the socket's path must
/// stay short, whatever the state directory's is: [`crate::dispatch::socket_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPaths {
    /// The dispatch's own directory, parent of the two below.
    pub root: PathBuf,
    /// Bind-mounted read-write at [`crate::runtime::WORKSPACE_MOUNT`]: the agent's working tree.
    pub workspace: PathBuf,
    /// Bind-mounted read-write at [`crate::runtime::OUTPUTS_MOUNT`]: what the agent hands back.
    pub outputs: PathBuf,
    /// The gateway's socket directory (only for a dispatch with a gateway), journaled on its own.
    pub gateway: Option<PathBuf>,
}

impl SandboxPaths {
    /// The paths of `dispatch`, whose gateway socket (if it has one) goes in `sockets`.
    pub fn under(
        state_dir: &Path,
        sockets: Option<&SocketPlace>,
        dispatch: DispatchId,
    ) -> SandboxPaths {
        let root = state_dir.join(DISPATCHES_DIR).join(dispatch.to_string());
        SandboxPaths {
            workspace: root.join("workspace"),
            outputs: root.join("outputs"),
            gateway: sockets.map(|place| place.dispatch_dir(dispatch)),
            root,
        }
    }
}

/// The directory of the state that holds every dispatch's own directory.
pub const DISPATCHES_DIR: &str = "dispatches";

/// The dispatch's scoped credential: minted, journaled and revoked with the sandbox, used by the host
/// push, and handed to the sandbox's processes only when asked (the ADR's default path does not).
#[derive(Debug, Clone)]
pub struct CredentialRequest {
    /// The provider that mints and later revokes it.
    pub provider: Arc<dyn CredentialProvider>,
    /// The repository it is scoped to (`owner/name`).
    pub repository: String,
    /// The only branch it may push.
    pub branch: String,
    /// How long it lives.
    pub ttl: Duration,
    /// Put it in the environment of every process run in the sandbox (`STET_GIT_CREDENTIAL`).
    pub into_sandbox: bool,
}

/// The commit a workspace starts from: materialized from the user's repository with a disposable
/// `.git` of its own (never a worktree of theirs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSource {
    /// The user's repository the base is read from.
    pub repository: PathBuf,
    /// The commit the workspace is made from.
    pub base: CommitSha,
    /// Where to fetch `base` from (with the scoped credential) when the repository lacks it.
    pub fetch: Option<BaseFetch>,
    /// Bounds on the base, checked before any of its files is read.
    pub limits: BaseLimits,
}

/// The forge URL and branch a missing base commit is fetched from; no ref is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseFetch {
    /// The forge's git URL of the repository.
    pub url: String,
    /// The branch whose tip holds the base commit.
    pub branch: String,
}

/// Everything needed to provision one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxRequest {
    /// The dispatch the sandbox belongs to.
    pub dispatch: DispatchId,
    /// The image the sandbox runs.
    pub image: ImageRef,
    /// The container's caps.
    pub limits: DispatchLimits,
    /// Whether the sandbox gets a network.
    pub network: NetworkPolicy,
    /// The uid:gid its processes run as.
    pub user: SandboxUser,
    /// The container's main process, idle while the agent is exec'd into it.
    pub keepalive: Vec<String>,
    /// What the workspace holds when the agent starts; `None` leaves it empty.
    pub workspace_source: Option<WorkspaceSource>,
    /// Where to make the model gateway's socket directory, mounted (read-only) in the sandbox;
    /// `None`: the dispatch has no gateway.
    pub gateway: Option<SocketPlace>,
    /// The dispatch's push credential; `None`: the dispatch mints none.
    pub credential: Option<CredentialRequest>,
    /// Bind mounts, or copies through the engine's archive API (`[runtime] mounts`).
    pub mounts: Mounts,
}

/// Provisioning failed: why, and the teardown of what it had created (`None` when it failed before
/// creating anything).
#[derive(Debug)]
pub(crate) struct ProvisionFailure {
    pub error: SandboxError,
    pub teardown: Option<TeardownReport>,
}

impl ProvisionFailure {
    fn before_anything(error: SandboxError) -> ProvisionFailure {
        ProvisionFailure {
            error,
            teardown: None,
        }
    }
}

/// How one teardown step went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownStep {
    /// What the step removed or revoked.
    pub resource: Resource,
    /// `None` when the step succeeded; otherwise what went wrong (credential-free).
    pub failure: Option<String>,
}

/// What a teardown did, step by step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TeardownReport {
    /// Every step, in the order taken.
    pub steps: Vec<TeardownStep>,
    /// The journal record could not be closed (something is still outstanding, or the write failed).
    pub journal_failure: Option<String>,
    /// The dispatch's directory could not be removed once its contents were gone.
    pub directory_failure: Option<String>,
}

impl TeardownReport {
    /// The first failure, if any step failed.
    pub fn first_failure(&self) -> Option<&str> {
        self.steps
            .iter()
            .find_map(|step| step.failure.as_deref())
            .or(self.journal_failure.as_deref())
            .or(self.directory_failure.as_deref())
    }
}

/// One dispatch's sandbox.
#[derive(Debug)]
pub struct DispatchSandbox {
    dispatch: DispatchId,
    runtime: Arc<dyn ContainerRuntime>,
    container: String,
    paths: SandboxPaths,
    credential: Option<Arc<ScopedCredential>>,
    /// Whether processes run in the sandbox receive the credential.
    inject_credential: bool,
    /// `Some` until the teardown ran.
    state: Mutex<Option<JournalEntry>>,
    report: Mutex<Option<TeardownReport>>,
    /// Steps released before the teardown (the agent's container and files, once the result is
    /// collected); the teardown's report starts with them.
    released_early: Mutex<Vec<TeardownStep>>,
    /// What the workspace's base put on disk, when one was materialized.
    base: Option<Materialized>,
    /// How the workspace and outputs reach the container.
    mounts: Mounts,
    /// Who owns what is copied in.
    user: SandboxUser,
    /// Copy mode: whether the outputs directory (the harness's staged files) was copied in.
    outputs_copied: AtomicBool,
}

impl DispatchSandbox {
    /// Creates the workspace, the outputs directory, the credential and the container, journaling each
    /// before it exists. On failure everything created so far is torn down before the error returns.
    pub async fn provision(
        runtime: Arc<dyn ContainerRuntime>,
        journal: &Journal,
        state_dir: &Path,
        request: SandboxRequest,
    ) -> Result<DispatchSandbox> {
        let never = CancellationToken::new();
        DispatchSandbox::provision_until(runtime, journal, state_dir, request, &never, None)
            .await
            .map_err(|failure| failure.error)
    }

    /// [`DispatchSandbox::provision`] that stops between steps (and during an image pull) once `stop`
    /// is cancelled: what exists by then is torn down and [`SandboxError::Stopped`] returned. A failure
    /// carries the report of the teardown that followed it, so the caller can show what was reclaimed.
    /// An image pull reports its progress to `pull_progress`.
    pub(crate) async fn provision_until(
        runtime: Arc<dyn ContainerRuntime>,
        journal: &Journal,
        state_dir: &Path,
        request: SandboxRequest,
        stop: &CancellationToken,
        pull_progress: Option<mpsc::Sender<PullProgress>>,
    ) -> std::result::Result<DispatchSandbox, ProvisionFailure> {
        let paths = SandboxPaths::under(state_dir, request.gateway.as_ref(), request.dispatch);
        refuse_links_below(state_dir, &paths.root).map_err(ProvisionFailure::before_anything)?;
        if let Some(place) = &request.gateway {
            // A socket place that cannot be made private fails the dispatch before anything exists.
            place
                .prepare()
                .map_err(|error| ProvisionFailure::before_anything(error.into()))?;
        }
        let mut entry = journal
            .begin(request.dispatch)
            .map_err(|error| ProvisionFailure::before_anything(error.into()))?;
        let mut sandbox = DispatchSandbox {
            dispatch: request.dispatch,
            runtime,
            container: request.dispatch.to_string(),
            paths: paths.clone(),
            credential: None,
            inject_credential: request.credential.as_ref().is_some_and(|c| c.into_sandbox),
            state: Mutex::new(None),
            report: Mutex::new(None),
            released_early: Mutex::new(Vec::new()),
            base: None,
            mounts: request.mounts,
            user: request.user,
            outputs_copied: AtomicBool::new(false),
        };
        let provisioned = provision_steps(
            &mut entry,
            &mut sandbox,
            &request,
            state_dir,
            stop,
            pull_progress,
        )
        .await;
        *sandbox.state.lock().await = Some(entry);
        match provisioned {
            Ok(()) => Ok(sandbox),
            Err(error) => {
                let teardown = sandbox.teardown().await;
                Err(ProvisionFailure {
                    error,
                    teardown: Some(teardown),
                })
            }
        }
    }

    /// The container's name (`stet-dispatch-<uuid>`).
    pub fn container(&self) -> &str {
        &self.container
    }

    /// Where the dispatch keeps its files.
    pub fn paths(&self) -> &SandboxPaths {
        &self.paths
    }

    /// What the workspace's base put on disk, when one was materialized: it counts against the
    /// dispatch's disk bound from its first byte.
    pub fn base(&self) -> Option<Materialized> {
        self.base
    }

    /// The dispatch's scoped credential, for the host's push; revoked by [`DispatchSandbox::teardown`].
    pub fn credential(&self) -> Option<&Arc<ScopedCredential>> {
        self.credential.as_ref()
    }

    /// Runs `process` in the sandbox with the credential in its environment (never in argv); the
    /// caller's own environment wins on a collision, as the ADR says.
    pub async fn run(
        &self,
        process: &SandboxProcess,
        output: mpsc::Sender<OutputChunk>,
    ) -> Result<ExecExit> {
        if self.state.lock().await.is_none() {
            return Err(SandboxError::TornDown(self.dispatch));
        }
        let injected = self
            .credential
            .as_deref()
            .filter(|_| self.inject_credential);
        let merged = with_credential(process, injected);
        let Mounts::Copy(limits) = self.mounts else {
            return Ok(self.runtime.exec(&self.container, &merged, output).await?);
        };
        // Copy mode: the harness's staged files go in before the first process; after each, the
        // workspace and outputs come back for what reads them on the host.
        if !self.outputs_copied.swap(true, Ordering::SeqCst) {
            let (runtime, outputs) = (&self.runtime, &self.paths.outputs);
            copy_in(runtime, &self.container, outputs, OUTPUTS_MOUNT, self.user).await?;
        }
        let exit = self.runtime.exec(&self.container, &merged, output).await?;
        let copies = (&*self.paths.outputs, &*self.paths.workspace);
        bring_back(&self.runtime, &self.container, copies, limits).await?;
        Ok(exit)
    }

    /// Journals what the sweep needs to salvage the agent's work should this process die while
    /// the agent runs ([`crate::dispatch::salvage`]).
    pub(crate) async fn plan_salvage(
        &self,
        plan: crate::dispatch::salvage::SalvagePlan,
    ) -> std::result::Result<(), String> {
        match self.state.lock().await.as_mut() {
            Some(entry) => entry.plan_salvage(plan).map_err(|error| error.to_string()),
            None => Err(format!("{} is torn down", self.dispatch)),
        }
    }

    /// Removes the container and, with it, everything the agent still runs there (a process it
    /// left in the background included): once the agent's work is over nothing of it may run while
    /// the result is collected or reviewed. Its files stay for the import. Returns why it failed.
    pub async fn remove_container(&self) -> std::result::Result<(), String> {
        self.release_early(|resource| matches!(resource, Resource::Container { .. }))
            .await
    }

    /// Removes the workspace, the outputs and the socket directory once the result is collected
    /// (the review needs only the imported commit); left in place while the container is not gone.
    /// The credential stays for the host's push. Returns why it failed.
    pub async fn remove_agent_files(&self) -> std::result::Result<(), String> {
        self.release_early(|resource| {
            matches!(
                resource,
                Resource::Workspace { .. } | Resource::Outputs { .. } | Resource::SocketDir { .. }
            )
        })
        .await
    }

    /// Releases the outstanding resources `wanted` picks, in teardown order and journaled; what
    /// succeeded joins the teardown's report, what failed stays for the teardown to retry.
    async fn release_early(
        &self,
        wanted: impl Fn(&Resource) -> bool,
    ) -> std::result::Result<(), String> {
        let mut state = self.state.lock().await;
        let Some(entry) = state.as_mut() else {
            return Err(SandboxError::TornDown(self.dispatch).to_string());
        };
        let mut report = TeardownReport::default();
        let picked: Vec<Resource> = entry
            .outstanding()
            .iter()
            .filter(|resource| wanted(resource))
            .cloned()
            .collect();
        self.release_all(entry, picked, &mut report).await;
        if let Some(failure) = report.first_failure() {
            return Err(failure.to_owned());
        }
        self.released_early.lock().await.extend(report.steps);
        Ok(())
    }

    /// Releases `resources` in teardown order (container first: it holds the mounts; the
    /// credential last), crossing each off in `entry` once it is gone, into `report`.
    async fn release_all(
        &self,
        entry: &mut JournalEntry,
        mut resources: Vec<Resource>,
        report: &mut TeardownReport,
    ) {
        resources.sort_by_key(teardown_order);
        let mut container_failed = entry
            .outstanding()
            .iter()
            .any(|held| matches!(held, Resource::Container { .. }))
            && !resources
                .iter()
                .any(|resource| matches!(resource, Resource::Container { .. }));
        for resource in resources {
            let failure = match &resource {
                // The agent may still be running in a container that could not be removed: its
                // files stay (journaled) rather than be deleted under it.
                Resource::Workspace { .. }
                | Resource::Outputs { .. }
                | Resource::SocketDir { .. }
                    if container_failed =>
                {
                    Some("left in place because the container could not be removed".to_owned())
                }
                _ => self.release(&resource).await.err(),
            };
            if matches!(resource, Resource::Container { .. }) && failure.is_some() {
                container_failed = true;
            }
            if failure.is_none()
                && let Err(error) = entry.released(&resource)
            {
                report.journal_failure.get_or_insert(error.to_string());
            }
            if let Some(failure) = &failure {
                tracing::warn!(dispatch = %self.dispatch, ?resource, %failure, "teardown step failed");
            }
            report.steps.push(TeardownStep { resource, failure });
        }
    }

    /// Reaps the container, removes the workspace and the outputs, revokes the credential, and closes
    /// the journal record. Runs once; every later call returns the first report, which starts with
    /// what was released early.
    pub async fn teardown(&self) -> TeardownReport {
        let mut report_slot = self.report.lock().await;
        if let Some(report) = report_slot.as_ref() {
            return report.clone();
        }
        let mut report = TeardownReport {
            steps: std::mem::take(&mut *self.released_early.lock().await),
            ..TeardownReport::default()
        };
        let mut entry = self.state.lock().await.take();
        if let Some(entry) = entry.as_mut() {
            let outstanding = entry.outstanding().to_vec();
            self.release_all(entry, outstanding, &mut report).await;
        }
        if report.steps.iter().all(|step| step.failure.is_none()) {
            let removed =
                std::fs::remove_dir(&self.paths.root).or_else(|error| match error.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(error),
                });
            if let Err(error) = removed {
                report.directory_failure = Some(format!("{}: {error}", self.paths.root.display()));
            }
        }
        if let Some(entry) = entry
            && report.first_failure().is_none()
            && let Err(error) = entry.close()
        {
            report.journal_failure = Some(error.to_string());
        }
        tracing::info!(dispatch = %self.dispatch, steps = report.steps.len(), failed = report.first_failure().is_some(), "sandbox torn down");
        *report_slot = Some(report.clone());
        report
    }

    async fn release(&self, resource: &Resource) -> std::result::Result<(), String> {
        match resource {
            Resource::Container { name, .. } => self
                .runtime
                .remove(name, true)
                .await
                .map(|_: Removal| ())
                .map_err(|e| e.to_string()),
            Resource::Workspace { path }
            | Resource::Outputs { path }
            | Resource::SocketDir { path } => {
                // A large tree takes a while: off the async workers.
                let path = path.clone();
                tokio::task::spawn_blocking(move || remove_tree(&path).map_err(|e| e.to_string()))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Resource::Credential { .. } => match &self.credential {
                Some(credential) => match credential.revoke().await {
                    RevokeOutcome::Revoked
                    | RevokeOutcome::AlreadyRevoked
                    | RevokeOutcome::NotRevocable => Ok(()),
                    RevokeOutcome::Failed(detail) => Err(detail),
                },
                None => Ok(()),
            },
        }
    }
}

/// `process` with the credential's environment added; the process's own entries win on a collision.
fn with_credential(
    process: &SandboxProcess,
    credential: Option<&ScopedCredential>,
) -> SandboxProcess {
    let mut merged = process.clone();
    if let Some(credential) = credential {
        for (key, value) in credential.as_environment() {
            merged.env.entry(key).or_insert(value);
        }
    }
    merged
}

/// Teardown order: the container holds the mounts, so it goes first; the credential last.
pub(crate) fn teardown_order(resource: &Resource) -> u8 {
    match resource {
        Resource::Container { .. } => 0,
        Resource::Workspace { .. } => 1,
        Resource::Outputs { .. } => 2,
        Resource::SocketDir { .. } => 3,
        Resource::Credential { .. } => 4,
    }
}

async fn provision_steps(
    entry: &mut JournalEntry,
    sandbox: &mut DispatchSandbox,
    request: &SandboxRequest,
    state_dir: &Path,
    stop: &CancellationToken,
    pull_progress: Option<mpsc::Sender<PullProgress>>,
) -> Result<()> {
    let stopped = || {
        if stop.is_cancelled() {
            Err(SandboxError::Stopped)
        } else {
            Ok(())
        }
    };
    if let Some(wanted) = &request.credential
        && wanted.into_sandbox
        && !wanted.provider.enters_sandbox()
    {
        return Err(SandboxError::CredentialNotForSandbox(
            wanted.provider.name(),
        ));
    }
    stopped()?;
    // The credential comes first: fetching a base commit the repository lacks needs it.
    if let Some(wanted) = &request.credential {
        // The provider names the credential only when it mints it; a crash between the two leaves a
        // credential that expires at its TTL (docs/security.md).
        let credential = ScopedCredential::mint(
            Arc::clone(&wanted.provider),
            &wanted.repository,
            &wanted.branch,
            wanted.ttl,
        )
        .await?;
        let journaled = entry.intend(Resource::Credential {
            provider: wanted.provider.name().to_owned(),
            id: credential.id().clone(),
        });
        if let Err(error) = journaled {
            // Not journaled, so no teardown would find it: revoke it now.
            credential.revoke().await;
            return Err(error.into());
        }
        let (kind, enters) = (credential.kind(), credential.enters_sandbox());
        // Kept before any refusal: the teardown revokes what the sandbox holds.
        sandbox.credential = Some(Arc::new(credential));
        if wanted.into_sandbox && !enters {
            // The provider allows sandboxes, but this value is the primary token standing in.
            return Err(SandboxError::CredentialNotForSandbox(kind));
        }
    }
    stopped()?;
    let workspace = sandbox.paths.workspace.clone();
    entry.intend(Resource::Workspace {
        path: workspace.clone(),
    })?;
    // Every directory on the way is private too (an older stet made them readable to all).
    create_private_dir(&state_dir.join(DISPATCHES_DIR))?;
    create_private_dir(&sandbox.paths.root)?;
    create_private_dir(&workspace)?;
    if let Some(source) = request.workspace_source.clone() {
        // Materialized while the directory is still stet's own (libgit2 refuses a directory owned by
        // someone else); every entry inside is handed to the sandbox user as it is written.
        let (destination, owner) = (workspace.clone(), request.user);
        let credential = sandbox.credential.clone();
        // Provisioning waits for the materialization: told of a stop (cancel or timeout), it ends at
        // the next entry or MiB, its git processes with it, and the teardown removes what it wrote.
        let stop = stop.clone();
        let materialized = tokio::task::spawn_blocking(move || {
            if let Some(fetch) = &source.fetch
                && !has_commit(&source.repository, &source.base)
            {
                match fetch_commit_until(
                    &source.repository,
                    &fetch.url,
                    &fetch.branch,
                    &source.base,
                    credential.as_deref(),
                    TransferBounds::default(),
                    &stop,
                ) {
                    Err(PushError::Stopped { .. }) => return Err(SandboxError::Stopped),
                    fetched => fetched?,
                }
            }
            let stopped = || stop.is_cancelled();
            match materialize_until(
                &source.repository,
                &source.base,
                &destination,
                owner,
                &source.limits,
                &stopped,
            ) {
                Err(WorkspaceError::Stopped { .. }) => Err(SandboxError::Stopped),
                materialized => Ok::<_, SandboxError>(materialized?),
            }
        })
        .await
        .map_err(|error| SandboxError::WorkspaceTask(error.to_string()))??;
        tracing::info!(dispatch = %request.dispatch, files = materialized.files, bytes = materialized.bytes, "workspace materialized");
        sandbox.base = Some(materialized);
    }
    hand_over(&workspace, request.user)?;
    stopped()?;
    entry.intend(Resource::Outputs {
        path: sandbox.paths.outputs.clone(),
    })?;
    create_private_dir(&sandbox.paths.outputs)?;
    hand_over(&sandbox.paths.outputs, request.user)?;
    if let Some(place) = &request.gateway {
        let dir = place.dispatch_dir(request.dispatch);
        let resource = Resource::SocketDir { path: dir.clone() };
        entry.intend(resource.clone())?;
        if let Err(error) = place.create_dispatch_dir(request.dispatch) {
            if matches!(error, SocketDirError::Taken { .. }) {
                // Not made by this dispatch: its teardown must leave it where it is.
                entry.released(&resource)?;
            }
            return Err(error.into());
        }
        if request.mounts.shares_sockets() {
            hand_over(&dir, request.user)?;
        }
    }
    stopped()?;
    tokio::select! {
        pulled = sandbox.runtime.ensure_image(&request.image, pull_progress) => pulled?,
        () = stop.cancelled() => return Err(SandboxError::Stopped),
    }
    // A stop that landed as the pull completed: no container is created after it.
    stopped()?;
    let spec = SandboxSpec {
        dispatch: request.dispatch,
        image: request.image.clone(),
        workspace: sandbox.paths.workspace.clone(),
        outputs: sandbox.paths.outputs.clone(),
        mounts: request.mounts.mode(),
        gateway: request.mounts.socket_mount(&sandbox.paths.gateway),
        limits: request.limits,
        network: request.network,
        user: request.user,
        keepalive: request.keepalive.clone(),
        state_label: state_label(state_dir),
    };
    entry.intend(Resource::Container {
        name: spec.container_name(),
        engine: sandbox.runtime.location(),
    })?;
    sandbox.runtime.create_sandbox(&spec).await?;
    if matches!(request.mounts, Mounts::Copy(_)) {
        let (runtime, container) = (&sandbox.runtime, &sandbox.container);
        stopped()?;
        let (workspace, user) = (&sandbox.paths.workspace, request.user);
        copy_in(runtime, container, workspace, WORKSPACE_MOUNT, user).await?;
    }
    Ok(())
}

/// Whether `repository` holds `commit` (an unreadable repository counts as not holding it; the
/// materialization that follows names the real problem).
fn has_commit(repository: &Path, commit: &CommitSha) -> bool {
    git2::Repository::open(repository)
        .ok()
        .and_then(|repo| {
            let oid = git2::Oid::from_str(commit.as_str()).ok()?;
            repo.find_commit(oid).ok().map(|_| ())
        })
        .is_some()
}

/// Refuses when any existing component from `state_dir` down to `path` is a symbolic link, which
/// would put a dispatch's files (and the container's bind mounts) somewhere else.
fn refuse_links_below(state_dir: &Path, path: &Path) -> Result<()> {
    let Ok(relative) = path.strip_prefix(state_dir) else {
        return Err(SandboxError::OutsideStateDir {
            path: path.to_owned(),
            state_dir: state_dir.to_owned(),
        });
    };
    let mut current = state_dir.to_owned();
    for component in relative.components() {
        current.push(component);
        let is_link = std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            return Err(SandboxError::OutsideStateDir {
                path: current,
                state_dir: state_dir.to_owned(),
            });
        }
    }
    Ok(())
}

fn io_error(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io {
        path: path.to_owned(),
        operation,
        source,
    }
}

/// Creates `path` (and its parents), readable by its owner only.
fn create_private_dir(path: &Path) -> Result<()> {
    crate::private_files::create_dir_all(path).map_err(|error| SandboxError::Io {
        path: error.path,
        operation: "creating the directory",
        source: error.source,
    })
}

/// Hands the directory to the sandbox user when it is not theirs already (stet runs as root).
/// Makes `path` the sandbox user's (a no-op when it already is, e.g. stet not running as root).
pub(crate) fn hand_over(path: &Path, user: SandboxUser) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(path).map_err(io_error(path, "reading its owner"))?;
    if owner.uid() != user.uid || owner.gid() != user.gid {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
            .map_err(io_error(path, "handing it to the sandbox user"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_credential_joins_the_env_and_the_callers_own_value_wins() {
        use crate::credential::{CREDENTIAL_ENV, LocalCredentialProvider, SecretValue};
        let provider = Arc::new(LocalCredentialProvider::default());
        let credential = ScopedCredential::mint(provider, "o/r", "b", Duration::from_secs(60))
            .await
            .unwrap();
        let minted = credential.as_environment()[CREDENTIAL_ENV].clone();
        let plain = SandboxProcess {
            argv: vec!["x".into()],
            ..SandboxProcess::default()
        };
        let merged = with_credential(&plain, Some(&credential));
        assert_eq!(merged.env[CREDENTIAL_ENV], minted);
        assert_eq!(merged.argv, plain.argv, "argv is untouched");

        let mut own = plain.clone();
        own.env.insert(
            CREDENTIAL_ENV.into(),
            SecretValue::new("callers-own".into()),
        );
        let merged = with_credential(&own, Some(&credential));
        assert_eq!(merged.env[CREDENTIAL_ENV].expose_secret(), "callers-own");
        assert!(with_credential(&plain, None).env.is_empty());
    }

    #[test]
    fn a_symlinked_directory_below_the_state_dir_is_refused() {
        let state = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let paths = SandboxPaths::under(state.path(), None, DispatchId::new());
        refuse_links_below(state.path(), &paths.root).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), state.path().join("dispatches")).unwrap();
        let error = refuse_links_below(state.path(), &paths.root)
            .unwrap_err()
            .to_string();
        assert!(error.contains("dispatches is a symbolic link"), "{error}");
        let outside = refuse_links_below(state.path(), elsewhere.path()).unwrap_err();
        assert!(matches!(outside, SandboxError::OutsideStateDir { .. }));
    }

    #[test]
    fn teardown_goes_container_first_and_credential_last() {
        let mut resources = [
            Resource::Credential {
                provider: "local".into(),
                id: crate::credential::CredentialId::new("c".into()),
            },
            Resource::SocketDir { path: "/s".into() },
            Resource::Outputs { path: "/o".into() },
            Resource::Container {
                name: "n".into(),
                engine: None,
            },
            Resource::Workspace { path: "/w".into() },
        ];
        resources.sort_by_key(teardown_order);
        assert!(matches!(resources[0], Resource::Container { .. }));
        assert!(matches!(resources[4], Resource::Credential { .. }));
    }
}
