//! The theater laid out for the smallest terminal it promises (80×24) and a roomy one (120×40): each
//! main state is drawn at both sizes and kept as a snapshot, and what must never be cut is checked
//! by name: the help key in the footer, the timeline's durations, the meter's figures, a failure's
//! whole reason.

use chrono::TimeDelta;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::app::salvaged::tests::salvaged_result;
use crate::app::tests::{Script, brief_entry, broken_entry, dispatch_selected, t0};
use crate::app::{App, Msg};
use crate::panes::assert_screen;
use crate::view::{pages, render};
use stet_protocol::event::{ChangeKind, EventKind, ItemKind};
use stet_protocol::state::Phase;

/// The two sizes every state is drawn at.
const SIZES: [(u16, u16); 2] = [(80, 24), (120, 40)];

/// A frame of `app` at `width` × `height`, the app told what it showed (as the event loop does).
fn screen(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut shown = None;
    terminal
        .draw(|frame| {
            render(frame, app);
            shown = Some(pages(app, frame.area()));
        })
        .unwrap();
    app.set_pages(shown.unwrap());
    terminal.backend().to_string()
}

/// Draws `app` at both sizes, keeps each as snapshot `<name>_<w>x<h>` and returns them.
fn at_both_sizes(name: &str, app: &mut App) -> Vec<String> {
    SIZES
        .iter()
        .map(|&(width, height)| {
            let shown = screen(app, width, height);
            assert_screen!(format!("{name}_{width}x{height}"), shown.clone());
            shown
        })
        .collect()
}

fn footer(shown: &str) -> &str {
    shown.lines().last().unwrap()
}

fn inbox_app() -> App {
    App::new(
        &[
            brief_entry("fix-greeting"),
            brief_entry("test-word-count"),
            broken_entry(),
        ],
        t0(),
    )
}

/// `fix-greeting` dispatched and running, with a transcript and two usage reports.
fn running() -> (App, Script) {
    let mut app = inbox_app();
    app.set_cost_ceiling(Some(0.05));
    let script = Script::fixed("fix-greeting", 1);
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    let mut events: Vec<_> = (0..30)
        .map(|n| script.line(4 + n, ItemKind::Output, &format!("output line {n}")))
        .collect();
    events.push(script.usage(40, 90_000, 15_000, 0.02, 0.02));
    events.push(script.usage(70, 120_000, 25_000, 0.025, 0.045));
    app.update(Msg::EngineBatch(events));
    app.update(Msg::Tick(t0() + TimeDelta::seconds(3 + 725)));
    (app, script)
}

#[test]
fn the_inbox_keeps_the_help_key_in_the_footer() {
    let mut app = inbox_app();
    for shown in at_both_sizes("inbox", &mut app) {
        assert!(footer(&shown).contains("? help"), "{shown}");
        assert!(footer(&shown).contains("Enter dispatch"), "{shown}");
    }
}

#[test]
fn the_empty_inbox_names_the_directory_and_the_key() {
    let mut app = App::new(&[], t0());
    for shown in at_both_sizes("empty_inbox", &mut app) {
        assert!(shown.contains(".stet/briefs/"), "{shown}");
        assert!(shown.contains("n writes a new brief"), "{shown}");
    }
}

#[test]
fn a_running_dispatch_shows_its_durations_and_figures_whole() {
    let (mut app, _script) = running();
    for shown in at_both_sizes("running", &mut app) {
        for whole in [
            "12m05s…",
            "$0.045 / $0.050 (90%)",
            "210,000",
            "40,000",
            "? help",
        ] {
            assert!(shown.contains(whole), "{whole:?} cut in:\n{shown}");
        }
    }
}

#[test]
fn the_review_gate_fits_and_pages_by_the_height_of_its_diff() {
    let (mut app, script) = running();
    app.update(Msg::EngineBatch(script.to_review(
        vec![script.changed("src/main.rs", ChangeKind::Modified, 60, 1)],
        &[],
    )));
    let mut patch = String::from(
        "diff --git a/src/main.rs b/src/main.rs\n--- a/src/main.rs\n+++ b/src/main.rs\n@@ -1,1 +1,60 @@\n",
    );
    for n in 1..=60 {
        patch.push_str(&format!("+line {n}\n"));
    }
    app.update(Msg::PatchLoaded {
        dispatch: script.id(),
        patch: Ok(patch),
    });
    let shown = at_both_sizes("review", &mut app);
    assert!(footer(&shown[1]).contains("? help"), "{}", shown[1]);
    // At 120×40 (the last size drawn) a page is the diff's height less one line of overlap.
    let rows = crate::app::Pages::page(app_pages_diff(&mut app));
    app.update(Msg::PageDown);
    assert_eq!(app.review_scroll(), rows);
    app.update(Msg::FollowTail);
    let last = screen(&mut app, 120, 40);
    assert!(last.contains("+line 60"), "G shows the last line:\n{last}");
    assert!(last.contains("of 64"), "{last}");
    app.update(Msg::ScrollTop);
    assert_eq!(app.review_scroll(), 0);
    let first = screen(&mut app, 80, 24);
    assert!(first.contains("diff lines 1–"), "{first}");
}

/// The diff rows the last frame (120×40) showed.
fn app_pages_diff(app: &mut App) -> usize {
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let mut rows = 0;
    terminal
        .draw(|frame| rows = pages(app, frame.area()).diff)
        .unwrap();
    rows
}

#[test]
fn the_help_overlay_scrolls_where_it_does_not_fit() {
    let mut app = inbox_app();
    app.update(Msg::ToggleHelp);
    let shown = at_both_sizes("help", &mut app);
    assert!(shown[0].contains("more line(s) below"), "{}", shown[0]);
    assert!(!shown[1].contains("more line(s) below"), "{}", shown[1]);
    screen(&mut app, 80, 24);
    app.update(Msg::PageDown);
    app.update(Msg::PageDown);
    app.update(Msg::PageDown);
    let scrolled = screen(&mut app, 80, 24);
    assert_screen!("help_scrolled_80x24", scrolled.clone());
    assert!(scrolled.contains("k/↑ scrolls back"), "{scrolled}");
    assert!(scrolled.contains("close help"), "{scrolled}");
}

#[test]
fn a_preflight_failure_shows_its_whole_reason_and_nothing_to_tear_down() {
    let mut app = inbox_app();
    let script = Script::fixed("fix-greeting", 2);
    dispatch_selected(&mut app);
    let reason = "preflight: the harness openhands needs an image: set dispatch.image in \
                  ~/.config/stet/config.toml (a machine setting) or run `stet image build-local`";
    app.update(Msg::EngineBatch(vec![
        script.dispatched(0),
        script.phase(1, Phase::Queued, Phase::Preflight),
        script.at(
            2,
            EventKind::Phase {
                from: Phase::Preflight,
                to: Phase::Failed,
                reason: Some(script.text(reason)),
            },
        ),
        script.at(
            2,
            EventKind::Finished {
                outcome: Phase::Failed,
                exit_code: 1,
                reason: Some(script.text(reason)),
            },
        ),
    ]));
    for shown in at_both_sizes("preflight_failed", &mut app) {
        // The timeline's column: the second run of text between borders on each row (after the
        // quote that opens it).
        let flat: String = shown
            .lines()
            .flat_map(|line| line.split(['│', '┃']).filter(|run| !run.is_empty()).nth(2))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(flat.contains("stet image build-local`"), "{shown}");
        assert!(flat.contains("(a machine setting) or run"), "{shown}");
        assert!(flat.contains("nothing to tear down"), "{shown}");
        assert!(!shown.contains("in progress"), "{shown}");
    }
}

#[test]
fn the_push_confirmation_names_what_goes_out_and_fits() {
    let (mut app, script) = running();
    app.update(Msg::EngineBatch(script.to_review_with_secrets(
        vec![script.changed("config/app.env", ChangeKind::Added, 2, 0)],
        &[("config/app.env", "secrets: *.env")],
        &[("config/app.env", 2, "github-token")],
    )));
    app.update(Msg::Approve);
    for shown in at_both_sizes("push_confirmation", &mut app) {
        for said in [
            "Push fix-greeting?",
            "stet/fix-greeting",
            "1 file(s), +2 −0",
            "1 secret(s) go out in clear",
            "1 path(s) held for your approval",
            "This cannot be undone.",
            "y/Enter yes",
        ] {
            assert!(shown.contains(said), "{said:?} not in:\n{shown}");
        }
    }
}

#[test]
fn a_salvaged_result_shows_as_salvaged_with_its_diff_and_is_never_pushed() {
    let mut app = inbox_app();
    let result = salvaged_result(40);
    app.set_salvaged([result.clone()]);
    for _ in 0..3 {
        app.update(Msg::SelectNext);
    }
    assert_eq!(app.selected_salvaged(), Some(&result));
    for shown in at_both_sizes("salvaged", &mut app) {
        for said in [
            "[salvaged] Greet",
            "salvaged, incomplete, not pushed",
            "kept at",
            // The reference whole, however narrow: wrapped, never cut.
            "refs/stet/stet-dispatch-00000000-0000-4000-8000-",
            "0000000029",
            "held for review:",
            ".github/workflows/ci.yml",
            "left out by the import:",
            "+salvaged line 0",
            "of 44 · PgDn/PgUp · End",
            "? help",
        ] {
            assert!(shown.contains(said), "{said:?} not in:\n{shown}");
        }
    }
    // The keys the diff's last line names move it while the inbox keeps j/k for its rows: at 80×24
    // the pane shows 8 of the 44 diff lines, a page is 7 of them.
    screen(&mut app, 80, 24);
    for (code, first) in [
        (KeyCode::PageDown, 7),
        (KeyCode::End, 36),
        (KeyCode::PageUp, 29),
    ] {
        let key = KeyEvent::new(code, KeyModifiers::NONE);
        let msg = crate::keymap::message_for(key, &app).unwrap();
        app.update(msg);
        assert_eq!(app.review_scroll(), first, "{code:?}");
    }
    let moved = screen(&mut app, 80, 24);
    assert!(moved.contains("diff lines 30–37 of 44"), "{moved}");
    // `p` asks no question and says why: the screen shows no push confirmation.
    app.update(Msg::Approve);
    let after = screen(&mut app, 80, 24);
    assert!(!after.contains("Push "), "{after}");
    assert!(
        after.contains("nothing to push: a salvaged result"),
        "{after}"
    );
}
