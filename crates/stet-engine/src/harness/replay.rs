//! Replaying a captured harness output as stet's own event lines (`stet transcript`): the same framing,
//! parsing and sanitizing a live dispatch applies, so a capture from a real run shows exactly what the
//! theater would have shown — and a new harness version's drift shows up as a diff of these lines.
//! Any harness's [`OutputParser`] replays, read through the [`AgentVoice`] as in a dispatch (its first
//! finish stands); [`replay_openhands`] is the OpenHands one with its usage record.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use crate::harness::openhands::{self, OpenHandsOutput};
use crate::harness::{AgentVoice, HarnessOutcome, OutputParser, Parsed};
use crate::runtime::lines::OutputFramer;
use crate::runtime::{OutputChunk, OutputStream};
use stet_protocol::event::{DispatchId, Event, EventKind, ItemKind, TranscriptItem, Usage};
use stet_protocol::state::Phase;
use stet_sanitize::sanitize::TokenSanitizer;

/// How much of the capture is read at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ReplayError {
    #[error("reading the capture: {0}")]
    Read(std::io::Error),
    #[error("writing the events: {0}")]
    Write(std::io::Error),
    #[error("encoding an event: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Usage(#[from] openhands::OpenHandsError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ReplayError>;

/// Where the events of a replay are attributed.
#[derive(Debug, Clone)]
pub struct ReplayLabels {
    /// The dispatch the replayed events name.
    pub dispatch: DispatchId,
    /// The brief id they name.
    pub brief: String,
}

/// Reads a captured harness output from `input` as the agent's stdout and writes one event per line
/// to `output`: every transcript item and usage report `parser` draws from it (a usage event carries
/// the running total of the reported costs), then `usage` when given (the final usage the harness
/// recorded elsewhere), then a `finished` event with the outcome the engine would draw from this
/// output alone. Returns that outcome's phase (`Done` or `Failed`).
pub fn replay(
    mut input: impl Read,
    output: &mut impl Write,
    parser: &mut dyn OutputParser,
    usage: Option<Usage>,
    labels: &ReplayLabels,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Phase> {
    let mut events = EventWriter {
        output,
        labels,
        total_cost_usd: 0.0,
    };
    let mut voice = AgentVoice::new(parser, Arc::clone(sanitizer));
    let mut framer = OutputFramer::new(sanitizer);
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(ReplayError::Read(error)),
        };
        let chunk = OutputChunk {
            stream: OutputStream::Stdout,
            bytes: buffer[..read].to_vec(),
        };
        for line in framer.push(&chunk) {
            events.emit_parsed(voice.parse(&line))?;
        }
    }
    for line in framer.finish() {
        events.emit_parsed(voice.parse(&line))?;
    }
    events.emit_parsed(voice.ended())?;
    if let Some(usage) = usage {
        events.emit(EventKind::Usage(usage))?;
    }
    let (outcome, reason) = match voice.outcome() {
        HarnessOutcome::Succeeded { summary } => (Phase::Done, summary),
        HarnessOutcome::Failed { reason } => (Phase::Failed, Some(reason)),
    };
    events.emit(EventKind::Finished {
        outcome,
        exit_code: outcome.exit_code().unwrap_or(1),
        reason,
    })?;
    events.output.flush().map_err(ReplayError::Write)?;
    Ok(outcome)
}

/// [`replay`] of an OpenHands headless capture, with the final usage OpenHands recorded when
/// `outputs` (the run's outputs directory) holds it.
pub fn replay_openhands(
    input: impl Read,
    output: &mut impl Write,
    outputs: Option<&Path>,
    labels: &ReplayLabels,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Phase> {
    let usage = match outputs {
        Some(outputs) => openhands::final_usage(outputs, sanitizer)?,
        None => None,
    };
    let mut parser = OpenHandsOutput::new(Arc::clone(sanitizer));
    replay(input, output, &mut parser, usage, labels, sanitizer)
}

/// Writes events as JSON lines and keeps the running cost total.
struct EventWriter<'a, W: Write> {
    output: &'a mut W,
    labels: &'a ReplayLabels,
    total_cost_usd: f64,
}

impl<W: Write> EventWriter<'_, W> {
    fn emit(&mut self, kind: EventKind) -> Result<()> {
        let line = Event::new(self.labels.dispatch, &self.labels.brief, kind).to_json_line()?;
        writeln!(self.output, "{line}").map_err(ReplayError::Write)
    }

    fn emit_parsed(&mut self, parsed: Vec<Parsed>) -> Result<()> {
        for parsed in parsed {
            let kind = match parsed {
                Parsed::Warning(message) => EventKind::Warning { message },
                Parsed::RecordOnly(item) => EventKind::Transcript(item),
                Parsed::Item(item) => EventKind::Transcript(item),
                Parsed::Finish(finish) => EventKind::Transcript(TranscriptItem {
                    item: ItemKind::Finish,
                    text: finish.shown,
                }),
                Parsed::Usage(report) => {
                    self.total_cost_usd += report.cost_usd.unwrap_or(0.0);
                    EventKind::Usage(Usage {
                        model: report.model,
                        input_tokens: report.input_tokens,
                        output_tokens: report.output_tokens,
                        cached_tokens: report.cached_tokens,
                        cost_usd: report.cost_usd,
                        total_cost_usd: self.total_cost_usd,
                        latency_ms: None,
                    })
                }
            };
            self.emit(kind)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
