//! The status line and the badges as functions of the current state, over random sequences of keys
//! and engine events: whatever happened before, the status line never says a brief is being
//! dispatched once its dispatch is heard of, never says a finished dispatch is being cancelled,
//! never shows where a search of another dispatch's transcript landed, never keeps "press Ctrl-C
//! again" past the next key; a discarded result is never badged `[cancelled]`, and the timeline
//! never says a finished dispatch is still tearing down.

use proptest::prelude::*;

use super::tests::{Script, brief_entry};
use super::{App, Badge, Msg, Request};
use crate::panes::timeline;
use crate::theme::Theme;
use stet_protocol::event::{DispatchId, Event, EventKind, TeardownStepReport};
use stet_protocol::state::Phase;

const BRIEFS: [&str; 2] = ["alpha", "beta"];

/// How a scripted dispatch ends.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Pushed,
    Discarded,
    Cancelled,
    FailedInPreflight,
}

/// One step of the random sequence.
#[derive(Debug, Clone)]
enum Op {
    Key(Msg),
    Search(&'static str),
    /// The next event of scripted dispatch `0` (two per brief).
    Advance(usize),
    /// The engine refuses the last request made.
    Refuse,
}

fn key() -> impl Strategy<Value = Msg> {
    prop_oneof![
        Just(Msg::DispatchSelected),
        Just(Msg::CancelSelected),
        Just(Msg::ConfirmYes),
        Just(Msg::ConfirmNo),
        Just(Msg::Approve),
        Just(Msg::Discard),
        Just(Msg::SelectNext),
        Just(Msg::SelectPrevious),
        Just(Msg::SearchNext),
        Just(Msg::Interrupt),
        Just(Msg::Back),
        Just(Msg::OpenReview),
        Just(Msg::FocusNext),
        Just(Msg::ScrollUp(1)),
        Just(Msg::FollowTail),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => key().prop_map(Op::Key),
        1 => prop_oneof![Just("line"), Just("zzz")].prop_map(Op::Search),
        5 => (0..BRIEFS.len() * 2).prop_map(Op::Advance),
        1 => Just(Op::Refuse),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        Just(Ending::Pushed),
        Just(Ending::Discarded),
        Just(Ending::Cancelled),
        Just(Ending::FailedInPreflight),
    ]
}

/// The whole life of one dispatch as the engine tells it.
fn life(script: &Script, ending: Ending) -> Vec<Event> {
    let phase = |s: i64, from, to| script.phase(s, from, to);
    let mut events = vec![
        script.dispatched(0),
        phase(1, Phase::Queued, Phase::Preflight),
    ];
    let torn_down = script.at(
        30,
        EventKind::TornDown {
            steps: vec![TeardownStepReport {
                resource: script.text("container"),
                failure: None,
            }],
            millis: 5,
        },
    );
    if let Ending::FailedInPreflight = ending {
        events.push(phase(2, Phase::Preflight, Phase::Failed));
        events.push(script.finished(3, Phase::Failed));
        return events;
    }
    events.extend([
        phase(2, Phase::Preflight, Phase::Provisioning),
        phase(3, Phase::Provisioning, Phase::Running),
        script.line(
            4,
            stet_protocol::event::ItemKind::Output,
            "a line of output",
        ),
    ]);
    match ending {
        Ending::Cancelled => {
            events.push(phase(5, Phase::Running, Phase::Cancelled));
            events.push(torn_down);
            events.push(script.finished(31, Phase::Cancelled));
        }
        Ending::Discarded | Ending::Pushed => {
            events.extend(script.to_review(Vec::new(), &[]));
            if let Ending::Discarded = ending {
                events.push(phase(43, Phase::AwaitingApproval, Phase::Cancelled));
                events.push(torn_down);
                events.push(script.finished(44, Phase::Cancelled));
            } else {
                events.push(phase(43, Phase::AwaitingApproval, Phase::Pushing));
                events.push(phase(44, Phase::Pushing, Phase::OpeningPr));
                events.push(phase(45, Phase::OpeningPr, Phase::Done));
                events.push(torn_down);
                events.push(script.finished(46, Phase::Done));
            }
        }
        Ending::FailedInPreflight => unreachable!("handled above"),
    }
    events
}

/// What the timeline says of `view`, as plain text.
fn timeline_text(app: &App, id: DispatchId) -> String {
    let view = app.dispatch(id).unwrap();
    timeline::lines(view, app.now(), 200, Theme::Plain)
        .iter()
        .map(|line| line.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn status_text_follows_the_state(
        endings in proptest::collection::vec(ending(), BRIEFS.len() * 2),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let entries: Vec<_> = BRIEFS.iter().map(|id| brief_entry(id)).collect();
        let mut app = App::new(&entries, super::tests::t0());
        let scripts: Vec<Script> = (0..BRIEFS.len() * 2).map(|n| Script::new(BRIEFS[n % 2])).collect();
        let lives: Vec<Vec<Event>> = scripts.iter().zip(&endings).map(|(s, e)| life(s, *e)).collect();
        let mut next = vec![0; scripts.len()];
        let mut last_request: Option<Request> = None;
        // The dispatch whose transcript the last search walked.
        let mut searched: Option<DispatchId> = None;
        // The last key the person pressed was Ctrl-C (engine events do not count as keys).
        let mut last_key_was_interrupt = false;
        for op in ops {
            let advanced = matches!(op, Op::Advance(_));
            match op {
                Op::Key(Msg::Interrupt) => last_key_was_interrupt = !last_key_was_interrupt,
                Op::Key(_) | Op::Search(_) => last_key_was_interrupt = false,
                Op::Advance(_) | Op::Refuse => {}
            }
            let request = match op {
                Op::Key(msg) => {
                    if matches!(msg, Msg::SearchNext) {
                        searched = app.selected_dispatch().map(|view| view.id);
                    }
                    app.update(msg)
                }
                Op::Search(query) => {
                    searched = app.selected_dispatch().map(|view| view.id);
                    app.update(Msg::SearchStart);
                    for c in query.chars() {
                        app.update(Msg::SearchKey(crossterm::event::KeyEvent::from(
                            crossterm::event::KeyCode::Char(c),
                        )));
                    }
                    app.update(Msg::SearchCommit)
                }
                Op::Advance(n) => {
                    if let Some(event) = lives[n].get(next[n]) {
                        next[n] += 1;
                        app.update(Msg::Engine(event.clone()));
                    }
                    None
                }
                Op::Refuse => match last_request.take() {
                    Some(request) => app.update(Msg::RequestFailed {
                        request,
                        reason: "refused".to_owned(),
                    }),
                    None => None,
                },
            };
            if request.is_some() {
                last_request = request;
            }

            let status = app.status().unwrap_or_default();
            for brief in BRIEFS {
                if status.contains(&format!("dispatching {brief}")) {
                    prop_assert_eq!(app.badge(brief), Badge::Queued, "{}", status);
                }
                if status.contains(&format!("cancelling {brief}")) {
                    let running = app.dispatches().any(|view| view.brief == brief && view.in_flight());
                    prop_assert!(running, "{}", status);
                }
            }
            if status.contains("n older · N newer") || status.starts_with("no match for") {
                prop_assert!(searched.is_some(), "{}", status);
                prop_assert_eq!(app.selected_dispatch().map(|view| view.id), searched, "{}", status);
            }
            if status.starts_with("press Ctrl-C again") {
                prop_assert!(last_key_was_interrupt, "{}", status);
            }
            for script in scripts.iter().filter(|_| advanced) {
                let Some(view) = app.dispatch(script.id()) else { continue };
                if view.left_review() {
                    prop_assert_ne!(Badge::of(view), Badge::Cancelled);
                }
                let said = timeline_text(&app, script.id());
                if !view.in_flight() {
                    prop_assert!(!said.contains("in progress"), "{}", said);
                }
                if !view.provisioned() && view.phase.is_terminal() {
                    prop_assert!(said.contains("nothing to tear down"), "{}", said);
                }
            }
        }
    }
}
