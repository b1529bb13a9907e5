//! Costly but legal project settings, from the attacker's side (issue 27, parts 3 and 5): a
//! repository's `stet.toml` adds the costliest protected-path rules its limits allow, and the agent
//! leaves deep paths reached through many links, so the review gate has minutes of matching to do. A person who
//! cancels while it runs gets the machine back: stet's own CPU time, read from `/proc/<pid>/stat`,
//! stops growing within a second of the cancelled event, headless here and in the theater
//! (`suite::tui::cancelling_while_the_gate_matches_costly_rules_idles_the_theater`).
//!
//! The costly phase is found by its effect: once the dispatch is collecting, stet's CPU time is
//! sampled over a one-second window; that window is the yardstick the one after the cancel is held
//! to (a loaded machine slows both alike).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use stet_engine::forge::protected::{MAX_ADDED_CHARS, MAX_ADDED_RULES, MAX_PATTERN_CHARS};
use stet_protocol::event::{Event, EventKind};
use stet_protocol::state::Phase;

use super::headless::{Project, Watched, docker_ready, scenario, signal};
use super::support::git;

/// How long stet's CPU time is sampled, once while the gate works and once after the cancel.
pub(super) const WINDOW: Duration = Duration::from_secs(1);

/// How long the collecting phase may take to show its cost, and the cancel to be acknowledged.
const PATIENCE: Duration = Duration::from_secs(120);

/// How many files the agent leaves, each at the bottom of the same deep tree.
const FILES: usize = 100;

/// How many links to the top of that tree the agent leaves: the gate checks every path under each
/// name a link reaches it by (up to 32).
const LINKS: usize = 32;

/// The scripted agent's work: [`FILES`] files at the bottom of 19 directories of 200-character names
/// (paths of about 3,800 characters, under the kernel's 4,096), [`LINKS`] links to the top
/// directory, then a finish.
pub(super) fn deep_paths_scenario() -> String {
    let name = "d".repeat(200);
    let dir = vec![name.as_str(); 19].join("/");
    let mut steps: Vec<String> = (0..FILES)
        .map(|file| format!("write = {{ path = \"{dir}/f{file}\", content = \"\" }}"))
        .collect();
    steps.extend(
        (0..LINKS).map(|link| format!("symlink = {{ path = \"l{link}\", target = \"{name}\" }}")),
    );
    steps.push("finish = \"Left many deep paths.\"".to_owned());
    scenario(&steps.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The costliest rules a repository may add: as many patterns as allowed, each `**/`, runs of `*a?`
/// to its share of the size limit and a tail no name holds, then `/**`, so every name of every path
/// is tried against every rule and none matches.
pub(super) fn costly_patterns() -> Vec<String> {
    let each = (MAX_ADDED_CHARS / MAX_ADDED_RULES).min(MAX_PATTERN_CHARS);
    (0..MAX_ADDED_RULES)
        .map(|n| {
            let tail = format!("z{n:x}/**");
            let mut pattern = "**/".to_owned();
            while pattern.len() + 3 + tail.len() <= each {
                pattern.push_str("*a?");
            }
            pattern + &tail
        })
        .collect()
}

/// A [`Project`] whose agent leaves [`deep_paths_scenario`]'s paths and whose own `stet.toml`
/// (committed and pushed, untrusted) adds [`costly_patterns`].
pub(super) fn costly_project() -> Project {
    let project = Project::new(&deep_paths_scenario());
    let patterns = toml::Value::Array(
        costly_patterns()
            .into_iter()
            .map(toml::Value::String)
            .collect(),
    );
    std::fs::write(
        project.repo.join("stet.toml"),
        format!("[harness.script]\npace = 0\n\n[review]\nprotected_paths = {patterns}\n"),
    )
    .unwrap();
    commit_and_push(&project.repo);
    project
}

fn commit_and_push(repo: &Path) {
    git(
        repo,
        &["commit", "--quiet", "--all", "-m", "Review more paths"],
    );
    git(repo, &["push", "--quiet", "origin", "main"]);
}

/// The process's CPU time so far (user and system, every thread's, in clock ticks), from
/// `/proc/<pid>/stat`; `None` once it was reaped.
pub(super) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second, as `getconf CLK_TCK` says.
pub(super) fn ticks_per_second() -> u64 {
    let output = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The CPU ticks `pid` uses over [`WINDOW`] from now: the counter read, the window let pass (a
/// measurement, not a wait for anything), the counter read again.
pub(super) fn cpu_over_window(pid: u32) -> u64 {
    let before = cpu_ticks(pid).unwrap_or_else(|| panic!("stet ({pid}) is gone"));
    let started = Instant::now();
    std::thread::sleep(WINDOW);
    let elapsed = started.elapsed();
    // A process that exited in the window stays a zombie until the test reaps it: its counter holds.
    let after = cpu_ticks(pid).unwrap_or(before);
    assert!(
        elapsed < WINDOW * 3,
        "the window took {elapsed:?}: the machine is too loaded to measure"
    );
    after - before
}

/// Waits until `pid` has used a whole [`WINDOW`]'s worth of CPU time since `since` ticks: the
/// costly work is under way. `Err` with the ticks it used when it exited first; fails after
/// [`PATIENCE`].
pub(super) fn until_busy(pid: u32, since: u64, what: &str) -> Result<(), u64> {
    let deadline = Instant::now() + PATIENCE;
    let needed = ticks_per_second() * WINDOW.as_secs();
    loop {
        let used = cpu_ticks(pid).unwrap_or(since) - since;
        if used >= needed {
            return Ok(());
        }
        if !super::support::alive(pid) {
            return Err(used);
        }
        assert!(
            Instant::now() < deadline,
            "stet used {used} ticks in {PATIENCE:?} of {what}: the phase never got costly"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Holds the window after the cancel to the one before it: the work stopped, and what is left
/// (teardown, events) is a small part of what the gate was using.
pub(super) fn assert_went_idle(busy: u64, after_cancel: u64, place: &str) {
    let hz = ticks_per_second();
    eprintln!(
        "{place}: {busy} CPU ticks in the {WINDOW:?} before the cancel, {after_cancel} in the {WINDOW:?} after it (clock {hz}/s)"
    );
    assert!(
        busy * 10 >= hz * WINDOW.as_secs(),
        "{place}: before the cancel stet used only {busy} ticks (clock {hz}/s) in {WINDOW:?}; the costly phase was not running"
    );
    assert!(
        after_cancel * 3 <= busy,
        "{place}: stet used {after_cancel} CPU ticks in the {WINDOW:?} after the cancel, against {busy} in the {WINDOW:?} before it (clock {hz}/s): the work it was asked to stop goes on"
    );
}

fn is_phase(event: &Event, phase: Phase) -> bool {
    matches!(event.kind, EventKind::Phase { to, .. } if to == phase)
}

/// `stet --headless` with a repository's costliest legal rules and an agent leaving deep paths under
/// many links:
/// SIGINT while the gate matches cancels the dispatch, and stet's CPU goes idle within a second of
/// the cancelled event (before, the matching went on on its blocking thread, a core busy, until the
/// command's end gave up waiting for it).
#[test]
fn cancelling_while_the_gate_matches_costly_rules_idles_stet_headless() {
    docker_ready();
    let project = costly_project();
    let mut watched = Watched::start(project.headless(&["--timeout", "30m"]));
    let pid = watched.pid();
    watched.until("the collecting phase", |event| {
        is_phase(event, Phase::Collecting)
    });
    let collecting = cpu_ticks(pid).unwrap();
    if let Err(used) = until_busy(pid, collecting, "collecting") {
        let finished = watched.finish();
        panic!("stet ended after {used} ticks of collecting: {finished:#?}");
    }
    let busy = cpu_over_window(pid);
    assert!(signal(pid, "INT").success());
    // Idle once the dispatch has ended (its teardown, which removes the agent's deep tree, is work
    // stet was asked to do): before, the matching went on past the end.
    watched.until("the dispatch's end", |event| {
        matches!(event.kind, EventKind::Finished { .. })
    });
    let after_cancel = cpu_over_window(pid);
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(3), "{finished:#?}");
    assert_eq!(
        finished.outcome().0,
        Phase::Cancelled,
        "{:#?}",
        finished.events
    );
    assert_went_idle(busy, after_cancel, "headless");
}
