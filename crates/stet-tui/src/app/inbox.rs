//! The inbox as it changes under the theater: briefs added, edited or fixed on disk replace the rows
//! (the cursor stays on the brief it was on), and what earlier runs of a brief came to (from the run
//! records) badges it until this session dispatches it, so a brief pushed headless is not `[new]`.

use std::collections::HashMap;

use super::{App, Badge, InboxRow};

/// What an earlier run of a brief came to, as its run record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastRun {
    /// The brief's id.
    pub brief: String,
    /// The repository it targeted (`owner/name`), so a brief of the same name elsewhere is not
    /// confused with it.
    pub repo: String,
    /// How it ended.
    pub badge: Badge,
}

impl App {
    /// Badges briefs with what their earlier runs came to; `runs` oldest first (the newest of a
    /// brief counts).
    pub fn set_history(&mut self, runs: impl IntoIterator<Item = PastRun>) {
        self.history = runs
            .into_iter()
            .map(|run| ((run.repo, run.brief), run.badge))
            .collect::<HashMap<_, _>>();
        self.changed = true;
    }

    /// What the newest earlier run of brief `id` came to, when it targeted the repository the
    /// inbox's brief of that id targets.
    pub(super) fn past_badge(&self, id: &str) -> Option<Badge> {
        let repo = self.rows.iter().find_map(|row| match row {
            InboxRow::Brief(brief) if brief.id == id => Some(brief.target.repo.as_str()),
            _ => None,
        })?;
        self.history.get(&(repo.to_owned(), id.to_owned())).copied()
    }

    /// The inbox as read again from disk: the rows are replaced, the cursor stays on the brief
    /// (or file) it was on when that is still there.
    pub(super) fn reload(&mut self, rows: Vec<InboxRow>) {
        if rows == self.rows {
            return;
        }
        let was = self.selected_row().map(|row| row.sort_key().to_owned());
        self.rows = rows;
        let at = was
            .and_then(|key| self.rows.iter().position(|row| row.sort_key() == key))
            .unwrap_or(self.selected.min(self.rows.len().saturating_sub(1)));
        if at == self.selected {
            self.changed = true;
        } else {
            self.select(at);
        }
    }
}
