//! The host's push against a real git smart-HTTP server (`git http-backend` on loopback) and real bare
//! repositories: which credential a push presented, how often, and every way a push is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use git2::{Oid, Repository, Signature};
use tempfile::TempDir;

use stet_engine::credential::{
    LocalCredentialProvider, RevokeOutcome, ScopedCredential, random_token,
};
use stet_engine::git::push::{
    MAX_CREDENTIAL_ATTEMPTS, PUSH_USERNAME, PushError, PushRequest, fetch_commit, push, remote_refs,
};
use stet_sanitize::branch::CommitSha;

use super::git_http::GitHttpServer;

const REPO: &str = "octo/app";
const TTL: Duration = Duration::from_secs(600);

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A server whose authorizer is a `LocalCredentialProvider`, one bare repository on it, and the user's
/// repository (not bare) whose object store holds the commits a test pushes.
struct Fixture {
    provider: Arc<LocalCredentialProvider>,
    server: GitHttpServer,
    bare: PathBuf,
    user: TempDir,
    _root: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let provider = Arc::new(LocalCredentialProvider::default());
        let authorizing = provider.clone();
        let server = GitHttpServer::start(
            root.path(),
            Arc::new(move |repo, _user, password| authorizing.authorizes(repo, password)),
        );
        let bare = server.create_bare(REPO);
        let user = tempfile::tempdir().unwrap();
        Repository::init(user.path()).unwrap();
        Fixture {
            provider,
            server,
            bare,
            user,
            _root: root,
        }
    }

    fn url(&self) -> String {
        self.server.url(REPO)
    }

    fn mint(&self) -> ScopedCredential {
        block_on(ScopedCredential::mint(
            self.provider.clone(),
            REPO,
            "stet/test",
            TTL,
        ))
        .unwrap()
    }

    /// A commit in the user's repository (no ref points at it, like an imported result).
    fn commit(&self, parent: Option<&CommitSha>, content: &str) -> CommitSha {
        commit_in(self.user.path(), parent, content)
    }

    fn push(
        &self,
        commit: &CommitSha,
        branch: &str,
        credential: Option<&ScopedCredential>,
    ) -> Result<(), PushError> {
        push(&PushRequest {
            repository: self.user.path(),
            url: &self.url(),
            commit,
            branch,
            credential,
        })
    }

    fn remote_branch(&self, branch: &str) -> Option<String> {
        remote_branch(&self.bare, branch)
    }
}

fn commit_in(repository: &Path, parent: Option<&CommitSha>, content: &str) -> CommitSha {
    let repository = Repository::open(repository).unwrap();
    let blob = repository.blob(content.as_bytes()).unwrap();
    let mut tree = repository.treebuilder(None).unwrap();
    tree.insert("file.txt", blob, 0o100644).unwrap();
    let tree = repository.find_tree(tree.write().unwrap()).unwrap();
    let signature = Signature::now("stet test", "test@stet.invalid").unwrap();
    let parents: Vec<_> = parent
        .map(|sha| {
            repository
                .find_commit(Oid::from_str(sha.as_str()).unwrap())
                .unwrap()
        })
        .into_iter()
        .collect();
    let parents: Vec<_> = parents.iter().collect();
    let oid = repository
        .commit(None, &signature, &signature, content, &tree, &parents)
        .unwrap();
    CommitSha::parse(&oid.to_string()).unwrap()
}

fn remote_branch(bare: &Path, branch: &str) -> Option<String> {
    let repository = Repository::open_bare(bare).unwrap();
    repository
        .find_reference(&format!("refs/heads/{branch}"))
        .ok()
        .and_then(|reference| reference.target())
        .map(|oid| oid.to_string())
}

fn secret(credential: &ScopedCredential) -> String {
    credential.host_push_secret().expose_secret().to_owned()
}

#[test]
fn a_push_with_the_scoped_credential_creates_the_branch_and_presents_only_that_value() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let commit = fixture.commit(None, "first result\n");

    fixture
        .push(&commit, "stet/fix-login", Some(&credential))
        .unwrap();

    assert_eq!(
        fixture.remote_branch("stet/fix-login").as_deref(),
        Some(commit.as_str())
    );
    let presented = fixture.server.presented();
    assert!(
        presented
            .iter()
            .any(|p| p.service == "git-receive-pack" && p.request.starts_with("POST ")),
        "the pack went up with a credential: {presented:?}"
    );
    for p in &presented {
        assert_eq!(p.password, secret(&credential), "{p:?}");
        assert_eq!(p.user, PUSH_USERNAME);
        assert_eq!(p.repo, REPO);
        assert!(p.accepted, "{p:?}");
    }
    let user = Repository::open(fixture.user.path()).unwrap();
    assert!(
        user.remotes().unwrap().is_empty(),
        "no remote was written into the user's configuration"
    );
}

#[test]
fn a_credential_the_forge_never_issued_is_refused_after_capped_attempts() {
    let fixture = Fixture::new();
    let stranger = Arc::new(LocalCredentialProvider::default());
    let wrong = block_on(ScopedCredential::mint(stranger, REPO, "stet/test", TTL)).unwrap();
    let commit = fixture.commit(None, "result\n");

    let err = fixture
        .push(&commit, "stet/wrong", Some(&wrong))
        .unwrap_err();

    assert!(
        matches!(err, PushError::AuthenticationFailed { attempts, .. } if attempts == MAX_CREDENTIAL_ATTEMPTS),
        "{err}"
    );
    assert!(!err.to_string().contains(&secret(&wrong)), "{err}");
    let presented = fixture.server.presented();
    assert_eq!(
        presented.len(),
        usize::try_from(MAX_CREDENTIAL_ATTEMPTS).unwrap(),
        "{presented:?}"
    );
    assert!(
        presented
            .iter()
            .all(|p| !p.accepted && p.password == secret(&wrong))
    );
    assert_eq!(fixture.remote_branch("stet/wrong"), None);
}

#[test]
fn a_credential_scoped_to_another_repository_is_refused() {
    let fixture = Fixture::new();
    let elsewhere = block_on(ScopedCredential::mint(
        fixture.provider.clone(),
        "octo/other",
        "stet/test",
        TTL,
    ))
    .unwrap();
    let commit = fixture.commit(None, "result\n");

    let err = fixture
        .push(&commit, "stet/elsewhere", Some(&elsewhere))
        .unwrap_err();

    assert!(
        matches!(err, PushError::AuthenticationFailed { .. }),
        "{err}"
    );
    assert_eq!(fixture.remote_branch("stet/elsewhere"), None);
}

#[test]
fn a_revoked_credential_is_refused_after_capped_attempts() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    assert_eq!(block_on(credential.revoke()), RevokeOutcome::Revoked);
    let commit = fixture.commit(None, "result\n");

    let err = fixture
        .push(&commit, "stet/revoked", Some(&credential))
        .unwrap_err();

    assert!(
        matches!(err, PushError::AuthenticationFailed { attempts, .. } if attempts == MAX_CREDENTIAL_ATTEMPTS),
        "{err}"
    );
    let presented = fixture.server.presented();
    assert_eq!(
        presented.len(),
        usize::try_from(MAX_CREDENTIAL_ATTEMPTS).unwrap()
    );
    assert!(
        presented
            .iter()
            .all(|p| !p.accepted && p.password == secret(&credential))
    );
    assert_eq!(fixture.remote_branch("stet/revoked"), None);
}

#[test]
fn a_remote_that_asks_for_a_credential_when_none_is_configured_fails_clearly() {
    let fixture = Fixture::new();
    let commit = fixture.commit(None, "result\n");

    let err = fixture.push(&commit, "stet/anonymous", None).unwrap_err();

    assert!(matches!(err, PushError::CredentialRequired { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("the remote asked for a credential and none is configured"),
        "{err}"
    );
    assert!(fixture.server.presented().is_empty());
    assert_eq!(fixture.server.request_count(), 1);
}

#[test]
fn a_branch_with_history_the_result_does_not_contain_is_never_overwritten() {
    let fixture = Fixture::new();
    let credential = fixture.mint();

    // The remote's branch holds a commit the user's repository has never seen.
    let stranger = tempfile::tempdir().unwrap();
    Repository::init(stranger.path()).unwrap();
    let foreign = commit_in(stranger.path(), None, "someone else's work\n");
    push(&PushRequest {
        repository: stranger.path(),
        url: fixture.bare.to_str().unwrap(),
        commit: &foreign,
        branch: "stet/taken",
        credential: None,
    })
    .unwrap();
    let ours = fixture.commit(None, "our result\n");
    let err = fixture
        .push(&ours, "stet/taken", Some(&credential))
        .unwrap_err();
    assert!(
        matches!(&err, PushError::NonFastForward { branch, .. } if branch == "stet/taken"),
        "{err}"
    );
    assert!(err.to_string().contains("stet/taken"), "{err}");
    assert_eq!(
        fixture.remote_branch("stet/taken").as_deref(),
        Some(foreign.as_str())
    );

    // The user's repository knows the remote's commit, but the result does not descend from it.
    let pushed = fixture.commit(None, "an earlier result\n");
    fixture
        .push(&pushed, "stet/diverged", Some(&credential))
        .unwrap();
    let unrelated = fixture.commit(None, "an unrelated result\n");
    let err = fixture
        .push(&unrelated, "stet/diverged", Some(&credential))
        .unwrap_err();
    assert!(
        matches!(&err, PushError::NonFastForward { branch, .. } if branch == "stet/diverged"),
        "{err}"
    );
    assert_eq!(
        fixture.remote_branch("stet/diverged").as_deref(),
        Some(pushed.as_str())
    );

    // A descendant is a fast-forward and goes through.
    let descendant = fixture.commit(Some(&pushed), "a follow-up result\n");
    fixture
        .push(&descendant, "stet/diverged", Some(&credential))
        .unwrap();
    assert_eq!(
        fixture.remote_branch("stet/diverged").as_deref(),
        Some(descendant.as_str())
    );
}

#[test]
fn a_rejection_by_the_remote_reports_its_reason() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let hook = fixture.bare.join("hooks").join("pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'policy: this repository is frozen for the release' >&2\nexit 1\n",
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&hook).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&hook, permissions).unwrap();
    let commit = fixture.commit(None, "result\n");

    let err = fixture
        .push(&commit, "stet/frozen", Some(&credential))
        .unwrap_err();

    match &err {
        PushError::Rejected {
            reference, reason, ..
        } => {
            assert_eq!(reference, "refs/heads/stet/frozen");
            assert!(
                reason.contains("policy: this repository is frozen for the release"),
                "{reason}"
            );
        }
        other => panic!("expected a rejection, got {other}"),
    }
    assert_eq!(fixture.remote_branch("stet/frozen"), None);
}

#[test]
fn a_url_with_userinfo_is_refused_before_any_network_and_never_echoed() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let commit = fixture.commit(None, "result\n");
    let password = random_token(24).unwrap();
    let address = fixture.server.address();
    for url in [
        format!("http://{PUSH_USERNAME}:{password}@{address}/{REPO}.git"),
        format!("http://{password}@{address}/{REPO}.git"),
    ] {
        let err = push(&PushRequest {
            repository: fixture.user.path(),
            url: &url,
            commit: &commit,
            branch: "stet/userinfo",
            credential: Some(&credential),
        })
        .unwrap_err();
        assert!(matches!(err, PushError::UrlUserinfo { .. }), "{err}");
        assert!(!err.to_string().contains(&password), "{err}");
        assert!(!format!("{err:?}").contains(&password), "{err:?}");
        let err = remote_refs(fixture.user.path(), &url, Some(&credential)).unwrap_err();
        assert!(matches!(err, PushError::UrlUserinfo { .. }), "{err}");
        assert!(!err.to_string().contains(&password), "{err}");
    }
    assert_eq!(fixture.server.request_count(), 0);
    assert!(fixture.server.presented().is_empty());
}

#[test]
fn plain_http_to_a_host_beyond_loopback_is_refused_before_any_network() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let commit = fixture.commit(None, "result\n");
    // TEST-NET-1: nothing answers there, so an attempt would hang rather than fail fast.
    for url in [
        "http://192.0.2.1/octo/app.git",
        "http://git.example.test/octo/app.git",
    ] {
        let err = push(&PushRequest {
            repository: fixture.user.path(),
            url,
            commit: &commit,
            branch: "stet/clear",
            credential: Some(&credential),
        })
        .unwrap_err();
        assert!(matches!(err, PushError::InsecureUrl { .. }), "{err}");
        assert!(err.to_string().contains(url), "{err}");
    }
}

#[test]
fn remote_refs_lists_branches_with_their_commits() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let first = fixture.commit(None, "one\n");
    let second = fixture.commit(Some(&first), "two\n");
    fixture.push(&first, "stet/one", Some(&credential)).unwrap();
    fixture
        .push(&second, "stet/two", Some(&credential))
        .unwrap();
    let before = fixture.server.presented().len();

    let refs = remote_refs(fixture.user.path(), &fixture.url(), Some(&credential)).unwrap();

    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        vec![
            ("refs/heads/stet/one".to_owned(), first),
            ("refs/heads/stet/two".to_owned(), second),
        ]
    );
    let listing = &fixture.server.presented()[before..];
    assert!(!listing.is_empty());
    assert!(listing.iter().all(|p| p.service == "git-upload-pack"
        && p.accepted
        && p.password == secret(&credential)));

    let err = remote_refs(fixture.user.path(), &fixture.url(), None).unwrap_err();
    assert!(matches!(err, PushError::CredentialRequired { .. }), "{err}");
}

#[test]
fn a_push_to_a_local_path_needs_no_credential() {
    let fixture = Fixture::new();
    let target = tempfile::tempdir().unwrap();
    Repository::init_bare(target.path()).unwrap();
    let first = fixture.commit(None, "local one\n");
    let second = fixture.commit(Some(&first), "local two\n");
    let path = target.path().to_str().unwrap().to_owned();

    for (url, commit) in [(path.clone(), &first), (format!("file://{path}"), &second)] {
        push(&PushRequest {
            repository: fixture.user.path(),
            url: &url,
            commit,
            branch: "stet/local",
            credential: None,
        })
        .unwrap();
        assert_eq!(
            remote_branch(target.path(), "stet/local").as_deref(),
            Some(commit.as_str())
        );
    }
    let refs = remote_refs(fixture.user.path(), &path, None).unwrap();
    assert_eq!(refs.get("refs/heads/stet/local"), Some(&second));
    assert_eq!(fixture.server.request_count(), 0);
}

#[test]
fn a_commit_missing_from_the_repository_is_a_clear_error_before_any_network() {
    let fixture = Fixture::new();
    let credential = fixture.mint();
    let missing = CommitSha::parse(&"ab".repeat(20)).unwrap();

    let err = fixture
        .push(&missing, "stet/missing", Some(&credential))
        .unwrap_err();

    assert!(
        matches!(&err, PushError::CommitNotFound { commit, .. } if commit == &missing),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(missing.as_str()), "{text}");
    assert!(
        text.contains(fixture.user.path().to_str().unwrap()),
        "{text}"
    );
    assert_eq!(fixture.server.request_count(), 0);
}

#[test]
fn a_credential_refused_in_the_middle_of_a_push_is_an_authentication_failure() {
    let root = tempfile::tempdir().unwrap();
    let provider = Arc::new(LocalCredentialProvider::default());
    let authorizing = provider.clone();
    let decisions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Good for the first request that presents it (the ref advertisement), refused afterwards (the
    // pack upload), as when a credential expires or is revoked while a push runs.
    let server = GitHttpServer::start(
        root.path(),
        Arc::new(move |repo, _user, password| {
            decisions.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
                && authorizing.authorizes(repo, password)
        }),
    );
    let bare = server.create_bare(REPO);
    let user = tempfile::tempdir().unwrap();
    Repository::init(user.path()).unwrap();
    let credential = block_on(ScopedCredential::mint(provider, REPO, "stet/test", TTL)).unwrap();
    let commit = commit_in(user.path(), None, "result\n");

    let err = push(&PushRequest {
        repository: user.path(),
        url: &server.url(REPO),
        commit: &commit,
        branch: "stet/expiring",
        credential: Some(&credential),
    })
    .unwrap_err();

    assert!(
        matches!(err, PushError::AuthenticationFailed { attempts: 1, .. }),
        "{err}"
    );
    let verdicts: Vec<(bool, String)> = server
        .presented()
        .into_iter()
        .map(|p| (p.accepted, p.service))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (true, "git-receive-pack".to_owned()),
            (false, "git-receive-pack".to_owned()),
        ]
    );
    assert_eq!(remote_branch(&bare, "stet/expiring"), None);
}

#[test]
fn a_base_missing_locally_is_fetched_with_the_scoped_credential_and_no_ref_is_written() {
    let f = Fixture::new();
    // The forge's main holds a commit the user's repository has never seen.
    let elsewhere = tempfile::tempdir().unwrap();
    Repository::init(elsewhere.path()).unwrap();
    let base = commit_in(elsewhere.path(), None, "only on the forge");
    let credential = f.mint();
    push(&PushRequest {
        repository: elsewhere.path(),
        url: &f.url(),
        commit: &base,
        branch: "main",
        credential: Some(&credential),
    })
    .unwrap();
    let user = Repository::open(f.user.path()).unwrap();
    let refs_before: Vec<String> = user
        .references()
        .unwrap()
        .filter_map(|r| r.ok()?.name().ok().map(str::to_owned))
        .collect();
    assert!(
        user.find_commit(Oid::from_str(base.as_str()).unwrap())
            .is_err()
    );
    let requests_before = f.server.request_count();

    fetch_commit(f.user.path(), &f.url(), "main", &base, Some(&credential)).unwrap();

    assert!(
        user.find_commit(Oid::from_str(base.as_str()).unwrap())
            .is_ok()
    );
    let refs_after: Vec<String> = user
        .references()
        .unwrap()
        .filter_map(|r| r.ok()?.name().ok().map(str::to_owned))
        .collect();
    assert_eq!(refs_after, refs_before, "the fetch wrote a ref");
    assert!(!f.user.path().join(".git/FETCH_HEAD").exists());
    let presented = f.server.presented();
    assert!(!presented.is_empty());
    assert!(
        presented
            .iter()
            .all(|p| p.password == secret(&credential) && p.user == PUSH_USERNAME),
        "{presented:?}"
    );

    // Present already: no network at all.
    let requests = f.server.request_count();
    assert!(requests > requests_before);
    fetch_commit(f.user.path(), &f.url(), "main", &base, Some(&credential)).unwrap();
    assert_eq!(f.server.request_count(), requests);
}

#[test]
fn a_base_the_branch_no_longer_leads_to_is_a_clear_fetch_error() {
    let f = Fixture::new();
    let elsewhere = tempfile::tempdir().unwrap();
    Repository::init(elsewhere.path()).unwrap();
    let first = commit_in(elsewhere.path(), None, "first");
    let unrelated = commit_in(elsewhere.path(), None, "unrelated");
    let credential = f.mint();
    push(&PushRequest {
        repository: elsewhere.path(),
        url: &f.url(),
        commit: &unrelated,
        branch: "main",
        credential: Some(&credential),
    })
    .unwrap();
    let error =
        fetch_commit(f.user.path(), &f.url(), "main", &first, Some(&credential)).unwrap_err();
    assert!(
        matches!(&error, PushError::FetchFailed { detail, .. } if detail.contains("moved since preflight")),
        "{error}"
    );
    let refused = fetch_commit(f.user.path(), &f.url(), "main", &first, None).unwrap_err();
    assert!(
        matches!(refused, PushError::CredentialRequired { .. }),
        "{refused}"
    );
}
