//! What the JSON Lines harnesses' unit tests share: a committed capture read from
//! `tests/fixtures/<harness>`, read through a parser and the agent's voice as a dispatch reads it,
//! and what came out sorted into transcript items and usage reports.

use std::path::Path;
use std::sync::Arc;

use crate::gateway::usage::UsageReport;
use crate::harness::{AgentVoice, HarnessOutcome, OutputParser, Parsed};
use crate::runtime::lines::LineFramer;
use crate::runtime::{OutputLine, OutputStream};
use stet_protocol::event::{ItemKind, TranscriptItem};
use stet_sanitize::sanitize::TokenSanitizer;

/// A fresh sanitizer, as a dispatch starts with.
pub(crate) fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

/// The committed capture `name` of the harness whose fixtures are in `tests/fixtures/<harness>`.
pub(crate) fn capture(harness: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(harness)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Frames `bytes` as the runtime does and reads every line as `stream`, through `parser` and the
/// agent's voice, as a dispatch does: what it reads, and the outcome.
pub(crate) fn voiced(
    parser: &mut dyn OutputParser,
    sanitizer: Arc<TokenSanitizer>,
    bytes: &[u8],
    stream: OutputStream,
) -> (Vec<Parsed>, HarnessOutcome) {
    let mut voice = AgentVoice::new(parser, sanitizer);
    let mut framer = LineFramer::default();
    let mut lines = framer.push(bytes);
    lines.extend(framer.finish());
    let mut read: Vec<Parsed> = lines
        .into_iter()
        .flat_map(|line| voice.parse(&OutputLine { stream, line }))
        .collect();
    read.extend(voice.ended());
    (read, voice.outcome())
}

/// Each transcript item (a finish as its item) as `(kind, text)`; usage, warnings and what goes to
/// the run record only left out.
pub(crate) fn items(read: &[Parsed]) -> Vec<(ItemKind, String)> {
    read.iter()
        .filter_map(|parsed| match parsed {
            Parsed::Item(TranscriptItem { item, text }) => Some((*item, text.as_str().to_owned())),
            Parsed::Finish(finish) => Some((ItemKind::Finish, finish.shown.as_str().to_owned())),
            _ => None,
        })
        .collect()
}

/// The usage reports read, in order.
pub(crate) fn usage(read: &[Parsed]) -> Vec<&UsageReport> {
    read.iter()
        .filter_map(|parsed| match parsed {
            Parsed::Usage(report) => Some(report),
            _ => None,
        })
        .collect()
}
