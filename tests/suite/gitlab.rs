//! The GitLab forge and its project-access-token provider against GitLab's REST API played by
//! `wiremock` (GitLab itself is out of reach), and a real smart-HTTP git server for the pushes: what
//! is requested (method, encoded path, `Authorization`, body), how answers and failures are read, that
//! the primary token travels in the `Authorization` header only, that the push presents the minted
//! project token only, and what happens when GitLab refuses to mint or fails half way.
//! Every token is generated at run time.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use stet_engine::brief::{Brief, Target};
use stet_engine::check::Status;
use stet_engine::credential::{
    CredentialError, CredentialId, CredentialProvider, Revocation, RevokeOutcome, ScopedCredential,
    SecretValue,
};
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::gitlab::GitLabForge;
use stet_engine::forge::gitlab_token::GitLabProjectTokenProvider;
use stet_engine::forge::pull_request::PROVENANCE_MARKER;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::TokenSource;
use stet_engine::forge::{Forge, ForgeError, PullRequestDraft, PushBranch};
use stet_engine::git::import::{Identity, ImportLimits, ImportRequest, Imported, import};
use stet_engine::git::workspace::materialize;
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use super::canary::{assert_absent, commit_on, log_text, spellings};
use super::git_http::GitHttpServer;
use super::support::{self, git};

const GIT_URL: &str = "https://gitlab.example";
/// A project in nested groups, and how GitLab's API names it: one segment, `/` encoded.
const NESTED: &str = "group/sub/app";
const NESTED_API: &str = "/projects/group%2Fsub%2Fapp";
/// The numeric id GitLab gives the nested project.
const NESTED_ID: u64 = 77;

/// A token-like random value, made now (no secret-shaped literal lives in the repository).
fn fake_token() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
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

fn settings(api_url: &str, git_url: &str) -> ForgeSettings {
    ForgeSettings {
        api_url: api_url.to_owned(),
        git_url: git_url.to_owned(),
        token: TokenSource::Env("GITLAB_TOKEN".to_owned()),
        retry: quick(),
    }
}

/// The checkout the briefs come from has the nested project and `octo/app` as remotes.
fn own_remotes() -> CheckoutRemotes {
    CheckoutRemotes::from_urls_namespaced(
        [
            format!("{GIT_URL}/{NESTED}.git"),
            "git@gitlab.example:octo/app.git".to_owned(),
        ],
        &GitLabForge::git_host(GIT_URL).unwrap(),
    )
}

struct Fixture {
    server: MockServer,
    token: String,
    sanitizer: SanitizerHandle,
    forge: GitLabForge,
}

async fn fixture_with(remotes: CheckoutRemotes) -> Fixture {
    let server = MockServer::start().await;
    let token = fake_token();
    let sanitizer = sanitizer();
    let forge = GitLabForge::with_token(
        settings(&server.uri(), GIT_URL),
        SecretValue::new(token.clone()),
        sanitizer.clone(),
        remotes,
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
    fixture_with(own_remotes()).await
}

fn target(base: &str, pr: Option<u64>) -> Target {
    Target {
        repo: NESTED.to_owned(),
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

/// Answers for the nested project (id [`NESTED_ID`]) and its branch `base` at `base_sha`.
async fn mount_project_and_base(server: &MockServer, base: &str, base_sha: &str) {
    mount_get(
        server,
        NESTED_API,
        json_reply(200, json!({"id": NESTED_ID, "path_with_namespace": NESTED})),
    )
    .await;
    let encoded = base.replace('/', "%2F");
    mount_get(
        server,
        &format!("{NESTED_API}/repository/branches/{encoded}"),
        json_reply(200, json!({"name": base, "commit": {"id": base_sha}})),
    )
    .await;
}

fn merge_request(iid: u64, state: &str, source_project_id: u64, head_sha: &str) -> Value {
    json!({
        "iid": iid,
        "state": state,
        "source_branch": "stet/feature",
        "target_branch": "main",
        "sha": head_sha,
        "source_project_id": source_project_id,
        "target_project_id": NESTED_ID,
        "web_url": format!("{GIT_URL}/{NESTED}/-/merge_requests/{iid}"),
    })
}

async fn mount_merge_request(server: &MockServer, iid: u64, body: Value) {
    mount_get(
        server,
        &format!("{NESTED_API}/merge_requests/{iid}"),
        json_reply(200, body),
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

/// The request carries `token` as its bearer, and nowhere else (URL, other headers, body).
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
            assert!(!contains(value.as_bytes(), token), "header {name}");
        }
    }
    assert!(!contains(&request.body, token));
}

/// Every request of a preflight: a GET without a body, with the primary token as its bearer only.
fn assert_reads_only(requests: &[Request], token: &str) {
    assert!(!requests.is_empty());
    for request in requests {
        assert_eq!(request.method.as_str(), "GET", "{}", request.url);
        assert!(request.body.is_empty());
        assert_token_only_in_authorization(request, token);
    }
}

#[tokio::test]
async fn preflight_asks_for_a_nested_project_and_its_base_as_single_segments_with_gets_only() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "release/1.x", &sha('a')).await;
    // The same path unencoded is a different resource; asking it would answer a wrong commit.
    Mock::given(method("GET"))
        .and(path(
            "/projects/group/sub/app/repository/branches/release/1.x",
        ))
        .respond_with(json_reply(
            200,
            json!({"name": "release/1.x", "commit": {"id": sha('f')}}),
        ))
        .mount(&f.server)
        .await;

    let preflight = f
        .forge
        .preflight(&target("release/1.x", None))
        .await
        .unwrap();

    assert_eq!(preflight.base_sha, CommitSha::parse(&sha('a')).unwrap());
    assert_eq!(preflight.head, None);
    assert_eq!(preflight.push_url, format!("{GIT_URL}/{NESTED}.git"));
    let requests = received(&f.server).await;
    let paths: Vec<&str> = requests.iter().map(|r| r.url.path()).collect();
    assert_eq!(
        paths,
        [
            NESTED_API,
            "/projects/group%2Fsub%2Fapp/repository/branches/release%2F1.x"
        ]
    );
    assert_reads_only(&requests, &f.token);
}

#[tokio::test]
async fn preflight_reports_a_missing_project_and_a_missing_base() {
    let f = fixture().await;
    mount_get(
        &f.server,
        NESTED_API,
        json_reply(404, json!({"message": "404 Project Not Found"})),
    )
    .await;
    let err = f.forge.preflight(&target("main", None)).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::RepositoryNotFound { repo, .. } if repo == NESTED),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 404 is not retried");

    f.server.reset().await;
    mount_get(
        &f.server,
        NESTED_API,
        json_reply(200, json!({"id": NESTED_ID})),
    )
    .await;
    mount_get(
        &f.server,
        &format!("{NESTED_API}/repository/branches/gone"),
        json_reply(404, json!({"message": "404 Branch Not Found"})),
    )
    .await;
    let err = f.forge.preflight(&target("gone", None)).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::BaseNotFound { base, repo, .. } if base == "gone" && repo == NESTED),
        "{err}"
    );
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn a_brief_may_target_only_a_project_the_checkout_has_as_a_remote() {
    let f = fixture().await;
    for elsewhere in [
        "victim/app",
        "group/sub",
        "group/sub/app/deeper",
        "group/app",
    ] {
        let steered = Target {
            repo: elsewhere.to_owned(),
            ..target("main", None)
        };
        let err = f.forge.preflight(&steered).await.unwrap_err();
        assert!(
            matches!(&err, ForgeError::NotThisCheckout { repo, remotes, .. }
                if repo == elsewhere && remotes == "group/sub/app, octo/app"),
            "{err}"
        );
        assert!(err.to_string().contains("git remote add"), "{err}");
    }
    assert!(
        received(&f.server).await.is_empty(),
        "GitLab was not asked anything"
    );
}

#[tokio::test]
async fn preflight_refuses_a_brief_branch_that_already_exists() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "main", &sha('a')).await;
    mount_get(
        &f.server,
        &format!("{NESTED_API}/repository/branches/stet%2Ftaken"),
        json_reply(
            200,
            json!({"name": "stet/taken", "commit": {"id": sha('b')}}),
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

    assert!(
        matches!(&err, ForgeError::BranchExists { branch, .. } if branch == "stet/taken"),
        "{err}"
    );
    assert!(err.to_string().contains("set `pr = N`"), "{err}");
    let free = f.forge.preflight(&with_branch("stet/free")).await.unwrap();
    assert_eq!(free.base_sha, CommitSha::parse(&sha('a')).unwrap());
    let requests = received(&f.server).await;
    assert_eq!(
        calls(
            &requests,
            "GET",
            "/projects/group%2Fsub%2Fapp/repository/branches/stet%2Ffree"
        ),
        1
    );
    assert_reads_only(&requests, &f.token);
}

#[tokio::test]
async fn preflight_resolves_an_open_merge_request_to_its_real_source_branch_and_sha() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "main", &sha('a')).await;
    mount_merge_request(
        &f.server,
        7,
        merge_request(7, "opened", NESTED_ID, &sha('b')),
    )
    .await;
    // The brief's own branch does not matter when it updates a merge request.
    let brief_says = Target {
        branch: Some("stet/whatever".to_owned()),
        ..target("main", Some(7))
    };

    let preflight = f.forge.preflight(&brief_says).await.unwrap();

    let head = preflight.head.clone().unwrap();
    assert_eq!(
        (head.number, head.branch.as_str(), head.sha.as_str()),
        (7, "stet/feature", sha('b').as_str())
    );
    assert_eq!(preflight.parent().as_str(), sha('b'), "builds on the head");
    let requests = received(&f.server).await;
    assert_eq!(
        calls(&requests, "GET", &format!("{NESTED_API}/merge_requests/7")),
        1
    );
    assert_reads_only(&requests, &f.token);
}

#[tokio::test]
async fn preflight_refuses_a_merge_request_that_is_not_open_or_does_not_exist() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "main", &sha('a')).await;
    for (iid, state) in [(8, "closed"), (9, "merged"), (10, "locked")] {
        mount_merge_request(
            &f.server,
            iid,
            merge_request(iid, state, NESTED_ID, &sha('b')),
        )
        .await;
        let err = f
            .forge
            .preflight(&target("main", Some(iid)))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ForgeError::PullRequestClosed { number, state: s, .. } if *number == iid && s == state),
            "{err}"
        );
    }
    mount_get(
        &f.server,
        &format!("{NESTED_API}/merge_requests/11"),
        json_reply(404, json!({"message": "404 Not found"})),
    )
    .await;
    let err = f
        .forge
        .preflight(&target("main", Some(11)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::PullRequestNotFound { number: 11, .. }),
        "{err}"
    );
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn preflight_refuses_a_merge_request_from_a_fork_or_into_another_base() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "main", &sha('a')).await;
    mount_merge_request(&f.server, 5, merge_request(5, "opened", 999, &sha('b'))).await;
    let mut elsewhere = merge_request(6, "opened", NESTED_ID, &sha('b'));
    elsewhere["target_branch"] = json!("develop");
    mount_merge_request(&f.server, 6, elsewhere).await;

    let fork = f
        .forge
        .preflight(&target("main", Some(5)))
        .await
        .unwrap_err();
    let other_base = f
        .forge
        .preflight(&target("main", Some(6)))
        .await
        .unwrap_err();

    assert!(matches!(fork, ForgeError::InvalidTarget { .. }), "{fork}");
    let text = fork.to_string();
    assert!(text.contains("!5") && text.contains("fork"), "{text}");
    assert!(
        matches!(&other_base, ForgeError::InvalidTarget { detail, .. } if detail.contains("\"develop\"")),
        "{other_base}"
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
repo = "{NESTED}"
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
        &support::provenance("gitlab-project-token", &sha('a'), &sha('c')),
        &f.sanitizer.current(),
    )
}

fn keys(body: &Value) -> Vec<&str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn opening_a_merge_request_posts_source_target_title_and_description_only() {
    let f = fixture().await;
    Mock::given(method("POST"))
        .and(path(format!("{NESTED_API}/merge_requests")))
        .respond_with(json_reply(
            201,
            json!({"iid": 12, "web_url": format!("{GIT_URL}/{NESTED}/-/merge_requests/12")}),
        ))
        .mount(&f.server)
        .await;

    let opened = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/fix-login"))
        .await
        .unwrap();

    assert_eq!(
        (opened.number, opened.url.as_str(), opened.opened),
        (
            12,
            format!("{GIT_URL}/{NESTED}/-/merge_requests/12").as_str(),
            true
        )
    );
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 1);
    assert_token_only_in_authorization(&requests[0], &f.token);
    let sent: Value = requests[0].body_json().unwrap();
    assert_eq!(
        keys(&sent),
        ["description", "source_branch", "target_branch", "title"]
    );
    assert_eq!(
        (
            sent["source_branch"].as_str(),
            sent["target_branch"].as_str(),
            sent["title"].as_str()
        ),
        (
            Some("stet/fix-login"),
            Some("main"),
            Some("Fix the login redirect loop")
        )
    );
    let description = sent["description"].as_str().unwrap();
    assert!(description.contains(PROVENANCE_MARKER), "{description}");
    assert!(
        description.contains("| Credential | gitlab-project-token"),
        "{description}"
    );
    assert!(
        description.contains("[REDACTED:primary-token]"),
        "the brief's copy of the token was masked: {description}"
    );
}

#[tokio::test]
async fn an_existing_merge_request_is_put_at_its_resolved_iid_and_never_posted() {
    let f = fixture().await;
    mount_project_and_base(&f.server, "main", &sha('a')).await;
    mount_merge_request(
        &f.server,
        7,
        merge_request(7, "opened", NESTED_ID, &sha('b')),
    )
    .await;
    Mock::given(method("PUT"))
        .and(path(format!("{NESTED_API}/merge_requests/7")))
        .respond_with(json_reply(
            200,
            merge_request(7, "opened", NESTED_ID, &sha('b')),
        ))
        .mount(&f.server)
        .await;
    let target = target("main", Some(7));

    let head = f.forge.preflight(&target).await.unwrap().head.unwrap();
    let updated = f
        .forge
        .update_pull_request(&target, head.number, &draft(&f, &head.branch))
        .await
        .unwrap();

    assert_eq!((updated.number, updated.opened), (7, false));
    assert_eq!(
        updated.url,
        format!("{GIT_URL}/{NESTED}/-/merge_requests/7")
    );
    let requests = received(&f.server).await;
    assert!(requests.iter().all(|r| r.method.as_str() != "POST"));
    assert_eq!(
        calls(&requests, "PUT", &format!("{NESTED_API}/merge_requests/7")),
        1
    );
    let put = requests
        .iter()
        .find(|r| r.method.as_str() == "PUT")
        .unwrap();
    assert_token_only_in_authorization(put, &f.token);
    let sent: Value = put.body_json().unwrap();
    assert_eq!(
        keys(&sent),
        ["description", "title"],
        "an update changes the text, never the branches or the state"
    );
    assert!(
        sent["description"]
            .as_str()
            .unwrap()
            .contains(PROVENANCE_MARKER)
    );
}

#[tokio::test]
async fn updating_a_merge_request_that_is_gone_is_not_found_and_opens_nothing() {
    let f = fixture().await;
    Mock::given(method("PUT"))
        .and(path(format!("{NESTED_API}/merge_requests/4")))
        .respond_with(json_reply(404, json!({"message": "404 Not found"})))
        .mount(&f.server)
        .await;

    let err = f
        .forge
        .update_pull_request(&target("main", Some(4)), 4, &draft(&f, "stet/x"))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, ForgeError::PullRequestNotFound { number: 4, repo, .. } if repo == NESTED),
        "{err}"
    );
    let requests = received(&f.server).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method.as_str(), "PUT");
}

#[tokio::test]
async fn a_second_merge_request_for_the_same_branch_is_reported_as_existing() {
    let f = fixture().await;
    Mock::given(method("POST"))
        .and(path(format!("{NESTED_API}/merge_requests")))
        .respond_with(json_reply(
            409,
            json!({"message": ["Another open merge request already exists for this source branch: !3"]}),
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
            if head == "stet/x" && base == "main" && detail.contains("already exists for this source branch: !3")),
        "{err}"
    );
    assert_eq!(received(&f.server).await.len(), 1, "a 409 is not retried");
}

#[tokio::test]
async fn gitlabs_refusals_carry_its_words_but_never_the_token() {
    let f = fixture().await;
    let message = format!("401 Unauthorized, you sent {}", f.token);
    Mock::given(method("POST"))
        .and(path(format!("{NESTED_API}/merge_requests")))
        .respond_with(json_reply(401, json!({"message": message})))
        .mount(&f.server)
        .await;

    let err = f
        .forge
        .open_pull_request(&target("main", None), &draft(&f, "stet/x"))
        .await
        .unwrap_err();

    assert!(matches!(err, ForgeError::Unauthorized { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("you sent [REDACTED:primary-token]"), "{text}");
    assert!(!text.contains(&f.token) && !format!("{err:?}").contains(&f.token));
    assert!(!format!("{:?}", f.forge).contains(&f.token));
}

/// `GET /user` and `/personal_access_tokens/self` answered as a healthy token's.
async fn mount_healthy_token(server: &MockServer, scopes: Value) {
    mount_get(
        server,
        "/user",
        json_reply(200, json!({"username": "octo"})),
    )
    .await;
    mount_get(
        server,
        "/personal_access_tokens/self",
        json_reply(200, json!({"scopes": scopes})),
    )
    .await;
}

fn access(level: Option<u32>) -> Value {
    level.map_or(Value::Null, |level| json!({"access_level": level}))
}

async fn mount_role(server: &MockServer, api_path: &str, project: Option<u32>, group: Option<u32>) {
    mount_get(
        server,
        api_path,
        json_reply(
            200,
            json!({"id": 1, "permissions": {"project_access": access(project), "group_access": access(group)}}),
        ),
    )
    .await;
}

#[tokio::test]
async fn the_doctor_reads_the_token_its_scopes_and_the_role_on_each_remote_changing_nothing() {
    let f = fixture_with(CheckoutRemotes::from_urls_namespaced(
        [
            format!("{GIT_URL}/{NESTED}.git"),
            format!("{GIT_URL}/octo/app.git"),
            format!("{GIT_URL}/octo/docs.git"),
        ],
        "gitlab.example",
    ))
    .await;
    mount_healthy_token(&f.server, json!(["api", "read_user"])).await;
    mount_role(&f.server, NESTED_API, Some(30), Some(40)).await;
    mount_role(&f.server, "/projects/octo%2Fapp", Some(30), None).await;
    mount_role(&f.server, "/projects/octo%2Fdocs", None, Some(20)).await;

    let checks = f.forge.diagnose().await;

    let found: Vec<(Status, &str)> = checks
        .iter()
        .map(|check| (check.status, check.detail.as_str()))
        .collect();
    assert_eq!(checks.len(), 5, "{found:?}");
    assert_eq!(checks[0].status, Status::Ok, "{found:?}");
    assert!(checks[0].detail.contains("octo"), "{found:?}");
    assert_eq!(checks[1].status, Status::Ok, "the api scope: {found:?}");
    let role = |repo: &str| {
        checks
            .iter()
            .find(|check| check.detail.contains(&format!("gitlab: {repo}:")))
            .unwrap_or_else(|| panic!("no check of {repo}: {found:?}"))
    };
    assert_eq!(
        role(NESTED).status,
        Status::Ok,
        "the group's Maintainer counts"
    );
    let developer = role("octo/app");
    assert_eq!(developer.status, Status::Warn);
    assert!(
        developer.detail.contains("Maintainer needed")
            && developer.detail.contains("falls back to your own token"),
        "{developer:?}"
    );
    assert!(
        developer
            .fix
            .as_deref()
            .unwrap()
            .contains("credentials.provider = \"fallback\""),
        "{developer:?}"
    );
    let reporter = role("octo/docs");
    assert_eq!(reporter.status, Status::Fail, "{reporter:?}");
    assert!(reporter.detail.contains("cannot push"), "{reporter:?}");
    assert_reads_only(&received(&f.server).await, &f.token);
}

#[tokio::test]
async fn the_doctor_names_the_setting_to_fix_for_each_problem_of_the_token() {
    // Unreachable: nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}/api/v4", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = GitLabForge::with_token(
        settings(&nowhere, GIT_URL),
        SecretValue::new(fake_token()),
        sanitizer(),
        own_remotes(),
    )
    .unwrap();
    let checks = unreachable.diagnose().await;
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0].status, Status::Fail);
    assert!(
        checks[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("forge.gitlab.api_url"),
        "{checks:?}"
    );

    // Refused.
    let f = fixture().await;
    mount_get(
        &f.server,
        "/user",
        json_reply(401, json!({"message": "401 Unauthorized"})),
    )
    .await;
    let checks = f.forge.diagnose().await;
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0].status, Status::Fail);
    let fix = checks[0].fix.as_deref().unwrap();
    assert!(
        fix.contains("forge.gitlab")
            && fix.contains("GITLAB_TOKEN")
            && fix.contains("token_command")
            && fix.contains("api"),
        "{fix}"
    );

    // Accepted, without the api scope.
    let f = fixture().await;
    mount_healthy_token(&f.server, json!(["read_api", "write_repository"])).await;
    let checks = f.forge.diagnose().await;
    assert_eq!(checks[1].status, Status::Fail, "{checks:?}");
    assert!(checks[1].detail.contains("without api"), "{checks:?}");
    assert!(checks[1].fix.as_deref().unwrap().contains("forge.gitlab"));

    // An older GitLab that cannot say.
    let f = fixture().await;
    mount_get(
        &f.server,
        "/user",
        json_reply(200, json!({"username": "octo"})),
    )
    .await;
    mount_get(
        &f.server,
        "/personal_access_tokens/self",
        json_reply(404, json!({"error": "404 Not Found"})),
    )
    .await;
    let checks = f.forge.diagnose().await;
    assert_eq!(checks[1].status, Status::Warn, "{checks:?}");
    assert!(checks[1].detail.contains("could not be read"), "{checks:?}");
}

// The project access token provider.

const TOKEN_ID: u64 = 4711;

fn provider(
    server: &MockServer,
    primary: &str,
    sanitizer: &SanitizerHandle,
) -> Arc<GitLabProjectTokenProvider> {
    Arc::new(
        GitLabProjectTokenProvider::new(
            &server.uri(),
            SecretValue::new(primary.to_owned()),
            quick(),
            sanitizer.clone(),
        )
        .unwrap(),
    )
}

/// GitLab minting `token` (id [`TOKEN_ID`]) for the nested project.
async fn mount_mint(server: &MockServer, token: &str) {
    Mock::given(method("POST"))
        .and(path(format!("{NESTED_API}/access_tokens")))
        .respond_with(json_reply(
            201,
            json!({
                "id": TOKEN_ID,
                "name": "stet",
                "token": token,
                "scopes": ["write_repository"],
                "access_level": 30,
                "active": true,
                "revoked": false,
                "expires_at": "2026-01-02",
            }),
        ))
        .mount(server)
        .await;
}

fn revoke_path() -> String {
    format!("{NESTED_API}/access_tokens/{TOKEN_ID}")
}

/// The dates a mint between `before` and `after` may ask for.
fn expected_dates(before: DateTime<Utc>, after: DateTime<Utc>, ttl: Duration) -> Vec<String> {
    let ttl = chrono::Duration::from_std(ttl).unwrap() + chrono::Duration::days(1);
    [before, after]
        .map(|at| (at + ttl).date_naive().format("%Y-%m-%d").to_string())
        .to_vec()
}

#[tokio::test]
async fn a_project_token_is_minted_with_write_repository_as_developer_until_the_computed_date() {
    let server = MockServer::start().await;
    let (primary, minted_token) = (fake_token(), fake_token());
    let sanitizer = sanitizer();
    mount_mint(&server, &minted_token).await;
    let provider = provider(&server, &primary, &sanitizer);
    assert_eq!(provider.name(), "gitlab-project-token");
    let ttl = Duration::from_secs(900);

    let before = Utc::now();
    let minted = provider.mint(NESTED, "stet/fix", ttl).await.unwrap();
    let after = Utc::now();

    assert_eq!(minted.value.expose_secret(), minted_token);
    assert_eq!(minted.stand_in, None);
    assert!(
        minted.id.as_str().starts_with("gitlab-project-token-")
            && minted.id.as_str().contains(&TOKEN_ID.to_string())
            && !minted.id.as_str().contains(&minted_token),
        "{}",
        minted.id
    );
    let ttl_chrono = chrono::Duration::from_std(ttl).unwrap();
    assert!(minted.expires_at >= before + ttl_chrono && minted.expires_at <= after + ttl_chrono);
    let requests = received(&server).await;
    assert_eq!(requests.len(), 1);
    let mint = &requests[0];
    assert_eq!(mint.method.as_str(), "POST");
    assert_eq!(mint.url.path(), "/projects/group%2Fsub%2Fapp/access_tokens");
    assert_token_only_in_authorization(mint, &primary);
    let sent: Value = mint.body_json().unwrap();
    assert_eq!(
        keys(&sent),
        ["access_level", "expires_at", "name", "scopes"]
    );
    assert_eq!(sent["scopes"], json!(["write_repository"]));
    assert_eq!(sent["access_level"], json!(30));
    assert!(
        expected_dates(before, after, ttl)
            .contains(&sent["expires_at"].as_str().unwrap().to_owned()),
        "{sent}"
    );
    assert!(
        sent["name"].as_str().unwrap().starts_with("stet-"),
        "{sent}"
    );
    assert_eq!(
        sanitizer
            .current()
            .sanitize(&format!("got {minted_token}"))
            .as_str(),
        "got [REDACTED:project-token]",
        "the minted token was taught to the sanitizer"
    );
    assert!(!format!("{provider:?}").contains(&primary));
}

#[tokio::test]
async fn revoking_deletes_once_even_when_the_credential_is_revoked_twice() {
    let server = MockServer::start().await;
    let primary = fake_token();
    mount_mint(&server, &fake_token()).await;
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let provider = provider(&server, &primary, &sanitizer());

    let credential = ScopedCredential::mint(provider, NESTED, "stet/fix", Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(credential.kind(), "gitlab-project-token");
    assert_eq!(credential.stand_in(), None);

    assert_eq!(credential.revoke().await, RevokeOutcome::Revoked);
    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    server.verify().await;
    let delete = received(&server)
        .await
        .into_iter()
        .find(|r| r.method.as_str() == "DELETE")
        .unwrap();
    assert_token_only_in_authorization(&delete, &primary);
}

#[tokio::test]
async fn a_fresh_provider_revokes_by_id_alone_but_never_at_another_gitlab() {
    let server = MockServer::start().await;
    let primary = fake_token();
    mount_mint(&server, &fake_token()).await;
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let id = provider(&server, &primary, &sanitizer())
        .mint(NESTED, "stet/fix", Duration::from_secs(300))
        .await
        .unwrap()
        .id;
    // The journal keeps only the id's text.
    let journaled = CredentialId::new(id.as_str().to_owned());

    let later = provider(&server, &primary, &sanitizer());
    assert_eq!(later.revoke(&journaled).await.unwrap(), Revocation::Revoked);

    let other = MockServer::start().await;
    let elsewhere = provider(&other, &primary, &sanitizer());
    assert_eq!(
        elsewhere.revoke(&journaled).await.unwrap(),
        Revocation::NotRevocable
    );
    for foreign in ["github-app-1234", "local-5", "gitlab-project-token-garbage"] {
        assert_eq!(
            later
                .revoke(&CredentialId::new(foreign.to_owned()))
                .await
                .unwrap(),
            Revocation::NotRevocable,
            "{foreign}"
        );
    }
    assert!(received(&other).await.is_empty());
    server.verify().await;
}

#[tokio::test]
async fn where_gitlab_refuses_to_mint_the_primary_token_stands_in_and_says_why() {
    for (status, message) in [
        (403, "403 Forbidden"),
        (404, "404 Not Found"),
        // What GitLab answers a Developer, and GitLab.com's free plan.
        (
            400,
            "400 Bad request - User does not have permission to create project access token",
        ),
    ] {
        let server = MockServer::start().await;
        let primary = fake_token();
        Mock::given(method("POST"))
            .and(path(format!("{NESTED_API}/access_tokens")))
            .respond_with(json_reply(status, json!({"message": message})))
            .mount(&server)
            .await;
        Mock::given(method("DELETE"))
            .respond_with(ResponseTemplate::new(204))
            .expect(0)
            .mount(&server)
            .await;
        let provider = provider(&server, &primary, &sanitizer());

        let credential = ScopedCredential::mint(
            provider.clone(),
            NESTED,
            "stet/fix",
            Duration::from_secs(300),
        )
        .await
        .unwrap();

        assert_eq!(credential.kind(), "fallback");
        assert!(
            !credential.enters_sandbox(),
            "the primary token never enters a sandbox"
        );
        assert_eq!(credential.host_push_secret().expose_secret(), primary);
        let why = credential.stand_in().unwrap();
        assert!(
            why.contains(&status.to_string())
                && why.contains(message)
                && why.contains(NESTED)
                && why.contains("Maintainer")
                && why.contains("Premium"),
            "{why}"
        );
        assert!(!why.contains(&primary), "{why}");
        assert_eq!(credential.revoke().await, RevokeOutcome::NotRevocable);
        assert_eq!(
            provider.revoke(credential.id()).await.unwrap(),
            Revocation::NotRevocable
        );
        server.verify().await;
    }
}

#[tokio::test]
async fn any_other_failure_to_mint_is_an_error_not_a_fallback() {
    for (status, attempts) in [(500, 1), (401, 1), (400, 1)] {
        let server = MockServer::start().await;
        let primary = fake_token();
        Mock::given(method("POST"))
            .and(path(format!("{NESTED_API}/access_tokens")))
            .respond_with(json_reply(
                status,
                json!({"message": format!("no, {primary}")}),
            ))
            .mount(&server)
            .await;
        let provider = provider(&server, &primary, &sanitizer());

        let err = provider
            .mint(NESTED, "stet/fix", Duration::from_secs(300))
            .await
            .unwrap_err();

        assert!(
            matches!(
                &err,
                CredentialError::Provider {
                    provider: "gitlab-project-token",
                    ..
                }
            ),
            "{status}: {err}"
        );
        let text = err.to_string();
        assert!(!text.contains(&primary), "{text}");
        assert!(text.contains("no, [REDACTED:primary-token]"), "{text}");
        assert_eq!(
            received(&server).await.len(),
            attempts,
            "{status}: a mint GitLab may have acted on is not sent again"
        );
    }
}

/// A primary token without the `api` scope could not open the merge request either: an error now,
/// before the agent runs, rather than a fallback that fails after it.
#[tokio::test]
async fn a_primary_token_without_the_api_scope_is_an_error_not_a_fallback() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("{NESTED_API}/access_tokens")))
        .respond_with(json_reply(
            403,
            json!({"error": "insufficient_scope", "error_description": "The request requires higher privileges than provided by the access token.", "scope": "api"}),
        ))
        .mount(&server)
        .await;
    let provider = provider(&server, &fake_token(), &sanitizer());

    let err = provider
        .mint(NESTED, "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    let text = err.to_string();
    assert!(
        text.contains("api scope") && text.contains("forge.gitlab") && text.contains(NESTED),
        "{text}"
    );
}

#[tokio::test]
async fn a_minted_token_no_header_can_carry_is_refused_and_revoked_at_once() {
    let server = MockServer::start().await;
    mount_mint(&server, &format!("{} {}", fake_token(), fake_token())).await;
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let provider = provider(&server, &fake_token(), &sanitizer());

    let err = provider
        .mint(NESTED, "stet/fix", Duration::from_secs(300))
        .await
        .unwrap_err();

    assert!(err.to_string().contains("not printable ASCII"), "{err}");
    server.verify().await;
}

#[tokio::test]
async fn the_provider_tells_the_doctor_where_gitlab_will_not_mint_without_minting() {
    let server = MockServer::start().await;
    mount_get(
        &server,
        &format!("{NESTED_API}/access_tokens"),
        json_reply(200, json!([])),
    )
    .await;
    mount_get(
        &server,
        "/projects/octo%2Fapp/access_tokens",
        json_reply(403, json!({"message": "403 Forbidden"})),
    )
    .await;
    let primary = fake_token();
    let provider = provider(&server, &primary, &sanitizer());

    let checks = provider
        .diagnose(&[NESTED.to_owned(), "octo/app".to_owned()])
        .await;

    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0].status, Status::Ok, "{checks:?}");
    assert_eq!(checks[1].status, Status::Warn, "{checks:?}");
    assert!(checks[1].detail.contains("falls back"), "{checks:?}");
    assert!(checks[1].fix.as_deref().unwrap().contains("Maintainer"));
    assert_reads_only(&received(&server).await, &primary);
}

// The fault matrix.

#[tokio::test]
async fn a_revoke_gitlab_fails_is_a_failed_outcome_whose_text_holds_no_secret() {
    let server = MockServer::start().await;
    let (primary, minted_token) = (fake_token(), fake_token());
    mount_mint(&server, &minted_token).await;
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(json_reply(
            500,
            json!({"message": format!("500 while deleting {minted_token} for {primary}")}),
        ))
        .mount(&server)
        .await;
    let credential = ScopedCredential::mint(
        provider(&server, &primary, &sanitizer()),
        NESTED,
        "stet/fix",
        Duration::from_secs(300),
    )
    .await
    .unwrap();

    let RevokeOutcome::Failed(text) = credential.revoke().await else {
        panic!("a 500 is a failed revoke")
    };

    assert!(text.contains("500"), "{text}");
    assert_absent("the failed revoke's text", &text, &[primary, minted_token]);
    assert!(text.contains("[REDACTED:project-token]"), "{text}");
}

#[tokio::test]
async fn a_revoke_of_a_token_gitlab_no_longer_knows_is_already_revoked() {
    let server = MockServer::start().await;
    mount_mint(&server, &fake_token()).await;
    Mock::given(method("DELETE"))
        .and(path(revoke_path()))
        .respond_with(json_reply(404, json!({"message": "404 Not Found"})))
        .expect(1)
        .mount(&server)
        .await;
    let credential = ScopedCredential::mint(
        provider(&server, &fake_token(), &sanitizer()),
        NESTED,
        "stet/fix",
        Duration::from_secs(300),
    )
    .await
    .unwrap();

    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
    server.verify().await;
}

/// GitLab through wiremock and a real smart-HTTP git server that accepts only the project token
/// GitLab mints, and the user's repository whose `main` is also the forge's. The git server holds
/// `octo/app` (it serves two-part paths only); its API name is `octo%2Fapp`.
struct Bench {
    dir: tempfile::TempDir,
    api: MockServer,
    server: GitHttpServer,
    remote: std::path::PathBuf,
    repo: std::path::PathBuf,
    base: String,
    primary: String,
    project_token: String,
    sanitizer: SanitizerHandle,
    forge: GitLabForge,
    provider: Arc<GitLabProjectTokenProvider>,
}

const BENCH_API: &str = "/projects/octo%2Fapp";
const BENCH_ID: u64 = 12;

impl Bench {
    async fn start(primary: String) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let project_token = fake_token();
        let only = project_token.clone();
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
        mount_get(&api, BENCH_API, json_reply(200, json!({"id": BENCH_ID}))).await;
        mount_get(
            &api,
            &format!("{BENCH_API}/repository/branches/main"),
            json_reply(200, json!({"name": "main", "commit": {"id": base}})),
        )
        .await;
        Mock::given(method("POST"))
            .and(path(format!("{BENCH_API}/access_tokens")))
            .respond_with(json_reply(
                201,
                json!({"id": TOKEN_ID, "token": project_token, "scopes": ["write_repository"]}),
            ))
            .mount(&api)
            .await;
        Mock::given(method("DELETE"))
            .and(path(format!("{BENCH_API}/access_tokens/{TOKEN_ID}")))
            .respond_with(ResponseTemplate::new(204))
            .mount(&api)
            .await;

        let sanitizer = sanitizer();
        let forge = GitLabForge::with_token(
            settings(&api.uri(), &git_url),
            SecretValue::new(primary.clone()),
            sanitizer.clone(),
            CheckoutRemotes::from_urls_namespaced(
                [format!("{git_url}/octo/app.git")],
                &GitLabForge::git_host(&git_url).unwrap(),
            ),
        )
        .unwrap();
        let provider = provider(&api, &primary, &sanitizer);
        Bench {
            dir,
            api,
            server,
            remote,
            repo,
            base,
            primary,
            project_token,
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
        assert_eq!(credential.kind(), "gitlab-project-token");
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

#[tokio::test]
async fn a_merge_request_that_fails_after_the_push_is_an_error_and_the_branch_stays_pushed() {
    let bench = Bench::start(fake_token()).await;
    Mock::given(method("POST"))
        .and(path(format!("{BENCH_API}/merge_requests")))
        .respond_with(json_reply(
            500,
            json!({"message": "500 Internal Server Error"}),
        ))
        .mount(&bench.api)
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
    let brief = Brief::parse(
        "late",
        Path::new("late.toml"),
        "title = \"Late\"\nworkflow = \"implement\"\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n",
    )
    .unwrap();
    let draft = PullRequestDraft::compose(
        &brief,
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

    assert!(
        matches!(
            &err,
            ForgeError::Server {
                status: 500,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        git(&bench.remote, &["rev-parse", "refs/heads/stet/late"]),
        commit,
        "the branch is on the git server for a person to propose by hand"
    );
    assert_eq!(credential.revoke().await, RevokeOutcome::Revoked);
}

#[tokio::test]
async fn a_closed_merge_request_stops_the_dispatch_at_preflight_and_nothing_is_pushed() {
    let bench = Bench::start(fake_token()).await;
    mount_get(
        &bench.api,
        &format!("{BENCH_API}/merge_requests/3"),
        json_reply(
            200,
            json!({
                "iid": 3, "state": "closed", "source_branch": "stet/old", "target_branch": "main",
                "sha": bench.base, "source_project_id": BENCH_ID, "target_project_id": BENCH_ID,
            }),
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
    assert!(
        received(&bench.api)
            .await
            .iter()
            .all(|r| r.method.as_str() == "GET"),
        "no token was minted, nothing was changed"
    );
}

// The canary: every sink of a whole collect → push → merge request, searched for both tokens.

const CANARY_TEST: &str = "suite::gitlab::neither_the_primary_nor_the_project_token_reaches_a_sink";
/// The child's log directory; its presence makes the test the child.
const CANARY_LOGS_ENV: &str = "STET_TEST_GITLAB_CANARY_LOGS";
/// The primary token, handed to the child.
const CANARY_PRIMARY_ENV: &str = "STET_TEST_GITLAB_CANARY_PRIMARY";
/// What the child prints once every check passed.
const CANARY_CHECKED: &str = "GITLAB-CANARY-CHECKED";

/// Logging is process-wide, so the flow runs in a child: this test binary run again on this test.
/// The child searches every sink for both tokens (it alone knows the project token GitLab minted);
/// the parent searches the child's output and logs for the primary token once more.
#[test]
fn neither_the_primary_nor_the_project_token_reaches_a_sink() {
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
        written.contains("pushed"),
        "the flow wrote no logs:\n{written}"
    );
    assert!(written.contains("project access token minted"), "{written}");
    assert_absent("the log files", &written, &secrets);
}

/// The whole flow with both tokens known, every sink searched for both.
async fn canary_child(logs: &Path, primary: String) {
    let bench = Bench::start(primary).await;
    let guard = stet_engine::logging::install(logs, bench.sanitizer.clone()).unwrap();
    Mock::given(method("POST"))
        .and(path(format!("{BENCH_API}/merge_requests")))
        .respond_with(json_reply(
            201,
            json!({"iid": 3, "web_url": "https://gitlab.invalid/octo/app/-/merge_requests/3"}),
        ))
        .mount(&bench.api)
        .await;
    let (primary, project_token) = (&bench.primary, &bench.project_token);
    let mut secrets = spellings(primary);
    secrets.extend(spellings(project_token));

    // A brief the user pasted the token into by mistake, and an agent that prints both secrets.
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
    let summary = format!("Done. I saw {primary} and {project_token} in my environment.");
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
        assert_eq!(
            &p.password, project_token,
            "a push presented another credential"
        );
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
    let description = requests
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .filter_map(|r| r.body_json::<Value>().ok())
        .find_map(|body| body["description"].as_str().map(str::to_owned))
        .expect("a merge request was posted");
    assert!(description.contains(PROVENANCE_MARKER), "{description}");
    assert!(
        description.contains("| Credential | gitlab-project-token"),
        "{description}"
    );
    assert!(
        description.contains("[REDACTED:primary-token]"),
        "{description}"
    );
    assert!(
        description.contains("[REDACTED:project-token]"),
        "{description}"
    );
    assert_absent("the merge request's description", &description, &secrets);
    assert!(
        calls(
            &requests,
            "DELETE",
            &format!("{BENCH_API}/access_tokens/{TOKEN_ID}")
        ) == 1,
        "the project token was revoked"
    );
    for request in &requests {
        let body = String::from_utf8_lossy(&request.body);
        assert_absent(
            &format!("the body of {} {}", request.method, request.url),
            &body,
            &secrets,
        );
        assert_absent("a request URL", request.url.as_str(), &secrets);
        for (name, value) in &request.headers {
            let value = value.to_str().unwrap_or_default();
            if name.as_str() == "authorization" {
                assert_eq!(
                    value,
                    format!("Bearer {primary}"),
                    "REST used the primary token"
                );
            } else {
                assert_absent(&format!("header {name}"), value, &secrets);
            }
        }
    }

    drop(guard);
    assert_absent("the log files", &log_text(logs), &secrets);
}
