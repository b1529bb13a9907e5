//! The agent's phase: the harness's files staged, its processes run (each under `stet speak`, the one
//! process that speaks as the agent) with their output read through the agent's voice and published
//! live, raced by cancel, the timeout, the disk bound and the cost ceiling; and the model gateway that
//! serves the agent while it runs.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dispatch::disk_watch::{self, DEFAULT_FLOOR_BYTES, DiskWatch};
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::gateway::{Gateway, GatewayConfig, GatewayEvent};
use crate::git::workspace::Materialized;
use crate::harness::{AgentVoice, HarnessOutcome, ModelAccess, Parsed, StagedFile, speaking};
use crate::runtime::lines::OutputFramer;
use crate::runtime::{OutputChunk, OutputLine};
use stet_protocol::event::{EventKind, ItemKind, TranscriptItem};
use stet_sanitize::sanitize::{KnownValue, SanitizedText};

use super::Dispatch;

/// How many output lines may wait between the container and the parser (back-pressure beyond).
const OUTPUT_BUFFER: usize = 256;

/// The model gateway of one dispatch, from provisioning until the agent's work is over, and how the
/// agent reaches it.
pub(super) struct ModelLink {
    gateway: Option<Gateway>,
    /// What the gateway reports while the agent runs.
    events: Option<mpsc::Receiver<GatewayEvent>>,
    /// How the agent reaches the model (the relay in the sandbox), when a gateway runs.
    pub(super) access: Option<ModelAccess>,
}

impl ModelLink {
    /// The link before its gateway started; `access`: how the agent will reach it, if one will run.
    pub(super) fn new(access: Option<ModelAccess>) -> ModelLink {
        ModelLink {
            gateway: None,
            events: None,
            access,
        }
    }
}

/// The next event of the gateway, or never when there is none (a `select!` arm that stays quiet).
async fn next_event(events: &mut Option<mpsc::Receiver<GatewayEvent>>) -> Option<GatewayEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

impl Dispatch {
    /// Stages the harness's files and runs its processes, reading their output live. Returns the
    /// agent's summary when it finished.
    pub(super) async fn run_agent(
        &mut self,
        sandbox: &DispatchSandbox,
    ) -> Result<Option<String>, DispatchError> {
        let plan = match self.plan.take() {
            Some(plan) => plan,
            None => self.plan_agent()?,
        };
        for (label, secret) in self.parts.harness.secrets(&plan) {
            KnownValue::new(label, secret.expose_secret())
                .and_then(|known| self.parts.sanitizer.register(known))
                .map_err(|error| {
                    self.fail(format!(
                        "the agent's {label} cannot be masked in output: {error}"
                    ))
                })?;
        }
        let outputs = sandbox.paths().outputs.clone();
        // The agent may add to its workspace and outputs what an import would take, and some room;
        // the base's files count from the first byte.
        let base = sandbox
            .base()
            .unwrap_or(Materialized { files: 0, bytes: 0 });
        let disk = DiskWatch::start(
            vec![sandbox.paths().workspace.clone(), outputs.clone()],
            disk_watch::bound_with_base(
                self.parts.settings.import.max_total_bytes,
                base.bytes,
                base.files,
            ),
            DEFAULT_FLOOR_BYTES,
        )
        .map_err(|error| self.fail(error.to_string()))?;
        for file in &plan.files {
            stage(&outputs, file, self.parts.settings.user)
                .map_err(|error| self.fail(format!("staging {}: {error}", file.name)))?;
        }
        let mut parser = self.parts.harness.parser(self.sanitizer());
        let mut voice = AgentVoice::new(parser.as_mut(), self.sanitizer());
        for process in &plan.processes {
            let exit = self
                .execute(sandbox, &speaking(process), &mut voice, &disk)
                .await?;
            if exit.oom_killed {
                return Err(self.fail(
                    "the agent was killed for going past the sandbox's memory cap".to_owned(),
                ));
            }
            if exit.code != 0 {
                let program = process.argv.first().map_or("", String::as_str);
                return Err(self.fail(
                    not_started(program, exit.code, self.parts.harness.name()).unwrap_or_else(
                        || format!("the agent ({program}) exited with code {}", exit.code),
                    ),
                ));
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
                    self.fail(format!(
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
                if let Some(ceiling) = self.meter.over_ceiling() {
                    return Err(ceiling);
                }
            }
            Ok(None) => {}
            Err(error) => {
                let message = self.sanitize(&error.to_string());
                self.publisher.emit(EventKind::Warning { message }).await;
            }
        }
        match voice.outcome() {
            HarnessOutcome::Succeeded { summary } => Ok(summary.map(SanitizedText::into_string)),
            HarnessOutcome::Failed { reason } => {
                Err(self.fail(format!("the agent did not finish: {}", reason.as_str())))
            }
        }
    }

    /// Runs one process, publishing what the agent's voice reads from its output as it arrives.
    pub(super) async fn execute(
        &mut self,
        sandbox: &DispatchSandbox,
        process: &crate::runtime::SandboxProcess,
        voice: &mut AgentVoice<'_>,
        disk: &DiskWatch,
    ) -> Result<crate::runtime::ExecExit, DispatchError> {
        let (sender, mut chunks) = mpsc::channel::<OutputChunk>(OUTPUT_BUFFER);
        let mut framer = OutputFramer::new(&self.sanitizer());
        let stop = self.stop.clone();
        let exec = sandbox.run(process, sender);
        tokio::pin!(exec);
        let breach = disk.breach();
        tokio::pin!(breach);
        let mut exit = None;
        let mut gateway = self.model.events.take();
        let ran = loop {
            let stopped = tokio::select! {
                biased;
                () = stop.cancelled() => self.stop_reason(),
                reason = &mut breach => self.fail(reason),
                Some(event) = next_event(&mut gateway) => match self.gateway_event(event, &stop).await {
                    Ok(true) => continue,
                    Ok(false) => self.stop_reason(),
                    Err(stopped) => stopped,
                },
                chunk = chunks.recv() => {
                    let (lines, ended) = match chunk {
                        Some(chunk) => (framer.push(&chunk), false),
                        None => (framer.finish(), true),
                    };
                    match self.publish_lines(lines, ended, voice, &stop).await {
                        Ok(true) if ended => break Ok(()),
                        Ok(true) => continue,
                        Ok(false) => self.stop_reason(),
                        Err(stopped) => stopped,
                    }
                }
                result = &mut exec, if exit.is_none() => {
                    exit = Some(result);
                    continue;
                }
            };
            // Whatever stopped it, what was read already still goes to the run record.
            self.record_pending(&mut chunks, &mut framer, voice);
            break Err(stopped);
        };
        self.model.events = gateway;
        ran?;
        let result = match exit {
            Some(result) => result,
            None => exec.await,
        };
        result.map_err(|error| self.fail(format!("running the agent: {error}")))
    }

    /// Publishes what the voice reads from `lines` (and, when the output `ended`, what its parser
    /// held back); on a stop (`Ok(false)` or the ceiling) the lines not published yet still go to
    /// the run record.
    async fn publish_lines(
        &mut self,
        lines: Vec<OutputLine>,
        ended: bool,
        voice: &mut AgentVoice<'_>,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        let mut lines = lines.into_iter().map(Some).chain(ended.then_some(None));
        for line in lines.by_ref() {
            let read = match &line {
                Some(line) => voice.parse(line),
                None => voice.ended(),
            };
            let mut parsed = read.into_iter();
            for item in parsed.by_ref() {
                let published = self.publish_parsed(item, stop).await;
                if !matches!(published, Ok(true)) {
                    for rest in parsed {
                        self.record_parsed(rest);
                    }
                    for line in lines {
                        match line {
                            Some(line) => self.record_line(&line, voice),
                            None => self.record_held_back(voice),
                        }
                    }
                    return published;
                }
            }
        }
        Ok(true)
    }

    /// Publishes what the parser read; `Ok(false)` when `stop` fired while a slow consumer held the
    /// event up.
    pub(super) async fn publish_parsed(
        &mut self,
        parsed: Parsed,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        if let Parsed::RecordOnly(item) = parsed {
            self.publisher.record_only(EventKind::Transcript(item));
            return Ok(true);
        }
        match self.parsed_kind(parsed) {
            Some(kind) => self.publish_until(kind, stop).await,
            None => Ok(true),
        }
    }

    /// The event a parsed item or usage report becomes (`None`: nothing to publish); usage is added
    /// to the meter.
    pub(super) fn parsed_kind(&mut self, parsed: Parsed) -> Option<EventKind> {
        match parsed {
            Parsed::Item(item) => Some(EventKind::Transcript(item)),
            Parsed::Finish(finish) => Some(EventKind::Transcript(TranscriptItem {
                item: ItemKind::Finish,
                text: finish.shown,
            })),
            Parsed::Usage(report) => self.meter.add_reported(report).map(EventKind::Usage),
            Parsed::Warning(message) => Some(EventKind::Warning { message }),
            Parsed::RecordOnly(item) => Some(EventKind::Transcript(item)),
        }
    }

    /// Publishes `kind` unless `stop` fires while a slow consumer holds it up (`Ok(false)`); usage is
    /// then held against the ceiling.
    pub(super) async fn publish_until(
        &mut self,
        kind: EventKind,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        let usage = matches!(kind, EventKind::Usage(_));
        let delivered = self.publisher.emit_until(kind, stop).await;
        match self.meter.over_ceiling().filter(|_| usage) {
            Some(ceiling) => Err(ceiling),
            None => Ok(delivered),
        }
    }

    /// Starts the model gateway on the socket in the sandbox's gateway directory (mounted at
    /// `/run/stet`, where the relay in the sandbox reaches it), when a model endpoint is configured.
    pub(super) async fn start_gateway(
        &mut self,
        sandbox: &DispatchSandbox,
    ) -> Result<(), DispatchError> {
        let Some(settings) = &self.parts.settings.gateway else {
            return Ok(());
        };
        let Some(directory) = &sandbox.paths().gateway else {
            return Err(self.fail(
                "the sandbox was provisioned without the model gateway's socket directory"
                    .to_owned(),
            ));
        };
        let Some(socket) = self
            .channels
            .host_socket(directory, stet_protocol::channel::MODEL)
        else {
            return Err(self.fail(
                "the sandbox was provisioned without the model gateway's channel".to_owned(),
            ));
        };
        let config = GatewayConfig {
            upstream: settings.upstream.clone(),
            api_key: settings.api_key.clone(),
            prices: Arc::clone(&settings.prices),
            ceiling_usd: self.parts.settings.cost_ceiling_usd,
            request_timeout: settings.request_timeout,
            limits: settings.limits,
            policy: Arc::clone(&settings.policy),
        };
        let (gateway, events) = Gateway::start(&socket, config, self.sanitizer())
            .await
            .map_err(|error| self.fail(format!("starting the model gateway: {error}")))?;
        crate::dispatch::sandbox::hand_over(&socket, self.parts.settings.user)
            .map_err(|error| self.fail(format!("handing the model gateway over: {error}")))?;
        self.model.gateway = Some(gateway);
        self.model.events = Some(events);
        Ok(())
    }

    /// Stops the model gateway (the agent's work is over, or the dispatch is being torn down); usage
    /// it metered for requests that ended as the agent did still counts and is published.
    pub(super) async fn stop_gateway(&mut self) {
        if let Some(gateway) = self.model.gateway.take() {
            gateway.shutdown().await;
        }
        let Some(mut events) = self.model.events.take() else {
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
    pub(super) async fn gateway_event(
        &mut self,
        event: GatewayEvent,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        let kind = self.gateway_kind(event)?;
        self.publish_until(kind, stop).await
    }

    /// The event a gateway report becomes (usage is added to the meter, with the request's latency);
    /// the ceiling reached is the stop it causes.
    pub(super) fn gateway_kind(&mut self, event: GatewayEvent) -> Result<EventKind, DispatchError> {
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
            GatewayEvent::Refused { refusal } => {
                let sanitizer = self.sanitizer();
                Ok(EventKind::GatewayRefusal {
                    api: sanitizer.sanitize(refusal.api.name()),
                    field: sanitizer.sanitize(&refusal.field),
                    value_kind: sanitizer.sanitize(refusal.value_kind),
                    rule: sanitizer.sanitize(refusal.rule.name()),
                    setting: refusal
                        .rule
                        .setting()
                        .map(|setting| sanitizer.sanitize(setting)),
                })
            }
            GatewayEvent::Egress {
                api,
                tool,
                host,
                price_usd,
            } => Ok(EventKind::GatewayEgress {
                api: self.sanitizer().sanitize(api.name()),
                tool,
                host,
                price_usd,
            }),
            GatewayEvent::CeilingReached {
                spent_usd,
                ceiling_usd,
                needed_usd,
            } => Err(DispatchError::CostCeilingHit {
                spent_usd,
                ceiling_usd,
                needed_usd,
                refused: true,
            }),
        }
    }

    /// On a stop, the output already read from the container, and what the redactor still held,
    /// goes to the run record (the consumer is not waited for): nothing the agent printed is
    /// dropped silently.
    pub(super) fn record_pending(
        &mut self,
        chunks: &mut mpsc::Receiver<OutputChunk>,
        framer: &mut OutputFramer,
        voice: &mut AgentVoice<'_>,
    ) {
        while let Ok(chunk) = chunks.try_recv() {
            for line in framer.push(&chunk) {
                self.record_line(&line, voice);
            }
        }
        for line in framer.finish() {
            self.record_line(&line, voice);
        }
        self.record_held_back(voice);
    }

    fn record_line(&mut self, line: &OutputLine, voice: &mut AgentVoice<'_>) {
        for parsed in voice.parse(line) {
            self.record_parsed(parsed);
        }
    }

    fn record_held_back(&mut self, voice: &mut AgentVoice<'_>) {
        for parsed in voice.ended() {
            self.record_parsed(parsed);
        }
    }

    fn record_parsed(&mut self, parsed: Parsed) {
        if let Some(kind) = self.parsed_kind(parsed) {
            self.publisher.record_only(kind);
        }
    }
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

/// What an exit code of 126 or 127 from starting the agent means: the engine found no `program` it
/// could run in the image, so the image is not the harness's. `None` for any other code.
fn not_started(program: &str, code: i64, harness: &str) -> Option<String> {
    let why = match code {
        126 => "it is missing or cannot be run there",
        127 => "it is not there",
        _ => return None,
    };
    Some(format!(
        "the agent ({program}) exited with code {code}: the sandbox image cannot start {program} ({why}), so it is not an image of the {harness} harness; set dispatch.image to the {harness} harness's image (docs/agents.md), or the harness that image is for"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
