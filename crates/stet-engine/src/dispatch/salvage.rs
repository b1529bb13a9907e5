//! A crash never loses the agent's work. A dispatch whose process died once its agent was running
//! (SIGKILL, a double ^C) leaves the work in its workspace; before the sweep reclaims that
//! workspace it imports it through the same trusted import and review gate as a collect, keeps the
//! commit at `refs/stet/<dispatch>` marked incomplete, and records it for `stet reviews`. A salvaged
//! result is never pushed: only a person acting on it takes it further.
//!
//! What the import needs is journaled as the agent starts ([`SalvagePlan`]); the workspace's path is
//! never taken from the journal but derived from the dispatch, as the sweep's other removals are.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::dispatch::gate::inspect_until;
use crate::dispatch::order::result_ref;
use crate::forge::protected::ProtectedPaths;
use crate::git::changes::read_changes_until;
use crate::git::import::{
    Identity, ImportLimits, ImportRequest, ImportWarning, Imported, ResultDiff, committed_diff,
    import,
};
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::TokenSanitizer;

/// Where salvage records are kept, under the state directory.
pub const SALVAGED_DIR: &str = "salvaged";

/// The most of a salvage record that is read back: its patch, escaped, and the rest.
const MAX_RECORD_BYTES: u64 = 2 * crate::git::text_budget::MAX_PATCH_BYTES as u64 + 1024 * 1024;

/// Why a salvage did not keep the agent's work.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum SalvageError {
    #[error("the import refused the workspace: {0}")]
    Import(#[from] crate::git::import::ImportError),
    #[error("the protected paths journaled for it do not compile: {0}")]
    Rules(String),
    #[error("reviewing the salvaged result: {0}")]
    Review(String),
    #[error("keeping it at {reference}: {detail}")]
    Keep { reference: String, detail: String },
    #[error("reading the result kept at {reference}: {detail}")]
    Kept { reference: String, detail: String },
    #[error("{}: {source}", .path.display())]
    Record {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the import of a crashed dispatch needs, journaled as its agent starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SalvagePlan {
    /// The user's repository, whose object store receives the commit.
    pub repository: PathBuf,
    /// The validated base the result builds on.
    pub parent: CommitSha,
    /// The brief's title, sanitized: the commit message's first line.
    pub title: String,
    /// Author and committer name.
    pub author_name: String,
    /// Author and committer email address.
    pub author_email: String,
    /// The import's limits, as the dispatch had them.
    pub limits: Limits,
    /// Every protected-path pattern the dispatch held results by.
    pub protected: Vec<String>,
}

/// [`ImportLimits`], as the journal writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[expect(missing_docs, reason = "each field is the ImportLimits field it names")]
pub struct Limits {
    pub max_files: u64,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    pub max_path_bytes: u64,
}

impl SalvagePlan {
    /// The plan of a dispatch about to run its agent.
    pub fn new(
        repository: &Path,
        parent: &CommitSha,
        title: &str,
        identity: &Identity,
        limits: ImportLimits,
        protected: &ProtectedPaths,
    ) -> SalvagePlan {
        SalvagePlan {
            repository: repository.to_owned(),
            parent: parent.clone(),
            title: title.to_owned(),
            author_name: identity.name.clone(),
            author_email: identity.email.clone(),
            limits: Limits {
                max_files: limits.max_files,
                max_file_bytes: limits.max_file_bytes,
                max_total_bytes: limits.max_total_bytes,
                max_path_bytes: limits.max_path_bytes,
            },
            protected: protected
                .rules()
                .iter()
                .map(|rule| rule.pattern().to_owned())
                .collect(),
        }
    }
}

/// A salvaged result, as `stet reviews` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Salvaged {
    /// The dispatch whose work it is.
    pub dispatch: DispatchId,
    /// The brief's title, sanitized.
    pub title: String,
    /// Where the commit is kept (`refs/stet/<dispatch>`).
    pub reference: String,
    /// The salvaged commit: incomplete, never pushed.
    pub commit: CommitSha,
    /// The repository that holds it.
    pub repository: PathBuf,
    /// How many paths changed.
    pub files: usize,
    /// Lines added.
    pub insertions: usize,
    /// Lines removed.
    pub deletions: usize,
    /// What the review gate holds (protected paths, secrets), as it says it.
    pub held: Vec<String>,
    /// What the import left out.
    pub warnings: Vec<String>,
    /// The diff against the base, sanitized.
    pub patch: String,
    /// When the sweep salvaged it.
    pub salvaged_at: DateTime<Utc>,
}

/// What a salvage did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The work is kept and recorded.
    Kept(Box<Salvaged>),
    /// The workspace holds the base unchanged: there was no work to keep.
    Unchanged,
}

/// Imports `workspace` (the dispatch's own) through the trusted import, keeps the commit at
/// `refs/stet/<dispatch>` and records it under `<state>/salvaged/`.
pub fn salvage(
    plan: &SalvagePlan,
    dispatch: DispatchId,
    workspace: &Path,
    state_dir: &Path,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Outcome, SalvageError> {
    let identity = Identity {
        name: plan.author_name.clone(),
        email: plan.author_email.clone(),
    };
    let message = sanitizer.sanitize(&format!(
        "{}\n\nIncomplete: salvaged by stet's sweep from dispatch {dispatch}, whose stet process \
         ended while the agent was at work. Not pushed; review it before using it.",
        plan.title
    ));
    let limits = ImportLimits {
        max_files: plan.limits.max_files,
        max_file_bytes: plan.limits.max_file_bytes,
        max_total_bytes: plan.limits.max_total_bytes,
        max_path_bytes: plan.limits.max_path_bytes,
    };
    let request = ImportRequest {
        repository: &plan.repository,
        workspace,
        parent: &plan.parent,
        identity: &identity,
        message: &message,
        limits,
    };
    let (commit, diff, warnings) = match import(&request)? {
        Imported::Committed {
            commit,
            diff,
            warnings,
        } => (commit, diff, warnings),
        Imported::Unchanged { .. } => return Ok(Outcome::Unchanged),
    };
    let reference = result_ref(dispatch);
    keep(&plan.repository, &reference, &commit).map_err(|detail| SalvageError::Keep {
        reference: reference.clone(),
        detail,
    })?;
    recorded(
        plan, dispatch, commit, diff, &warnings, state_dir, sanitizer,
    )
}

/// A crashed dispatch whose result was collected before the crash (its workspace already gone):
/// the commit its collect kept at `refs/stet/<dispatch>` is recorded for `stet reviews` as salvaged;
/// `None` when no result was kept there.
pub fn kept_before(
    plan: &SalvagePlan,
    dispatch: DispatchId,
    state_dir: &Path,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Option<Outcome>, SalvageError> {
    let reference = result_ref(dispatch);
    let failed = |detail: String| SalvageError::Kept {
        reference: reference.clone(),
        detail,
    };
    let repository = git2::Repository::open(&plan.repository)
        .map_err(|error| failed(error.message().to_owned()))?;
    let Ok(found) = repository.refname_to_id(&reference) else {
        return Ok(None);
    };
    let commit = CommitSha::parse(&found.to_string()).map_err(|error| failed(error.to_string()))?;
    let diff = committed_diff(&plan.repository, &plan.parent, &commit)
        .map_err(|error| failed(error.message().to_owned()))?;
    recorded(plan, dispatch, commit, diff, &[], state_dir, sanitizer).map(Some)
}

/// Passes `commit` through the review gate and records it under `<state>/salvaged/`.
fn recorded(
    plan: &SalvagePlan,
    dispatch: DispatchId,
    commit: CommitSha,
    diff: ResultDiff,
    warnings: &[ImportWarning],
    state_dir: &Path,
    sanitizer: &Arc<TokenSanitizer>,
) -> Result<Outcome, SalvageError> {
    let rules = ProtectedPaths::default()
        .extended(&plan.protected)
        .map_err(|error| SalvageError::Rules(error.to_string()))?;
    let never = || false;
    let changes = read_changes_until(&plan.repository, &plan.parent, &commit, &never)
        .map_err(|error| SalvageError::Review(error.to_string()))?;
    let gate = inspect_until(&changes, &rules, sanitizer, &never)
        .map_err(|error| SalvageError::Review(error.to_string()))?;
    let shown = |text: String| sanitizer.sanitize(&text).into_string();
    let salvaged = Salvaged {
        dispatch,
        title: plan.title.clone(),
        reference: result_ref(dispatch),
        commit,
        repository: plan.repository.clone(),
        files: diff.files.len(),
        insertions: diff.insertions,
        deletions: diff.deletions,
        held: gate
            .held
            .iter()
            .map(|held| shown(format!("a protected path: {held}")))
            .chain(
                gate.secrets
                    .iter()
                    .map(|finding| shown(format!("what looks like a secret: {finding}"))),
            )
            .collect(),
        warnings: warnings.iter().map(|w| shown(w.to_string())).collect(),
        patch: shown(diff.patch),
        salvaged_at: Utc::now(),
    };
    write_record(state_dir, &salvaged)?;
    Ok(Outcome::Kept(Box::new(salvaged)))
}

/// Points `reference` at `commit`, replacing what a collect that the crash cut short kept there.
fn keep(repository: &Path, reference: &str, commit: &CommitSha) -> Result<(), String> {
    let repo = git2::Repository::open(repository)
        .map_err(|error| format!("{}: {}", repository.display(), error.message()))?;
    let oid = git2::Oid::from_str(commit.as_str()).map_err(|error| error.message().to_owned())?;
    repo.reference(reference, oid, true, "stet: salvaged after a crash")
        .map_err(|error| error.message().to_owned())?;
    Ok(())
}

fn record_path(state_dir: &Path, dispatch: DispatchId) -> PathBuf {
    state_dir
        .join(SALVAGED_DIR)
        .join(format!("{dispatch}.json"))
}

fn write_record(state_dir: &Path, salvaged: &Salvaged) -> Result<(), SalvageError> {
    let path = record_path(state_dir, salvaged.dispatch);
    let failed = |source| SalvageError::Record {
        path: path.clone(),
        source,
    };
    crate::private_files::create_dir_all(&state_dir.join(SALVAGED_DIR))
        .map_err(|error| failed(error.source))?;
    let bytes = serde_json::to_vec_pretty(salvaged).map_err(|error| failed(error.into()))?;
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, bytes).map_err(failed)?;
    std::fs::rename(&partial, &path).map_err(failed)
}

/// Every salvage record under `state_dir`, oldest first; unreadable ones are skipped.
pub fn salvaged(state_dir: &Path) -> Vec<Salvaged> {
    let Ok(entries) = std::fs::read_dir(state_dir.join(SALVAGED_DIR)) else {
        return Vec::new();
    };
    let mut found: Vec<Salvaged> = entries
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "json"))
        .filter(|entry| {
            std::fs::symlink_metadata(entry.path())
                .is_ok_and(|meta| meta.is_file() && meta.len() <= MAX_RECORD_BYTES)
        })
        .filter_map(|entry| std::fs::read(entry.path()).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    found.sort_by_key(|record: &Salvaged| record.salvaged_at);
    found
}

#[cfg(test)]
mod tests;
