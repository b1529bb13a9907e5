//! Snapshots of whole frames in each main state, built by feeding real engine events (through a
//! real sanitizer) to the app, so a visible change to any pane shows up in review. They are kept in
//! `tests/snapshots/` with the rest of the suite's.

use chrono::TimeDelta;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::app::tests::{Script, brief_entry, broken_entry, dispatch_selected, t0};
use crate::app::{App, Configuration, Msg};
use crate::panes::assert_screen;
use crate::theme::Theme;
use crate::view::render;
use stet_protocol::event::ChangeKind;
use stet_protocol::event::{EventKind, ItemKind, TeardownStepReport};
use stet_protocol::inbox::InboxEntry;
use stet_protocol::state::Phase;

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

fn transcript(script: &Script) -> Vec<stet_protocol::event::Event> {
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
    assert_screen!(screen(&app, 100, 20));
}

#[test]
fn the_status_line_names_the_repository_file_and_its_trust() {
    let mut app = App::new(&inbox(), t0());
    app.set_configuration(Some(Configuration {
        text: "stet.toml: not trusted (project settings only)".to_owned(),
        trusted: false,
    }));
    assert_screen!(screen(&app, 100, 20));
    app.set_configuration(Some(Configuration {
        text: "stet.toml: trusted (sha256 0123456789ab)".to_owned(),
        trusted: true,
    }));
    let trusted = screen(&app, 100, 20);
    let status = trusted.lines().nth(18).unwrap();
    assert!(status.contains("0 running"), "{status}");
    assert!(status.contains("stet.toml: trusted (sha256 "), "{status}");
}

#[test]
fn running_with_transcript() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(transcript(&script)));
    tick(&mut app, 45);
    assert_screen!(screen(&app, 100, 30));
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
    assert_screen!(shown);
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
    assert_screen!(screen(&app, 100, 24));
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
    assert_screen!(screen(&app, 100, 24));
}

#[test]
fn review_with_diffstat() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(script.to_review(
        vec![
            script.changed("src/main.rs", ChangeKind::Modified, 3, 1),
            script.changed("tests/greeting.rs", ChangeKind::Added, 24, 0),
            script.changed(".github/workflows/ci.yml", ChangeKind::Modified, 1, 1),
        ],
        &[(".github/workflows/ci.yml", "CI: .github/**")],
    )));
    tick(&mut app, 50);
    assert_screen!(screen(&app, 100, 24));
}

#[test]
fn review_holding_dangerous_paths_with_their_rules() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(script.to_review(
        vec![
            script.changed("src/main.rs", ChangeKind::Modified, 3, 1),
            script.changed("stet.toml", ChangeKind::Modified, 2, 0),
            script.changed(".github/actions/a/action.yml", ChangeKind::Added, 9, 0),
            script.changed("bin/run", ChangeKind::Added, 2, 0),
            script.changed("ci", ChangeKind::Added, 1, 0),
        ],
        &[
            ("stet.toml", "stet's own configuration"),
            (".github/actions/a/action.yml", "CI: .github/**"),
            ("bin/run", "newly executable"),
            ("ci", "new symlink → .github, which is CI: .github/**"),
        ],
    )));
    tick(&mut app, 50);
    assert_screen!(screen(&app, 100, 24));
}

/// A result of more files and held paths than the `collected` event lists: the review counts them
/// all, and says how many it does not show.
#[test]
fn review_counts_the_files_and_held_paths_the_event_did_not_list() {
    let (mut app, script) = running(100);
    let mut events = script.to_review(
        vec![script.changed("src/main.rs", ChangeKind::Modified, 3, 1)],
        &[("stet.toml", "stet's own configuration")],
    );
    for event in &mut events {
        if let EventKind::Collected {
            files_not_listed,
            gate,
            ..
        } = &mut event.kind
        {
            *files_not_listed = 4_999;
            gate.held_not_listed = 250;
        }
    }
    app.update(Msg::EngineBatch(events));
    tick(&mut app, 50);
    let shown = screen(&app, 100, 24);
    for expected in [
        "5000 file(s) changed",
        "… and 4999 more file(s)",
        "251 path(s) held",
        "… and 250 more",
    ] {
        assert!(shown.contains(expected), "{expected:?} not in:\n{shown}");
    }
}

#[test]
fn review_holding_a_secret_says_so_above_the_masked_diff() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(script.to_review_with_secrets(
        vec![script.changed("config/app.env", ChangeKind::Added, 2, 0)],
        &[],
        &[("config/app.env", 2, "github-token")],
    )));
    let token = format!("ghp_{}", "a1B2c3D4e5".repeat(4).get(..36).unwrap());
    let patch = script.text(&format!(
        "diff --git a/config/app.env b/config/app.env\nnew file mode 100644\n--- /dev/null\n+++ b/config/app.env\n@@ -0,0 +1,2 @@\n+MODE=production\n+GH_TOKEN={token}\n"
    ));
    app.update(Msg::PatchLoaded {
        dispatch: script.id(),
        patch: Ok(patch.into_string()),
    });
    tick(&mut app, 50);
    let shown = screen(&app, 100, 24);
    assert!(
        !shown.contains(&token[4..]),
        "the diff shows the secret masked"
    );
    assert!(shown.contains("[REDACTED:github-token]"));
    assert!(shown.contains("1 secret(s) in the result"));
    assert_screen!(shown);
}

#[test]
fn review_with_a_scrolled_diff() {
    let (mut app, script) = running(100);
    app.update(Msg::EngineBatch(script.to_review(
        vec![script.changed("src/main.rs", ChangeKind::Modified, 2, 1)],
        &[],
    )));
    let mut patch = String::from(
        "diff --git a/src/main.rs b/src/main.rs\nindex 1111111..2222222 100644\n--- a/src/main.rs\n+++ b/src/main.rs\n@@ -10,5 +10,6 @@ fn main() {\n",
    );
    for n in 0..30 {
        patch.push_str(&format!(" context line {n}\n"));
    }
    patch.push_str("-    println!(\"hello\");\n+    println!(\"hello, world\");\n+    // \u{1b}[2J escape kept inert\n");
    app.update(Msg::PatchLoaded {
        dispatch: script.id(),
        patch: Ok(patch),
    });
    app.update(Msg::ScrollDown(28));
    tick(&mut app, 50);
    assert_screen!(screen(&app, 100, 24));
}

#[test]
fn search_highlights_matches_and_pins_the_nearest() {
    let (mut app, script) = running(100);
    let mut lines: Vec<_> = (0..40)
        .map(|n| {
            let text = if n % 10 == 3 {
                format!("line {n}: Greeting built here")
            } else {
                format!("line {n}: nothing to see")
            };
            script.line(4 + n, ItemKind::Output, &text)
        })
        .collect();
    lines.push(script.line(50, ItemKind::Message, "done"));
    app.update(Msg::EngineBatch(lines));
    app.update(Msg::SearchStart);
    for c in "greeting".chars() {
        app.update(Msg::SearchKey(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char(c),
        )));
    }
    app.update(Msg::SearchCommit);
    app.update(Msg::SearchNext);
    tick(&mut app, 60);
    assert_screen!(screen(&app, 100, 24));
}

#[test]
fn the_search_prompt_in_the_footer() {
    let (mut app, _script) = running(100);
    app.update(Msg::SearchStart);
    for c in "panic".chars() {
        app.update(Msg::SearchKey(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char(c),
        )));
    }
    let shown = screen(&app, 100, 20);
    let footer = shown.lines().last().unwrap();
    assert!(footer.starts_with("\"/panic "), "{footer}");
}

#[test]
fn help_overlay() {
    let mut app = App::new(&inbox(), t0());
    app.update(Msg::ToggleHelp);
    assert_screen!(screen(&app, 100, 48));
}

#[test]
fn too_small() {
    let app = App::new(&inbox(), t0());
    assert_screen!(screen(&app, 50, 10));
    assert_eq!(screen(&app, 1, 1).trim(), "\"t\"");
}

#[test]
fn dispatch_confirmation() {
    let mut app = App::new(&inbox(), t0());
    app.set_cost_ceiling(Some(2.0));
    app.update(Msg::DispatchSelected);
    assert_screen!(screen(&app, 100, 24));
}

#[test]
fn older_lines_dropped_from_view() {
    let (mut app, script) = running(5);
    let lines = (0..12)
        .map(|n| script.line(4 + n, ItemKind::Output, &format!("output line {n}")))
        .collect();
    app.update(Msg::EngineBatch(lines));
    tick(&mut app, 20);
    assert_screen!(screen(&app, 100, 24));
}
