//! The origin rule from the attacker's side (issue 27 part 1): a forge's git endpoint that answers
//! with a redirect — to another port, to another name for the same address, to another scheme — for
//! each kind of smart-HTTP request, before or after it saw the credential. The credential (a canary
//! made at test time) must reach only the origin stet checked: the redirect targets' own listeners
//! prove it. Run for each forge's git transport (GitHub, Gitea, GitLab) and each credential provider
//! that needs no forge to mint (`local`, and `fallback`, which hands out the user's primary token).

use std::sync::Arc;

use git2::Repository;

use stet_engine::brief::Target;
use stet_engine::credential::{
    CredentialProvider, LocalCredentialProvider, SecretValue, random_token,
};
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::fallback::FallbackCredentialProvider;
use stet_engine::forge::github::{Dialect, GitHubForge};
use stet_engine::forge::gitlab::GitLabForge;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::TokenSource;
use stet_engine::forge::{Forge, Preflight, PushBranch};
use stet_engine::git::push::{PushError, fetch_commit, remote_refs};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use super::git_http::{GitHttpServer, Redirect, RequestKind};
use super::origin_listener::{Listener, REPO, mint, mint_blocking, seeded};
use super::support::git;

/// Where a redirect leads.
#[derive(Debug, Clone, Copy)]
enum Elsewhere {
    /// The same host, another port: the trap.
    Port,
    /// `localhost` for the server's own `127.0.0.1`, same port: the server itself, under another name.
    HostName,
    /// `https://` to the same host, another port: the trap.
    Scheme,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    GitHub,
    Gitea,
    GitLab,
}

#[derive(Debug, Clone, Copy)]
enum Provider {
    Local,
    Fallback,
}

fn make_forge(
    kind: Kind,
    git_url: &str,
    primary: &str,
    sanitizer: &SanitizerHandle,
) -> Box<dyn Forge> {
    let settings = ForgeSettings {
        // Pushing talks to no API; nothing listens here.
        api_url: "http://127.0.0.1:9/api".to_owned(),
        git_url: git_url.to_owned(),
        token: TokenSource::Env("STET_TEST_UNUSED".to_owned()),
        retry: RetryPolicy::default(),
    };
    let remotes = CheckoutRemotes::from_urls(
        [format!("{git_url}/{REPO}.git")],
        &GitHubForge::git_host(git_url).unwrap(),
    );
    let token = SecretValue::new(primary.to_owned());
    match kind {
        Kind::GitHub => {
            Box::new(GitHubForge::with_token(settings, token, sanitizer.clone(), remotes).unwrap())
        }
        Kind::Gitea => Box::new(
            GitHubForge::with_dialect(Dialect::Gitea, settings, token, sanitizer.clone(), remotes)
                .unwrap(),
        ),
        Kind::GitLab => {
            Box::new(GitLabForge::with_token(settings, token, sanitizer.clone(), remotes).unwrap())
        }
    }
}

/// One forge kind and one provider against a redirecting git server: every request kind, every
/// elsewhere, before and after the credential was checked.
async fn redirects_never_carry_the_credential(kind: Kind, provider_kind: Provider) {
    let dir = tempfile::tempdir().unwrap();
    let primary = random_token(40).unwrap();
    let provider: Arc<dyn CredentialProvider> = match provider_kind {
        Provider::Local => Arc::new(LocalCredentialProvider::default()),
        Provider::Fallback => Arc::new(FallbackCredentialProvider::new(
            SecretValue::new(primary.clone()),
            "the test configures no narrow credential",
        )),
    };
    let credential = Arc::new(mint(provider).await);
    let canary = credential.host_push_secret().expose_secret().to_owned();
    if matches!(provider_kind, Provider::Fallback) {
        assert_eq!(canary, primary, "fallback hands out the primary token");
    }
    let only = canary.clone();
    let server = GitHttpServer::start(
        &dir.path().join("forge"),
        Arc::new(move |repo: &str, _user: &str, password: &str| repo == REPO && password == only),
    );
    let remote = server.create_bare(REPO);
    let url = server.url(REPO);
    let git_url = url.trim_end_matches(&format!("/{REPO}.git")).to_owned();
    let origin = format!("http://{}", server.address());
    let trap = Listener::trap();

    let repo = dir.path().join("app");
    let base = CommitSha::parse(&seeded(&repo, &remote)).unwrap();
    std::fs::write(repo.join("result.txt"), "the agent's result\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "result"]);
    let commit = CommitSha::parse(&git(&repo, &["rev-parse", "HEAD"])).unwrap();

    let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let forge = make_forge(kind, &git_url, &primary, &sanitizer);
    let target = Target {
        repo: REPO.to_owned(),
        base: "main".to_owned(),
        branch: None,
        pr: None,
    };
    let preflight = Preflight {
        base_sha: base.clone(),
        head: None,
        push_url: url.clone(),
    };

    for request_kind in RequestKind::ALL {
        for elsewhere in [Elsewhere::Port, Elsewhere::HostName, Elsewhere::Scheme] {
            for after_auth in [false, true] {
                let case = format!(
                    "{kind:?}/{provider_kind:?}: {request_kind:?} redirected to {elsewhere:?} (after the credential was checked: {after_auth})"
                );
                let location = match elsewhere {
                    Elsewhere::Port => format!("http://{}", trap.address()),
                    Elsewhere::HostName => format!("http://localhost:{}", server.address().port()),
                    Elsewhere::Scheme => format!("https://{}", trap.address()),
                };
                let to = match elsewhere {
                    Elsewhere::Port => format!("http://127.0.0.1:{}", trap.address().port()),
                    Elsewhere::HostName => format!("http://localhost:{}", server.address().port()),
                    Elsewhere::Scheme => format!("https://127.0.0.1:{}", trap.address().port()),
                };
                server.redirect(Some(Redirect {
                    kind: request_kind,
                    location,
                    after_auth,
                    once: false,
                }));

                // A fetch of the base into a repository that lacks it: info/refs and upload-pack.
                let empty = tempfile::tempdir().unwrap();
                Repository::init(empty.path()).unwrap();
                let fetched = {
                    let (path, url, base, credential) = (
                        empty.path().to_owned(),
                        url.clone(),
                        base.clone(),
                        Arc::clone(&credential),
                    );
                    tokio::task::spawn_blocking(move || {
                        fetch_commit(&path, &url, "main", &base, Some(&credential))
                    })
                    .await
                    .unwrap()
                };
                // The forge's push: ls-remote (upload info/refs), then info/refs and receive-pack.
                let pushed = forge
                    .push_branch(PushBranch {
                        repository: &repo,
                        target: &target,
                        preflight: &preflight,
                        commit: &commit,
                        branch: "stet/origins",
                        credential: &credential,
                    })
                    .await;
                server.redirect(None);

                let fetch_hit = matches!(
                    request_kind,
                    RequestKind::UploadRefs | RequestKind::UploadPack
                );
                let push_hit = !matches!(request_kind, RequestKind::UploadPack);
                match (&fetched, fetch_hit) {
                    (Err(err @ PushError::RedirectRefused { .. }), true) => {
                        assert_refusal(&err.to_string(), &origin, &to, &canary, &case);
                    }
                    (Ok(()), false) => {}
                    (other, _) => panic!("{case}: the fetch gave {other:?}"),
                }
                match (&pushed, push_hit) {
                    (Err(err), true) => {
                        assert_refusal(&err.to_string(), &origin, &to, &canary, &case)
                    }
                    (Ok(_), false) => {}
                    (other, _) => panic!("{case}: the push gave {other:?}"),
                }

                // What the redirect targets' listeners saw.
                let trapped = trap.settle();
                assert!(
                    trapped.is_empty(),
                    "{case}: the other origin was contacted {} time(s); the credential reached it: {}",
                    trapped.len(),
                    trapped.iter().any(|bytes| carries(bytes, &canary))
                );
                let hosts = server.hosts();
                assert!(
                    hosts
                        .iter()
                        .all(|host| *host == server.address().to_string()),
                    "{case}: the server was reached under another name: {hosts:?}"
                );
                let presented = server.presented();
                assert!(
                    presented
                        .iter()
                        .all(|p| p.host == server.address().to_string()),
                    "{case}: {presented:?}"
                );
            }
        }
    }
    // The rule refuses redirects, not pushes: with no redirect the same push and fetch go through.
    let empty = tempfile::tempdir().unwrap();
    Repository::init(empty.path()).unwrap();
    fetch_commit(empty.path(), &url, "main", &base, Some(&credential)).unwrap();
    let refs = remote_refs(empty.path(), &url, Some(&credential)).unwrap();
    assert_eq!(refs.get("refs/heads/stet/origins"), Some(&commit));
}

/// Whether the recorded bytes hold the canary, plain or as a Basic credential.
fn carries(bytes: &[u8], canary: &str) -> bool {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(bytes);
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{canary}",
        stet_engine::git::push::PUSH_USERNAME
    ));
    text.contains(canary) || text.contains(&basic)
}

fn assert_refusal(text: &str, origin: &str, to: &str, canary: &str, case: &str) {
    assert!(
        text.contains("another origin") && text.contains(origin) && text.contains(to),
        "{case}: the error names neither both origins nor the refusal: {text}"
    );
    assert!(
        !text.contains(canary),
        "{case}: the error shows the credential: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_local_credential_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::GitHub, Provider::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_fallback_primary_token_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::GitHub, Provider::Fallback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_local_credential_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::Gitea, Provider::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_fallback_primary_token_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::Gitea, Provider::Fallback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_local_credential_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::GitLab, Provider::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_fallback_primary_token_stays_at_the_checked_origin() {
    redirects_never_carry_the_credential(Kind::GitLab, Provider::Fallback).await;
}

/// The user's own git configuration cannot send the credential elsewhere either: a proxy
/// (`http.proxy`), a redirect policy (`http.followRedirects = true`) and a rewrite
/// (`url.<base>.insteadOf`) in the repository's configuration.
#[test]
fn the_repositorys_git_configuration_cannot_move_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let canary = random_token(40).unwrap();
    let only = canary.clone();
    let server = GitHttpServer::start(
        &dir.path().join("forge"),
        Arc::new(move |repo: &str, _user: &str, password: &str| repo == REPO && password == only),
    );
    server.create_bare(REPO);
    let trap = Listener::trap();
    let user = dir.path().join("user");
    let repository = Repository::init(&user).unwrap();
    let mut config = repository.config().unwrap();
    config
        .set_str("http.proxy", &format!("http://{}", trap.address()))
        .unwrap();
    config.set_str("http.followRedirects", "true").unwrap();
    server.redirect(Some(Redirect {
        kind: RequestKind::UploadRefs,
        location: format!("http://{}", trap.address()),
        after_auth: true,
        once: false,
    }));
    let credential = mint_blocking(Arc::new(FallbackCredentialProvider::new(
        SecretValue::new(canary.clone()),
        "test",
    )));
    let err = remote_refs(&user, &server.url(REPO), Some(&credential)).unwrap_err();
    assert!(matches!(err, PushError::RedirectRefused { .. }), "{err}");
    config
        .set_str(
            &format!("url.http://{}/.insteadOf", trap.address()),
            &format!("http://{}/", server.address()),
        )
        .unwrap();
    let err = remote_refs(&user, &server.url(REPO), Some(&credential)).unwrap_err();
    assert!(matches!(err, PushError::UrlRewritten { .. }), "{err}");
    assert!(
        trap.settle().is_empty(),
        "the proxy or the rewrite target was contacted"
    );
    assert!(server.presented().iter().all(|p| p.password == canary));
}

/// A redirect within the checked origin is still followed — and one that carries a challenge before
/// any credential was presented no longer crashes the process (libgit2 1.9 dereferences the credential
/// it does not hold yet: SIGSEGV in `best_scheme_and_challenge`).
#[test]
fn a_redirect_within_the_origin_is_followed_and_a_challenge_on_it_crashes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let canary = random_token(40).unwrap();
    let only = canary.clone();
    let server = GitHttpServer::start(
        &dir.path().join("forge"),
        Arc::new(move |repo: &str, _user: &str, password: &str| repo == REPO && password == only),
    );
    let remote = server.create_bare(REPO);
    let seed = dir.path().join("seed");
    let main = seeded(&seed, &remote);
    let credential = mint_blocking(Arc::new(FallbackCredentialProvider::new(
        SecretValue::new(canary.clone()),
        "test",
    )));
    for kind in [RequestKind::UploadRefs, RequestKind::ReceiveRefs] {
        for after_auth in [false, true] {
            server.redirect(Some(Redirect {
                kind,
                location: format!("http://{}", server.address()),
                after_auth,
                once: true,
            }));
            let refs = if kind == RequestKind::UploadRefs {
                remote_refs(&seed, &server.url(REPO), Some(&credential)).unwrap()
            } else {
                let commit = CommitSha::parse(&main).unwrap();
                stet_engine::git::push::push(&stet_engine::git::push::PushRequest {
                    repository: &seed,
                    url: &server.url(REPO),
                    commit: &commit,
                    branch: "stet/origins",
                    credential: Some(&credential),
                })
                .unwrap();
                remote_refs(&seed, &server.url(REPO), Some(&credential)).unwrap()
            };
            assert_eq!(
                refs.get("refs/heads/main").map(CommitSha::as_str),
                Some(main.as_str()),
                "{kind:?} after_auth {after_auth}"
            );
        }
    }
    assert!(server.presented().iter().all(|p| p.accepted));
}
