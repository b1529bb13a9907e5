//! A hostile repository's base, materialized (DESIGN §5 rows 16 and 23, §8): a branch `git clone`
//! fetches but never checks out can hold blobs of GiB that compress to a MiB, trees naming each other
//! into a million paths, or a path thousands of directories deep. Each is refused from the object
//! headers before a blob is read, proven by effect: objects whose header claims GiB but whose
//! content is a few bytes (reading one would fail with a corrupt object, not a limit), a destination
//! left empty, and, against the built binary, stet's peak RSS under a stated bound while real
//! zero-filled blobs of GiB sit in the repository. A legitimate base with a 150 MiB file dispatches,
//! and the agent's edit of another file is pushed: the import's limits bound the change only. A
//! cancel while a large base is written ends the writing and its git processes at once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{FileMode, ObjectType, Oid, Repository, Signature};
use stet_engine::git::workspace::{BaseLimits, WorkspaceError, materialize_within};
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_protocol::event::EventKind;
use stet_protocol::state::Phase;
use stet_sanitize::branch::CommitSha;

use super::costly_settings::{assert_went_idle, cpu_over_window};
use super::headless::{
    Finished, Project, STET_VARIABLES, Watched, assert_nothing_left, docker_ready, run, scenario,
    signal,
};
use super::support::git;

const GIB: u64 = 1 << 30;

/// A repository of the test's own, where hostile bases are made.
struct Hostile {
    root: tempfile::TempDir,
    repo: PathBuf,
}

impl Hostile {
    fn new() -> Hostile {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        Hostile { root, repo }
    }

    fn open(&self) -> Repository {
        Repository::open(&self.repo).unwrap()
    }

    /// A loose object whose header claims `claimed` bytes of `kind` while its content is a few
    /// bytes: its header reads fine, reading it whole fails.
    fn claimed(&self, kind: &str, claimed: u64) -> Oid {
        let mut content = format!("{kind} {claimed}\0").into_bytes();
        content.extend_from_slice(b"only this");
        let id = Oid::hash_object(ObjectType::Blob, uuid::Uuid::new_v4().as_bytes()).unwrap();
        let hex = id.to_string();
        let directory = self.repo.join(".git/objects").join(&hex[..2]);
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::write(directory.join(&hex[2..]), stored_zlib(&content)).unwrap();
        id
    }

    /// A tree naming each of `entries` (name, id, mode), written without libgit2's name checks.
    fn tree(&self, entries: &[(&[u8], Oid, FileMode)]) -> Oid {
        let mut sorted: Vec<_> = entries.to_vec();
        sorted.sort_by_key(tree_order);
        let mut raw = Vec::new();
        for (name, id, mode) in sorted {
            write!(raw, "{:o} ", i32::from(mode)).unwrap();
            raw.extend_from_slice(name);
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        self.open()
            .odb()
            .unwrap()
            .write(ObjectType::Tree, &raw)
            .unwrap()
    }

    fn blob(&self, content: &[u8]) -> Oid {
        self.open().blob(content).unwrap()
    }

    fn commit(&self, tree: Oid) -> CommitSha {
        let repo = self.open();
        let tree = repo.find_tree(tree).unwrap();
        let signature = Signature::now("hostile", "hostile@example.invalid").unwrap();
        let id = repo
            .commit(None, &signature, &signature, "hostile", &tree, &[])
            .unwrap();
        CommitSha::parse(&id.to_string()).unwrap()
    }

    /// Materializes `base` within `limits` into a fresh directory: the error, and the directory.
    fn refused(&self, base: &CommitSha, limits: &BaseLimits) -> (WorkspaceError, PathBuf) {
        let destination = self
            .root
            .path()
            .join(format!("workspace-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&destination).unwrap();
        let owner = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap();
        let error = materialize_within(&self.repo, base, &destination, owner, limits).unwrap_err();
        (error, destination)
    }
}

/// Git's tree order: a directory sorts as if its name ended in `/`.
fn tree_order(entry: &(&[u8], Oid, FileMode)) -> Vec<u8> {
    let mut key = entry.0.to_vec();
    if entry.2 == FileMode::Tree {
        key.push(b'/');
    }
    key
}

/// A zlib stream of stored blocks (no compression), as git reads any.
fn stored_zlib(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = data.chunks(0xffff).collect();
    for (index, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(index + 1 == chunks.len()));
        let length = chunk.len() as u16;
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&(!length).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let (mut a, mut b) = (1_u32, 0_u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// A tree of `levels` levels, each naming the one below `fanout` times, over a leaf of `leaf`.
fn bomb(hostile: &Hostile, levels: usize, fanout: usize, leaf: Oid) -> Oid {
    let names: Vec<Vec<u8>> = (0..fanout).map(|i| format!("d{i}").into_bytes()).collect();
    let mut below = leaf;
    for _ in 0..levels {
        let entries: Vec<(&[u8], Oid, FileMode)> = names
            .iter()
            .map(|name| (name.as_slice(), below, FileMode::Tree))
            .collect();
        below = hostile.tree(&entries);
    }
    below
}

fn assert_over(error: &WorkspaceError, setting: &str, destination: &Path) {
    assert!(
        matches!(error, WorkspaceError::OverLimit { setting: named, .. } if *named == setting),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(setting), "{message}");
    assert!(message.contains("the base "), "{message}");
    assert_eq!(
        std::fs::read_dir(destination).unwrap().count(),
        0,
        "nothing was written: {message}"
    );
}

#[test]
fn a_blob_of_gib_is_refused_from_its_header_and_never_read() {
    let hostile = Hostile::new();
    let huge = hostile.claimed("blob", 3 * GIB);
    let tree = hostile.tree(&[(b"zeros.bin", huge, FileMode::Blob)]);
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert_over(&error, "base.max_file_bytes", &destination);
    let message = error.to_string();
    assert!(
        message.contains("\"zeros.bin\" of 3221225472 bytes (3.0 GiB)"),
        "{message}"
    );
    assert!(message.contains(base.as_str()), "{message}");
}

#[test]
fn many_paths_to_gib_blobs_are_refused_by_their_sum() {
    let hostile = Hostile::new();
    let one = hostile.claimed("blob", GIB);
    let other = hostile.claimed("blob", GIB);
    let tree = hostile.tree(&[
        (b"a", one, FileMode::Blob),
        (b"b", other, FileMode::Blob),
        (b"c", one, FileMode::BlobExecutable),
    ]);
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert_over(&error, "base.max_total_bytes", &destination);
}

#[test]
fn tree_bombs_are_refused_by_their_count_or_their_sum_without_walking_each_path() {
    let hostile = Hostile::new();
    // A million paths to one small file.
    let small = hostile.blob(b"x\n");
    let leaf = hostile.tree(&[(b"f", small, FileMode::Blob)]);
    let million = hostile.commit(bomb(&hostile, 6, 10, leaf));
    let (error, destination) = hostile.refused(&million, &BaseLimits::default());
    assert_over(&error, "base.max_files", &destination);

    // A hundred thousand paths, each to the same 64 KiB: 6.4 GiB.
    let chunk = hostile.blob(&vec![b'z'; 64 * 1024]);
    let leaf = hostile.tree(&[(b"f", chunk, FileMode::Blob)]);
    let spread = hostile.commit(bomb(&hostile, 5, 10, leaf));
    let (error, destination) = hostile.refused(&spread, &BaseLimits::default());
    assert_over(&error, "base.max_total_bytes", &destination);
}

#[test]
fn a_deep_tree_is_refused_with_its_depth() {
    let hostile = Hostile::new();
    let mut tree = hostile.tree(&[(b"f", hostile.blob(b"deep\n"), FileMode::Blob)]);
    for _ in 0..300 {
        tree = hostile.tree(&[(b"d", tree, FileMode::Tree)]);
    }
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert_over(&error, "base.max_depth", &destination);
    // A project that lowers the limit is refused sooner.
    let (error, destination) = hostile.refused(
        &base,
        &BaseLimits {
            max_depth: 8,
            ..BaseLimits::default()
        },
    );
    assert_over(&error, "base.max_depth", &destination);
    assert!(error.to_string().contains("= 8"), "{error}");
}

#[test]
fn a_tree_or_commit_object_claiming_a_huge_size_is_never_read() {
    let hostile = Hostile::new();
    let tree = hostile.claimed("tree", GIB);
    let wrapper = hostile.tree(&[(b"dir", tree, FileMode::Tree)]);
    let base = hostile.commit(wrapper);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert!(
        matches!(error, WorkspaceError::Malformed { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("\"dir\""), "{error}");
    assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);

    let commit = hostile.claimed("commit", GIB);
    let base = CommitSha::parse(&commit.to_string()).unwrap();
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert!(
        matches!(error, WorkspaceError::Malformed { .. }),
        "{error:?}"
    );
    assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);
}

#[test]
fn names_no_checkout_writes_are_refused_before_anything_is_written() {
    for name in [&b".."[..], b".git", b".GIT", b"git~1", b"."] {
        let hostile = Hostile::new();
        let payload = hostile.blob(b"#!/bin/sh\n");
        let hooks = hostile.tree(&[(b"post-checkout", payload, FileMode::BlobExecutable)]);
        let tree = hostile.tree(&[(name, hooks, FileMode::Tree)]);
        let base = hostile.commit(tree);
        let (error, destination) = hostile.refused(&base, &BaseLimits::default());
        assert!(
            matches!(error, WorkspaceError::Malformed { .. }),
            "{}: {error:?}",
            String::from_utf8_lossy(name)
        );
        assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);
    }
}

/// A name longer than a file system takes, and a path longer than Linux takes (17 directories of
/// 250-byte names: 4,266 bytes), are refused from the trees, before anything is written, naming
/// what is too long.
#[test]
fn names_and_paths_longer_than_linux_takes_are_refused_before_anything_is_written() {
    let hostile = Hostile::new();
    let file = hostile.blob(b"hello\n");
    let long_name = vec![b'n'; 256];
    let tree = hostile.tree(&[(long_name.as_slice(), file, FileMode::Blob)]);
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert!(
        matches!(error, WorkspaceError::Malformed { .. })
            && error.to_string().contains("a name of 256 bytes"),
        "{error:?}"
    );
    assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);

    let hostile = Hostile::new();
    let mut tree = hostile.tree(&[(b"leaf", hostile.blob(b"hello\n"), FileMode::Blob)]);
    let level = vec![b'd'; 250];
    for _ in 0..17 {
        tree = hostile.tree(&[(level.as_slice(), tree, FileMode::Tree)]);
    }
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert!(
        matches!(error, WorkspaceError::Malformed { .. })
            && error.to_string().contains("longer than Linux takes (4095)"),
        "{error:?}"
    );
    assert!(error.to_string().len() < 1024, "{error}");
    assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);
}

/// A base whose paths run long: a chain of 15 directories of 250-byte names (3,765 bytes) named ten
/// times at the top, over a directory of 1,000 files. Some 10,000 entries and a few bytes of content,
/// far inside every other `[base]` limit, but 38 MB of path names that the checkout would write and
/// the host hold in the index. Refused from the trees alone, naming `base.max_path_bytes`.
#[test]
fn a_base_of_long_paths_is_refused_by_their_bytes_before_anything_is_written() {
    let hostile = Hostile::new();
    let file = hostile.blob(b"x\n");
    let names: Vec<Vec<u8>> = (0..1000).map(|i| format!("f{i:04}").into_bytes()).collect();
    let leaves: Vec<(&[u8], Oid, FileMode)> = names
        .iter()
        .map(|name| (name.as_slice(), file, FileMode::Blob))
        .collect();
    let mut chain = hostile.tree(&leaves);
    let long = vec![b'p'; 250];
    for _ in 0..15 {
        chain = hostile.tree(&[(&long, chain, FileMode::Tree)]);
    }
    let tops: Vec<Vec<u8>> = (0..10u8)
        .map(|i| {
            let mut name = vec![b'a' + i];
            name.extend_from_slice(&[b'q'; 249]);
            name
        })
        .collect();
    let top: Vec<(&[u8], Oid, FileMode)> = tops
        .iter()
        .map(|name| (name.as_slice(), chain, FileMode::Tree))
        .collect();
    let base = hostile.commit(hostile.tree(&top));
    let (error, destination) = hostile.refused(&base, &BaseLimits::default());
    assert_over(&error, "base.max_path_bytes", &destination);
    assert!(error.to_string().contains("paths of at least"), "{error}");
}

/// The path bytes are counted as the checkout writes them, exactly: `a`, `dir` and `dir/bb` are 10.
#[test]
fn a_base_is_refused_one_byte_of_paths_past_its_limit() {
    let hostile = Hostile::new();
    let file = hostile.blob(b"hello\n");
    let dir = hostile.tree(&[(b"bb", file, FileMode::Blob)]);
    let tree = hostile.tree(&[(b"a", file, FileMode::Blob), (b"dir", dir, FileMode::Tree)]);
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(
        &base,
        &BaseLimits {
            max_path_bytes: 9,
            ..BaseLimits::default()
        },
    );
    assert_over(&error, "base.max_path_bytes", &destination);
    assert!(
        error.to_string().contains("paths of at least 10 bytes, ")
            && !error.to_string().contains("KiB"),
        "no rounding of ten bytes to a KiB: {error}"
    );
    let destination = hostile.root.path().join("within");
    std::fs::create_dir(&destination).unwrap();
    let owner = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap();
    let limits = BaseLimits {
        max_path_bytes: 10,
        ..BaseLimits::default()
    };
    materialize_within(&hostile.repo, &base, &destination, owner, &limits).unwrap();
    assert_eq!(
        std::fs::read(destination.join("dir/bb")).unwrap(),
        b"hello\n"
    );
}

#[test]
fn a_project_lower_limit_refuses_an_ordinary_base() {
    let hostile = Hostile::new();
    let file = hostile.blob(b"hello\n");
    let tree = hostile.tree(&[
        (b"a", file, FileMode::Blob),
        (b"b", file, FileMode::Blob),
        (b"c", file, FileMode::Blob),
    ]);
    let base = hostile.commit(tree);
    let (error, destination) = hostile.refused(
        &base,
        &BaseLimits {
            max_files: 2,
            ..BaseLimits::default()
        },
    );
    assert_over(&error, "base.max_files", &destination);
    assert!(error.to_string().contains("at least 3 files"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Against the built binary: real zero-filled blobs, stet's peak RSS measured by /usr/bin/time
// ---------------------------------------------------------------------------------------------

/// stet's own peak RSS while it refuses a hostile base: its idle size and some room, far under one
/// of the GiB blobs it must never hold.
const REFUSAL_RSS_KIB: u64 = 200 * 1024;

/// A zero-filled blob of `size` bytes written by git from a sparse file (a GiB compresses to about
/// a MiB of objects), in `repo`.
fn zero_blob(repo: &Path, size: u64) -> String {
    let file = repo.join(format!("../zeros-{size}"));
    std::fs::File::create(&file).unwrap().set_len(size).unwrap();
    let id = git(repo, &["hash-object", "-w", file.to_str().unwrap()]);
    std::fs::remove_file(file).unwrap();
    id
}

/// `git mktree` of `lines` (`<mode> <type> <id>\t<name>`).
fn mktree(repo: &Path, lines: &[String]) -> String {
    let mut child = std::process::Command::new("git")
        .args(["mktree"])
        .current_dir(repo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A commit of `tree` on a branch of the remote named `branch`: the remote borrows the repository's
/// objects, so nothing of GiB is copied to make it.
fn hostile_branch(project: &Project, branch: &str, tree: &str) {
    let commit = git(
        &project.repo,
        &["commit-tree", tree, "-m", &format!("hostile {branch}")],
    );
    let alternates = project.remote.join("objects/info/alternates");
    std::fs::create_dir_all(alternates.parent().unwrap()).unwrap();
    std::fs::write(
        &alternates,
        format!("{}\n", project.repo.join(".git/objects").display()),
    )
    .unwrap();
    git(
        &project.remote,
        &["update-ref", &format!("refs/heads/{branch}"), &commit],
    );
    git(&project.repo, &["fetch", "-q", "origin", branch]);
}

/// Points the project's one brief at `base`.
fn brief_on(project: &Project, base: &str) {
    let briefs = project.repo.join(".stet/briefs");
    let brief = std::fs::read_dir(&briefs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&brief).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for line in &mut lines {
        if line.starts_with("base = ") {
            *line = format!("base = \"{base}\"");
        }
    }
    std::fs::write(&brief, lines.join("\n") + "\n").unwrap();
}

/// `stet --headless` under `/usr/bin/time`: what it did, and its peak RSS in KiB.
fn headless_measured(project: &Project, extra: &[&str]) -> (Finished, u64) {
    let rss = project.home.path().join("rss.txt");
    let mut command = std::process::Command::new("/usr/bin/time");
    command
        .arg("-o")
        .arg(&rss)
        .args([
            "-f",
            "%M",
            env!("CARGO_BIN_EXE_stet"),
            "--headless",
            "--brief",
        ])
        .arg(
            std::fs::read_dir(project.repo.join(".stet/briefs"))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path()
                .file_stem()
                .unwrap(),
        )
        .args(extra)
        .env("XDG_STATE_HOME", project.home.path().join("state"))
        .env("XDG_CONFIG_HOME", project.home.path().join("config"))
        .current_dir(&project.repo)
        .stdin(std::process::Stdio::null());
    for variable in STET_VARIABLES {
        command.env_remove(variable);
    }
    let finished = run(command);
    let peak = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (finished, peak)
}

#[test]
fn the_binary_refuses_hostile_bases_before_reading_with_its_memory_bounded() {
    docker_ready();
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let repo = &project.repo;
    // Three distinct zero blobs of a GiB each, named by four paths: 4 GiB from about 3 MiB.
    let blobs: Vec<String> = (0..3).map(|less| zero_blob(repo, GIB - less)).collect();
    let mut lines: Vec<String> = blobs
        .iter()
        .enumerate()
        .map(|(index, id)| format!("100644 blob {id}\tzeros-{index}"))
        .collect();
    lines.push(format!("100644 blob {}\tzeros-again", blobs[0]));
    hostile_branch(&project, "zeros", &mktree(repo, &lines));
    let huge = zero_blob(repo, 3 * GIB);
    hostile_branch(
        &project,
        "huge",
        &mktree(repo, &[format!("100644 blob {huge}\tzeros.bin")]),
    );
    // A million paths from a few KiB of trees.
    let small = git(repo, &["hash-object", "-w", "README.md"]);
    let mut tree = mktree(repo, &[format!("100644 blob {small}\tf")]);
    for _ in 0..6 {
        let lines: Vec<String> = (0..10)
            .map(|index| format!("040000 tree {tree}\td{index}"))
            .collect();
        tree = mktree(repo, &lines);
    }
    hostile_branch(&project, "bomb", &tree);
    let mut deep = mktree(repo, &[format!("100644 blob {small}\tf")]);
    for _ in 0..300 {
        deep = mktree(repo, &[format!("040000 tree {deep}\td")]);
    }
    hostile_branch(&project, "deep", &deep);

    for (branch, setting) in [
        ("zeros", "base.max_total_bytes"),
        ("huge", "base.max_file_bytes"),
        ("bomb", "base.max_files"),
        ("deep", "base.max_depth"),
    ] {
        brief_on(&project, branch);
        let (finished, peak_kib) = headless_measured(&project, &[]);
        let (outcome, code, reason) = finished.outcome();
        let reason = reason.unwrap_or_default();
        assert_eq!((outcome, code), (Phase::Failed, 1), "{branch}: {reason}");
        assert!(reason.contains(setting), "{branch}: {reason}");
        assert!(
            peak_kib < REFUSAL_RSS_KIB,
            "{branch}: stet's peak RSS was {peak_kib} KiB, past {REFUSAL_RSS_KIB} KiB"
        );
        eprintln!("{branch}: refused with a peak RSS of {peak_kib} KiB");
        finished.torn_down_cleanly();
    }
}
#[test]
fn a_base_holding_a_150_mib_file_dispatches_and_the_agents_edit_of_another_file_is_pushed() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\nthree\\nfour\\n\" }",
        "finish = \"Added a line to the notes.\"",
    ]));
    // Not zeros: 150 MiB that do not compress, as a real asset would be.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut large = Vec::with_capacity(150 << 20);
    while large.len() < 150 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        large.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(project.repo.join("assets.bin"), &large).unwrap();
    drop(large);
    git(&project.repo, &["add", "assets.bin"]);
    git(&project.repo, &["commit", "-q", "-m", "A large asset"]);
    git(&project.repo, &["push", "-q", "origin", "main"]);
    let main = git(&project.remote, &["rev-parse", "refs/heads/main"]);

    let (finished, peak_kib) = headless_measured(&project, &["--push"]);
    let (outcome, code, reason) = finished.outcome();
    assert_eq!(
        (outcome, code),
        (Phase::Done, 0),
        "{reason:?}\n{}",
        finished.stderr
    );
    eprintln!("150 MiB base: dispatched with a peak RSS of {peak_kib} KiB");
    let pushed = git(
        &project.remote,
        &["for-each-ref", "--format=%(objectname)", "refs/heads/stet/"],
    );
    let pushed = pushed.lines().next().expect("a pushed branch");
    assert_eq!(
        git(&project.remote, &["rev-parse", &format!("{pushed}^")]),
        main
    );
    assert_eq!(
        git(
            &project.remote,
            &["show", &format!("{pushed}:src/notes.txt")]
        ),
        "one\ntwo\nthree\nfour"
    );
    assert_eq!(
        git(&project.remote, &["diff", "--name-only", &main, pushed]),
        "src/notes.txt"
    );
    finished.torn_down_cleanly();
}

/// The git processes `pid` started that are still there (running, or ended and not reaped): their
/// process ids and command names, from `/proc/<child>/stat`.
fn git_children(pid: u32) -> Vec<(u32, String)> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let (Some((_, name)), Some((_, rest))) = (stat.split_once('('), stat.rsplit_once(')'))
        else {
            continue;
        };
        let name = name.rsplit_once(')').map_or(name, |(name, _)| name);
        let parent = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) && name.starts_with("git") {
            children.push((child, name.to_owned()));
        }
    }
    children
}

/// Polls `done` every 20 ms until it holds, for at most `within`; how long it took, or `None`.
fn within(within: Duration, done: impl Fn() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if done() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// How long after the cancel stet's git processes may still be there.
const GIT_GONE_WITHIN: Duration = Duration::from_secs(3);

/// A base of 100,000 small files (10⁴ directories of ten files, from a few KiB of trees) is being
/// written when the person cancels. Before, the materialization ran on in its blocking thread, with
/// its `git cat-file` and `git pack-objects`, until the whole base was on disk, and only then did the
/// dispatch notice the cancel. Now the git processes are gone within [`GIT_GONE_WITHIN`] of SIGINT,
/// stet's CPU goes idle once the dispatch ended (exit 3, cancelled before the agent ran), and the
/// teardown leaves no workspace behind.
#[test]
fn cancelling_while_a_large_base_materializes_idles_stet_and_ends_its_git() {
    docker_ready();
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let repo = &project.repo;
    let small = git(repo, &["hash-object", "-w", "README.md"]);
    let files: Vec<String> = (0..10)
        .map(|index| format!("100644 blob {small}\tf{index}"))
        .collect();
    let mut tree = mktree(repo, &files);
    for _ in 0..4 {
        let lines: Vec<String> = (0..10)
            .map(|index| format!("040000 tree {tree}\td{index}"))
            .collect();
        tree = mktree(repo, &lines);
    }
    hostile_branch(&project, "wide", &tree);
    brief_on(&project, "wide");

    let mut watched = Watched::start(project.headless(&["--timeout", "30m"]));
    let pid = watched.pid();
    let provisioning = watched.until("provisioning", |event| {
        matches!(
            event.kind,
            EventKind::Phase {
                to: Phase::Provisioning,
                ..
            }
        )
    });
    let dispatch = provisioning.dispatch;
    let writing = within(Duration::from_secs(120), || {
        git_children(pid).iter().any(|(_, name)| name == "git")
    });
    assert!(
        writing.is_some(),
        "stet never started git to write the base"
    );
    let busy = cpu_over_window(pid);
    let before = git_children(pid);
    assert!(
        !before.is_empty(),
        "the base was written before the cancel; it must be larger for this test"
    );
    assert!(signal(pid, "INT").success());
    let gone = within(GIT_GONE_WITHIN, || git_children(pid).is_empty());
    assert!(
        gone.is_some(),
        "{GIT_GONE_WITHIN:?} after the cancel stet still has its git processes: {:?} (before: {before:?})",
        git_children(pid)
    );
    eprintln!(
        "git processes {before:?} gone {:?} after the cancel",
        gone.unwrap_or_default()
    );
    watched.until("the dispatch's end", |event| {
        matches!(event.kind, EventKind::Finished { .. })
    });
    let after_cancel = cpu_over_window(pid);
    let finished = watched.finish();
    assert_eq!(finished.code(), Some(3), "{finished:#?}");
    let (outcome, _, reason) = finished.outcome();
    assert_eq!(outcome, Phase::Cancelled, "{reason:?}");
    assert!(
        !finished.events.iter().any(|event| matches!(
            event.kind,
            EventKind::Phase {
                to: Phase::Running,
                ..
            }
        )),
        "the agent ran: the cancel did not land during the materialization"
    );
    assert_went_idle(busy, after_cancel, "materializing");
    assert_nothing_left(&project.home, dispatch);
}
