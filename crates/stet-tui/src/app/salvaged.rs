//! Work `stet sweep` salvaged from crashed dispatches, shown in the inbox below the briefs: marked
//! salvaged and incomplete, its diff readable in the detail pane. The theater never pushes or
//! discards one: `p` and `x` on it say where it is kept and how a person takes it further.

use chrono::{DateTime, Utc};
use stet_protocol::event::DispatchId;

use super::{App, InboxRow, PatchText};

/// A salvaged result, as the sweep recorded it (every text already sanitized by the engine; the
/// panes still make it inert before drawing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvagedResult {
    /// The crashed dispatch whose work it is.
    pub dispatch: DispatchId,
    /// The brief's title.
    pub title: String,
    /// Where the commit is kept (`refs/stet/<dispatch>`).
    pub reference: String,
    /// How many paths changed.
    pub files: usize,
    /// Lines added.
    pub insertions: usize,
    /// Lines removed.
    pub deletions: usize,
    /// What the review gate holds in it (protected paths, secrets), in the gate's words.
    pub held: Vec<String>,
    /// What the import left out.
    pub warnings: Vec<String>,
    /// The diff against the base.
    pub patch: PatchText,
    /// When the sweep salvaged it.
    pub salvaged_at: DateTime<Utc>,
}

impl App {
    /// Shows `results` (oldest first) in the inbox below the briefs, in place of those shown before.
    pub fn set_salvaged(&mut self, results: impl IntoIterator<Item = SalvagedResult>) {
        let mut rows: Vec<InboxRow> = self
            .rows
            .iter()
            .filter(|row| !matches!(row, InboxRow::Salvaged(_)))
            .cloned()
            .collect();
        rows.extend(
            results
                .into_iter()
                .map(|result| InboxRow::Salvaged(Box::new(result))),
        );
        self.reload(rows);
    }

    /// The salvaged result the cursor is on.
    pub fn selected_salvaged(&self) -> Option<&SalvagedResult> {
        match self.selected_row()? {
            InboxRow::Salvaged(result) => Some(result),
            InboxRow::Brief(_) | InboxRow::Invalid { .. } => None,
        }
    }

    /// The salvaged rows now shown, to keep when the briefs are read again.
    pub(super) fn salvaged_rows(&self) -> impl Iterator<Item = &InboxRow> {
        self.rows
            .iter()
            .filter(|row| matches!(row, InboxRow::Salvaged(_)))
    }

    /// Why `verb` (push or discard) does nothing to the salvaged result the cursor is on.
    pub(super) fn salvaged_refusal(result: &SalvagedResult, verb: &str) -> String {
        let reference = &result.reference;
        if verb == "discard" {
            format!(
                "nothing to discard here: a salvaged result stays at {reference} until you delete it (git update-ref -d {reference})"
            )
        } else {
            format!(
                "nothing to {verb}: a salvaged result is incomplete and stet never pushes it; take it further with git from {reference}"
            )
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
