//! The theater in a real terminal: the built binary under tmux, driven by keys sent to the pane, its
//! screen read with `capture-pane`, against the real Docker engine. What the engine did is read from
//! the run record (`events.jsonl`, `result.json`) and the local forge's review records, so the test
//! does not depend on how the panes word things; the screen is asserted for the inbox, for surviving
//! a cancel, and for the shell coming back after `q`.
//!
//! Every wait polls for what it expects with an overall bound that fails the test with the screen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;

use stet::dispatch::event::{DispatchId, Event, EventKind};
use stet::dispatch::record::RunResult;
use stet::dispatch::state::Phase;
use stet::forge::local::ReviewRecord;

use super::headless::{Project, STET_VARIABLES};
use super::support::{docker, sandbox_image};

/// The title of the brief of a [`Project`].
const TITLE: &str = "Tidy the notes";

/// How long any one thing may take to show up.
const PATIENCE: Duration = Duration::from_secs(120);

/// How often the pane and the disk are looked at while waiting.
const POLL: Duration = Duration::from_millis(100);

/// What the theater's run left on disk, read from the project's run records.
impl Project {
    fn runs(&self) -> PathBuf {
        self.home.state().join("runs")
    }

    /// The dispatches that have a run record, in no particular order.
    fn dispatches(&self) -> Vec<DispatchId> {
        match std::fs::read_dir(self.runs()) {
            Ok(listing) => listing
                .map(|entry| {
                    let name = entry.unwrap().file_name();
                    serde_json::from_value(serde_json::Value::String(
                        name.to_str().unwrap().to_owned(),
                    ))
                    .unwrap()
                })
                .collect(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("listing {}: {error}", self.runs().display()),
        }
    }

    /// The events of `dispatch` recorded so far (a line still being written is skipped).
    fn events(&self, dispatch: DispatchId) -> Vec<Event> {
        let path = self.runs().join(dispatch.to_string()).join("events.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn result(&self, dispatch: DispatchId) -> Option<RunResult> {
        let path = self.runs().join(dispatch.to_string()).join("result.json");
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }
}

fn scenario(steps: &[&str]) -> String {
    let mut text = String::from("model = \"tui-test-model\"\n");
    for step in steps {
        text.push_str("\n[[step]]\n");
        text.push_str(step);
        text.push('\n');
    }
    text
}

/// A tmux server of the test's own (its socket in the project's home), one 200×50 session running
/// `stet` in the repository, then printing its exit status and waiting.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(project: &Project) -> Tmux {
        let tmux = Tmux {
            socket: project.home.path().join("tmux.sock"),
        };
        let home = project.home.path();
        let mut line = String::from("env");
        for variable in STET_VARIABLES {
            line.push_str(&format!(" -u {variable}"));
        }
        line.push_str(&format!(
            " XDG_STATE_HOME='{}' XDG_CONFIG_HOME='{}' '{}'; echo \"stet exited with status $?\"; exec cat",
            home.join("state").display(),
            home.join("config").display(),
            env!("CARGO_BIN_EXE_stet"),
        ));
        let started = tmux
            .command()
            .args([
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
                "-s",
                "theater",
                "-c",
            ])
            .arg(&project.repo)
            .args(["sh", "-c", &line])
            .status()
            .unwrap();
        assert!(started.success(), "tmux new-session: {started}");
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"]);
        command
    }

    /// The pane's text as it is now.
    fn screen(&self) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-p", "-t", "theater"])
            .output()
            .unwrap();
        assert!(output.status.success(), "tmux capture-pane: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Sends one key (tmux's name for it: `Enter`, `y`, ...).
    fn press(&self, key: &str) {
        let sent = self
            .command()
            .args(["send-keys", "-t", "theater", key])
            .status()
            .unwrap();
        assert!(sent.success(), "tmux send-keys {key}: {sent}");
    }

    /// Polls `probe` until it answers, failing with `what` and the screen after [`PATIENCE`].
    fn until<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(answer) = probe() {
                return answer;
            }
            assert!(
                Instant::now() < deadline,
                "waited {PATIENCE:?} for {what}; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until the screen satisfies `test`; returns it.
    fn until_screen(&self, what: &str, test: impl Fn(&str) -> bool) -> String {
        self.until(what, || {
            let screen = self.screen();
            test(&screen).then_some(screen)
        })
    }
}

impl Drop for Tmux {
    /// Ends the test's tmux server; a stet still running gets SIGHUP and tears down.
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

/// Whether the screen shows the inbox. The panes are being written: today the frame says how many
/// briefs there are; the inbox pane will show the brief's title.
fn shows_inbox(screen: &str) -> bool {
    screen.contains(TITLE) || screen.contains("1 brief")
}

fn phases(events: &[Event]) -> Vec<Phase> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Phase { to, .. } => Some(*to),
            _ => None,
        })
        .collect()
}

fn transcript_has(events: &[Event], text: &str) -> bool {
    events.iter().any(|event| match &event.kind {
        EventKind::Transcript(item) => item.text.as_str().contains(text),
        _ => false,
    })
}

fn torn_down(events: &[Event]) -> bool {
    events
        .iter()
        .any(|event| matches!(event.kind, EventKind::TornDown { .. }))
}

/// The containers, running or not, labelled as `dispatch`'s sandbox.
fn containers_of(dispatch: DispatchId) -> Vec<String> {
    let filters = HashMap::from([(
        "label",
        vec![format!("{}={dispatch}", stet::runtime::DISPATCH_LABEL)],
    )]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    runtime().block_on(async {
        docker()
            .list_containers(Some(options))
            .await
            .unwrap()
            .into_iter()
            .flat_map(|summary| summary.names.unwrap_or_default())
            .collect()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_theater_dispatches_cancels_reviews_opens_the_pull_request_and_quits() {
    runtime().block_on(async {
        let _ = docker();
        sandbox_image().await;
    });
    let project = Project::new(&scenario(&[
        "say = \"I will keep at it.\"",
        "forever = true",
    ]));
    let tmux = Tmux::start(&project);
    let started = Instant::now();
    tmux.until_screen("the inbox", shows_inbox);
    let opened = started.elapsed();

    // Enter asks to confirm the dispatch; y confirms.
    tmux.press("Enter");
    tmux.press("y");
    let first = tmux.until("the first dispatch's run record", || {
        project.dispatches().first().copied()
    });
    let running = tmux.until("the agent running and talking", || {
        let events = project.events(first);
        (phases(&events).contains(&Phase::Running) && transcript_has(&events, "I will keep at it"))
            .then_some(events)
    });
    assert_eq!(
        phases(&running)[..3],
        [Phase::Preflight, Phase::Provisioning, Phase::Running],
        "{running:#?}"
    );
    assert!(!containers_of(first).is_empty(), "the sandbox is running");

    // c asks to confirm the cancel; y confirms.
    tmux.press("c");
    tmux.press("y");
    let cancelled = tmux.until("the cancelled result", || project.result(first));
    assert_eq!(cancelled.outcome, Phase::Cancelled, "{cancelled:#?}");
    assert!(
        torn_down(&project.events(first)),
        "the sandbox was torn down"
    );
    assert_eq!(containers_of(first), Vec::<String>::new());
    assert!(
        shows_inbox(&tmux.screen()),
        "the theater is still up:\n{}",
        tmux.screen()
    );

    // A second run that finishes waits for review; p pushes and opens the pull request.
    project.set_scenario(&scenario(&[
        "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\nthree\\nfour\\n\" }",
        "finish = \"Added four.\"",
    ]));
    tmux.press("Enter");
    tmux.press("y");
    let second = tmux.until("the second dispatch's run record", || {
        project.dispatches().into_iter().find(|id| *id != first)
    });
    tmux.until("the review gate", || {
        phases(&project.events(second))
            .contains(&Phase::AwaitingApproval)
            .then_some(())
    });
    tmux.press("p");
    let review_file = project.home.state().join("reviews").join("1.json");
    let review: ReviewRecord = tmux.until("the local forge's pull request", || {
        let text = std::fs::read_to_string(&review_file).ok()?;
        serde_json::from_str(&text).ok()
    });
    assert_eq!(review.number, 1);
    assert_eq!(review.base, "main");
    let done = tmux.until("the reviewed result", || project.result(second));
    assert_eq!(done.outcome, Phase::Done, "{done:#?}");
    let second_phases = phases(&project.events(second));
    assert!(
        second_phases.ends_with(&[
            Phase::AwaitingApproval,
            Phase::Pushing,
            Phase::OpeningPr,
            Phase::Done
        ]),
        "{second_phases:?}"
    );
    assert_eq!(containers_of(second), Vec::<String>::new());

    // q quits (nothing is running) and the terminal is given back.
    tmux.press("q");
    let after = tmux.until_screen("stet to exit", |screen| screen.contains("stet exited"));
    assert!(
        after.contains("stet exited with status 0"),
        "the exit status:\n{after}"
    );
    assert!(
        !shows_inbox(&after),
        "the alternate screen is gone:\n{after}"
    );
    eprintln!(
        "tui: inbox shown after {opened:?}, whole run {:?}",
        started.elapsed()
    );
}
