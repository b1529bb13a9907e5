//! `stet reviews` shows the work the sweep salvaged from crashed dispatches beside the pull
//! requests: marked salvaged and incomplete, with its diff, for a person to judge; nothing pushes it.

use std::io::Write;
use std::path::Path;

use stet_engine::dispatch::salvage::Salvaged;
use stet_sanitize::display::{escaped_invisible, one_line, without_invisible};

/// Writes each salvaged result under `state_dir`, with its diff; returns how many there were.
pub(crate) fn show(out: &mut impl Write, state_dir: &Path) -> std::io::Result<usize> {
    let salvaged = stet_engine::dispatch::salvage::salvaged(state_dir);
    for record in &salvaged {
        entry(out, record)?;
    }
    Ok(salvaged.len())
}

fn entry(out: &mut impl Write, record: &Salvaged) -> std::io::Result<()> {
    // Every field came from the agent's workspace or the brief: shown under the display policy.
    let name = |text: &str| escaped_invisible(text).into_owned();
    writeln!(
        out,
        "salvaged {}  {}  ({} in {}, {} file(s), +{} -{}, salvaged {}; incomplete, not pushed)",
        record.dispatch,
        one_line(&record.title),
        name(&record.reference),
        name(&record.repository.to_string_lossy()),
        record.files,
        record.insertions,
        record.deletions,
        record.salvaged_at.format("%Y-%m-%d %H:%M")
    )?;
    for held in &record.held {
        writeln!(out, "  held for review: {}", one_line(held))?;
    }
    for warning in &record.warnings {
        writeln!(out, "  left out: {}", one_line(warning))?;
    }
    writeln!(out, "{}", without_invisible(&record.patch).text)
}
