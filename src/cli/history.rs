//! What earlier runs came to, read from the run records under the state directory for the
//! theater's inbox badges: a brief pushed headless with its pull request open shows `[PR #n]`, not
//! `[new]`. A record that cannot be read is skipped: the badge is a convenience, the record stays
//! the authority.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use stet_engine::dispatch::record::{EVENTS_FILE, RUNS_DIR, RunResult, read_result};
use stet_protocol::event::{Event, EventKind};
use stet_protocol::state::Phase;
use stet_tui::app::{Badge, PastRun};

/// The most of an events file read for its first event (`dispatched`, which names the repository).
const FIRST_EVENT_BYTES: u64 = 64 * 1024;

/// Every readable run record under `state_dir`, oldest first.
pub(crate) fn past_runs(state_dir: &Path) -> Vec<PastRun> {
    let Ok(runs) = std::fs::read_dir(state_dir.join(RUNS_DIR)) else {
        return Vec::new();
    };
    let mut found: Vec<(RunResult, String)> = runs
        .flatten()
        .filter_map(|run| {
            let dir = run.path();
            let result = read_result(&dir).ok()?;
            let repo = target_repo(&dir.join(EVENTS_FILE))?;
            Some((result, repo))
        })
        .collect();
    found.sort_by_key(|(result, _)| result.ended);
    found
        .into_iter()
        .map(|(result, repo)| PastRun {
            badge: badge(&result),
            brief: result.brief,
            repo,
        })
        .collect()
}

/// The repository the run's first event (`dispatched`) names.
fn target_repo(events: &Path) -> Option<String> {
    let file = std::fs::File::open(events).ok()?;
    let mut line = String::new();
    BufReader::new(file.take(FIRST_EVENT_BYTES))
        .read_line(&mut line)
        .ok()?;
    match serde_json::from_str::<Event>(&line).ok()?.kind {
        EventKind::Dispatched { repo, .. } => Some(repo.into_string()),
        _ => None,
    }
}

/// The badge a run's outcome earns, as the theater would have shown it at its end.
fn badge(result: &RunResult) -> Badge {
    match result.outcome {
        Phase::Done => result.pull_request.map_or(Badge::Done, Badge::PullRequest),
        Phase::Cancelled => {
            let mut phases = result.phases.iter().rev().map(|span| span.phase);
            let last = phases.next();
            let before = if last == Some(Phase::Cancelled) {
                phases.next()
            } else {
                last
            };
            if before == Some(Phase::AwaitingApproval) {
                Badge::Discarded
            } else {
                Badge::Cancelled
            }
        }
        Phase::TimedOut => Badge::TimedOut,
        Phase::CostCeilingHit => Badge::CeilingHit,
        _ => Badge::Failed,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use stet_protocol::event::{DispatchId, Event, EventKind};
    use stet_sanitize::sanitize::TokenSanitizer;
    use stet_tui::app::Badge;

    use super::past_runs;

    /// Writes the run record of a dispatch of `brief` against `repo` that ended at `ended` as
    /// `outcome` (going through `phases`), with pull request `pull_request`.
    fn record(
        state: &Path,
        brief: &str,
        repo: &str,
        ended: &str,
        phases: &[&str],
        outcome: &str,
        pull_request: Option<u64>,
    ) {
        let dispatch = DispatchId::new();
        let dir = state.join("runs").join(dispatch.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let sanitizer = std::sync::Arc::new(TokenSanitizer::new().unwrap());
        let text = |text: &str| sanitizer.sanitize(text);
        let first = Event::new(
            dispatch,
            brief,
            EventKind::Dispatched {
                title: text("A brief"),
                repo: text(repo),
                base: text("main"),
                branch: text("stet/x"),
                harness: text("script"),
                image: text("stet-sandbox:dev"),
                cost_ceiling_usd: None,
            },
        );
        std::fs::write(
            dir.join("events.jsonl"),
            format!("{}\n", serde_json::to_string(&first).unwrap()),
        )
        .unwrap();
        let phases: Vec<_> = phases
            .iter()
            .map(|phase| serde_json::json!({"phase": phase, "started": ended, "millis": 1}))
            .collect();
        let result = serde_json::json!({
            "dispatch": dispatch.to_string(),
            "brief": brief,
            "outcome": outcome,
            "exit_code": 0,
            "started": ended,
            "ended": ended,
            "phases": phases,
            "harness": "script",
            "image": "stet-sandbox:dev",
            "branch": "stet/x",
            "pull_request": pull_request,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "redactions": 0,
        });
        std::fs::write(dir.join("result.json"), result.to_string()).unwrap();
    }

    #[test]
    fn runs_come_oldest_first_with_the_badge_their_outcome_earns() {
        let state = tempfile::tempdir().unwrap();
        record(
            state.path(),
            "pushed",
            "demo/app",
            "2026-01-02T00:00:00Z",
            &[
                "queued",
                "awaiting_approval",
                "pushing",
                "opening_pr",
                "done",
            ],
            "done",
            Some(4),
        );
        record(
            state.path(),
            "pushed",
            "demo/app",
            "2026-01-01T00:00:00Z",
            &["queued", "running", "failed"],
            "failed",
            None,
        );
        record(
            state.path(),
            "thrown",
            "demo/app",
            "2026-01-03T00:00:00Z",
            &["queued", "awaiting_approval", "cancelled"],
            "cancelled",
            None,
        );
        std::fs::create_dir_all(state.path().join("runs").join("unreadable")).unwrap();
        let runs = past_runs(state.path());
        let seen: Vec<_> = runs
            .iter()
            .map(|run| (run.brief.as_str(), run.repo.as_str(), run.badge))
            .collect();
        assert_eq!(
            seen,
            [
                ("pushed", "demo/app", Badge::Failed),
                ("pushed", "demo/app", Badge::PullRequest(4)),
                ("thrown", "demo/app", Badge::Discarded),
            ]
        );
        assert!(past_runs(&state.path().join("nowhere")).is_empty());
    }
}
