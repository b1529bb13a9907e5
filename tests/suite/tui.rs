//! The theater in a real terminal: the built binary under tmux, driven by keys sent to the pane, its
//! screen read with `capture-pane` and asserted, against the real Docker engine. `stet demo` opens
//! the theater on its scratch repository: one dispatch is cancelled, a second runs to the review gate
//! and `p` opens the pull request on the local forge, and `q` gives the shell back with the terminal
//! sane. SIGTERM gives it back too, at the inbox of a plain `stet` and with a demo dispatch running.
//! What the screen says is checked against the run records, the local forge's review records, the
//! journal and Docker; after stet exits the pane's shell reports its exit status and `stty -a`.
//! Killing the tmux session hangs the terminal up — during provisioning (a pull that never ends),
//! while the agent runs, at the review gate and at the inbox, with SIGHUP (repeated) and without any
//! signal, and under `stet --headless`: stet then cancels and tears down every dispatch before any
//! sweep, and exits 3.
//!
//! Every wait polls for what it expects with an overall bound that fails the test with the screen.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stet_engine::brief::Brief;
use stet_engine::dispatch::record::RunResult;
use stet_engine::forge::local::ReviewRecord;
use stet_protocol::event::{DispatchId, Event, EventKind};
use stet_protocol::state::Phase;

use super::headless::{
    Home, Project, STET_VARIABLES, Watched, assert_nothing_left, containers_of, containers_where,
    docker_ready, files_under, forever, scenario, signal,
};
use super::support::git;

/// The title of the brief of a [`Project`].
const PROJECT_TITLE: &str = "Tidy the notes";

/// The pane's size: wide enough that the timeline shows a teardown step's whole container name.
const WIDTH: u16 = 200;
const HEIGHT: u16 = 50;

/// How fast the demo's scripted agent works here. Its first thought comes about 3 paces into the
/// run and the rest of its work takes about 22 more, so a cancel or a signal sent once the thought
/// is on screen lands while it runs; a whole run takes about 11 s.
const PACE: &str = "0.5";

/// How long any one thing may take to show up.
const PATIENCE: Duration = Duration::from_secs(90);

/// How often the pane and the disk are looked at while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Terminal modes a shell needs that raw mode turns off: echo and line editing.
const SANE_FLAGS: [&str; 2] = ["echo", "icanon"];

/// What the pane's shell prints once `stty -a` has printed everything.
const STTY_END: &str = "end-of-stty";

/// The marks the timeline draws in front of the phase in progress.
const SPINNER: [char; 4] = ['◐', '◓', '◑', '◒'];

/// What the theater's runs left on disk (read from the run records), and how the demo is run.
impl Home {
    fn runs(&self) -> PathBuf {
        self.state().join("runs")
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

    /// `stet demo --dir <home>/demo --pace PACE`.
    fn demo_args(&self) -> Vec<String> {
        vec![
            "demo".to_owned(),
            "--dir".to_owned(),
            self.demo_dir().display().to_string(),
            "--pace".to_owned(),
            PACE.to_owned(),
        ]
    }

    /// What `stet demo` prints once the theater has given the terminal back.
    fn demo_hints(&self) -> [String; 2] {
        [
            format!(
                "stet demo: scratch repository {} (forge: {})",
                self.demo_dir().join("repo").display(),
                self.demo_dir().join("remote.git").display()
            ),
            format!(
                "see the pull request with `stet reviews`; the run records are under {}/runs",
                self.state().display()
            ),
        ]
    }
}

/// The demo's briefs as the inbox lists them (by file name), read from the assets.
fn demo_briefs() -> Vec<Brief> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo/briefs");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    let briefs: Vec<Brief> = paths
        .iter()
        .map(|path| Brief::from_file(path).unwrap())
        .collect();
    assert!(briefs.len() >= 2, "the demo has two briefs: {paths:?}");
    briefs
}

/// The start of the first thought of the demo scenario of brief `id`: short enough to fit on one
/// row of the transcript pane.
fn first_thought(id: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/demo/scenarios")
        .join(format!("{id}.toml"));
    let scenario: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let thought = scenario["step"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|step| step.get("think")?.as_str())
        .unwrap_or_else(|| panic!("{} has no thought", path.display()));
    thought.lines().next().unwrap().chars().take(40).collect()
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

/// Single-quotes `text` for sh.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `stet <args>` for sh, with `home`'s XDG directories and HOME and no `STET_*` variables.
fn stet_command(home: &Home, args: &[String]) -> String {
    let mut stet = String::from("env");
    for variable in STET_VARIABLES {
        stet.push_str(&format!(" -u {variable}"));
    }
    for (name, value) in [
        ("HOME", home.path().to_owned()),
        ("XDG_STATE_HOME", home.path().join("state")),
        ("XDG_CONFIG_HOME", home.path().join("config")),
    ] {
        stet.push_str(&format!(" {name}={}", quoted(value.to_str().unwrap())));
    }
    stet.push(' ');
    stet.push_str(&quoted(env!("CARGO_BIN_EXE_stet")));
    for arg in args {
        stet.push(' ');
        stet.push_str(&quoted(arg));
    }
    stet
}

/// How the session leader of a pane that is killed takes the hangup.
#[derive(Debug, Clone, Copy)]
enum Leader {
    /// It dies of the SIGHUP, as a login shell does; the kernel then sends SIGHUP to stet's process
    /// group as well, while the terminal already fails every read and write.
    DiesOfIt,
    /// It ignores SIGHUP (`trap '' HUP`, as `ssh host 'trap "" HUP; stet'` or a wrapper would): no
    /// signal reaches stet, which must notice by itself that its terminal is gone.
    IgnoresIt,
}

/// A tmux server of the test's own (its socket in the test's home) with one [`WIDTH`]×[`HEIGHT`]
/// session whose shell runs stet (writing its pid to a file first), then prints
/// `stet exited with status N` and `stty -a` (then [`STTY_END`]), and waits — or, started to be
/// killed ([`Tmux::start_to_hang_up`]), writes stet's exit status to a file.
struct Tmux {
    socket: PathBuf,
    pid_file: PathBuf,
}

impl Tmux {
    /// Runs `stet <args>` in `dir`, with `home`'s XDG directories and HOME and no `STET_*`
    /// variables.
    fn start(home: &Home, dir: &Path, args: &[String]) -> Tmux {
        // The inner shell writes its pid, then becomes stet: the pid is stet's.
        let script = format!(
            "sh -c 'echo $$ > \"$0\"; exec \"$@\"' {} {}\n\
             echo \"stet exited with status $?\"\n\
             stty -a\n\
             echo {STTY_END}\n\
             exec cat\n",
            quoted(Tmux::pid_file(home).to_str().unwrap()),
            stet_command(home, args)
        );
        Tmux::launch(home, dir, &script)
    }

    /// Runs `stet <args>` in `dir` as [`Tmux::start`] does, in a pane made to be killed: the pane's
    /// shell is the session leader that takes the hangup as `leader` says; stet runs in a subshell
    /// that ignores SIGHUP (stet installs its own handler) and writes stet's exit status to
    /// [`Tmux::exit_file`] once stet is gone, touching the terminal no more.
    fn start_to_hang_up(home: &Home, dir: &Path, args: &[String], leader: Leader) -> Tmux {
        let exit_file = Tmux::exit_file(home);
        let leader_trap = match leader {
            Leader::DiesOfIt => "",
            Leader::IgnoresIt => "trap '' HUP\n",
        };
        let script = format!(
            "{leader_trap}( trap '' HUP\n\
             sh -c 'echo $$ > \"$0\"; exec \"$@\"' {} {}\n\
             echo $? > {}.part && mv {}.part {} )\n",
            quoted(Tmux::pid_file(home).to_str().unwrap()),
            stet_command(home, args),
            quoted(exit_file.to_str().unwrap()),
            quoted(exit_file.to_str().unwrap()),
            quoted(exit_file.to_str().unwrap()),
        );
        Tmux::launch(home, dir, &script)
    }

    /// Starts the test's tmux server with one session whose pane runs `script` in `dir`.
    fn launch(home: &Home, dir: &Path, script: &str) -> Tmux {
        let tmux = Tmux {
            socket: home.path().join("tmux.sock"),
            pid_file: Tmux::pid_file(home),
        };
        let script_file = home.path().join("pane.sh");
        std::fs::write(&script_file, script).unwrap();
        let started = tmux
            .command()
            .args(["new-session", "-d", "-s", "theater", "-x"])
            .arg(WIDTH.to_string())
            .arg("-y")
            .arg(HEIGHT.to_string())
            .arg("-c")
            .arg(dir)
            .arg("sh")
            .arg(&script_file)
            .status()
            .unwrap();
        assert!(started.success(), "tmux new-session: {started}");
        tmux
    }

    fn pid_file(home: &Home) -> PathBuf {
        home.path().join("stet.pid")
    }

    /// Where a pane of [`Tmux::start_to_hang_up`] writes stet's exit status.
    fn exit_file(home: &Home) -> PathBuf {
        home.path().join("stet.exit")
    }

    /// Kills the session as closing the terminal's window does: the pane's terminal hangs up (and
    /// the test's tmux server, left without a session, exits).
    fn kill_session(&self) {
        let killed = self
            .command()
            .args(["kill-session", "-t", "theater"])
            .status()
            .unwrap();
        assert!(killed.success(), "tmux kill-session: {killed}");
    }

    /// The exit status of the stet of a pane of [`Tmux::start_to_hang_up`], once it exited; fails
    /// with the end of stet's log after [`PATIENCE`].
    fn exit_status_after_hangup(&self, home: &Home) -> i32 {
        let file = Tmux::exit_file(home);
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                return text.trim().parse().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "waited {PATIENCE:?} for stet to exit after the hangup; its log ends:\n{}",
                log_tail(home)
            );
            std::thread::sleep(POLL);
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-u")
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

    /// What tmux says of the pane for `format` (`#{alternate_on}`, ...).
    fn display(&self, format: &str) -> String {
        let output = self
            .command()
            .args(["display-message", "-p", "-t", "theater", format])
            .output()
            .unwrap();
        assert!(output.status.success(), "tmux display-message: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// Whether the pane shows the alternate screen.
    fn alternate_on(&self) -> bool {
        match self.display("#{alternate_on}").as_str() {
            "0" => false,
            "1" => true,
            other => panic!("alternate_on is {other:?}"),
        }
    }

    /// The pane terminal's `stty -a` words, read from outside while stet runs in it.
    fn stty_from_outside(&self) -> Vec<String> {
        let tty = self.display("#{pane_tty}");
        let output = Command::new("stty")
            .args(["-a", "-F", &tty])
            .output()
            .unwrap();
        assert!(output.status.success(), "stty -a -F {tty}: {output:?}");
        String::from_utf8(output.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// The theater owns the terminal: the alternate screen is on and the terminal is raw.
    fn assert_taken(&self) {
        assert!(self.alternate_on(), "the alternate screen is off");
        let stty = self.stty_from_outside();
        for flag in SANE_FLAGS {
            let off = format!("-{flag}");
            assert!(stty.contains(&off), "the terminal is not raw: {stty:?}");
        }
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

    /// Types `text` literally, each character a key.
    fn type_text(&self, text: &str) {
        let sent = self
            .command()
            .args(["send-keys", "-t", "theater", "-l", text])
            .status()
            .unwrap();
        assert!(sent.success(), "tmux send-keys -l {text:?}: {sent}");
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

    /// Waits until the screen shows every one of `texts`; returns it.
    fn until_shown(&self, what: &str, texts: &[&str]) -> String {
        self.until(what, || {
            let screen = self.screen();
            texts
                .iter()
                .all(|text| screen.contains(text))
                .then_some(screen)
        })
    }

    /// The pid of the stet the pane runs.
    fn stet_pid(&self) -> u32 {
        self.until("stet's pid file", || {
            std::fs::read_to_string(&self.pid_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        })
    }

    /// Waits for stet to exit and the shell after it to run `stty -a`, then asserts the terminal
    /// was given back: stet exited with `status` after printing only `printed` on the normal
    /// screen, the alternate screen is off, and the terminal echoes and edits lines again.
    fn assert_given_back(&self, status: i32, printed: &[String]) {
        let screen = self.until("stet to exit and the shell to run stty -a", || {
            let screen = self.screen();
            screen.contains(STTY_END).then_some(screen)
        });
        let (above, below) = screen.split_once("stet exited with status ").unwrap();
        let (exit_status, below) = below.split_once('\n').unwrap();
        let (stty, _) = below.split_once(STTY_END).unwrap();
        assert_eq!(
            exit_status.trim(),
            status.to_string(),
            "the exit status:\n{screen}"
        );
        let left: Vec<&str> = above
            .lines()
            .map(str::trim_end)
            .filter(|line| !line.is_empty())
            .collect();
        assert_eq!(
            left, printed,
            "what stet left on the shell's screen:\n{screen}"
        );
        assert!(!self.alternate_on(), "the alternate screen is still on");
        let stty: Vec<&str> = stty.split_whitespace().collect();
        for flag in SANE_FLAGS {
            assert!(stty.contains(&flag), "stty -a lacks {flag}:\n{screen}");
            let off = format!("-{flag}");
            assert!(
                !stty.contains(&off.as_str()),
                "stty -a says {off}:\n{screen}"
            );
        }
    }
}

impl Drop for Tmux {
    /// Ends the test's tmux server (a stet still running gets SIGHUP and tears down), sends that stet
    /// SIGTERM too (a pane that ignores SIGHUP passes none on; a first SIGTERM quits the way `q`
    /// does), and waits a bounded while for it to be gone, so a failed test leaves no sandbox and no
    /// stet behind.
    fn drop(&mut self) {
        // After a hangup test there is no server left to end: that says nothing.
        let _ = self
            .command()
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
        let Some(pid) = std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        else {
            return;
        };
        // Only while the pid is still this test's stet: a pid that ended may be reused.
        let still_stet = || {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(env!("CARGO_BIN_EXE_stet").as_bytes()))
        };
        if still_stet() {
            let _ = signal(pid, "TERM");
        }
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline && still_stet() {
            std::thread::sleep(POLL);
        }
    }
}

/// The last lines of stet's logs in `home`, to say what it was doing.
fn log_tail(home: &Home) -> String {
    let mut lines: Vec<String> = files_under(&home.state().join("logs"))
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.drain(..lines.len().saturating_sub(20));
    lines.join("\n")
}

/// A registry on loopback whose pulls never finish: it answers docker's first probes (the TLS
/// attempt with a plain-HTTP refusal, so docker falls back to HTTP as it does for a loopback
/// registry; `GET /v2/` with "a registry"), then never answers the manifest request. A listener that
/// answered nothing would let docker fail the pull after about 25 s (its TLS and ping timeouts); this
/// one keeps provisioning in flight until stet stops waiting. (Docker 20.10 keeps the request open
/// even then: the engine does not abandon a pull its client gave up.)
struct StalledRegistry {
    address: std::net::SocketAddr,
    /// One message per manifest request held.
    manifest_requests: std::sync::mpsc::Receiver<()>,
}

impl StalledRegistry {
    fn start() -> StalledRegistry {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (requested, manifest_requests) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(connection) = connection else { continue };
                let requested = requested.clone();
                std::thread::spawn(move || StalledRegistry::serve(connection, &requested));
            }
        });
        StalledRegistry {
            address,
            manifest_requests,
        }
    }

    fn serve(mut connection: std::net::TcpStream, requested: &std::sync::mpsc::Sender<()>) {
        use std::io::{Read, Write};
        let mut head = Vec::new();
        let mut chunk = [0u8; 4096];
        while !head.starts_with(&[0x16]) && !head.windows(4).any(|end| end == b"\r\n\r\n") {
            match connection.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(read) => head.extend_from_slice(&chunk[..read]),
            }
        }
        let answer: &[u8] = if head.starts_with(&[0x16]) {
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        } else if head.starts_with(b"GET /v2/ ") {
            b"HTTP/1.1 200 OK\r\nDocker-Distribution-API-Version: registry/2.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        } else {
            // The manifest (or anything else): never answered, held while docker holds it.
            let _ = requested.send(());
            let _ = connection.read_to_end(&mut Vec::new());
            return;
        };
        let _ = connection.write_all(answer);
    }

    /// `stet@sha256:<digest>` on this registry, pinned as stet requires.
    fn image(&self) -> String {
        format!("{}/stet@sha256:{}", self.address, "5".repeat(64))
    }

    /// Waits until docker asked for the manifest: the pull is under way and holds there.
    fn until_pulling(&self) {
        self.manifest_requests
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|error| panic!("docker never asked for the manifest: {error}"));
    }
}

/// Whether a timeline line shows `phase` in progress (a spinner in front of its label).
fn in_progress(screen: &str, phase: Phase) -> bool {
    SPINNER
        .iter()
        .any(|spinner| screen.contains(&format!("{spinner} {} ", phase.label())))
}

/// Dispatches the selected brief `id` (Enter, then `y` once the confirmation asks) and waits until
/// the timeline shows it running past preflight and provisioning and the transcript shows `thought`.
/// Returns its dispatch id (the run record not in `before`), whose record went through preflight and
/// provisioning to running and whose sandbox container runs.
fn dispatch_until_thinking(
    tmux: &Tmux,
    home: &Home,
    id: &str,
    thought: &str,
    before: &[DispatchId],
) -> DispatchId {
    tmux.press("Enter");
    tmux.until_shown("the dispatch confirmation", &[&format!("Dispatch {id}?")]);
    tmux.press("y");
    tmux.until(
        "the timeline at running and the agent's first thought",
        || {
            let screen = tmux.screen();
            (screen.contains("✓ preflight")
                && screen.contains("✓ provisioning")
                && in_progress(&screen, Phase::Running)
                && screen.contains("[running]")
                && screen.contains(thought))
            .then_some(())
        },
    );
    let dispatch = tmux.until("the dispatch's run record", || {
        home.dispatches()
            .into_iter()
            .find(|dispatch| !before.contains(dispatch))
    });
    let events = tmux.until("the running phase in the run record", || {
        let events = home.events(dispatch);
        phases(&events).contains(&Phase::Running).then_some(events)
    });
    assert_eq!(
        phases(&events)[..3],
        [Phase::Preflight, Phase::Provisioning, Phase::Running],
        "{events:#?}"
    );
    assert_eq!(
        containers_of(dispatch),
        [dispatch.to_string()],
        "the sandbox runs"
    );
    dispatch
}

/// Nothing of `dispatch` is left: no container (labelled as its sandbox or named after it), no
/// dispatch directory, no journal record.
fn assert_gone(home: &Home, dispatch: DispatchId) {
    assert_nothing_left(home, dispatch);
    assert_eq!(
        containers_where("name", dispatch.to_string()),
        Vec::<String>::new(),
        "a container named {dispatch}"
    );
}

/// After its terminal hung up, stet exited with `status` 3 having cancelled `dispatch` and torn it
/// down, before any sweep: its result says cancelled, and no container, no dispatch directory and no
/// journal record is left.
/// `theater`: the theater ran it, and its record says why it was cancelled.
fn assert_torn_down_by_the_hangup(home: &Home, status: i32, dispatch: DispatchId, theater: bool) {
    assert_eq!(
        status,
        3,
        "stet's exit status; its log ends:\n{}",
        log_tail(home)
    );
    let result = home.result(dispatch).unwrap_or_else(|| {
        panic!(
            "no result for {dispatch}; the log ends:\n{}",
            log_tail(home)
        )
    });
    assert_eq!(result.outcome, Phase::Cancelled, "{result:#?}");
    if theater {
        let reason = result.reason.as_ref().map(|reason| reason.as_str());
        assert!(
            reason.is_some_and(|reason| reason.ends_with(": the terminal went away")),
            "{result:#?}"
        );
    }
    assert_gone(home, dispatch);
    let dispatches: Vec<PathBuf> = std::fs::read_dir(home.state().join("dispatches"))
        .map(|listing| listing.map(|entry| entry.unwrap().path()).collect())
        .unwrap_or_default();
    assert_eq!(dispatches, Vec::<PathBuf>::new(), "dispatch directories");
    assert_eq!(
        files_under(&home.state().join("journal")),
        Vec::<PathBuf>::new(),
        "journal records"
    );
}

/// The terminal goes away while a dispatch provisions: the image is pulled from a registry that
/// never answers the manifest, so provisioning cannot finish first. The pane's shell dies of the
/// hangup, so SIGHUP reaches stet too. stet stops waiting for the pull, removes the workspace,
/// outputs and credential, closes the journal record and exits 3.
#[test]
fn hanging_up_during_provisioning_tears_the_dispatch_down() {
    docker_ready();
    let registry = StalledRegistry::start();
    let project = Project::new(&forever());
    let home = &project.home;
    // The image is a machine setting: the user's configuration names it, not the repository's.
    home.add_user_config(&format!("\n[dispatch]\nimage = \"{}\"\n", registry.image()));
    let tmux = Tmux::start_to_hang_up(home, &project.repo, &[], Leader::DiesOfIt);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.press("Enter");
    tmux.until_shown("the dispatch confirmation", &["Dispatch tidy-notes?"]);
    tmux.press("y");
    registry.until_pulling();
    tmux.until("the timeline at provisioning", || {
        in_progress(&tmux.screen(), Phase::Provisioning).then_some(())
    });
    let dispatch = tmux.until("the dispatch's run record", || {
        home.dispatches().first().copied()
    });
    let directory = home.state().join("dispatches").join(dispatch.to_string());
    assert!(directory.is_dir(), "the workspace is made before the pull");
    let killed = Instant::now();
    tmux.kill_session();
    let status = tmux.exit_status_after_hangup(home);
    let took = killed.elapsed();
    assert_torn_down_by_the_hangup(home, status, dispatch, true);
    eprintln!("tui: hung up during provisioning; stet exited {took:?} later");
}

/// The terminal goes away while the demo's agent works, and SIGHUP comes more than once (the
/// pane's shell dies of the hangup, so the kernel sends one; the test two more): stet cancels the
/// run, waits for the container, workspace, outputs and credential to go, and exits 3.
#[test]
fn hanging_up_while_a_demo_dispatch_runs_tears_it_down_however_often_sighup_comes() {
    docker_ready();
    let home = Home::new();
    let briefs = demo_briefs();
    let brief = &briefs[0];
    let tmux = Tmux::start_to_hang_up(&home, home.path(), &home.demo_args(), Leader::DiesOfIt);
    tmux.until_shown("the demo's inbox", &[&format!("▸ [new] {}", brief.title)]);
    let dispatch = dispatch_until_thinking(&tmux, &home, &brief.id, &first_thought(&brief.id), &[]);
    let pid = tmux.stet_pid();
    let killed = Instant::now();
    tmux.kill_session();
    // stet may be gone already: whether these find it does not matter.
    for _ in 0..2 {
        let _ = signal(pid, "HUP");
    }
    let status = tmux.exit_status_after_hangup(&home);
    let took = killed.elapsed();
    assert_torn_down_by_the_hangup(&home, status, dispatch, true);
    eprintln!("tui: hung up while running; stet exited {took:?} later");
}

/// A hostile agent leaves a process running in the background and finishes: while a person
/// reviews its result, nothing of it runs any more. Its container (and so that process) is gone
/// before the result is collected, and its workspace and outputs once it is; the review needs only
/// the imported commit, which the gate's diff shows.
#[test]
fn nothing_of_the_agent_runs_while_a_person_reviews() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "daemon = [\"stet\", \"sandbox-idle\"]",
        "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\nthree\\nfour\\n\" }",
        "finish = \"Added a fourth note, and left a helper running.\"",
    ]));
    let home = &project.home;
    let tmux = Tmux::start(home, &project.repo, &[]);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.press("Enter");
    tmux.until_shown("the dispatch confirmation", &["Dispatch tidy-notes?"]);
    tmux.press("y");
    tmux.until_shown(
        "the review gate",
        &["Review — tidy-notes: awaiting approval", "+four"],
    );
    let dispatch = home.dispatches()[0];
    let events = home.events(dispatch);
    assert!(
        events.iter().any(|event| matches!(&event.kind, EventKind::Transcript(item) if item.text.as_str().contains("in the background"))),
        "the agent started its background process: {events:#?}"
    );
    assert_eq!(
        containers_of(dispatch),
        Vec::<String>::new(),
        "no container at review"
    );
    let directory = home.state().join("dispatches").join(dispatch.to_string());
    assert!(!directory.join("workspace").exists() && !directory.join("outputs").exists());
    tmux.press("x");
    tmux.until_shown("the discard confirmation", &["Discard the result of "]);
    tmux.press("y");
    tmux.until_shown(
        "the discarded outcome",
        &["outcome: cancelled (exit 3)", "[discarded]"],
    );
    assert_gone(home, dispatch);
    tmux.press("q");
    tmux.assert_given_back(0, &[]);
}

/// The terminal goes away while a run waits at the review gate, and no signal comes at all (the
/// pane's shell ignores SIGHUP): stet notices by itself that its terminal is gone, discards the run
/// and exits 3.
#[test]
fn hanging_up_at_the_review_gate_discards_the_run_without_any_signal() {
    docker_ready();
    let home = Home::new();
    let briefs = demo_briefs();
    let brief = &briefs[0];
    let tmux = Tmux::start_to_hang_up(&home, home.path(), &home.demo_args(), Leader::IgnoresIt);
    tmux.until_shown("the demo's inbox", &[&format!("▸ [new] {}", brief.title)]);
    let dispatch = dispatch_until_thinking(&tmux, &home, &brief.id, &first_thought(&brief.id), &[]);
    tmux.until_shown(
        "the review gate",
        &[
            &format!("Review — {}: awaiting approval", brief.id),
            "[awaiting review]",
        ],
    );
    tmux.until("the review gate in the run record", || {
        phases(&home.events(dispatch))
            .contains(&Phase::AwaitingApproval)
            .then_some(())
    });
    let killed = Instant::now();
    tmux.kill_session();
    let status = tmux.exit_status_after_hangup(&home);
    let took = killed.elapsed();
    assert_torn_down_by_the_hangup(&home, status, dispatch, true);
    let phases = phases(&home.events(dispatch));
    assert!(
        phases.ends_with(&[Phase::AwaitingApproval, Phase::Cancelled]),
        "{phases:?}"
    );
    eprintln!("tui: hung up at the review gate; stet exited {took:?} later");
}

/// `stet --headless` in a terminal that goes away mid-run: its JSON Lines (stdout) and progress
/// (stderr) now fail with EIO, and SIGHUP comes more than once. Nothing panics: it cancels, tears
/// down and exits 3.
#[test]
fn hanging_up_the_terminal_of_stet_headless_tears_its_dispatch_down() {
    docker_ready();
    let project = Project::new(&forever());
    let home = &project.home;
    let args = ["--headless", "--brief", "tidy-notes", "--timeout", "2m"].map(str::to_owned);
    let tmux = Tmux::start_to_hang_up(home, &project.repo, &args, Leader::DiesOfIt);
    tmux.until_shown("the agent's first words", &["I will keep at it."]);
    let dispatch = tmux.until("the dispatch's run record", || {
        home.dispatches().first().copied()
    });
    assert_eq!(
        containers_of(dispatch),
        [dispatch.to_string()],
        "the sandbox runs"
    );
    let pid = tmux.stet_pid();
    let killed = Instant::now();
    tmux.kill_session();
    // stet may be gone already: whether these find it does not matter.
    for _ in 0..2 {
        let _ = signal(pid, "HUP");
    }
    let status = tmux.exit_status_after_hangup(home);
    let took = killed.elapsed();
    assert_torn_down_by_the_hangup(home, status, dispatch, false);
    eprintln!("tui: hung up stet --headless; it exited {took:?} later");
}

/// With nothing running nothing is drawn that could fail, and with the pane's shell ignoring SIGHUP
/// no signal comes: stet still notices that its terminal went away, and exits 3 instead of staying
/// behind for ever.
#[test]
fn hanging_up_at_the_inbox_without_any_signal_ends_stet() {
    docker_ready();
    let project = Project::new(&forever());
    let home = &project.home;
    let tmux = Tmux::start_to_hang_up(home, &project.repo, &[], Leader::IgnoresIt);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.kill_session();
    assert_eq!(
        tmux.exit_status_after_hangup(home),
        3,
        "stet's exit status; its log ends:\n{}",
        log_tail(home)
    );
    assert_eq!(home.dispatches(), Vec::<DispatchId>::new());
}

#[test]
fn the_demo_theater_cancels_reviews_opens_the_pull_request_and_quits() {
    docker_ready();
    let home = Home::new();
    let briefs = demo_briefs();
    let (first, second) = (&briefs[0], &briefs[1]);
    let tmux = Tmux::start(&home, home.path(), &home.demo_args());
    let started = Instant::now();

    // The theater opens on the demo's inbox; nothing is dispatched until a person asks.
    let inbox = tmux.until_shown(
        "the demo's inbox",
        &[
            &format!("Inbox ({})", briefs.len()),
            &format!("▸ [new] {}", first.title),
            &format!("[new] {}", second.title),
            "not dispatched yet: Enter dispatches it",
        ],
    );
    let opened = started.elapsed();
    tmux.assert_taken();
    assert!(inbox.contains("0 running"), "{inbox}");
    assert_eq!(home.dispatches(), Vec::<DispatchId>::new());

    // Enter + y dispatches the selected brief; c + y cancels it, and the timeline says how it ended
    // and what was torn down.
    let cancelled =
        dispatch_until_thinking(&tmux, &home, &first.id, &first_thought(&first.id), &[]);
    tmux.press("c");
    tmux.until_shown(
        "the cancel confirmation",
        &[
            &format!("Cancel {}?", first.id),
            &cancelled.to_string(),
            "The agent is stopped and the sandbox torn down.",
        ],
    );
    tmux.press("y");
    let screen = tmux.until_shown(
        "the cancelled outcome and the teardown",
        &[
            &format!("[cancelled] {}", first.title),
            "outcome: cancelled (exit 3)",
            "teardown (",
            &format!("✓ container {cancelled}"),
            "✓ workspace ",
            "✓ outputs directory ",
            "✓ local credential ",
        ],
    );
    assert!(!screen.contains('✗'), "a teardown step failed:\n{screen}");
    let result = tmux.until("the cancelled result", || home.result(cancelled));
    assert_eq!(result.outcome, Phase::Cancelled, "{result:#?}");
    assert_gone(&home, cancelled);

    // `/` searches the cancelled dispatch's transcript for its first thought and pins it in view;
    // Tab gives the keys back to the inbox.
    tmux.press("/");
    tmux.type_text(&first_thought(&first.id));
    tmux.press("Enter");
    tmux.until_shown(
        "the search's match",
        &["· n older · N newer", "— paused, G follows — /"],
    );
    tmux.press("Tab");

    // The second brief runs to the review gate, which shows the diffstat; p pushes it and opens the
    // pull request, which the inbox badge and the timeline name.
    tmux.press("j");
    tmux.until_shown(
        "the second brief selected",
        &[&format!("▸ [new] {}", second.title)],
    );
    let reviewed = dispatch_until_thinking(
        &tmux,
        &home,
        &second.id,
        &first_thought(&second.id),
        &[cancelled],
    );
    let gate = tmux.until_shown(
        "the review gate",
        &[
            &format!("Review — {}: awaiting approval", second.id),
            "[awaiting review]",
            "file(s) changed, +",
            "M src/count.rs",
            "M README.md",
            "p push & open PR",
            "diff --git a/",
            "diff lines 1–",
        ],
    );
    // The patch scrolls under j.
    tmux.press("j");
    tmux.until_shown("the diff scrolled by a line", &["diff lines 2–"]);
    // A turn of the mouse wheel over the gate (an SGR mouse report, as a terminal sends it) scrolls
    // it three lines further.
    tmux.type_text("\u{1b}[<65;120;20M");
    tmux.until_shown("the diff scrolled by the wheel", &["diff lines 5–"]);
    let recorded = tmux.until("the review gate in the run record", || {
        let phases = phases(&home.events(reviewed));
        phases.contains(&Phase::AwaitingApproval).then_some(phases)
    });
    assert!(
        recorded.ends_with(&[Phase::Running, Phase::Collecting, Phase::AwaitingApproval]),
        "{recorded:?}\n{gate}"
    );
    // p asks first: the push cannot be undone.
    tmux.press("p");
    tmux.until_shown(
        "the push confirmation",
        &[&format!("Push {}?", second.id), "This cannot be undone."],
    );
    tmux.press("y");
    let review_file = home.state().join("reviews").join("1.json");
    let screen = tmux.until_shown(
        "the pull request on screen",
        &[
            "[PR #1]",
            "outcome: done (exit 0)",
            "pushed ",
            &format!("PR #1 opened: {}", review_file.display()),
        ],
    );
    let review: ReviewRecord = tmux.until("the local forge's review record", || {
        serde_json::from_str(&std::fs::read_to_string(&review_file).ok()?).ok()
    });
    assert_eq!(review.number, 1);
    assert_eq!(review.base, "main");
    let remote = home.demo_dir().join("remote.git");
    assert_eq!(review.remote, remote);
    assert!(
        screen.contains(&format!("pushed {} → ", review.head)),
        "the branch on screen is {}:\n{screen}",
        review.head
    );
    let pushed = git(
        &remote,
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{}", review.head),
        ],
    );
    assert!(review.body.contains(&pushed), "{}", review.body);
    let done = tmux.until("the reviewed result", || home.result(reviewed));
    assert_eq!(done.outcome, Phase::Done, "{done:#?}");
    let all_phases = phases(&home.events(reviewed));
    assert!(
        all_phases.ends_with(&[
            Phase::AwaitingApproval,
            Phase::Pushing,
            Phase::OpeningPr,
            Phase::Done
        ]),
        "{all_phases:?}"
    );
    assert_gone(&home, reviewed);

    // q quits (nothing is running): the shell is back with a sane terminal and, below where the
    // theater was, the demo's closing hints.
    tmux.press("q");
    tmux.assert_given_back(0, &home.demo_hints());
    eprintln!(
        "tui: demo inbox shown after {opened:?}, whole run {:?}",
        started.elapsed()
    );
}

#[test]
fn sigterm_at_the_inbox_gives_the_terminal_back() {
    docker_ready();
    let project = Project::new(&forever());
    let tmux = Tmux::start(&project.home, &project.repo, &[]);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.assert_taken();
    assert!(signal(tmux.stet_pid(), "TERM").success());
    // A first signal quits the way q does; the theater prints nothing.
    tmux.assert_given_back(0, &[]);
}

/// A SIGHUP sent by hand while the terminal is still there: stet takes it as a hangup (it quits
/// and exits 3), but finds the terminal alive and gives it back.
#[test]
fn a_sighup_with_the_terminal_still_there_gives_it_back() {
    docker_ready();
    let project = Project::new(&forever());
    let tmux = Tmux::start(&project.home, &project.repo, &[]);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.assert_taken();
    assert!(signal(tmux.stet_pid(), "HUP").success());
    tmux.assert_given_back(3, &[]);
}

#[test]
fn sigterm_during_a_demo_dispatch_tears_it_down_and_gives_the_terminal_back() {
    docker_ready();
    let home = Home::new();
    let briefs = demo_briefs();
    let brief = &briefs[0];
    let tmux = Tmux::start(&home, home.path(), &home.demo_args());
    tmux.until_shown("the demo's inbox", &[&format!("▸ [new] {}", brief.title)]);
    let dispatch = dispatch_until_thinking(&tmux, &home, &brief.id, &first_thought(&brief.id), &[]);
    tmux.assert_taken();
    assert!(signal(tmux.stet_pid(), "TERM").success());
    // The signal cancels the dispatch, and stet waits for its teardown before it exits.
    tmux.assert_given_back(0, &home.demo_hints());
    let result = home
        .result(dispatch)
        .unwrap_or_else(|| panic!("no result for {dispatch}"));
    assert_eq!(result.outcome, Phase::Cancelled, "{result:#?}");
    assert_gone(&home, dispatch);
}

/// The agent floods its output as fast as it can; a key pressed meanwhile is acted on while the flood
/// is still arriving (the help overlay opens before the flood's lines have all been recorded), and
/// a cancel in the middle of it stops it with the usual teardown.
#[test]
fn a_key_is_acted_on_while_the_agent_floods() {
    docker_ready();
    const FLOOD_LINES: usize = 600_000;
    let project = Project::new(&format!(
        "model = \"m\"\n[[step]]\nsay = \"Flooding now.\"\n[[step]]\nflood = {{ lines = {FLOOD_LINES}, bytes_per_line = 50 }}\n[[step]]\nforever = true\n"
    ));
    let home = &project.home;
    let tmux = Tmux::start(home, &project.repo, &[]);
    tmux.until_shown("the project's inbox", &["Inbox (1)"]);
    tmux.press("Enter");
    tmux.until_shown("the dispatch confirmation", &["Dispatch tidy-notes?"]);
    tmux.press("y");
    tmux.until_shown(
        "the flood on screen",
        &["abcdefghijklmnopqrstuvwxyzabcdefghij"],
    );
    tmux.press("?");
    tmux.until_shown("the help overlay", &["Keys", "close help"]);
    let dispatch = home.dispatches()[0];
    let flooded = |events: &[Event]| {
        events
            .iter()
            .filter(|event| {
                matches!(&event.kind, EventKind::Transcript(item) if item.text.as_str().starts_with("abcdefghij"))
            })
            .count()
    };
    let recorded = flooded(&home.events(dispatch));
    assert!(
        recorded < FLOOD_LINES,
        "the key waited for the whole flood: {recorded} of {FLOOD_LINES} lines were recorded first"
    );
    tmux.press("Escape");
    // An escape and a key read together are one Alt-key: press `c` only once the help is closed.
    tmux.until("the help overlay closed", || {
        (!tmux.screen().contains("close help")).then_some(())
    });
    tmux.press("c");
    tmux.until_shown("the cancel confirmation", &["Cancel tidy-notes?"]);
    tmux.press("y");
    tmux.until_shown(
        "the cancelled outcome",
        &["outcome: cancelled (exit 3)", "teardown ("],
    );
    assert_gone(home, dispatch);
    tmux.press("q");
    tmux.assert_given_back(0, &[]);
}

/// The inbox becomes a link to a directory outside the repository while the theater is open (as a
/// `git pull` in another terminal could make it): saving a brief from the form fails with a message
/// naming the link, and nothing is written where it points or anywhere else outside the repository.
#[test]
fn the_form_writes_nothing_through_an_inbox_that_became_a_link() {
    docker_ready();
    let project = Project::new(&forever());
    let tmux = Tmux::start(&project.home, &project.repo, &[]);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    let outside = project.home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let inbox = project.repo.join(".stet/briefs");
    std::fs::rename(&inbox, project.home.path().join("moved-briefs")).unwrap();
    std::os::unix::fs::symlink(&outside, &inbox).unwrap();
    let before = files_under(project.home.path());

    tmux.press("n");
    tmux.until_shown("the new-brief form", &["New brief"]);
    tmux.type_text("Escape the repository");
    for _ in 0..3 {
        tmux.press("Tab");
    }
    tmux.type_text("write somewhere else");
    tmux.press("C-s");
    let screen = tmux.until_shown(
        "the save refused",
        &["cannot save the brief", "not written: it is a link"],
    );
    assert!(
        screen.contains(&*inbox.to_string_lossy()),
        "the message names the link:\n{screen}"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "a brief was written through the link"
    );
    let written: Vec<PathBuf> = files_under(project.home.path())
        .into_iter()
        .filter(|file| !before.contains(file) && file.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert!(written.is_empty(), "briefs written: {written:?}");
}

/// A brief of about `bytes` bytes (one item holding nearly all of them) that the parser accepts.
fn brief_of_about(bytes: usize) -> String {
    let head = "title = \"A large brief\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n\n[[items]]\ntext = \"";
    format!("{head}{}\"\n", "x".repeat(bytes - head.len() - 2))
}

/// `count` briefs `b0000.toml`, … in `inbox`, each a hard link to one file of `text` kept in
/// `home` (each is a regular file of its full size to whoever lists the inbox; the disk holds one).
fn fill_inbox(home: &Home, inbox: &Path, count: usize, text: &str) {
    let source = home.path().join("brief-source.toml");
    std::fs::write(&source, text).unwrap();
    for index in 0..count {
        std::fs::hard_link(&source, inbox.join(format!("b{index:04}.toml"))).unwrap();
    }
}

/// The pane runs `stet` under `/usr/bin/time`, which prints its peak RSS once it exits.
fn start_timed(home: &Home, dir: &Path) -> Tmux {
    let script = format!(
        "/usr/bin/time -f 'stet peak %M KiB' {}\necho \"stet exited with status $?\"\nexec cat\n",
        stet_command(home, &[])
    );
    Tmux::launch(home, dir, &script)
}

/// A repository ships 3,000 briefs of about 1 MB each (the issue's inbox: 5.7 GiB of RSS and half a
/// minute before the first frame when every brief was parsed): the theater refuses the inbox before
/// reading any brief, naming the count, the limit and the setting, and its peak RSS stays small.
#[test]
fn an_inbox_of_thousands_of_large_briefs_is_refused_before_any_is_read() {
    let project = Project::new(&forever());
    let inbox = project.repo.join(".stet/briefs");
    fill_inbox(&project.home, &inbox, 3000, &brief_of_about(1_000_000));
    let tmux = start_timed(&project.home, &project.repo);
    let screen = tmux.until_shown("stet to exit", &["stet exited with status"]);
    let joined = screen.replace('\n', "");
    for said in ["3001 briefs", "at most 1000", "inbox.max_briefs"] {
        assert!(joined.contains(said), "{said:?} is not said:\n{screen}");
    }
    assert!(screen.contains("stet exited with status 2"), "{screen}");
    let peak_kib: u64 = screen
        .split("stet peak ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|figure| figure.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS on the screen:\n{screen}"));
    assert!(
        peak_kib < INBOX_PEAK_KIB,
        "stet's peak RSS was {peak_kib} KiB (bound {INBOX_PEAK_KIB} KiB)"
    );
}

/// The most memory stet may use listing an inbox it refuses, in KiB: well under one brief per
/// megabyte of the inbox's 3 GB.
const INBOX_PEAK_KIB: u64 = 64 * 1024;

/// An inbox at its default limits (1,000 briefs, 16 MiB together): the theater draws its first
/// frame with every brief listed, and its peak RSS (VmHWM, read while it runs) stays within a
/// bound that does not depend on what a larger inbox would hold.
#[test]
fn the_theater_draws_an_inbox_at_its_limits_within_its_memory_budget() {
    docker_ready();
    let project = Project::new(&forever());
    let inbox = project.repo.join(".stet/briefs");
    // 999 briefs of 16 KiB and the project's own: 1,000 briefs, just under 16 MiB.
    fill_inbox(&project.home, &inbox, 999, &brief_of_about(16 * 1024));
    let tmux = Tmux::start(&project.home, &project.repo, &[]);
    tmux.until_shown("the whole inbox", &["Inbox (1000)"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", tmux.stet_pid())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|figure| figure.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in:\n{status}"));
    assert!(
        peak_kib < THEATER_PEAK_KIB,
        "the theater's peak RSS was {peak_kib} KiB (bound {THEATER_PEAK_KIB} KiB)"
    );
}

/// The most memory the theater may have used once it shows an inbox at its limits, in KiB.
const THEATER_PEAK_KIB: u64 = 256 * 1024;

/// The theater with a repository's costliest legal protected-path rules and an agent leaving deep
/// paths under many links (`suite::costly_settings`): `c` + `y` while the review gate matches cancels the
/// dispatch, and within a second of the cancelled event stet's CPU time, read from
/// `/proc/<pid>/stat`, stops growing, though the theater stays open (before, the matching went on
/// on its blocking thread, a core busy, until the person quit).
#[test]
fn cancelling_while_the_gate_matches_costly_rules_idles_the_theater() {
    use super::costly_settings::{
        assert_went_idle, costly_project, cpu_over_window, cpu_ticks, until_busy,
    };

    docker_ready();
    let project = costly_project();
    let home = &project.home;
    let tmux = Tmux::start(home, &project.repo, &[]);
    tmux.until_shown(
        "the project's inbox",
        &["Inbox (1)", &format!("▸ [new] {PROJECT_TITLE}")],
    );
    tmux.press("Enter");
    tmux.until_shown("the dispatch confirmation", &["Dispatch tidy-notes?"]);
    tmux.press("y");
    let pid = tmux.stet_pid();
    let dispatch = tmux.until("the dispatch's run record", || {
        home.dispatches().into_iter().next()
    });
    tmux.until("the collecting phase in the run record", || {
        phases(&home.events(dispatch))
            .contains(&Phase::Collecting)
            .then_some(())
    });
    let collecting = cpu_ticks(pid).unwrap();
    if let Err(used) = until_busy(pid, collecting, "collecting") {
        panic!(
            "stet ended after {used} ticks of collecting; its log ends:\n{}",
            log_tail(home)
        );
    }
    let busy = cpu_over_window(pid);
    tmux.press("c");
    tmux.until_shown("the cancel confirmation", &["Cancel tidy-notes?"]);
    tmux.press("y");
    tmux.until("the cancelled phase in the run record", || {
        phases(&home.events(dispatch))
            .contains(&Phase::Cancelled)
            .then_some(())
    });
    // Idle once the dispatch has ended and its teardown (which removes the agent's deep tree) is
    // done: before, the matching went on until the person quit.
    tmux.until_shown("the cancelled outcome", &["outcome: cancelled (exit 3)"]);
    let after_cancel = cpu_over_window(pid);
    assert_went_idle(busy, after_cancel, "the theater");
    tmux.press("q");
    tmux.assert_given_back(0, &[]);
}

/// A dispatch killed while its agent worked is salvaged by the theater's launch sweep and listed in
/// its inbox as salvaged, with its diff; `p` and `y` on it push nothing (issue 29, item 15).
#[test]
fn the_theater_lists_a_salvaged_result_with_its_diff_and_never_pushes_it() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "write = { path = \"src/notes.txt\", content = \"tidied by the agent\\n\" }",
        "say = \"I wrote src/notes.txt and keep at it.\"",
        "forever = true",
    ]));
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    let at = watched.until("the agent's write", |event| {
        matches!(&event.kind, EventKind::Transcript(item) if item.text.as_str().contains("wrote"))
    });
    assert_eq!(watched.kill().signal(), Some(9));
    let reference = format!("refs/stet/{}", at.dispatch);

    let tmux = Tmux::start(&project.home, &project.repo, &[]);
    tmux.until_shown(
        "the salvaged result in the inbox",
        &["Inbox (2)", &format!("[salvaged] {PROJECT_TITLE}")],
    );
    tmux.press("j");
    tmux.until_shown(
        "the salvaged result's diff",
        &[
            "salvaged, incomplete, not pushed",
            &format!("kept at {reference}"),
            "+tidied by the agent",
        ],
    );
    tmux.press("p");
    tmux.until_shown(
        "why p pushes nothing",
        &["nothing to push: a salvaged result is incomplete"],
    );
    tmux.press("y");
    tmux.press("q");
    tmux.until_shown("stet to exit", &["stet exited with status 0"]);
    // Nothing went out: the remote holds main alone, and the work stays at its ref.
    assert_eq!(
        git(&project.remote, &["for-each-ref", "--format=%(refname)"]),
        "refs/heads/main"
    );
    let kept = git(&project.repo, &["rev-parse", "--verify", &reference]);
    assert_eq!(
        git(&project.repo, &["show", &format!("{kept}:src/notes.txt")]),
        "tidied by the agent"
    );
}
