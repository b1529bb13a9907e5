//! The local forge against real repositories on disk: preflight reads the remote's refs, a push writes
//! the branch into the user's own repository without touching their checkout, the base moving since
//! preflight stops the push, and pull requests are review records that an update never re-creates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use stet_engine::brief::Target;
use stet_engine::credential::{LocalCredentialProvider, ScopedCredential};
use stet_engine::forge::local::{LocalForge, ReviewState};
use stet_engine::forge::{Forge, ForgeError, Preflight, PullRequestDraft, PushBranch, Pushed};
use stet_engine::git::push::PushError;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::TokenSanitizer;

use super::support::{self, git};

/// A user's repository with one commit on `main`, a dirty working tree and a staged change.
fn user_repository(root: &Path) -> PathBuf {
    let repo = root.join("app");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    std::fs::write(repo.join("staged.txt"), "one\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "initial"]);
    std::fs::write(repo.join("README.md"), "hello, uncommitted\n").unwrap();
    std::fs::write(repo.join("staged.txt"), "two\n").unwrap();
    git(&repo, &["add", "staged.txt"]);
    repo
}

/// A commit on top of `parent` that no branch points at (what the trusted import produces).
fn loose_commit(repo: &Path, parent: &str, file: &str, text: &str) -> CommitSha {
    let blob = {
        let path = repo
            .join(".git")
            .join(format!("blob-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, text).unwrap();
        let id = git(repo, &["hash-object", "-w", path.to_str().unwrap()]);
        std::fs::remove_file(path).unwrap();
        id
    };
    let base_tree = git(repo, &["rev-parse", &format!("{parent}^{{tree}}")]);
    let index = repo
        .join(".git")
        .join(format!("index-{}", uuid::Uuid::new_v4()));
    let with_index = |args: &[&str]| {
        let output = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    with_index(&["read-tree", &base_tree]);
    with_index(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("100644,{blob},{file}"),
    ]);
    let tree = with_index(&["write-tree"]);
    std::fs::remove_file(&index).unwrap();
    CommitSha::parse(&git(
        repo,
        &["commit-tree", &tree, "-p", parent, "-m", "agent result"],
    ))
    .unwrap()
}

/// Pushes `commit` to `branch` through `forge` with a fresh scoped credential.
async fn push(
    forge: &LocalForge,
    repo: &Path,
    target: &Target,
    preflight: &Preflight,
    commit: &CommitSha,
    branch: &str,
) -> Result<Pushed, ForgeError> {
    forge
        .push_branch(PushBranch {
            repository: repo,
            target,
            preflight,
            commit,
            branch,
            credential: &credential().await,
        })
        .await
}

fn target(pr: Option<u64>) -> Target {
    Target {
        repo: "demo/app".into(),
        base: "main".into(),
        branch: None,
        pr,
    }
}

async fn credential() -> Arc<ScopedCredential> {
    Arc::new(
        ScopedCredential::mint(
            Arc::new(LocalCredentialProvider::default()),
            "demo/app",
            "stet/x",
            Duration::from_secs(300),
        )
        .await
        .unwrap(),
    )
}

fn draft(head: &str, body: &str) -> PullRequestDraft {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let brief = stet_engine::brief::Brief::parse(
        "demo",
        Path::new("demo.toml"),
        "title = \"Demo change\"\nworkflow = \"implement\"\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n[[items]]\ntext = \"do it\"\n",
    )
    .unwrap();
    PullRequestDraft::compose(
        &brief,
        head,
        Some(body),
        &support::provenance("local", &"a".repeat(40), &"b".repeat(40)),
        &sanitizer,
    )
}

/// The user's checkout as `git status` and the index see it.
fn checkout_state(repo: &Path) -> (String, String, String) {
    (
        git(repo, &["status", "--porcelain=v1"]),
        git(repo, &["rev-parse", "HEAD"]),
        git(repo, &["ls-files", "-s"]),
    )
}

#[tokio::test]
async fn a_push_writes_the_branch_into_the_users_repository_and_leaves_their_checkout_alone() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let before = checkout_state(&repo);
    let forge = LocalForge::new(repo.clone(), &dir.path().join("state"));
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    assert_eq!(
        preflight.base_sha.as_str(),
        git(&repo, &["rev-parse", "main"])
    );
    assert_eq!(preflight.head, None);
    let commit = loose_commit(
        &repo,
        preflight.base_sha.as_str(),
        "src/new.rs",
        "fn main() {}\n",
    );
    let pushed = push(&forge, &repo, &target, &preflight, &commit, "stet/demo-1")
        .await
        .unwrap();
    assert_eq!(pushed.previous, None);
    assert_eq!(
        git(&repo, &["rev-parse", "refs/heads/stet/demo-1"]),
        commit.as_str()
    );
    assert_eq!(checkout_state(&repo), before, "the user's checkout changed");
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello, uncommitted\n"
    );
}

#[tokio::test]
async fn preflight_names_a_missing_repository_base_or_review() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let state = dir.path().join("state");
    let missing = LocalForge::new(dir.path().join("nowhere"), &state);
    assert!(matches!(
        missing.preflight(&target(None)).await.unwrap_err(),
        ForgeError::RepositoryNotFound { .. }
    ));
    let forge = LocalForge::new(repo.clone(), &state);
    let mut other_base = target(None);
    other_base.base = "release/9".into();
    let error = forge.preflight(&other_base).await.unwrap_err();
    assert!(
        matches!(&error, ForgeError::BaseNotFound { base, .. } if base == "release/9"),
        "{error}"
    );
    let error = forge.preflight(&target(Some(7))).await.unwrap_err();
    assert!(
        matches!(error, ForgeError::PullRequestNotFound { number: 7, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_base_that_moved_since_preflight_stops_the_push_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let forge = LocalForge::new(repo.clone(), &dir.path().join("state"));
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    let commit = loose_commit(&repo, preflight.base_sha.as_str(), "a.txt", "a\n");
    let moved = loose_commit(&repo, preflight.base_sha.as_str(), "b.txt", "b\n");
    git(&repo, &["update-ref", "refs/heads/main", moved.as_str()]);
    let error = push(&forge, &repo, &target, &preflight, &commit, "stet/moved")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ForgeError::BaseMoved { found, .. } if found == &moved),
        "{error}"
    );
    let listed = git(&repo, &["branch", "--list", "stet/moved"]);
    assert_eq!(listed, "", "the branch was pushed anyway");
}

#[tokio::test]
async fn a_branch_with_unrelated_history_is_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let forge = LocalForge::new(repo.clone(), &dir.path().join("state"));
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    let theirs = loose_commit(&repo, preflight.base_sha.as_str(), "theirs.txt", "theirs\n");
    git(
        &repo,
        &["update-ref", "refs/heads/stet/taken", theirs.as_str()],
    );
    let ours = loose_commit(&repo, preflight.base_sha.as_str(), "ours.txt", "ours\n");
    let error = push(&forge, &repo, &target, &preflight, &ours, "stet/taken")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ForgeError::Push(push) if matches!(**push, PushError::NonFastForward { .. })),
        "{error}"
    );
    assert_eq!(
        git(&repo, &["rev-parse", "refs/heads/stet/taken"]),
        theirs.as_str()
    );
}

/// A brief's own branch that already exists on the remote is refused at preflight.
#[tokio::test]
async fn preflight_refuses_a_brief_branch_that_already_exists() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let forge = LocalForge::new(repo.clone(), &dir.path().join("state"));
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    let commit = loose_commit(&repo, preflight.base_sha.as_str(), "x.txt", "1\n");
    push(&forge, &repo, &target, &preflight, &commit, "stet/taken")
        .await
        .unwrap();
    let with_branch = |branch: &str| Target {
        branch: Some(branch.to_owned()),
        ..self::target(None)
    };
    let error = forge
        .preflight(&with_branch("stet/taken"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ForgeError::BranchExists { branch, .. } if branch == "stet/taken"),
        "{error}"
    );
    forge.preflight(&with_branch("stet/free")).await.unwrap();
}

#[tokio::test]
async fn pull_requests_are_review_records_and_an_update_never_opens_another() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let state = dir.path().join("state");
    let forge = LocalForge::new(repo.clone(), &state);
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    let first = loose_commit(&repo, preflight.base_sha.as_str(), "x.txt", "1\n");
    push(&forge, &repo, &target, &preflight, &first, "stet/review")
        .await
        .unwrap();
    let opened = forge
        .open_pull_request(&target, &draft("stet/review", "first"))
        .await
        .unwrap();
    assert!(opened.opened);
    assert_eq!(opened.number, 1);
    assert_eq!(Path::new(&opened.url), state.join("reviews").join("1.json"));
    let again = forge
        .open_pull_request(&target, &draft("stet/review", "again"))
        .await
        .unwrap_err();
    assert!(
        matches!(again, ForgeError::PullRequestExists { .. }),
        "{again}"
    );

    // The existing-PR path: preflight resolves the real head from the remote, the next commit builds
    // on it, and the update keeps the number.
    let with_pr = self::target(Some(1));
    let preflight = forge.preflight(&with_pr).await.unwrap();
    let head = preflight.head.clone().unwrap();
    assert_eq!(
        (head.number, head.branch.as_str(), &head.sha),
        (1, "stet/review", &first)
    );
    assert_eq!(preflight.parent(), &first);
    let second = loose_commit(&repo, first.as_str(), "x.txt", "2\n");
    let pushed = push(&forge, &repo, &with_pr, &preflight, &second, &head.branch)
        .await
        .unwrap();
    assert_eq!(pushed.previous, Some(first));
    let updated = forge
        .update_pull_request(&with_pr, 1, &draft("stet/review", "second"))
        .await
        .unwrap();
    assert_eq!((updated.number, updated.opened), (1, false));
    let records = forge.reviews().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].body.contains("> second"));
    assert_eq!(records[0].state, ReviewState::Open);
    assert!(records[0].updated >= records[0].created);

    // The remote made anew (as `stet demo` does): its open reviews are closed, and the same branch
    // can be proposed again.
    let elsewhere = LocalForge::new(dir.path().join("another-remote"), &state);
    assert_eq!(elsewhere.close_open_reviews().unwrap(), Vec::<u64>::new());
    assert_eq!(forge.close_open_reviews().unwrap(), vec![1]);
    assert_eq!(forge.reviews().unwrap()[0].state, ReviewState::Closed);
    let reopened = forge
        .open_pull_request(&target, &draft("stet/review", "third"))
        .await
        .unwrap();
    assert_eq!((reopened.number, reopened.opened), (2, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_opens_get_distinct_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let forge = Arc::new(LocalForge::new(repo, &dir.path().join("state")));
    let mut tasks = Vec::new();
    for n in 0..8 {
        let forge = Arc::clone(&forge);
        tasks.push(tokio::spawn(async move {
            forge
                .open_pull_request(&target(None), &draft(&format!("stet/c{n}"), "x"))
                .await
                .unwrap()
                .number
        }));
    }
    let mut numbers = Vec::new();
    for task in tasks {
        numbers.push(task.await.unwrap());
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=8).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_bare_remote_or_another_checkout_receives_the_objects_and_the_checked_out_branch_is_refused()
 {
    let dir = tempfile::tempdir().unwrap();
    let repo = user_repository(dir.path());
    let bare = dir.path().join("upstream.git");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            repo.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let other = dir.path().join("other");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            repo.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    for remote in [&bare, &other] {
        let forge = LocalForge::new(remote.clone(), &dir.path().join("state"));
        let target = target(None);
        let preflight = forge.preflight(&target).await.unwrap();
        let commit = loose_commit(&repo, preflight.base_sha.as_str(), "f.txt", "only here\n");
        push(&forge, &repo, &target, &preflight, &commit, "stet/copied")
            .await
            .unwrap();
        assert_eq!(
            git(remote, &["rev-parse", "refs/heads/stet/copied"]),
            commit.as_str()
        );
        assert_eq!(
            git(remote, &["cat-file", "-p", &format!("{commit}:f.txt")]),
            "only here",
            "the objects arrived in {}",
            remote.display()
        );
        git(remote, &["fsck", "--no-dangling"]);
    }
    let forge = LocalForge::new(other.clone(), &dir.path().join("state"));
    let target = target(None);
    let preflight = forge.preflight(&target).await.unwrap();
    let commit = loose_commit(&repo, preflight.base_sha.as_str(), "g.txt", "g\n");
    let error = push(&forge, &repo, &target, &preflight, &commit, "main")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("checked out"), "{error}");
    assert_eq!(
        git(&other, &["rev-parse", "main"]),
        preflight.base_sha.as_str()
    );
}

/// Two repositories whose briefs both say `repo = "demo/app"`: each one's forge sees only its own
/// reviews, whatever number a brief names.
#[tokio::test]
async fn a_brief_of_another_remote_can_neither_read_update_nor_close_a_review() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first_repo = user_repository(&dir.path().join("first"));
    let second_repo = user_repository(&dir.path().join("second"));
    let first = LocalForge::new(first_repo.clone(), &state);
    let second = LocalForge::new(second_repo.clone(), &state);

    let preflight = first.preflight(&target(None)).await.unwrap();
    let commit = loose_commit(&first_repo, preflight.base_sha.as_str(), "x.txt", "1\n");
    push(
        &first,
        &first_repo,
        &target(None),
        &preflight,
        &commit,
        "stet/review",
    )
    .await
    .unwrap();
    let opened = first
        .open_pull_request(
            &target(None),
            &draft("stet/review", "the first repository's"),
        )
        .await
        .unwrap();
    assert_eq!(opened.number, 1);
    let record_file = state.join("reviews").join("1.json");
    let written = std::fs::read(&record_file).unwrap();

    // The second repository holds a branch of the same name, as a hostile clone could.
    let preflight = second.preflight(&target(None)).await.unwrap();
    let theirs = loose_commit(&second_repo, preflight.base_sha.as_str(), "y.txt", "2\n");
    git(
        &second_repo,
        &["update-ref", "refs/heads/stet/review", theirs.as_str()],
    );
    let error = second.preflight(&target(Some(1))).await.unwrap_err();
    assert!(
        matches!(error, ForgeError::PullRequestNotFound { number: 1, .. }),
        "{error}"
    );
    let error = second
        .update_pull_request(&target(Some(1)), 1, &draft("stet/review", "overwritten"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::PullRequestNotFound { number: 1, .. }),
        "{error}"
    );
    assert_eq!(second.close_open_reviews().unwrap(), Vec::<u64>::new());
    assert_eq!(
        std::fs::read(&record_file).unwrap(),
        written,
        "review #1 changed"
    );

    // The same head and base are free on the second remote: its review is its own, #2.
    let reopened = second
        .open_pull_request(
            &target(None),
            &draft("stet/review", "the second repository's"),
        )
        .await
        .unwrap();
    assert_eq!(reopened.number, 2);
    let records = first.reviews().unwrap();
    assert!(
        records[0].body.contains("> the first repository's"),
        "{}",
        records[0].body
    );
    assert!(
        records[1].body.contains("> the second repository's"),
        "{}",
        records[1].body
    );
    assert_ne!(records[0].remote_git_dir, records[1].remote_git_dir);
    // The first repository's forge, named through another spelling of its path, still finds #1.
    let spelled = LocalForge::new(first_repo.join("."), &state);
    let head = spelled
        .preflight(&target(Some(1)))
        .await
        .unwrap()
        .head
        .unwrap();
    assert_eq!((head.number, head.sha), (1, commit));
}

/// A review record written before records kept their remote's identity lists, shows and updates
/// from its own remote, gains the identity when it changes, and stays out of another's reach.
#[tokio::test]
async fn a_record_of_the_previous_version_keeps_working_for_its_own_remote_only() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first_repo = user_repository(&dir.path().join("first"));
    let second_repo = user_repository(&dir.path().join("second"));
    let first = LocalForge::new(first_repo.clone(), &state);
    let preflight = first.preflight(&target(None)).await.unwrap();
    let commit = loose_commit(&first_repo, preflight.base_sha.as_str(), "x.txt", "1\n");
    push(
        &first,
        &first_repo,
        &target(None),
        &preflight,
        &commit,
        "stet/old",
    )
    .await
    .unwrap();
    std::fs::create_dir_all(state.join("reviews")).unwrap();
    let old = serde_json::json!({
        "number": 1,
        "repo": "demo/app",
        "remote": first_repo,
        "title": "Demo change",
        "body": "written by the previous version",
        "base": "main",
        "head": "stet/old",
        "state": "open",
        "created": "2025-01-01T00:00:00Z",
        "updated": "2025-01-01T00:00:00Z",
    });
    std::fs::write(state.join("reviews/1.json"), old.to_string()).unwrap();
    assert_eq!(first.reviews().unwrap()[0].remote_git_dir, None);

    let second = LocalForge::new(second_repo, &state);
    let error = second
        .update_pull_request(&target(Some(1)), 1, &draft("stet/old", "overwritten"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::PullRequestNotFound { .. }),
        "{error}"
    );

    let head = first
        .preflight(&target(Some(1)))
        .await
        .unwrap()
        .head
        .unwrap();
    assert_eq!(head.branch, "stet/old");
    first
        .update_pull_request(&target(Some(1)), 1, &draft("stet/old", "updated"))
        .await
        .unwrap();
    let record = &first.reviews().unwrap()[0];
    assert!(record.body.contains("> updated"), "{}", record.body);
    assert_eq!(
        record.remote_git_dir.as_deref(),
        Some(
            std::fs::canonicalize(first_repo.join(".git"))
                .unwrap()
                .as_path()
        )
    );
}
