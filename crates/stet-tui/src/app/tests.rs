use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::TimeDelta;

use super::*;
use crate::app::inbox::PastRun;
use stet_protocol::event::ChangeKind;
use stet_protocol::event::{
    ChangedPath, EventKind, GateFindings, HeldPathReport, ItemKind, PullRequestAction,
    SecretReport, TeardownStepReport, TranscriptItem, Usage,
};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

pub(crate) fn brief_entry(id: &str) -> InboxEntry {
    let path = PathBuf::from(format!("briefs/{id}.toml"));
    let text = format!(
        "title = \"Work on {id}\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n"
    );
    InboxEntry {
        brief: Brief::parse(id, &path, &text),
        path,
    }
}

/// The request that dispatches brief `id` as [`brief_entry`] writes it.
pub(crate) fn dispatch_request(id: &str) -> Request {
    Request::Dispatch {
        brief: Box::new(brief_entry(id).brief.unwrap()),
    }
}

pub(crate) fn broken_entry() -> InboxEntry {
    let path = PathBuf::from("briefs/broken.toml");
    InboxEntry {
        brief: Brief::parse("broken", &path, "title = \"x\"\n[target\n"),
        path,
    }
}

pub(crate) fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub(crate) fn sha() -> CommitSha {
    CommitSha::parse(&"ab".repeat(20)).unwrap()
}

/// Builds the events of one dispatch, every text through a real sanitizer.
pub(crate) struct Script {
    sanitizer: Arc<TokenSanitizer>,
    dispatch: DispatchId,
    brief: String,
}

impl Script {
    pub(crate) fn new(brief: &str) -> Script {
        Script {
            sanitizer: Arc::new(TokenSanitizer::new().unwrap()),
            dispatch: DispatchId::new(),
            brief: brief.to_owned(),
        }
    }

    /// A script whose dispatch id is fixed by `n`, for snapshots.
    pub(crate) fn fixed(brief: &str, n: u32) -> Script {
        Script {
            dispatch: format!("stet-dispatch-00000000-0000-4000-8000-{n:012}")
                .parse()
                .unwrap(),
            ..Script::new(brief)
        }
    }

    pub(crate) fn id(&self) -> DispatchId {
        self.dispatch
    }

    pub(crate) fn text(&self, text: &str) -> SanitizedText {
        self.sanitizer.sanitize(text)
    }

    pub(crate) fn at(&self, seconds: i64, kind: EventKind) -> Event {
        let mut event = Event::new(self.dispatch, &self.brief, kind);
        event.ts = t0() + TimeDelta::seconds(seconds);
        event
    }

    pub(crate) fn dispatched(&self, seconds: i64) -> Event {
        self.at(
            seconds,
            EventKind::Dispatched {
                title: self.text("Work"),
                repo: self.text("demo/app"),
                base: self.text("main"),
                branch: self.text(&format!("stet/{}", self.brief)),
                harness: self.text("script"),
                image: self.text("stet-dispatch:dev"),
                cost_ceiling_usd: None,
            },
        )
    }

    pub(crate) fn phase(&self, seconds: i64, from: Phase, to: Phase) -> Event {
        self.at(
            seconds,
            EventKind::Phase {
                from,
                to,
                reason: None,
            },
        )
    }

    pub(crate) fn line(&self, seconds: i64, item: ItemKind, text: &str) -> Event {
        self.at(
            seconds,
            EventKind::Transcript(TranscriptItem {
                item,
                text: self.text(text),
            }),
        )
    }

    pub(crate) fn usage(
        &self,
        seconds: i64,
        input: u64,
        output: u64,
        cost: f64,
        total: f64,
    ) -> Event {
        self.at(
            seconds,
            EventKind::Usage(Usage {
                model: self.text("demo-model"),
                input_tokens: input,
                output_tokens: output,
                cached_tokens: input / 2,
                cost_usd: Some(cost),
                total_cost_usd: total,
                latency_ms: None,
            }),
        )
    }

    pub(crate) fn finished(&self, seconds: i64, outcome: Phase) -> Event {
        self.at(
            seconds,
            EventKind::Finished {
                outcome,
                exit_code: outcome.exit_code().unwrap(),
                reason: (outcome != Phase::Done).then(|| self.text(outcome.label())),
            },
        )
    }

    /// A changed file of a collected result.
    pub(crate) fn changed(
        &self,
        path: &str,
        change: ChangeKind,
        insertions: usize,
        deletions: usize,
    ) -> ChangedPath {
        ChangedPath {
            path: self.text(path),
            change,
            insertions,
            deletions,
            binary: false,
            cut: false,
        }
    }

    /// Running → collecting at 40 s, the result of `files` collected (those in `held` held by their
    /// rule), then waiting for review at 42 s.
    pub(crate) fn to_review(&self, files: Vec<ChangedPath>, held: &[(&str, &str)]) -> Vec<Event> {
        self.to_review_with_secrets(files, held, &[])
    }

    /// [`Script::to_review`], the scan having found `secrets` (path, line, kind).
    pub(crate) fn to_review_with_secrets(
        &self,
        files: Vec<ChangedPath>,
        held: &[(&str, &str)],
        secrets: &[(&str, u64, &str)],
    ) -> Vec<Event> {
        let collected = EventKind::Collected {
            commit: sha(),
            reference: self.text(&format!("refs/stet/{}", self.brief)),
            insertions: files.iter().map(|file| file.insertions).sum(),
            deletions: files.iter().map(|file| file.deletions).sum(),
            files,
            files_not_listed: 0,
            gate: Box::new(GateFindings {
                protected: held
                    .iter()
                    .map(|(path, rule)| self.text(&format!("{path} ({rule})")))
                    .collect(),
                held: held
                    .iter()
                    .map(|(path, rule)| HeldPathReport {
                        path: self.text(path),
                        rule: self.text(rule),
                    })
                    .collect(),
                secrets: secrets
                    .iter()
                    .map(|(path, line, kind)| SecretReport {
                        path: self.text(path),
                        line: Some(*line),
                        kind: self.text(kind),
                        known: false,
                    })
                    .collect(),
                ..GateFindings::default()
            }),
        };
        vec![
            self.phase(40, Phase::Running, Phase::Collecting),
            self.at(41, collected),
            self.phase(42, Phase::Collecting, Phase::AwaitingApproval),
        ]
    }

    /// Dispatched, then straight through to running.
    pub(crate) fn started(&self) -> Vec<Event> {
        vec![
            self.dispatched(0),
            self.phase(1, Phase::Queued, Phase::Preflight),
            self.phase(2, Phase::Preflight, Phase::Provisioning),
            self.phase(3, Phase::Provisioning, Phase::Running),
        ]
    }
}

pub(crate) fn app(ids: &[&str]) -> App {
    let entries: Vec<InboxEntry> = ids.iter().map(|id| brief_entry(id)).collect();
    App::new(&entries, t0())
}

/// Dispatches the selected brief through its confirmation.
pub(crate) fn dispatch_selected(app: &mut App) -> Option<Request> {
    assert_eq!(app.update(Msg::DispatchSelected), None);
    app.update(Msg::ConfirmYes)
}

#[test]
fn a_demo_run_builds_the_timeline_meter_review_and_pull_request() {
    let mut app = app(&["fix-greeting", "test-word-count"]);
    let script = Script::new("fix-greeting");
    assert_eq!(app.badge("fix-greeting"), Badge::New);
    assert_eq!(
        dispatch_selected(&mut app),
        Some(dispatch_request("fix-greeting"))
    );
    assert_eq!(app.badge("fix-greeting"), Badge::Queued);

    let token = format!("ghp_{}", "a1B2c3D4e5".repeat(4).get(..36).unwrap());
    app.update(Msg::EngineBatch(vec![
        script.dispatched(0),
        script.phase(1, Phase::Queued, Phase::Preflight),
        script.phase(2, Phase::Preflight, Phase::Provisioning),
        script.at(
            3,
            EventKind::ImagePull {
                image: script.text("stet-dispatch:dev"),
                layer: Some(script.text("sha256:1")),
                status: script.text("Downloading"),
                current_bytes: Some(10),
                total_bytes: Some(100),
            },
        ),
        script.phase(10, Phase::Provisioning, Phase::Running),
    ]));
    assert_eq!(app.badge("fix-greeting"), Badge::Running(Phase::Running));
    let view = app.selected_dispatch().unwrap();
    assert!(view.cost.is_none(), "no usage reported yet");
    assert_eq!(view.image_pull.as_ref().unwrap().total_bytes, Some(100));

    app.update(Msg::EngineBatch(vec![
        script.line(11, ItemKind::Thought, "read src/main.rs"),
        script.line(12, ItemKind::Command, &format!("export GH={token}")),
        script.usage(13, 1000, 200, 0.01, 0.01),
        script.usage(20, 3000, 400, 0.02, 0.03),
        script.at(
            21,
            EventKind::Warning {
                message: script.text("slow network"),
            },
        ),
        script.phase(40, Phase::Running, Phase::Collecting),
        script.at(
            41,
            EventKind::Collected {
                commit: sha(),
                reference: script.text("refs/stet/fix-greeting"),
                files: vec![ChangedPath {
                    path: script.text("src/main.rs"),
                    change: ChangeKind::Modified,
                    insertions: 3,
                    deletions: 1,
                    binary: false,
                    cut: false,
                }],
                files_not_listed: 0,
                insertions: 3,
                deletions: 1,
                gate: Box::new(GateFindings {
                    protected: vec![script.text(".github/workflows/ci.yml (CI: .github/**)")],
                    held: vec![HeldPathReport {
                        path: script.text(".github/workflows/ci.yml"),
                        rule: script.text("CI: .github/**"),
                    }],
                    secrets: Vec::new(),
                    ..GateFindings::default()
                }),
            },
        ),
        script.phase(42, Phase::Collecting, Phase::AwaitingApproval),
    ]));
    assert_eq!(app.badge("fix-greeting"), Badge::AwaitingReview);
    let view = app.selected_dispatch().unwrap();
    let lines: Vec<&str> = view
        .transcript
        .items()
        .iter()
        .map(|line| line.text.as_str())
        .collect();
    assert_eq!(lines[0], "read src/main.rs");
    assert!(!lines[1].contains(&token), "the token is redacted");
    assert!(lines[1].contains("[REDACTED:"));
    let meter = view.cost.as_ref().unwrap();
    assert_eq!(
        (
            meter.input_tokens,
            meter.output_tokens,
            meter.cached_tokens,
            meter.requests
        ),
        (4000, 600, 2000, 2)
    );
    assert!((meter.total_cost_usd - 0.03).abs() < 1e-9);
    assert_eq!(meter.model.as_str(), "demo-model");
    let rate = view.usd_per_minute(t0() + TimeDelta::seconds(73)).unwrap();
    assert!((rate - 0.03).abs() < 1e-9, "{rate}");
    let collected = view.collected.as_ref().unwrap();
    assert_eq!((collected.insertions, collected.deletions), (3, 1));
    assert_eq!(collected.protected.len(), 1);
    assert_eq!(collected.held[0].rule.as_str(), "CI: .github/**");
    assert_eq!(view.warnings.items()[0].as_str(), "slow network");
    let id = view.id;

    assert_eq!(app.update(Msg::Approve), None, "p asks first");
    assert_eq!(app.confirm(), Some(&Confirm::Approve(id)));
    assert_eq!(app.update(Msg::ConfirmYes), Some(Request::Approve(id)));
    app.update(Msg::EngineBatch(vec![
        script.phase(60, Phase::AwaitingApproval, Phase::Pushing),
        script.at(
            61,
            EventKind::Pushed {
                branch: script.text("stet/fix-greeting"),
                sha: sha(),
                remote: script.text("origin"),
            },
        ),
        script.phase(62, Phase::Pushing, Phase::OpeningPr),
        script.at(
            63,
            EventKind::PullRequest {
                action: PullRequestAction::Opened,
                number: 7,
                url: script.text("http://forge.local/demo/app/pull/7"),
            },
        ),
    ]));
    assert_eq!(app.badge("fix-greeting"), Badge::Running(Phase::OpeningPr));
    app.update(Msg::EngineBatch(vec![
        script.phase(64, Phase::OpeningPr, Phase::Done),
        script.at(
            65,
            EventKind::TornDown {
                steps: vec![TeardownStepReport {
                    resource: script.text("container"),
                    failure: None,
                }],
                millis: 120,
            },
        ),
        script.finished(66, Phase::Done),
    ]));

    let view = app.dispatch(id).unwrap();
    assert_eq!(view.phase, Phase::Done);
    let timeline: Vec<(Phase, Option<i64>)> = view
        .timeline
        .iter()
        .map(|span| (span.phase, span.duration.map(|d| d.num_seconds())))
        .collect();
    assert_eq!(
        timeline,
        [
            (Phase::Queued, Some(1)),
            (Phase::Preflight, Some(1)),
            (Phase::Provisioning, Some(8)),
            (Phase::Running, Some(30)),
            (Phase::Collecting, Some(2)),
            (Phase::AwaitingApproval, Some(18)),
            (Phase::Pushing, Some(2)),
            (Phase::OpeningPr, Some(2)),
            (Phase::Done, None),
        ]
    );
    assert_eq!(view.pull_request.as_ref().unwrap().number, 7);
    assert_eq!(view.pushed.as_ref().unwrap().sha, sha());
    assert_eq!(view.teardown.as_ref().unwrap().steps.len(), 1);
    let outcome = view.outcome.as_ref().unwrap();
    assert_eq!((outcome.phase, outcome.exit_code), (Phase::Done, 0));
    assert_eq!(app.badge("fix-greeting"), Badge::PullRequest(7));
    assert_eq!(app.badge("test-word-count"), Badge::New);
    assert_eq!(app.running_count(), 0);
}

#[test]
fn the_current_phase_counts_live_time_from_the_tick() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    app.update(Msg::EngineBatch(script.started()));
    app.take_changed();
    app.update(Msg::Tick(t0() + TimeDelta::seconds(30)));
    assert!(app.take_changed(), "a running dispatch redraws on tick");
    let current = app.selected_dispatch().unwrap().timeline.last().unwrap();
    assert_eq!(current.duration, None);
    assert_eq!(current.elapsed(app.now()), TimeDelta::seconds(27));

    app.update(Msg::Engine(script.finished(40, Phase::Cancelled)));
    app.take_changed();
    app.update(Msg::Tick(t0() + TimeDelta::seconds(50)));
    assert!(!app.take_changed(), "nothing live, nothing to redraw");
}

#[test]
fn the_ring_drops_the_oldest_items_and_counts_them() {
    let entries = [brief_entry("a")];
    let mut app = App::with_transcript_capacity(&entries, t0(), 3);
    let script = Script::new("a");
    let events = (0..5)
        .map(|n| script.line(n, ItemKind::Output, &format!("line {n}")))
        .collect();
    app.update(Msg::EngineBatch(events));
    let transcript = &app.selected_dispatch().unwrap().transcript;
    let kept: Vec<&str> = transcript
        .items()
        .iter()
        .map(|line| line.text.as_str())
        .collect();
    assert_eq!(kept, ["line 2", "line 3", "line 4"]);
    assert_eq!(transcript.dropped(), 2);
    assert_eq!(transcript.capacity(), 3);
}

#[test]
fn a_huge_item_keeps_its_first_64_kib_on_a_character_boundary() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    let huge = "é".repeat(MAX_DISPLAY_TEXT_BYTES);
    app.update(Msg::Engine(script.line(0, ItemKind::Output, &huge)));
    let line = &app.selected_dispatch().unwrap().transcript.items()[0];
    assert!(line.text.as_str().len() <= MAX_DISPLAY_TEXT_BYTES);
    assert_eq!(
        line.text.as_str().len() + line.text.hidden_bytes(),
        huge.len()
    );
    assert!(line.text.as_str().chars().all(|c| c == 'é'));
}

#[test]
fn warnings_are_bounded() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    let events = (0..MAX_WARNINGS + 10)
        .map(|n| {
            script.at(
                0,
                EventKind::Warning {
                    message: script.text(&format!("warning {n}")),
                },
            )
        })
        .collect();
    app.update(Msg::EngineBatch(events));
    let warnings = &app.selected_dispatch().unwrap().warnings;
    assert_eq!(warnings.len(), MAX_WARNINGS);
    assert_eq!(warnings.dropped(), 10);
}

#[test]
fn cancel_asks_first_and_a_no_leaves_the_dispatch_alone() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    assert_eq!(app.update(Msg::CancelSelected), None);
    assert_eq!(app.confirm(), None, "nothing to cancel");
    assert_eq!(app.status().as_deref(), Some("nothing to cancel here"));

    app.update(Msg::EngineBatch(script.started()));
    assert_eq!(app.update(Msg::CancelSelected), None);
    assert_eq!(app.confirm(), Some(&Confirm::Cancel(script.dispatch)));
    assert_eq!(
        app.update(Msg::Quit),
        None,
        "other keys wait for the answer"
    );
    assert_eq!(app.update(Msg::ConfirmNo), None);
    assert_eq!(app.confirm(), None);

    app.update(Msg::CancelSelected);
    assert_eq!(
        app.update(Msg::ConfirmYes),
        Some(Request::Cancel(script.dispatch))
    );
    assert_eq!(app.confirm(), None);
    assert_eq!(app.update(Msg::ConfirmYes), None, "nothing left to accept");
}

#[test]
fn a_cancel_confirmed_after_the_dispatch_finished_asks_nothing() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    app.update(Msg::EngineBatch(script.started()));
    app.update(Msg::CancelSelected);
    app.update(Msg::Engine(script.finished(9, Phase::Failed)));
    assert_eq!(app.update(Msg::ConfirmYes), None);
    assert!(app.status().unwrap().contains("already finished"));
}

#[test]
fn quit_with_nothing_running_shuts_down_at_once() {
    let mut app = app(&["a"]);
    assert!(!app.can_exit());
    assert_eq!(app.update(Msg::Quit), Some(Request::Shutdown));
    assert!(app.is_quitting());
    assert!(app.can_exit());
    assert_eq!(app.update(Msg::Quit), None, "shutdown is asked once");
}

#[test]
fn quit_with_dispatches_running_asks_then_waits_for_every_finish() {
    let mut app = app(&["a", "b"]);
    let first = Script::new("a");
    let second = Script::new("b");
    app.update(Msg::EngineBatch(first.started()));
    app.update(Msg::Engine(second.dispatched(0)));

    assert_eq!(app.update(Msg::Quit), None);
    assert_eq!(app.confirm(), Some(&Confirm::Quit));
    assert_eq!(app.update(Msg::ConfirmNo), None);
    assert!(!app.is_quitting());

    app.update(Msg::Quit);
    assert_eq!(app.update(Msg::ConfirmYes), Some(Request::Shutdown));
    assert!(app.is_quitting());
    assert!(!app.can_exit());
    assert_eq!(app.update(Msg::DispatchSelected), None);
    assert_eq!(app.confirm(), None, "no new dispatch while quitting");

    app.update(Msg::Engine(first.finished(5, Phase::Cancelled)));
    assert!(!app.can_exit(), "b has not finished");
    app.update(Msg::Engine(second.finished(6, Phase::Cancelled)));
    assert!(app.can_exit());
}

#[test]
fn a_second_dispatch_of_a_brief_in_flight_is_refused_locally() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    assert!(dispatch_selected(&mut app).is_some());

    assert_eq!(app.update(Msg::DispatchSelected), None);
    assert_eq!(app.confirm(), None, "refused before the engine answered");
    assert!(app.status().unwrap().contains("just dispatched"));

    app.update(Msg::EngineBatch(script.started()));
    assert_eq!(app.update(Msg::DispatchSelected), None);
    assert_eq!(app.confirm(), None);
    assert!(app.status().unwrap().contains("already being dispatched"));

    app.update(Msg::Engine(script.finished(9, Phase::Failed)));
    assert_eq!(
        dispatch_selected(&mut app),
        Some(dispatch_request("a")),
        "a finished brief can run again"
    );
}

#[test]
fn an_engine_refusal_clears_the_request_and_says_why() {
    let mut app = app(&["a"]);
    let request = dispatch_selected(&mut app).unwrap();
    app.update(Msg::RequestFailed {
        request,
        reason: "stet is shutting down".to_owned(),
    });
    assert_eq!(app.badge("a"), Badge::New);
    assert_eq!(
        app.status().as_deref(),
        Some("cannot dispatch: stet is shutting down")
    );
    assert!(dispatch_selected(&mut app).is_some());
}

#[test]
fn every_terminal_outcome_has_its_badge() {
    for (outcome, badge) in [
        (Phase::Done, Badge::Done),
        (Phase::Failed, Badge::Failed),
        (Phase::Cancelled, Badge::Cancelled),
        (Phase::TimedOut, Badge::TimedOut),
        (Phase::CostCeilingHit, Badge::CeilingHit),
    ] {
        let mut app = app(&["a"]);
        let script = Script::new("a");
        app.update(Msg::EngineBatch(script.started()));
        app.update(Msg::Engine(script.finished(9, outcome)));
        assert_eq!(app.badge("a"), badge, "{outcome}");
        let finished = app.selected_dispatch().unwrap().outcome.clone().unwrap();
        assert_eq!(finished.exit_code, outcome.exit_code().unwrap());
        assert_eq!(
            finished.reason.is_some(),
            outcome != Phase::Done,
            "{outcome}"
        );
    }
}

#[test]
fn the_badge_follows_the_newest_dispatch_of_a_brief() {
    let mut app = app(&["a"]);
    let old = Script::new("a");
    app.update(Msg::EngineBatch(old.started()));
    app.update(Msg::Engine(old.finished(9, Phase::Failed)));
    let new = Script::new("a");
    app.update(Msg::Engine(new.dispatched(10)));
    assert_eq!(app.badge("a"), Badge::Queued);
    assert_eq!(app.selected_dispatch().unwrap().id, new.dispatch);
    assert_eq!(app.dispatches().count(), 2);
}

#[test]
fn a_brief_error_row_is_shown_and_never_dispatchable() {
    let entries = [broken_entry(), brief_entry("a")];
    let mut app = App::new(&entries, t0());
    let InboxRow::Invalid { file, line, reason } = &app.rows()[0] else {
        panic!("{:?}", app.rows()[0]);
    };
    assert_eq!(file, Path::new("briefs/broken.toml"));
    assert_eq!(*line, Some(2));
    assert!(!reason.is_empty());
    assert_eq!(app.rows()[0].brief_id(), None);

    assert_eq!(app.update(Msg::DispatchSelected), None);
    assert_eq!(app.confirm(), None);
    assert!(app.status().unwrap().contains("cannot be dispatched"));
    assert_eq!(app.update(Msg::ConfirmYes), None);

    app.update(Msg::SelectNext);
    assert_eq!(app.selected(), Some(1));
    assert!(dispatch_selected(&mut app).is_some());
}

#[test]
fn selection_stays_inside_the_inbox() {
    let mut app = app(&["a", "b"]);
    app.take_changed();
    app.update(Msg::SelectPrevious);
    assert!(!app.take_changed());
    assert_eq!(app.selected(), Some(0));
    app.update(Msg::SelectNext);
    app.update(Msg::SelectNext);
    assert_eq!(app.selected(), Some(1));
    assert_eq!(app.selected_row().unwrap().brief_id(), Some("b"));

    let mut empty = App::new(&[], t0());
    empty.update(Msg::SelectNext);
    assert_eq!(empty.selected(), None);
    assert_eq!(empty.update(Msg::DispatchSelected), None);
}

#[test]
fn approve_and_discard_act_only_on_a_run_awaiting_review() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    app.update(Msg::EngineBatch(script.started()));
    assert_eq!(app.update(Msg::Approve), None);
    assert_eq!(
        app.status().as_deref(),
        Some("nothing to push yet: a is running; its result waits for review once collected")
    );
    assert_eq!(app.update(Msg::Discard), None);
    assert!(app.confirm().is_none());
    assert!(
        app.status()
            .unwrap()
            .starts_with("nothing to discard yet: a is running")
    );

    app.update(Msg::EngineBatch(vec![
        script.phase(5, Phase::Running, Phase::Collecting),
        script.phase(6, Phase::Collecting, Phase::AwaitingApproval),
    ]));
    assert_eq!(app.update(Msg::Discard), None, "x asks first");
    assert_eq!(app.update(Msg::ConfirmNo), None);
    assert_eq!(app.update(Msg::Discard), None);
    assert_eq!(
        app.update(Msg::ConfirmYes),
        Some(Request::Discard(script.dispatch))
    );
    app.update(Msg::EngineBatch(vec![
        script.phase(7, Phase::AwaitingApproval, Phase::Cancelled),
        script.finished(8, Phase::Cancelled),
    ]));
    assert_eq!(
        app.badge("a"),
        Badge::Discarded,
        "a discarded result is not [cancelled]"
    );
    app.update(Msg::Approve);
    assert_eq!(
        app.status().as_deref(),
        Some("nothing to push: a has finished (discarded)")
    );
}

#[test]
fn p_and_x_on_a_brief_that_never_ran_say_why_nothing_happened() {
    let mut app = App::new(&[brief_entry("a"), broken_entry()], t0());
    app.update(Msg::Approve);
    assert_eq!(
        app.status().as_deref(),
        Some("nothing to push: a has not been dispatched (Enter dispatches it)")
    );
    app.update(Msg::SelectNext);
    app.update(Msg::Discard);
    assert_eq!(
        app.status().as_deref(),
        Some("nothing to discard: this file is not a brief, so it never ran")
    );
    let mut empty = App::new(&[], t0());
    empty.update(Msg::Approve);
    assert_eq!(
        empty.status().as_deref(),
        Some("nothing to push: the inbox is empty")
    );
}

#[test]
fn the_dirty_flag_is_set_by_changes_and_cleared_by_reading_it() {
    let mut app = app(&["a"]);
    assert!(app.take_changed(), "the first frame is drawn");
    assert!(!app.take_changed());
    app.update(Msg::Engine(Script::new("a").dispatched(0)));
    assert!(app.take_changed());
    app.update(Msg::ConfirmNo);
    assert!(!app.take_changed(), "declining nothing changes nothing");
}

#[test]
fn events_of_a_dispatch_first_heard_of_mid_run_still_fold() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    app.update(Msg::Engine(script.phase(
        5,
        Phase::Running,
        Phase::Collecting,
    )));
    let view = app.selected_dispatch().unwrap();
    assert_eq!(view.phase, Phase::Collecting);
    assert!(view.plan.is_none());
    assert_eq!(app.badge("a"), Badge::Running(Phase::Collecting));
}

#[test]
fn a_batch_of_100k_transcript_events_ingests_correctly() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    let total = 100_000;
    let events: Vec<Event> = (0..total)
        .map(|n| script.line(0, ItemKind::Output, &format!("output {n}")))
        .collect();
    app.update(Msg::EngineBatch(events));
    let transcript = &app.selected_dispatch().unwrap().transcript;
    assert_eq!(transcript.len(), DEFAULT_TRANSCRIPT_CAPACITY);
    assert_eq!(
        transcript.dropped(),
        u64::try_from(total - DEFAULT_TRANSCRIPT_CAPACITY).unwrap()
    );
    assert_eq!(
        transcript.items().front().unwrap().text.as_str(),
        format!("output {}", total - DEFAULT_TRANSCRIPT_CAPACITY)
    );
    assert_eq!(
        transcript.items().back().unwrap().text.as_str(),
        format!("output {}", total - 1)
    );
}

#[test]
fn the_transcript_follows_its_tail_until_scrolled_up() {
    let mut app = app(&["fix-greeting"]);
    let script = Script::new("fix-greeting");
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    let lines: Vec<Event> = (0..20)
        .map(|n| script.line(4 + n, ItemKind::Output, &format!("line {n}")))
        .collect();
    app.update(Msg::EngineBatch(lines));
    assert!(app.scroll().is_following());
    app.update(Msg::ScrollUp(5));
    assert!(!app.scroll().is_following());
    assert_eq!(app.scroll().bottom(0, 20), Some(14));
    app.update(Msg::Engine(script.line(30, ItemKind::Output, "more")));
    assert_eq!(
        app.scroll().bottom(0, 21),
        Some(14),
        "new items do not move the view"
    );
    app.update(Msg::FollowTail);
    assert!(app.scroll().is_following());
    app.update(Msg::ScrollUp(1));
    app.update(Msg::ScrollDown(1));
    assert!(
        app.scroll().is_following(),
        "scrolling back to the end follows again"
    );
}

#[test]
fn moving_the_selection_resets_the_scroll_and_tab_moves_the_focus() {
    let mut app = app(&["a", "b"]);
    let script = Script::new("a");
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    app.update(Msg::Engine(script.line(5, ItemKind::Message, "hi")));
    app.update(Msg::Engine(script.line(6, ItemKind::Message, "there")));
    app.update(Msg::ScrollUp(1));
    assert!(!app.scroll().is_following());
    app.update(Msg::SelectNext);
    assert!(app.scroll().is_following());
    assert_eq!(app.focus(), Focus::Inbox);
    app.update(Msg::FocusNext);
    assert_eq!(app.focus(), Focus::Transcript);
    app.update(Msg::FocusNext);
    assert_eq!(app.focus(), Focus::Inbox);
}

#[test]
fn help_toggles_and_back_closes_it_first() {
    let mut app = app(&["a"]);
    assert!(!app.help_open());
    app.update(Msg::ToggleHelp);
    assert!(app.help_open());
    app.update(Msg::Back);
    assert!(!app.help_open());
    app.update(Msg::ToggleHelp);
    app.update(Msg::ToggleHelp);
    assert!(!app.help_open());
}

#[test]
fn back_leaves_the_review_gate_and_review_reopens_it() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    assert!(app.reviewing().is_none());
    app.update(Msg::Engine(script.phase(
        9,
        Phase::Running,
        Phase::Collecting,
    )));
    app.update(Msg::Engine(script.phase(
        10,
        Phase::Collecting,
        Phase::AwaitingApproval,
    )));
    assert!(app.reviewing().is_some());
    app.update(Msg::Back);
    assert!(app.reviewing().is_none());
    app.update(Msg::Approve);
    assert_eq!(
        app.update(Msg::ConfirmYes),
        Some(Request::Approve(script.dispatch)),
        "approval still works from the transcript"
    );
    app.update(Msg::OpenReview);
    assert!(app.reviewing().is_some());
}

#[test]
fn the_cost_ceiling_must_be_a_positive_amount() {
    let mut app = app(&["a"]);
    app.set_cost_ceiling(Some(2.5));
    assert_eq!(app.cost_ceiling(), Some(2.5));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        app.set_cost_ceiling(Some(bad));
        assert_eq!(app.cost_ceiling(), None, "{bad}");
    }
}

#[test]
fn a_dispatch_keeps_the_ceiling_its_first_event_carried() {
    let script = Script::new("a");
    let dispatched = |ceiling: f64| {
        let mut event = script.dispatched(0);
        if let EventKind::Dispatched {
            cost_ceiling_usd, ..
        } = &mut event.kind
        {
            *cost_ceiling_usd = Some(ceiling);
        }
        event
    };
    let ceiling_shown = |ceiling: f64| {
        let mut app = app(&["a"]);
        app.update(Msg::Engine(dispatched(ceiling)));
        let plan = app.selected_dispatch().unwrap().plan.clone().unwrap();
        plan.cost_ceiling_usd
    };
    assert_eq!(ceiling_shown(1.5), Some(1.5));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(ceiling_shown(bad), None, "{bad}");
    }
}

fn type_query(app: &mut App, query: &str) {
    assert_eq!(app.update(Msg::SearchStart), None);
    for c in query.chars() {
        app.update(Msg::SearchKey(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char(c),
        )));
    }
}

#[test]
fn search_pins_the_nearest_older_match_and_walks_both_ways() {
    let mut app = app(&["a"]);
    let script = Script::fixed("a", 1);
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    let lines = ["cargo build", "error: E0308", "ok", "Error again", "ok"];
    app.update(Msg::EngineBatch(
        lines
            .iter()
            .enumerate()
            .map(|(n, text)| script.line(4 + n as i64, ItemKind::Output, text))
            .collect(),
    ));
    let bottom = |app: &App| {
        let view = app.selected_dispatch().unwrap();
        app.scroll()
            .bottom(view.transcript.dropped(), view.transcript.len())
    };

    type_query(&mut app, "error");
    assert!(app.search_prompt().is_some());
    assert_eq!(app.search(), None, "nothing is searched before Enter");
    app.update(Msg::SearchCommit);
    assert!(app.search_prompt().is_none());
    assert_eq!(app.focus(), Focus::Transcript);
    assert_eq!(
        bottom(&app),
        Some(3),
        "the newest match at or above the view"
    );
    assert!(
        app.status().unwrap().contains("item 4 of 5"),
        "{:?}",
        app.status()
    );

    app.update(Msg::SearchNext);
    assert_eq!(bottom(&app), Some(1));
    app.update(Msg::SearchNext);
    assert_eq!(bottom(&app), Some(3), "wrapped round to the newest");
    assert!(app.status().unwrap().contains("wrapped"));
    app.update(Msg::SearchPrevious);
    assert_eq!(bottom(&app), Some(1), "wrapped the other way");

    type_query(&mut app, "Error");
    app.update(Msg::SearchCommit);
    assert_eq!(
        bottom(&app),
        Some(3),
        "an upper-case letter makes it case-sensitive"
    );
    type_query(&mut app, "panic");
    app.update(Msg::SearchCommit);
    assert_eq!(app.status().as_deref(), Some("no match for “panic”"));
    type_query(&mut app, "x");
    app.update(Msg::SearchCancel);
    assert_eq!(
        app.search().unwrap().query(),
        "panic",
        "Esc keeps the old search"
    );
}

#[test]
fn the_search_prompt_caps_its_length() {
    let mut app = app(&["a"]);
    type_query(&mut app, &"q".repeat(MAX_QUERY_CHARS + 10));
    assert_eq!(
        app.search_prompt().unwrap().value().chars().count(),
        MAX_QUERY_CHARS
    );
}

#[test]
fn ctrl_c_quits_on_the_second_press_only() {
    let mut app = app(&["a"]);
    assert_eq!(app.update(Msg::Interrupt), None);
    assert!(!app.is_quitting());
    assert_eq!(app.status().as_deref(), Some("press Ctrl-C again to quit"));
    app.update(Msg::SelectNext);
    assert_eq!(app.update(Msg::Interrupt), None, "another key disarmed it");
    assert_eq!(app.update(Msg::Interrupt), Some(Request::Shutdown));
    assert!(app.is_quitting());
}

#[test]
fn ctrl_c_twice_quits_with_dispatches_running_and_a_question_open() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    app.update(Msg::CancelSelected);
    assert!(app.confirm().is_some());
    assert_eq!(app.update(Msg::Interrupt), None);
    assert_eq!(
        app.status().as_deref(),
        Some("press Ctrl-C again to quit: cancels 1 running dispatch(es)")
    );
    assert_eq!(
        app.update(Msg::Interrupt),
        Some(Request::Shutdown),
        "the second press quits as promised, without asking"
    );
    assert!(app.is_quitting());
    assert!(app.confirm().is_none());
    assert!(!app.can_exit(), "it waits for the teardown");
    assert_eq!(
        app.update(Msg::Interrupt),
        None,
        "only one shutdown is asked for"
    );
}

#[test]
fn a_searched_transcript_shows_the_items_after_the_match() {
    let mut app = app(&["a"]);
    let script = Script::new("a");
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    let lines = (0..40)
        .map(|n| {
            let text = if n == 5 {
                "the needle".to_owned()
            } else {
                format!("hay {n}")
            };
            script.line(4 + n, ItemKind::Output, &text)
        })
        .collect();
    app.update(Msg::EngineBatch(lines));
    type_query(&mut app, "needle");
    app.update(Msg::SearchCommit);
    let view = app.selected_dispatch().unwrap();
    let rows = crate::panes::transcript::visible_rows(
        view,
        crate::panes::transcript::Viewport {
            scroll: app.scroll(),
            search: app.search(),
            focused: true,
        },
        40,
        12,
        crate::theme::Theme::Plain,
    );
    let shown: Vec<String> = rows.iter().map(|row| row.to_string()).collect();
    let at = shown
        .iter()
        .position(|row| row.contains("the needle"))
        .unwrap();
    assert!(at <= 4, "the match sits near the top: {shown:#?}");
    assert!(shown.iter().any(|row| row.contains("hay 6")), "{shown:#?}");
    assert_eq!(
        shown.len(),
        12,
        "the pane is filled below the match: {shown:#?}"
    );
    app.update(Msg::ScrollDown(1));
    assert!(
        !app.scroll().is_following(),
        "moving on from the match keeps it paused"
    );
}

#[test]
fn the_review_gate_scrolls_its_patch_within_bounds() {
    let mut app = app(&["a"]);
    let script = Script::fixed("a", 1);
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    app.update(Msg::EngineBatch(script.to_review(Vec::new(), &[])));
    let view = app.reviewing().unwrap();
    assert_eq!(view.patch, Some(PatchState::Loading));
    app.update(Msg::ScrollDown(5));
    assert_eq!(app.review_scroll(), 0, "nothing to scroll while loading");
    app.update(Msg::PatchLoaded {
        dispatch: script.id(),
        patch: Ok("a\nb\nc\nd\n".to_owned()),
    });
    app.update(Msg::ScrollDown(2));
    assert_eq!(app.review_scroll(), 2);
    app.update(Msg::ScrollDown(10));
    assert_eq!(app.review_scroll(), 3, "stops at the last line");
    app.update(Msg::ScrollUp(1));
    assert_eq!(app.review_scroll(), 2);
    assert!(
        app.scroll().is_following(),
        "the transcript did not move under the gate"
    );
}

#[test]
fn the_new_brief_form_saves_through_a_request_and_the_brief_joins_the_inbox() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = app(&["b-first", "d-last"]);
    app.update(Msg::NewBrief);
    let form = app.form().unwrap();
    assert_eq!(form.value(crate::form::Field::Repo), "demo/app");
    assert_eq!(form.value(crate::form::Field::Base), "main");
    let key = |code| Msg::FormKey(KeyEvent::new(code, KeyModifiers::NONE));
    for c in "Cut a release".chars() {
        app.update(key(KeyCode::Char(c)));
    }
    for _ in 0..3 {
        app.update(key(KeyCode::Tab));
    }
    for c in "tag it".chars() {
        app.update(key(KeyCode::Char(c)));
    }
    let save = Msg::FormKey(KeyEvent::new(KeyCode::Char('s'), KeyModifiers::CONTROL));
    let Some(Request::SaveBrief(draft)) = app.update(save.clone()) else {
        panic!("no save asked for");
    };
    assert_eq!(draft.title, "Cut a release");
    assert_eq!(draft.items, ["tag it"]);
    assert_eq!(app.update(save), None, "keys wait while it is saved");

    app.update(Msg::BriefSaved {
        file: None,
        saved: Err("briefs: permission denied".to_owned()),
    });
    assert!(app.form().is_some(), "a failed save keeps what was typed");
    assert_eq!(
        app.status().as_deref(),
        Some("cannot save the brief: briefs: permission denied")
    );

    let saved = brief_entry("c-release").brief.unwrap();
    app.update(Msg::BriefSaved {
        file: Some(PathBuf::from(".stet/briefs/c-release.toml")),
        saved: Ok(Box::new(saved)),
    });
    assert!(app.form().is_none());
    let ids: Vec<_> = app.rows().iter().filter_map(InboxRow::brief_id).collect();
    assert_eq!(ids, ["b-first", "c-release", "d-last"]);
    assert_eq!(app.selected(), Some(1), "the new brief is selected");
    assert_eq!(
        app.status().as_deref(),
        Some("saved .stet/briefs/c-release.toml: Enter dispatches it")
    );
}

#[test]
fn esc_closes_the_form_without_a_request() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = app(&[]);
    app.update(Msg::NewBrief);
    assert_eq!(app.form().unwrap().value(crate::form::Field::Repo), "");
    let esc = Msg::FormKey(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
    assert_eq!(app.update(esc), None);
    assert!(app.form().is_none());
}

#[test]
fn the_meter_shows_the_gateways_last_refusal() {
    let mut app = app(&["fix-greeting"]);
    let script = Script::new("fix-greeting");
    dispatch_selected(&mut app);
    let refusal = |seconds, field: &str, rule: &str| {
        script.at(
            seconds,
            EventKind::GatewayRefusal {
                api: script.text("Responses"),
                field: script.text(field),
                value_kind: script.text("string"),
                rule: script.text(rule),
                setting: Some(script.text("[model] provider_tools")),
            },
        )
    };
    app.update(Msg::EngineBatch(vec![
        script.dispatched(0),
        refusal(1, "tools[0].type", "provider_tool"),
        refusal(2, "model", "routing_suffix"),
    ]));
    let view = app.selected_dispatch().unwrap();
    let text = |view: &DispatchView| -> Vec<String> {
        crate::panes::meter::lines(view, None, app.now(), 40, crate::theme::Theme::Plain)
            .iter()
            .map(|line| line.to_string())
            .collect()
    };
    let lines = text(view);
    assert_eq!(
        lines.last().unwrap(),
        "refused model: routing_suffix",
        "{lines:?}"
    );
    assert!(!lines.iter().any(|line| line.contains("tools[0]")));
}

#[test]
fn the_meter_shows_the_network_line_with_the_last_refused_host_and_its_line() {
    let mut app = app(&["fix-greeting"]);
    let script = Script::new("fix-greeting");
    dispatch_selected(&mut app);
    let connection = |seconds, host: &str, allowed: bool, hint: Option<&str>| {
        script.at(
            seconds,
            EventKind::Egress {
                host: script.text(host),
                port: 443,
                address: allowed.then(|| "192.0.2.7:443".to_owned()),
                allowed,
                outcome: script.text(if allowed {
                    "allowed by pypi.org (preset python); closed"
                } else {
                    "refused: not in [network] allow"
                }),
                hint: hint.map(|hint| script.text(hint)),
                up: 10,
                down: 20,
                millis: 3,
            },
        )
    };
    app.update(Msg::EngineBatch(vec![
        script.dispatched(0),
        connection(1, "pypi.org", true, None),
        connection(
            2,
            "paste.example.com",
            false,
            Some("add \"paste.example.com\" to [network] allow in your config.toml"),
        ),
        connection(3, "files.pythonhosted.org", true, None),
    ]));
    let lines: Vec<String> = crate::panes::meter::lines(
        app.selected_dispatch().unwrap(),
        None,
        app.now(),
        40,
        crate::theme::Theme::Plain,
    )
    .iter()
    .map(|line| line.to_string())
    .collect();
    let network = lines
        .iter()
        .position(|line| line.starts_with("network"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(lines[network], "network 2 ok · 1 refused");
    let refused = lines[network + 1..].join(" ");
    assert_eq!(
        refused,
        "refused paste.example.com:443: add \"paste.example.com\" to [network] allow in your config.toml"
    );
    assert!(
        lines[network + 1..]
            .iter()
            .all(|line| line.chars().count() <= 40),
        "{lines:?}"
    );
    // The summary's counts are the proxy's own (some connections may not have been sent live).
    app.update(Msg::EngineBatch(vec![script.at(
        4,
        EventKind::EgressSummary {
            allowed: 7,
            refused: 1,
            uploaded: 30,
            downloaded: 60,
            hosts: vec![script.text("pypi.org:443")],
            hosts_not_listed: 0,
            not_shown: 5,
        },
    )]));
    let view = app.selected_dispatch().unwrap();
    assert_eq!(view.network.as_ref().unwrap().allowed, 7);
}

#[test]
fn a_reloaded_inbox_keeps_the_cursor_on_its_brief() {
    let mut app = app(&["b", "d"]);
    app.update(Msg::SelectNext);
    assert_eq!(app.selected_row().and_then(InboxRow::brief_id), Some("d"));
    let rows = ["a", "b", "d"]
        .iter()
        .map(|id| InboxRow::from_entry(&brief_entry(id)))
        .collect();
    app.update(Msg::InboxReloaded(rows));
    let ids: Vec<_> = app.rows().iter().filter_map(InboxRow::brief_id).collect();
    assert_eq!(ids, ["a", "b", "d"]);
    assert_eq!(app.selected_row().and_then(InboxRow::brief_id), Some("d"));
    // The selected brief went away (or became unreadable): the cursor stays in the inbox.
    app.update(Msg::InboxReloaded(vec![
        InboxRow::from_entry(&brief_entry("a")),
        InboxRow::from_entry(&broken_entry()),
    ]));
    assert_eq!(app.selected(), Some(1));
    app.update(Msg::InboxReloaded(Vec::new()));
    assert_eq!(app.selected(), None);
}

#[test]
fn earlier_runs_badge_a_brief_until_this_session_dispatches_it() {
    let mut app = app(&["a", "b", "c"]);
    app.set_history([
        PastRun {
            brief: "a".to_owned(),
            repo: "demo/app".to_owned(),
            badge: Badge::Failed,
        },
        PastRun {
            brief: "a".to_owned(),
            repo: "demo/app".to_owned(),
            badge: Badge::PullRequest(7),
        },
        PastRun {
            brief: "b".to_owned(),
            repo: "someone/else".to_owned(),
            badge: Badge::Done,
        },
    ]);
    assert_eq!(
        app.badge("a"),
        Badge::PullRequest(7),
        "the newest run counts"
    );
    assert_eq!(
        app.badge("b"),
        Badge::New,
        "a run against another repository is not this brief's"
    );
    assert_eq!(app.badge("c"), Badge::New);
    let script = Script::new("a");
    dispatch_selected(&mut app);
    assert_eq!(app.badge("a"), Badge::Queued);
    app.update(Msg::EngineBatch(script.started()));
    assert_eq!(app.badge("a"), Badge::Running(Phase::Running));
}
