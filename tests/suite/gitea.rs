//! The Gitea (and Forgejo) forge — `GitHubForge` in its Gitea dialect — and the `gitea-token`
//! credential provider against Gitea's REST API played by `wiremock` under `/api/v1` (Gitea itself is
//! out of reach), and a real smart-HTTP git server for the pushes: what is requested (method, encoded
//! path, `Authorization`, `X-Gitea-OTP`, body), how Gitea's answers and refusals are read, that the
//! primary token travels as `Authorization: token …` only, that access tokens are minted and deleted
//! with the account's password and one-time code read per request, that a push presents the minted
//! token only, and what happens when Gitea fails half way. Every token and password is generated at
//! run time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate, Times};

use stet_engine::brief::{Brief, Target};
use stet_engine::check::Status;
use stet_engine::credential::{
    CredentialError, CredentialId, CredentialProvider, Revocation, RevokeOutcome, ScopedCredential,
    SecretValue,
};
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::fallback::FallbackCredentialProvider;
use stet_engine::forge::gitea_token::{GiteaTokenProvider, GiteaTokenSettings};
use stet_engine::forge::github::{Dialect, GitHubForge};
use stet_engine::forge::pull_request::PROVENANCE_MARKER;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::TokenSource;
use stet_engine::forge::{Forge, ForgeError, PullRequestDraft, PushBranch, ResolvedHead};
use stet_engine::git::import::{Identity, ImportLimits, ImportRequest, Imported, import};
use stet_engine::git::workspace::materialize;
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use super::canary::{assert_absent, commit_on, log_text, spellings};
use super::git_http::GitHttpServer;
use super::support::{self, git};

const GIT_URL: &str = "https://gitea.example";
/// Where Gitea serves its REST API on its host.
const API: &str = "/api/v1";
/// The account tokens are minted for.
const USER: &str = "robot";
/// The id Gitea gives the token it mints.
const TOKEN_ID: u64 = 4711;

/// A token-like random value, made now (no secret-shaped literal lives in the repository).
fn fake_token() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

/// A password as people choose them: with a space and punctuation, made now.
fn fake_password() -> String {
    format!("pw {}!", uuid::Uuid::new_v4().simple())
}

fn sha(digit: char) -> String {
    digit.to_string().repeat(40)
}

/// Short waits, so retries cost milliseconds.
fn quick() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(2),
    }
}

fn sanitizer() -> SanitizerHandle {
    SanitizerHandle::new(TokenSanitizer::new().unwrap())
}

/// A path of Gitea's API as the server sees it.
fn api(at: &str) -> String {
    format!("{API}{at}")
}

/// The `api_url` setting for Gitea played by `server`.
fn api_url(server: &MockServer) -> String {
    format!("{}{API}", server.uri())
}

/// The forge as `from_config` builds it for `[forge] kind = "gitea"`.
fn gitea_forge(
    api_url: &str,
    git_url: &str,
    primary: &str,
    sanitizer: &SanitizerHandle,
    remotes: CheckoutRemotes,
) -> GitHubForge {
    GitHubForge::with_dialect(
        Dialect::Gitea,
        ForgeSettings {
            api_url: api_url.to_owned(),
            git_url: git_url.to_owned(),
            token: TokenSource::Env("GITEA_TOKEN".to_owned()),
            retry: quick(),
        },
        SecretValue::new(primary.to_owned()),
        sanitizer.clone(),
        remotes,
    )
    .unwrap()
}

/// The checkout the briefs come from has `octo/app` as its remote on the forge.
fn own_remotes() -> CheckoutRemotes {
    CheckoutRemotes::from_urls([format!("{GIT_URL}/octo/app.git")], "gitea.example")
}

struct Fixture {
    server: MockServer,
    token: String,
    sanitizer: SanitizerHandle,
    forge: GitHubForge,
}

async fn fixture_with(remotes: CheckoutRemotes) -> Fixture {
    let server = MockServer::start().await;
    let token = fake_token();
    let sanitizer = sanitizer();
    let forge = gitea_forge(&api_url(&server), GIT_URL, &token, &sanitizer, remotes);
    Fixture {
        server,
        token,
        sanitizer,
        forge,
    }
}

async fn fixture() -> Fixture {
    fixture_with(own_remotes()).await
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

async fn mount_get(server: &MockServer, at: &str, reply: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path(at))
        .respond_with(reply)
        .mount(server)
        .await;
}

/// A branch as Gitea answers it: its commit's SHA is `commit.id` (GitHub says `sha`).
fn branch_json(name: &str, commit: &str) -> Value {
    json!({
        "name": name,
        "commit": {"id": commit, "message": "initial\n", "url": format!("{GIT_URL}/octo/app/commit/{commit}")},
        "protected": false,
    })
}

/// Answers for `octo/app` and its branch at `branch_path` (as encoded on the wire) at `base_sha`.
async fn mount_repo_and_base(server: &MockServer, branch_path: &str, base_sha: &str) {
    mount_get(
        server,
        &api("/repos/octo/app"),
        json_reply(
            200,
            json!({"full_name": "octo/app", "permissions": {"admin": false, "push": true, "pull": true}}),
        ),
    )
    .await;
    mount_get(
        server,
        &api(&format!("/repos/octo/app/branches/{branch_path}")),
        json_reply(200, branch_json("main", base_sha)),
    )
    .await;
}

/// A pull request as Gitea answers it.
fn pull_json(number: u64, state: &str, head_repo: Value, head_ref: &str, head_sha: &str) -> Value {
    json!({
        "id": 1000 + number,
        "number": number,
        "state": state,
        "merged": false,
        "html_url": format!("{GIT_URL}/octo/app/pulls/{number}"),
        "head": {"label": head_ref, "ref": head_ref, "sha": head_sha, "repo_id": 1, "repo": head_repo},
        "base": {"label": "main", "ref": "main", "sha": sha('a'), "repo_id": 1, "repo": {"full_name": "octo/app"}},
    })
}

async fn mount_pull(server: &MockServer, number: u64, pull: Value) {
    mount_get(
        server,
        &api(&format!("/repos/octo/app/pulls/{number}")),
        json_reply(200, pull),
    )
    .await;
}

async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.unwrap()
}

fn calls(requests: &[Request], verb: &str, at: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path() == at)
        .count()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The value of a request's header, when it has one.
fn header_of<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request
        .headers
        .get(name)
        .map(|value| value.to_str().unwrap())
}

/// The request carries the primary token as Gitea's `Authorization: token …`, and nowhere else
/// (URL, other headers, body).
fn assert_token_only_in_authorization(request: &Request, token: &str) {
    assert_eq!(
        header_of(request, "authorization"),
        Some(format!("token {token}").as_str()),
        "{} {}",
        request.method,
        request.url
    );
    assert!(!request.url.as_str().contains(token), "{}", request.url);
    for (name, value) in &request.headers {
        if name != "authorization" {
            assert!(!contains(value.as_bytes(), token), "header {name}");
        }
    }
    assert!(!contains(&request.body, token));
}

/// Every request a read-only operation made: a GET without a body, the primary token as its
/// `Authorization` only.
fn assert_reads_only(requests: &[Request], token: &str) {
    assert!(!requests.is_empty());
    for request in requests {
        assert_eq!(request.method.as_str(), "GET", "{}", request.url);
        assert!(request.body.is_empty(), "{}", request.url);
        assert_token_only_in_authorization(request, token);
    }
}

fn keys(body: &Value) -> Vec<&str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

// Preflight.

#[tokio::test]
async fn preflight_reads_the_repository_and_the_base_with_gets_only_and_the_token_header() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "release/v1%231", &sha('a')).await;

    let preflight = f
        .forge
        .preflight(&target("release/v1#1", None))
        .await
        .unwrap();

    assert_eq!(
        preflight.base_sha,
        CommitSha::parse(&sha('a')).unwrap(),
        "the base is read from Gitea's commit.id"
    );
    assert_eq!(preflight.head, None);
    assert_eq!(preflight.push_url, format!("{GIT_URL}/octo/app.git"));
    let requests = received(&f.server).await;
    let asked: Vec<&str> = requests.iter().map(|r| r.url.path()).collect();
    assert_eq!(
        asked,
        [
            "/api/v1/repos/octo/app",
            "/api/v1/repos/octo/app/branches/release/v1%231"
        ],
        "each segment of the branch is encoded on its own; the # never became a fragment"
    );
    assert!(requests.iter().all(|r| r.url.fragment().is_none()));
    assert_reads_only(&requests, &f.token);
}

#[tokio::test]
async fn preflight_reports_a_missing_repository_and_a_missing_base() {
    let f = fixture().await;
    mount_get(
        &f.server,
        &api("/repos/octo/app"),
        json_reply(
            404,
            json!({"message": "The target couldn't be found.", "errors": []}),
        ),
    )
    .await;

    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::RepositoryNotFound { forge: "gitea", repo } if repo == "octo/app"),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 404 is not retried");

    let f = fixture().await;
    mount_get(
        &f.server,
        &api("/repos/octo/app"),
        json_reply(200, json!({"full_name": "octo/app"})),
    )
    .await;
    mount_get(
        &f.server,
        &api("/repos/octo/app/branches/gone"),
        json_reply(
            404,
            json!({"message": "branch does not exist [name: gone]"}),
        ),
    )
    .await;

    let err = f.forge.preflight(&target("gone", None)).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::BaseNotFound { forge: "gitea", base, .. } if base == "gone"),
        "{err}"
    );
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn a_brief_may_target_only_a_repository_the_checkout_has_as_a_remote() {
    let f = fixture().await;
    let mut steered = target("main", None);
    steered.repo = "victim/app".to_owned();

    let err = f.forge.preflight(&steered).await.unwrap_err();

    assert!(
        matches!(&err, ForgeError::NotThisCheckout { forge: "gitea", repo, remotes }
            if repo == "victim/app" && remotes == "octo/app"),
        "{err}"
    );
    assert!(
        received(&f.server).await.is_empty(),
        "Gitea was not asked anything"
    );
}

/// Gitea repositories are `owner/name`: a longer path is refused before Gitea is asked, by every
/// operation, even when a checkout's remote named one.
#[tokio::test]
async fn a_repository_of_more_than_two_parts_is_refused_without_asking_gitea() {
    let f = fixture_with(CheckoutRemotes::from_urls_namespaced(
        [format!("{GIT_URL}/a/b/c.git")],
        "gitea.example",
    ))
    .await;
    let mut deep = target("main", Some(3));
    deep.repo = "a/b/c".to_owned();
    let draft = draft(&f, "stet/x");

    let refusals = [
        f.forge.preflight(&deep).await.unwrap_err(),
        f.forge.open_pull_request(&deep, &draft).await.unwrap_err(),
        f.forge
            .update_pull_request(&deep, 3, &draft)
            .await
            .unwrap_err(),
    ];

    for err in &refusals {
        assert!(
            matches!(err, ForgeError::InvalidTarget { forge: "gitea", detail } if detail.contains("\"a/b/c\" is not owner/name")),
            "{err}"
        );
    }
    assert!(received(&f.server).await.is_empty());
}

#[tokio::test]
async fn preflight_refuses_a_brief_branch_that_already_exists() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "main", &sha('a')).await;
    mount_get(
        &f.server,
        &api("/repos/octo/app/branches/stet/taken"),
        json_reply(200, branch_json("stet/taken", &sha('b'))),
    )
    .await;
    mount_get(
        &f.server,
        &api("/repos/octo/app/branches/stet/free"),
        json_reply(
            404,
            json!({"message": "branch does not exist [name: stet/free]"}),
        ),
    )
    .await;
    let with_branch = |branch: &str| Target {
        branch: Some(branch.to_owned()),
        ..target("main", None)
    };

    let err = f
        .forge
        .preflight(&with_branch("stet/taken"))
        .await
        .unwrap_err();
    let free = f.forge.preflight(&with_branch("stet/free")).await.unwrap();

    assert!(
        matches!(&err, ForgeError::BranchExists { forge: "gitea", branch, .. } if branch == "stet/taken"),
        "{err}"
    );
    assert_eq!(free.base_sha, CommitSha::parse(&sha('a')).unwrap());
    let requests = received(&f.server).await;
    assert_eq!(
        calls(
            &requests,
            "GET",
            "/api/v1/repos/octo/app/branches/stet/taken"
        ),
        1
    );
    assert_reads_only(&requests, &f.token);
}

/// An existing pull request is resolved to the head Gitea reports, not to what the brief claims,
/// and the brief's own branch is not looked up (the push goes to the pull request's head).
#[tokio::test]
async fn preflight_resolves_an_open_pull_request_to_its_real_head_not_the_briefs_claim() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "main", &sha('a')).await;
    mount_pull(
        &f.server,
        7,
        pull_json(
            7,
            "open",
            json!({"full_name": "Octo/App"}),
            "stet/real",
            &sha('b'),
        ),
    )
    .await;
    let claimed = Target {
        branch: Some("stet/claimed".to_owned()),
        ..target("main", Some(7))
    };

    let preflight = f.forge.preflight(&claimed).await.unwrap();

    assert_eq!(
        preflight.head,
        Some(ResolvedHead {
            number: 7,
            branch: "stet/real".to_owned(),
            sha: CommitSha::parse(&sha('b')).unwrap(),
        })
    );
    assert_eq!(
        preflight.parent().as_str(),
        sha('b'),
        "the result builds on the head"
    );
    let requests = received(&f.server).await;
    assert_eq!(calls(&requests, "GET", "/api/v1/repos/octo/app/pulls/7"), 1);
    assert!(
        requests.iter().all(|r| !r.url.path().contains("claimed")),
        "{requests:?}"
    );
    assert_reads_only(&requests, &f.token);
}

#[tokio::test]
async fn preflight_refuses_a_closed_merged_or_missing_pull_request() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "main", &sha('a')).await;
    let own = json!({"full_name": "octo/app"});
    mount_pull(
        &f.server,
        8,
        pull_json(8, "closed", own.clone(), "stet/a", &sha('b')),
    )
    .await;
    let mut merged = pull_json(9, "closed", own, "stet/b", &sha('b'));
    merged["merged"] = json!(true);
    mount_pull(&f.server, 9, merged).await;
    mount_get(
        &f.server,
        &api("/repos/octo/app/pulls/10"),
        json_reply(404, json!({"message": "pull request does not exist [id: 0, issue_id: 0, head_repo_id: 0, base_repo_id: 0, head_branch: , base_branch: ]"})),
    )
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
    let missing = f
        .forge
        .preflight(&target("main", Some(10)))
        .await
        .unwrap_err();

    assert!(
        matches!(&closed, ForgeError::PullRequestClosed { forge: "gitea", number: 8, state, .. } if state == "closed"),
        "{closed}"
    );
    assert!(
        matches!(&was_merged, ForgeError::PullRequestClosed { number: 9, state, .. } if state == "merged"),
        "{was_merged}"
    );
    assert!(
        matches!(&missing, ForgeError::PullRequestNotFound { number: 10, .. }),
        "{missing}"
    );
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn preflight_refuses_a_pull_request_from_a_fork_a_deleted_fork_or_into_another_base() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "main", &sha('a')).await;
    mount_pull(
        &f.server,
        5,
        pull_json(
            5,
            "open",
            json!({"full_name": "mallory/app"}),
            "evil",
            &sha('b'),
        ),
    )
    .await;
    mount_pull(
        &f.server,
        6,
        pull_json(6, "open", Value::Null, "orphan", &sha('b')),
    )
    .await;
    let mut elsewhere = pull_json(
        4,
        "open",
        json!({"full_name": "octo/app"}),
        "stet/x",
        &sha('b'),
    );
    elsewhere["base"]["ref"] = json!("develop");
    mount_pull(&f.server, 4, elsewhere).await;

    let refusal = |number: u64| {
        let forge = &f.forge;
        async move {
            let err = forge
                .preflight(&target("main", Some(number)))
                .await
                .unwrap_err();
            assert!(
                matches!(err, ForgeError::InvalidTarget { forge: "gitea", .. }),
                "{err}"
            );
            err.to_string()
        }
    };

    let fork = refusal(5).await;
    assert!(
        fork.contains("fork mallory/app") && fork.contains("#5"),
        "{fork}"
    );
    let orphan = refusal(6).await;
    assert!(orphan.contains("no longer exists"), "{orphan}");
    let base = refusal(4).await;
    assert!(
        base.contains("\"develop\"") && base.contains("\"main\""),
        "{base}"
    );
}

// Pull requests.

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

/// A draft composed the way the engine composes it, with the sanitizer the forge taught its token.
fn draft(f: &Fixture, head: &str) -> PullRequestDraft {
    PullRequestDraft::compose(
        &brief(&f.token),
        head,
        Some("Fixed the loop."),
        &support::provenance("gitea-token", &sha('a'), &sha('c')),
        &f.sanitizer.current(),
    )
}

/// Answers every `POST …/pulls` of `octo/app` with `status` and `body`.
async fn mount_post_pulls(server: &MockServer, status: u16, body: Value) {
    Mock::given(method("POST"))
        .and(path(api("/repos/octo/app/pulls")))
        .respond_with(json_reply(status, body))
        .mount(server)
        .await;
}

#[tokio::test]
async fn opening_a_pull_request_posts_title_body_head_and_base_only() {
    let f = fixture().await;
    mount_post_pulls(
        &f.server,
        201,
        pull_json(
            12,
            "open",
            json!({"full_name": "octo/app"}),
            "stet/fix-login",
            &sha('c'),
        ),
    )
    .await;

    let opened = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/fix-login"))
        .await
        .unwrap();

    assert_eq!(
        (opened.number, opened.url.as_str(), opened.opened),
        (12, format!("{GIT_URL}/octo/app/pulls/12").as_str(), true)
    );
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 1);
    let post = &requests[0];
    assert_eq!(
        (post.method.as_str(), post.url.path()),
        ("POST", "/api/v1/repos/octo/app/pulls")
    );
    assert_token_only_in_authorization(post, &f.token);
    let sent: Value = post.body_json().unwrap();
    assert_eq!(keys(&sent), ["base", "body", "head", "title"]);
    assert_eq!(sent["title"], "Fix the login redirect loop");
    assert_eq!(
        (sent["head"].as_str(), sent["base"].as_str()),
        (Some("stet/fix-login"), Some("main"))
    );
    let body = sent["body"].as_str().unwrap();
    assert!(body.contains(PROVENANCE_MARKER), "{body}");
    assert!(
        body.contains("| Credential | gitea-token (write:repository scope"),
        "{body}"
    );
    assert!(
        body.contains("[REDACTED:primary-token]"),
        "the brief's copy of the token was masked: {body}"
    );
}

/// Gitea answers an edit with 201; the edit goes to the number preflight resolved and changes only
/// the text.
#[tokio::test]
async fn an_existing_pull_request_is_patched_at_its_resolved_index_and_never_posted() {
    let f = fixture().await;
    mount_repo_and_base(&f.server, "main", &sha('a')).await;
    let own = json!({"full_name": "octo/app"});
    mount_pull(
        &f.server,
        7,
        pull_json(7, "open", own.clone(), "stet/feature", &sha('b')),
    )
    .await;
    Mock::given(method("PATCH"))
        .and(path(api("/repos/octo/app/pulls/7")))
        .respond_with(json_reply(
            201,
            pull_json(7, "open", own, "stet/feature", &sha('c')),
        ))
        .expect(1)
        .mount(&f.server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&f.server)
        .await;
    let target = target("main", Some(7));

    let head = f.forge.preflight(&target).await.unwrap().head.unwrap();
    let updated = f
        .forge
        .update_pull_request(&target, head.number, &draft(&f, &head.branch))
        .await
        .unwrap();

    assert_eq!(
        (updated.number, updated.opened, updated.url.as_str()),
        (7, false, format!("{GIT_URL}/octo/app/pulls/7").as_str())
    );
    f.server.verify().await;
    let requests = received(&f.server).await;
    let patch = requests
        .iter()
        .find(|r| r.method.as_str() == "PATCH")
        .unwrap();
    assert_token_only_in_authorization(patch, &f.token);
    let sent: Value = patch.body_json().unwrap();
    assert_eq!(
        keys(&sent),
        ["body", "title"],
        "an update changes the text, never head, base or state"
    );
    assert!(sent["body"].as_str().unwrap().contains(PROVENANCE_MARKER));
}

#[tokio::test]
async fn updating_a_pull_request_that_is_gone_is_not_found_and_opens_nothing() {
    let f = fixture().await;
    Mock::given(method("PATCH"))
        .and(path(api("/repos/octo/app/pulls/7")))
        .respond_with(json_reply(
            404,
            json!({"message": "The target couldn't be found."}),
        ))
        .mount(&f.server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&f.server)
        .await;

    let err = f
        .forge
        .update_pull_request(&target("main", Some(7)), 7, &draft(&f, "stet/x"))
        .await
        .unwrap_err();

    assert!(
        matches!(
            &err,
            ForgeError::PullRequestNotFound {
                forge: "gitea",
                number: 7,
                ..
            }
        ),
        "{err}"
    );
    f.server.verify().await;
}

/// Gitea answers a duplicate with 409 Conflict (GitHub with 422).
#[tokio::test]
async fn a_second_pull_request_for_the_same_branch_is_a_conflict_reported_as_existing() {
    let f = fixture().await;
    mount_post_pulls(
        &f.server,
        409,
        json!({
            "message": "pull request already exists for these targets [id: 3, issue_id: 5, head_repo_id: 1, base_repo_id: 1, head_branch: stet/x, base_branch: main]",
            "url": format!("{GIT_URL}/api/swagger"),
        }),
    )
    .await;

    let err = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/x"))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::PullRequestExists { forge: "gitea", head, base, detail, .. }
            if head == "stet/x" && base == "main" && detail.contains("already exists for these targets")),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 409 is not retried");
}

#[tokio::test]
async fn giteas_refusals_carry_its_words_but_never_the_token() {
    for (status, words) in [
        (401, "token is required"),
        (
            403,
            "token does not have at least one of required scope(s): [write:repository]",
        ),
    ] {
        let f = fixture().await;
        // A server that echoes the token back must not make an error show it.
        mount_post_pulls(
            &f.server,
            status,
            json!({"message": format!("{words} (you sent {})", f.token)}),
        )
        .await;

        let err = f
            .forge
            .open_pull_request(&target("main", None), &draft(&f, "stet/x"))
            .await
            .unwrap_err();

        match (status, &err) {
            (401, ForgeError::Unauthorized { forge: "gitea", .. })
            | (403, ForgeError::Forbidden { forge: "gitea", .. }) => {}
            _ => panic!("{status}: unexpected {err:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(words) && text.contains("[REDACTED:primary-token]"),
            "{text}"
        );
        assert!(!text.contains(&f.token) && !format!("{err:?}").contains(&f.token));
        assert_eq!(
            received(&f.server).await.len(),
            1,
            "{status} is not retried"
        );
    }
}

// The forge's word to `stet doctor`.

#[tokio::test]
async fn the_doctor_reads_the_token_and_each_remote_changing_nothing() {
    let f = fixture_with(CheckoutRemotes::from_urls(
        ["app", "lib", "gone", "scoped"].map(|name| format!("{GIT_URL}/octo/{name}.git")),
        "gitea.example",
    ))
    .await;
    mount_get(
        &f.server,
        &api("/user"),
        json_reply(200, json!({"id": 3, "login": USER})),
    )
    .await;
    let access = |push: bool| json!({"full_name": "x", "permissions": {"admin": false, "push": push, "pull": true}});
    mount_get(
        &f.server,
        &api("/repos/octo/app"),
        json_reply(200, access(true)),
    )
    .await;
    mount_get(
        &f.server,
        &api("/repos/octo/lib"),
        json_reply(200, access(false)),
    )
    .await;
    mount_get(
        &f.server,
        &api("/repos/octo/gone"),
        json_reply(404, json!({"message": "The target couldn't be found."})),
    )
    .await;
    mount_get(
        &f.server,
        &api("/repos/octo/scoped"),
        json_reply(
            403,
            json!({"message": "token does not have at least one of required scope(s): [read:repository]"}),
        ),
    )
    .await;

    let checks = f.forge.diagnose().await;

    let [user, app, gone, lib, scoped] = checks.as_slice() else {
        panic!("the token, then each remote in order: {checks:?}")
    };
    assert_eq!(user.status, Status::Ok, "{user:?}");
    assert!(user.detail.contains(USER), "{user:?}");
    assert_eq!(app.status, Status::Ok, "{app:?}");
    assert!(app.detail.contains("octo/app"), "{app:?}");
    for (check, says) in [
        (gone, "octo/gone was not found (404)"),
        (lib, "octo/lib: the token may read it but not push"),
        (scoped, "required scope(s): [read:repository]"),
    ] {
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(check.detail.contains(says), "{check:?}");
        let fix = check.fix.as_deref().unwrap();
        assert!(
            fix.contains("forge.gitea") && fix.contains("write:repository"),
            "{fix}"
        );
    }
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn the_doctor_names_the_setting_to_fix_when_gitea_refuses_the_token_or_cannot_be_reached() {
    let f = fixture().await;
    mount_get(
        &f.server,
        &api("/user"),
        json_reply(
            401,
            json!({"message": "user does not exist [uid: 0, name: ]"}),
        ),
    )
    .await;

    let refused = f.forge.diagnose().await;

    assert_eq!(refused.len(), 1, "nothing more is asked: {refused:?}");
    assert_eq!(refused[0].status, Status::Fail);
    let fix = refused[0].fix.as_deref().unwrap();
    for setting in [
        "forge.gitea",
        "GITEA_TOKEN",
        "token_command",
        "write:repository",
        "read:user",
    ] {
        assert!(fix.contains(setting), "{setting}: {fix}");
    }

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}{API}", closed.local_addr().unwrap());
    drop(closed);
    let forge = gitea_forge(
        &nowhere,
        GIT_URL,
        &fake_token(),
        &sanitizer(),
        own_remotes(),
    );

    let unreachable = forge.diagnose().await;

    assert_eq!(unreachable.len(), 1, "{unreachable:?}");
    assert_eq!(unreachable[0].status, Status::Fail);
    assert!(
        unreachable[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("forge.gitea.api_url"),
        "{unreachable:?}"
    );
}

// The gitea-token provider.

/// A password command as a person might write one: `sh -c "printf %s '<password>'"`.
fn password_source(password: &str) -> TokenSource {
    TokenSource::Command(vec![
        "sh".into(),
        "-c".into(),
        format!("printf %s '{password}'"),
    ])
}

/// A one-time-code command printing `000001`, `000002`, … one more each time it runs (its counter
/// lives in `dir`), so a test sees which run each request carries.
fn otp_source(dir: &Path) -> TokenSource {
    let counter = dir.join("otp-counter");
    TokenSource::Command(vec![
        "sh".into(),
        "-c".into(),
        format!(
            "n=$(( $(cat '{0}' 2>/dev/null || echo 0) + 1 )); echo $n > '{0}'; printf %06d $n",
            counter.display()
        ),
    ])
}

/// What `Authorization` carries for `user` and `password`.
fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A provider's account, password and one-time code, and its primary token.
struct Account {
    /// Holds the one-time code's counter.
    dir: tempfile::TempDir,
    user: Option<String>,
    password: String,
    primary: String,
}

impl Account {
    /// `robot` with a fresh password, a one-time code and a primary token.
    fn new() -> Account {
        Account {
            dir: tempfile::tempdir().unwrap(),
            user: Some(USER.to_owned()),
            password: fake_password(),
            primary: fake_token(),
        }
    }

    fn settings(&self, api_url: &str) -> GiteaTokenSettings {
        GiteaTokenSettings {
            api_url: api_url.to_owned(),
            user: self.user.clone(),
            password: password_source(&self.password),
            otp: Some(otp_source(self.dir.path())),
        }
    }

    /// A provider for this account at Gitea played by `server`.
    fn provider(
        &self,
        server: &MockServer,
        sanitizer: &SanitizerHandle,
    ) -> Arc<GiteaTokenProvider> {
        Arc::new(self.provider_at(&api_url(server), sanitizer).unwrap())
    }

    fn provider_at(
        &self,
        api_url: &str,
        sanitizer: &SanitizerHandle,
    ) -> Result<GiteaTokenProvider, CredentialError> {
        GiteaTokenProvider::new(
            self.settings(api_url),
            SecretValue::new(self.primary.clone()),
            sanitizer.clone(),
        )
    }

    /// Every spelling of the password and of the primary token a careless sink could carry.
    fn secrets(&self) -> Vec<String> {
        let mut secrets = spellings(&self.password);
        secrets.extend(spellings(&self.primary));
        secrets.push(basic(USER, &self.password));
        secrets
    }
}

fn tokens_path(user: &str) -> String {
    api(&format!("/users/{user}/tokens"))
}

fn revoke_path() -> String {
    format!("{}/{TOKEN_ID}", tokens_path(USER))
}

/// Gitea minting `token` (id [`TOKEN_ID`]) for `user`.
async fn mount_mint(server: &MockServer, user: &str, token: &str) {
    Mock::given(method("POST"))
        .and(path(tokens_path(user)))
        .respond_with(json_reply(
            201,
            json!({
                "id": TOKEN_ID,
                "name": "stet-x",
                "sha1": token,
                "token_last_eight": &token[token.len() - 8..],
                "scopes": ["write:repository"],
            }),
        ))
        .mount(server)
        .await;
}

async fn mount_delete(server: &MockServer, reply: ResponseTemplate, times: impl Into<Times>) {
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(reply)
        .expect(times)
        .mount(server)
        .await;
}

/// The request is made as the account: its password (and `otp`) in Gitea's headers, and neither
/// anywhere else; the primary token is not sent at all.
fn assert_as_account(request: &Request, account: &Account, otp: &str) {
    assert_eq!(
        header_of(request, "authorization"),
        Some(basic(USER, &account.password).as_str()),
        "{} {}",
        request.method,
        request.url
    );
    assert_eq!(header_of(request, "x-gitea-otp"), Some(otp));
    let secrets = account.secrets();
    assert_absent("the URL", request.url.as_str(), &secrets);
    assert_absent(
        "the body",
        &String::from_utf8_lossy(&request.body),
        &secrets,
    );
    for (name, value) in &request.headers {
        if name != "authorization" {
            assert_absent(name.as_str(), value.to_str().unwrap(), &secrets);
        }
    }
}

#[tokio::test]
async fn a_token_is_minted_with_the_password_and_one_time_code_for_write_repository_only() {
    let server = MockServer::start().await;
    let (account, minted_token, sanitizer) = (Account::new(), fake_token(), sanitizer());
    mount_mint(&server, USER, &minted_token).await;
    let provider = account.provider(&server, &sanitizer);
    assert_eq!(provider.name(), "gitea-token");
    assert!(provider.enters_sandbox());
    let ttl = Duration::from_secs(900);

    let before = Utc::now();
    let minted = provider.mint("octo/app", "stet/fix", ttl).await.unwrap();
    let after = Utc::now();

    assert_eq!(minted.value.expose_secret(), minted_token);
    assert_eq!(minted.stand_in, None);
    let ttl_chrono = chrono::Duration::from_std(ttl).unwrap();
    assert!(
        minted.expires_at >= before + ttl_chrono && minted.expires_at <= after + ttl_chrono,
        "stet's bookkeeping TTL (a Gitea token never expires by itself): {}",
        minted.expires_at
    );
    let id = minted.id.as_str();
    assert!(
        id.starts_with("gitea-token-") && id.contains(&format!("-{TOKEN_ID}-")),
        "{id}"
    );
    assert_absent(
        "the id",
        id,
        &[minted_token.clone(), account.password.clone()],
    );
    let requests = received(&server).await;
    assert_eq!(requests.len(), 1, "the user is configured: no lookup");
    let mint = &requests[0];
    assert_eq!(
        (mint.method.as_str(), mint.url.path()),
        ("POST", "/api/v1/users/robot/tokens")
    );
    assert_as_account(mint, &account, "000001");
    let sent: Value = mint.body_json().unwrap();
    assert_eq!(keys(&sent), ["name", "scopes"]);
    assert_eq!(sent["scopes"], json!(["write:repository"]));
    let name = sent["name"].as_str().unwrap();
    let suffix = name
        .strip_prefix("stet-")
        .unwrap_or_else(|| panic!("{name}"));
    assert!(uuid::Uuid::parse_str(suffix).is_ok(), "{name}");
    let masked = sanitizer
        .current()
        .sanitize(&format!("got {minted_token} with {}", account.password));
    assert_eq!(
        masked.as_str(),
        "got [REDACTED:gitea-token] with [REDACTED:gitea-password]",
        "the minted token and the password were taught to the sanitizer"
    );
    let debug = format!("{provider:?}");
    assert_absent("the provider's Debug", &debug, &account.secrets());
    assert_absent("the provider's Debug", &debug, &spellings(&minted_token));
}

#[tokio::test]
async fn without_a_configured_user_the_login_is_asked_once_with_the_primary_token() {
    let server = MockServer::start().await;
    let account = Account {
        user: None,
        ..Account::new()
    };
    Mock::given(method("GET"))
        .and(path(api("/user")))
        .and(header(
            "authorization",
            format!("token {}", account.primary).as_str(),
        ))
        .respond_with(json_reply(200, json!({"id": 3, "login": USER})))
        .expect(1)
        .mount(&server)
        .await;
    mount_mint(&server, USER, &fake_token()).await;
    let provider = account.provider(&server, &sanitizer());

    for _ in 0..2 {
        provider
            .mint("octo/app", "stet/fix", Duration::from_secs(300))
            .await
            .unwrap();
    }

    server.verify().await;
    let requests = received(&server).await;
    let mints: Vec<&Request> = requests
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .collect();
    assert_eq!(mints.len(), 2);
    assert_as_account(mints[0], &account, "000001");
    assert_as_account(mints[1], &account, "000002");
    assert!(
        mints
            .iter()
            .all(|r| r.url.path() == "/api/v1/users/robot/tokens")
    );
}

/// The login goes into paths and ids: one that is not a single plain segment is refused, configured
/// or reported by Gitea, and nothing is minted.
#[tokio::test]
async fn a_login_that_is_not_one_path_segment_is_refused_before_anything_is_minted() {
    let server = MockServer::start().await;
    let configured = Account {
        user: Some("a/../b".to_owned()),
        ..Account::new()
    };
    let err = configured
        .provider_at(&api_url(&server), &sanitizer())
        .unwrap_err();
    assert!(err.to_string().contains("credentials.gitea.user"), "{err}");

    let reported = Account {
        user: None,
        ..Account::new()
    };
    mount_get(
        &server,
        &api("/user"),
        json_reply(200, json!({"id": 3, "login": "../admin"})),
    )
    .await;
    let err = reported
        .provider(&server, &sanitizer())
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, CredentialError::Provider { provider: "gitea-token", detail } if detail.contains("credentials.gitea.user")),
        "{err}"
    );
    assert!(
        received(&server)
            .await
            .iter()
            .all(|r| r.method.as_str() == "GET"),
        "nothing was minted"
    );
}

#[tokio::test]
async fn revoking_deletes_once_with_a_fresh_one_time_code_even_when_revoked_twice() {
    let server = MockServer::start().await;
    let account = Account::new();
    mount_mint(&server, USER, &fake_token()).await;
    mount_delete(&server, ResponseTemplate::new(204), 1).await;

    let credential = ScopedCredential::mint(
        account.provider(&server, &sanitizer()),
        "octo/app",
        "stet/fix",
        Duration::from_secs(300),
    )
    .await
    .unwrap();
    assert_eq!(
        (credential.kind(), credential.stand_in()),
        ("gitea-token", None)
    );
    assert!(credential.enters_sandbox());

    assert_eq!(credential.revoke().await, RevokeOutcome::Revoked);
    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);

    server.verify().await;
    let delete = received(&server)
        .await
        .into_iter()
        .find(|r| r.method.as_str() == "DELETE")
        .unwrap();
    assert_eq!(delete.url.path(), "/api/v1/users/robot/tokens/4711");
    assert!(delete.body.is_empty());
    assert_as_account(&delete, &account, "000002");
}

/// The journal keeps only the id's text: a later process (the sweep after a crash) deletes by it
/// alone, but never at another Gitea, for another account, or an id that is not a Gitea token's.
#[tokio::test]
async fn a_fresh_provider_deletes_by_id_alone_but_never_at_another_gitea_or_for_another_account() {
    let server = MockServer::start().await;
    let account = Account::new();
    mount_mint(&server, USER, &fake_token()).await;
    mount_delete(&server, ResponseTemplate::new(204), 1).await;
    let id = account
        .provider(&server, &sanitizer())
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap()
        .id;
    let journaled = CredentialId::new(id.as_str().to_owned());

    let other = MockServer::start().await;
    let elsewhere = account.provider(&other, &sanitizer());
    let someone_else = Account {
        user: Some("someone-else".to_owned()),
        ..Account::new()
    }
    .provider(&server, &sanitizer());
    let later = account.provider(&server, &sanitizer());
    let fallback = ScopedCredential::mint(
        Arc::new(FallbackCredentialProvider::new(
            SecretValue::new(account.primary.clone()),
            "credentials.provider = \"fallback\"",
        )),
        "octo/app",
        "stet/fix",
        Duration::from_secs(300),
    )
    .await
    .unwrap();

    // A Gitea token never expires: one this provider may not delete is an error, so the sweep keeps
    // its record for a process that may.
    for refusal in [
        elsewhere.revoke(&journaled).await,
        someone_else.revoke(&journaled).await,
    ] {
        let error = refusal.unwrap_err().to_string();
        assert!(error.contains("does not expire"), "{error}");
    }
    for foreign in [
        "github-app-1234",
        "local-5",
        "gitlab-project-token-77",
        "gitea-token-garbage",
    ] {
        assert!(
            later
                .revoke(&CredentialId::new(foreign.to_owned()))
                .await
                .is_err(),
            "{foreign}"
        );
    }
    assert_eq!(
        later.revoke(fallback.id()).await.unwrap(),
        Revocation::NotRevocable
    );
    assert_eq!(later.revoke(&journaled).await.unwrap(), Revocation::Revoked);

    assert!(received(&other).await.is_empty());
    server.verify().await;
}

/// An eight-digit one-time code (TOTP allows them) that Gitea echoes back is masked like the
/// password: it is read as a secret too.
#[tokio::test]
async fn a_one_time_code_gitea_echoes_back_is_masked_like_the_password() {
    let server = MockServer::start().await;
    let account = Account::new();
    let code = format!("{:08}", uuid::Uuid::new_v4().as_u128() % 100_000_000);
    Mock::given(method("POST"))
        .and(path(tokens_path(USER)))
        .and(wiremock::matchers::header("x-gitea-otp", code.as_str()))
        .respond_with(json_reply(
            401,
            json!({"message": format!("the one-time code {code} is wrong")}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let provider = GiteaTokenProvider::new(
        GiteaTokenSettings {
            otp: Some(TokenSource::Command(vec![
                "printf".into(),
                "%s".into(),
                code.clone(),
            ])),
            ..account.settings(&api_url(&server))
        },
        SecretValue::new(account.primary.clone()),
        sanitizer(),
    )
    .unwrap();

    let text = provider
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err()
        .to_string();

    assert!(text.contains("[REDACTED:gitea-otp]"), "{text}");
    assert!(
        !text.contains(&code),
        "the one-time code reached the error: {text}"
    );
}

#[tokio::test]
async fn the_password_never_appears_in_an_error_or_debug_output() {
    let server = MockServer::start().await;
    let account = Account::new();
    // A Gitea that echoes what it was sent must not make an error show it.
    Mock::given(method("POST"))
        .and(path(tokens_path(USER)))
        .respond_with(json_reply(
            401,
            json!({"message": format!("user's password is invalid [name: {USER}] (you sent {})", account.password)}),
        ))
        .mount(&server)
        .await;
    let provider = account.provider(&server, &sanitizer());

    let refused = provider
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    let text = refused.to_string();
    assert!(
        matches!(
            &refused,
            CredentialError::Provider {
                provider: "gitea-token",
                ..
            }
        ),
        "{refused}"
    );
    assert!(
        text.contains("[REDACTED:gitea-password]")
            && text.contains("credentials.gitea.password_command"),
        "a refused password names the setting that reads it: {text}"
    );
    assert!(
        !text.contains("the token was refused"),
        "it was the password: {text}"
    );
    assert_absent("the error", &text, &account.secrets());
    assert_absent(
        "the error's Debug",
        &format!("{refused:?}"),
        &account.secrets(),
    );
    assert_absent(
        "the provider's Debug",
        &format!("{provider:?}"),
        &account.secrets(),
    );

    let locked = GiteaTokenProvider::new(
        GiteaTokenSettings {
            password: TokenSource::Command(vec![
                "sh".into(),
                "-c".into(),
                "echo 'the keyring is locked' >&2; exit 3".into(),
            ]),
            ..account.settings(&api_url(&server))
        },
        SecretValue::new(account.primary.clone()),
        sanitizer(),
    )
    .unwrap();
    server.reset().await;

    let unread = locked
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    let text = unread.to_string();
    assert!(
        text.contains("credentials.gitea.password_command")
            && text.contains("the keyring is locked"),
        "{text}"
    );
    assert!(
        received(&server).await.is_empty(),
        "nothing is sent without the password"
    );
}

#[tokio::test]
async fn a_minted_token_no_header_can_carry_is_refused_and_deleted_at_once() {
    let server = MockServer::start().await;
    let unusable = format!("{} {}", fake_token(), fake_token());
    mount_mint(&server, USER, &unusable).await;
    mount_delete(&server, ResponseTemplate::new(204), 1).await;
    let provider = Account::new().provider(&server, &sanitizer());

    let err = provider
        .mint("octo/app", "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    let text = err.to_string();
    assert!(
        text.contains("printable ASCII") && text.contains("deleted"),
        "{text}"
    );
    assert!(!text.contains(&unusable), "{text}");
    server.verify().await;
}

#[tokio::test]
async fn the_provider_tells_the_doctor_what_is_left_and_what_the_scope_reaches_changing_nothing() {
    let server = MockServer::start().await;
    let account = Account::new();
    let left = format!("stet-{}", uuid::Uuid::new_v4());
    mount_get(
        &server,
        &tokens_path(USER),
        json_reply(
            200,
            json!([
                {"id": 9, "name": left, "token_last_eight": "0123abcd", "scopes": ["write:repository"]},
                {"id": 2, "name": "laptop", "token_last_eight": "fedc9876", "scopes": ["all"]},
            ]),
        ),
    )
    .await;
    let provider = account.provider(&server, &sanitizer());

    let checks = provider.diagnose(&["octo/app".to_owned()]).await;

    assert_eq!(checks.len(), 2, "{checks:?}");
    let leftovers = &checks[0];
    assert_eq!(leftovers.status, Status::Warn, "{checks:?}");
    assert!(
        leftovers.detail.contains("1 token") && leftovers.detail.contains(&left),
        "{leftovers:?}"
    );
    assert!(!leftovers.detail.contains("laptop"), "{leftovers:?}");
    assert!(
        leftovers
            .fix
            .as_deref()
            .unwrap()
            .contains("Settings → Applications"),
        "{leftovers:?}"
    );
    let reach = &checks[1];
    assert!(
        reach.detail.contains("per category")
            && reach.detail.contains("write:repository")
            && reach.detail.contains("every repository"),
        "{reach:?}"
    );
    let requests = received(&server).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method.as_str(), "GET");
    assert_as_account(&requests[0], &account, "000001");

    server.reset().await;
    mount_get(&server, &tokens_path(USER), json_reply(200, json!([]))).await;
    let clean = provider.diagnose(&[]).await;
    assert_eq!(clean[0].status, Status::Ok, "{clean:?}");

    server.reset().await;
    mount_get(
        &server,
        &tokens_path(USER),
        json_reply(
            401,
            json!({"message": "user's password is invalid [name: robot]"}),
        ),
    )
    .await;
    let refused = provider.diagnose(&[]).await;
    assert_eq!(refused[0].status, Status::Fail, "{refused:?}");
    assert!(
        refused[0].detail.contains("password (or one-time code)"),
        "{refused:?}"
    );
    let fix = refused[0].fix.as_deref().unwrap();
    assert!(
        fix.contains("credentials.gitea.password_command")
            && fix.contains("credentials.gitea.otp_command"),
        "{fix}"
    );
    assert!(
        received(&server)
            .await
            .iter()
            .all(|r| r.method.as_str() == "GET"),
        "the doctor mints nothing"
    );
}

// The fault matrix.

/// A credential minted by `account`'s provider, Gitea answering the mint with `token`.
async fn minted_credential(
    server: &MockServer,
    account: &Account,
    token: &str,
    sanitizer: &SanitizerHandle,
) -> ScopedCredential {
    mount_mint(server, USER, token).await;
    ScopedCredential::mint(
        account.provider(server, sanitizer),
        "octo/app",
        "stet/fix",
        Duration::from_secs(300),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_revoke_gitea_fails_is_a_failed_outcome_whose_text_holds_no_secret() {
    let server = MockServer::start().await;
    let (account, minted_token) = (Account::new(), fake_token());
    mount_delete(
        &server,
        json_reply(
            500,
            json!({"message": format!("500 while deleting {minted_token} of {USER}:{} for {}", account.password, account.primary)}),
        ),
        1..,
    )
    .await;
    let credential = minted_credential(&server, &account, &minted_token, &sanitizer()).await;

    let RevokeOutcome::Failed(text) = credential.revoke().await else {
        panic!("a 500 is a failed revoke")
    };

    assert!(text.contains("500"), "{text}");
    assert!(text.contains("[REDACTED:gitea-token]"), "{text}");
    let mut secrets = account.secrets();
    secrets.extend(spellings(&minted_token));
    assert_absent("the failed revoke's text", &text, &secrets);
}

#[tokio::test]
async fn a_revoke_of_a_token_gitea_no_longer_knows_is_already_revoked() {
    let server = MockServer::start().await;
    let account = Account::new();
    mount_delete(
        &server,
        json_reply(
            404,
            json!({"message": "access token does not exist [id: 4711]"}),
        ),
        1,
    )
    .await;
    let credential = minted_credential(&server, &account, &fake_token(), &sanitizer()).await;

    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    server.verify().await;
}

/// Gitea through wiremock under `/api/v1` and a real smart-HTTP git server that accepts only the
/// token Gitea mints, and the user's repository whose `main` is also the forge's.
struct Bench {
    dir: tempfile::TempDir,
    api: MockServer,
    server: GitHttpServer,
    remote: PathBuf,
    repo: PathBuf,
    base: String,
    account: Account,
    minted: String,
    sanitizer: SanitizerHandle,
    forge: GitHubForge,
    provider: Arc<GiteaTokenProvider>,
}

impl Bench {
    async fn start(primary: String, sanitizer: SanitizerHandle) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let minted = fake_token();
        let only = minted.clone();
        let server = GitHttpServer::start(
            &dir.path().join("forge"),
            Arc::new(move |repo: &str, _user: &str, password: &str| {
                repo == "octo/app" && password == only
            }),
        );
        let remote = server.create_bare("octo/app");
        let git_url = server
            .url("octo/app")
            .trim_end_matches("/octo/app.git")
            .to_owned();

        let repo = dir.path().join("app");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "app\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        git(&repo, &["push", "-q", remote.to_str().unwrap(), "main"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);

        let api = MockServer::start().await;
        mount_repo_and_base(&api, "main", &base).await;
        mount_mint(&api, USER, &minted).await;
        Mock::given(method("DELETE"))
            .and(path(revoke_path()))
            .respond_with(ResponseTemplate::new(204))
            .mount(&api)
            .await;

        let account = Account {
            primary,
            ..Account::new()
        };
        let forge = gitea_forge(
            &api_url(&api),
            &git_url,
            &account.primary,
            &sanitizer,
            CheckoutRemotes::from_urls(
                [format!("{git_url}/octo/app.git")],
                &GitHubForge::git_host(&git_url).unwrap(),
            ),
        );
        let provider = account.provider(&api, &sanitizer);
        Bench {
            dir,
            api,
            server,
            remote,
            repo,
            base,
            account,
            minted,
            sanitizer,
            forge,
            provider,
        }
    }

    fn target(&self, pr: Option<u64>) -> Target {
        Target {
            repo: "octo/app".to_owned(),
            base: "main".to_owned(),
            branch: None,
            pr,
        }
    }

    async fn scoped(&self, branch: &str) -> Arc<ScopedCredential> {
        let credential = ScopedCredential::mint(
            self.provider.clone(),
            "octo/app",
            branch,
            Duration::from_secs(300),
        )
        .await
        .unwrap();
        assert_eq!(credential.kind(), "gitea-token");
        Arc::new(credential)
    }

    fn pushes(&self) -> usize {
        self.server
            .presented()
            .iter()
            .filter(|p| p.service == "git-receive-pack")
            .count()
    }
}

/// A pull request Gitea fails to open after the push — persistently (500, not repeated: Gitea may
/// have opened it) or refused (422) — is an error, and the branch stays on the git server for a
/// person to propose by hand.
#[tokio::test]
async fn a_pull_request_that_fails_after_the_push_is_an_error_and_the_branch_stays_pushed() {
    for status in [500, 422] {
        let bench = Bench::start(fake_token(), sanitizer()).await;
        mount_post_pulls(
            &bench.api,
            status,
            json!({"message": format!("the pull request could not be made ({status})")}),
        )
        .await;
        let target = bench.target(None);
        let preflight = bench.forge.preflight(&target).await.unwrap();
        let commit = commit_on(&bench.repo, &bench.base, "ours");
        let credential = bench.scoped("stet/late").await;

        let pushed = bench
            .forge
            .push_branch(PushBranch {
                repository: &bench.repo,
                target: &target,
                preflight: &preflight,
                commit: &CommitSha::parse(&commit).unwrap(),
                branch: "stet/late",
                credential: &credential,
            })
            .await
            .unwrap();
        let draft = PullRequestDraft::compose(
            &brief("nothing secret"),
            &pushed.branch,
            None,
            &support::provenance(credential.kind(), &bench.base, &commit),
            &bench.sanitizer.current(),
        );
        let err = bench
            .forge
            .open_pull_request(&target, &draft)
            .await
            .unwrap_err();

        match (status, &err) {
            (
                500,
                ForgeError::Server {
                    forge: "gitea",
                    status: 500,
                    attempts: 1,
                    ..
                },
            )
            | (422, ForgeError::Unprocessable { forge: "gitea", .. }) => {}
            _ => panic!("{status}: unexpected {err:?}"),
        }
        assert_eq!(
            calls(
                &received(&bench.api).await,
                "POST",
                "/api/v1/repos/octo/app/pulls"
            ),
            1
        );
        assert_eq!(
            git(&bench.remote, &["rev-parse", "refs/heads/stet/late"]),
            commit,
            "{status}: the branch is on the git server"
        );
        assert_eq!(credential.revoke().await, RevokeOutcome::Revoked);
    }
}

#[tokio::test]
async fn a_closed_pull_request_stops_the_dispatch_at_preflight_and_nothing_is_pushed() {
    let bench = Bench::start(fake_token(), sanitizer()).await;
    mount_pull(
        &bench.api,
        3,
        pull_json(
            3,
            "closed",
            json!({"full_name": "octo/app"}),
            "stet/old",
            &bench.base,
        ),
    )
    .await;

    let err = bench
        .forge
        .preflight(&bench.target(Some(3)))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::PullRequestClosed { number: 3, state, .. } if state == "closed"),
        "{err}"
    );
    assert_eq!(bench.pushes(), 0, "no push began");
    assert_eq!(git(&bench.remote, &["branch", "--list"]), "* main");
    assert_reads_only(&received(&bench.api).await, &bench.account.primary);
}

// The canary: every sink of a whole collect → push → pull request, searched for every secret.

const CANARY_TEST: &str =
    "suite::gitea::neither_the_primary_token_nor_the_password_nor_the_minted_token_reaches_a_sink";
/// The child's log directory; its presence makes the test the child.
const CANARY_LOGS_ENV: &str = "STET_TEST_GITEA_CANARY_LOGS";
/// The primary token, handed to the child.
const CANARY_PRIMARY_ENV: &str = "STET_TEST_GITEA_CANARY_PRIMARY";
/// What the child prints once every check passed.
const CANARY_CHECKED: &str = "GITEA-CANARY-CHECKED";

/// Logging is process-wide, so the flow runs in a child: this test binary run again on this test.
/// The child searches every sink for the primary token, the password and the minted token (it alone
/// knows the last two); the parent searches the child's output and logs for the primary token once
/// more.
#[test]
fn neither_the_primary_token_nor_the_password_nor_the_minted_token_reaches_a_sink() {
    if let Some(logs) = std::env::var_os(CANARY_LOGS_ENV) {
        let primary = std::env::var(CANARY_PRIMARY_ENV).unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(canary_child(Path::new(&logs), primary));
        println!("{CANARY_CHECKED}");
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let primary = format!("primary{}", uuid::Uuid::new_v4().simple());
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CANARY_TEST, "--nocapture", "--test-threads=1"])
        .env(CANARY_LOGS_ENV, logs.path())
        .env(CANARY_PRIMARY_ENV, &primary)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(CANARY_CHECKED),
        "the child failed:\n{stdout}\n{stderr}"
    );
    let secrets = spellings(&primary);
    assert_absent("the child's output", &format!("{stdout}{stderr}"), &secrets);
    let written = log_text(logs.path());
    assert!(
        written.contains("pushed") && written.contains("Gitea access token minted"),
        "the flow wrote no logs:\n{written}"
    );
    assert_absent("the log files", &written, &secrets);
}

/// The whole flow with every secret known, every sink searched for each.
async fn canary_child(logs: &Path, primary: String) {
    let sanitizer = sanitizer();
    let guard = stet_engine::logging::install(logs, sanitizer.clone()).unwrap();
    let bench = Bench::start(primary, sanitizer).await;
    mount_post_pulls(
        &bench.api,
        201,
        json!({"number": 3, "html_url": "https://gitea.invalid/octo/app/pulls/3"}),
    )
    .await;
    let (primary, minted, password) = (
        &bench.account.primary,
        &bench.minted,
        &bench.account.password,
    );
    let mut secrets = bench.account.secrets();
    secrets.extend(spellings(minted));

    // A brief the user pasted the token into by mistake, and an agent that prints every secret.
    let brief = Brief::parse(
        "canary",
        Path::new("canary.toml"),
        &format!(
            "title = \"Add a feature\"\nworkflow = \"implement\"\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n[[items]]\ntext = \"Use the token {primary} for the API\"\n"
        ),
    )
    .unwrap();
    let target = brief.target.clone();
    let preflight = bench.forge.preflight(&target).await.unwrap();
    let scoped = bench.scoped("stet/canary").await;
    scoped.mask_in(&bench.sanitizer).unwrap();

    let workspace = bench.dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    materialize(
        &bench.repo,
        &preflight.base_sha,
        &workspace,
        SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
    )
    .unwrap();
    std::fs::write(workspace.join("feature.rs"), "pub fn feature() {}\n").unwrap();
    let summary =
        format!("Done. I saw {primary}, {minted} and the password {password} in my environment.");
    tracing::warn!(%summary, "the agent's summary");

    let message = bench
        .sanitizer
        .current()
        .sanitize(&format!("{}\n\n{}", brief.title, brief.items[0].text));
    let imported = import(&ImportRequest {
        repository: &bench.repo,
        workspace: &workspace,
        parent: preflight.parent(),
        identity: &Identity {
            name: "stet agent".into(),
            email: "agent@stet.invalid".into(),
        },
        message: &message,
        limits: ImportLimits::default(),
    })
    .unwrap();
    let Imported::Committed { commit, .. } = imported else {
        panic!("the agent's change was not imported: {imported:?}")
    };
    let commit_message = git(&bench.repo, &["log", "-1", "--format=%B", commit.as_str()]);
    assert!(
        commit_message.contains("[REDACTED:primary-token]"),
        "{commit_message}"
    );
    assert_absent("the commit message", &commit_message, &secrets);

    let pushed = bench
        .forge
        .push_branch(PushBranch {
            repository: &bench.repo,
            target: &target,
            preflight: &preflight,
            commit: &commit,
            branch: "stet/canary",
            credential: &scoped,
        })
        .await
        .unwrap();
    assert_eq!(
        git(&bench.remote, &["rev-parse", "refs/heads/stet/canary"]),
        commit.as_str()
    );
    let presented = bench.server.presented();
    assert!(bench.pushes() > 0, "{presented:?}");
    for p in &presented {
        assert_eq!(&p.password, minted, "a push presented another credential");
        assert_absent("the git server's presented user", &p.user, &secrets);
    }

    let draft = PullRequestDraft::compose(
        &brief,
        &pushed.branch,
        Some(&summary),
        &support::provenance(scoped.kind(), &bench.base, commit.as_str()),
        &bench.sanitizer.current(),
    );
    let opened = bench
        .forge
        .open_pull_request(&target, &draft)
        .await
        .unwrap();
    assert_eq!((opened.number, opened.opened), (3, true));
    assert_eq!(scoped.revoke().await, RevokeOutcome::Revoked);

    let requests = received(&bench.api).await;
    let pr_body = requests
        .iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path().ends_with("/pulls"))
        .filter_map(|r| r.body_json::<Value>().ok())
        .find_map(|body| body["body"].as_str().map(str::to_owned))
        .expect("a pull request was posted");
    assert!(pr_body.contains(PROVENANCE_MARKER), "{pr_body}");
    assert!(pr_body.contains("| Credential | gitea-token"), "{pr_body}");
    for mask in ["primary-token", "gitea-token", "gitea-password"] {
        assert!(
            pr_body.contains(&format!("[REDACTED:{mask}]")),
            "{mask}: {pr_body}"
        );
    }
    assert_absent("the pull request's body", &pr_body, &secrets);
    assert_eq!(
        calls(&requests, "DELETE", &revoke_path()),
        1,
        "the minted token was deleted"
    );
    for request in &requests {
        let body = String::from_utf8_lossy(&request.body);
        assert_absent(
            &format!("the body of {} {}", request.method, request.url),
            &body,
            &secrets,
        );
        assert_absent("a request URL", request.url.as_str(), &secrets);
        let as_account = request.url.path().starts_with("/api/v1/users/");
        for (name, value) in &request.headers {
            let value = value.to_str().unwrap_or_default();
            if name.as_str() != "authorization" {
                assert_absent(&format!("header {name}"), value, &secrets);
            } else if as_account {
                assert_eq!(value, basic(USER, password), "the account's own requests");
            } else {
                assert_eq!(
                    value,
                    format!("token {primary}"),
                    "REST used the primary token"
                );
            }
        }
    }

    drop(guard);
    assert_absent("the log files", &log_text(logs), &secrets);
}
