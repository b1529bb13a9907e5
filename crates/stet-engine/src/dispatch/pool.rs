//! The warm pool (`[runtime] warm = N`, issue #33): N hardened, idle, network-none sandboxes kept
//! started on one engine for one image, so that a copy-mode dispatch claims a running container
//! instead of waiting for the engine to create and start one. Its channels (model gateway, egress
//! proxy) reach it afterwards, over an exec stream ([`crate::dispatch::channel_stream`]).
//!
//! A pooled container is made exactly as a fresh copy-mode sandbox with no channel (the same
//! [`SandboxSpec`], the same `create_sandbox`, hence the same hardening and the same refusal of an
//! engine that drops a cap); it holds no workspace, no credential and no channel. Each one is
//! journaled under a record of its own before it is created, so a crash leaves nothing `stet sweep`
//! does not reclaim. A claim moves the container into the dispatch's own record (intended there
//! before the pool's record lets it go), from where the dispatch's teardown removes it: a claimed
//! container never returns to the pool. The pool refills in the background, one container at a
//! time, and counts the ones being started, so it never holds more than N. A fill that fails never
//! blocks a dispatch: the dispatch gets a fresh container and the failure is said once
//! ([`WarmPool::take_notice`]). [`WarmPool::drain`] removes every idle container; the dispatcher
//! calls it once every dispatch is torn down, so nothing of the pool outlives stet.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::dispatch::journal::{Journal, JournalEntry, JournalError, Resource};
use crate::runtime::{
    ContainerRuntime, DispatchLimits, ImageRef, MountMode, NetworkPolicy, RuntimeError,
    SandboxSpec, SandboxUser,
};
use stet_protocol::event::DispatchId;

/// Why a pooled container could not be started.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum PoolError {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// How long the pool waits after a failed start before it tries again (a dispatch's claim of an
/// empty pool wakes it sooner).
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// What every container of the pool is: the parts of a [`SandboxSpec`] that do not depend on the
/// dispatch. A dispatch whose spec differs in any of them (a channel, a network, bind mounts, other
/// caps) gets a fresh container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmShape {
    /// The image (pinned: a digest or an image id).
    pub image: ImageRef,
    /// The container's caps.
    pub limits: DispatchLimits,
    /// The uid:gid its processes run as.
    pub user: SandboxUser,
    /// Its main process, which only idles.
    pub keepalive: Vec<String>,
    /// Which installation's journal owns it.
    pub state_label: String,
}

impl WarmShape {
    /// The spec of the pooled container `id`.
    fn spec(&self, id: DispatchId) -> SandboxSpec {
        SandboxSpec {
            dispatch: id,
            image: self.image.clone(),
            // Copy mode reads no host directory.
            workspace: PathBuf::new(),
            outputs: PathBuf::new(),
            mounts: MountMode::Copy,
            gateway: None,
            limits: self.limits,
            network: NetworkPolicy::None,
            user: self.user,
            keepalive: self.keepalive.clone(),
            state_label: self.state_label.clone(),
            warm: Some(self.image.to_string()),
        }
    }

    /// Why a dispatch's `spec` is not this shape (whatever its image); `None` when it is.
    fn unfit(&self, spec: &SandboxSpec) -> Option<&'static str> {
        if spec.mounts != MountMode::Copy {
            Some("it uses bind mounts")
        } else if spec.gateway.is_some() {
            Some(
                "its relay's socket directory is mounted, which a running container cannot be given",
            )
        } else if spec.keepalive != self.keepalive {
            Some("its container's main process differs")
        } else if spec.network != NetworkPolicy::None {
            Some("it has network access")
        } else if spec.limits != self.limits
            || spec.user != self.user
            || spec.state_label != self.state_label
        {
            Some("its caps or its user differ")
        } else {
            None
        }
    }
}

/// One idle container and the journal record that owns it.
#[derive(Debug)]
struct Warm {
    name: String,
    resource: Resource,
    entry: JournalEntry,
}

/// What the pool holds at a moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Idle containers, ready to be claimed.
    pub idle: usize,
    /// Containers being started.
    pub starting: usize,
    /// Containers claimed since the pool started.
    pub claimed: u64,
    /// Starts that failed since the pool started.
    pub failed: u64,
}

#[derive(Debug)]
struct Inner {
    shape: WarmShape,
    /// Bumped when the image changes: a container started for an older one is discarded.
    generation: u64,
    idle: VecDeque<Warm>,
    starting: usize,
    claimed: u64,
    failed: u64,
    /// Removals under way (an image change, a claim whose journaling failed).
    discards: Vec<JoinHandle<()>>,
    /// Containers whose start failed and whose removal failed too (an engine that went away):
    /// removed again before another is started, so their records do not pile up.
    leftovers: Vec<Warm>,
    /// Why a dispatch went without a pooled container, not said yet.
    notice: Option<Notice>,
    /// What was already said (each kind once).
    said: Vec<&'static str>,
}

/// Why a dispatch went without a pooled container.
#[derive(Debug, Clone)]
struct Notice {
    kind: &'static str,
    text: String,
}

/// N idle sandboxes of one engine and one image, kept started.
#[derive(Debug)]
pub struct WarmPool {
    runtime: Arc<dyn ContainerRuntime>,
    journal: Arc<Journal>,
    size: usize,
    inner: Mutex<Inner>,
    wake: Notify,
    stop: CancellationToken,
    status: watch::Sender<PoolStatus>,
    filler: Mutex<Option<JoinHandle<()>>>,
}

impl WarmPool {
    /// A pool of `size` containers of `shape` on `runtime`, journaled in `journal`, filling in the
    /// background from now on.
    pub fn start(
        runtime: Arc<dyn ContainerRuntime>,
        journal: Arc<Journal>,
        size: usize,
        shape: WarmShape,
    ) -> Arc<WarmPool> {
        let pool = Arc::new(WarmPool {
            runtime,
            journal,
            size,
            inner: Mutex::new(Inner {
                shape,
                generation: 0,
                idle: VecDeque::new(),
                starting: 0,
                claimed: 0,
                failed: 0,
                discards: Vec::new(),
                leftovers: Vec::new(),
                notice: None,
                said: Vec::new(),
            }),
            wake: Notify::new(),
            stop: CancellationToken::new(),
            status: watch::Sender::new(PoolStatus::default()),
            filler: Mutex::new(None),
        });
        let task = tokio::spawn(Arc::clone(&pool).fill());
        *lock(&pool.filler) = Some(task);
        pool
    }

    /// How many containers the pool keeps.
    pub fn size(&self) -> usize {
        self.size
    }

    /// What the pool holds now.
    pub fn status(&self) -> PoolStatus {
        *self.status.borrow()
    }

    /// Follows the pool's status as it changes (tests and benchmarks wait on it).
    pub fn watch(&self) -> watch::Receiver<PoolStatus> {
        self.status.subscribe()
    }

    /// The engine its containers live on.
    pub fn runtime(&self) -> Arc<dyn ContainerRuntime> {
        Arc::clone(&self.runtime)
    }

    /// The names of the idle containers.
    pub fn idle(&self) -> Vec<String> {
        lock(&self.inner)
            .idle
            .iter()
            .map(|warm| warm.name.clone())
            .collect()
    }

    /// Waits until `idle` containers are ready (at most the pool's size).
    pub async fn ready(&self, idle: usize) {
        let wanted = idle.min(self.size);
        let mut status = self.watch();
        let _ = status.wait_for(|status| status.idle >= wanted).await;
    }

    /// Why a dispatch went without a pooled container (the pool could not start one, or the
    /// dispatch is not of its shape), the first time for each reason; `None` afterwards.
    pub fn take_notice(&self) -> Option<String> {
        let mut inner = lock(&self.inner);
        let notice = inner.notice.take()?;
        if inner.said.contains(&notice.kind) {
            return None;
        }
        inner.said.push(notice.kind);
        Some(notice.text)
    }

    fn note(&self, kind: &'static str, text: String) {
        let mut inner = lock(&self.inner);
        if !inner.said.contains(&kind) {
            inner.notice = Some(Notice { kind, text });
        }
    }

    /// A container for the dispatch whose sandbox is `spec`, journaled in its record `entry`
    /// before the pool's own record lets it go; `None` when the pool has none of that shape ready
    /// or starting (the dispatch then creates a fresh one). One being started is waited for: it
    /// is ready sooner than a fresh one would be. A dispatch asking for another image retargets
    /// the pool: the containers of the old image are removed and new ones started. `None` too
    /// once `stop` is cancelled.
    pub async fn claim(
        &self,
        spec: &SandboxSpec,
        entry: &mut JournalEntry,
        stop: &CancellationToken,
    ) -> Result<Option<String>, JournalError> {
        let mut changes = self.status.subscribe();
        let warm = loop {
            if self.stop.is_cancelled() || stop.is_cancelled() {
                return Ok(None);
            }
            {
                let mut inner = lock(&self.inner);
                if let Some(why) = inner.shape.unfit(spec) {
                    drop(inner);
                    self.note(
                        "unfit",
                        format!("the warm pool's sandboxes do not fit this dispatch: {why}"),
                    );
                    return Ok(None);
                }
                if inner.shape.image != spec.image {
                    tracing::info!(from = %inner.shape.image, to = %spec.image, "the warm pool follows the image");
                    inner.shape.image = spec.image.clone();
                    inner.generation += 1;
                    let old: Vec<Warm> = inner.idle.drain(..).collect();
                    for warm in old {
                        let task = tokio::spawn(discard_quietly(Arc::clone(&self.runtime), warm));
                        inner.discards.push(task);
                    }
                    break None;
                }
                if let Some(warm) = inner.idle.pop_front() {
                    break Some(warm);
                }
                if inner.starting == 0 {
                    break None;
                }
            }
            // One is being started: its publication wakes this.
            tokio::select! {
                changed = changes.changed() => if changed.is_err() {
                    return Ok(None);
                },
                () = stop.cancelled() => return Ok(None),
            }
        };
        self.publish();
        self.wake.notify_one();
        let Some(mut warm) = warm else {
            return Ok(None);
        };
        let resource = Resource::Container {
            name: warm.name.clone(),
            engine: self.runtime.location(),
        };
        if let Err(error) = entry.intend(resource) {
            let task = tokio::spawn(discard_quietly(Arc::clone(&self.runtime), warm));
            lock(&self.inner).discards.push(task);
            return Err(error);
        }
        // From here the dispatch's record owns it; a pool record that cannot let go stays behind
        // for the sweep, which finds the container gone with the dispatch.
        let released = warm.entry.released(&warm.resource);
        if let Err(error) = released.and_then(|()| warm.entry.close()) {
            tracing::warn!(container = %warm.name, %error, "the warm pool's record of a claimed container could not be closed");
        }
        lock(&self.inner).claimed += 1;
        self.publish();
        tracing::info!(container = %warm.name, dispatch = %entry.dispatch(), "claimed a warm sandbox");
        Ok(Some(warm.name))
    }

    /// Stops refilling and removes every idle container (and waits for the removals under way).
    /// Claims return `None` from now on.
    pub async fn drain(&self) {
        self.stop.cancel();
        let filler = lock(&self.filler).take();
        if let Some(filler) = filler {
            let _ = filler.await;
        }
        let (idle, discards) = {
            let mut inner = lock(&self.inner);
            let mut idle: Vec<Warm> = inner.idle.drain(..).collect();
            idle.append(&mut inner.leftovers);
            (idle, std::mem::take(&mut inner.discards))
        };
        self.publish();
        for warm in idle {
            discard_quietly(Arc::clone(&self.runtime), warm).await;
        }
        for task in discards {
            let _ = task.await;
        }
    }

    fn publish(&self) {
        let status = {
            let inner = lock(&self.inner);
            PoolStatus {
                idle: inner.idle.len(),
                starting: inner.starting,
                claimed: inner.claimed,
                failed: inner.failed,
            }
        };
        self.status.send_replace(status);
    }

    /// The background refill: one container at a time while the pool holds fewer than its size,
    /// counting the one being started.
    async fn fill(self: Arc<Self>) {
        loop {
            if !self.remove_leftovers().await {
                tokio::select! {
                    () = tokio::time::sleep(RETRY_AFTER) => continue,
                    () = self.stop.cancelled() => return,
                }
            }
            let job = {
                let mut inner = lock(&self.inner);
                (inner.idle.len() + inner.starting < self.size).then(|| {
                    inner.starting += 1;
                    (inner.shape.clone(), inner.generation)
                })
            };
            let Some((shape, generation)) = job else {
                tokio::select! {
                    () = self.wake.notified() => continue,
                    () = self.stop.cancelled() => return,
                }
            };
            self.publish();
            let started = if self.stop.is_cancelled() {
                None
            } else {
                Some(self.start_one(&shape).await)
            };
            let (unwanted, failure) = {
                let mut inner = lock(&self.inner);
                inner.starting -= 1;
                match started {
                    Some(Ok(warm))
                        if !self.stop.is_cancelled() && generation == inner.generation =>
                    {
                        inner.idle.push_back(warm);
                        (None, None)
                    }
                    Some(Ok(warm)) => (Some(warm), None),
                    Some(Err((error, leftover))) => {
                        inner.leftovers.extend(leftover);
                        inner.failed += 1;
                        (None, Some(error))
                    }
                    None => (None, None),
                }
            };
            if let Some(warm) = unwanted {
                discard_quietly(Arc::clone(&self.runtime), warm).await;
            }
            let failed = failure.is_some();
            if let Some(error) = failure {
                tracing::warn!(%error, "the warm pool could not start a sandbox");
                let engine = self
                    .runtime
                    .location()
                    .map(|at| format!(" on {at}"))
                    .unwrap_or_default();
                let text = format!("the warm pool could not start a sandbox{engine}: {error}");
                self.note("start", text);
            }
            self.publish();
            if self.stop.is_cancelled() {
                return;
            }
            if failed {
                tokio::select! {
                    () = tokio::time::sleep(RETRY_AFTER) => {}
                    () = self.wake.notified() => {}
                    () = self.stop.cancelled() => return,
                }
            }
        }
    }

    /// Removes the leftovers of failed starts; whether none is left.
    async fn remove_leftovers(&self) -> bool {
        let leftovers = std::mem::take(&mut lock(&self.inner).leftovers);
        for warm in leftovers {
            if let Some(warm) = discard(Arc::clone(&self.runtime), warm).await {
                lock(&self.inner).leftovers.push(warm);
            }
        }
        lock(&self.inner).leftovers.is_empty()
    }

    /// Journals and starts one container of `shape`. On failure, what may exist of it when the
    /// engine could not remove it either.
    async fn start_one(&self, shape: &WarmShape) -> Result<Warm, (PoolError, Option<Warm>)> {
        let id = DispatchId::new();
        let spec = shape.spec(id);
        let mut entry = self
            .journal
            .begin(id)
            .map_err(|error| (error.into(), None))?;
        let resource = Resource::Container {
            name: spec.container_name(),
            engine: self.runtime.location(),
        };
        if let Err(error) = entry.intend(resource.clone()) {
            // Nothing was created: the record is left for the sweep if it cannot be closed.
            let _ = entry.close();
            return Err((error.into(), None));
        }
        let warm = Warm {
            name: spec.container_name(),
            resource,
            entry,
        };
        match self.runtime.create_sandbox(&spec).await {
            Ok(_) => Ok(warm),
            // The engine's failure may come after the container exists (a start refused).
            Err(error) => Err((error.into(), discard(Arc::clone(&self.runtime), warm).await)),
        }
    }
}

/// [`WarmPool::claim`] when there is a pool.
pub(crate) async fn claim_from(
    pool: Option<&WarmPool>,
    spec: &SandboxSpec,
    entry: &mut JournalEntry,
    stop: &CancellationToken,
) -> Result<Option<String>, JournalError> {
    match pool {
        Some(pool) => pool.claim(spec, entry, stop).await,
        None => Ok(None),
    }
}

/// Removes a pooled container and closes its record; gives it back when the engine could not
/// remove it.
async fn discard(runtime: Arc<dyn ContainerRuntime>, mut warm: Warm) -> Option<Warm> {
    match runtime.remove(&warm.name, true).await {
        Ok(_) => {
            let released = warm.entry.released(&warm.resource);
            if let Err(error) = released.and_then(|()| warm.entry.close()) {
                tracing::warn!(container = %warm.name, %error, "a warm sandbox's record could not be closed");
            }
            None
        }
        Err(error) => {
            tracing::warn!(container = %warm.name, %error, "a warm sandbox could not be removed");
            Some(warm)
        }
    }
}

/// [`discard`], what could not be removed left to the sweep (its record stays on disk).
async fn discard_quietly(runtime: Arc<dyn ContainerRuntime>, warm: Warm) {
    discard(runtime, warm).await;
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
