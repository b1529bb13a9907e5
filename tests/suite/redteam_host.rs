//! Red team of issue 27 parts 2 and 3 (stet's own memory is bounded whatever the result holds; work
//! the user asked to stop, stops), written from the README, docs/security.md and the code: a hostile
//! repository and a hostile agent stay inside every documented limit (`[base]`, `[import]`, the
//! protected-rule limits) and try to make the built stet's own process allocate far more than the
//! stated budgets, or keep a core busy after a cancel. Each attack runs the real binary in a real
//! headless dispatch; peak RSS comes from `/usr/bin/time -f %M`, CPU time from `/proc/<pid>/stat`.

use std::path::Path;
use std::process::{Command, Stdio};

use stet_engine::git::changes::MAX_LINK_BYTES;
use stet_protocol::event::EventKind;

use super::headless::{Finished, Home, Project, docker_ready, run, scenario};
use super::support::git;

/// The figure docs/security.md states: stet's peak above the same dispatch of a trivial result.
const PEAK_ABOVE_TRIVIAL_BYTES: u64 = 40 * 1024 * 1024;

/// The CPU time a hostile result may cost stet above a trivial dispatch.
const CPU_ABOVE_TRIVIAL_SECONDS: f64 = 30.0;

/// Links the hostile base holds.
const LINKS: usize = 20_000;

/// Components of each link's target: `x/x/…/x`, 3,999 bytes, under Linux's 4,095.
const LINK_COMPONENTS: usize = 2_000;

/// The trivial agent: one small note, then a finish.
fn one_note() -> String {
    scenario(&[
        "write = { path = \"notes/one.md\", content = \"one\\n\" }",
        "finish = \"Wrote one note.\"",
    ])
}

fn commit_and_push(repo: &Path, message: &str) {
    git(repo, &["add", "--all"]);
    git(repo, &["commit", "--quiet", "-m", message]);
    git(repo, &["push", "--quiet", "origin", "main"]);
}

/// The hostile repository's links: [`LINKS`] links under `links/`, each to a relative target of
/// [`LINK_COMPONENTS`] components (nothing is there; a link may point anywhere).
fn plant_links(repo: &Path) {
    let target = vec!["x"; LINK_COMPONENTS].join("/");
    std::fs::create_dir(repo.join("links")).unwrap();
    for link in 0..LINKS {
        std::os::unix::fs::symlink(&target, repo.join("links").join(format!("{link:05}"))).unwrap();
    }
    commit_and_push(repo, "Many links");
}

/// What one run of stet cost: its peak RSS and its CPU time (user and system), in bytes and seconds.
#[derive(Debug, Clone, Copy)]
struct Cost {
    peak: u64,
    cpu_seconds: f64,
}

/// `command` (a stet run) under `/usr/bin/time`, with what it cost.
fn costed(command: Command) -> (Finished, Cost) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M %U %S", "-o"])
        .arg(report.path())
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(Stdio::null());
    if let Some(dir) = command.get_current_dir() {
        timed.current_dir(dir);
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => timed.env(key, value),
            None => timed.env_remove(key),
        };
    }
    let finished = run(timed);
    let report = std::fs::read_to_string(report.path()).unwrap();
    let fields: Vec<f64> = report
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|field| field.parse().ok())
        .collect();
    let [kib, user, system] = fields[..] else {
        panic!("no peak RSS and CPU time in {report:?}");
    };
    let cost = Cost {
        peak: kib as u64 * 1024,
        cpu_seconds: user + system,
    };
    (finished, cost)
}

/// What a trivial dispatch costs, on a project of its own.
fn trivial_cost() -> Cost {
    let project = Project::new(&one_note());
    let (finished, cost) = costed(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    cost
}

fn report(place: &str, hostile: Cost, trivial: Cost) {
    eprintln!(
        "{place}: stet's peak RSS {} KiB and CPU {:.1} s; the trivial run's {} KiB and {:.1} s",
        hostile.peak / 1024,
        hostile.cpu_seconds,
        trivial.peak / 1024,
        trivial.cpu_seconds
    );
}

fn assert_peak_within(place: &str, hostile: Cost, trivial: Cost) {
    assert!(
        hostile.peak <= trivial.peak + PEAK_ABOVE_TRIVIAL_BYTES,
        "{place}: stet's peak RSS is {} bytes, {} above a trivial dispatch's {} (the bound is {PEAK_ABOVE_TRIVIAL_BYTES})",
        hostile.peak,
        hostile.peak.saturating_sub(trivial.peak),
        trivial.peak
    );
}

fn assert_cpu_within(place: &str, hostile: Cost, trivial: Cost) {
    assert!(
        hostile.cpu_seconds <= trivial.cpu_seconds + CPU_ABOVE_TRIVIAL_SECONDS,
        "{place}: stet used {:.1} s of CPU, against {:.1} s for a trivial dispatch (the bound is {CPU_ABOVE_TRIVIAL_SECONDS} s more)",
        hostile.cpu_seconds,
        trivial.cpu_seconds
    );
}

/// The gate's verdict on `path` in the `collected` event: the rules it is held under.
fn held_rules(finished: &Finished, path: &str) -> Vec<String> {
    finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Collected { gate, .. } => Some(
                gate.held
                    .iter()
                    .filter(|held| held.path.as_str() == path)
                    .map(|held| held.rule.as_str().to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no collected event: {}", finished.stderr))
}

/// Attack: a repository of [`LINKS`] links with 4 KB targets (80 MB of targets, far inside
/// `[base]`), an agent that writes one note. The gate reads every link of the result's tree to
/// resolve paths through them. Before: it held every link three times over (some 150 MiB above a
/// trivial dispatch) and resolved each target component by component, joining the whole prefix
/// again at each one, minutes of a core that neither a cancel nor the timeout reached. Now: the
/// links are read within `MAX_LINK_BYTES` (past it every changed path is held, unchecked through
/// links, and says so), resolved in time linear in their components, and the reading asks the stop.
#[test]
fn a_base_of_many_long_links_costs_stet_neither_memory_nor_minutes_of_cpu() {
    docker_ready();
    let project = Project::new(&one_note());
    plant_links(&project.repo);
    let (finished, hostile) = costed(project.headless(&["--timeout", "30m"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let trivial = trivial_cost();
    report("many long links", hostile, trivial);
    assert_peak_within("many long links", hostile, trivial);
    assert_cpu_within("many long links", hostile, trivial);
    let rules = held_rules(&finished, "notes/one.md");
    assert!(
        rules
            .iter()
            .any(|rule| rule.contains(&format!("more than {MAX_LINK_BYTES} bytes"))),
        "the note is held, since the gate could not read every link: {rules:?}"
    );
}

/// What the OpenHands output path may cost stet above the replay of a trivial run: a few event
/// lines at their 4 MiB bound, each converted from invalid UTF-8 (three bytes for one) and parsed,
/// one at a time.
const OPENHANDS_ABOVE_TRIVIAL_BYTES: u64 = 96 * 1024 * 1024;

/// A hostile OpenHands stdout: event lines at the 4 MiB bound made of invalid UTF-8, one at the
/// bound on values, a chatty agent's 300 messages of 60 KiB, a 64 MiB line that starts like an
/// event and escape sequences on a long line.
fn hostile_openhands_capture() -> Vec<u8> {
    use stet_engine::harness::openhands::{MAX_EVENT_BYTES, MAX_EVENT_VALUES};
    let mut capture = Vec::new();
    let head: &[u8] = br#"{"kind": "MessageEvent", "source": "agent", "llm_message": {"role": "assistant", "content": [{"type": "text", "text": ""#;
    let tail: &[u8] = b"\"}]}}\n";
    for _ in 0..4 {
        capture.extend_from_slice(head);
        capture.extend(std::iter::repeat_n(
            0xffu8,
            MAX_EVENT_BYTES - head.len() - tail.len() - 16,
        ));
        capture.extend_from_slice(tail);
    }
    let values = vec![r#"{"a":{}}"#; MAX_EVENT_VALUES / 3 - 100].join(",");
    capture.extend_from_slice(format!("{{\"kind\": \"X\", \"v\": [{values}]}}\n").as_bytes());
    let words = "word ".repeat(60 * 1024 / 5);
    for _ in 0..300 {
        let event = serde_json::json!({
            "kind": "MessageEvent",
            "source": "agent",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": words}]},
        });
        capture.extend_from_slice(format!("{event}\n").as_bytes());
    }
    capture.extend_from_slice(br#"{"kind": "MessageEvent", "text": ""#);
    capture.extend(std::iter::repeat_n(b'a', 64 * 1024 * 1024));
    capture.extend_from_slice(b"\"}\n");
    capture.extend_from_slice(head);
    for _ in 0..200_000 {
        capture.extend_from_slice(br"\u001b[31m\u202e");
    }
    capture.extend_from_slice(tail);
    capture
}

/// `usage_to_metrics` entries up to the 16 MiB bound on state files, each naming another model.
fn hostile_state_file(outputs: &Path) {
    let conversation = outputs.join("conversations").join("c1");
    std::fs::create_dir_all(&conversation).unwrap();
    let mut state = String::from(r#"{"stats": {"usage_to_metrics": {"#);
    let mut entry = 0;
    while state.len() < 16 * 1024 * 1024 - 256 {
        if entry > 0 {
            state.push(',');
        }
        state.push_str(&format!(
            r#""u{entry}": {{"model_name": "m{entry}", "accumulated_cost": 0.0, "accumulated_token_usage": {{"prompt_tokens": 1}}}}"#
        ));
        entry += 1;
    }
    state.push_str("}}}");
    std::fs::write(conversation.join("base_state.json"), state).unwrap();
}

/// Attack: the OpenHands parser path of the built binary (`stet transcript --harness openhands`,
/// which frames, parses and sanitizes a capture exactly as a live dispatch does, and reads the
/// usage from the outputs directory) fed what a hostile agent can make the CLI print and leave:
/// 400 MB of output and a 16 MiB state file. stet's peak stays within
/// [`OPENHANDS_ABOVE_TRIVIAL_BYTES`] of the replay of a real run's capture; the oversized line is
/// reported unread and the usage is read.
#[test]
fn a_hostile_openhands_output_costs_stet_a_bounded_few_event_lines() {
    let home = Home::new();
    let capture = home.path().join("capture.stdout");
    std::fs::write(&capture, hostile_openhands_capture()).unwrap();
    let outputs = home.path().join("outputs");
    hostile_state_file(&outputs);
    let mut hostile = home.stet();
    hostile
        .args(["transcript", "--harness", "openhands", "--outputs"])
        .arg(&outputs)
        .arg(&capture);
    let (finished, hostile) = costed(hostile);
    let mut trivial = home.stet();
    trivial
        .args(["transcript", "--harness", "openhands"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/openhands-1.16/run-finish.stdout"
        ));
    let (trivial_run, trivial) = costed(trivial);
    assert_eq!(trivial_run.code(), Some(0), "{trivial_run:#?}");
    report("hostile OpenHands output", hostile, trivial);
    assert!(
        hostile.peak <= trivial.peak + OPENHANDS_ABOVE_TRIVIAL_BYTES,
        "stet's peak RSS replaying the hostile output is {} bytes, {} above the trivial replay's",
        hostile.peak,
        hostile.peak.saturating_sub(trivial.peak)
    );
    let texts: Vec<&str> = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Transcript(item) => Some(item.text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        texts
            .iter()
            .any(|text| text.contains("was not read (the limit is")),
        "the oversized line is reported unread"
    );
    assert!(
        finished
            .events
            .iter()
            .any(|event| matches!(event.kind, EventKind::Usage(_))),
        "the usage is read from the state file"
    );
}
