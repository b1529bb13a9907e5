//! The invariant end to end (ADR-0018 rows 2 and 3): a full collect → push → pull request through
//! `GitHubForge`, with a primary token and a scoped credential of known random values, and every sink
//! searched for both — the git server's record of presented credentials, every REST request body, the
//! commit message, the pull request body and the log files. And the same forge refusing to push when
//! the base moved on the forge after preflight.
//!
//! Logging is process-wide, so the flow runs in a child: this test binary run again on this one test,
//! told by an environment variable to be the child.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use stet_engine::brief::Brief;
use stet_engine::credential::{LocalCredentialProvider, ScopedCredential};
use stet_engine::forge::checkout_remotes::CheckoutRemotes;
use stet_engine::forge::github::GitHubForge;
use stet_engine::forge::pull_request::PROVENANCE_MARKER;
use stet_engine::forge::rest::RetryPolicy;
use stet_engine::forge::settings::ForgeSettings;
use stet_engine::forge::token::TokenSource;
use stet_engine::forge::{Forge, PullRequestDraft, PushBranch};
use stet_engine::git::import::{Identity, ImportLimits, ImportRequest, Imported, import};
use stet_engine::git::workspace::materialize;
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use super::git_http::GitHttpServer;
use super::support::{self, git};

const THIS_TEST: &str =
    "suite::canary::neither_token_reaches_a_sink_of_a_collect_push_and_pull_request";
/// The child's log directory; its presence makes the test the child.
const CHILD_LOGS_ENV: &str = "STET_TEST_CANARY_LOGS";
/// The primary token, read by `GitHubForge` the way a user's `token_env` would be.
const PRIMARY_ENV: &str = "STET_TEST_CANARY_PRIMARY";
/// What the child prints once every check passed.
const CHECKED: &str = "CANARY-FLOW-CHECKED";

#[test]
fn neither_token_reaches_a_sink_of_a_collect_push_and_pull_request() {
    if let Some(logs) = std::env::var_os(CHILD_LOGS_ENV) {
        let primary = std::env::var(PRIMARY_ENV).unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(child(Path::new(&logs), &primary));
        println!("{CHECKED}");
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let primary = format!("primary{}", uuid::Uuid::new_v4().simple());
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", THIS_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_LOGS_ENV, logs.path())
        .env(PRIMARY_ENV, &primary)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(CHECKED),
        "the child failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains(&primary) && !stderr.contains(&primary),
        "the child's own output carries the primary token"
    );
    let written = log_text(logs.path());
    assert!(
        written.contains("pushed"),
        "the flow wrote no logs:\n{written}"
    );
    assert!(
        !written.contains(&primary),
        "the primary token reached the logs"
    );
}

/// Everything the logger wrote, concatenated.
pub(super) fn log_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    text
}

/// The spellings of a value a careless sink could carry.
pub(super) fn spellings(value: &str) -> Vec<String> {
    vec![
        value.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(value),
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{value}")),
    ]
}

pub(super) fn assert_absent(sink: &str, text: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.as_str()),
            "a secret reached {sink}:\n{text}"
        );
    }
}

/// GitHub through wiremock and a real smart-HTTP git server that accepts only live scoped credentials
/// of the local provider, and the user's repository whose `main` is also the forge's.
struct Bench {
    dir: tempfile::TempDir,
    api: MockServer,
    server: GitHttpServer,
    remote: PathBuf,
    repo: PathBuf,
    base: String,
    provider: Arc<LocalCredentialProvider>,
    forge: GitHubForge,
}

impl Bench {
    async fn start(sanitizer: &SanitizerHandle, token: TokenSource) -> Bench {
        let dir = tempfile::tempdir().unwrap();

        // The forge: REST through wiremock, git through a real smart-HTTP server that accepts only live
        // scoped credentials of the local provider.
        let api = MockServer::start().await;
        let provider = Arc::new(LocalCredentialProvider::default());
        let authority = Arc::clone(&provider);
        let server = GitHttpServer::start(
            &dir.path().join("forge"),
            Arc::new(move |repo: &str, _user: &str, password: &str| {
                authority.authorizes(repo, password)
            }),
        );
        let remote = server.create_bare("octo/app");
        let git_url = server.url("octo/app");
        let git_url = git_url.trim_end_matches("/octo/app.git").to_owned();

        // The user's repository, whose main is also the forge's.
        let repo = dir.path().join("app");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "app\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        git(&repo, &["push", "-q", remote.to_str().unwrap(), "main"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);

        Mock::given(method("GET"))
            .and(path("/repos/octo/app"))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(json!({"full_name": "octo/app"})),
            )
            .mount(&api)
            .await;
        Mock::given(method("GET"))
            .and(path("/repos/octo/app/branches/main"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"name": "main", "commit": {"sha": base}})),
            )
            .mount(&api)
            .await;
        Mock::given(method("POST"))
            .and(path("/repos/octo/app/pulls"))
            .respond_with(ResponseTemplate::new(201).set_body_json(
                json!({"number": 3, "html_url": "https://forge.invalid/octo/app/pull/3"}),
            ))
            .mount(&api)
            .await;

        let forge = GitHubForge::new(
            ForgeSettings {
                api_url: api.uri(),
                git_url: git_url.clone(),
                token,
                retry: RetryPolicy::default(),
            },
            sanitizer.clone(),
            CheckoutRemotes::from_urls(
                [format!("{git_url}/octo/app.git")],
                &GitHubForge::git_host(&git_url).unwrap(),
            ),
        )
        .unwrap();
        Bench {
            dir,
            api,
            server,
            remote,
            repo,
            base,
            provider,
            forge,
        }
    }

    async fn scoped(&self) -> Arc<ScopedCredential> {
        Arc::new(
            ScopedCredential::mint(
                self.provider.clone(),
                "octo/app",
                "stet/canary",
                Duration::from_secs(300),
            )
            .await
            .unwrap(),
        )
    }
}

async fn child(logs: &Path, primary: &str) {
    let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let guard = stet_engine::logging::install(logs, sanitizer.clone()).unwrap();
    let bench = Bench::start(&sanitizer, TokenSource::Env(PRIMARY_ENV.to_owned())).await;
    let Bench {
        dir,
        api,
        server,
        remote,
        repo,
        base,
        forge,
        ..
    } = &bench;
    let (dir, base, forge) = (dir.path(), base.as_str(), forge);
    let scoped = bench.scoped().await;
    scoped.mask_in(&sanitizer).unwrap();
    let scoped_value = scoped.host_push_secret().expose_secret().to_owned();
    let mut secrets = spellings(primary);
    secrets.extend(spellings(&scoped_value));

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
    let preflight = forge.preflight(&target).await.unwrap();
    assert_eq!(preflight.base_sha.as_str(), base);

    let workspace = dir.join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    materialize(
        repo,
        &preflight.base_sha,
        &workspace,
        SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
    )
    .unwrap();
    std::fs::write(workspace.join("feature.rs"), "pub fn feature() {}\n").unwrap();
    let summary = format!("Done. I saw {primary} and {scoped_value} in my environment.");
    tracing::warn!(%summary, "the agent's summary");

    let message = sanitizer
        .current()
        .sanitize(&format!("{}\n\n{}", brief.title, brief.items[0].text));
    let imported = import(&ImportRequest {
        repository: repo,
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
    let commit_message = git(repo, &["log", "-1", "--format=%B", commit.as_str()]);
    assert!(
        commit_message.contains("[REDACTED:primary-token]"),
        "{commit_message}"
    );
    assert_absent("the commit message", &commit_message, &secrets);

    let pushed = forge
        .push_branch(PushBranch {
            repository: repo,
            target: &target,
            preflight: &preflight,
            commit: &commit,
            branch: "stet/canary",
            credential: &scoped,
        })
        .await
        .unwrap();
    assert_eq!(pushed.previous, None);
    assert_eq!(
        git(remote, &["rev-parse", "refs/heads/stet/canary"]),
        commit.as_str()
    );
    let presented = server.presented();
    assert!(
        presented.iter().any(|p| p.service == "git-receive-pack"),
        "{presented:?}"
    );
    for p in &presented {
        assert_eq!(
            p.password, scoped_value,
            "a push presented another credential"
        );
        assert_ne!(
            p.password, primary,
            "the primary token was presented to git"
        );
    }

    let draft = PullRequestDraft::compose(
        &brief,
        &pushed.branch,
        Some(&summary),
        &support::provenance(scoped.kind(), base, commit.as_str()),
        &sanitizer.current(),
    );
    let opened = forge.open_pull_request(&target, &draft).await.unwrap();
    assert_eq!((opened.number, opened.opened), (3, true));

    let requests = api.received_requests().await.unwrap();
    let bodies: Vec<String> = requests
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    let pr_body = bodies
        .iter()
        .find(|b| b.contains(PROVENANCE_MARKER))
        .expect("the pull request body carries the provenance block");
    assert!(pr_body.contains("[REDACTED:primary-token]"), "{pr_body}");
    assert!(
        pr_body.contains("[REDACTED:scoped-credential]"),
        "{pr_body}"
    );
    for (request, body) in requests.iter().zip(&bodies) {
        assert_absent(&format!("the body of {}", request.url), body, &secrets);
        for (name, value) in &request.headers {
            let value = value.to_str().unwrap_or_default();
            if name.as_str() != "authorization" {
                assert_absent(&format!("header {name}"), value, &secrets);
            } else {
                assert_eq!(
                    value,
                    format!("Bearer {primary}"),
                    "REST used the primary token"
                );
            }
        }
    }

    scoped.revoke().await;
    drop(guard);
    assert_absent("the log files", &log_text(logs), &secrets);
}

#[tokio::test]
async fn a_base_that_moved_on_the_forge_since_preflight_stops_the_push() {
    let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let token = format!("t{}", uuid::Uuid::new_v4().simple());
    let bench = Bench::start(
        &sanitizer,
        TokenSource::Command(vec!["printf".into(), "%s".into(), token]),
    )
    .await;
    let target = stet_engine::brief::Target {
        repo: "octo/app".into(),
        base: "main".into(),
        branch: None,
        pr: None,
    };
    let preflight = bench.forge.preflight(&target).await.unwrap();
    let result = commit_on(&bench.repo, preflight.base_sha.as_str(), "ours");
    let moved = commit_on(&bench.repo, preflight.base_sha.as_str(), "someone else's");
    git(
        &bench.repo,
        &[
            "push",
            "-q",
            bench.remote.to_str().unwrap(),
            &format!("{moved}:refs/heads/main"),
        ],
    );
    let error = bench
        .forge
        .push_branch(PushBranch {
            repository: &bench.repo,
            target: &target,
            preflight: &preflight,
            commit: &CommitSha::parse(&result).unwrap(),
            branch: "stet/late",
            credential: &bench.scoped().await,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&error, stet_engine::forge::ForgeError::BaseMoved { found, .. } if found.as_str() == moved),
        "{error}"
    );
    let listed = git(&bench.remote, &["branch", "--list", "stet/late"]);
    assert_eq!(listed, "", "the branch was pushed although the base moved");
    assert!(
        bench
            .server
            .presented()
            .iter()
            .all(|p| p.service != "git-receive-pack"),
        "a push began"
    );
}

/// A commit on top of `parent` with one file, on no branch.
pub(super) fn commit_on(repo: &Path, parent: &str, text: &str) -> String {
    git(repo, &["checkout", "-q", "--detach", parent]);
    std::fs::write(repo.join("change.txt"), text).unwrap();
    git(repo, &["add", "change.txt"]);
    git(repo, &["commit", "-q", "-m", text]);
    let commit = git(repo, &["rev-parse", "HEAD"]);
    git(repo, &["checkout", "-q", "main"]);
    commit
}
