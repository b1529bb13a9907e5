//! A base fetched from a remote that is a local path (issue 27's last find): git's plumbing in
//! process groups stet kills at the stop, with nothing left behind — no ref, no `FETCH_HEAD`, no
//! temporary pack in the user's repository, no process still running. Before, libgit2 packed such
//! a remote in stet's own process: a stop went unheard for 675 s while its memory rose to 1.5 GB.

use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use git2::Repository;
use stet_engine::git::origin_guard::TransferBounds;
use stet_engine::git::push::{PushError, fetch_commit, fetch_commit_until};
use stet_sanitize::branch::CommitSha;
use tokio_util::sync::CancellationToken;

use super::support::{alive, git, processes_naming};

/// How long a stopped fetch may take to end before the test calls it a hang.
const STOPPED_WITHIN: Duration = Duration::from_secs(30);

/// Bytes that do not compress, from a generator seeded by the test.
fn incompressible(bytes: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[3]
        })
        .collect()
}

/// A bare remote whose `main` holds `files` (name, content), and a user's repository without it.
struct Remote {
    _dir: tempfile::TempDir,
    bare: PathBuf,
    user: PathBuf,
    base: CommitSha,
}

impl Remote {
    fn new(files: &[(&str, Vec<u8>)]) -> Remote {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::create_dir(&source).unwrap();
        git(&source, &["init", "-q", "-b", "main"]);
        for (name, content) in files {
            std::fs::write(source.join(name), content).unwrap();
        }
        git(&source, &["add", "-A"]);
        git(&source, &["commit", "-q", "-m", "base"]);
        let base = CommitSha::parse(&git(&source, &["rev-parse", "HEAD"])).unwrap();
        let bare = dir.path().join("remote.git");
        git(
            dir.path(),
            &["clone", "-q", "--bare", "source", "remote.git"],
        );
        let user = dir.path().join("user");
        std::fs::create_dir(&user).unwrap();
        git(&user, &["init", "-q", "-b", "main"]);
        Remote {
            _dir: dir,
            bare,
            user,
            base,
        }
    }

    fn refs(&self) -> Vec<String> {
        let repository = Repository::open(&self.user).unwrap();
        let mut names: Vec<String> = repository
            .references()
            .unwrap()
            .filter_map(|reference| reference.ok()?.name().ok().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    fn has_base(&self) -> bool {
        let repository = Repository::open(&self.user).unwrap();
        repository
            .find_commit(git2::Oid::from_str(self.base.as_str()).unwrap())
            .is_ok()
    }

    /// What the user's pack directory holds that a fetch writes only while it runs.
    fn transient_packs(&self) -> Vec<String> {
        std::fs::read_dir(self.user.join(".git/objects/pack"))
            .into_iter()
            .flatten()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| {
                name.starts_with("tmp_")
                    || name.starts_with("pack_git2_")
                    || name.ends_with(".keep")
            })
            .collect()
    }
}

#[test]
fn a_local_base_is_fetched_by_path_and_by_file_url_writing_no_ref_and_leaving_nothing() {
    for by_url in [false, true] {
        let remote = Remote::new(&[
            ("small.txt", b"small\n".to_vec()),
            ("large.bin", incompressible(24 << 20, 27)),
        ]);
        let refs_before = remote.refs();
        let url = if by_url {
            format!("file://{}", remote.bare.display())
        } else {
            remote.bare.display().to_string()
        };
        fetch_commit(&remote.user, &url, "main", &remote.base, None).unwrap();
        assert!(remote.has_base(), "{url}");
        assert_eq!(remote.refs(), refs_before, "the fetch wrote a ref ({url})");
        assert!(!remote.user.join(".git/FETCH_HEAD").exists(), "{url}");
        assert_eq!(remote.transient_packs(), Vec::<String>::new(), "{url}");
        let large = git(
            &remote.user,
            &["cat-file", "-s", &format!("{}:large.bin", remote.base)],
        );
        assert_eq!(large, (24 << 20).to_string());
    }
}

#[test]
fn a_branch_of_a_local_remote_that_does_not_lead_to_the_base_is_a_fetch_error() {
    let remote = Remote::new(&[("a.txt", b"a\n".to_vec())]);
    let elsewhere = CommitSha::parse(&"1".repeat(40)).unwrap();
    // A branch the remote lacks, then one that leads elsewhere (which brings its objects).
    let missing = fetch_commit(
        &remote.user,
        &remote.bare.display().to_string(),
        "no-such-branch",
        &remote.base,
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&missing, PushError::FetchFailed { detail, .. } if detail.contains("no branch no-such-branch")),
        "{missing}"
    );
    let moved = fetch_commit(
        &remote.user,
        &remote.bare.display().to_string(),
        "main",
        &elsewhere,
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&moved, PushError::FetchFailed { detail, .. } if detail.contains("moved since preflight")),
        "{moved}"
    );
    assert_eq!(remote.transient_packs(), Vec::<String>::new());
}

/// A hostile local remote whose `HEAD` is a FIFO: git opens it to see whether this is a repository
/// and waits there for a writer that never comes. The stop must end the fetch, kill
/// that process with it, and leave the user's repository as it was.
#[test]
fn a_stop_ends_a_local_fetch_whose_remote_never_answers_and_kills_its_processes() {
    let remote = Remote::new(&[("a.txt", b"a\n".to_vec())]);
    let head = remote.bare.join("HEAD");
    std::fs::remove_file(&head).unwrap();
    let made = Command::new("mkfifo").arg(&head).status().unwrap();
    assert!(made.success());
    let refs_before = remote.refs();
    let marker = remote.bare.display().to_string();

    let stop = CancellationToken::new();
    let (ended, fetched) = mpsc::channel();
    {
        let (user, url, base, stop) = (
            remote.user.clone(),
            marker.clone(),
            remote.base.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let result = fetch_commit_until(
                &user,
                &url,
                "main",
                &base,
                None,
                TransferBounds::default(),
                &stop,
            );
            let _ = ended.send(result);
        });
    }
    // The remote side is running (and blocked on the FIFO) once a git process naming the remote
    // exists.
    let hanging = std::thread::spawn(move || {
        let deadline = Instant::now() + STOPPED_WITHIN;
        while Instant::now() < deadline {
            let upload = processes_naming(&[&marker]);
            if !upload.is_empty() {
                return upload;
            }
            std::thread::yield_now();
        }
        Vec::new()
    });
    let upload = hanging.join().unwrap();
    assert!(
        !upload.is_empty(),
        "git started on the hostile remote within {STOPPED_WITHIN:?}"
    );
    assert!(
        fetched.try_recv().is_err(),
        "the fetch waits on the remote until the stop"
    );

    stop.cancel();
    let result = fetched
        .recv_timeout(STOPPED_WITHIN)
        .unwrap_or_else(|_| panic!("the fetch went on for {STOPPED_WITHIN:?} after the stop"));
    assert!(
        matches!(result, Err(PushError::Stopped { .. })),
        "{result:?}"
    );
    // SIGKILL has been sent to the whole group; each process is gone (or a zombie) once the kernel
    // has delivered it.
    let deadline = Instant::now() + STOPPED_WITHIN;
    for pid in upload {
        while alive(pid) {
            assert!(
                Instant::now() < deadline,
                "git {pid} is still running {STOPPED_WITHIN:?} after the stop"
            );
            std::thread::yield_now();
        }
    }
    assert!(!remote.has_base());
    assert_eq!(remote.refs(), refs_before);
    assert_eq!(remote.transient_packs(), Vec::<String>::new());
}
