//! `stet --headless` and `stet demo --headless` from the outside: the built binary against the real
//! Docker engine, its JSON Lines on stdout, its exit codes, what it leaves on disk, in git and in
//! Docker, how it answers SIGINT and how `stet sweep` reclaims a SIGKILLed dispatch.
//!
//! Every test has its own `XDG_STATE_HOME` and `XDG_CONFIG_HOME`, and looks only at the dispatch ids
//! its own runs printed: other tests run at the same time against the same engine. Secrets are made
//! at run time; the signal tests act on the events as they are read, never on a clock.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;
use regex::Regex;

use stet_engine::credential::random_token;
use stet_engine::dispatch::journal::Resource;
use stet_engine::forge::local::ReviewRecord;
use stet_protocol::event::{DispatchId, Event, EventKind, ItemKind, Usage};
use stet_protocol::state::Phase;

use super::support::{docker, git, sandbox_image};

/// The brief every non-demo project holds.
pub(super) const BRIEF: &str = "tidy-notes";

/// The demo's first brief, the one `stet demo` dispatches by default.
const DEMO_BRIEF: &str = "fix-greeting";

/// What a GitHub classic token looks like in clear.
const GITHUB_TOKEN_SHAPE: &str = r"ghp_[A-Za-z0-9]{36}";

/// Environment variables that would change what a run does; the tests' own environment must not.
pub(super) const STET_VARIABLES: &[&str] = &[
    "STET_LOG",
    "STET_TIMEOUT_SECS",
    "STET_CONCURRENCY",
    "STET_COST_CEILING_USD",
    "STET_IMAGE",
    "STET_HARNESS",
];

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A private state and configuration home for one test.
pub(super) struct Home {
    root: tempfile::TempDir,
}

impl Home {
    pub(super) fn new() -> Home {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("config")).unwrap();
        Home { root }
    }

    pub(super) fn path(&self) -> &Path {
        self.root.path()
    }

    /// `$XDG_STATE_HOME/stet`.
    pub(super) fn state(&self) -> PathBuf {
        self.path().join("state").join("stet")
    }

    /// `$XDG_CONFIG_HOME/stet/config.toml`, the user's own configuration.
    pub(super) fn user_config(&self) -> PathBuf {
        self.path().join("config").join("stet").join("config.toml")
    }

    /// Appends `text` to the user's own configuration.
    pub(super) fn add_user_config(&self, text: &str) {
        let file = self.user_config();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut config = std::fs::read_to_string(&file).unwrap_or_default();
        config.push_str(text);
        std::fs::write(file, config).unwrap();
    }

    /// The stet binary with this home's XDG directories and none of the caller's `STET_*` settings.
    pub(super) fn stet(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stet"));
        command
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .current_dir(self.path())
            .stdin(Stdio::null());
        for variable in STET_VARIABLES {
            command.env_remove(variable);
        }
        command
    }

    /// `stet demo --headless --pace 0 --dir <home>/demo`, the invocation the demo's help shows.
    pub(super) fn demo(&self) -> Command {
        let mut command = self.stet();
        command
            .args(["demo", "--headless", "--pace", "0", "--dir"])
            .arg(self.demo_dir());
        command
    }

    pub(super) fn demo_dir(&self) -> PathBuf {
        self.path().join("demo")
    }
}

/// A small repository with one brief, a bare remote holding `main`, a user configuration selecting
/// the local forge and the scripted agent playing [`Project::scenario`], and a `stet.toml` of the
/// repository's own with a project setting (no pauses).
pub(super) struct Project {
    pub(super) home: Home,
    pub(super) repo: PathBuf,
    pub(super) remote: PathBuf,
    scenario: PathBuf,
}

impl Project {
    pub(super) fn new(scenario: &str) -> Project {
        let home = Home::new();
        let repo = home.path().join("repo");
        let remote = home.path().join("remote.git");
        // Outside the repository: the scenario is the test's, not part of the code under work.
        let scenario_file = home.path().join("scenario.toml");
        std::fs::write(&scenario_file, scenario).unwrap();
        git(
            home.path(),
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                "remote.git",
            ],
        );
        std::fs::create_dir_all(repo.join(".stet/briefs")).unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        git(&repo, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(repo.join("README.md"), "# Notes\n\nA project to tidy up.\n").unwrap();
        std::fs::write(repo.join("src/notes.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(
            repo.join(".stet/briefs").join(format!("{BRIEF}.toml")),
            "title = \"Tidy the notes\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n\n[[items]]\ntext = \"Tidy up the notes and say what changed.\"\n",
        )
        .unwrap();
        // Where results go and which agent plays what are the user's to say (machine settings):
        // the repository's own file holds only a project setting.
        home.add_user_config(&format!(
            "[forge]\nkind = \"local\"\n\n[forge.local]\nremote = {}\n\n[harness]\nkind = \"script\"\n\n[harness.script]\nscenario = {}\n",
            toml_string(&remote),
            toml_string(&scenario_file)
        ));
        std::fs::write(repo.join("stet.toml"), "[harness.script]\npace = 0\n").unwrap();
        git(&repo, &["add", "--all"]);
        git(&repo, &["commit", "--quiet", "-m", "The notes project"]);
        git(
            &repo,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        git(&repo, &["push", "--quiet", "origin", "main"]);
        Project {
            home,
            repo,
            remote,
            scenario: scenario_file,
        }
    }

    /// `stet --headless --brief tidy-notes <extra>` in the repository.
    pub(super) fn headless(&self, extra: &[&str]) -> Command {
        let mut command = self.home.stet();
        command
            .current_dir(&self.repo)
            .args(["--headless", "--brief", BRIEF])
            .args(extra);
        command
    }

    /// Plays another scenario on the next run.
    pub(super) fn set_scenario(&self, scenario: &str) {
        std::fs::write(&self.scenario, scenario).unwrap();
    }
}

pub(super) fn toml_string(path: &Path) -> String {
    toml::Value::String(path.to_str().unwrap().to_owned()).to_string()
}

/// A scenario of the scripted agent: the model line, then each step as given (TOML table bodies).
pub(super) fn scenario(steps: &[&str]) -> String {
    let mut text = String::from("model = \"headless-test-model\"\n");
    for step in steps {
        text.push_str("\n[[step]]\n");
        text.push_str(step);
        text.push('\n');
    }
    text
}

/// A scenario that runs until it is stopped.
pub(super) fn forever() -> String {
    scenario(&["say = \"I will keep at it.\"", "forever = true"])
}

/// Fails loudly when Docker is missing, and builds the sandbox image once per test process so the
/// stet processes of concurrent tests only ever look it up.
pub(super) fn docker_ready() {
    runtime().block_on(async {
        let _ = docker();
        sandbox_image().await;
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Running stet and reading its events
// ---------------------------------------------------------------------------------------------

/// A stet process that ended.
#[derive(Debug)]
pub(super) struct Finished {
    pub(super) status: ExitStatus,
    pub(super) stdout: String,
    pub(super) stderr: String,
    pub(super) events: Vec<Event>,
}

impl Finished {
    pub(super) fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The one dispatch every event is about.
    pub(super) fn dispatch(&self) -> DispatchId {
        let first = self
            .events
            .first()
            .unwrap_or_else(|| panic!("no events; stderr: {}", self.stderr))
            .dispatch;
        for event in &self.events {
            assert_eq!(event.dispatch, first, "one dispatch per run: {event:?}");
        }
        first
    }

    /// Every phase entered, in order, checking that each change starts where the last one ended.
    fn phases(&self) -> Vec<Phase> {
        let mut at = Phase::Queued;
        let mut entered = Vec::new();
        for event in &self.events {
            if let EventKind::Phase { from, to, .. } = &event.kind {
                assert_eq!(
                    *from, at,
                    "a phase change from where the last one ended: {event:?}"
                );
                at = *to;
                entered.push(*to);
            }
        }
        entered
    }

    /// The `finished` event's outcome, exit code and reason; it is the last event.
    pub(super) fn outcome(&self) -> (Phase, u8, Option<String>) {
        match self.events.last().map(|event| &event.kind) {
            Some(EventKind::Finished {
                outcome,
                exit_code,
                reason,
            }) => (
                *outcome,
                *exit_code,
                reason.as_ref().map(|r| r.as_str().to_owned()),
            ),
            other => panic!(
                "the last event is not `finished`: {other:?}\nstderr: {}",
                self.stderr
            ),
        }
    }

    /// The resources of the one `torn_down` event, asserting that no step failed and no teardown
    /// warning followed.
    pub(super) fn torn_down_cleanly(&self) -> Vec<String> {
        let torn: Vec<_> = self
            .events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::TornDown { steps, .. } => Some(steps),
                _ => None,
            })
            .collect();
        assert_eq!(
            torn.len(),
            1,
            "exactly one torn_down event: {:#?}",
            self.events
        );
        for step in torn[0] {
            assert_eq!(step.failure, None, "teardown step {step:?}");
        }
        for event in &self.events {
            if let EventKind::Warning { message } = &event.kind {
                assert!(
                    !message.as_str().starts_with("teardown"),
                    "teardown warning: {message:?}"
                );
            }
        }
        torn[0]
            .iter()
            .map(|step| step.resource.as_str().to_owned())
            .collect()
    }

    /// A file of the branch stet pushed to `remote`.
    pub(super) fn pushed_file(&self, remote: &Path, file: &str) -> String {
        let branch = self
            .events
            .iter()
            .find_map(|event| match &event.kind {
                EventKind::Pushed { branch, .. } => Some(branch.as_str().to_owned()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("nothing was pushed: {self:#?}"));
        let output = Command::new("git")
            .arg("-C")
            .arg(remote)
            .args(["show", &format!("{branch}:{file}")])
            .output()
            .unwrap();
        assert!(output.status.success(), "{file} on {branch}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    /// Every `usage` event's usage, in order.
    pub(super) fn usages(&self) -> Vec<&Usage> {
        self.events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::Usage(usage) => Some(usage),
                _ => None,
            })
            .collect()
    }

    /// The messages of every `warning` event, in order.
    pub(super) fn warnings(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::Warning { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The transcript's texts of the items of `kind`.
    pub(super) fn transcript_of(&self, kind: ItemKind) -> Vec<&str> {
        self.transcript()
            .into_iter()
            .filter(|(item, _)| *item == kind)
            .map(|(_, text)| text)
            .collect()
    }

    /// The commit of the one `pushed` event.
    pub(super) fn pushed_sha(&self) -> String {
        self.events
            .iter()
            .find_map(|event| match &event.kind {
                EventKind::Pushed { sha, .. } => Some(sha.as_str().to_owned()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no pushed event: {:#?}", self.events))
    }

    pub(super) fn kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(|event| event.kind.name()).collect()
    }

    pub(super) fn transcript(&self) -> Vec<(ItemKind, &str)> {
        self.events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::Transcript(item) => Some((item.item, item.text.as_str())),
                _ => None,
            })
            .collect()
    }

    fn collected_commit(&self) -> Option<String> {
        self.events.iter().find_map(|event| match &event.kind {
            EventKind::Collected { commit, .. } => Some(commit.as_str().to_owned()),
            _ => None,
        })
    }
}

/// One stdout line as an event, or a panic quoting it.
fn parse_event(line: &str) -> Event {
    let event: Event = serde_json::from_str(line)
        .unwrap_or_else(|error| panic!("stdout line is not an event ({error}): {line:?}"));
    assert_eq!(
        event.v,
        stet_protocol::event::EVENT_SCHEMA_VERSION,
        "schema version: {line}"
    );
    event
}

/// Runs `command` to its end; its stdout must be event lines.
pub(super) fn run(command: Command) -> Finished {
    let mut finished = run_text(command);
    finished.events = finished.stdout.lines().map(parse_event).collect();
    finished
}

/// Runs `command` to its end, leaving its stdout as text (`stet sweep`).
pub(super) fn run_text(mut command: Command) -> Finished {
    let output = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    Finished {
        status: output.status,
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
        events: Vec::new(),
    }
}

/// A stet process whose events are read as they come, so a test can act at an exact point.
pub(super) struct Watched {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    stdout: String,
    events: Vec<Event>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Watched {
    pub(super) fn start(mut command: Command) -> Watched {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            stderr.read_to_string(&mut text).unwrap();
            text
        });
        Watched {
            child,
            lines,
            stdout: String::new(),
            events: Vec::new(),
            stderr: Some(stderr),
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn next_event(&mut self) -> Option<Event> {
        let line = self.lines.next()?.unwrap();
        self.stdout.push_str(&line);
        self.stdout.push('\n');
        let event = parse_event(&line);
        self.events.push(event.clone());
        Some(event)
    }

    /// Reads events until one is `wanted`; panics when stet ends first.
    pub(super) fn until(&mut self, what: &str, wanted: impl Fn(&Event) -> bool) -> Event {
        while let Some(event) = self.next_event() {
            if wanted(&event) {
                return event;
            }
        }
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        panic!(
            "stet ended ({status}) before {what}; events:\n{}\nstderr:\n{stderr}",
            self.stdout
        );
    }

    /// The event of the dispatch entering `running` (the agent at work in its container).
    pub(super) fn until_running(&mut self) -> Event {
        self.until("the agent runs", |event| {
            matches!(
                event.kind,
                EventKind::Phase {
                    to: Phase::Running,
                    ..
                }
            )
        })
    }

    /// Reads the rest of the events and waits for the process.
    pub(super) fn finish(mut self) -> Finished {
        while self.next_event().is_some() {}
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        Finished {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr,
            events: std::mem::take(&mut self.events),
        }
    }

    /// SIGKILL, then reaps the process (its journal records are orphans from then on).
    pub(super) fn kill(mut self) -> ExitStatus {
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        let _ = self.stderr.take().unwrap().join();
        status
    }
}

impl Drop for Watched {
    /// A test that failed half-way stops its stet the way a person would, so it tears down.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = signal(self.child.id(), "TERM");
            let _ = self.child.wait();
        }
    }
}

/// Sends `SIG<name>` to `pid` with kill(1): the crate's rustix has no `process` feature.
pub(super) fn signal(pid: u32, name: &str) -> ExitStatus {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// What a dispatch leaves behind
// ---------------------------------------------------------------------------------------------

/// The names of every container, running or not, labelled as this dispatch's sandbox.
pub(super) fn containers_of(dispatch: DispatchId) -> Vec<String> {
    containers_where(
        "label",
        format!("{}={dispatch}", stet_engine::runtime::DISPATCH_LABEL),
    )
}

/// The names of every container, running or not, that Docker lists for the filter `key`=`value`
/// (`label`, `name`, ...).
pub(super) fn containers_where(key: &str, value: String) -> Vec<String> {
    let filters = HashMap::from([(key, vec![value])]);
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
            .map(|name| name.trim_start_matches('/').to_owned())
            .collect()
    })
}

/// The journal record files of `dispatch`.
fn journal_records(home: &Home, dispatch: DispatchId) -> Vec<PathBuf> {
    let prefix = format!("{dispatch}.");
    entries(&home.state().join("journal"))
        .into_iter()
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(&prefix))
        })
        .collect()
}

/// The entries directly in `dir`; none when it does not exist.
fn entries(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(listing) => listing.map(|entry| entry.unwrap().path()).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("{}: {error}", dir.display()),
    }
}

/// Every file below `dir`, depth first.
pub(super) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in entries(dir) {
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        if metadata.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// No container, no dispatch directory and no journal record of `dispatch` is left.
pub(super) fn assert_nothing_left(home: &Home, dispatch: DispatchId) {
    assert_eq!(
        containers_of(dispatch),
        Vec::<String>::new(),
        "containers of {dispatch}"
    );
    let directory = home.state().join("dispatches").join(dispatch.to_string());
    assert!(
        std::fs::symlink_metadata(&directory).is_err(),
        "{} is left",
        directory.display()
    );
    assert_eq!(
        journal_records(home, dispatch),
        Vec::<PathBuf>::new(),
        "journal records of {dispatch}"
    );
    // The gateway's socket directory, in the account's runtime directory (the child inherits this
    // process's XDG_RUNTIME_DIR, so it is at the same place).
    let sockets = stet_engine::dispatch::socket_dir::SocketPlace::for_installation(&home.state());
    let socket_dir = sockets.dispatch_dir(dispatch);
    assert!(
        std::fs::symlink_metadata(&socket_dir).is_err(),
        "{} is left",
        socket_dir.display()
    );
}

/// Every object of a repository (reachable or not), as text.
fn every_object(repo: &Path) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every place a secret could end up after a run, as (where, text): the process's stdout and stderr,
/// every file of the run records, logs and review records, and the history and objects of `repos`.
fn sinks(home: &Home, finished: &Finished, repos: &[&Path]) -> Vec<(String, String)> {
    let mut sinks = vec![
        ("stdout".to_owned(), finished.stdout.clone()),
        ("stderr".to_owned(), finished.stderr.clone()),
    ];
    for dir in ["runs", "logs", "reviews"] {
        let files = files_under(&home.state().join(dir));
        assert!(!files.is_empty(), "nothing under {dir} to search");
        for file in files {
            let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
            sinks.push((file.display().to_string(), text));
        }
    }
    for repo in repos {
        sinks.push((
            format!("git log -p --all in {}", repo.display()),
            git(repo, &["log", "-p", "--all", "--format=fuller"]),
        ));
        sinks.push((
            format!("the objects of {}", repo.display()),
            every_object(repo),
        ));
    }
    sinks
}

pub(super) fn events_file(home: &Home, dispatch: DispatchId) -> PathBuf {
    home.state()
        .join("runs")
        .join(dispatch.to_string())
        .join("events.jsonl")
}

/// Replaces what differs from run to run, so the event stream can be compared with a snapshot.
fn normalize(text: &str, home: &Home) -> String {
    // The gateway's socket directory is in the account's runtime directory, which differs by account.
    let sockets = stet_engine::dispatch::socket_dir::SocketPlace::for_installation(&home.state());
    let text = text
        .replace(sockets.root().to_str().unwrap(), "[SOCKETS]")
        .replace(home.path().to_str().unwrap(), "[TMP]");
    let uuid = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    let rules = [
        (r#""ts":"[^"]*""#.to_owned(), r#""ts":"[TS]""#),
        (
            r#""(created|updated)": "[^"]*""#.to_owned(),
            r#""$1": "[TS]""#,
        ),
        (format!("stet-dispatch-{uuid}"), "stet-dispatch-[ID]"),
        (r"\[SOCKETS\]/[0-9a-f]{32}".to_owned(), "[SOCKETS]/[ID]"),
        (format!("local-{uuid}"), "local-[CREDENTIAL]"),
        ("sha256:[0-9a-f]{64}".to_owned(), "sha256:[IMAGE]"),
        (r"\b[0-9a-f]{40}\b".to_owned(), "[SHA]"),
        (r#""millis":\d+"#.to_owned(), r#""millis":"[MILLIS]""#),
        (
            r"\| Duration \| [^|]* \|".to_owned(),
            "| Duration | [DURATION] |",
        ),
    ];
    rules.iter().fold(text, |text, (pattern, replacement)| {
        Regex::new(pattern)
            .unwrap()
            .replace_all(&text, *replacement)
            .into_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------------------------

#[test]
fn the_demo_runs_headless_from_brief_to_pull_request() {
    docker_ready();
    let home = Home::new();
    let finished = run(home.demo());
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert!(finished.stdout.ends_with('\n'), "{:?}", finished.stdout);
    let dispatch = finished.dispatch();
    let events = &finished.events;
    assert!(events.iter().all(|event| event.brief == DEMO_BRIEF));
    assert_eq!(events[0].kind.name(), "dispatched");

    assert_eq!(
        finished.phases(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::Pushing,
            Phase::OpeningPr,
            Phase::Done,
        ]
    );
    assert_eq!(finished.outcome(), (Phase::Done, 0, None));
    let state = home.state().display().to_string();
    let resources = finished.torn_down_cleanly();
    assert_eq!(resources.len(), 5, "{resources:?}");
    assert_eq!(resources[0], format!("container {dispatch}"));
    assert_eq!(
        resources[1],
        format!("workspace {state}/dispatches/{dispatch}/workspace")
    );
    assert_eq!(
        resources[2],
        format!("outputs directory {state}/dispatches/{dispatch}/outputs")
    );
    let sockets = stet_engine::dispatch::socket_dir::SocketPlace::for_installation(&home.state());
    assert_eq!(
        resources[3],
        format!(
            "gateway socket directory {}",
            sockets.dispatch_dir(dispatch).display()
        )
    );
    assert!(
        resources[4].starts_with("local credential local-"),
        "{resources:?}"
    );

    // The branch the `pushed` event names is in the bare remote at its sha, which is the collected
    // commit; the pull request is the review record it names.
    let (branch, sha) = events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Pushed { branch, sha, .. } => {
                Some((branch.as_str().to_owned(), sha.as_str().to_owned()))
            }
            _ => None,
        })
        .expect("a pushed event");
    assert_eq!(finished.collected_commit().as_deref(), Some(sha.as_str()));
    let remote = home.demo_dir().join("remote.git");
    assert_eq!(
        git(
            &remote,
            &["rev-parse", "--verify", &format!("refs/heads/{branch}")]
        ),
        sha
    );
    let review_file = home.state().join("reviews/1.json");
    let review_text = std::fs::read_to_string(&review_file).unwrap();
    let review: ReviewRecord = serde_json::from_str(&review_text).unwrap();
    assert_eq!(review.number, 1);
    assert_eq!(review.head, branch);
    assert_eq!(review.base, "main");
    assert_eq!(review.remote, remote);
    assert!(review.body.contains(&sha), "{}", review.body);
    let (number, url) = events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::PullRequest { number, url, .. } => Some((*number, url.as_str().to_owned())),
            _ => None,
        })
        .expect("a pull_request event");
    assert_eq!((number, PathBuf::from(url)), (1, review_file));

    // Nothing is left: no container, no dispatch directory, no journal record at all.
    assert_nothing_left(&home, dispatch);
    assert_eq!(
        entries(&home.state().join("dispatches")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        entries(&home.state().join("journal")),
        Vec::<PathBuf>::new()
    );

    // The gateway meters each of the agent's four asks; its reports reach the stream on their own
    // channel, so where they fall among the agent's lines varies and they are checked apart.
    let totals: Vec<f64> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => {
                assert_eq!(usage.model.as_str(), "stet-demo-model");
                assert!(usage.cost_usd.is_some_and(|cost| cost > 0.0), "{usage:?}");
                Some(usage.total_cost_usd)
            }
            _ => None,
        })
        .collect();
    assert_eq!(totals.len(), 4, "{totals:?}");
    assert!(
        totals.windows(2).all(|pair| pair[0] < pair[1]),
        "{totals:?}"
    );
    let agent_lines: String = finished
        .stdout
        .lines()
        .filter(|line| !line.contains(r#""kind":"usage""#))
        .map(|line| format!("{line}\n"))
        .collect();
    insta::assert_snapshot!("demo_events", normalize(&agent_lines, &home));
    insta::assert_snapshot!("demo_review", normalize(&review_text, &home));
}

/// The model's replies are numbered per dispatch: two dispatches of one `stet demo` share its
/// scripted model, and each one's replies count from "step 1" on (issue 29, item 9).
#[test]
fn the_demo_numbers_the_model_replies_of_each_dispatch_from_one() {
    docker_ready();
    let home = Home::new();
    let mut command = home.demo();
    command.arg("--all");
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let mut steps: HashMap<DispatchId, Vec<u32>> = HashMap::new();
    for event in &finished.events {
        if let EventKind::Transcript(item) = &event.kind
            && item.item == ItemKind::Message
            && let Some(rest) = item.text.as_str().strip_prefix("step ")
            && let Some((number, _)) = rest.split_once(':')
        {
            steps
                .entry(event.dispatch)
                .or_default()
                .push(number.parse().unwrap());
        }
    }
    assert_eq!(steps.len(), 2, "two dispatches asked the model: {steps:?}");
    for numbers in steps.values() {
        let expected: Vec<u32> = (1..).take(numbers.len()).collect();
        assert!(numbers.len() > 1, "{steps:?}");
        assert_eq!(*numbers, expected, "{steps:?}");
    }
}

/// Also runs the demo a second time in the same state: the scratch forge is made anew and the earlier
/// pull request is closed, so a rerun opens a new one instead of colliding with it.
#[test]
fn the_demo_secret_is_redacted_in_every_sink() {
    docker_ready();
    let home = Home::new();
    let first = run(home.demo());
    assert_eq!(first.code(), Some(0), "{first:#?}");
    let finished = run(home.demo());
    assert_eq!(finished.code(), Some(0), "a second demo run: {finished:#?}");
    let reviews = stet_engine::forge::local::read_reviews(&home.state().join("reviews")).unwrap();
    let states: Vec<_> = reviews.iter().map(|r| (r.number, r.state)).collect();
    assert_eq!(
        states,
        [
            (1, stet_engine::forge::local::ReviewState::Closed),
            (2, stet_engine::forge::local::ReviewState::Open)
        ]
    );
    let dispatch = finished.dispatch();
    // The planted secret did go by, masked.
    assert!(
        finished.transcript().contains(&(
            ItemKind::Output,
            "export DEMO_TOKEN=[REDACTED:github-token]"
        )),
        "{:#?}",
        finished.transcript()
    );
    let token = Regex::new(GITHUB_TOKEN_SHAPE).unwrap();
    let repo = home.demo_dir().join("repo");
    let remote = home.demo_dir().join("remote.git");
    for (sink, text) in sinks(&home, &finished, &[&repo, &remote]) {
        if let Some(found) = token.find(&text) {
            panic!("a GitHub token in clear in {sink}: {}", found.as_str());
        }
    }
    assert!(finished.stdout.contains("[REDACTED:github-token]"));
    let recorded = std::fs::read_to_string(events_file(&home, dispatch)).unwrap();
    assert!(recorded.contains("[REDACTED:github-token]"), "{recorded}");
    assert_nothing_left(&home, dispatch);
}

#[test]
fn the_demo_says_exactly_that_docker_is_missing() {
    let home = Home::new();
    let mut command = home.demo();
    command.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let finished = run(command);
    assert_eq!(finished.code(), Some(2), "{finished:#?}");
    assert_eq!(finished.stdout, "");
    assert_eq!(
        finished.stderr,
        "stet: Docker is not reachable at unix:///nonexistent/docker.sock: Socket not found: /nonexistent/docker.sock; is the daemon running?\n"
    );
    assert_eq!(entries(&home.state().join("runs")), Vec::<PathBuf>::new());
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

/// An agent prints a private key one line at a time (each line its own record), a `curl -u` with a
/// password, a token under a name that says so and a token base64-encoded: none reaches any sink in
/// clear.
#[test]
fn a_key_printed_line_by_line_a_curl_password_and_an_encoded_token_never_appear_in_clear() {
    docker_ready();
    let alnum = |len: usize| -> String {
        let mut text = String::new();
        while text.len() < len {
            text.extend(
                random_token(len)
                    .unwrap()
                    .chars()
                    .filter(char::is_ascii_alphanumeric),
            );
        }
        text.truncate(len);
        text
    };
    let body: Vec<String> = (0..5).map(|_| alnum(64)).collect();
    let password = alnum(18);
    let gitea = alnum(40).to_ascii_lowercase();
    let mut steps = vec!["say = \"-----BEGIN OPENSSH PRIVATE KEY-----\"".to_owned()];
    steps.extend(body.iter().map(|line| format!("say = \"{line}\"")));
    steps.push("say = \"-----END OPENSSH PRIVATE KEY-----\"".to_owned());
    steps.push(format!(
        "say = \"curl -u deploy:{password} https://api.example.com/x\""
    ));
    steps.push(format!("think = \"GITEA_TOKEN={gitea}\""));
    let token = format!("ghp_{}", alnum(36));
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&token)
    };
    steps.push(format!("say = \"echo {encoded} | base64 -d\""));
    steps.push("write = { path = \"src/notes.txt\", content = \"one\\ntwo\\n\" }".to_owned());
    steps.push("finish = \"Done.\"".to_owned());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let project = Project::new(&scenario(&steps));
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let home = &project.home;
    let canaries: Vec<&str> = body
        .iter()
        .map(String::as_str)
        .chain([
            password.as_str(),
            gitea.as_str(),
            token.as_str(),
            encoded.as_str(),
        ])
        .collect();
    for (sink, text) in sinks(home, &finished, &[&project.repo, &project.remote]) {
        for canary in &canaries {
            assert!(!text.contains(canary), "{canary:?} in clear in {sink}");
        }
    }
    let transcript = finished.transcript();
    assert!(
        transcript.contains(&(ItemKind::Message, "[REDACTED:private-key]")),
        "the key is one masked message: {transcript:?}"
    );
    assert!(
        transcript.contains(&(
            ItemKind::Message,
            "curl -u [REDACTED:basic-auth] https://api.example.com/x"
        )),
        "{transcript:?}"
    );
}

#[test]
fn a_planted_canary_never_appears_in_clear() {
    docker_ready();
    let github = format!("ghp_{}", random_token(36).unwrap());
    let slack = format!(
        "xoxb-{}-{}",
        random_token(12).unwrap(),
        random_token(24).unwrap()
    );
    let project = Project::new(&scenario(&[
        &format!("say = \"The environment holds {github}.\""),
        &format!("think = \"And maybe {slack} too.\""),
        &format!("leak = {{ value = \"{github}\" }}"),
        &format!("leak = {{ value = \"{slack}\" }}"),
        "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\nthree\\nfour\\n\" }",
        &format!("finish = \"Tidied the notes; the token was {github} and {slack}.\""),
    ]));
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let dispatch = finished.dispatch();
    assert_eq!(finished.outcome(), (Phase::Done, 0, None));
    let home = &project.home;
    for (sink, text) in sinks(home, &finished, &[&project.repo, &project.remote]) {
        for canary in [&github, &slack] {
            assert!(
                !text.contains(canary.as_str()),
                "the canary in clear in {sink}"
            );
        }
    }
    // Each sink that carried the agent's words shows the marker instead.
    let transcript = finished.transcript();
    assert!(
        transcript.contains(&(
            ItemKind::Output,
            "export DEMO_TOKEN=[REDACTED:github-token]"
        )),
        "{transcript:?}"
    );
    assert!(transcript.contains(&(ItemKind::Output, "export DEMO_TOKEN=[REDACTED:slack-token]")));
    let recorded = std::fs::read_to_string(events_file(home, dispatch)).unwrap();
    assert!(recorded.contains("[REDACTED:github-token]"), "{recorded}");
    let message = git(
        &project.remote,
        &["log", "-1", "--format=%B", "--branches=stet/*"],
    );
    assert!(
        message.contains("the token was [REDACTED:github-token] and [REDACTED:slack-token]"),
        "{message}"
    );
    let reviews = stet_engine::forge::local::read_reviews(&home.state().join("reviews")).unwrap();
    assert_eq!(reviews.len(), 1);
    assert!(
        reviews[0].body.contains("[REDACTED:github-token]"),
        "{}",
        reviews[0].body
    );
    assert_nothing_left(home, dispatch);
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_timeout_exits_4_and_tears_down() {
    docker_ready();
    let project = Project::new(&forever());
    let started = Instant::now();
    let finished = run(project.headless(&["--timeout", "3s"]));
    let took = started.elapsed();
    assert_eq!(finished.code(), Some(4), "{finished:#?}");
    assert!(took >= Duration::from_secs(3), "ended after {took:?}");
    let (outcome, exit_code, reason) = finished.outcome();
    assert_eq!((outcome, exit_code), (Phase::TimedOut, 4));
    assert_eq!(
        reason.as_deref(),
        Some("the dispatch ran past its wall-clock timeout of 3 s")
    );
    assert_eq!(
        finished.phases(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::TimedOut,
        ]
    );
    finished.torn_down_cleanly();
    assert_nothing_left(&project.home, finished.dispatch());
}

#[test]
fn a_cost_ceiling_exits_5() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "say = \"Thinking hard.\"",
        "usage = { input_tokens = 5000, output_tokens = 400, cost_usd = 0.02 }",
        "say = \"This line comes after the ceiling.\"",
        "finish = \"Nothing past the ceiling is published.\"",
    ]));
    let finished = run(project.headless(&["--cost-ceiling", "0.01", "--push"]));
    assert_eq!(finished.code(), Some(5), "{finished:#?}");
    // The ceiling travels in the dispatch's first event, so headless output carries it too.
    assert!(
        matches!(
            finished.events[0].kind,
            EventKind::Dispatched { cost_ceiling_usd: Some(ceiling), .. } if (ceiling - 0.01).abs() < 1e-12
        ),
        "{:?}",
        finished.events[0]
    );
    let (outcome, exit_code, reason) = finished.outcome();
    assert_eq!((outcome, exit_code), (Phase::CostCeilingHit, 5));
    let reason = reason.unwrap();
    assert!(reason.contains("ceiling of $0.0100"), "{reason}");
    let usage = finished
        .events
        .iter()
        .position(|event| matches!(&event.kind, EventKind::Usage(usage) if (usage.total_cost_usd - 0.02).abs() < 1e-9))
        .expect("the usage event with the total");
    assert!(
        finished.events[usage..]
            .iter()
            .all(|event| !matches!(event.kind, EventKind::Transcript(_))),
        "nothing of the agent after the ceiling: {:#?}",
        &finished.events[usage..]
    );
    assert!(!finished.kinds().contains(&"collected"));
    assert!(!finished.kinds().contains(&"pushed"));
    finished.torn_down_cleanly();
    assert_nothing_left(&project.home, finished.dispatch());
    assert_eq!(
        git(&project.remote, &["for-each-ref", "--format=%(refname)"]),
        "refs/heads/main"
    );
}

#[test]
fn an_agent_that_fails_or_gives_up_exits_1() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "say = \"Building.\"",
        "fail = { code = 7, message = \"the build is broken\" }",
    ]));
    let failed = run(project.headless(&["--push"]));
    assert_eq!(failed.code(), Some(1), "{failed:#?}");
    let (outcome, exit_code, reason) = failed.outcome();
    assert_eq!((outcome, exit_code), (Phase::Failed, 1));
    let reason = reason.unwrap();
    assert!(reason.contains("exited with code 7"), "{reason}");
    assert!(
        failed
            .transcript()
            .contains(&(ItemKind::Error, "the build is broken"))
    );
    assert!(!failed.kinds().contains(&"collected"));
    failed.torn_down_cleanly();
    assert_nothing_left(&project.home, failed.dispatch());

    project.set_scenario(&scenario(&[
        "write = { path = \"src/notes.txt\", content = \"half done\\n\" }",
        "give_up = \"this task is beyond me\"",
    ]));
    let gave_up = run(project.headless(&["--push"]));
    assert_eq!(gave_up.code(), Some(1), "{gave_up:#?}");
    assert_ne!(gave_up.dispatch(), failed.dispatch());
    let (outcome, exit_code, reason) = gave_up.outcome();
    assert_eq!((outcome, exit_code), (Phase::Failed, 1));
    let reason = reason.unwrap();
    assert!(reason.contains("did not finish"), "{reason}");
    assert!(reason.contains("this task is beyond me"), "{reason}");
    assert!(!gave_up.kinds().contains(&"collected"));
    gave_up.torn_down_cleanly();
    assert_nothing_left(&project.home, gave_up.dispatch());
    // Neither the failed work nor the half-done one went anywhere.
    assert_eq!(
        git(&project.remote, &["for-each-ref", "--format=%(refname)"]),
        "refs/heads/main"
    );
    assert_eq!(
        git(
            &project.repo,
            &["for-each-ref", "--format=%(refname)", "refs/stet"]
        ),
        ""
    );
}

#[test]
fn headless_without_a_brief_exits_2() {
    let home = Home::new();
    let mut command = home.stet();
    command.arg("--headless");
    let finished = run(command);
    assert_eq!(finished.code(), Some(2), "{finished:#?}");
    assert_eq!(finished.stdout, "");
    assert_eq!(
        finished.stderr,
        "stet: --headless needs --brief ID|PATH (repeatable) or --all\n"
    );
}

#[test]
fn a_brief_that_does_not_parse_exits_2_naming_its_file() {
    let project = Project::new(&forever());
    let broken = project.repo.join(".stet/briefs/broken.toml");
    std::fs::write(&broken, "title = \"Unfinished\nworkflow = implement\n").unwrap();
    let mut command = project.home.stet();
    command
        .current_dir(&project.repo)
        .args(["--headless", "--brief", "broken", "--push"]);
    let finished = run(command);
    assert_eq!(finished.code(), Some(2), "{finished:#?}");
    assert_eq!(finished.stdout, "");
    assert!(
        finished.stderr.contains(broken.to_str().unwrap()),
        "{}",
        finished.stderr
    );
    // Also when it comes with a good one: nothing is dispatched.
    let mut command = project.home.stet();
    command.current_dir(&project.repo).args([
        "--headless",
        "--brief",
        BRIEF,
        "--brief",
        broken.to_str().unwrap(),
    ]);
    let finished = run(command);
    assert_eq!(finished.code(), Some(2), "{finished:#?}");
    assert_eq!(finished.stdout, "");
    assert!(
        finished.stderr.contains(broken.to_str().unwrap()),
        "{}",
        finished.stderr
    );
    assert_eq!(
        entries(&project.home.state().join("runs")),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn without_push_the_result_is_kept_at_refs_stet_and_nothing_is_pushed() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "write = { path = \"notes/kept.md\", content = \"kept, not pushed\\n\" }",
        "finish = \"Wrote notes/kept.md.\"",
    ]));
    let main = git(&project.remote, &["rev-parse", "refs/heads/main"]);
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let dispatch = finished.dispatch();
    let (outcome, exit_code, reason) = finished.outcome();
    assert_eq!((outcome, exit_code), (Phase::Done, 0));
    let reference = format!("refs/stet/{dispatch}");
    let reason = reason.unwrap();
    assert!(reason.contains(&reference), "{reason}");
    assert_eq!(
        finished.phases(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::Done,
        ]
    );
    let commit = finished.collected_commit().expect("a collected event");
    assert_eq!(
        git(&project.repo, &["rev-parse", "--verify", &reference]),
        commit
    );
    assert_eq!(
        git(&project.repo, &["show", &format!("{commit}:notes/kept.md")]),
        "kept, not pushed"
    );
    assert_eq!(
        git(&project.repo, &["rev-parse", &format!("{commit}^")]),
        main
    );
    let patch = project
        .home
        .state()
        .join("runs")
        .join(dispatch.to_string())
        .join("diff.patch");
    let patch = std::fs::read_to_string(&patch).unwrap();
    assert!(patch.contains("+++ b/notes/kept.md"), "{patch}");
    assert!(patch.contains("+kept, not pushed"), "{patch}");
    // Nothing was pushed and no pull request was opened.
    assert!(!finished.kinds().contains(&"pushed"));
    assert!(!finished.kinds().contains(&"pull_request"));
    assert_eq!(
        git(
            &project.remote,
            &["for-each-ref", "--format=%(refname) %(objectname)"]
        ),
        format!("refs/heads/main {main}")
    );
    assert_eq!(
        entries(&project.home.state().join("reviews")),
        Vec::<PathBuf>::new()
    );
    finished.torn_down_cleanly();
    assert_nothing_left(&project.home, dispatch);
}

/// Files the many-files result adds, each under two directories of 200-character names.
const MANY_LONG_PATHS: usize = 1_200;

/// An agent that adds [`MANY_LONG_PATHS`] files of about 410-byte paths: before, the `collected`
/// event listed each (about half a MiB in one event, in the run record and in the theater, and up to
/// `import.max_files` of them). The event now lists what fits its bounds (1,000 entries, 256 KiB of
/// paths) and counts the rest, the run record's line stays small, and the progress line still
/// counts every file.
#[test]
fn a_result_of_many_files_is_counted_not_listed_whole_in_the_collected_event() {
    use stet_protocol::event::{MAX_LISTED, MAX_LISTED_BYTES};
    docker_ready();
    let directory = format!("{}/{}", "a".repeat(200), "b".repeat(200));
    let steps: Vec<String> = (0..MANY_LONG_PATHS)
        .map(|file| format!("write = {{ path = \"{directory}/f{file:04}\", content = \"\" }}"))
        .chain(["finish = \"Added many files.\"".to_owned()])
        .collect();
    let project = Project::new(&scenario(
        &steps.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let dispatch = finished.dispatch();
    let collected = finished
        .events
        .iter()
        .find(|event| matches!(event.kind, EventKind::Collected { .. }))
        .expect("a collected event");
    let EventKind::Collected {
        files,
        files_not_listed: not_listed,
        ..
    } = &collected.kind
    else {
        unreachable!("found as a collected event")
    };
    let not_listed = *not_listed;
    let listed_bytes: usize = files.iter().map(|file| file.path.as_str().len()).sum();
    assert!(
        files.len() <= MAX_LISTED && listed_bytes <= MAX_LISTED_BYTES,
        "{} files, {listed_bytes} bytes of paths listed",
        files.len()
    );
    assert!(not_listed > 0, "every file was listed");
    assert_eq!(files.len() + not_listed, MANY_LONG_PATHS);
    assert!(files[0].path.as_str().ends_with("/f0000"), "{:?}", files[0]);
    let record = std::fs::read_to_string(events_file(&project.home, dispatch)).unwrap();
    let line = record
        .lines()
        .find(|line| line.contains("\"kind\":\"collected\""))
        .expect("the collected event in the run record");
    assert!(
        line.len() <= MAX_LISTED_BYTES + 64 * 1024,
        "the run record's collected event is {} bytes",
        line.len()
    );
    eprintln!(
        "collected event: {} files listed ({listed_bytes} bytes of paths), {not_listed} counted; its run record line {} bytes",
        files.len(),
        line.len()
    );
    let progress = stet_protocol::progress::progress_line(collected).unwrap_or_default();
    assert!(
        progress.contains(&format!("collected {MANY_LONG_PATHS} file(s)")),
        "{progress}"
    );
    finished.torn_down_cleanly();
}

// ---------------------------------------------------------------------------------------------
// Signals and crashes
// ---------------------------------------------------------------------------------------------

#[test]
fn sigint_cancels_and_tears_down() {
    docker_ready();
    let project = Project::new(&forever());
    // The timeout only keeps a stet that ignored the signal from running on: it would exit 4.
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    watched.until("the first transcript item", |event| {
        matches!(event.kind, EventKind::Transcript(_))
    });
    assert!(signal(watched.pid(), "INT").success());
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(3), "{finished:#?}");
    let (outcome, exit_code, _) = finished.outcome();
    assert_eq!((outcome, exit_code), (Phase::Cancelled, 3));
    assert_eq!(
        finished.phases(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Cancelled,
        ]
    );
    assert!(
        finished.stderr.contains("interrupted"),
        "{}",
        finished.stderr
    );
    let resources = finished.torn_down_cleanly();
    assert_eq!(resources.len(), 4, "{resources:?}");
    assert_nothing_left(&project.home, finished.dispatch());
}

/// A terminal that goes away may send SIGHUP more than once (the hangup, the shell's exit): the
/// first cancels, and those that come while the dispatch tears down change nothing — stet still
/// waits for every teardown and exits 3.
#[test]
fn repeated_sighups_cancel_and_wait_for_the_teardown() {
    docker_ready();
    let project = Project::new(&forever());
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    watched.until("the first transcript item", |event| {
        matches!(event.kind, EventKind::Transcript(_))
    });
    assert!(signal(watched.pid(), "HUP").success());
    watched.until("the cancelled phase", |event| {
        matches!(
            event.kind,
            EventKind::Phase {
                to: Phase::Cancelled,
                ..
            }
        )
    });
    // The teardown is under way now.
    for _ in 0..2 {
        assert!(signal(watched.pid(), "HUP").success());
    }
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(3), "{finished:#?}");
    let (outcome, exit_code, _) = finished.outcome();
    assert_eq!((outcome, exit_code), (Phase::Cancelled, 3));
    let resources = finished.torn_down_cleanly();
    assert_eq!(resources.len(), 4, "{resources:?}");
    assert_nothing_left(&project.home, finished.dispatch());
}

/// Where a dispatch is SIGKILLed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum KillPoint {
    /// Right after the `provisioning` phase event: some, all or none of the sandbox may exist.
    Provisioning,
    /// Right after the first transcript item: everything exists.
    Running,
    /// Right after the `collecting` phase event.
    Collecting,
}

impl KillPoint {
    fn reached(self, event: &Event) -> bool {
        match self {
            KillPoint::Provisioning => {
                matches!(
                    event.kind,
                    EventKind::Phase {
                        to: Phase::Provisioning,
                        ..
                    }
                )
            }
            KillPoint::Running => matches!(event.kind, EventKind::Transcript(_)),
            KillPoint::Collecting => {
                matches!(
                    event.kind,
                    EventKind::Phase {
                        to: Phase::Collecting,
                        ..
                    }
                )
            }
        }
    }
}

/// The outstanding resources of a journal record (intended, not released), read the way the
/// journal replays it: a torn last line is ignored.
fn outstanding(record: &Path) -> Vec<Resource> {
    let mut outstanding: Vec<Resource> = Vec::new();
    for line in std::fs::read_to_string(record).unwrap().lines() {
        let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let resource = || serde_json::from_value::<Resource>(line["resource"].clone()).unwrap();
        match line["op"].as_str() {
            Some("intend") => outstanding.push(resource()),
            Some("release") => {
                let released = resource();
                outstanding.retain(|held| *held != released);
            }
            _ => {}
        }
    }
    outstanding
}

#[test]
fn a_sigkilled_dispatch_is_reclaimed_by_the_next_sweep() {
    docker_ready();
    // Report problems are gathered over every point and asserted at the end, so one missing line
    // does not hide what the later points show; what is left behind fails at once.
    let mut problems = Vec::new();
    for point in [
        KillPoint::Provisioning,
        KillPoint::Running,
        KillPoint::Collecting,
    ] {
        let project = Project::new(&match point {
            KillPoint::Collecting => scenario(&[
                "write = { path = \"src/notes.txt\", content = \"tidied\\n\" }",
                "finish = \"Tidied.\"",
            ]),
            KillPoint::Provisioning | KillPoint::Running => forever(),
        });
        let home = &project.home;
        let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
        let at = watched.until(&format!("{point:?}"), |event| point.reached(event));
        let dispatch = at.dispatch;
        let status = watched.kill();
        assert_eq!(status.signal(), Some(9), "{point:?}: {status}");

        // What exists now, and so what the sweep must say it reclaimed.
        let records = journal_records(home, dispatch);
        assert!(records.len() <= 1, "{point:?}: {records:?}");
        let resources = records.first().map(|r| outstanding(r)).unwrap_or_default();
        let containers = containers_of(dispatch);
        let root = home.state().join("dispatches").join(dispatch.to_string());
        let root_existed = root.exists();
        // A container the killed stet had begun removing may finish going before the sweep looks:
        // either account of it is true, as long as it is accounted for.
        let mut expected: Vec<Vec<String>> = Vec::new();
        for resource in &resources {
            match resource {
                Resource::Container { name, .. } if containers.contains(name) => {
                    expected.push(vec![
                        format!("removed container {name}"),
                        format!("container {name} was already gone"),
                    ]);
                }
                Resource::Workspace { path } | Resource::Outputs { path } if path.exists() => {
                    expected.push(vec![format!("removed {}", path.display())]);
                }
                _ => {}
            }
        }
        if root_existed {
            expected.push(vec![format!("removed {}", root.display())]);
        }
        let credentials: Vec<(String, String)> = resources
            .iter()
            .filter_map(|resource| match resource {
                Resource::Credential { provider, id } => Some((provider.clone(), id.to_string())),
                _ => None,
            })
            .collect();
        if point != KillPoint::Provisioning {
            assert_eq!(containers, [dispatch.to_string()], "{point:?}");
            assert!(root_existed, "{point:?}");
            assert_eq!(credentials.len(), 1, "{point:?}: {resources:?}");
            assert_eq!(resources.len(), 4, "{point:?}: {resources:?}");
        }

        let mut sweep = home.stet();
        sweep.arg("sweep");
        let swept = run_text(sweep);
        assert_eq!(swept.code(), Some(0), "{point:?}: {swept:#?}");
        let report: Vec<&str> = swept.stdout.lines().collect();
        assert_nothing_left(home, dispatch);

        for accounts in &expected {
            if !accounts.iter().any(|line| report.contains(&line.as_str())) {
                problems.push(format!(
                    "{point:?}: the sweep does not say {}; it said:\n{}",
                    accounts.join(" or "),
                    swept.stdout
                ));
            }
        }
        for (provider, id) in &credentials {
            let revoked = format!("revoked credential {id}");
            let expires = format!(
                "credential {id} ({provider}) cannot be revoked from here; it expires at its TTL"
            );
            if !report.contains(&revoked.as_str()) && !report.contains(&expires.as_str()) {
                problems.push(format!(
                    "{point:?}: the sweep does not account for credential {id} (neither revoked nor left to expire); it said:\n{}",
                    swept.stdout
                ));
            }
        }
        if !records.is_empty() && !report.contains(&"closed 1 journal record(s)") {
            problems.push(format!(
                "{point:?}: the sweep does not say it closed the record; it said:\n{}",
                swept.stdout
            ));
        }
        if point == KillPoint::Running {
            // Everything existed: the report is exactly this, in this order (the agent, which only
            // talks, left no work to salvage).
            let state = home.state().display().to_string();
            let (provider, id) = &credentials[0];
            let full = |credential: String| {
                format!(
                    "nothing to salvage of {dispatch}: the agent had changed nothing\nremoved container {dispatch}\nremoved {state}/dispatches/{dispatch}/workspace\nremoved {state}/dispatches/{dispatch}/outputs\nremoved {state}/dispatches/{dispatch}\n{credential}\nclosed 1 journal record(s)\n"
                )
            };
            let revoked = full(format!("revoked credential {id}"));
            let expires = full(format!(
                "credential {id} ({provider}) cannot be revoked from here; it expires at its TTL"
            ));
            if swept.stdout != revoked && swept.stdout != expires {
                problems.push(format!(
                    "Running: the full report differs; expected\n{expires}(or with `revoked credential {id}`), got\n{}",
                    swept.stdout
                ));
            }
        }
        // A second sweep finds nothing more.
        let mut again = home.stet();
        again.arg("sweep");
        let again = run_text(again);
        assert_eq!(again.code(), Some(0), "{point:?}: {again:#?}");
        assert_eq!(
            again.stdout, "nothing to sweep: no dispatch left anything behind\n",
            "{point:?}"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
