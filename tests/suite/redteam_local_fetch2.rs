//! Second round of red-team attacks on the base fetch from a local-path remote, now git's plumbing
//! (`git/push/local_fetch.rs`): a remote that is a shallow clone, a partial-clone remote whose
//! promisor would run a program, a stop while git is blocked on a FIFO in the remote, a branch that
//! is an endless file, the remote's trace2 settings. Each test proves by effect (the user's object
//! graph, a marker file, a process, the time a stop takes, git's own out-of-memory error).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stet_engine::git::origin_guard::TransferBounds;
use stet_engine::git::push::{fetch_commit, fetch_commit_until};
use stet_sanitize::branch::CommitSha;
use tokio_util::sync::CancellationToken;

use super::support::{git, processes_naming};

/// Runs git in `dir` with nothing from the host's configuration deciding identities; its stdout.
/// A repository at `dir` whose `main` holds `commits` commits, each with a file of its own; its tip.
fn repository_with_history(dir: &Path, commits: usize) -> CommitSha {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    for n in 0..commits {
        std::fs::write(dir.join(format!("f{n}")), format!("content {n}\n")).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", &format!("commit {n}")]);
    }
    CommitSha::parse(&git(dir, &["rev-parse", "HEAD"])).unwrap()
}

/// An empty user repository at `dir`.
fn user_repository(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "trunk"]);
    dir.to_owned()
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Whether git in `repository` can walk every object `commit` reaches.
fn connected(repository: &Path, commit: &CommitSha) -> (bool, String) {
    let output = Command::new("git")
        .args(["rev-list", "--objects", commit.as_str()])
        .current_dir(repository)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    )
}

#[test]
fn a_remote_that_is_a_shallow_clone_does_not_leave_a_commit_without_its_parents() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    repository_with_history(&upstream, 3);
    let remote = dir.path().join("remote");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            &format!("file://{}", upstream.display()),
            &remote.display().to_string(),
        ],
    );
    let commit = CommitSha::parse(&git(&remote, &["rev-parse", "HEAD"])).unwrap();
    let user = user_repository(&dir.path().join("user"));

    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &commit, None);

    let (whole, said) = connected(&user, &commit);
    assert!(
        fetched.is_err() || whole || user.join(".git/shallow").exists(),
        "the fetch succeeded ({fetched:?}) yet left {commit} in the user's repository without its \
         parents and no shallow record: `git rev-list --objects` there fails: {said}"
    );
}

#[test]
fn a_partial_clone_remote_missing_the_bases_tree_runs_no_promisor_transport() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_history(&remote, 1);
    let tree = git(
        &remote,
        &["rev-parse", &format!("{}^{{tree}}", commit.as_str())],
    );
    // Loose objects only, then the tree removed: the remote lacks what the commit needs.
    let loose = remote
        .join(".git/objects")
        .join(&tree[..2])
        .join(&tree[2..]);
    std::fs::remove_file(&loose).unwrap();
    let marker = dir.path().join("promisor-ran");
    let program = dir.path().join("ssh");
    script(&program, &format!("touch {}; exit 1", marker.display()));
    for (key, value) in [
        ("core.repositoryformatversion", "1".to_owned()),
        ("extensions.partialClone", "origin".to_owned()),
        ("remote.origin.url", "ssh://promisor.invalid/r".to_owned()),
        ("remote.origin.promisor", "true".to_owned()),
        ("core.sshCommand", program.display().to_string()),
    ] {
        git(&remote, &["config", key, &value]);
    }
    let user = user_repository(&dir.path().join("user"));

    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &commit, None);

    assert!(
        !marker.exists(),
        "git ran the remote's promisor transport (core.sshCommand) for a missing object \
         (fetch: {fetched:?})"
    );
    assert!(fetched.is_err(), "a remote missing a tree gave {fetched:?}");
}

/// A remote whose `file` (relative to its git directory) is replaced by a FIFO nobody writes; how
/// long a stop took once git was blocked on it, and the processes left naming the remote.
fn stopped_on_fifo(file: &str, wire: impl Fn(&Path)) -> (Duration, Vec<u32>, bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote-fifo");
    let commit = repository_with_history(&remote, 1);
    wire(&remote);
    let fifo = remote.join(".git").join(file);
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let user = user_repository(&dir.path().join("user"));
    let stop = CancellationToken::new();
    let url = remote.display().to_string();
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
    // Wait until a git of the fetch is running in the remote (and so blocked on the FIFO).
    let started = Instant::now();
    while processes_naming(&[&url]).is_empty() && started.elapsed() < Duration::from_secs(20) {
        std::thread::yield_now();
    }
    let reached = !processes_naming(&[&url]).is_empty();
    let stopped_at = Instant::now();
    stop.cancel();
    while !fetch.is_finished() && stopped_at.elapsed() < Duration::from_secs(10) {
        std::thread::yield_now();
    }
    let took = stopped_at.elapsed();
    let left = processes_naming(&[&url]);
    if !fetch.is_finished() {
        // Unblock the FIFO so this test's own thread ends.
        let _ = std::fs::write(&fifo, b"");
    }
    let ended = format!("{:?}", fetch.join().unwrap());
    (took, left, reached, ended)
}

#[test]
fn a_stop_ends_a_fetch_whose_remote_branch_is_a_fifo_and_leaves_no_git() {
    let (took, left, reached, ended) = stopped_on_fifo("refs/heads/main", |_| {});
    assert!(
        ended.contains("Stopped"),
        "the fetch ended {ended}, not by the stop"
    );
    assert!(reached, "no git of the fetch ever ran in the remote");
    assert!(took < Duration::from_secs(2), "the stop took {took:?}");
    assert!(
        left.is_empty(),
        "git processes left after the stop: {left:?}"
    );
}

#[test]
fn a_stop_ends_a_fetch_whose_remote_config_includes_a_fifo_and_leaves_no_git() {
    let (took, left, reached, ended) = stopped_on_fifo("included", |remote| {
        git(remote, &["config", "include.path", "included"]);
    });
    assert!(
        ended.contains("Stopped"),
        "the fetch ended {ended}, not by the stop"
    );
    assert!(reached, "no git of the fetch ever ran in the remote");
    assert!(took < Duration::from_secs(2), "the stop took {took:?}");
    assert!(
        left.is_empty(),
        "git processes left after the stop: {left:?}"
    );
}

#[test]
fn a_remote_branch_that_is_a_symlink_to_an_endless_file_ends_at_the_address_space_bound() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_history(&remote, 1);
    let branch = remote.join(".git/refs/heads/main");
    std::fs::remove_file(&branch).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &branch).unwrap();
    let user = user_repository(&dir.path().join("user"));

    let started = Instant::now();
    let fetched = fetch_commit(&user, &remote.display().to_string(), "main", &commit, None);
    let took = started.elapsed();

    let said = format!("{fetched:?}");
    assert!(
        said.contains("Out of memory"),
        "git read the endless ref without meeting its address-space bound: {said}"
    );
    assert!(took < Duration::from_secs(30), "the fetch took {took:?}");
}

#[test]
fn a_remotes_trace2_settings_record_nothing_of_the_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let commit = repository_with_history(&remote, 2);
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    for (key, name) in [
        ("trace2.eventTarget", "event"),
        ("trace2.normalTarget", "normal"),
        ("trace2.perfTarget", "perf"),
    ] {
        git(
            &remote,
            &["config", key, &traces.join(name).display().to_string()],
        );
    }
    let user = user_repository(&dir.path().join("user"));

    fetch_commit(&user, &remote.display().to_string(), "main", &commit, None).unwrap();

    let written: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|entry| entry.file_name()))
        .collect();
    assert!(
        written.is_empty(),
        "the remote's trace2 settings recorded the fetch (the user's ref tips asked of cat-file \
         among them): {written:?}"
    );
}
