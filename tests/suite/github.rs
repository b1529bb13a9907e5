//! The GitHub forge and credential providers against GitHub's REST API played by `wiremock` (GitHub
//! itself is out of reach): what is requested (method, path, `Authorization`, body), how answers and
//! failures are read, and that the primary token travels in the `Authorization` header only.
//! Tokens and the app's RSA key are generated at run time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use stet_engine::brief::{Brief, Target};
use stet_engine::credential::{
    CredentialError, CredentialId, CredentialProvider, Revocation, RevokeOutcome, ScopedCredential,
    SecretValue,
};
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::fallback::FallbackCredentialProvider;
use stet_engine::forge::github::GitHubForge;
use stet_engine::forge::github_app::{GitHubAppCredentialProvider, GitHubAppSettings};
use stet_engine::forge::pull_request::PROVENANCE_MARKER;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::{TokenError, TokenSource};
use stet_engine::forge::{Forge, ForgeError, Provenance, PullRequestDraft, ResolvedHead};
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

const GIT_URL: &str = "https://git.example";

/// The checkout the briefs come from has `octo/app` as its remote on the forge.
fn own_remotes() -> CheckoutRemotes {
    CheckoutRemotes::from_urls([format!("{GIT_URL}/octo/app.git")], "git.example")
}

/// A token-like random value, made now (no secret-shaped literal lives in the repository).
fn fake_token() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

fn sha(digit: char) -> String {
    digit.to_string().repeat(40)
}

/// A token command generated at run time: `sh -c "printf '%s' <token>"`.
fn printf_source(token: &str) -> TokenSource {
    TokenSource::Command(vec![
        "sh".into(),
        "-c".into(),
        format!("printf '%s\\n' '{token}'"),
    ])
}

/// Short waits, so retries cost milliseconds.
fn quick() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(2),
    }
}

struct Fixture {
    server: MockServer,
    token: String,
    sanitizer: SanitizerHandle,
    forge: GitHubForge,
}

async fn fixture_with(retry: RetryPolicy) -> Fixture {
    let server = MockServer::start().await;
    let token = fake_token();
    let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let forge = GitHubForge::new(
        ForgeSettings {
            api_url: server.uri(),
            git_url: GIT_URL.to_owned(),
            token: printf_source(&token),
            retry,
        },
        sanitizer.clone(),
        own_remotes(),
    )
    .unwrap();
    Fixture {
        server,
        token,
        sanitizer,
        forge,
    }
}

async fn fixture() -> Fixture {
    fixture_with(quick()).await
}

fn target(base: &str, pr: Option<u64>) -> Target {
    Target {
        repo: "octo/app".to_owned(),
        base: base.to_owned(),
        branch: None,
        pr,
    }
}

fn json_reply(status: u16, body: Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(body)
}

async fn mount_repo_and_base(server: &MockServer, base_path: &str, base_sha: &str) {
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(json_reply(200, json!({"full_name": "octo/app"})))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(base_path))
        .respond_with(json_reply(
            200,
            json!({"name": "main", "commit": {"sha": base_sha}}),
        ))
        .mount(server)
        .await;
}

/// Answers `POST /repos/octo/app/pulls` with pull request #12, opened.
async fn mount_opened_pull(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/repos/octo/app/pulls"))
        .respond_with(json_reply(
            201,
            json!({"number": 12, "html_url": format!("{GIT_URL}/octo/app/pull/12")}),
        ))
        .mount(server)
        .await;
}

/// Answers `GET /repos/octo/app/pulls/<number>` with `pull`.
async fn mount_pull(server: &MockServer, number: u64, pull: Value) {
    Mock::given(method("GET"))
        .and(path(format!("/repos/octo/app/pulls/{number}")))
        .respond_with(json_reply(200, pull))
        .mount(server)
        .await;
}

fn pull_json(number: u64, state: &str, head_repo: Value, head_sha: &str) -> Value {
    json!({
        "number": number,
        "state": state,
        "merged": false,
        "html_url": format!("{GIT_URL}/octo/app/pull/{number}"),
        "head": {"ref": "stet/feature", "sha": head_sha, "repo": head_repo},
        "base": {"ref": "main", "sha": sha('a'), "repo": {"full_name": "octo/app"}},
    })
}

async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.unwrap()
}

/// The request carries the primary token as its bearer, and nowhere else (URL, other headers, body).
fn assert_token_only_in_authorization(request: &Request, token: &str) {
    assert_eq!(
        request.headers.get("authorization").unwrap(),
        &format!("Bearer {token}"),
        "{} {}",
        request.method,
        request.url
    );
    assert!(!request.url.as_str().contains(token));
    for (name, value) in &request.headers {
        if name != "authorization" {
            assert!(
                !value
                    .as_bytes()
                    .windows(token.len())
                    .any(|w| w == token.as_bytes())
            );
        }
    }
    assert!(!String::from_utf8_lossy(&request.body).contains(token));
}

fn calls(requests: &[Request], verb: &str, at: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path() == at)
        .count()
}

/// A brief's own branch that already exists is refused at preflight, before any agent runs; an absent
/// one (404) is fine.
#[tokio::test]
async fn a_brief_may_target_only_a_repository_the_checkout_has_as_a_remote() {
    let fx = fixture().await;
    let mut steered = target("main", None);
    steered.repo = "victim/app".to_owned();
    let err = fx.forge.preflight(&steered).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::NotThisCheckout { repo, remotes, .. } if repo == "victim/app" && remotes == "octo/app"),
        "{err}"
    );
    assert!(err.to_string().contains("git remote add"), "{err}");
    let asked = fx.server.received_requests().await.unwrap_or_default();
    assert!(
        asked.is_empty(),
        "the forge was not asked anything: {asked:?}"
    );
}

#[tokio::test]
async fn preflight_refuses_a_brief_branch_that_already_exists() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app/branches/stet/taken"))
        .respond_with(json_reply(
            200,
            json!({"name": "stet/taken", "commit": {"sha": sha('b')}}),
        ))
        .mount(&f.server)
        .await;
    let with_branch = |branch: &str| Target {
        branch: Some(branch.to_owned()),
        ..target("main", None)
    };
    let error = f
        .forge
        .preflight(&with_branch("stet/taken"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ForgeError::BranchExists { branch, .. } if branch == "stet/taken"),
        "{error}"
    );
    assert!(error.to_string().contains("set `pr = N`"), "{error}");
    let free = f.forge.preflight(&with_branch("stet/free")).await.unwrap();
    assert_eq!(free.base_sha, CommitSha::parse(&sha('a')).unwrap());
    assert!(
        received(&f.server)
            .await
            .iter()
            .all(|request| request.method.as_str() == "GET")
    );
}

#[tokio::test]
async fn preflight_finds_the_repository_and_the_base_with_gets_only() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;

    let preflight = f.forge.preflight(&target("main", None)).await.unwrap();

    assert_eq!(preflight.base_sha, CommitSha::parse(&sha('a')).unwrap());
    assert_eq!(preflight.head, None);
    assert_eq!(preflight.push_url, format!("{GIT_URL}/octo/app.git"));
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.method.as_str(),
            "GET",
            "preflight has no side effects"
        );
        assert!(request.body.is_empty());
        assert_token_only_in_authorization(request, &f.token);
    }
}

#[tokio::test]
async fn preflight_reports_a_missing_repository() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(json_reply(404, json!({"message": "Not Found"})))
        .mount(&f.server)
        .await;

    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::RepositoryNotFound { repo, .. } if repo == "octo/app"),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 404 is not retried");
}

#[tokio::test]
async fn preflight_reports_a_missing_base_and_encodes_each_segment_of_its_name() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(json_reply(200, json!({"full_name": "octo/app"})))
        .mount(&f.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app/branches/feature/x%231"))
        .respond_with(json_reply(404, json!({"message": "Branch not found"})))
        .mount(&f.server)
        .await;

    let err = f
        .forge
        .preflight(&target("feature/x#1", None))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::BaseNotFound { base, .. } if base == "feature/x#1"),
        "{err}"
    );
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].url.path(),
        "/repos/octo/app/branches/feature/x%231"
    );
    assert_eq!(
        requests[1].url.fragment(),
        None,
        "the # never became a fragment"
    );
}

#[tokio::test]
async fn preflight_resolves_an_existing_pull_requests_real_head() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    mount_pull(
        &f.server,
        7,
        pull_json(7, "open", json!({"full_name": "Octo/App"}), &sha('b')),
    )
    .await;

    let preflight = f.forge.preflight(&target("main", Some(7))).await.unwrap();

    let head = ResolvedHead {
        number: 7,
        branch: "stet/feature".to_owned(),
        sha: CommitSha::parse(&sha('b')).unwrap(),
    };
    assert_eq!(preflight.head, Some(head));
    assert_eq!(
        preflight.parent().as_str(),
        sha('b'),
        "the result builds on the PR's head"
    );
    let requests = received(&f.server).await;
    assert_eq!(calls(&requests, "GET", "/repos/octo/app/pulls/7"), 1);
    assert!(requests.iter().all(|r| r.method.as_str() == "GET"));
}

#[tokio::test]
async fn preflight_refuses_a_closed_or_merged_pull_request() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    mount_pull(
        &f.server,
        8,
        pull_json(8, "closed", json!({"full_name": "octo/app"}), &sha('b')),
    )
    .await;
    let mut merged = pull_json(9, "closed", json!({"full_name": "octo/app"}), &sha('b'));
    merged["merged"] = json!(true);
    Mock::given(method("GET"))
        .and(path("/repos/octo/app/pulls/9"))
        .respond_with(json_reply(200, merged))
        .mount(&f.server)
        .await;

    let closed = f
        .forge
        .preflight(&target("main", Some(8)))
        .await
        .unwrap_err();
    let was_merged = f
        .forge
        .preflight(&target("main", Some(9)))
        .await
        .unwrap_err();

    assert!(
        matches!(&closed, ForgeError::PullRequestClosed { number: 8, state, .. } if state == "closed"),
        "{closed}"
    );
    assert!(
        matches!(&was_merged, ForgeError::PullRequestClosed { number: 9, state, .. } if state == "merged"),
        "{was_merged}"
    );
}

#[tokio::test]
async fn preflight_refuses_a_pull_request_from_a_fork() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    mount_pull(
        &f.server,
        5,
        pull_json(5, "open", json!({"full_name": "mallory/app"}), &sha('b')),
    )
    .await;

    let err = f
        .forge
        .preflight(&target("main", Some(5)))
        .await
        .unwrap_err();

    assert!(matches!(err, ForgeError::InvalidTarget { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("fork mallory/app") && text.contains("#5"),
        "{text}"
    );
}

fn brief(secret_in_text: &str) -> Brief {
    Brief::parse(
        "fix-login",
        Path::new("fix-login.toml"),
        &format!(
            r#"
title = "Fix the login redirect loop"
workflow = "implement"
[target]
repo = "octo/app"
base = "main"
[[items]]
text = "The redirect loops; the agent once printed {secret_in_text} here."
"#
        ),
    )
    .unwrap()
}

fn provenance() -> Provenance {
    Provenance {
        dispatch: DispatchId::new(),
        image: format!("sha256:{}", "cd".repeat(32)),
        harness: "openhands".into(),
        harness_version: None,
        model: None,
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
        peak_reserved_usd: None,
        network: "none".into(),
        egress: None,
        credential_kind: "github-app".into(),
        redactions: 0,
        duration: Duration::from_secs(90),
        base: CommitSha::parse(&sha('a')).unwrap(),
        commit: CommitSha::parse(&sha('c')).unwrap(),
    }
}

/// A draft composed the way the engine composes it, with the sanitizer the forge taught its token.
fn draft(f: &Fixture, head: &str) -> PullRequestDraft {
    PullRequestDraft::compose(
        &brief(&f.token),
        head,
        Some("Fixed the loop."),
        &provenance(),
        &f.sanitizer.current(),
    )
}

#[tokio::test]
async fn opening_a_pull_request_posts_title_body_head_and_base_only() {
    let f = fixture().await;
    mount_opened_pull(&f.server).await;
    let draft = draft(&f, "stet/fix-login");

    let opened = f
        .forge
        .open_pull_request(&target("main", None), &draft)
        .await
        .unwrap();

    assert_eq!(
        (opened.number, opened.url.as_str(), opened.opened),
        (12, format!("{GIT_URL}/octo/app/pull/12").as_str(), true)
    );
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_token_only_in_authorization(request, &f.token);
    let sent: Value = request.body_json().unwrap();
    let keys: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["base", "body", "head", "title"]);
    assert_eq!(sent["title"], "Fix the login redirect loop");
    assert_eq!(
        (sent["head"].as_str(), sent["base"].as_str()),
        (Some("stet/fix-login"), Some("main"))
    );
    let body = sent["body"].as_str().unwrap();
    assert!(body.contains(PROVENANCE_MARKER), "{body}");
    assert!(body.contains("| Credential | github-app"), "{body}");
    assert!(
        body.contains("[REDACTED:primary-token]"),
        "the brief's copy of the token was masked: {body}"
    );
}

#[tokio::test]
async fn an_existing_pull_request_is_patched_at_its_resolved_number_and_never_posted() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    mount_pull(
        &f.server,
        7,
        pull_json(7, "open", json!({"full_name": "octo/app"}), &sha('b')),
    )
    .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/octo/app/pulls/7"))
        .respond_with(json_reply(
            200,
            pull_json(7, "open", json!({"full_name": "octo/app"}), &sha('c')),
        ))
        .mount(&f.server)
        .await;
    let target = target("main", Some(7));

    let preflight = f.forge.preflight(&target).await.unwrap();
    let head = preflight.head.unwrap();
    let draft = draft(&f, &head.branch);
    let updated = f
        .forge
        .update_pull_request(&target, head.number, &draft)
        .await
        .unwrap();

    assert_eq!((updated.number, updated.opened), (7, false));
    assert_eq!(updated.url, format!("{GIT_URL}/octo/app/pull/7"));
    let requests = received(&f.server).await;
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.method.as_str() == "POST")
            .count(),
        0
    );
    assert_eq!(calls(&requests, "PATCH", "/repos/octo/app/pulls/7"), 1);
    let patch = requests
        .iter()
        .find(|r| r.method.as_str() == "PATCH")
        .unwrap();
    assert_token_only_in_authorization(patch, &f.token);
    let sent: Value = patch.body_json().unwrap();
    let keys: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["body", "title"],
        "an update changes the text, never head, base or state"
    );
}

#[tokio::test]
async fn a_second_pull_request_for_the_same_head_is_reported_as_existing() {
    let f = fixture().await;
    Mock::given(method("POST"))
        .and(path("/repos/octo/app/pulls"))
        .respond_with(json_reply(
            422,
            json!({
                "message": "Validation Failed",
                "errors": [{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for octo:stet/x."}],
            }),
        ))
        .mount(&f.server)
        .await;

    let err = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/x"))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::PullRequestExists { head, base, detail, .. }
            if head == "stet/x" && base == "main" && detail.contains("already exists for octo:stet/x")),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 422 is not retried");
}

#[tokio::test]
async fn server_errors_are_retried_until_one_succeeds() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(json_reply(502, json!({"message": "Server Error"})))
        .up_to_n_times(2)
        .mount(&f.server)
        .await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;

    let preflight = f.forge.preflight(&target("main", None)).await.unwrap();

    assert_eq!(preflight.base_sha.as_str(), sha('a'));
    let requests = received(&f.server).await;
    assert_eq!(
        calls(&requests, "GET", "/repos/octo/app"),
        3,
        "two failures, then success"
    );
    assert_eq!(calls(&requests, "GET", "/repos/octo/app/branches/main"), 1);
}

/// A POST the forge may have carried out (a 5xx, an answer cut short) is not sent again: a second
/// mint would leave a token stet never saw and cannot revoke, a second pull request an "already
/// exists". A rate-limited POST was not acted on, and is repeated.
#[tokio::test]
async fn a_post_is_repeated_only_when_the_forge_did_not_act_on_it() {
    let f = fixture().await;
    Mock::given(method("POST"))
        .and(path("/repos/octo/app/pulls"))
        .respond_with(json_reply(502, json!({"message": "Server Error"})))
        .up_to_n_times(1)
        .mount(&f.server)
        .await;
    mount_opened_pull(&f.server).await;
    let draft = draft(&f, "stet/fix-login");

    let err = f
        .forge
        .open_pull_request(&target("main", None), &draft)
        .await
        .unwrap_err();

    assert!(
        matches!(
            &err,
            ForgeError::Server {
                status: 502,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        calls(&received(&f.server).await, "POST", "/repos/octo/app/pulls"),
        1
    );

    f.server.reset().await;
    Mock::given(method("POST"))
        .and(path("/repos/octo/app/pulls"))
        .respond_with(
            json_reply(429, json!({"message": "API rate limit exceeded"}))
                .insert_header("retry-after", "0"),
        )
        .up_to_n_times(1)
        .mount(&f.server)
        .await;
    mount_opened_pull(&f.server).await;

    let opened = f
        .forge
        .open_pull_request(&target("main", None), &draft)
        .await
        .unwrap();

    assert_eq!(opened.number, 12);
    assert_eq!(
        calls(&received(&f.server).await, "POST", "/repos/octo/app/pulls"),
        2,
        "the rate-limited POST was sent again"
    );
}

/// A POST that never reached the forge (the connection was refused) is repeated like any request.
#[tokio::test]
async fn a_post_that_never_connected_is_repeated() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let token = fake_token();
    let forge = GitHubForge::new(
        ForgeSettings {
            api_url,
            git_url: GIT_URL.to_owned(),
            token: printf_source(&token),
            retry: quick(),
        },
        sanitizer,
        own_remotes(),
    )
    .unwrap();
    let f = fixture().await;
    let draft = draft(&f, "stet/fix-login");

    let err = forge
        .open_pull_request(&target("main", None), &draft)
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::Transport { detail, .. } if detail.ends_with("(after 3 attempts)")),
        "{err}"
    );
    assert!(!err.to_string().contains(&token), "{err}");
}

#[tokio::test]
async fn server_errors_that_persist_fail_after_the_last_attempt() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(json_reply(503, json!({"message": "Service Unavailable"})))
        .mount(&f.server)
        .await;

    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(
            &err,
            ForgeError::Server {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        received(&f.server).await.len(),
        3,
        "the client adds no retry of its own"
    );
}

#[tokio::test]
async fn a_secondary_rate_limit_is_waited_out_as_retry_after_asks() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(
            json_reply(
                403,
                json!({"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}),
            )
            .insert_header("retry-after", "1"),
        )
        .up_to_n_times(1)
        .mount(&f.server)
        .await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;

    let started = Instant::now();
    f.forge.preflight(&target("main", None)).await.unwrap();

    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After was honoured"
    );
    assert_eq!(
        calls(&received(&f.server).await, "GET", "/repos/octo/app"),
        2
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_the_maximum_delay_fails_at_once() {
    let f = fixture().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(
            json_reply(429, json!({"message": "API rate limit exceeded"}))
                .insert_header("retry-after", "120"),
        )
        .mount(&f.server)
        .await;

    let started = Instant::now();
    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::RateLimited { attempts: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("API rate limit exceeded"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "did not wait");
    assert_eq!(received(&f.server).await.len(), 1);
}

#[tokio::test]
async fn an_exhausted_primary_rate_limit_waits_for_its_reset_or_gives_up() {
    let f = fixture().await;
    let reset = Utc::now().timestamp() + 3600;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(
            json_reply(403, json!({"message": "API rate limit exceeded for user."}))
                .insert_header("x-ratelimit-remaining", "0")
                .insert_header("x-ratelimit-reset", reset.to_string().as_str()),
        )
        .mount(&f.server)
        .await;

    let started = Instant::now();
    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::RateLimited { attempts: 1, .. }),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "an hour is not waited for"
    );
}

#[tokio::test]
async fn refusals_map_to_distinct_errors_that_carry_githubs_words_but_no_token() {
    let cases: [(u16, &str); 4] = [
        (401, "Unauthorized"),
        (403, "Forbidden"),
        (404, "NotFound"),
        (422, "Unprocessable"),
    ];
    for (status, expected) in cases {
        let f = fixture().await;
        // A server that echoes the token back must not make an error show it.
        let message = format!("refusal {status} while reading {}", f.token);
        Mock::given(method("POST"))
            .and(path("/repos/octo/app/pulls"))
            .respond_with(json_reply(
                status,
                json!({"message": message, "errors": [{"message": "the head is odd"}]}),
            ))
            .mount(&f.server)
            .await;

        let err = f
            .forge
            .open_pull_request(&target("main", None), &draft(&f, "stet/x"))
            .await
            .unwrap_err();

        let variant = match &err {
            ForgeError::Unauthorized { .. } => "Unauthorized",
            ForgeError::Forbidden { .. } => "Forbidden",
            ForgeError::NotFound { .. } => "NotFound",
            ForgeError::Unprocessable { .. } => "Unprocessable",
            other => panic!("{status}: unexpected {other:?}"),
        };
        assert_eq!(variant, expected);
        let text = err.to_string();
        assert!(!text.contains(&f.token), "{text}");
        assert!(!format!("{err:?}").contains(&f.token));
        assert!(
            text.contains(&format!(
                "refusal {status} while reading [REDACTED:primary-token]"
            )),
            "{text}"
        );
        assert!(text.contains("the head is odd"), "{text}");
        assert_eq!(
            received(&f.server).await.len(),
            1,
            "{status} is not retried"
        );
    }
}

#[tokio::test]
async fn the_token_can_come_from_an_environment_variable() {
    // The test process cannot set variables (no unsafe), so it reads one cargo started it with.
    let (name, value) = ["CARGO_MANIFEST_DIR", "CARGO", "PATH", "HOME", "PWD"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?)))
        .find(|(_, v)| v.len() >= 8 && v.bytes().all(|b| b.is_ascii_graphic()))
        .expect("a one-word environment variable");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .and(header("authorization", format!("Bearer {value}").as_str()))
        .respond_with(json_reply(404, json!({"message": "Not Found"})))
        .mount(&server)
        .await;
    let forge = GitHubForge::new(
        ForgeSettings {
            api_url: server.uri(),
            git_url: GIT_URL.to_owned(),
            token: TokenSource::Env(name),
            retry: quick(),
        },
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
        own_remotes(),
    )
    .unwrap();

    let err = forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(err, ForgeError::RepositoryNotFound { .. }),
        "the bearer matched: {err}"
    );
}

#[tokio::test]
async fn a_missing_environment_variable_is_named() {
    let name = format!("STET_TEST_UNSET_{}", uuid::Uuid::new_v4().simple());
    let err = GitHubForge::new(
        ForgeSettings {
            api_url: "https://api.example".to_owned(),
            git_url: GIT_URL.to_owned(),
            token: TokenSource::Env(name.clone()),
            retry: quick(),
        },
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
        own_remotes(),
    )
    .unwrap_err();

    assert!(matches!(err, ForgeError::Token { .. }), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    let direct = TokenSource::Env(name.clone()).resolve().unwrap_err();
    assert!(matches!(direct, TokenError::EnvMissing { .. }));
}

#[tokio::test]
async fn the_token_can_come_from_a_command() {
    let token = fake_token();
    let resolved = printf_source(&token).resolve().unwrap();
    assert_eq!(resolved.expose_secret(), token, "stdout is trimmed");

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .and(header("authorization", format!("Bearer {token}").as_str()))
        .respond_with(json_reply(404, json!({"message": "Not Found"})))
        .mount(&server)
        .await;
    let forge = GitHubForge::new(
        ForgeSettings {
            api_url: server.uri(),
            git_url: GIT_URL.to_owned(),
            token: printf_source(&token),
            retry: quick(),
        },
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
        own_remotes(),
    )
    .unwrap();
    let err = forge.preflight(&target("main", None)).await.unwrap_err();
    assert!(
        matches!(err, ForgeError::RepositoryNotFound { .. }),
        "the bearer matched: {err}"
    );
    assert!(!format!("{forge:?}").contains(&token));
}

#[test]
fn a_failing_or_silent_token_command_is_named_with_its_status_and_stderr() {
    let failing = TokenSource::Command(vec![
        "sh".into(),
        "-c".into(),
        "echo 'not logged in' >&2; exit 7".into(),
    ]);
    let err = failing.resolve().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TokenError::Failed { .. }), "{text}");
    assert!(
        text.contains("sh -c echo 'not logged in' >&2; exit 7"),
        "{text}"
    );
    assert!(text.contains("exit status: 7"), "{text}");
    assert!(text.contains("not logged in"), "{text}");

    let silent = TokenSource::Command(vec!["sh".into(), "-c".into(), "printf '\\n'".into()]);
    let err = silent.resolve().unwrap_err();
    assert!(matches!(err, TokenError::EmptyOutput { .. }), "{err}");
}

/// The format openssl writes an app's private key in.
#[derive(Clone, Copy)]
enum KeyFormat {
    /// `BEGIN RSA PRIVATE KEY`, as GitHub hands the key out.
    Pkcs1,
    /// `BEGIN PRIVATE KEY`, openssl 3's default.
    Pkcs8,
}

/// An RSA key pair made by openssl for this test: (private key path, public key path).
fn app_key_as(dir: &Path, format: KeyFormat) -> (PathBuf, PathBuf) {
    let private = dir.join("app.pem");
    let public = dir.join("app.pub.pem");
    let private_arg = private.to_str().unwrap();
    let mut genrsa = vec!["genrsa", "-out", private_arg];
    if let KeyFormat::Pkcs1 = format {
        genrsa.push("-traditional");
    }
    genrsa.push("2048");
    openssl(&genrsa);
    openssl(&[
        "rsa",
        "-in",
        private_arg,
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    (private, public)
}

fn app_key(dir: &Path) -> (PathBuf, PathBuf) {
    app_key_as(dir, KeyFormat::Pkcs8)
}

fn openssl(args: &[&str]) -> std::process::Output {
    let output = Command::new("openssl").args(args).output().unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Checks a JWT's RS256 signature with openssl (an implementation independent of stet's) and
/// returns its header and claims.
fn verified_jwt(jwt: &str, public: &Path, dir: &Path) -> (Value, AppClaims) {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (signed, signature) = jwt.rsplit_once('.').unwrap();
    let (header, claims) = signed.split_once('.').unwrap();
    let data = dir.join("jwt.signed");
    let sig = dir.join("jwt.sig");
    std::fs::write(&data, signed).unwrap();
    std::fs::write(&sig, URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    let output = openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        public.to_str().unwrap(),
        "-signature",
        sig.to_str().unwrap(),
        data.to_str().unwrap(),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "Verified OK"
    );
    (
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap(),
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap(),
    )
}

#[derive(serde::Deserialize)]
struct AppClaims {
    iss: u64,
    iat: i64,
    exp: i64,
}

const APP_ID: u64 = 4242;
const INSTALLATION_ID: u64 = 99;

fn app_provider(server: &MockServer, key: PathBuf) -> GitHubAppCredentialProvider {
    GitHubAppCredentialProvider::new(GitHubAppSettings {
        api_url: server.uri(),
        app_id: APP_ID,
        installation_id: INSTALLATION_ID,
        private_key: key,
    })
    .unwrap()
}

#[tokio::test]
async fn an_installation_token_is_minted_for_one_repository_with_two_permissions_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = app_key(dir.path());
    let server = MockServer::start().await;
    let installation_token = fake_token();
    let github_expiry = Utc::now() + chrono::Duration::hours(1);
    Mock::given(method("POST"))
        .and(path(format!(
            "/app/installations/{INSTALLATION_ID}/access_tokens"
        )))
        .respond_with(json_reply(
            201,
            json!({
                "token": installation_token,
                "expires_at": github_expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "permissions": {"contents": "write", "pull_requests": "write"},
                "repository_selection": "selected",
            }),
        ))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/installation/token"))
        .and(header(
            "authorization",
            format!("Bearer {installation_token}").as_str(),
        ))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/installation/token"))
        .respond_with(json_reply(404, json!({"message": "Not Found"})))
        .mount(&server)
        .await;
    let provider = app_provider(&server, key);
    assert_eq!(provider.name(), "github-app");
    assert!(provider.enters_sandbox());

    let before = Utc::now();
    let minted = provider
        .mint("octo/app", "stet/fix", Duration::from_secs(600))
        .await
        .unwrap();

    assert_eq!(minted.value.expose_secret(), installation_token);
    assert!(minted.id.as_str().starts_with("github-app-"));
    let ttl_end = before + chrono::Duration::seconds(600);
    assert!(
        minted.expires_at >= ttl_end - chrono::Duration::seconds(5)
            && minted.expires_at <= ttl_end + chrono::Duration::seconds(5),
        "the shorter of GitHub's expiry and the TTL: {}",
        minted.expires_at
    );
    let requests = received(&server).await;
    assert_eq!(requests.len(), 1);
    let mint = &requests[0];
    let bearer = mint.headers.get("authorization").unwrap().to_str().unwrap();
    let jwt = bearer.strip_prefix("Bearer ").unwrap();
    let (jwt_header, claims) = verified_jwt(jwt, &public, dir.path());
    assert_eq!(jwt_header, json!({"alg": "RS256", "typ": "JWT"}));
    assert_eq!(claims.iss, APP_ID);
    let now = Utc::now().timestamp();
    assert!(claims.iat <= now && claims.exp > now, "valid now");
    assert!(
        claims.exp - claims.iat <= 600,
        "GitHub accepts ten minutes at most"
    );
    assert_eq!(
        mint.body_json::<Value>().unwrap(),
        json!({"repositories": ["app"], "permissions": {"contents": "write", "pull_requests": "write"}})
    );

    assert_eq!(
        provider.revoke(&minted.id).await.unwrap(),
        Revocation::Revoked
    );
    assert_eq!(
        provider.revoke(&minted.id).await.unwrap(),
        Revocation::AlreadyGone,
        "a second revoke's 404 counts as done"
    );
    let deletes: Vec<Request> = received(&server)
        .await
        .into_iter()
        .filter(|r| r.method.as_str() == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 2);
    for delete in &deletes {
        assert_eq!(delete.url.path(), "/installation/token");
        assert_eq!(
            delete.headers.get("authorization").unwrap(),
            &format!("Bearer {installation_token}"),
            "revoked with the token itself"
        );
    }
    assert!(!format!("{provider:?}").contains(&installation_token));
}

#[tokio::test]
async fn a_credential_this_process_did_not_mint_is_not_revocable() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = app_key(dir.path());
    let server = MockServer::start().await;
    let provider = app_provider(&server, key);

    let answer = provider
        .revoke(&CredentialId::new(
            "github-app-from-an-earlier-process".to_owned(),
        ))
        .await
        .unwrap();

    assert_eq!(answer, Revocation::NotRevocable);
    assert!(
        received(&server).await.is_empty(),
        "nothing to send it with"
    );
}

#[tokio::test]
async fn a_refused_mint_is_a_readable_provider_error() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = app_key(dir.path());
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("/app/installations/{INSTALLATION_ID}/access_tokens")))
        .respond_with(json_reply(
            422,
            json!({"message": "There is at least one repository that does not exist or is not accessible to the parent installation."}),
        ))
        .mount(&server)
        .await;
    let provider = app_provider(&server, key);

    let err = provider
        .mint("octo/elsewhere", "stet/x", Duration::from_secs(600))
        .await
        .unwrap_err();

    assert!(
        matches!(
            &err,
            CredentialError::Provider {
                provider: "github-app",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("not accessible to the parent installation"),
        "{err}"
    );
}

/// GitHub hands an app's key out as PKCS#1 (`BEGIN RSA PRIVATE KEY`); it signs as well as PKCS#8.
#[tokio::test]
async fn a_key_as_github_hands_it_out_signs_what_openssl_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = app_key_as(dir.path(), KeyFormat::Pkcs1);
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----")
    );
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/app/installations/{INSTALLATION_ID}/access_tokens"
        )))
        .respond_with(json_reply(201, json!({"token": fake_token()})))
        .mount(&server)
        .await;
    let provider = app_provider(&server, key);

    provider
        .mint("octo/app", "stet/fix", Duration::from_secs(60))
        .await
        .unwrap();

    let requests = received(&server).await;
    let bearer = requests[0].headers.get("authorization").unwrap();
    let jwt = bearer.to_str().unwrap().strip_prefix("Bearer ").unwrap();
    let (_, claims) = verified_jwt(jwt, &public, dir.path());
    assert_eq!(claims.iss, APP_ID);
}

/// A redirect within the API (GitHub's answer for a renamed repository) is followed with the token;
/// one to another origin is not, and the other server never sees the token.
#[tokio::test]
async fn redirects_are_followed_only_within_the_api_origin() {
    let f = fixture().await;
    let elsewhere = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(ResponseTemplate::new(301).insert_header("location", "/repositories/7"))
        .mount(&f.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repositories/7"))
        .respond_with(json_reply(200, json!({"full_name": "octo/app"})))
        .mount(&f.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app/branches/main"))
        .respond_with(ResponseTemplate::new(307).insert_header(
            "location",
            format!("{}/repos/octo/app/branches/main", elsewhere.uri()).as_str(),
        ))
        .mount(&f.server)
        .await;
    Mock::given(method("GET"))
        .respond_with(json_reply(
            200,
            json!({"name": "main", "commit": {"sha": sha('a')}}),
        ))
        .mount(&elsewhere)
        .await;

    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    let requests = received(&f.server).await;
    assert_eq!(
        calls(&requests, "GET", "/repositories/7"),
        1,
        "the same-origin redirect was followed"
    );
    for request in &requests {
        assert_token_only_in_authorization(request, &f.token);
    }
    assert!(
        matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("another origin")),
        "{err}"
    );
    assert!(
        received(&elsewhere).await.is_empty(),
        "nothing, and so no token, reached the other origin"
    );
}

/// A primary token no HTTP header can carry (a space inside, as a paste may leave it) is a token
/// error at once: nothing is sent, nothing is retried, and the error does not say the forge could not
/// be reached.
#[tokio::test]
async fn a_token_no_header_can_carry_is_a_token_error_not_an_unreachable_forge() {
    let server = MockServer::start().await;
    let token = format!("{} {}", fake_token(), fake_token());
    let forge = GitHubForge::with_token(
        ForgeSettings {
            api_url: server.uri(),
            git_url: GIT_URL.to_owned(),
            token: TokenSource::Env("STET_TEST_UNUSED".to_owned()),
            retry: quick(),
        },
        SecretValue::new(token.clone()),
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
        own_remotes(),
    )
    .unwrap();

    let err = forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::Token { detail, .. } if detail.contains("cannot carry")),
        "{err}"
    );
    assert!(!err.to_string().contains(&token), "{err}");
    assert!(received(&server).await.is_empty());
}

/// The child of [`an_answer_of_tiny_chunks_costs_memory_by_its_size_not_its_chunks`].
const TINY_CHUNKS_TEST: &str =
    "suite::github::an_answer_of_tiny_chunks_costs_memory_by_its_size_not_its_chunks";
/// Its presence makes the test the child.
const TINY_CHUNKS_CHILD_ENV: &str = "STET_TEST_TINY_CHUNKS_CHILD";
/// How the child reports its peak memory growth, in bytes.
const TINY_CHUNKS_GREW: &str = "TINY-CHUNKS-GREW=";
/// The answer's size: this many one-byte chunks.
const TINY_CHUNKS: usize = 512 * 1024;

/// Bound: memory. An answer well under the size bound, sent as one-byte chunks, costs memory by its
/// size: read frame by frame into one buffer, not collected as 512 Ki frames of tens of bytes each,
/// every one keeping alive the buffer it was read into (at the 8 MiB bound that was ~0.4 GB for one
/// request). Peak memory is process-wide, so the request runs in a child: this test binary run again
/// on this one test.
#[test]
fn an_answer_of_tiny_chunks_costs_memory_by_its_size_not_its_chunks() {
    if std::env::var_os(TINY_CHUNKS_CHILD_ENV).is_some() {
        let grew = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tiny_chunks_child());
        println!("{TINY_CHUNKS_GREW}{grew}");
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            TINY_CHUNKS_TEST,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(TINY_CHUNKS_CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let grew: u64 = stdout
        .lines()
        .find_map(|line| Some(line.split_once(TINY_CHUNKS_GREW)?.1))
        .and_then(|bytes| bytes.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the child failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let body = TINY_CHUNKS as u64;
    assert!(
        grew <= 16 * body,
        "an answer of {body} bytes in one-byte chunks grew peak memory by {grew} bytes"
    );
}

/// A server answering `404` with [`TINY_CHUNKS`] one-byte chunks, and a preflight against it: the
/// growth of this process's peak memory while the answer is read.
async fn tiny_chunks_child() -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut answer = b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    answer.extend(b"1\r\n \r\n".repeat(TINY_CHUNKS));
    answer.extend(b"0\r\n\r\n");
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0; 64 * 1024];
        let mut read = 0;
        while !request[..read].windows(4).any(|w| w == b"\r\n\r\n") {
            read += socket.read(&mut request[read..]).await.unwrap();
        }
        socket.write_all(&answer).await.unwrap();
    });
    let forge = GitHubForge::with_token(
        ForgeSettings {
            api_url: format!("http://{addr}"),
            git_url: GIT_URL.to_owned(),
            token: TokenSource::Env("STET_TEST_UNUSED".to_owned()),
            retry: RetryPolicy {
                max_attempts: 1,
                ..quick()
            },
        },
        SecretValue::new(fake_token()),
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
        own_remotes(),
    )
    .unwrap();
    // Reset the peak (VmHWM) to the present.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_memory();

    let err = forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(err, ForgeError::RepositoryNotFound { .. }),
        "the answer was read whole: {err}"
    );
    peak_memory().saturating_sub(before)
}

/// This process's peak resident memory (VmHWM) since its last reset, in bytes.
fn peak_memory() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// An answer larger than any forge's JSON about one object is cut off, not read into memory whole.
#[tokio::test]
async fn an_endless_answer_is_not_read_whole() {
    let f = fixture_with(RetryPolicy {
        max_attempts: 1,
        ..quick()
    })
    .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![b' '; 9 * 1024 * 1024]))
        .mount(&f.server)
        .await;

    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("longer than 8 MiB")),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreadable_private_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.pem");
    let err = GitHubAppCredentialProvider::new(GitHubAppSettings {
        api_url: "https://api.example".to_owned(),
        app_id: APP_ID,
        installation_id: INSTALLATION_ID,
        private_key: missing.clone(),
    })
    .unwrap_err();
    assert!(err.to_string().contains(missing.to_str().unwrap()), "{err}");
}

#[tokio::test]
async fn the_fallback_never_enters_a_sandbox_and_revoking_it_does_nothing() {
    let primary = fake_token();
    let provider = Arc::new(FallbackCredentialProvider::new(
        SecretValue::new(primary.clone()),
        "credentials.provider = \"fallback\"",
    ));
    assert_eq!(provider.name(), "fallback");
    assert!(!provider.enters_sandbox());

    let before = Utc::now();
    let credential = ScopedCredential::mint(
        provider.clone(),
        "octo/app",
        "stet/x",
        Duration::from_secs(300),
    )
    .await
    .unwrap();

    assert!(!credential.enters_sandbox());
    assert_eq!(credential.kind(), "fallback");
    assert_eq!(
        credential.stand_in(),
        Some("credentials.provider = \"fallback\"")
    );
    assert!(credential.id().as_str().starts_with("fallback-"));
    assert_eq!(credential.host_push_secret().expose_secret(), primary);
    let ttl_end = before + chrono::Duration::seconds(300);
    assert!((credential.expires_at() - ttl_end).num_seconds().abs() <= 5);
    assert_eq!(
        provider.revoke(credential.id()).await.unwrap(),
        Revocation::NotRevocable
    );
    assert_eq!(credential.revoke().await, RevokeOutcome::NotRevocable);
    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    assert!(!format!("{provider:?}").contains(&primary));
}

// ---------------------------------------------------------------------------------------------
// GitHub through octocrab: stet's stack under it, from the attacker's side (issue 29, item 13)
// ---------------------------------------------------------------------------------------------

/// Every GitHub request is built by octocrab (it alone sends GitHub's API-version header) and sent
/// by stet's stack (stet's user agent, the token only as the bearer).
#[tokio::test]
async fn every_github_request_is_built_by_octocrab_and_sent_by_stets_stack() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "/repos/octo/app/branches/main", &sha('a')).await;
    f.forge.preflight(&target("main", None)).await.unwrap();
    let requests = received(&f.server).await;
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(
            request.headers.get("x-github-api-version").unwrap(),
            "2022-11-28",
            "{}",
            request.url
        );
        assert!(
            request
                .headers
                .get("user-agent")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("stet/"),
            "{request:?}"
        );
        assert_token_only_in_authorization(request, &f.token);
    }
}

/// A redirect to the API's own host under another scheme, another port or another spelling of the
/// host is another origin: not followed, and nothing reaches the other listener.
#[tokio::test]
async fn a_location_to_another_scheme_port_or_host_spelling_is_not_followed() {
    let f = fixture().await;
    let other_port = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(json_reply(200, json!({"full_name": "octo/app"})))
        .mount(&other_port)
        .await;
    let api = f.server.address();
    let locations = [
        format!("https://{api}/repositories/7"),
        format!("{}/repositories/7", other_port.uri()),
        format!("http://localhost:{}/repositories/7", api.port()),
        format!("//{}/repositories/7", other_port.address()),
    ];
    for location in locations {
        f.server.reset().await;
        Mock::given(method("GET"))
            .and(path("/repos/octo/app"))
            .respond_with(ResponseTemplate::new(302).insert_header("location", location.as_str()))
            .mount(&f.server)
            .await;
        let err = f.forge.preflight(&target("main", None)).await.unwrap_err();
        assert!(
            matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("redirected")),
            "{location}: {err}"
        );
        assert_eq!(received(&f.server).await.len(), 1, "{location}");
    }
    assert!(
        received(&other_port).await.is_empty(),
        "nothing, and so no token, reached the other port"
    );
}

/// A `Link` to another origin (GitHub's pagination header) is never followed: stet reads the one
/// answer it asked for.
#[tokio::test]
async fn a_link_to_another_origin_is_never_followed() {
    let f = fixture().await;
    let elsewhere = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(json_reply(200, json!([])))
        .mount(&elsewhere)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(
            json_reply(200, json!({"full_name": "octo/app"})).insert_header(
                "link",
                format!(
                    "<{}/repos/octo/app?page=2>; rel=\"next\", <{}/repos/octo/app?page=9>; rel=\"last\"",
                    elsewhere.uri(),
                    elsewhere.uri()
                )
                .as_str(),
            ),
        )
        .mount(&f.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/app/branches/main"))
        .respond_with(json_reply(
            200,
            json!({"name": "main", "commit": {"sha": sha('a')}}),
        ))
        .mount(&f.server)
        .await;
    f.forge.preflight(&target("main", None)).await.unwrap();
    assert!(received(&elsewhere).await.is_empty());
}

/// An answer over the bound is refused once: it would be as large again, so it is not asked for
/// again, and its bytes are not kept.
#[tokio::test]
async fn a_huge_answer_is_refused_and_not_asked_for_again() {
    let f = fixture().await;
    let huge = format!("{{\"full_name\": \"{}\"}}", "o".repeat(9 * 1024 * 1024));
    Mock::given(method("GET"))
        .and(path("/repos/octo/app"))
        .respond_with(ResponseTemplate::new(200).set_body_string(huge))
        .mount(&f.server)
        .await;
    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("longer than 8 MiB") && detail.contains("not asked for again")),
        "{err}"
    );
    assert_eq!(
        calls(&received(&f.server).await, "GET", "/repos/octo/app"),
        1
    );
}

/// A POST answered 502 may have been acted on: even with attempts left and a `Retry-After: 0`
/// inviting it, it is not sent again; the success mounted behind it is never reached.
#[tokio::test]
async fn a_post_answered_502_is_sent_once_however_the_forge_invites_a_retry() {
    let f = fixture_with(RetryPolicy {
        max_attempts: 5,
        ..quick()
    })
    .await;
    Mock::given(method("POST"))
        .and(path("/repos/octo/app/pulls"))
        .respond_with(
            json_reply(502, json!({"message": "Bad Gateway"})).insert_header("retry-after", "0"),
        )
        .up_to_n_times(1)
        .mount(&f.server)
        .await;
    mount_opened_pull(&f.server).await;
    let err = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/fix-login"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ForgeError::Server {
                status: 502,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        calls(&received(&f.server).await, "POST", "/repos/octo/app/pulls"),
        1,
        "the POST reached the forge exactly once"
    );
}

/// The token echoed in an error body — a server error's, a refusal's, a body too odd to parse — is
/// masked in the error stet shows.
#[tokio::test]
async fn a_token_echoed_in_an_error_body_is_masked() {
    let f = fixture().await;
    let echoes = [
        json_reply(
            500,
            json!({"message": format!("upstream said {}", f.token)}),
        ),
        json_reply(404, json!({"message": format!("no repo for {}", f.token)})),
        ResponseTemplate::new(401).set_body_string(format!("<html>{}</html>", f.token)),
    ];
    for echo in echoes {
        f.server.reset().await;
        Mock::given(method("GET"))
            .and(path("/repos/octo/app"))
            .respond_with(echo)
            .mount(&f.server)
            .await;
        let err = f.forge.preflight(&target("main", None)).await.unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(&f.token), "{shown}");
        assert!(
            f.sanitizer
                .current()
                .sanitize(&format!("x {} y", f.token))
                .as_str()
                != format!("x {} y", f.token),
            "the sanitizer knows the token"
        );
    }
}
