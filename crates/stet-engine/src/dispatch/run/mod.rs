//! One dispatch from `queued` to its outcome (DESIGN §4, ADR-0018's guaranteed-cleanup pattern):
//! the phase sequence. Preflight has no side effects; provisioning stops cleanly when told to; the
//! agent's run ([`agent`]) is raced by cancel, the wall-clock timeout, the disk bound and the cost
//! ceiling ([`meter`]); the trusted import ([`collect`]); the review and the host-side push and pull
//! request ([`delivery`]). Once provisioning succeeded, the later phases run with their outcome
//! captured, teardown runs exactly once ([`ending`]), and a teardown failure is a warning that never
//! replaces the outcome. Every event goes through the [`publisher`].

mod agent;
mod collect;
mod delivery;
mod ending;
mod meter;
mod publisher;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::error::{CancelPoint, DispatchError};
use crate::dispatch::order::{DispatchControl, DispatchRun};
use crate::dispatch::record::RunRecord;
use crate::dispatch::salvage::SalvagePlan;
use crate::dispatch::sandbox::{
    BaseFetch, CredentialRequest, DispatchSandbox, SandboxError, SandboxRequest, WorkspaceSource,
};
use crate::dispatch::service::{DispatchContext, DispatchService};
use crate::forge::Preflight;
use crate::harness::{HarnessLaunch, HarnessPlan, ModelAccess, PLACEHOLDER_KEY};
use crate::runtime::PullProgress;
use crate::workflow::Workflow;
use stet_protocol::event::{Event, EventKind};
use stet_protocol::state::{Input, Phase};
use stet_sanitize::branch::{BranchValidator, CommitSha};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

use agent::ModelLink;
use meter::Meter;
use publisher::Publisher;

/// How many image-pull progress reports may wait to become events.
const PULL_PROGRESS_BUFFER: usize = 64;

/// How a dispatch ended when it went as far as it could: the reason, if it stopped short of a pull
/// request (kept, discarded, nothing to push).
#[derive(Debug, Default)]
struct Completion {
    reason: Option<SanitizedText>,
}

/// What a dispatch has gathered for its `finished` event and its run record: the branch, the
/// commits, the pull request, the summary, what teardown could not remove.
#[derive(Debug, Default)]
struct Gathered {
    branch: String,
    base: Option<CommitSha>,
    commit: Option<CommitSha>,
    reference: Option<String>,
    pull_request: Option<(u64, SanitizedText)>,
    summary: Option<String>,
    teardown_failures: Vec<SanitizedText>,
}

/// Runs one dispatch to its end, publishing every event to `events` and its run record, and returns
/// its terminal phase. Never panics on a dispatch error: every error becomes the outcome's reason.
pub async fn run(
    service: DispatchService,
    parts: Arc<DispatchContext>,
    dispatch: DispatchRun,
    events: mpsc::Sender<Event>,
    control: DispatchControl,
) -> Phase {
    let mut dispatch = Dispatch::new(service, parts, dispatch, events, control);
    dispatch.run().await
}

/// One dispatch in flight: what it was asked, how it is steered, and what it has gathered so far.
struct Dispatch {
    service: DispatchService,
    parts: Arc<DispatchContext>,
    run: DispatchRun,
    control: DispatchControl,
    publisher: Publisher,
    meter: Meter,
    gathered: Gathered,
    started: (DateTime<Utc>, Instant),
    /// Cancelled by the person's cancel or by the wall-clock timeout: what the agent's work races.
    stop: CancellationToken,
    expired: CancellationToken,
    /// What the harness will stage and run, settled in preflight.
    plan: Option<HarnessPlan>,
    /// Why the run record could not be created, if it could not.
    record_error: Option<String>,
    /// This dispatch's concurrency slot, while it holds one.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The channels the sandbox's relay serves (the model gateway's, when one runs).
    channels: DispatchChannels,
    model: ModelLink,
}

impl Dispatch {
    fn new(
        service: DispatchService,
        parts: Arc<DispatchContext>,
        run: DispatchRun,
        events: mpsc::Sender<Event>,
        control: DispatchControl,
    ) -> Dispatch {
        let channels = DispatchChannels::for_dispatch(parts.settings.gateway.is_some());
        let access = channels.model_url().map(|base_url| ModelAccess {
            base_url,
            placeholder_key: PLACEHOLDER_KEY.to_owned(),
        });
        let (record, record_error) =
            match RunRecord::create(service.state_dir(), run.id, parts.settings.max_record_bytes) {
                Ok(record) => (Some(record), None),
                Err(error) => {
                    tracing::error!(dispatch = %run.id, %error, "cannot create the run record");
                    (None, Some(error.to_string()))
                }
            };
        let stop = control.cancel.child_token();
        let branch = planned_branch(&run);
        let now = (Utc::now(), Instant::now());
        Dispatch {
            publisher: Publisher::new(run.id, run.brief.id.clone(), events, record, now),
            meter: Meter::new(
                parts.settings.cost_ceiling_usd,
                parts.settings.gateway.is_some(),
            ),
            gathered: Gathered {
                branch,
                ..Gathered::default()
            },
            started: now,
            service,
            parts,
            run,
            control,
            stop,
            expired: CancellationToken::new(),
            plan: None,
            record_error,
            permit: None,
            channels,
            model: ModelLink::new(access),
        }
    }

    /// A failure described by `what`, in words safe to show.
    fn fail(&self, what: impl fmt::Display) -> DispatchError {
        DispatchError::failed(&self.sanitizer(), what)
    }

    fn sanitizer(&self) -> Arc<TokenSanitizer> {
        self.parts.sanitizer.current()
    }

    fn sanitize(&self, text: &str) -> SanitizedText {
        self.sanitizer().sanitize(text)
    }

    async fn run(&mut self) -> Phase {
        let harness = &self.parts.harness;
        let harness_label = match harness.version() {
            Some(version) => format!("{} ({version})", harness.name()),
            None => harness.name().to_owned(),
        };
        let dispatched = EventKind::Dispatched {
            title: self.sanitize(&self.run.brief.title),
            repo: self.sanitize(&self.run.brief.target.repo),
            base: self.sanitize(&self.run.brief.target.base),
            branch: self.sanitize(&self.gathered.branch),
            harness: self.sanitize(&harness_label),
            image: self.sanitize(self.parts.settings.image.as_str()),
            cost_ceiling_usd: self.parts.settings.cost_ceiling_usd,
        };
        self.publisher.emit(dispatched).await;
        if let Some(error) = self.record_error.take() {
            let reason = format!(
                "the run record could not be created ({error}); a dispatch whose events cannot be kept does not start"
            );
            return self.end(Err(self.fail(reason))).await;
        }
        let slots = Arc::clone(&self.control.slots);
        let permit = tokio::select! {
            biased;
            () = self.control.cancel.cancelled() => None,
            permit = slots.acquire_owned() => permit.ok(),
        };
        let Some(permit) = permit else {
            return self
                .end(Err(DispatchError::Cancelled(CancelPoint::Queued)))
                .await;
        };
        self.permit = Some(permit);
        self.started = (Utc::now(), Instant::now());
        let timer = tokio::spawn({
            let (stop, expired) = (self.stop.clone(), self.expired.clone());
            let timeout = self.parts.settings.timeout;
            async move {
                tokio::time::sleep(timeout).await;
                expired.cancel();
                stop.cancel();
            }
        });
        let _timer = AbortOnDrop(timer.abort_handle());

        self.publisher.advance(Input::Start, None).await;
        let preflight = match self.preflight().await {
            Ok(preflight) => preflight,
            Err(error) => return self.end(Err(error)).await,
        };
        self.publisher.advance(Input::PreflightPassed, None).await;
        let sandbox = match self.provision(&preflight).await {
            Ok(sandbox) => sandbox,
            Err(error) => return self.end(Err(error)).await,
        };
        let outcome = self.after_provisioning(&sandbox, &preflight, timer).await;
        if let Err(error) = &outcome {
            let reason = self.sanitize(&error.to_string());
            self.publisher.advance(error.input(), Some(reason)).await;
        }
        self.teardown(&sandbox).await;
        self.end(outcome).await
    }

    /// Races `work` against the stop token (cancel or timeout).
    async fn guarded<T>(&self, work: impl Future<Output = T>) -> Result<T, DispatchError> {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => Err(self.stop_reason()),
            value = work => Ok(value),
        }
    }

    /// Why the stop token fired.
    fn stop_reason(&self) -> DispatchError {
        if self.control.cancel.is_cancelled() {
            DispatchError::Cancelled(CancelPoint::During(self.publisher.phase()))
        } else if self.expired.is_cancelled() {
            DispatchError::TimedOut {
                after: self.parts.settings.timeout,
            }
        } else {
            self.fail("stopped for no recorded reason")
        }
    }

    async fn preflight(&mut self) -> Result<Preflight, DispatchError> {
        let target = &self.run.brief.target;
        if target.pr.is_none() {
            BranchValidator::default()
                .validate(&self.gathered.branch, Some(&target.base))
                .map_err(|error| {
                    self.fail(format!("branch {:?}: {error}", self.gathered.branch))
                })?;
        }
        let forge = Arc::clone(&self.parts.forge);
        let preflight = self
            .guarded(forge.preflight(target))
            .await?
            .map_err(|error| self.fail(format!("preflight: {error}")))?;
        if let Some(head) = &preflight.head {
            BranchValidator::default()
                .validate(&head.branch, Some(&target.base))
                .map_err(|error| {
                    self.fail(format!(
                        "pull request #{}'s head branch {:?}: {error}",
                        head.number, head.branch
                    ))
                })?;
            self.gathered.branch = head.branch.clone();
        }
        self.gathered.base = Some(preflight.base_sha.clone());
        self.plan = Some(self.plan_agent()?);
        Ok(preflight)
    }

    /// Renders the instructions and lets the harness plan its run: a misnamed workflow or a missing
    /// model key fails here, before anything is provisioned.
    fn plan_agent(&self) -> Result<HarnessPlan, DispatchError> {
        let brief = &self.run.brief;
        let workflow = Workflow::builtin(&brief.workflow).map_err(|error| {
            self.fail(format!(
                "brief {}: workflow {:?}: {error}",
                brief.id, brief.workflow
            ))
        })?;
        let instructions = workflow.render(brief, &self.gathered.branch);
        self.parts
            .harness
            .plan(&HarnessLaunch {
                dispatch: self.run.id,
                brief,
                instructions: &instructions,
                model: self.model.access.as_ref(),
            })
            .map_err(|error| self.fail(format!("brief {}: {error}", brief.id)))
    }

    async fn provision(&mut self, preflight: &Preflight) -> Result<DispatchSandbox, DispatchError> {
        let settings = &self.parts.settings;
        let request = SandboxRequest {
            dispatch: self.run.id,
            image: settings.image.clone(),
            limits: settings.limits,
            network: settings.network,
            user: settings.user,
            keepalive: self.channels.keepalive(&settings.keepalive),
            gateway: (!self.channels.is_empty()).then(|| self.service.socket_place().clone()),
            workspace_source: Some(WorkspaceSource {
                repository: self.parts.repository.clone(),
                base: preflight.base_sha.clone(),
                fetch: Some(BaseFetch {
                    url: preflight.push_url.clone(),
                    branch: self.run.brief.target.base.clone(),
                }),
                limits: settings.base,
            }),
            credential: Some(CredentialRequest {
                provider: Arc::clone(&self.parts.credentials),
                repository: self.run.brief.target.repo.clone(),
                branch: self.gathered.branch.clone(),
                ttl: settings.credential_ttl,
                into_sandbox: false,
            }),
        };
        let (progress, mut pulls) = mpsc::channel::<PullProgress>(PULL_PROGRESS_BUFFER);
        let image = self
            .parts
            .sanitizer
            .current()
            .sanitize(settings.image.as_str());
        let provisioned = {
            let provisioning = DispatchSandbox::provision_until(
                self.service.runtime(),
                self.service.journal(),
                self.service.state_dir(),
                request,
                &self.stop,
                Some(progress),
            );
            tokio::pin!(provisioning);
            loop {
                tokio::select! {
                    provisioned = &mut provisioning => break provisioned,
                    Some(pull) = pulls.recv() => {
                        let event = image_pull(&image, pull, &self.parts.sanitizer.current());
                        self.publisher.emit_until(event, &self.stop).await;
                    }
                }
            }
        };
        while let Ok(pull) = pulls.try_recv() {
            let event = image_pull(&image, pull, &self.parts.sanitizer.current());
            self.publisher.emit(event).await;
        }
        match provisioned {
            Ok(sandbox) => Ok(sandbox),
            Err(failure) => {
                if let Some(report) = &failure.teardown {
                    self.report_teardown(report, Duration::ZERO).await;
                }
                match failure.error {
                    SandboxError::Stopped => Err(self.stop_reason()),
                    error => Err(self.fail(format!("provisioning: {error}"))),
                }
            }
        }
    }

    /// Everything from a provisioned sandbox to the outcome, teardown aside.
    async fn after_provisioning(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
        timer: tokio::task::JoinHandle<()>,
    ) -> Result<Completion, DispatchError> {
        if let Some(credential) = sandbox.credential()
            && let Err(error) = credential.mask_in(&self.parts.sanitizer)
        {
            return Err(self.fail(format!(
                "the scoped credential cannot be masked in output: {error}"
            )));
        }
        if let Some(why) = sandbox
            .credential()
            .and_then(|credential| credential.stand_in())
        {
            let message = self.sanitize(&format!(
                "the push uses your own forge token, not a narrow one (stet drops it after {} s, but it stays valid at the forge; it never enters the sandbox): {why}",
                self.parts.settings.credential_ttl.as_secs()
            ));
            self.publisher.emit(EventKind::Warning { message }).await;
        }
        if self.stop.is_cancelled() {
            return Err(self.stop_reason());
        }
        self.start_gateway(sandbox).await?;
        let plan = SalvagePlan::new(
            &self.parts.repository,
            preflight.parent(),
            self.commit_message()
                .as_str()
                .lines()
                .next()
                .unwrap_or_default(),
            &self.parts.settings.agent,
            self.parts.settings.import,
            &self.parts.settings.protected,
        );
        sandbox.plan_salvage(plan).await.map_err(|failure| {
            self.fail(format!(
                "the journal cannot record how to salvage the agent's work after a crash: {failure}"
            ))
        })?;
        self.publisher.advance(Input::Provisioned, None).await;
        let ran = self.run_agent(sandbox).await;
        self.stop_gateway().await;
        self.gathered.summary = ran?;
        self.publisher.advance(Input::AgentFinished, None).await;
        // Nothing of the agent runs from here on (a process it left in the background included):
        // not while its result is collected, not while a person reviews it.
        sandbox.remove_container().await.map_err(|failure| {
            self.fail(format!(
                "the agent's container could not be removed once its work was over: {failure}; nothing is collected or pushed while it may still run"
            ))
        })?;
        let imported = self.collect(sandbox, preflight).await?;
        // The review needs only the imported commit.
        if let Err(failure) = sandbox.remove_agent_files().await {
            let message = self.sanitize(&format!(
                "the agent's files were not removed after collecting: {failure}; the teardown tries again"
            ));
            self.publisher.emit(EventKind::Warning { message }).await;
        }
        // The agent's work is over: the timeout no longer applies (a person reviewing is not timed).
        timer.abort();
        let Some((commit, gate)) = imported else {
            self.publisher.advance(Input::NothingToPush, None).await;
            return Ok(Completion {
                reason: Some(self.sanitize("the agent changed nothing; there is nothing to push")),
            });
        };
        self.hand_over(sandbox, preflight, &commit, &gate).await
    }
}

/// An image pull's progress as an event.
fn image_pull(
    image: &SanitizedText,
    pull: PullProgress,
    sanitizer: &Arc<TokenSanitizer>,
) -> EventKind {
    EventKind::ImagePull {
        image: image.clone(),
        layer: pull.layer.map(|layer| sanitizer.sanitize(&layer)),
        status: sanitizer.sanitize(&pull.status),
        current_bytes: pull.current_bytes,
        total_bytes: pull.total_bytes,
    }
}

/// The branch a dispatch pushes to: the brief's, or `stet/<brief id>-<8 hex of the dispatch id>`. For
/// an existing pull request it is replaced by the head branch the forge reports.
fn planned_branch(run: &DispatchRun) -> String {
    match (&run.brief.target.branch, run.brief.target.pr) {
        (Some(branch), _) => branch.clone(),
        (None, Some(number)) => format!("(the head branch of pull request #{number})"),
        (None, None) => {
            let id = run.id.to_string();
            let short: String = id
                .trim_start_matches("stet-dispatch-")
                .chars()
                .take(8)
                .collect();
            format!("stet/{}-{short}", run.brief.id)
        }
    }
}

/// Aborts a task when dropped (the timeout timer must not outlive its dispatch).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brief::Brief;
    use crate::dispatch::order::Delivery;
    use std::path::Path;
    use stet_protocol::event::DispatchId;

    #[test]
    fn default_branches_are_unique_per_dispatch_and_valid() {
        let brief = Brief::parse(
            "fix-login",
            Path::new("fix-login.toml"),
            "title = \"t\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n",
        )
        .unwrap();
        let run = |brief: &Brief| DispatchRun {
            id: DispatchId::new(),
            brief: brief.clone(),
            delivery: Delivery::Keep,
        };
        let (a, b) = (planned_branch(&run(&brief)), planned_branch(&run(&brief)));
        assert_ne!(a, b);
        assert!(a.starts_with("stet/fix-login-"));
        BranchValidator::default()
            .validate(&a, Some("main"))
            .unwrap();
    }
}
