//! One dispatch from `queued` to its outcome (DESIGN §4, ADR-0018's guaranteed-cleanup pattern):
//! preflight with no side effects, provisioning that stops cleanly when told to, the agent's run raced
//! by cancel, the wall-clock timeout and the cost ceiling, the trusted import, and the host-side push
//! and pull request. Once provisioning succeeded, the later phases run with their outcome captured,
//! teardown runs exactly once, and a teardown failure is a warning that never replaces the outcome.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::brief::Brief;
use crate::dispatch::branch::{BranchValidator, CommitSha};
use crate::dispatch::disk_watch::{self, DEFAULT_FLOOR_BYTES, DiskWatch};
use crate::dispatch::display;
use crate::dispatch::event::{
    ChangedPath, DispatchId, Event, EventKind, GateFindings, HeldPathReport, ItemKind,
    PullRequestAction, SecretReport, TeardownStepReport, TranscriptItem, Usage,
};
use crate::dispatch::gate::{GateReport, inspect, printable};
use crate::dispatch::record::{PhaseSpan, RunRecord, RunResult, truncate};
use crate::dispatch::sandbox::{
    BaseFetch, CredentialRequest, DispatchSandbox, SandboxError, SandboxRequest, TeardownReport,
    WorkspaceSource,
};
use crate::dispatch::sanitize::{KnownValue, SanitizedText, TokenSanitizer};
use crate::dispatch::service::{DispatchParts, DispatchService};
use crate::dispatch::state::{Input, Phase, transition};
use crate::forge::{Preflight, Provenance, PullRequestDraft, PushBranch};
use crate::gateway::{Gateway, GatewayConfig, GatewayEvent};
use crate::git::changes::read_changes;
use crate::git::import::{ImportRequest, Imported, import_until};
use crate::harness::{
    HarnessLaunch, HarnessOutcome, HarnessPlan, ModelAccess, OutputParser, PLACEHOLDER_KEY, Parsed,
    StagedFile, UsageReport,
};
use crate::runtime::{NetworkPolicy, OutputLine, PullProgress};
use crate::workflow::Workflow;

/// How many image-pull progress reports may wait to become events.
const PULL_PROGRESS_BUFFER: usize = 64;

/// How many output lines may wait between the container and the parser (back-pressure beyond).
const OUTPUT_BUFFER: usize = 256;

/// The longest agent summary carried into the commit message and the pull request.
const MAX_SUMMARY_BYTES: usize = 4 * 1024;

/// The ref a collected result is kept at in the repository: `refs/stet/<dispatch id>`.
pub fn result_ref(dispatch: DispatchId) -> String {
    format!("refs/stet/{dispatch}")
}

/// What happens to a collected result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Wait at `awaiting_approval` for a person's [`Decision`].
    Review,
    /// Push and open the pull request without asking (`--headless --push`); a result the review
    /// gate holds (a dangerous path, a secret) is not pushed.
    Push,
    /// Keep the commit at [`result_ref`] and stop (`--headless` without `--push`).
    Keep,
}

/// A person's decision at review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Discard,
}

/// One dispatch to run.
#[derive(Debug, Clone)]
pub struct DispatchRun {
    pub id: DispatchId,
    pub brief: Brief,
    pub delivery: Delivery,
}

/// How a running dispatch is steered from outside.
#[derive(Debug)]
pub struct DispatchControl {
    pub cancel: CancellationToken,
    pub decisions: mpsc::Receiver<Decision>,
    /// The concurrency ceiling: a dispatch holds one permit from preflight to its end, except while
    /// it waits for a person at review.
    pub slots: Arc<Semaphore>,
}

/// Why the workflow stopped before its natural end.
#[derive(Debug, Clone, PartialEq)]
enum Stop {
    Failed(String),
    Cancelled(String),
    TimedOut,
    CeilingHit(String),
}

impl Stop {
    fn input(&self) -> Input {
        match self {
            Stop::Failed(_) => Input::Fail,
            Stop::Cancelled(_) => Input::Cancel,
            Stop::TimedOut => Input::TimeOut,
            Stop::CeilingHit(_) => Input::CostCeilingReached,
        }
    }

    fn reason(&self, timeout: Duration) -> String {
        match self {
            Stop::Failed(reason) | Stop::Cancelled(reason) | Stop::CeilingHit(reason) => {
                reason.clone()
            }
            Stop::TimedOut => format!(
                "the dispatch ran past its wall-clock timeout of {}",
                humane(timeout)
            ),
        }
    }
}

fn humane(duration: Duration) -> String {
    let secs = duration.as_secs();
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s} s"),
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

/// What the dispatch ended with, before the `finished` event.
#[derive(Debug)]
struct Ending {
    reason: Option<String>,
}

/// Publishes events to the consumer and the run record, and walks the state machine.
struct Publisher {
    dispatch: DispatchId,
    brief: String,
    events: mpsc::Sender<Event>,
    record: Option<RunRecord>,
    phase: Phase,
    phase_started: (DateTime<Utc>, Instant),
    spans: Vec<PhaseSpan>,
    redactions: u64,
    consumer_gone: bool,
}

impl Publisher {
    async fn emit(&mut self, kind: EventKind) {
        let never = CancellationToken::new();
        self.emit_until(kind, &never).await;
    }

    /// Records the event, then hands it to the consumer unless `stop` fires first (a slow reader
    /// must never hold up a cancel or the timeout). Returns `false` when `stop` won; the event is in
    /// the run record either way.
    async fn emit_until(&mut self, kind: EventKind, stop: &CancellationToken) -> bool {
        if let EventKind::Transcript(item) = &kind {
            self.redactions += count_redactions(item.text.as_str());
        }
        let event = Event::new(self.dispatch, &self.brief, kind);
        if let Some(record) = self.record.as_mut()
            && let Err(error) = record.append(&event)
        {
            tracing::error!(dispatch = %self.dispatch, %error, "the run record stopped taking events");
            self.record = None;
        }
        if self.consumer_gone {
            return true;
        }
        tokio::select! {
            biased;
            sent = self.events.send(event) => {
                // An error means the consumer went away (the UI closed); the run record keeps
                // everything.
                self.consumer_gone = sent.is_err();
                true
            }
            () = stop.cancelled() => false,
        }
    }

    /// Writes an event to the run record only.
    fn record_only(&mut self, kind: EventKind) {
        let event = Event::new(self.dispatch, &self.brief, kind);
        if let Some(record) = self.record.as_mut()
            && let Err(error) = record.append(&event)
        {
            tracing::error!(dispatch = %self.dispatch, %error, "the run record stopped taking events");
            self.record = None;
        }
    }

    /// Moves the state machine and publishes the change. An illegal move is a bug: it is logged and
    /// the dispatch fails rather than continuing in a state the machine does not allow.
    async fn advance(&mut self, input: Input, reason: Option<SanitizedText>) {
        if self.phase.is_terminal() {
            return;
        }
        let (to, reason) = match transition(self.phase, input) {
            Ok(to) => (to, reason),
            Err(error) => {
                tracing::error!(dispatch = %self.dispatch, %error, "illegal transition");
                (Phase::Failed, None)
            }
        };
        let now = (Utc::now(), Instant::now());
        self.spans.push(PhaseSpan {
            phase: self.phase,
            started: self.phase_started.0,
            millis: millis(now.1 - self.phase_started.1),
        });
        let from = std::mem::replace(&mut self.phase, to);
        self.phase_started = now;
        self.emit(EventKind::Phase { from, to, reason }).await;
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The next event of the gateway, or never when there is none (a `select!` arm that stays quiet).
async fn next_event(events: &mut Option<mpsc::Receiver<GatewayEvent>>) -> Option<GatewayEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// The keepalive command with the relay to the gateway's socket added (`stet sandbox-idle --relay`).
fn relayed(keepalive: &[String]) -> Vec<String> {
    let mut command = keepalive.to_vec();
    command.push("--relay".to_owned());
    command.push(format!(
        "{}/{}",
        crate::runtime::GATEWAY_MOUNT,
        crate::relay::SOCKET_NAME
    ));
    command
}

fn count_redactions(text: &str) -> u64 {
    u64::try_from(text.matches("[REDACTED:").count()).unwrap_or(u64::MAX)
}

/// Model usage so far, and the ceiling it is held against. When the model gateway runs, its cost
/// ledger is the one source of spend: the meter copies its settled total, and what the agent reports
/// of its own usage is kept only to be compared with it at the end.
#[derive(Debug, Default)]
struct Meter {
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: u64,
    cost_usd: f64,
    /// The most the gateway's requests in flight held at once.
    peak_reserved_usd: f64,
    model: Option<SanitizedText>,
    ceiling_usd: Option<f64>,
    /// The gateway meters this dispatch.
    gateway: bool,
    /// What the agent reported of its own usage while the gateway metered: `(tokens, cost)`.
    agent_reported: (u64, f64),
}

impl Meter {
    /// One request the gateway settled; the total is the ledger's.
    fn add_settled(
        &mut self,
        report: UsageReport,
        totals: crate::gateway::ledger::Totals,
    ) -> Usage {
        let mut usage = self.add(report);
        self.cost_usd = totals.settled_usd;
        self.peak_reserved_usd = self.peak_reserved_usd.max(totals.peak_reserved_usd);
        usage.total_cost_usd = totals.settled_usd;
        usage
    }

    /// Usage the agent reported itself: counted when nothing else meters the dispatch, otherwise
    /// kept for [`Meter::reconcile`] (`None`: nothing to publish).
    fn add_reported(&mut self, report: UsageReport) -> Option<Usage> {
        if !self.gateway {
            return Some(self.add(report));
        }
        let tokens = report.input_tokens.saturating_add(report.output_tokens);
        self.agent_reported.0 = self.agent_reported.0.saturating_add(tokens);
        if let Some(cost) = report.cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
            self.agent_reported.1 += cost;
        }
        None
    }

    /// The harness's whole-run record compared with the gateway's figures: a warning when they
    /// differ. Never replaces them.
    fn reconcile(&self, usage: &Usage) -> Option<String> {
        let (tokens, cost) = (
            usage.input_tokens.saturating_add(usage.output_tokens),
            usage.total_cost_usd,
        );
        let metered = self.input_tokens.saturating_add(self.output_tokens);
        let cost_differs = (cost - self.cost_usd).abs() > 0.0001_f64.max(self.cost_usd * 0.01);
        (tokens != metered || cost_differs).then(|| {
            format!(
                "the agent's own usage record ({tokens} tokens, ${cost:.4}) differs from what the model gateway metered ({metered} tokens, ${:.4}); stet counts the gateway's",
                self.cost_usd
            )
        })
    }

    fn add(&mut self, report: UsageReport) -> Usage {
        self.input_tokens = self.input_tokens.saturating_add(report.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(report.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(report.cached_tokens);
        if let Some(cost) = report.cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
            self.cost_usd += cost;
        }
        self.model = Some(report.model.clone());
        Usage {
            model: report.model,
            input_tokens: report.input_tokens,
            output_tokens: report.output_tokens,
            cached_tokens: report.cached_tokens,
            cost_usd: report.cost_usd,
            total_cost_usd: self.cost_usd,
            latency_ms: None,
        }
    }

    /// Replaces the totals with a whole-run record (the harness's final usage).
    fn settle(&mut self, usage: &Usage) {
        self.input_tokens = self.input_tokens.max(usage.input_tokens);
        self.output_tokens = self.output_tokens.max(usage.output_tokens);
        self.cached_tokens = self.cached_tokens.max(usage.cached_tokens);
        self.cost_usd = self.cost_usd.max(usage.total_cost_usd);
        self.model = Some(usage.model.clone());
    }

    fn over_ceiling(&self) -> Option<String> {
        let ceiling = self.ceiling_usd?;
        (self.cost_usd >= ceiling).then(|| {
            format!(
                "the model cost reached ${:.4}, at or past the ceiling of ${ceiling:.4}",
                self.cost_usd
            )
        })
    }
}

/// The facts a finished dispatch reports.
#[derive(Debug, Default)]
struct Facts {
    branch: String,
    base: Option<CommitSha>,
    commit: Option<CommitSha>,
    reference: Option<String>,
    pull_request: Option<(u64, SanitizedText)>,
    summary: Option<String>,
    teardown_failures: Vec<SanitizedText>,
}

/// Runs one dispatch to its end and returns its terminal phase. Never panics on a dispatch error:
/// every error becomes the outcome's reason.
pub(crate) async fn run(
    service: DispatchService,
    parts: Arc<DispatchParts>,
    dispatch: DispatchRun,
    events: mpsc::Sender<Event>,
    control: DispatchControl,
) -> Phase {
    let mut flow = Flow::new(service, parts, dispatch, events, control);
    flow.run().await
}

struct Flow {
    service: DispatchService,
    parts: Arc<DispatchParts>,
    run: DispatchRun,
    control: DispatchControl,
    publisher: Publisher,
    meter: Meter,
    facts: Facts,
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
    /// The model gateway, from provisioning until the agent's work is over.
    gateway: Option<Gateway>,
    /// What the gateway reports while the agent runs.
    gateway_events: Option<mpsc::Receiver<GatewayEvent>>,
    /// How the agent reaches the model (the relay in the sandbox), when a gateway runs.
    model_access: Option<ModelAccess>,
}

impl Flow {
    fn new(
        service: DispatchService,
        parts: Arc<DispatchParts>,
        run: DispatchRun,
        events: mpsc::Sender<Event>,
        control: DispatchControl,
    ) -> Flow {
        let model_access = parts.settings.gateway.as_ref().map(|_| ModelAccess {
            base_url: crate::relay::model_base_url(),
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
        let now = (Utc::now(), Instant::now());
        let stop = control.cancel.child_token();
        let branch = planned_branch(&run);
        Flow {
            publisher: Publisher {
                dispatch: run.id,
                brief: run.brief.id.clone(),
                events,
                record,
                phase: Phase::Queued,
                phase_started: now,
                spans: Vec::new(),
                redactions: 0,
                consumer_gone: false,
            },
            meter: Meter {
                ceiling_usd: parts.settings.cost_ceiling_usd,
                gateway: parts.settings.gateway.is_some(),
                ..Meter::default()
            },
            facts: Facts {
                branch,
                ..Facts::default()
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
            gateway: None,
            gateway_events: None,
            model_access,
        }
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
            branch: self.sanitize(&self.facts.branch),
            harness: self.sanitize(&harness_label),
            image: self.sanitize(self.parts.settings.image.as_str()),
        };
        self.publisher.emit(dispatched).await;
        if let Some(error) = self.record_error.take() {
            let reason = format!(
                "the run record could not be created ({error}); a dispatch whose events cannot be kept does not start"
            );
            return self.end(Err(Stop::Failed(reason))).await;
        }
        let slots = Arc::clone(&self.control.slots);
        let permit = tokio::select! {
            biased;
            () = self.control.cancel.cancelled() => None,
            permit = slots.acquire_owned() => permit.ok(),
        };
        let Some(permit) = permit else {
            return self
                .end(Err(Stop::Cancelled("cancelled while queued".to_owned())))
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
            Err(stop) => return self.end(Err(stop)).await,
        };
        self.publisher.advance(Input::PreflightPassed, None).await;
        let sandbox = match self.provision(&preflight).await {
            Ok(sandbox) => sandbox,
            Err(stop) => return self.end(Err(stop)).await,
        };
        let outcome = self.after_provisioning(&sandbox, &preflight, timer).await;
        if let Err(stop) = &outcome {
            let reason = self.sanitize(&stop.reason(self.parts.settings.timeout));
            self.publisher.advance(stop.input(), Some(reason)).await;
        }
        self.teardown(&sandbox).await;
        self.end(outcome).await
    }

    /// Races `work` against the stop token (cancel or timeout).
    async fn guarded<T>(&self, work: impl Future<Output = T>) -> Result<T, Stop> {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => Err(self.stop_reason()),
            value = work => Ok(value),
        }
    }

    fn stop_reason(&self) -> Stop {
        if self.control.cancel.is_cancelled() {
            Stop::Cancelled(format!("cancelled during {}", self.publisher.phase))
        } else if self.expired.is_cancelled() {
            Stop::TimedOut
        } else {
            Stop::Failed("stopped for no recorded reason".to_owned())
        }
    }

    async fn preflight(&mut self) -> Result<Preflight, Stop> {
        let target = &self.run.brief.target;
        if target.pr.is_none() {
            BranchValidator::default()
                .validate(&self.facts.branch, Some(&target.base))
                .map_err(|error| {
                    Stop::Failed(format!("branch {:?}: {error}", self.facts.branch))
                })?;
        }
        let forge = Arc::clone(&self.parts.forge);
        let preflight = self
            .guarded(forge.preflight(target))
            .await?
            .map_err(|error| Stop::Failed(format!("preflight: {error}")))?;
        if let Some(head) = &preflight.head {
            BranchValidator::default()
                .validate(&head.branch, Some(&target.base))
                .map_err(|error| {
                    Stop::Failed(format!(
                        "pull request #{}'s head branch {:?}: {error}",
                        head.number, head.branch
                    ))
                })?;
            self.facts.branch = head.branch.clone();
        }
        self.facts.base = Some(preflight.base_sha.clone());
        self.plan = Some(self.plan_agent()?);
        Ok(preflight)
    }

    /// Renders the instructions and lets the harness plan its run: a misnamed workflow or a missing
    /// model key fails here, before anything is provisioned.
    fn plan_agent(&self) -> Result<HarnessPlan, Stop> {
        let brief = &self.run.brief;
        let workflow = Workflow::builtin(&brief.workflow).map_err(|error| {
            Stop::Failed(format!(
                "brief {}: workflow {:?}: {error}",
                brief.id, brief.workflow
            ))
        })?;
        let instructions = workflow.render(brief, &self.facts.branch);
        self.parts
            .harness
            .plan(&HarnessLaunch {
                dispatch: self.run.id,
                brief,
                instructions: &instructions,
                model: self.model_access.as_ref(),
            })
            .map_err(|error| Stop::Failed(format!("brief {}: {error}", brief.id)))
    }

    async fn provision(&mut self, preflight: &Preflight) -> Result<DispatchSandbox, Stop> {
        let settings = &self.parts.settings;
        let request = SandboxRequest {
            dispatch: self.run.id,
            image: settings.image.clone(),
            limits: settings.limits,
            network: settings.network,
            user: settings.user,
            keepalive: match &settings.gateway {
                Some(_) => relayed(&settings.keepalive),
                None => settings.keepalive.clone(),
            },
            gateway: settings
                .gateway
                .as_ref()
                .map(|_| self.service.socket_place().clone()),
            workspace_source: Some(WorkspaceSource {
                repository: self.parts.repository.clone(),
                base: preflight.base_sha.clone(),
                fetch: Some(BaseFetch {
                    url: preflight.push_url.clone(),
                    branch: self.run.brief.target.base.clone(),
                }),
            }),
            credential: Some(CredentialRequest {
                provider: Arc::clone(&self.parts.credentials),
                repository: self.run.brief.target.repo.clone(),
                branch: self.facts.branch.clone(),
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
                    error => Err(Stop::Failed(format!("provisioning: {error}"))),
                }
            }
        }
    }

    async fn after_provisioning(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
        timer: tokio::task::JoinHandle<()>,
    ) -> Result<Ending, Stop> {
        if let Some(credential) = sandbox.credential()
            && let Err(error) = credential.mask_in(&self.parts.sanitizer)
        {
            return Err(Stop::Failed(format!(
                "the scoped credential cannot be masked in output: {error}"
            )));
        }
        if self.stop.is_cancelled() {
            return Err(self.stop_reason());
        }
        self.start_gateway(sandbox).await?;
        self.publisher.advance(Input::Provisioned, None).await;
        let ran = self.run_agent(sandbox).await;
        self.stop_gateway().await;
        self.facts.summary = ran?;
        self.publisher.advance(Input::AgentFinished, None).await;
        // Nothing of the agent runs from here on (a process it left in the background included):
        // not while its result is collected, not while a person reviews it.
        sandbox.remove_container().await.map_err(|failure| {
            Stop::Failed(format!(
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
            return Ok(Ending {
                reason: Some("the agent changed nothing; there is nothing to push".to_owned()),
            });
        };
        let known = gate.known_values();
        if !known.is_empty() {
            // Whatever the delivery: no decision at review can push it.
            return Err(Stop::Failed(format!(
                "the result holds a value stet itself handles ({}); it is never pushed. It stays only at {} in this repository: remove it with `git update-ref -d {}` and rotate the value",
                joined(&known),
                result_ref(self.run.id),
                result_ref(self.run.id)
            )));
        }
        match self.run.delivery {
            Delivery::Keep => {
                let mut reason = format!(
                    "the result is kept at {} in the repository and was not pushed (run with --push to push it)",
                    result_ref(self.run.id)
                );
                if gate.needs_approval() {
                    reason.push_str(&format!("; {}", needs_approval(&gate)));
                }
                let sanitized = self.sanitize(&reason);
                self.publisher.advance(Input::Kept, Some(sanitized)).await;
                return Ok(Ending {
                    reason: Some(reason),
                });
            }
            Delivery::Push if gate.needs_approval() => {
                return Err(Stop::Failed(format!(
                    "{}; it was kept at {} and not pushed: review it and push it from the theater",
                    needs_approval(&gate),
                    result_ref(self.run.id)
                )));
            }
            Delivery::Push => {
                self.publisher
                    .advance(Input::Collected { review: false }, None)
                    .await;
            }
            Delivery::Review => {
                // A decision sent before there was anything to review is not a decision about it.
                while self.control.decisions.try_recv().is_ok() {}
                self.publisher
                    .advance(Input::Collected { review: true }, None)
                    .await;
                // A person may take their time: the slot goes to the next queued dispatch meanwhile.
                self.permit = None;
                let decision = tokio::select! {
                    biased;
                    () = self.control.cancel.cancelled() => None,
                    decision = self.control.decisions.recv() => decision,
                };
                match decision {
                    Some(Decision::Approve) => {
                        let slots = Arc::clone(&self.control.slots);
                        self.permit = tokio::select! {
                            biased;
                            () = self.control.cancel.cancelled() => None,
                            permit = slots.acquire_owned() => permit.ok(),
                        };
                        if self.permit.is_none() {
                            return Err(Stop::Cancelled(
                                "cancelled while waiting for a slot to push".to_owned(),
                            ));
                        }
                        self.publisher.advance(Input::Approved, None).await;
                    }
                    Some(Decision::Discard) => {
                        let reason = "the result was discarded at review";
                        let sanitized = self.sanitize(reason);
                        self.publisher
                            .advance(Input::Discarded, Some(sanitized))
                            .await;
                        return Ok(Ending {
                            reason: Some(reason.to_owned()),
                        });
                    }
                    None => {
                        return Err(Stop::Cancelled(
                            "cancelled while awaiting approval".to_owned(),
                        ));
                    }
                }
            }
        }
        self.deliver(sandbox, preflight, &commit).await
    }

    /// Stages the harness's files and runs its processes, reading their output live. Returns the
    /// agent's summary when it finished.
    async fn run_agent(&mut self, sandbox: &DispatchSandbox) -> Result<Option<String>, Stop> {
        let plan = match self.plan.take() {
            Some(plan) => plan,
            None => self.plan_agent()?,
        };
        for (label, secret) in self.parts.harness.secrets(&plan) {
            KnownValue::new(label, secret.expose_secret())
                .and_then(|known| self.parts.sanitizer.register(known))
                .map_err(|error| {
                    Stop::Failed(format!(
                        "the agent's {label} cannot be masked in output: {error}"
                    ))
                })?;
        }
        let outputs = sandbox.paths().outputs.clone();
        // The agent may add to its workspace and outputs what an import would take, and some room.
        let disk = DiskWatch::start(
            vec![sandbox.paths().workspace.clone(), outputs.clone()],
            disk_watch::bound_for(self.parts.settings.import.max_total_bytes),
            DEFAULT_FLOOR_BYTES,
        )
        .map_err(|error| Stop::Failed(error.to_string()))?;
        for file in &plan.files {
            stage(&outputs, file, self.parts.settings.user)
                .map_err(|error| Stop::Failed(format!("staging {}: {error}", file.name)))?;
        }
        let mut parser = self.parts.harness.parser(self.sanitizer());
        for process in &plan.processes {
            let exit = self
                .execute(sandbox, process, parser.as_mut(), &disk)
                .await?;
            if exit.oom_killed {
                return Err(Stop::Failed(
                    "the agent was killed for going past the sandbox's memory cap".to_owned(),
                ));
            }
            if exit.code != 0 {
                let program = process.argv.first().map_or("", String::as_str);
                return Err(Stop::Failed(format!(
                    "the agent ({program}) exited with code {}",
                    exit.code
                )));
            }
        }
        // The harness may walk the outputs directory: off the async workers.
        let (harness, sanitizer, walked) = (
            Arc::clone(&self.parts.harness),
            self.sanitizer(),
            outputs.clone(),
        );
        let final_usage =
            tokio::task::spawn_blocking(move || harness.final_usage(&walked, &sanitizer))
                .await
                .map_err(|error| {
                    Stop::Failed(format!(
                        "reading the agent's usage ended abnormally: {error}"
                    ))
                })?;
        match final_usage {
            Ok(Some(usage)) if self.meter.gateway => {
                if let Some(warning) = self.meter.reconcile(&usage) {
                    let message = self.sanitize(&warning);
                    self.publisher.emit(EventKind::Warning { message }).await;
                }
            }
            Ok(Some(usage)) => {
                self.meter.settle(&usage);
                self.publisher.emit(EventKind::Usage(usage)).await;
                if let Some(reason) = self.meter.over_ceiling() {
                    return Err(Stop::CeilingHit(reason));
                }
            }
            Ok(None) => {}
            Err(error) => {
                let message = self.sanitize(&error.to_string());
                self.publisher.emit(EventKind::Warning { message }).await;
            }
        }
        match parser.outcome() {
            HarnessOutcome::Succeeded { summary } => Ok(summary.map(SanitizedText::into_string)),
            HarnessOutcome::Failed { reason } => Err(Stop::Failed(format!(
                "the agent did not finish: {}",
                reason.as_str()
            ))),
        }
    }

    /// Runs one process, publishing what the parser reads from its output as it arrives.
    async fn execute(
        &mut self,
        sandbox: &DispatchSandbox,
        process: &crate::runtime::SandboxProcess,
        parser: &mut dyn OutputParser,
        disk: &DiskWatch,
    ) -> Result<crate::runtime::ExecExit, Stop> {
        let (sender, mut lines) = mpsc::channel::<OutputLine>(OUTPUT_BUFFER);
        let stop = self.stop.clone();
        let exec = sandbox.run(process, sender);
        tokio::pin!(exec);
        let breach = disk.breach();
        tokio::pin!(breach);
        let mut exit = None;
        let mut gateway = self.gateway_events.take();
        let ran = loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => {
                    self.record_pending(&mut lines, parser);
                    break Err(self.stop_reason());
                }
                reason = &mut breach => {
                    self.record_pending(&mut lines, parser);
                    break Err(Stop::Failed(reason));
                }
                Some(event) = next_event(&mut gateway) => match self.gateway_event(event, &stop).await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.record_pending(&mut lines, parser);
                        break Err(self.stop_reason());
                    }
                    Err(stop) => {
                        self.record_pending(&mut lines, parser);
                        break Err(stop);
                    }
                },
                line = lines.recv() => match line {
                    Some(line) => {
                        let mut published = Ok(true);
                        for parsed in parser.parse(&line) {
                            published = self.publish_parsed(parsed, &stop).await;
                            if !matches!(published, Ok(true)) {
                                break;
                            }
                        }
                        match published {
                            Ok(true) => {}
                            Ok(false) => {
                                self.record_pending(&mut lines, parser);
                                break Err(self.stop_reason());
                            }
                            Err(stop) => break Err(stop),
                        }
                    }
                    None => break Ok(()),
                },
                result = &mut exec, if exit.is_none() => exit = Some(result),
            }
        };
        self.gateway_events = gateway;
        ran?;
        let result = match exit {
            Some(result) => result,
            None => exec.await,
        };
        result.map_err(|error| Stop::Failed(format!("running the agent: {error}")))
    }

    /// Publishes what the parser read; `Ok(false)` when `stop` fired while a slow consumer held the
    /// event up.
    async fn publish_parsed(
        &mut self,
        parsed: Parsed,
        stop: &CancellationToken,
    ) -> Result<bool, Stop> {
        match self.parsed_kind(parsed) {
            Some(kind) => self.publish_until(kind, stop).await,
            None => Ok(true),
        }
    }

    /// The event a parsed item or usage report becomes (`None`: nothing to publish); usage is added
    /// to the meter.
    fn parsed_kind(&mut self, parsed: Parsed) -> Option<EventKind> {
        match parsed {
            Parsed::Item(item) => Some(EventKind::Transcript(item)),
            Parsed::Usage(report) => self.meter.add_reported(report).map(EventKind::Usage),
        }
    }

    /// Publishes `kind` unless `stop` fires while a slow consumer holds it up (`Ok(false)`); usage is
    /// then held against the ceiling.
    async fn publish_until(
        &mut self,
        kind: EventKind,
        stop: &CancellationToken,
    ) -> Result<bool, Stop> {
        let usage = matches!(kind, EventKind::Usage(_));
        let delivered = self.publisher.emit_until(kind, stop).await;
        match self.meter.over_ceiling().filter(|_| usage) {
            Some(reason) => Err(Stop::CeilingHit(reason)),
            None => Ok(delivered),
        }
    }

    /// Starts the model gateway on the socket in the sandbox's gateway directory (mounted at
    /// `/run/stet`, where the relay in the sandbox reaches it), when a model endpoint is configured.
    async fn start_gateway(&mut self, sandbox: &DispatchSandbox) -> Result<(), Stop> {
        let Some(settings) = &self.parts.settings.gateway else {
            return Ok(());
        };
        let Some(directory) = &sandbox.paths().gateway else {
            return Err(Stop::Failed(
                "the sandbox was provisioned without the model gateway's socket directory"
                    .to_owned(),
            ));
        };
        let socket = directory.join(crate::relay::SOCKET_NAME);
        let config = GatewayConfig {
            upstream: settings.upstream.clone(),
            api_key: settings.api_key.clone(),
            prices: Arc::clone(&settings.prices),
            ceiling_usd: self.parts.settings.cost_ceiling_usd,
            request_timeout: settings.request_timeout,
            limits: settings.limits,
        };
        let (gateway, events) = Gateway::start(&socket, config, self.sanitizer())
            .await
            .map_err(|error| Stop::Failed(format!("starting the model gateway: {error}")))?;
        crate::dispatch::sandbox::hand_over(&socket, self.parts.settings.user)
            .map_err(|error| Stop::Failed(format!("handing the model gateway over: {error}")))?;
        self.gateway = Some(gateway);
        self.gateway_events = Some(events);
        Ok(())
    }

    /// Stops the model gateway (the agent's work is over, or the dispatch is being torn down); usage
    /// it metered for requests that ended as the agent did still counts and is published.
    async fn stop_gateway(&mut self) {
        if let Some(gateway) = self.gateway.take() {
            gateway.shutdown().await;
        }
        let Some(mut events) = self.gateway_events.take() else {
            return;
        };
        while let Ok(event) = events.try_recv() {
            if let Ok(kind) = self.gateway_kind(event) {
                self.publisher.emit(kind).await;
            }
        }
    }

    /// Publishes what the gateway reports: metered usage (held against the ceiling), a request that
    /// went wrong as an error item, the ceiling reached as the stop it is.
    async fn gateway_event(
        &mut self,
        event: GatewayEvent,
        stop: &CancellationToken,
    ) -> Result<bool, Stop> {
        let kind = self.gateway_kind(event)?;
        self.publish_until(kind, stop).await
    }

    /// The event a gateway report becomes (usage is added to the meter, with the request's latency);
    /// the ceiling reached is the stop it causes.
    fn gateway_kind(&mut self, event: GatewayEvent) -> Result<EventKind, Stop> {
        match event {
            GatewayEvent::Usage {
                report,
                totals,
                latency,
                ..
            } => {
                let mut usage = self.meter.add_settled(report, totals);
                usage.latency_ms = Some(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX));
                Ok(EventKind::Usage(usage))
            }
            GatewayEvent::Error { message } => Ok(EventKind::Transcript(TranscriptItem {
                item: ItemKind::Error,
                text: message,
            })),
            GatewayEvent::CeilingReached {
                spent_usd,
                ceiling_usd,
            } => Err(Stop::CeilingHit(format!(
                "the model cost reached ${spent_usd:.4}, at or past the ceiling of ${ceiling_usd:.4}; the gateway refuses further requests"
            ))),
        }
    }

    /// On a stop, the lines already read from the container still go to the run record (the
    /// consumer is not waited for): nothing the agent printed is dropped silently.
    fn record_pending(
        &mut self,
        lines: &mut mpsc::Receiver<OutputLine>,
        parser: &mut dyn OutputParser,
    ) {
        while let Ok(line) = lines.try_recv() {
            for parsed in parser.parse(&line) {
                if let Some(kind) = self.parsed_kind(parsed) {
                    self.publisher.record_only(kind);
                }
            }
        }
    }

    /// Imports the workspace into a trusted commit kept at [`result_ref`] and passes it through the
    /// review gate; `None` when nothing changed. Returns the commit and what the gate found.
    async fn collect(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
    ) -> Result<Option<(CommitSha, GateReport)>, Stop> {
        if self.stop.is_cancelled() {
            return Err(self.stop_reason());
        }
        let message = self.commit_message();
        let repository = self.parts.repository.clone();
        let workspace = sandbox.paths().workspace.clone();
        let parent = preflight.parent().clone();
        let identity = self.parts.settings.agent.clone();
        let limits = self.parts.settings.import;
        let reference = result_ref(self.run.id);
        let keep_at = reference.clone();
        let rules = self.parts.settings.protected.clone();
        let sanitizer = self.sanitizer();
        // The import goes on in its thread when the dispatch stops; told so, it ends writing nothing.
        let stop = self.stop.clone();
        let imported = tokio::task::spawn_blocking(move || {
            let request = ImportRequest {
                repository: &repository,
                workspace: &workspace,
                parent: &parent,
                identity: &identity,
                message: &message,
                limits,
            };
            let imported = import_until(&request, &|| stop.is_cancelled())
                .map_err(|error| format!("collecting the result: {error}"))?;
            let Imported::Committed { commit, .. } = &imported else {
                return Ok::<_, String>((imported, GateReport::default()));
            };
            keep_result(&repository, &keep_at, commit)?;
            let changes = read_changes(&repository, &parent, commit)
                .map_err(|error| format!("reviewing the result: {error}"))?;
            let gate = inspect(&changes, &rules, &sanitizer);
            Ok((imported, gate))
        });
        let imported = self
            .guarded(imported)
            .await?
            .map_err(|error| {
                Stop::Failed(format!("collecting the result ended abnormally: {error}"))
            })?
            .map_err(Stop::Failed)?;
        let (imported, gate) = imported;
        let (commit, diff, warnings) = match imported {
            Imported::Committed {
                commit,
                diff,
                warnings,
            } => (commit, diff, warnings),
            Imported::Unchanged { warnings } => {
                for warning in warnings {
                    let message = self.sanitize(&warning.to_string());
                    self.publisher.emit(EventKind::Warning { message }).await;
                }
                if self.stop.is_cancelled() {
                    return Err(self.stop_reason());
                }
                return Ok(None);
            }
        };
        for warning in &warnings {
            let message = self.sanitize(&warning.to_string());
            self.publisher.emit(EventKind::Warning { message }).await;
        }
        let mut held_warnings: Vec<String> = gate
            .held
            .iter()
            .map(|held| {
                format!("the result changes a protected path: {held}; it is held for review")
            })
            .collect();
        let mut secret_warnings: Vec<String> = gate
            .secrets
            .iter()
            .map(|finding| {
                if finding.known {
                    format!(
                        "the result holds a value stet itself handles: {finding}; it will not be pushed"
                    )
                } else {
                    format!(
                        "the result holds what looks like a secret: {finding}; it is held for review"
                    )
                }
            })
            .collect();
        for warnings in [&mut held_warnings, &mut secret_warnings] {
            if warnings.len() > MAX_NAMED {
                let more = warnings.len() - MAX_NAMED;
                warnings.truncate(MAX_NAMED);
                warnings.push(format!("… and {more} more (listed in the collected event)"));
            }
        }
        for warning in held_warnings.into_iter().chain(secret_warnings) {
            let message = self.sanitize(&warning);
            self.publisher.emit(EventKind::Warning { message }).await;
        }
        let files = diff
            .files
            .iter()
            .map(|file| ChangedPath {
                path: self.sanitize(&printable(&file.path)),
                change: file.change,
                insertions: file.insertions,
                deletions: file.deletions,
                binary: file.binary,
            })
            .collect();
        if let Some(record) = &self.publisher.record
            && let Err(error) = record.write_patch(&self.sanitize(&diff.patch))
        {
            let message = self.sanitize(&format!("the diff was not saved: {error}"));
            self.publisher.emit(EventKind::Warning { message }).await;
        }
        let collected = EventKind::Collected {
            commit: commit.clone(),
            reference: self.sanitize(&reference),
            files,
            insertions: diff.insertions,
            deletions: diff.deletions,
            gate: Box::new(GateFindings {
                protected: gate
                    .held
                    .iter()
                    .map(|held| self.sanitize(&held.to_string()))
                    .collect(),
                held: gate
                    .held
                    .iter()
                    .map(|held| HeldPathReport {
                        path: self.sanitize(&held.path),
                        rule: self.sanitize(&held.rule()),
                    })
                    .collect(),
                secrets: gate
                    .secrets
                    .iter()
                    .map(|finding| SecretReport {
                        path: self.sanitize(&finding.path),
                        line: finding.line.and_then(|line| u64::try_from(line).ok()),
                        kind: self.sanitize(&finding.kind),
                        known: finding.known,
                    })
                    .collect(),
            }),
        };
        self.publisher.emit(collected).await;
        self.facts.commit = Some(commit.clone());
        self.facts.reference = Some(reference);
        if self.stop.is_cancelled() {
            return Err(self.stop_reason());
        }
        Ok(Some((commit, gate)))
    }

    /// The brief's title, the agent's summary made inert the way the pull request shows it (a forge
    /// renders a commit message as markdown when it fills in a pull request), and where it came from;
    /// no invisible character anywhere.
    fn commit_message(&self) -> SanitizedText {
        let brief = &self.run.brief;
        let mut message = display::without_invisible(brief.title.trim())
            .text
            .into_owned();
        if let Some(summary) = self.facts.summary.as_deref().map(str::trim)
            && !summary.is_empty()
        {
            let shown =
                display::forge_text(&self.sanitizer(), truncate(summary, MAX_SUMMARY_BYTES));
            message.push_str("\n\n");
            message.push_str(shown.text.as_str());
        }
        message.push_str(&format!(
            "\n\nDispatched by stet from brief {} ({}).",
            brief.id, self.run.id
        ));
        self.sanitize(&message)
    }

    /// Pushes the result and opens or updates the pull request, host side.
    async fn deliver(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
        commit: &CommitSha,
    ) -> Result<Ending, Stop> {
        let Some(credential) = sandbox.credential() else {
            return Err(Stop::Failed(
                "the dispatch has no scoped credential to push with".to_owned(),
            ));
        };
        let forge = Arc::clone(&self.parts.forge);
        // A push in flight is not interrupted: a cancel takes effect once it returned.
        let pushed = forge
            .push_branch(PushBranch {
                repository: &self.parts.repository,
                target: &self.run.brief.target,
                preflight,
                commit,
                branch: &self.facts.branch,
                credential,
            })
            .await
            .map_err(|error| Stop::Failed(format!("push: {error}")))?;
        let event = EventKind::Pushed {
            branch: self.sanitize(&pushed.branch),
            sha: pushed.commit.clone(),
            remote: self.sanitize(&preflight.push_url),
        };
        self.publisher.emit(event).await;
        if self.control.cancel.is_cancelled() {
            return Err(Stop::Cancelled(
                "cancelled during pushing; the branch was pushed, no pull request was opened"
                    .to_owned(),
            ));
        }
        self.publisher.advance(Input::Pushed, None).await;
        let provenance = self.provenance(preflight, commit, credential.provider_name());
        let draft = PullRequestDraft::compose(
            &self.run.brief,
            &self.facts.branch,
            self.facts.summary.as_deref(),
            &provenance,
            &self.sanitizer(),
        );
        let target = &self.run.brief.target;
        let (opened, action) = match &preflight.head {
            Some(head) => (
                forge.update_pull_request(target, head.number, &draft).await,
                PullRequestAction::Updated,
            ),
            None => (
                forge.open_pull_request(target, &draft).await,
                PullRequestAction::Opened,
            ),
        };
        let pull_request = opened.map_err(|error| {
            Stop::Failed(format!(
                "the branch was pushed but the pull request failed: {error}"
            ))
        })?;
        let url = self.sanitize(&pull_request.url);
        self.publisher
            .emit(EventKind::PullRequest {
                action,
                number: pull_request.number,
                url: url.clone(),
            })
            .await;
        self.facts.pull_request = Some((pull_request.number, url));
        self.publisher.advance(Input::PullRequestReady, None).await;
        Ok(Ending { reason: None })
    }

    fn provenance(
        &self,
        preflight: &Preflight,
        commit: &CommitSha,
        credential_kind: &str,
    ) -> Provenance {
        let harness = &self.parts.harness;
        let has_usage = self.meter.model.is_some();
        Provenance {
            dispatch: self.run.id,
            image: self.parts.settings.image.to_string(),
            harness: harness.name().to_owned(),
            harness_version: harness.version(),
            model: self
                .meter
                .model
                .as_ref()
                .map(|m| m.as_str().to_owned())
                .or_else(|| harness.model()),
            input_tokens: has_usage.then_some(self.meter.input_tokens),
            output_tokens: has_usage.then_some(self.meter.output_tokens),
            cost_usd: has_usage.then_some(self.meter.cost_usd),
            peak_reserved_usd: (self.meter.peak_reserved_usd > 0.0)
                .then_some(self.meter.peak_reserved_usd),
            network: match self.parts.settings.network {
                NetworkPolicy::None => "none".to_owned(),
                NetworkPolicy::Bridge => "bridge".to_owned(),
            },
            credential_kind: credential_kind.to_owned(),
            redactions: self.publisher.redactions,
            duration: self.started.1.elapsed(),
            base: preflight.base_sha.clone(),
            commit: commit.clone(),
        }
    }

    async fn teardown(&mut self, sandbox: &DispatchSandbox) {
        self.stop_gateway().await;
        let started = Instant::now();
        let report = sandbox.teardown().await;
        self.report_teardown(&report, started.elapsed()).await;
    }

    /// Publishes a teardown: each step as a `torn_down` event, each failure as a warning.
    async fn report_teardown(&mut self, report: &TeardownReport, took: Duration) {
        let mut steps = Vec::with_capacity(report.steps.len());
        for step in &report.steps {
            let failure = step.failure.as_deref().map(|f| self.sanitize(f));
            if let Some(failure) = &failure {
                self.facts.teardown_failures.push(failure.clone());
            }
            steps.push(TeardownStepReport {
                resource: self.sanitize(&step.resource.to_string()),
                failure,
            });
        }
        for extra in [&report.journal_failure, &report.directory_failure]
            .into_iter()
            .flatten()
        {
            self.facts.teardown_failures.push(self.sanitize(extra));
        }
        self.publisher
            .emit(EventKind::TornDown {
                steps,
                millis: millis(took),
            })
            .await;
        for failure in self.facts.teardown_failures.clone() {
            let message = self.sanitize(&format!(
                "teardown: {}; it stays journaled and `stet sweep` retries it",
                failure.as_str()
            ));
            self.publisher.emit(EventKind::Warning { message }).await;
        }
    }

    /// Publishes the terminal phase (when the workflow did not reach it itself), writes the result
    /// and publishes `finished`.
    async fn end(&mut self, outcome: Result<Ending, Stop>) -> Phase {
        let reason = match outcome {
            Ok(ending) => ending.reason,
            Err(stop) => {
                let reason = stop.reason(self.parts.settings.timeout);
                if !self.publisher.phase.is_terminal() {
                    let sanitized = self.sanitize(&reason);
                    self.publisher.advance(stop.input(), Some(sanitized)).await;
                }
                Some(reason)
            }
        };
        let phase = self.publisher.phase;
        let exit_code = phase.exit_code().unwrap_or(1);
        let reason = reason.map(|r| self.sanitize(&r));
        let now = Utc::now();
        self.publisher.spans.push(PhaseSpan {
            phase,
            started: self.publisher.phase_started.0,
            millis: 0,
        });
        let result = RunResult {
            dispatch: self.run.id,
            brief: self.run.brief.id.clone(),
            outcome: phase,
            exit_code,
            reason: reason.clone(),
            started: self.started.0,
            ended: now,
            phases: std::mem::take(&mut self.publisher.spans),
            harness: self.parts.harness.name().to_owned(),
            image: self.parts.settings.image.to_string(),
            branch: self.sanitize(&self.facts.branch),
            base: self.facts.base.clone(),
            commit: self.facts.commit.clone(),
            reference: self.facts.reference.clone(),
            pull_request: self.facts.pull_request.as_ref().map(|(n, _)| *n),
            pull_request_url: self.facts.pull_request.as_ref().map(|(_, u)| u.clone()),
            input_tokens: self.meter.input_tokens,
            output_tokens: self.meter.output_tokens,
            cost_usd: self.meter.cost_usd,
            redactions: self.publisher.redactions,
            teardown_failures: self.facts.teardown_failures.clone(),
        };
        if let Some(record) = &self.publisher.record
            && let Err(error) = record.write_result(&result)
        {
            tracing::error!(dispatch = %self.run.id, %error, "writing the run result");
        }
        self.publisher
            .emit(EventKind::Finished {
                outcome: phase,
                exit_code,
                reason,
            })
            .await;
        phase
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

/// Writes `refs/stet/<dispatch>` at the result, so it is never lost (and is what `--headless`
/// without `--push` leaves).
fn keep_result(repository: &Path, reference: &str, commit: &CommitSha) -> Result<(), String> {
    let repo = git2::Repository::open(repository)
        .map_err(|error| format!("{}: {}", repository.display(), error.message()))?;
    let oid = git2::Oid::from_str(commit.as_str()).map_err(|error| error.message().to_owned())?;
    repo.reference(reference, oid, false, "stet: dispatch result")
        .map_err(|error| format!("writing {reference}: {}", error.message()))?;
    Ok(())
}

/// Writes one staged file into the outputs directory: a plain name, created new, never through a
/// link, then handed to the sandbox user.
fn stage(
    outputs: &Path,
    file: &StagedFile,
    user: crate::runtime::SandboxUser,
) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let plain = !file.name.is_empty()
        && file.name != "."
        && file.name != ".."
        && !file.name.contains('/')
        && !file.name.contains('\0');
    if !plain {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{:?} is not a plain file name", file.name),
        ));
    }
    let path = outputs.join(&file.name);
    let flags = i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0);
    let mut handle = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(flags)
        .open(&path)?;
    handle.write_all(&file.contents)?;
    handle.sync_all()?;
    std::os::unix::fs::fchown(&handle, Some(user.uid), Some(user.gid))
}

/// What the review gate holds a result for, as one sentence.
fn needs_approval(gate: &GateReport) -> String {
    let mut parts = Vec::new();
    if !gate.held.is_empty() {
        parts.push(format!(
            "it changes {}",
            joined(&gate.held.iter().collect::<Vec<_>>())
        ));
    }
    let shaped = gate.shaped_secrets();
    if !shaped.is_empty() {
        parts.push(format!(
            "it holds what looks like a secret: {}",
            joined(&shaped)
        ));
    }
    format!("the result needs a person's approval: {}", parts.join("; "))
}

/// The most held paths, or findings, a reason names; the `collected` event lists them all.
const MAX_NAMED: usize = 12;

fn joined<T: std::fmt::Display>(items: &[&T]) -> String {
    let mut named: Vec<String> = items
        .iter()
        .take(MAX_NAMED)
        .map(ToString::to_string)
        .collect();
    if items.len() > MAX_NAMED {
        named.push(format!(
            "and {} more (listed in the collected event)",
            items.len() - MAX_NAMED
        ));
    }
    named.join(", ")
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
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sanitizer() -> Arc<TokenSanitizer> {
        Arc::new(TokenSanitizer::new().unwrap())
    }

    #[test]
    fn the_meter_totals_costs_and_trips_at_the_ceiling() {
        let s = sanitizer();
        let mut meter = Meter {
            ceiling_usd: Some(0.10),
            ..Meter::default()
        };
        let report = |cost| UsageReport {
            model: s.sanitize("m"),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 0,
            cost_usd: cost,
        };
        let first = meter.add(report(Some(0.06)));
        assert!((first.total_cost_usd - 0.06).abs() < 1e-9);
        assert!(meter.over_ceiling().is_none());
        meter.add(report(None));
        assert!(
            meter.over_ceiling().is_none(),
            "an unknown cost adds nothing"
        );
        meter.add(report(Some(0.04)));
        assert!(meter.over_ceiling().unwrap().contains("ceiling of $0.1000"));
        assert_eq!(meter.input_tokens, 300);
        let mut unlimited = Meter::default();
        unlimited.add(report(Some(1e9)));
        assert!(unlimited.over_ceiling().is_none());
    }

    #[test]
    fn with_the_gateway_its_ledger_is_the_total_and_the_agents_figures_only_reconcile() {
        let s = sanitizer();
        let mut meter = Meter {
            ceiling_usd: Some(1.0),
            gateway: true,
            ..Meter::default()
        };
        let report = |model: &str, cost| UsageReport {
            model: s.sanitize(model),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 0,
            cost_usd: cost,
        };
        let totals = |settled_usd| crate::gateway::ledger::Totals {
            settled_usd,
            reserved_usd: 0.0,
            peak_reserved_usd: 0.4,
            open: 0,
        };
        let usage = meter.add_settled(report("gpt-4o", Some(0.2)), totals(0.2));
        assert_eq!(usage.total_cost_usd, 0.2);
        // The agent's own figures never move the total, the model or the tokens.
        assert!(meter.add_reported(report("alias", Some(5.0))).is_none());
        assert_eq!(
            (
                meter.cost_usd,
                meter.input_tokens,
                meter.model.as_ref().unwrap().as_str()
            ),
            (0.2, 100, "gpt-4o")
        );
        assert!(meter.over_ceiling().is_none());
        // The ledger's figure is the total, even where it counted a reservation no usage reported.
        meter.add_settled(report("gpt-4o", Some(0.3)), totals(0.7));
        assert_eq!(meter.cost_usd, 0.7);
        assert_eq!(meter.peak_reserved_usd, 0.4);
        // The harness's final record, $0.0 for an alias LiteLLM does not price, is a warning.
        let final_usage = |tokens: u64, cost: f64| Usage {
            model: s.sanitize("alias"),
            input_tokens: tokens,
            output_tokens: 0,
            cached_tokens: 0,
            cost_usd: Some(cost),
            total_cost_usd: cost,
            latency_ms: None,
        };
        let warning = meter.reconcile(&final_usage(220, 0.0)).unwrap();
        assert!(
            warning.contains("$0.0000") && warning.contains("$0.7000"),
            "{warning}"
        );
        assert!(meter.reconcile(&final_usage(220, 0.7)).is_none());
        assert_eq!(meter.cost_usd, 0.7);
        // Without the gateway the agent's report is the only one, and counts.
        let mut alone = Meter::default();
        assert_eq!(
            alone
                .add_reported(report("m", Some(0.5)))
                .unwrap()
                .total_cost_usd,
            0.5
        );
    }

    #[test]
    fn staged_files_are_plain_names_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let user =
            crate::runtime::SandboxUser::for_invoker(crate::runtime::DEFAULT_SANDBOX_UID).unwrap();
        let file = |name: &str| StagedFile {
            name: name.into(),
            contents: b"--help $(touch /tmp/x)".to_vec(),
        };
        stage(dir.path(), &file("task.md"), user).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("task.md")).unwrap(),
            b"--help $(touch /tmp/x)"
        );
        assert!(
            stage(dir.path(), &file("task.md"), user).is_err(),
            "never overwritten"
        );
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert!(stage(dir.path(), &file(bad), user).is_err(), "{bad:?}");
        }
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.md")).unwrap();
        assert!(stage(dir.path(), &file("link.md"), user).is_err());
    }

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

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("héllo", 2), "h");
    }

    #[test]
    fn a_long_list_is_cut_with_a_count() {
        let items: Vec<String> = (0..20).map(|n| format!("f{n}")).collect();
        let items: Vec<&String> = items.iter().collect();
        let text = joined(&items);
        assert!(text.starts_with("f0, f1, "), "{text}");
        assert!(text.contains("f11, and 8 more"), "{text}");
        assert!(!text.contains("f12"), "{text}");
    }

    #[test]
    fn what_needs_approval_names_each_path_and_finding_with_its_rule() {
        use crate::dispatch::gate::{HeldPath, SecretFinding};
        let gate = GateReport {
            held: vec![
                HeldPath {
                    path: "stet.toml".into(),
                    reasons: vec!["stet's own configuration".into()],
                },
                HeldPath {
                    path: "bin/run".into(),
                    reasons: vec!["newly executable".into()],
                },
            ],
            secrets: vec![SecretFinding {
                path: "app.env".into(),
                line: Some(2),
                kind: "github-token".into(),
                known: false,
            }],
        };
        assert_eq!(
            needs_approval(&gate),
            "the result needs a person's approval: it changes stet.toml (stet's own configuration), bin/run (newly executable); it holds what looks like a secret: app.env line 2 (github-token)"
        );
    }
}
