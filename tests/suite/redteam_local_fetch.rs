//! Red-team attacks on the base fetch from a local-path remote (first `git fetch` in a process group
//! of its own, which they broke; now git's plumbing, `git/push/local_fetch.rs`). Each test proves by effect (a marker file, a ref, an object, a process,
//! an error's words) that a hostile remote, the user's repository configuration or a stop cannot make
//! that fetch run a program, read another repository, write a ref or leave a process behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stet_engine::git::origin_guard::{Origin, TransferBounds};
use stet_engine::git::push::{fetch_commit, fetch_commit_until};
use stet_sanitize::branch::CommitSha;
use tokio_util::sync::CancellationToken;

use super::support::{alive, git, processes_naming};

/// The running processes whose command line holds every one of `needles`.
fn live_processes_naming(needles: &[&str]) -> Vec<u32> {
    processes_naming(needles)
        .into_iter()
        .filter(|pid| alive(*pid))
        .collect()
}

/// Runs git in `dir` with nothing from the host's configuration deciding identities; its stdout.
/// A repository at `dir` whose `main` holds one commit with `message`; that commit.
fn repository_with_commit(dir: &Path, message: &str) -> CommitSha {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
    CommitSha::parse(&git(dir, &["rev-parse", "HEAD"])).unwrap()
}

/// An empty user repository at `dir`.
fn user_repository(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "trunk"]);
    dir.to_owned()
}

fn has_object(repository: &Path, commit: &CommitSha) -> bool {
    Command::new("git")
        .args(["cat-file", "-e", commit.as_str()])
        .current_dir(repository)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_remote_section_named_by_the_url_in_the_users_config_runs_no_upload_pack_program() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let user = user_repository(&dir.path().join("user"));
    let url = file_url(&remote);
    let marker = dir.path().join("upload-pack-ran");
    git(
        &user,
        &[
            "config",
            &format!("remote.{url}.uploadpack"),
            &format!("touch {}; git-upload-pack", marker.display()),
        ],
    );

    let fetched = fetch_commit(&user, &url, "main", &commit, None);

    assert!(
        !marker.exists(),
        "git ran `remote.<url>.uploadpack` from the user's repository config (fetch: {fetched:?}); \
         libgit2's anonymous remote never read it"
    );
}

#[test]
fn a_remote_section_named_by_the_url_in_the_users_config_writes_no_ref() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let user = user_repository(&dir.path().join("user"));
    let url = file_url(&remote);
    git(
        &user,
        &[
            "config",
            &format!("remote.{url}.fetch"),
            "refs/heads/*:refs/heads/planted/*",
        ],
    );

    fetch_commit(&user, &url, "main", &commit, None).unwrap();

    let refs = git(&user, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(
        refs, "",
        "the fetch that writes no ref wrote one through `remote.<url>.fetch`"
    );
}

#[test]
fn a_remote_section_named_by_the_url_in_the_users_config_reads_no_other_repository() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    repository_with_commit(&remote, "base");
    let other = dir.path().join("other");
    let secret = repository_with_commit(&other, "secret");
    let user = user_repository(&dir.path().join("user"));
    let url = file_url(&remote);
    git(
        &user,
        &[
            "config",
            &format!("remote.{url}.url"),
            &other.display().to_string(),
        ],
    );

    let fetched = fetch_commit(&user, &url, "main", &secret, None);

    assert!(
        !has_object(&user, &secret),
        "a fetch from {url} brought {secret} from {} (fetch: {fetched:?})",
        other.display()
    );
}

#[test]
fn an_alternate_refs_command_in_the_users_config_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let neighbour = dir.path().join("neighbour");
    repository_with_commit(&neighbour, "neighbour");
    let user = user_repository(&dir.path().join("user"));
    std::fs::write(
        user.join(".git/objects/info/alternates"),
        format!("{}\n", neighbour.join(".git/objects").display()),
    )
    .unwrap();
    let marker = dir.path().join("alternate-refs-ran");
    let program = dir.path().join("alternate-refs");
    script(&program, &format!("touch {}", marker.display()));
    git(
        &user,
        &[
            "config",
            "core.alternateRefsCommand",
            &program.display().to_string(),
        ],
    );

    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &commit, None);

    assert!(
        !marker.exists(),
        "git ran core.alternateRefsCommand from the user's repository config (fetch: {fetched:?})"
    );
}

#[test]
fn a_hostile_remotes_own_configuration_and_hooks_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let program = dir.path().join("program");
    script(
        &program,
        &format!("touch {}/\"$1\"; shift; exec \"$@\"", marks.display()),
    );
    let hooks = dir.path().join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    for hook in ["pre-upload", "post-upload", "reference-transaction"] {
        script(
            &hooks.join(hook),
            &format!("touch {}/hook-{hook}", marks.display()),
        );
    }
    let program = program.display().to_string();
    for (key, value) in [
        ("uploadpack.packObjectsHook", format!("{program} pack")),
        ("core.fsmonitor", format!("{program} fsmonitor")),
        ("core.sshCommand", format!("{program} ssh")),
        ("core.alternateRefsCommand", format!("{program} alt")),
        ("core.hooksPath", hooks.display().to_string()),
    ] {
        git(&remote, &["config", key, &value]);
    }
    let user = user_repository(&dir.path().join("user"));

    fetch_commit(&user, &remote.display().to_string(), "main", &commit, None).unwrap();

    let ran: Vec<_> = std::fs::read_dir(&marks)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(ran.is_empty(), "the remote's settings ran {ran:?}");
    assert!(has_object(&user, &commit));
}

#[test]
fn an_http_url_stet_cannot_parse_is_not_fetched_over_the_network_by_git() {
    // check_url accepts a loopback http URL with a character http::Uri refuses; stet then finds no
    // origin, takes the URL for a local path and hands it to `git fetch`: protocol.allow=never must
    // refuse git's own http transport, which no origin guard watches.
    let dir = tempfile::tempdir().unwrap();
    let user = user_repository(&dir.path().join("user"));
    let commit = CommitSha::parse(&"1".repeat(40)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = ['"', '<', '>', '\\', '^', '`']
        .iter()
        .map(|odd| format!("http://127.0.0.1:{port}/r{odd}po.git"))
        .find(|url| Origin::of(url).is_none())
        .expect("a URL http::Uri refuses");

    let fetched = fetch_commit(&user, &url, "main", &commit, None);

    assert!(fetched.is_err(), "{fetched:?}");
    assert!(
        listener.accept().is_err(),
        "git connected to {url} over http ({fetched:?})"
    );
}

#[test]
fn a_missing_remote_is_reported_in_words_that_say_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let user = user_repository(&dir.path().join("user"));
    let missing = dir.path().join("no-such-forge");
    let commit = CommitSha::parse(&"2".repeat(40)).unwrap();

    let err = fetch_commit(&user, &missing.display().to_string(), "main", &commit, None)
        .unwrap_err()
        .to_string();

    assert!(
        err.contains("repository") && !err.ends_with("and the repository exists."),
        "the error keeps only the tail of git's advice, not what failed: {err}"
    );
}

#[test]
fn a_stop_is_prompt_and_leaves_no_process_even_when_the_fetch_started_a_session_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let user = user_repository(&dir.path().join("user"));
    let url = file_url(&remote);
    let pidfile = dir.path().join("escaped.pid");
    // A program of the fetch that leaves stet's process group, keeping git's stderr open.
    git(
        &user,
        &[
            "config",
            &format!("remote.{url}.uploadpack"),
            &format!(
                "setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 60' & sleep 60",
                pidfile.display()
            ),
        ],
    );
    let stop = CancellationToken::new();
    let fetch = {
        let (user, url, commit, stop) = (user.clone(), url.clone(), commit.clone(), stop.clone());
        std::thread::spawn(move || {
            fetch_commit_until(
                &user,
                &url,
                "main",
                &commit,
                None,
                TransferBounds::default(),
                &stop,
            )
        })
    };
    let started = Instant::now();
    while !pidfile.exists() && started.elapsed() < Duration::from_secs(20) {
        std::thread::yield_now();
    }
    let escaped: Option<u32> = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|pid| pid.trim().parse().ok());

    let stopped_at = Instant::now();
    stop.cancel();
    while !fetch.is_finished() && stopped_at.elapsed() < Duration::from_secs(10) {
        std::thread::yield_now();
    }
    let took = stopped_at.elapsed();
    let survived = escaped.filter(|pid| alive(*pid));
    if let Some(pid) = escaped {
        // Only the process this test's own fetch started.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let _ = fetch.join();

    assert!(
        escaped.is_none() || (survived.is_none() && took < Duration::from_secs(2)),
        "the stop took {took:?}; the fetch's process {survived:?} outlived it"
    );
}

#[test]
fn a_protocol_allowed_in_the_users_config_does_not_take_the_local_fetch_over_the_network() {
    // protocol.<name>.allow beats the fetch's `-c protocol.allow=never`: a user who allows http for
    // their own git lets stet's "local" fetch speak http where no origin guard watches it.
    let dir = tempfile::tempdir().unwrap();
    let user = user_repository(&dir.path().join("user"));
    git(&user, &["config", "protocol.http.allow", "always"]);
    let commit = CommitSha::parse(&"3".repeat(40)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "http://127.0.0.1:{}/r<po.git",
        listener.local_addr().unwrap().port()
    );
    assert!(Origin::of(&url).is_none());
    let stop = CancellationToken::new();
    let fetch = {
        let (user, url, commit, stop) = (user.clone(), url.clone(), commit.clone(), stop.clone());
        std::thread::spawn(move || {
            fetch_commit_until(
                &user,
                &url,
                "main",
                &commit,
                None,
                TransferBounds::default(),
                &stop,
            )
        })
    };
    let started = Instant::now();
    let mut connected = false;
    while !fetch.is_finished() && started.elapsed() < Duration::from_secs(10) {
        if listener.accept().is_ok() {
            connected = true;
            stop.cancel();
        }
        std::thread::yield_now();
    }
    stop.cancel();
    let fetched = fetch.join().unwrap();

    assert!(
        !connected,
        "stet's local fetch spoke http to {url}, past its origin guard ({fetched:?})"
    );
}

/// This process's peak resident memory, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_base_commit_that_inflates_to_hundreds_of_megabytes_does_not_take_the_hosts_memory() {
    // A remote of about a megabyte whose branch head is a 200 MB commit (a message that compresses
    // a thousandfold): git's fetch and stet itself inflate it whole.
    const MESSAGE: usize = 200 << 20;
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    std::fs::create_dir(&remote).unwrap();
    git(&remote, &["init", "-q", "-b", "main"]);
    let mut hash = Command::new("git")
        .args(["hash-object", "-t", "commit", "-w", "--stdin"])
        .current_dir(&remote)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = std::io::BufWriter::new(hash.stdin.take().unwrap());
        stdin
            .write_all(
                b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\
                  author a <a@example.invalid> 1 +0000\n\
                  committer a <a@example.invalid> 1 +0000\n\n",
            )
            .unwrap();
        let line = [b'x'; 1023];
        for _ in 0..MESSAGE / 1024 {
            stdin.write_all(&line).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
    }
    let output = hash.wait_with_output().unwrap();
    assert!(output.status.success());
    let commit = CommitSha::parse(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
    git(&remote, &["update-ref", "refs/heads/main", commit.as_str()]);
    let user = user_repository(&dir.path().join("user"));
    let before = peak_kib();

    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &commit, None);

    let grown_mib = peak_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "stet's peak memory rose {grown_mib} MiB fetching a base from a ~1 MB remote ({fetched:?})"
    );
}

/// A dispatch whose base the repository lacks, from a local forge whose git blocks (its
/// commit-graph file is a FIFO no one writes), is sent `signals`; the git processes of its base fetch
/// still running once stet has exited.
fn fetch_processes_after_stet_gets(signals: &[&str]) -> (Option<i32>, Vec<u32>) {
    use super::headless::{Project, docker_ready, forever};
    docker_ready();
    let project = Project::new(&forever());
    let elsewhere = project.home.path().join("elsewhere");
    git(
        project.home.path(),
        &[
            "clone",
            "-q",
            &project.remote.display().to_string(),
            "elsewhere",
        ],
    );
    git(
        &elsewhere,
        &["commit", "-q", "--allow-empty", "-m", "newer base"],
    );
    git(&elsewhere, &["push", "-q", "origin", "main"]);
    let alternates = project.remote.join("objects/info/commit-graph");
    std::fs::create_dir_all(alternates.parent().unwrap()).unwrap();
    let made = Command::new("mkfifo").arg(&alternates).status().unwrap();
    assert!(made.success());
    let remote = project.remote.display().to_string();

    let mut stet = project
        .headless(&[])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(project.home.path().join("stet.out")).unwrap())
        .stderr(std::fs::File::create(project.home.path().join("stet.err")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut fetching = Vec::new();
    while fetching.is_empty() && started.elapsed() < Duration::from_secs(60) {
        if stet.try_wait().unwrap().is_some() {
            break;
        }
        fetching = live_processes_naming(&[&remote, "--git-dir"]);
        std::thread::yield_now();
    }
    if fetching.is_empty() {
        let _ = stet.kill();
        let _ = stet.wait();
        let out = std::fs::read_to_string(project.home.path().join("stet.out")).unwrap_or_default();
        let err = std::fs::read_to_string(project.home.path().join("stet.err")).unwrap_or_default();
        panic!("the dispatch's base fetch never reached the blocking remote: {out}\n{err}");
    }
    for signal in signals {
        let _ = Command::new("kill")
            .args([*signal, &stet.id().to_string()])
            .status();
    }
    let waited = Instant::now();
    let mut code = None;
    while waited.elapsed() < Duration::from_secs(30) {
        if let Some(status) = stet.try_wait().unwrap() {
            code = status.code();
            break;
        }
        std::thread::yield_now();
    }
    let _ = stet.kill();
    let _ = stet.wait();
    // The kernel signals a dead parent's children as it reaps it: give that a moment to land.
    let reaped = Instant::now();
    let mut left = live_processes_naming(&[&remote]);
    while !left.is_empty() && reaped.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
        left = live_processes_naming(&[&remote]);
    }
    for pid in &left {
        // Only what this test's own stet started: they name this test's remote.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    (code, left)
}

#[test]
fn a_killed_stet_leaves_no_git_process_of_its_base_fetch_running() {
    let (code, left) = fetch_processes_after_stet_gets(&["-KILL"]);
    assert!(
        left.is_empty(),
        "stet was killed (exit {code:?}); its base fetch's processes {left:?} ran on, and no sweep \
         knows of them"
    );
}

#[test]
fn a_second_interrupt_of_stet_leaves_no_git_process_of_its_base_fetch_running() {
    let (code, left) = fetch_processes_after_stet_gets(&["-INT", "-INT"]);
    assert!(
        left.is_empty(),
        "stet exited at the second SIGINT (exit {code:?}); its base fetch's processes {left:?} ran on"
    );
}

#[test]
fn an_interrupt_of_stet_ends_its_base_fetch() {
    let (code, left) = fetch_processes_after_stet_gets(&["-INT"]);
    assert!(
        left.is_empty(),
        "stet ended at a SIGINT (exit {code:?}); its base fetch's processes {left:?} ran on"
    );
}

#[test]
fn a_fetch_that_fails_because_the_branch_moved_leaves_no_pack_in_the_users_repository() {
    // fetch.rs: "Nothing of a fetch that is stopped or fails stays in the user's repository."
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    repository_with_commit(&remote, "what the branch leads to now");
    std::fs::write(remote.join("payload"), vec![b'p'; 1 << 20]).unwrap();
    git(&remote, &["add", "payload"]);
    git(&remote, &["commit", "-q", "-m", "payload"]);
    let user = user_repository(&dir.path().join("user"));
    let pack = user.join(".git/objects/pack");
    let before: Vec<_> = std::fs::read_dir(&pack).unwrap().collect();
    let gone = CommitSha::parse(&"4".repeat(40)).unwrap();

    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &gone, None);

    let after: Vec<String> = std::fs::read_dir(&pack)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(fetched.is_err(), "{fetched:?}");
    assert_eq!(
        after.len(),
        before.len(),
        "the failed fetch ({fetched:?}) left {after:?} in the user's repository"
    );
}

/// The highest VmHWM, in KiB, of any process whose working directory is `cwd`.
fn peak_of_processes_in(cwd: &Path) -> u64 {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|dir| dir == cwd))
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .max()
        .unwrap_or(0)
}

/// The address space stet gives each git of a local fetch (`git/push/local_fetch.rs`).
const MAX_GIT_ADDRESS_SPACE: u64 = 1 << 30;

/// The blob of zeros: resolving a delta against it takes twice its size, past the bound.
const ZEROS: u64 = 600 << 20;

#[test]
fn a_tiny_remote_holding_a_delta_of_a_huge_blob_does_not_take_the_hosts_memory_in_git() {
    // A remote of a few hundred KB: a 600 MB blob of zeros and a delta of another against it. The
    // fetch's index-pack must hold base and result whole to resolve the delta (1.2 GB); its
    // address space is bounded, so it fails instead.
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    std::fs::create_dir(&remote).unwrap();
    git(&remote, &["init", "-q", "-b", "main"]);
    let blob = remote.join("zeros");
    std::fs::File::create(&blob)
        .unwrap()
        .set_len(ZEROS)
        .unwrap();
    git(&remote, &["add", "zeros"]);
    git(&remote, &["commit", "-q", "-m", "zeros"]);
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&blob)
            .unwrap();
        file.write_all(b"tail\n").unwrap();
    }
    git(&remote, &["add", "zeros"]);
    git(&remote, &["commit", "-q", "-m", "zeros and a tail"]);
    git(
        &remote,
        &[
            "-c",
            "core.bigFileThreshold=2g",
            "repack",
            "-adfq",
            "--window=10",
        ],
    );
    std::fs::remove_file(&blob).unwrap();
    let commit = CommitSha::parse(&git(&remote, &["rev-parse", "HEAD"])).unwrap();
    let user = user_repository(&dir.path().join("user"));
    let git_dir = std::fs::canonicalize(user.join(".git")).unwrap();

    let fetch = {
        let (user, url, commit) = (user.clone(), remote.display().to_string(), commit.clone());
        std::thread::spawn(move || fetch_commit(&user, &url, "main", &commit, None))
    };
    let mut peak = 0;
    while !fetch.is_finished() {
        peak = peak.max(peak_of_processes_in(&git_dir));
        std::thread::yield_now();
    }
    let fetched = fetch.join().unwrap();

    let peak_mib = peak / 1024;
    assert!(
        peak_mib < MAX_GIT_ADDRESS_SPACE >> 20,
        "the base fetch's git processes peaked at {peak_mib} MiB on a remote of {} KiB ({fetched:?})",
        du_kib(&remote.join(".git"))
    );
}

fn du_kib(path: &Path) -> String {
    let output = Command::new("du").arg("-sk").arg(path).output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

/// A user repository whose configuration rewrites the remote's URL to another repository's, through
/// `config` (a closure writing it); whether the other repository's commit came in, and the fetch.
fn rewritten_fetch(config: impl Fn(&Path, &Path, &Path)) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    repository_with_commit(&remote, "base");
    let other = dir.path().join("other");
    let secret = repository_with_commit(&other, "secret");
    let user = user_repository(&dir.path().join("user"));
    config(&user, &remote, &other);
    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &secret, None);
    (has_object(&user, &secret), format!("{fetched:?}"))
}

#[test]
fn an_instead_of_rule_in_the_users_config_is_refused_not_followed() {
    let (read, fetched) = rewritten_fetch(|user, remote, other| {
        git(
            user,
            &[
                "config",
                &format!("url.{}.insteadOf", other.display()),
                &remote.display().to_string(),
            ],
        );
    });
    assert!(!read, "the fetch followed the rewrite ({fetched})");
    assert!(fetched.contains("UrlRewritten"), "{fetched}");
}

#[test]
fn an_instead_of_rule_behind_a_hasconfig_include_is_refused_not_followed() {
    // libgit2 checks for a rewrite; git alone reads `includeIf "hasconfig:remote.*.url:…"`.
    let (read, fetched) = rewritten_fetch(|user, remote, other| {
        git(
            user,
            &["remote", "add", "origin", &remote.display().to_string()],
        );
        let included = user.join("rewrite.cfg");
        std::fs::write(
            &included,
            format!(
                "[url \"{}\"]\n\tinsteadOf = {}\n",
                other.display(),
                remote.display()
            ),
        )
        .unwrap();
        git(
            user,
            &[
                "config",
                &format!("includeIf.hasconfig:remote.*.url:{}.path", remote.display()),
                &included.display().to_string(),
            ],
        );
    });
    assert!(
        !read,
        "git followed a rewrite libgit2 did not see, reading another repository ({fetched})"
    );
}

#[test]
fn a_branch_that_is_a_refspec_or_a_pattern_is_refused_before_any_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_commit(&remote, "base");
    let user = user_repository(&dir.path().join("user"));
    for branch in [
        "main:refs/heads/planted",
        "*",
        "+main",
        "^main",
        "main:",
        "-main",
    ] {
        let fetched = fetch_commit(&user, &remote.display().to_string(), branch, &commit, None);
        assert!(fetched.is_err(), "branch {branch:?}: {fetched:?}");
    }
    assert!(!has_object(&user, &commit));
    assert_eq!(git(&user, &["for-each-ref"]), "");
}
