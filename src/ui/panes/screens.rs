//! Snapshots of whole frames in each main state, built by feeding real engine events (through a
//! real sanitizer) to the app, so a visible change to any pane shows up in review.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::TimeDelta;
use insta::assert_snapshot;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::dispatch::event::{ChangedPath, EventKind, ItemKind, TeardownStepReport};
use crate::dispatch::state::Phase;
use crate::git::import::ChangeKind;
use crate::inbox::InboxEntry;
use crate::ui::app::tests::{Script, brief_entry, broken_entry, dispatch_selected, sha, t0};
use crate::ui::app::{App, Msg};
use crate::ui::theme::Theme;
use crate::ui::view::render;

fn screen(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| render(frame, app)).unwrap();
    terminal.backend().to_string()
}

fn inbox() -> Vec<InboxEntry> {
    vec![
        brief_entry("fix-greeting"),
        brief_entry("test-word-count"),
        broken_entry(),
    ]
}

/// An app with `fix-greeting` dispatched and running since t0 + 3 s, its clock at t0 + `now` s.
fn running(capacity: usize) -> (App, Script) {
    let mut app = App::with_transcript_capacity(&inbox(), t0(), capacity);
    let script = Script::fixed("fix-greeting", 1);
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    (app, script)
}

fn tick(app: &mut App, seconds: i64) {
    app.update(Msg::Tick(t0() + TimeDelta::seconds(seconds)));
}

fn transcript(script: &Script) -> Vec<crate::dispatch::event::Event> {
    vec![
        script.line(
            4,
            ItemKind::Thought,
            "The greeting is built in src/main.rs.",
        ),
        script.line(5, ItemKind::Command, "grep -n hello src/main.rs"),
        script.line(
            6,
            ItemKind::Output,
            "12:    println!(\"hello\");\n13:    Ok(())",
        ),
        script.line(
            7,
            ItemKind::Message,
            &format!(
                "I will change the greeting. {}",
                "This sentence is long enough to wrap. ".repeat(3)
            ),
        ),
        script.line(
            8,
            ItemKind::Error,
            "warning: \u{1b}[31munused\u{1b}[0m variable\u{7}",
        ),
        script.usage(9, 1200, 300, 0.004, 0.004),
        script.usage(20, 2400, 500, 0.008, 0.012),
    ]
}

#[test]
fn empty_inbox() {
    let app = App::new(&[], t0());
    assert_snapshot!(screen(&app, 100, 20));
}

#[test]
fn running_with_transcript() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(transcript(&script)));
    tick(&mut app, 45);
    assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn plain_theme_draws_the_same_text() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(transcript(&script)));
    tick(&mut app, 45);
    let coloured = screen(&app, 100, 30);
    app.set_theme(Theme::Plain);
    assert_eq!(screen(&app, 100, 30), coloured);
}

#[test]
fn redacted_secret_in_the_transcript() {
    let (mut app, script) = running(100);
    let token = format!("ghp_{}", "a1B2c3D4e5".repeat(4).get(..36).unwrap());
    app.update(Msg::EngineBatch(vec![
        script.line(4, ItemKind::Command, &format!("export GH_TOKEN={token}")),
        script.line(5, ItemKind::Output, &format!("authenticated with {token}")),
    ]));
    tick(&mut app, 10);
    let shown = screen(&app, 100, 24);
    assert!(
        !shown.contains(&token[4..]),
        "the secret never reaches the screen"
    );
    assert!(shown.contains("[REDACTED:"));
    assert_snapshot!(shown);
}

#[test]
fn near_the_ceiling() {
    let (mut app, script) = running(100);
    app.set_cost_ceiling(Some(0.05));
    app.update(Msg::EngineBatch(vec![
        script.usage(10, 40_000, 6_000, 0.02, 0.02),
        script.usage(70, 50_000, 9_000, 0.025, 0.045),
    ]));
    tick(&mut app, 70);
    assert_snapshot!(screen(&app, 100, 24));
}

#[test]
fn timed_out() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(vec![
        script.line(5, ItemKind::Command, "sleep 9999"),
        script.at(
            603,
            EventKind::TornDown {
                steps: vec![
                    TeardownStepReport {
                        resource: script.text("container"),
                        failure: None,
                    },
                    TeardownStepReport {
                        resource: script.text("workspace"),
                        failure: None,
                    },
                    TeardownStepReport {
                        resource: script.text("credential"),
                        failure: Some(script.text("already revoked")),
                    },
                ],
                millis: 840,
            },
        ),
        script.finished(604, Phase::TimedOut),
    ]));
    tick(&mut app, 610);
    assert_snapshot!(screen(&app, 100, 24));
}

#[test]
fn review_with_diffstat() {
    let (mut app, script) = running(100);
    let file = |path: &str, change, insertions, deletions| ChangedPath {
        path: script.text(path),
        change,
        insertions,
        deletions,
        binary: false,
    };
    app.update(Msg::EngineBatch(vec![
        script.phase(40, Phase::Running, Phase::Collecting),
        script.at(
            41,
            EventKind::Collected {
                commit: sha(),
                reference: script.text("refs/stet/fix-greeting"),
                files: vec![
                    file("src/main.rs", ChangeKind::Modified, 3, 1),
                    file("tests/greeting.rs", ChangeKind::Added, 24, 0),
                    file(".github/workflows/ci.yml", ChangeKind::Modified, 1, 1),
                ],
                insertions: 28,
                deletions: 2,
                protected: vec![script.text(".github/workflows/ci.yml")],
            },
        ),
        script.phase(42, Phase::Collecting, Phase::AwaitingApproval),
    ]));
    tick(&mut app, 50);
    assert_snapshot!(screen(&app, 100, 24));
}

#[test]
fn help_overlay() {
    let mut app = App::new(&inbox(), t0());
    app.update(Msg::ToggleHelp);
    assert_snapshot!(screen(&app, 100, 36));
}

#[test]
fn too_small() {
    let app = App::new(&inbox(), t0());
    assert_snapshot!(screen(&app, 50, 10));
    assert_eq!(screen(&app, 1, 1).trim(), "\"t\"");
}

#[test]
fn dispatch_confirmation() {
    let mut app = App::new(&inbox(), t0());
    app.set_cost_ceiling(Some(2.0));
    app.update(Msg::DispatchSelected);
    assert_snapshot!(screen(&app, 100, 24));
}

#[test]
fn older_lines_dropped_from_view() {
    let (mut app, script) = running(5);
    let lines = (0..12)
        .map(|n| script.line(4 + n, ItemKind::Output, &format!("output line {n}")))
        .collect();
    app.update(Msg::EngineBatch(lines));
    tick(&mut app, 20);
    assert_snapshot!(screen(&app, 100, 24));
}
