//! Red-team tests of the Gitea and GitLab forges, their credential providers, the sweep that revokes
//! what they minted, and `stet doctor`'s forge checks. A test that fails names a flaw; one that passes
//! pins a defence that held. Every secret is made at run time.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use stet_engine::check::Check;
use stet_engine::credential::{
    CredentialId, CredentialProvider, LocalCredentialProvider, Revocation, SecretValue,
};
use stet_engine::dispatch::journal::{Journal, Owner, Resource};
use stet_engine::dispatch::service::DispatchService;
use stet_engine::forge::Forge;
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::gitea_token::{GiteaTokenProvider, GiteaTokenSettings};
use stet_engine::forge::github::{Dialect, GitHubForge};
use stet_engine::forge::gitlab::GitLabForge;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::TokenSource;
use stet_engine::runtime::{
    ContainerExit, ContainerRuntime, ExecExit, ImageRef, OutputChunk, PullProgress, Removal,
    SandboxContainer, SandboxProcess, SandboxSpec,
};
use stet_protocol::event::DispatchId;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

fn secret() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_secs(1),
    }
}

fn sanitizer() -> SanitizerHandle {
    SanitizerHandle::new(TokenSanitizer::new().unwrap())
}

fn settings(api_url: &str, git_url: &str) -> ForgeSettings {
    ForgeSettings {
        api_url: api_url.to_owned(),
        git_url: git_url.to_owned(),
        token: TokenSource::Env("GITEA_TOKEN".to_owned()),
        retry: quick(),
    }
}

fn json_reply(status: u16, body: Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(body)
}

async fn mount(server: &MockServer, verb: &str, at: &str, reply: ResponseTemplate) {
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(reply)
        .mount(server)
        .await;
}

/// A password command that prints `password`, with no shell quoting problems (it is hex).
fn password_command(password: &str) -> TokenSource {
    TokenSource::Command(vec![
        "printf".to_owned(),
        "%s".to_owned(),
        password.to_owned(),
    ])
}

fn gitea_provider(
    api_url: &str,
    user: &str,
    password: &str,
    primary: &str,
    sanitizer: &SanitizerHandle,
) -> GiteaTokenProvider {
    GiteaTokenProvider::new(
        GiteaTokenSettings {
            api_url: api_url.to_owned(),
            user: Some(user.to_owned()),
            password: password_command(password),
            otp: None,
        },
        SecretValue::new(primary.to_owned()),
        sanitizer.clone(),
    )
    .unwrap()
}

/// The report as `stet doctor` prints it: what a person sees and pastes into a bug report.
fn printed(checks: &[Check]) -> String {
    checks
        .iter()
        .map(|check| format!("{}: {} / {:?}\n", check.name, check.detail, check.fix))
        .collect()
}

/// What a forge-controlled string must never do once it reaches the doctor's output: carry a
/// secret the sanitizer knows, or a raw escape that drives the terminal.
fn assert_inert(report: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !report.contains(secret),
            "a secret reached stet doctor's output:\n{report}"
        );
    }
    assert!(
        !report.contains('\u{1b}') && !report.contains('\u{7}'),
        "a raw terminal escape from the forge reached stet doctor's output: {report:?}"
    );
}

// 1. The sweep and Gitea's tokens, which never expire.

/// A container engine with nothing in it: the sweep's journal part is what is under test.
#[derive(Debug)]
struct EmptyEngine;

#[async_trait]
impl ContainerRuntime for EmptyEngine {
    async fn ensure_image(
        &self,
        _: &ImageRef,
        _: Option<mpsc::Sender<PullProgress>>,
    ) -> stet_engine::runtime::Result<()> {
        unreachable!("the sweep pulls nothing")
    }
    async fn create_sandbox(&self, _: &SandboxSpec) -> stet_engine::runtime::Result<String> {
        unreachable!("the sweep creates nothing")
    }
    async fn exec(
        &self,
        _: &str,
        _: &SandboxProcess,
        _: mpsc::Sender<OutputChunk>,
    ) -> stet_engine::runtime::Result<ExecExit> {
        unreachable!("the sweep runs nothing")
    }
    async fn kill(&self, _: &str) -> stet_engine::runtime::Result<()> {
        Ok(())
    }
    async fn remove(&self, _: &str, _: bool) -> stet_engine::runtime::Result<Removal> {
        Ok(Removal::AlreadyGone)
    }
    async fn wait(&self, _: &str) -> stet_engine::runtime::Result<ContainerExit> {
        unreachable!("the sweep waits for nothing")
    }
    async fn list_sandboxes(&self) -> stet_engine::runtime::Result<Vec<SandboxContainer>> {
        Ok(Vec::new())
    }
}

/// A journal in `state` holding one record of a dead process (this pid, another start time) that
/// lists `credential`, as a dispatch killed between its mint and its revoke leaves it.
fn crashed_dispatch_with(state: &Path, credential: &Resource) -> Arc<Journal> {
    let dir = state.join("journal");
    let journal = Journal::open(&dir).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = journal.begin(dispatch).unwrap();
    entry.intend(credential.clone()).unwrap();
    drop(entry);
    let me = Owner::current().unwrap();
    let live = dir.join(format!("{dispatch}.{}-{}.jsonl", me.pid, me.start_time));
    let dead = dir.join(format!("{dispatch}.{}-{}.jsonl", me.pid, me.start_time + 1));
    std::fs::rename(live, dead).unwrap();
    let journal = Arc::new(journal);
    assert_eq!(journal.orphans().unwrap().records.len(), 1);
    journal
}

fn still_journaled(journal: &Journal, credential: &Resource) -> bool {
    journal
        .records()
        .unwrap()
        .records
        .iter()
        .any(|record| record.resources.contains(credential))
}

/// A Gitea access token does not expire: the sweep of a process that cannot delete it (a launch in
/// a repository of another forge, `stet sweep` outside a repository, the local demo) must keep its
/// record for one that can, not close it as "left to expire".
#[tokio::test]
async fn a_sweep_without_the_gitea_provider_keeps_the_record_of_a_gitea_token_that_never_expires() {
    let state = tempfile::tempdir().unwrap();
    let credential = Resource::Credential {
        provider: "gitea-token".to_owned(),
        id: CredentialId::new("gitea-token-0a1b2c3d-42-alice".to_owned()),
    };
    let journal = crashed_dispatch_with(state.path(), &credential);
    // What `stet demo`'s, or a local-forge repository's, launch sweep has: the local provider only.
    let providers: Vec<Arc<dyn CredentialProvider>> =
        vec![Arc::new(LocalCredentialProvider::default())];
    let service = DispatchService::new(
        Arc::new(EmptyEngine),
        journal.clone(),
        state.path(),
        providers,
    );
    let report = service.sweep_orphans().await.unwrap();
    assert!(
        still_journaled(&journal, &credential),
        "the only record of a live, never-expiring write:repository token was closed: {report}"
    );
}

/// The same with the gitea-token provider of another Gitea (a repository configured for another
/// instance): it may not delete the token, and must not make stet forget it either.
#[tokio::test]
async fn a_sweep_with_another_gitea_instance_keeps_the_record_of_a_gitea_token() {
    let minted_at = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    let (user, password, primary) = ("alice", secret(), secret());
    let sanitizer = sanitizer();
    // Mint one at `minted_at` to get a genuine id of that instance.
    mount(
        &minted_at,
        "POST",
        "/users/alice/tokens",
        json_reply(201, json!({"id": 42, "name": "stet-x", "sha1": secret()})),
    )
    .await;
    let minter = gitea_provider(&minted_at.uri(), user, &password, &primary, &sanitizer);
    let minted = minter
        .mint("alice/app", "stet/x", Duration::from_secs(600))
        .await
        .unwrap();
    let credential = Resource::Credential {
        provider: "gitea-token".to_owned(),
        id: minted.id.clone(),
    };
    let state = tempfile::tempdir().unwrap();
    let journal = crashed_dispatch_with(state.path(), &credential);
    let other = gitea_provider(&elsewhere.uri(), user, &password, &primary, &sanitizer);
    let providers: Vec<Arc<dyn CredentialProvider>> = vec![Arc::new(other)];
    let service = DispatchService::new(
        Arc::new(EmptyEngine),
        journal.clone(),
        state.path(),
        providers,
    );
    let report = service.sweep_orphans().await.unwrap();
    assert!(
        elsewhere.received_requests().await.unwrap().is_empty(),
        "defence: nothing is deleted at another instance"
    );
    assert!(
        still_journaled(&journal, &credential),
        "the record of a never-expiring Gitea token was closed by a provider of another instance: {report}"
    );
}

// 2. Forge-controlled text in stet doctor's output.

/// A Gitea answering `GET /user` with a login that carries the primary token (a reflecting proxy, a
/// compromised instance) and a terminal escape: the doctor prints it as it came.
#[tokio::test]
async fn the_gitea_doctor_prints_the_forges_login_only_sanitized_and_escaped() {
    let server = MockServer::start().await;
    let primary = secret();
    let login = format!("{primary}\u{1b}]0;owned\u{7}\u{1b}[2J");
    mount(
        &server,
        "GET",
        "/user",
        json_reply(200, json!({"login": login})),
    )
    .await;
    let forge = GitHubForge::with_dialect(
        Dialect::Gitea,
        settings(&server.uri(), "https://gitea.example"),
        SecretValue::new(primary.clone()),
        sanitizer(),
        CheckoutRemotes::default(),
    )
    .unwrap();
    let report = printed(&forge.diagnose().await);
    assert_inert(&report, &[&primary]);
}

/// GitLab's `/user` username and `/personal_access_tokens/self` scopes reach the doctor raw too.
#[tokio::test]
async fn the_gitlab_doctor_prints_the_forges_username_and_scopes_only_sanitized_and_escaped() {
    let server = MockServer::start().await;
    let primary = secret();
    mount(
        &server,
        "GET",
        "/user",
        json_reply(200, json!({"username": format!("bob\u{1b}[31m{primary}")})),
    )
    .await;
    mount(
        &server,
        "GET",
        "/personal_access_tokens/self",
        json_reply(
            200,
            json!({"scopes": [format!("read_user\u{1b}]8;;https://evil.example\u{7}{primary}")]}),
        ),
    )
    .await;
    let forge = GitLabForge::with_token(
        settings(&server.uri(), "https://gitlab.example"),
        SecretValue::new(primary.clone()),
        sanitizer(),
        CheckoutRemotes::default(),
    )
    .unwrap();
    let report = printed(&forge.diagnose().await);
    assert_inert(&report, &[&primary]);
}

/// The gitea-token provider's doctor check lists the names of the account's `stet-` tokens as Gitea
/// gave them.
#[tokio::test]
async fn the_gitea_provider_doctor_prints_token_names_only_sanitized_and_escaped() {
    let server = MockServer::start().await;
    let (password, primary) = (secret(), secret());
    mount(
        &server,
        "GET",
        "/users/alice/tokens",
        json_reply(
            200,
            json!([{"id": 1, "name": format!("stet-\u{1b}[2J\u{1b}]0;x\u{7}{primary}{password}")}]),
        ),
    )
    .await;
    let provider = gitea_provider(&server.uri(), "alice", &password, &primary, &sanitizer());
    let report = printed(&provider.diagnose(&[]).await);
    assert_inert(&report, &[&primary, &password]);
}

// 3. Defences that held (these pass).

/// A redirect of the password-authenticated mint to another origin is not followed: the password
/// never reaches it.
#[tokio::test]
async fn defence_a_redirected_gitea_mint_never_sends_the_password_elsewhere() {
    let gitea = MockServer::start().await;
    let thief = MockServer::start().await;
    mount(
        &gitea,
        "POST",
        "/users/alice/tokens",
        ResponseTemplate::new(307).insert_header("location", format!("{}/steal", thief.uri())),
    )
    .await;
    let (password, primary) = (secret(), secret());
    let provider = gitea_provider(&gitea.uri(), "alice", &password, &primary, &sanitizer());
    let error = provider
        .mint("alice/app", "stet/x", Duration::from_secs(600))
        .await
        .unwrap_err()
        .to_string();
    assert!(thief.received_requests().await.unwrap().is_empty());
    assert!(
        !error.contains(&password) && !error.contains(&primary),
        "{error}"
    );
}

/// A minted Gitea token with header-breaking bytes is deleted at once and never handed out.
#[tokio::test]
async fn defence_a_gitea_token_with_a_line_break_is_deleted_and_refused() {
    let server = MockServer::start().await;
    let token = format!("{}\r\nX-Evil: 1", secret());
    mount(
        &server,
        "POST",
        "/users/alice/tokens",
        json_reply(201, json!({"id": 9, "name": "stet-x", "sha1": token})),
    )
    .await;
    mount(
        &server,
        "DELETE",
        "/users/alice/tokens/9",
        ResponseTemplate::new(204),
    )
    .await;
    let provider = gitea_provider(&server.uri(), "alice", &secret(), &secret(), &sanitizer());
    let error = provider
        .mint("alice/app", "stet/x", Duration::from_secs(600))
        .await
        .unwrap_err()
        .to_string();
    assert!(!error.contains("X-Evil"), "{error}");
    let deletes = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "DELETE")
        .count();
    assert_eq!(deletes, 1);
}

/// Crafted journal ids (another account, path tricks, another instance) make the Gitea provider
/// call nothing.
#[tokio::test]
async fn defence_crafted_gitea_ids_delete_nothing() {
    let server = MockServer::start().await;
    let provider = gitea_provider(&server.uri(), "alice", &secret(), &secret(), &sanitizer());
    for id in [
        "gitea-token-00000000-42-alice",
        "gitea-token-deadbeef-42-..%2Fadmin",
        "gitea-token-deadbeef-42-alice/../../admin",
    ] {
        let refused = provider.revoke(&CredentialId::new(id.to_owned())).await;
        assert!(refused.is_err(), "{id}: {refused:?}");
    }
    assert_eq!(
        provider
            .revoke(&CredentialId::new("fallback-42".to_owned()))
            .await
            .unwrap(),
        Revocation::NotRevocable
    );
    assert!(server.received_requests().await.unwrap().is_empty());
}

impl fmt::Display for EmptyEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EmptyEngine")
    }
}

// 4. A status misread.

/// GitHub answers 409 to `POST /pulls` for other conflicts than a duplicate ("Git Repository is
/// empty."); only Gitea's dialect means "already exists" by 409, yet the GitHub forge reports every
/// 409 as an existing pull request.
#[tokio::test]
async fn a_github_409_that_is_not_a_duplicate_is_not_reported_as_an_existing_pull_request() {
    use stet_engine::brief::{Brief, Target};
    use stet_engine::forge::{ForgeError, Provenance, PullRequestDraft};
    use stet_sanitize::branch::CommitSha;

    let server = MockServer::start().await;
    mount(
        &server,
        "POST",
        "/repos/octo/app/pulls",
        json_reply(409, json!({"message": "Git Repository is empty."})),
    )
    .await;
    let sanitizer = sanitizer();
    let forge = GitHubForge::with_token(
        settings(&server.uri(), "https://github.com"),
        SecretValue::new(secret()),
        sanitizer.clone(),
        CheckoutRemotes::from_urls(["https://github.com/octo/app".to_owned()], "github.com"),
    )
    .unwrap();
    let brief = Brief::parse(
        "b",
        Path::new("b.toml"),
        "title = \"T\"\nworkflow = \"implement\"\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n",
    )
    .unwrap();
    let provenance = Provenance {
        dispatch: DispatchId::new(),
        image: format!("sha256:{}", "cd".repeat(32)),
        harness: "script".into(),
        harness_version: None,
        model: None,
        input_tokens: None,
        output_tokens: None,
        cost_usd: None,
        peak_reserved_usd: None,
        network: "none".into(),
        egress: None,
        credential_kind: "fallback".into(),
        redactions: 0,
        duration: Duration::from_secs(1),
        base: CommitSha::parse(&"a".repeat(40)).unwrap(),
        commit: CommitSha::parse(&"c".repeat(40)).unwrap(),
    };
    let draft =
        PullRequestDraft::compose(&brief, "stet/x", None, &provenance, &sanitizer.current());
    let target = Target {
        repo: "octo/app".into(),
        base: "main".into(),
        branch: None,
        pr: None,
    };
    let error = forge.open_pull_request(&target, &draft).await.unwrap_err();
    assert!(
        !matches!(error, ForgeError::PullRequestExists { .. }),
        "an empty repository was reported as an existing pull request: {error}"
    );
}
