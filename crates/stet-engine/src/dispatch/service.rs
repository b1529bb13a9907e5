//! `DispatchService`: the engine's long-lived part. It holds what every dispatch shares (the runtime,
//! the journal, the state directory, the credential providers; each dispatch runs in
//! `dispatch::run`) and reclaims what crashed dispatches left behind (`sweep_orphans`, ADR-0018 row 7
//! and DESIGN §5 row 14).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::forge::Forge;
use crate::forge::protected::ProtectedPaths;
use crate::git::import::{Identity, ImportLimits};
use crate::git::workspace::BaseLimits;
use crate::harness::Harness;
use crate::runtime::{DispatchLimits, ImageRef, NetworkPolicy, SandboxUser};
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use crate::credential::{CredentialProvider, Revocation};
use crate::dispatch::journal::{Journal, JournalError, Resource};
use crate::dispatch::salvage::{Outcome, SalvagePlan, kept_before, salvage};
use crate::dispatch::sandbox::{DISPATCHES_DIR, SandboxPaths};
use crate::dispatch::socket_dir::SocketPlace;
use crate::runtime::endpoint::EngineLocation;
use crate::runtime::{ContainerRuntime, Removal, RuntimeError, state_label};
use stet_protocol::event::DispatchId;

/// Why a sweep of orphaned resources could not run.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ServiceError {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ServiceError>;

/// What a sweep reclaimed, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Sandbox containers the sweep removed, by name.
    pub containers_removed: Vec<String>,
    /// Journaled containers Docker no longer had (removed as their dispatch was killed, or by hand).
    pub containers_already_gone: Vec<String>,
    /// Dispatch directories the sweep removed.
    pub directories_removed: Vec<PathBuf>,
    /// Credentials the sweep revoked, by id.
    pub credentials_revoked: Vec<String>,
    /// Credentials no provider here can revoke (minted by a process that is gone, or by a provider
    /// that cannot revoke): they expire at their TTL.
    pub credentials_left_to_expire: Vec<String>,
    /// Orphaned journal records closed because nothing they list is left.
    pub records_closed: usize,
    /// Steps that failed; their records stay in the journal for the next sweep.
    pub failures: Vec<String>,
    /// What the sweep said of the agent's work in crashed dispatches it reclaimed: kept (salvaged,
    /// incomplete, never pushed), nothing to keep, or refused by the import.
    pub salvage: Vec<String>,
}

impl SweepReport {
    /// Whether the sweep found nothing to do.
    pub fn is_empty(&self) -> bool {
        self.containers_removed.is_empty()
            && self.containers_already_gone.is_empty()
            && self.directories_removed.is_empty()
            && self.credentials_revoked.is_empty()
            && self.credentials_left_to_expire.is_empty()
            && self.records_closed == 0
            && self.failures.is_empty()
            && self.salvage.is_empty()
    }
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "nothing to sweep: no dispatch left anything behind");
        }
        for salvage in &self.salvage {
            writeln!(f, "{salvage}")?;
        }
        for name in &self.containers_removed {
            writeln!(f, "removed container {name}")?;
        }
        for name in &self.containers_already_gone {
            writeln!(f, "container {name} was already gone")?;
        }
        for dir in &self.directories_removed {
            writeln!(f, "removed {}", dir.display())?;
        }
        for credential in &self.credentials_revoked {
            writeln!(f, "revoked credential {credential}")?;
        }
        for credential in &self.credentials_left_to_expire {
            writeln!(
                f,
                "credential {credential} cannot be revoked from here; it expires at its TTL"
            )?;
        }
        if self.records_closed > 0 {
            writeln!(f, "closed {} journal record(s)", self.records_closed)?;
        }
        for failure in &self.failures {
            writeln!(f, "could not clean up: {failure}")?;
        }
        Ok(())
    }
}

/// How every dispatch of an engine runs.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// The image every sandbox runs.
    pub image: ImageRef,
    /// The container caps every sandbox gets.
    pub limits: DispatchLimits,
    /// Whether sandboxes get a network.
    pub network: NetworkPolicy,
    /// The uid:gid sandbox processes run as.
    pub user: SandboxUser,
    /// The container's main process (it only idles while the agent is exec'd into it).
    pub keepalive: Vec<String>,
    /// Bind mounts, or copies through the engine's archive API (`[runtime] mounts`).
    pub mounts: crate::dispatch::copy_mode::Mounts,
    /// Wall-clock limit on the agent's work (preflight through collecting).
    pub timeout: Duration,
    /// The model cost a dispatch may reach, in US dollars; `None`: no ceiling.
    pub cost_ceiling_usd: Option<f64>,
    /// The cap on the agent's transcript in each run record.
    pub max_record_bytes: u64,
    /// How long a dispatch's push credential lives.
    pub credential_ttl: Duration,
    /// Author and committer of result commits.
    pub agent: Identity,
    /// Bounds on what the import reads from the workspace.
    pub import: ImportLimits,
    /// Bounds on the base a workspace is materialized from.
    pub base: BaseLimits,
    /// Paths whose change holds a result for review before it is pushed.
    pub protected: ProtectedPaths,
    /// The model gateway each dispatch runs; `None`: no model endpoint is configured.
    pub gateway: Option<GatewaySettings>,
    /// The egress proxy each dispatch runs; `None`: the agent reaches no host at all.
    pub egress: Option<crate::egress::EgressSettings>,
}

/// Where the model gateway forwards and with which key (which stays in stet's process).
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// The OpenAI-compatible upstream, e.g. `https://litellm.example/v1`.
    pub upstream: String,
    /// The key the gateway adds to upstream requests; `None` when the upstream takes none.
    pub api_key: Option<crate::credential::SecretValue>,
    /// Prices that turn token counts into dollars, for the cost ceiling.
    pub prices: Arc<crate::gateway::prices::PriceTable>,
    /// How long one forwarded request may take, from its arrival to the response's last byte.
    pub request_timeout: Duration,
    /// What one dispatch's agent can make the host hold through the gateway.
    pub limits: crate::gateway::GatewayLimits,
    /// The models and provider-executed tools the user allows the agent's requests.
    pub policy: Arc<crate::gateway::policy::RequestPolicy>,
}

/// What dispatches need beyond the sweep's parts: where results go and which agent runs.
#[derive(Debug, Clone)]
pub struct DispatchContext {
    /// The user's repository: the base is read from it and results are committed into it.
    pub repository: PathBuf,
    /// Where the result's branch is pushed and its pull request opened.
    pub forge: Arc<dyn Forge>,
    /// Mints the credential each push uses.
    pub credentials: Arc<dyn CredentialProvider>,
    /// The agent that runs in the sandbox.
    pub harness: Arc<dyn Harness>,
    /// The secret values the sanitizer masks, shared with the logs.
    pub sanitizer: SanitizerHandle,
    /// How every dispatch runs.
    pub settings: DispatchSettings,
}

/// The dispatch engine's shared parts. Cloned into every dispatch, so each runs as its own instance.
#[derive(Debug, Clone)]
pub struct DispatchService {
    runtime: Arc<dyn ContainerRuntime>,
    journal: Arc<Journal>,
    state_dir: PathBuf,
    providers: HashMap<String, Arc<dyn CredentialProvider>>,
    /// Containers of other installations (other state directories) are never swept from here.
    state_label: String,
    /// Where the model gateways' sockets go (short paths, whatever the state directory's length).
    sockets: SocketPlace,
    /// Idle sandboxes kept started (`[runtime] warm`); `None`: every sandbox is made fresh.
    pool: Option<Arc<crate::dispatch::pool::WarmPool>>,
}

impl DispatchService {
    /// A service over `runtime`, recording in `journal` under `state_dir`; the sweep revokes
    /// credentials through `providers`, by name.
    pub fn new(
        runtime: Arc<dyn ContainerRuntime>,
        journal: Arc<Journal>,
        state_dir: &Path,
        providers: Vec<Arc<dyn CredentialProvider>>,
    ) -> DispatchService {
        DispatchService {
            runtime,
            journal,
            state_dir: state_dir.to_owned(),
            providers: providers
                .into_iter()
                .map(|p| (p.name().to_owned(), p))
                .collect(),
            state_label: state_label(state_dir),
            sockets: SocketPlace::for_installation(state_dir),
            pool: None,
        }
    }

    /// The same service with its sandboxes claimed from `pool` when it has one of their shape.
    pub fn with_pool(mut self, pool: Arc<crate::dispatch::pool::WarmPool>) -> DispatchService {
        self.pool = Some(pool);
        self
    }

    /// The warm pool, when `[runtime] warm` keeps one.
    pub fn pool(&self) -> Option<&Arc<crate::dispatch::pool::WarmPool>> {
        self.pool.as_ref()
    }

    /// Removes the warm pool's idle containers and stops its refill (at shutdown, once every
    /// dispatch is torn down).
    pub async fn drain_pool(&self) {
        if let Some(pool) = &self.pool {
            pool.drain().await;
        }
    }

    /// The same service with its gateway sockets in `sockets` (tests; the default follows the
    /// process's `XDG_RUNTIME_DIR` and account).
    pub fn with_socket_place(mut self, sockets: SocketPlace) -> DispatchService {
        self.sockets = sockets;
        self
    }

    /// Where the model gateways' sockets go.
    pub fn socket_place(&self) -> &SocketPlace {
        &self.sockets
    }

    pub(crate) fn runtime(&self) -> Arc<dyn ContainerRuntime> {
        Arc::clone(&self.runtime)
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    pub(crate) fn journal_handle(&self) -> Arc<Journal> {
        Arc::clone(&self.journal)
    }

    pub(crate) fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Reclaims everything whose owner is gone: resources listed by orphaned journal records, and this
    /// installation's sandbox containers and dispatch directories of no live dispatch. Never touches a
    /// live dispatch of this or another stet process, nor another state directory's containers. Failed steps are reported and stay journaled for the next sweep.
    pub async fn sweep_orphans(&self) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let orphans = self.journal.orphans()?;
        report
            .failures
            .extend(orphans.problems.iter().map(|problem| problem.to_string()));
        for record in orphans.records {
            let mut entry = match self.journal.adopt(&record) {
                Ok(entry) => entry,
                Err(error) => {
                    report
                        .failures
                        .push(format!("{}: {error}", record.dispatch));
                    continue;
                }
            };
            // The same order as a teardown: the container (which holds the mounts) first.
            let mut outstanding = entry.outstanding().to_vec();
            outstanding.sort_by_key(crate::dispatch::sandbox::teardown_order);
            let plan = entry.salvage_plan().cloned();
            let workspace_left = outstanding
                .iter()
                .any(|resource| matches!(resource, Resource::Workspace { .. }));
            if let (Some(plan), false) = (&plan, workspace_left) {
                // Past collecting: the result the collect kept is what a person gets back.
                self.kept_before(record.dispatch, plan, &mut report).await;
            }
            for resource in outstanding {
                // The container is gone by now (it comes first): nothing of the agent still writes.
                if let (Resource::Workspace { path }, Some(plan)) = (&resource, &plan) {
                    self.salvage(record.dispatch, path, plan, &mut report).await;
                }
                match self.reclaim(record.dispatch, &resource, &mut report).await {
                    Ok(()) => entry.released(&resource)?,
                    Err(failure) => report
                        .failures
                        .push(format!("{}: {failure}", record.dispatch)),
                }
            }
            if entry.outstanding().is_empty() {
                entry.close()?;
                report.records_closed += 1;
            }
        }

        // What exists is listed before the live dispatches are read: a dispatch journals itself
        // before it creates anything, so whatever is listed here of one that just started is live.
        let containers = self.runtime.list_sandboxes().await?;
        let dispatch_dirs = self.listed_dispatch_dirs()?;
        let socket_dirs = match self.sockets.present() {
            Ok(present) => present,
            Err(error) => {
                // A place that fails the check is not listed at all: a link there is never followed.
                report.failures.push(error.to_string());
                Vec::new()
            }
        };
        let live_records: Vec<_> = self
            .journal
            .records()?
            .records
            .into_iter()
            .filter(|record| record.owner.is_alive())
            .collect();
        let live: BTreeSet<String> = live_records
            .iter()
            .map(|record| record.dispatch.to_string())
            .collect();
        // A container claimed from the warm pool is labelled with the pool's id and listed, by
        // name, in its dispatch's record.
        let held: BTreeSet<&str> = live_records
            .iter()
            .flat_map(|record| &record.resources)
            .filter_map(|resource| match resource {
                Resource::Container { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        for container in containers {
            let ours = container.state_label.as_deref() == Some(self.state_label.as_str());
            if !ours || live.contains(&container.dispatch) || held.contains(container.name.as_str())
            {
                continue;
            }
            match self.runtime.remove(&container.name, true).await {
                Ok(Removal::Removed) => report.containers_removed.push(container.name),
                Ok(Removal::AlreadyGone) => {}
                Err(error) => report.failures.push(error.to_string()),
            }
        }
        let stale = dispatch_dirs
            .into_iter()
            .chain(socket_dirs)
            .filter(|(dispatch, _)| !live.contains(&dispatch.to_string()))
            .map(|(_, path)| path);
        for path in stale {
            match crate::dispatch::remove_tree::remove_tree(&path) {
                Ok(()) => report.directories_removed.push(path),
                Err(error) => report.failures.push(format!("{}: {error}", path.display())),
            }
        }
        Ok(report)
    }

    /// Before a crashed dispatch's workspace is removed: its work imported through the trusted
    /// import and kept, incomplete, at `refs/stet/<dispatch>` ([`crate::dispatch::salvage`]).
    async fn salvage(
        &self,
        dispatch: DispatchId,
        journaled: &Path,
        plan: &SalvagePlan,
        report: &mut SweepReport,
    ) {
        let Some(workspace) = self
            .own_path(
                dispatch,
                &Resource::Workspace {
                    path: journaled.to_owned(),
                },
            )
            .filter(|own| same_place(own, journaled))
        else {
            // The reclaim says why a path that is not the dispatch's own is left alone.
            return;
        };
        if !std::fs::symlink_metadata(&workspace).is_ok_and(|meta| meta.is_dir()) {
            return;
        }
        let sanitizer = match TokenSanitizer::new() {
            Ok(sanitizer) => Arc::new(sanitizer),
            Err(error) => {
                report.failures.push(format!("{dispatch}: {error}"));
                return;
            }
        };
        let plan = plan.clone();
        let state_dir = self.state_dir.clone();
        let salvaged = tokio::task::spawn_blocking(move || {
            salvage(&plan, dispatch, &workspace, &state_dir, &sanitizer)
        })
        .await;
        report.salvage.push(match salvaged {
            Ok(Ok(Outcome::Kept(kept))) => format!(
                "salvaged the agent's work of {dispatch} (it was cut short): {} file(s), +{} -{}, kept at {} in {}; incomplete and not pushed, `stet reviews` shows it",
                kept.files,
                kept.insertions,
                kept.deletions,
                kept.reference,
                kept.repository.display()
            ),
            Ok(Ok(Outcome::Unchanged)) => {
                format!("nothing to salvage of {dispatch}: the agent had changed nothing")
            }
            Ok(Err(error)) => format!("did not salvage the agent's work of {dispatch}: {error}"),
            Err(error) => format!("did not salvage the agent's work of {dispatch}: {error}"),
        });
    }

    /// A crashed dispatch that had collected its result before the crash: the commit kept at
    /// `refs/stet/<dispatch>` is recorded as salvaged, for `stet reviews`.
    async fn kept_before(
        &self,
        dispatch: DispatchId,
        plan: &SalvagePlan,
        report: &mut SweepReport,
    ) {
        let sanitizer = match TokenSanitizer::new() {
            Ok(sanitizer) => Arc::new(sanitizer),
            Err(error) => {
                report.failures.push(format!("{dispatch}: {error}"));
                return;
            }
        };
        let plan = plan.clone();
        let state_dir = self.state_dir.clone();
        let kept = tokio::task::spawn_blocking(move || {
            kept_before(&plan, dispatch, &state_dir, &sanitizer)
        })
        .await;
        match kept {
            Ok(Ok(Some(Outcome::Kept(kept)))) => report.salvage.push(format!(
                "salvaged the agent's work of {dispatch} (collected before the crash): {} file(s), +{} -{}, kept at {} in {}; not pushed by the sweep, `stet reviews` shows it",
                kept.files,
                kept.insertions,
                kept.deletions,
                kept.reference,
                kept.repository.display()
            )),
            Ok(Ok(_)) => {}
            Ok(Err(error)) => report
                .salvage
                .push(format!("did not salvage the agent's work of {dispatch}: {error}")),
            Err(error) => report
                .salvage
                .push(format!("did not salvage the agent's work of {dispatch}: {error}")),
        }
    }

    /// The dispatch directories under `<state>/dispatches`, by the dispatch they are named for.
    fn listed_dispatch_dirs(&self) -> Result<Vec<(DispatchId, PathBuf)>> {
        let dispatches = self.state_dir.join(DISPATCHES_DIR);
        let entries = match std::fs::read_dir(&dispatches) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ServiceError::Io {
                    path: dispatches,
                    source,
                });
            }
        };
        Ok(entries
            .flatten()
            .filter_map(|entry| {
                let dispatch = entry.file_name().to_str()?.parse::<DispatchId>().ok()?;
                Some((dispatch, entry.path()))
            })
            .collect())
    }

    /// The path a directory resource of `dispatch` must have: the one this installation gives it.
    /// A journal record naming any other path is not acted on (the journal is in the user's own
    /// state, but what it names is removed as the user).
    fn own_path(&self, dispatch: DispatchId, resource: &Resource) -> Option<PathBuf> {
        let paths = SandboxPaths::under(&self.state_dir, Some(&self.sockets), dispatch);
        match resource {
            Resource::Workspace { .. } => Some(paths.workspace),
            Resource::Outputs { .. } => Some(paths.outputs),
            Resource::SocketDir { .. } => paths.gateway,
            Resource::Container { .. } | Resource::Credential { .. } => None,
        }
    }

    /// The runtime holding a container the journal says lives at `engine`: this service's own when
    /// it is that engine (or the record does not say), else a connection to the recorded engine.
    async fn runtime_of(
        &self,
        engine: Option<&EngineLocation>,
    ) -> std::result::Result<Arc<dyn ContainerRuntime>, String> {
        let Some(at) = engine else {
            return Ok(Arc::clone(&self.runtime));
        };
        if self.runtime.location().as_ref() == Some(at) {
            return Ok(Arc::clone(&self.runtime));
        }
        let kind = crate::runtime::endpoint::Engine::from_name(&at.engine)
            .ok_or_else(|| format!("{at}, an engine this version does not know"))?;
        let choice = crate::runtime::EngineChoice {
            engine: kind,
            host: Some(&at.host),
            ..Default::default()
        };
        match crate::runtime::connect(choice).await {
            Ok(runtime) => Ok(runtime),
            Err(error) => Err(format!("{at}, which stet cannot reach now: {error}")),
        }
    }

    async fn reclaim(
        &self,
        dispatch: DispatchId,
        resource: &Resource,
        report: &mut SweepReport,
    ) -> std::result::Result<(), String> {
        match resource {
            Resource::Container { name, engine } => match self
                .runtime_of(engine.as_ref())
                .await
                .map_err(|error| format!("{name} lives on {error}"))?
                .remove(name, true)
                .await
            {
                Ok(Removal::Removed) => {
                    report.containers_removed.push(name.clone());
                    Ok(())
                }
                Ok(Removal::AlreadyGone) => {
                    report.containers_already_gone.push(name.clone());
                    Ok(())
                }
                Err(error) => Err(error.to_string()),
            },
            Resource::Workspace { path }
            | Resource::Outputs { path }
            | Resource::SocketDir { path } => {
                let own = self.own_path(dispatch, resource);
                if own.as_deref().is_none_or(|own| !same_place(own, path)) {
                    // Not acted on, and not kept either: no later sweep would act on it.
                    report.failures.push(format!(
                        "{dispatch}: the journal names {} for its {}, which is not that dispatch's own; left alone",
                        path.display(),
                        resource.kind_name()
                    ));
                    return Ok(());
                }
                if matches!(resource, Resource::SocketDir { .. }) {
                    // Below a place that fails the check, nothing is removed.
                    self.sockets.inspect().map_err(|error| error.to_string())?;
                }
                let existed = std::fs::symlink_metadata(path).is_ok();
                crate::dispatch::remove_tree::remove_tree(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                if existed {
                    report.directories_removed.push(path.clone());
                }
                Ok(())
            }
            Resource::Credential { provider, id } => match self.providers.get(provider) {
                Some(provider) => match provider.revoke(id).await {
                    Ok(Revocation::Revoked) => {
                        report.credentials_revoked.push(id.to_string());
                        Ok(())
                    }
                    Ok(Revocation::AlreadyGone) => Ok(()),
                    Ok(Revocation::NotRevocable) => {
                        report
                            .credentials_left_to_expire
                            .push(format!("{id} ({})", provider.name()));
                        Ok(())
                    }
                    Err(error) => Err(error.to_string()),
                },
                // A Gitea token never expires: the record stays for a process that has its provider.
                None if provider == crate::forge::gitea_token::PROVIDER => Err(format!(
                    "{id} ({provider}): this process has no provider for it; {}",
                    crate::forge::gitea_token::LEFT_LIVE
                )),
                // A provider this process does not have: nothing here can revoke the credential, and
                // keeping the record would only repeat this at every launch; it expires at its TTL.
                None => {
                    report
                        .credentials_left_to_expire
                        .push(format!("{id} ({provider})"));
                    Ok(())
                }
            },
        }
    }
}

/// Whether `path` is `own`, spelled the same or reached through the same directory (a state
/// directory named through a link, say).
fn same_place(own: &Path, path: &Path) -> bool {
    if own == path {
        return true;
    }
    let canonical_parent = |p: &Path| {
        p.parent()
            .and_then(|parent| std::fs::canonicalize(parent).ok())
    };
    own.file_name() == path.file_name()
        && canonical_parent(own).is_some_and(|parent| Some(parent) == canonical_parent(path))
}
