//! Replaying a captured harness output as stet's own event lines (`stet transcript`): the same framing,
//! parsing and sanitizing a live dispatch applies, so a capture from a real run shows exactly what the
//! theater would have shown — and a new harness version's drift shows up as a diff of these lines.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use crate::dispatch::event::{DispatchId, Event, EventKind};
use crate::dispatch::sanitize::TokenSanitizer;
use crate::dispatch::state::Phase;
use crate::harness::openhands::{self, HarnessOutcome, OpenHandsParser};
use crate::runtime::lines::LineFramer;

/// How much of the capture is read at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
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

pub type Result<T> = std::result::Result<T, ReplayError>;

/// Where the events of a replay are attributed.
#[derive(Debug, Clone)]
pub struct ReplayLabels {
    pub dispatch: DispatchId,
    pub brief: String,
}

/// Reads an OpenHands headless capture from `input` and writes one event per line to `output`: every
/// transcript item, the final usage when `outputs` (the run's outputs directory) holds it, and a
/// `finished` event with the outcome the engine would draw from this output alone. Returns that
/// outcome's phase (`Done` or `Failed`).
pub fn replay_openhands(
    mut input: impl Read,
    output: &mut impl Write,
    outputs: Option<&Path>,
    labels: &ReplayLabels,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Phase> {
    let mut parser = OpenHandsParser::new(Arc::clone(sanitizer));
    let mut framer = LineFramer::default();
    let mut buffer = vec![0u8; READ_CHUNK];
    let emit = |kind: EventKind, output: &mut dyn Write| -> Result<()> {
        let line = Event::new(labels.dispatch, &labels.brief, kind).to_json_line()?;
        writeln!(output, "{line}").map_err(ReplayError::Write)
    };
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(ReplayError::Read(error)),
        };
        for line in framer.push(&buffer[..read]) {
            for item in parser.parse_line(&line) {
                emit(EventKind::Transcript(item), output)?;
            }
        }
    }
    if let Some(line) = framer.finish() {
        for item in parser.parse_line(&line) {
            emit(EventKind::Transcript(item), output)?;
        }
    }
    if let Some(outputs) = outputs
        && let Some(usage) = openhands::final_usage(outputs, sanitizer)?
    {
        emit(EventKind::Usage(usage), output)?;
    }
    let (outcome, reason) = match parser.outcome() {
        HarnessOutcome::Succeeded { summary } => (Phase::Done, summary),
        HarnessOutcome::Failed { reason } => (Phase::Failed, Some(reason)),
    };
    emit(
        EventKind::Finished {
            outcome,
            exit_code: outcome.exit_code().unwrap_or(1),
            reason,
        },
        output,
    )?;
    output.flush().map_err(ReplayError::Write)?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::dispatch::event::ItemKind;

    const FINISH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/openhands-1.16/run-finish.stdout"
    );

    fn replay(input: &[u8]) -> (Phase, Vec<Event>) {
        let labels = ReplayLabels {
            dispatch: DispatchId::new(),
            brief: "replay".into(),
        };
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let mut out = Vec::new();
        let phase = replay_openhands(input, &mut out, None, &labels, &sanitizer).unwrap();
        let events = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Event>(line).unwrap())
            .collect();
        (phase, events)
    }

    #[test]
    fn a_capture_becomes_transcript_events_and_a_finished_event() {
        let (phase, events) = replay(&std::fs::read(FINISH).unwrap());
        assert_eq!(phase, Phase::Done);
        let items: Vec<ItemKind> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Transcript(item) => Some(item.item),
                _ => None,
            })
            .collect();
        assert_eq!(
            items,
            [
                ItemKind::Other,
                ItemKind::Thought,
                ItemKind::Command,
                ItemKind::Output,
                ItemKind::Finish
            ]
        );
        assert!(matches!(
            &events.last().unwrap().kind,
            EventKind::Finished { outcome: Phase::Done, exit_code: 0, reason: Some(r) } if r.as_str() == "Created hello.txt"
        ));
        assert!(events.iter().all(|e| e.brief == "replay"));
    }

    #[test]
    fn a_capture_cut_mid_line_and_without_a_finish_is_a_failure_not_an_error() {
        let whole = std::fs::read(FINISH).unwrap();
        let cut = &whole[..whole.len() / 2];
        let (phase, events) = replay(cut);
        assert_eq!(phase, Phase::Failed);
        assert!(matches!(
            &events.last().unwrap().kind,
            EventKind::Finished {
                outcome: Phase::Failed,
                exit_code: 1,
                ..
            }
        ));
    }
}
