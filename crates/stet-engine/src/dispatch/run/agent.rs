//! The agent's run ([`AgentRun`]): the harness's files staged, its processes run (each under
//! `stet speak`, the one process that speaks as the agent) with their output read through the
//! agent's voice and published live, raced by cancel, the timeout, the disk bound and the cost
//! ceiling, while the model gateway ([`ModelLink`]) and the egress proxy ([`EgressLink`]) serve the
//! agent, over the channel stream ([`StreamLink`]) in copy mode.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::credential::SecretValue;
use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::disk_watch::{self, DEFAULT_FLOOR_BYTES, DiskWatch};
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::gateway::GatewayEvent;
use crate::git::workspace::Materialized;
use crate::harness::{AgentVoice, HarnessOutcome, HarnessPlan, Parsed, StagedFile, speaking};
use crate::runtime::lines::OutputFramer;
use crate::runtime::{OutputChunk, OutputLine};
use stet_protocol::event::{EventKind, ItemKind, TranscriptItem};
use stet_protocol::state::Input;
use stet_sanitize::sanitize::{KnownValue, SanitizedText};

use super::egress::{self, EgressLink, next_record};
use super::model::{ModelLink, gateway_kind, next_event};
use super::steering::Steering;
use super::stream::{StreamLink, next_end};

/// How many output lines may wait between the container and the parser (back-pressure beyond).
const OUTPUT_BUFFER: usize = 256;

/// The host's servers a dispatch's sandbox reaches through its channels.
pub(super) struct Links<'d> {
    /// The model gateway.
    pub(super) model: &'d mut ModelLink,
    /// The egress proxy.
    pub(super) egress: &'d mut EgressLink,
}

/// Covers the end of `provisioning` (the model gateway and the egress proxy started), `running`,
/// and the move to `collecting` once the agent's container is removed; hands the agent's summary to
/// [`Collect`](super::collect::Collect).
pub(super) struct AgentRun<'d> {
    steering: &'d mut Steering,
    model: &'d mut ModelLink,
    egress: &'d mut EgressLink,
    /// The channels the sandbox's relay serves.
    channels: &'d DispatchChannels,
    sandbox: &'d DispatchSandbox,
    /// The channel stream, in copy mode.
    stream: StreamLink,
}

impl<'d> AgentRun<'d> {
    pub(super) fn new(
        steering: &'d mut Steering,
        links: Links<'d>,
        channels: &'d DispatchChannels,
        sandbox: &'d DispatchSandbox,
    ) -> AgentRun<'d> {
        AgentRun {
            steering,
            model: links.model,
            egress: links.egress,
            channels,
            sandbox,
            stream: StreamLink::default(),
        }
    }

    /// Starts the model gateway and the egress proxy, runs the agent as `plan` says and stops them;
    /// once the agent
    /// finished, removes its container: nothing of the agent runs from here on (a process it left
    /// in the background included), not while its result is collected, not while a person reviews
    /// it. Returns the agent's summary.
    pub(super) async fn run(mut self, plan: HarnessPlan) -> Result<Option<String>, DispatchError> {
        self.model
            .start(self.steering, self.channels, self.sandbox)
            .await?;
        self.egress
            .start(self.steering, self.channels, self.sandbox)?;
        self.stream
            .attach(self.steering, self.channels, self.sandbox)
            .await?;
        self.steering
            .publisher
            .advance(Input::Provisioned, None)
            .await;
        let ran = self.run_agent(plan).await;
        self.stream.stop(self.steering).await;
        self.model.stop(self.steering).await;
        self.egress.stop(self.steering).await;
        let summary = ran?;
        self.steering
            .publisher
            .advance(Input::AgentFinished, None)
            .await;
        self.sandbox.remove_container().await.map_err(|failure| {
            self.steering.fail(format!(
                "the agent's container could not be removed once its work was over: {failure}; nothing is collected or pushed while it may still run"
            ))
        })?;
        Ok(summary)
    }

    /// Stages the harness's files and runs its processes, reading their output live. Returns the
    /// agent's summary when it finished.
    async fn run_agent(&mut self, plan: HarnessPlan) -> Result<Option<String>, DispatchError> {
        let sandbox = self.sandbox;
        for (label, secret) in self.steering.parts.harness.secrets(&plan) {
            KnownValue::new(label, secret.expose_secret())
                .and_then(|known| self.steering.parts.sanitizer.register(known))
                .map_err(|error| {
                    self.steering.fail(format!(
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
                self.steering.parts.settings.import.max_total_bytes,
                base.bytes,
                base.files,
            ),
            DEFAULT_FLOOR_BYTES,
        )
        .map_err(|error| self.steering.fail(error.to_string()))?;
        for file in &plan.files {
            stage(&outputs, file, self.steering.parts.settings.user).map_err(|error| {
                self.steering
                    .fail(format!("staging {}: {error}", file.name))
            })?;
        }
        let mut parser = self
            .steering
            .parts
            .harness
            .parser(self.steering.sanitizer());
        let mut voice = AgentVoice::new(parser.as_mut(), self.steering.sanitizer());
        let mut channel_env = self.channels.sandbox_env();
        channel_env.extend(self.egress.ca_env.iter().cloned());
        for process in &plan.processes {
            let mut spoken = speaking(process);
            for (name, value) in &channel_env {
                spoken
                    .env
                    .insert(name.clone(), SecretValue::new(value.clone()));
            }
            let exit = self.execute(&spoken, &mut voice, &disk).await?;
            if exit.oom_killed {
                return Err(self.steering.fail(
                    "the agent was killed for going past the sandbox's memory cap".to_owned(),
                ));
            }
            if exit.code != 0 {
                let program = process.argv.first().map_or("", String::as_str);
                let harness = self.steering.parts.harness.name();
                let exited = format!("the agent ({program}) exited with code {}", exit.code);
                // What the harness said went wrong says more than its exit code.
                let reason = not_started(program, exit.code, harness)
                    .or_else(|| {
                        voice.reported_failure().map(|reason| {
                            format!("the agent did not finish: {} ({exited})", reason.as_str())
                        })
                    })
                    .unwrap_or(exited);
                return Err(self.steering.fail(reason));
            }
        }
        // The harness may walk the outputs directory: off the async workers.
        let (harness, sanitizer, walked) = (
            Arc::clone(&self.steering.parts.harness),
            self.steering.sanitizer(),
            outputs.clone(),
        );
        let final_usage =
            tokio::task::spawn_blocking(move || harness.final_usage(&walked, &sanitizer))
                .await
                .map_err(|error| {
                    self.steering.fail(format!(
                        "reading the agent's usage ended abnormally: {error}"
                    ))
                })?;
        match final_usage {
            Ok(Some(usage)) if self.steering.meter.gateway => {
                if let Some(warning) = self.steering.meter.reconcile(&usage) {
                    let message = self.steering.sanitize(&warning);
                    self.steering
                        .publisher
                        .emit(EventKind::Warning { message })
                        .await;
                }
            }
            Ok(Some(usage)) => {
                self.steering.meter.settle(&usage);
                self.steering.publisher.emit(EventKind::Usage(usage)).await;
                if let Some(ceiling) = self.steering.meter.over_ceiling() {
                    return Err(ceiling);
                }
            }
            // No whole-run record: what the harness reported as it ran is reconciled instead.
            Ok(None) => {
                if let Some(warning) = self.steering.meter.reconcile_reported() {
                    let message = self.steering.sanitize(&warning);
                    self.steering
                        .publisher
                        .emit(EventKind::Warning { message })
                        .await;
                }
            }
            Err(error) => {
                let message = self.steering.sanitize(&error.to_string());
                self.steering
                    .publisher
                    .emit(EventKind::Warning { message })
                    .await;
            }
        }
        match voice.outcome() {
            HarnessOutcome::Succeeded { summary } => Ok(summary.map(SanitizedText::into_string)),
            HarnessOutcome::Failed { reason } => Err(self
                .steering
                .fail(format!("the agent did not finish: {}", reason.as_str()))),
        }
    }

    /// Runs one process, publishing what the agent's voice reads from its output as it arrives.
    async fn execute(
        &mut self,
        process: &crate::runtime::SandboxProcess,
        voice: &mut AgentVoice<'_>,
        disk: &DiskWatch,
    ) -> Result<crate::runtime::ExecExit, DispatchError> {
        let (sender, mut chunks) = mpsc::channel::<OutputChunk>(OUTPUT_BUFFER);
        let mut framer = OutputFramer::new(&self.steering.sanitizer());
        let stop = self.steering.stop.clone();
        let exec = self.sandbox.run(process, sender);
        tokio::pin!(exec);
        let breach = disk.breach();
        tokio::pin!(breach);
        let mut exit = None;
        let mut gateway = self.model.events.take();
        let mut records = self.egress.records.take();
        let mut stream = self.stream.stream.take();
        let mut stream_open = stream.is_some();
        let ran = loop {
            let stopped = tokio::select! {
                biased;
                () = stop.cancelled() => self.steering.stop_reason(),
                reason = &mut breach => self.steering.fail(reason),
                Some(event) = next_event(&mut gateway) => match self.gateway_event(event, &stop).await {
                    Ok(true) => continue,
                    Ok(false) => self.steering.stop_reason(),
                    Err(stopped) => stopped,
                },
                end = next_end(&mut stream), if stream_open => {
                    stream_open = false;
                    if self.stream.report(self.steering, &end, &stop).await {
                        continue;
                    }
                    self.steering.stop_reason()
                }
                Some(record) = next_record(&mut records) => {
                    let event = egress::record_event(&self.steering.sanitizer(), record);
                    if self.steering.publisher.emit_until(event, &stop).await {
                        continue;
                    }
                    self.steering.stop_reason()
                }
                chunk = chunks.recv() => {
                    let (lines, ended) = match chunk {
                        Some(chunk) => (framer.push(&chunk), false),
                        None => (framer.finish(), true),
                    };
                    match self.publish_lines(lines, ended, voice, &stop).await {
                        Ok(true) if ended => break Ok(()),
                        Ok(true) => continue,
                        Ok(false) => self.steering.stop_reason(),
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
        self.egress.records = records;
        self.stream.stream = stream;
        ran?;
        let result = match exit {
            Some(result) => result,
            None => exec.await,
        };
        result.map_err(|error| self.steering.fail(format!("running the agent: {error}")))
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
    async fn publish_parsed(
        &mut self,
        parsed: Parsed,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        if let Parsed::RecordOnly(item) = parsed {
            self.steering
                .publisher
                .record_only(EventKind::Transcript(item));
            return Ok(true);
        }
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
            Parsed::Finish(finish) => Some(EventKind::Transcript(TranscriptItem {
                item: ItemKind::Finish,
                text: finish.shown,
            })),
            Parsed::Usage(report) => self
                .steering
                .meter
                .add_reported(report)
                .map(EventKind::Usage),
            Parsed::Warning(message) => Some(EventKind::Warning { message }),
            Parsed::RecordOnly(item) => Some(EventKind::Transcript(item)),
        }
    }

    /// Publishes `kind` unless `stop` fires while a slow consumer holds it up (`Ok(false)`); usage is
    /// then held against the ceiling.
    async fn publish_until(
        &mut self,
        kind: EventKind,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        let usage = matches!(kind, EventKind::Usage(_));
        let delivered = self.steering.publisher.emit_until(kind, stop).await;
        match self.steering.meter.over_ceiling().filter(|_| usage) {
            Some(ceiling) => Err(ceiling),
            None => Ok(delivered),
        }
    }

    /// Publishes what the gateway reports: metered usage (held against the ceiling), a request that
    /// went wrong as an error item, the ceiling reached as the stop it is.
    async fn gateway_event(
        &mut self,
        event: GatewayEvent,
        stop: &CancellationToken,
    ) -> Result<bool, DispatchError> {
        let kind = gateway_kind(self.steering, event)?;
        self.publish_until(kind, stop).await
    }

    /// On a stop, the output already read from the container, and what the redactor still held,
    /// goes to the run record (the consumer is not waited for): nothing the agent printed is
    /// dropped silently.
    fn record_pending(
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
            self.steering.publisher.record_only(kind);
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
