//! The run record (`<state>/runs/<dispatch id>/`): what stays on disk after a dispatch — every event as
//! sanitized JSON Lines, the result as JSON, and the diff — so nothing the theater showed is lost when
//! the window closes, and the inbox can show a brief's last run.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use stet_protocol::event::{DispatchId, Event, EventKind};
use stet_protocol::state::Phase;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizedText;

/// The directory under the state directory that holds every run record.
pub const RUNS_DIR: &str = "runs";
/// The file in a run's directory holding its events, one JSON line each.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The file in a run's directory holding its [`RunResult`].
pub const RESULT_FILE: &str = "result.json";
/// The file in a run's directory holding the result's diff, as far as [`MAX_PATCH_BYTES`] allows.
pub const PATCH_FILE: &str = "diff.patch";

/// The most of a patch the record keeps: the import's own budget and room for its note; a longer one
/// is cut with a note (the commit holds it all).
pub const MAX_PATCH_BYTES: usize = crate::git::text_budget::MAX_PATCH_BYTES + 4096;

/// The most of the agent's transcript an events file holds by default (`dispatch.max_record_bytes`).
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 64 * 1024 * 1024;

/// Why a run record could not be written or read.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum RecordError {
    #[error("{}: {operation}: {source}", path.display())]
    Io {
        path: PathBuf,
        operation: &'static str,
        source: std::io::Error,
    },
    #[error("encoding the run record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RecordError>;

/// How one phase went, for the timeline and the benchmarks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSpan {
    /// The phase this span covers.
    pub phase: Phase,
    /// When the phase began.
    pub started: DateTime<Utc>,
    /// How long it lasted, in milliseconds.
    pub millis: u64,
}

/// `result.json`: the outcome and what the dispatch produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The dispatch this is the result of.
    pub dispatch: DispatchId,
    /// The brief's id (its file stem).
    pub brief: String,
    /// The terminal phase the dispatch ended in.
    pub outcome: Phase,
    /// The `--headless` exit code of this outcome.
    pub exit_code: u8,
    /// Why the dispatch did not succeed, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SanitizedText>,
    /// When the dispatch began.
    pub started: DateTime<Utc>,
    /// When it ended.
    pub ended: DateTime<Utc>,
    /// Every phase it went through, in order.
    pub phases: Vec<PhaseSpan>,
    /// The name of the harness that ran the agent.
    pub harness: String,
    /// The image reference the sandbox ran.
    pub image: String,
    /// The branch the brief asked for.
    pub branch: SanitizedText,
    /// The commit the workspace was made from, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<CommitSha>,
    /// The commit the agent's work was imported as; `None` when nothing was imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitSha>,
    /// The ref in the user's repository that keeps `commit` (`refs/stet/<dispatch>`), once written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The pull request's number, when one was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<u64>,
    /// The pull request's address, when one was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request_url: Option<SanitizedText>,
    /// Input tokens the model counted over the dispatch.
    pub input_tokens: u64,
    /// Output tokens the model counted over the dispatch.
    pub output_tokens: u64,
    /// Model cost over the dispatch, in US dollars.
    pub cost_usd: f64,
    /// How many secrets the sanitizer masked in what the dispatch showed.
    pub redactions: u64,
    /// Teardown steps that failed (empty when it was clean).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teardown_failures: Vec<SanitizedText>,
}

/// One dispatch's record, open for appending.
#[derive(Debug)]
pub struct RunRecord {
    dir: PathBuf,
    events: File,
    /// Bytes written to the events file.
    written: u64,
    /// Past this, transcript items are no longer written (every other event still is).
    max_bytes: u64,
    /// The marker saying so is written.
    capped: bool,
}

impl RunRecord {
    /// Creates `<state>/runs/<dispatch>/` (readable by its owner only) and its events file, which
    /// keeps the agent's transcript up to `max_bytes`.
    pub fn create(state_dir: &Path, dispatch: DispatchId, max_bytes: u64) -> Result<RunRecord> {
        let dir = run_dir(state_dir, dispatch);
        create_private_dir(&state_dir.join(RUNS_DIR))?;
        create_private_dir(&dir)?;
        let path = dir.join(EVENTS_FILE);
        let events = crate::private_files::options()
            .create_new(true)
            .append(true)
            .open(&path)
            .and_then(|file| crate::private_files::seal(&file).map(|()| file))
            .map_err(io_error(&path, "creating the events file"))?;
        Ok(RunRecord {
            dir,
            events,
            written: 0,
            max_bytes,
            capped: false,
        })
    }

    /// Appends one event as a JSON line. A transcript item that would take the file past its cap is
    /// left out, and the first one left out is replaced by a warning that says so; phases, usage,
    /// warnings and the outcome are always written.
    pub fn append(&mut self, event: &Event) -> Result<()> {
        let mut line = event.to_json_line()?;
        line.push('\n');
        let transcript = matches!(event.kind, EventKind::Transcript(_));
        if transcript && self.written.saturating_add(line.len() as u64) > self.max_bytes {
            if self.capped {
                return Ok(());
            }
            self.capped = true;
            let note = format!(
                "the run record reached its cap of {} bytes (dispatch.max_record_bytes): the rest of the agent's transcript is not kept here; phases, usage and the outcome still are",
                self.max_bytes
            );
            let Ok(sanitizer) =
                stet_sanitize::sanitize::TokenSanitizer::new().map(std::sync::Arc::new)
            else {
                return Ok(());
            };
            let marker = Event::new(
                event.dispatch,
                &event.brief,
                EventKind::Warning {
                    message: sanitizer.sanitize(&note),
                },
            );
            line = marker.to_json_line()?;
            line.push('\n');
        }
        let path = self.dir.join(EVENTS_FILE);
        self.events
            .write_all(line.as_bytes())
            .map_err(io_error(&path, "appending an event"))?;
        self.written = self.written.saturating_add(line.len() as u64);
        Ok(())
    }

    /// Writes the (already sanitized) patch, cut at [`MAX_PATCH_BYTES`] with a note.
    pub fn write_patch(&self, patch: &SanitizedText) -> Result<()> {
        let text = patch.as_str();
        let path = self.dir.join(PATCH_FILE);
        let mut contents = String::with_capacity(text.len().min(MAX_PATCH_BYTES) + 128);
        if text.len() > MAX_PATCH_BYTES {
            contents.push_str(truncate(text, MAX_PATCH_BYTES));
            contents.push_str(&format!(
                "\n[stet: the patch is {} bytes; only the first {MAX_PATCH_BYTES} are kept here, the commit holds all of it]\n",
                text.len()
            ));
        } else {
            contents.push_str(text);
        }
        crate::private_files::write(&path, contents.as_bytes())
            .map_err(io_error(&path, "writing the patch"))
    }

    /// Writes `result.json` (replacing it atomically).
    pub fn write_result(&self, result: &RunResult) -> Result<()> {
        let path = self.dir.join(RESULT_FILE);
        let temporary = self.dir.join(format!("{RESULT_FILE}.tmp"));
        let json = serde_json::to_vec_pretty(result)?;
        crate::private_files::write(&temporary, &json)
            .map_err(io_error(&temporary, "writing the result"))?;
        std::fs::rename(&temporary, &path).map_err(io_error(&path, "replacing the result"))
    }
}

/// The longest start of `text` that fits in `limit` bytes without splitting a character.
pub(crate) fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// `<state>/runs/<dispatch>`.
pub fn run_dir(state_dir: &Path, dispatch: DispatchId) -> PathBuf {
    state_dir.join(RUNS_DIR).join(dispatch.to_string())
}

/// The (sanitized) patch the run record of `dispatch` under `state_dir` keeps: at most
/// [`MAX_PATCH_BYTES`] and the note [`RunRecord`] cuts a longer one with.
pub fn read_patch(state_dir: &Path, dispatch: DispatchId) -> Result<String> {
    let path = run_dir(state_dir, dispatch).join(PATCH_FILE);
    let file = File::open(&path).map_err(io_error(&path, "reading the diff"))?;
    let mut bytes = Vec::new();
    file.take(MAX_PATCH_BYTES as u64 + 4096)
        .read_to_end(&mut bytes)
        .map_err(io_error(&path, "reading the diff"))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads a run's `result.json`.
pub fn read_result(dir: &Path) -> Result<RunResult> {
    let path = dir.join(RESULT_FILE);
    let bytes = std::fs::read(&path).map_err(io_error(&path, "reading the result"))?;
    Ok(serde_json::from_slice(&bytes)?)
}

fn io_error(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Io {
        path: path.to_owned(),
        operation,
        source,
    }
}

fn create_private_dir(path: &Path) -> Result<()> {
    crate::private_files::create_dir_all(path).map_err(|error| RecordError::Io {
        path: error.path,
        operation: "creating the directory",
        source: error.source,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(super::truncate("héllo", 2), "h");
    }

    #[test]
    fn the_patch_is_read_from_the_run_record_and_a_missing_one_says_where() {
        let state = tempfile::tempdir().unwrap();
        let dispatch = DispatchId::new();
        let missing = read_patch(state.path(), dispatch).unwrap_err().to_string();
        assert!(missing.contains(&dispatch.to_string()), "{missing}");

        let record = run_dir(state.path(), dispatch);
        std::fs::create_dir_all(&record).unwrap();
        std::fs::write(record.join(PATCH_FILE), "+added\n").unwrap();
        assert_eq!(read_patch(state.path(), dispatch).unwrap(), "+added\n");

        let long = "+".repeat(MAX_PATCH_BYTES + 10_000);
        std::fs::write(record.join(PATCH_FILE), &long).unwrap();
        assert_eq!(
            read_patch(state.path(), dispatch).unwrap().len(),
            MAX_PATCH_BYTES + 4096,
            "bounded even when the file was not written by stet"
        );
    }

    use super::*;
    use stet_protocol::event::EventKind;
    use stet_sanitize::sanitize::TokenSanitizer;

    #[test]
    fn events_append_as_lines_and_the_result_reads_back() {
        let state = tempfile::tempdir().unwrap();
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let dispatch = DispatchId::new();
        let mut record =
            RunRecord::create(state.path(), dispatch, DEFAULT_MAX_RECORD_BYTES).unwrap();
        for message in ["one", "two"] {
            let event = Event::new(
                dispatch,
                "b",
                EventKind::Warning {
                    message: sanitizer.sanitize(message),
                },
            );
            record.append(&event).unwrap();
        }
        let text = std::fs::read_to_string(record.dir.join(EVENTS_FILE)).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(
            RunRecord::create(state.path(), dispatch, DEFAULT_MAX_RECORD_BYTES).is_err(),
            "one record per dispatch"
        );

        let now = Utc::now();
        let result = RunResult {
            dispatch,
            brief: "b".into(),
            outcome: Phase::Done,
            exit_code: 0,
            reason: None,
            started: now,
            ended: now,
            phases: vec![],
            harness: "script".into(),
            image: "sha256:x".into(),
            branch: sanitizer.sanitize("stet/b"),
            base: None,
            commit: None,
            reference: None,
            pull_request: Some(3),
            pull_request_url: None,
            input_tokens: 1,
            output_tokens: 2,
            cost_usd: 0.5,
            redactions: 0,
            teardown_failures: vec![],
        };
        record.write_result(&result).unwrap();
        assert_eq!(read_result(&record.dir).unwrap(), result);
    }

    #[test]
    fn an_oversized_patch_is_cut_with_a_note() {
        let state = tempfile::tempdir().unwrap();
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let record =
            RunRecord::create(state.path(), DispatchId::new(), DEFAULT_MAX_RECORD_BYTES).unwrap();
        let patch = sanitizer.sanitize(&"é".repeat(MAX_PATCH_BYTES / 2 + 10));
        record.write_patch(&patch).unwrap();
        let kept = std::fs::read_to_string(record.dir.join(PATCH_FILE)).unwrap();
        assert!(kept.len() < MAX_PATCH_BYTES + 200);
        assert!(kept.contains("only the first"));
    }
}
