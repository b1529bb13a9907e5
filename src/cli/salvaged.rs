//! `stet reviews` and the theater show the work the sweep salvaged from crashed dispatches beside
//! the pull requests and the briefs: marked salvaged and incomplete, with its diff, for a person to
//! judge; nothing pushes it.

use std::io::Write;
use std::path::Path;

use stet_engine::dispatch::salvage::Salvaged;
use stet_sanitize::display::{escaped_invisible, one_line, without_invisible};
use stet_tui::app::{PatchText, SalvagedResult};

/// Writes each salvaged result under `state_dir`, with its diff; returns how many there were.
pub(crate) fn show(out: &mut impl Write, state_dir: &Path) -> std::io::Result<usize> {
    let salvaged = stet_engine::dispatch::salvage::salvaged(state_dir);
    for record in &salvaged {
        entry(out, record)?;
    }
    Ok(salvaged.len())
}

/// The salvaged results under `state_dir` whose work is in `repository`, oldest first, as the
/// theater's inbox lists them.
pub(crate) fn for_theater(state_dir: &Path, repository: &Path) -> Vec<SalvagedResult> {
    let same = |path: &Path| match (path.canonicalize(), repository.canonicalize()) {
        (Ok(path), Ok(repository)) => path == repository,
        _ => path == repository,
    };
    stet_engine::dispatch::salvage::salvaged(state_dir)
        .into_iter()
        .filter(|record| same(&record.repository))
        .map(|record| SalvagedResult {
            dispatch: record.dispatch,
            title: record.title,
            reference: record.reference,
            files: record.files,
            insertions: record.insertions,
            deletions: record.deletions,
            held: record.held,
            warnings: record.warnings,
            patch: PatchText::new(record.patch),
            salvaged_at: record.salvaged_at,
        })
        .collect()
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
