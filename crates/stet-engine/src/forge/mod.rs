//! The forge seam (ADR-0018 rows 3 and 5): where a dispatch's result goes, pushed and proposed by the
//! host, never by the container. `GitHubForge` holds the primary token privately; `LocalForge` needs no
//! account. Both push with the dispatch's scoped credential only.

mod app_jwt;
pub mod checkout_remotes;
pub mod choice;
pub mod fallback;
pub mod gitea_token;
pub mod github;
pub mod github_app;
pub mod gitlab;
pub mod gitlab_token;
pub mod local;
mod octocrab_client;
pub mod protected;
pub mod pull_request;
pub mod rest;
pub mod settings;
pub mod token;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use crate::brief::Target;
use crate::check::Check;
use crate::credential::ScopedCredential;
use crate::credential::{CredentialProvider, LocalCredentialProvider, SecretValue};
use crate::git::push::{PushError, PushRequest, push, remote_refs};
pub use choice::{CredentialConfig, ForgeConfig};
use settings::ForgeSettings;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizerHandle;
use token::TokenSource;

pub use pull_request::{EgressProvenance, Provenance, PullRequestDraft};

/// Everything a forge can answer wrongly. Messages name the repository, ref or pull request, and
/// never carry a token (they are built from status codes and forge messages that were sanitized).
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ForgeError {
    #[error(
        "{forge}: the brief targets {repo}, but this checkout's remotes on the forge are {remotes}: a brief may target only the repository it belongs to (to dispatch against {repo}, add it as a remote: `git remote add <name> <its URL>`)"
    )]
    NotThisCheckout {
        forge: &'static str,
        repo: String,
        remotes: String,
    },
    #[error("{forge}: repository {repo:?} was not found, or the token cannot see it")]
    RepositoryNotFound { forge: &'static str, repo: String },
    #[error("{forge}: base branch {base:?} does not exist in {repo}")]
    BaseNotFound {
        forge: &'static str,
        repo: String,
        base: String,
    },
    #[error("{forge}: pull request #{number} does not exist in {repo}")]
    PullRequestNotFound {
        forge: &'static str,
        repo: String,
        number: u64,
    },
    #[error(
        "{forge}: pull request #{number} in {repo} is {state}; only an open pull request is updated"
    )]
    PullRequestClosed {
        forge: &'static str,
        repo: String,
        number: u64,
        state: String,
    },
    #[error(
        "{forge}: base {base:?} of {repo} moved from {expected} to {found} since preflight; nothing was pushed"
    )]
    BaseMoved {
        forge: &'static str,
        repo: String,
        base: String,
        expected: CommitSha,
        found: CommitSha,
    },
    #[error(
        "{forge}: pull request #{number} moved to {found} since preflight resolved its head at {expected}; nothing was pushed"
    )]
    HeadMoved {
        forge: &'static str,
        number: u64,
        expected: CommitSha,
        found: String,
    },
    #[error(
        "{forge}: the token was refused (401 Unauthorized): it is missing, expired or revoked; {detail}"
    )]
    Unauthorized { forge: &'static str, detail: String },
    #[error(
        "{forge}: the token may not do this (403 Forbidden): {detail}; check the token's scopes, or the app's or the account's permissions"
    )]
    Forbidden { forge: &'static str, detail: String },
    #[error("{forge}: {what} was not found (404): {detail}")]
    NotFound {
        forge: &'static str,
        what: String,
        detail: String,
    },
    #[error("{forge}: the request was refused as invalid (422 Unprocessable Entity): {detail}")]
    Unprocessable { forge: &'static str, detail: String },
    #[error("{forge}: a pull request from {head} into {base} already exists in {repo}: {detail}")]
    PullRequestExists {
        forge: &'static str,
        repo: String,
        head: String,
        base: String,
        detail: String,
    },
    #[error(
        "{forge}: branch {branch:?} already exists in {repo}; a new pull request needs a new branch: change `branch` in the brief, or set `pr = N` to update the pull request of that branch"
    )]
    BranchExists {
        forge: &'static str,
        repo: String,
        branch: String,
    },
    #[error("{forge}: rate limited and still limited after {attempts} attempts: {detail}")]
    RateLimited {
        forge: &'static str,
        attempts: u32,
        detail: String,
    },
    #[error("{forge}: server error {status} after {attempts} attempts: {detail}")]
    Server {
        forge: &'static str,
        status: u16,
        attempts: u32,
        detail: String,
    },
    #[error("{forge}: could not reach the forge: {detail}")]
    Transport { forge: &'static str, detail: String },
    #[error("{forge}: unexpected answer: {detail}")]
    Protocol { forge: &'static str, detail: String },
    #[error("{forge}: the primary token could not be read: {detail}")]
    Token { forge: &'static str, detail: String },
    #[error("{forge}: {path}: {detail}")]
    Store {
        forge: &'static str,
        path: std::path::PathBuf,
        detail: String,
    },
    #[error("{forge}: the brief's target cannot be used: {detail}")]
    InvalidTarget { forge: &'static str, detail: String },
    #[error("{forge}: configuration: {detail}")]
    Settings { forge: &'static str, detail: String },
    #[error(transparent)]
    Push(Box<PushError>),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ForgeError>;

impl From<PushError> for ForgeError {
    fn from(error: PushError) -> Self {
        ForgeError::Push(Box::new(error))
    }
}

/// What preflight learned, with no side effects anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    /// The commit the base branch points at now; the workspace starts here.
    pub base_sha: CommitSha,
    /// For an existing pull request: its real head, which the result builds on.
    pub head: Option<ResolvedHead>,
    /// Where the host pushes (and fetches the base from): never with userinfo.
    pub push_url: String,
}

impl Preflight {
    /// The parent of the result's commit: the pull request's head when updating one, else the base.
    pub fn parent(&self) -> &CommitSha {
        self.head.as_ref().map_or(&self.base_sha, |head| &head.sha)
    }
}

/// An existing pull request's head, as the forge reports it (not as the brief claims it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedHead {
    /// The pull request's number.
    pub number: u64,
    /// The head branch's name (in the same repository).
    pub branch: String,
    /// The commit the head branch points at.
    pub sha: CommitSha,
}

/// One host-side push of a result.
#[derive(Debug)]
pub struct PushBranch<'a> {
    /// The user's repository: its object store holds `commit` (the trusted import put it there).
    pub repository: &'a Path,
    /// The repository and branch the brief names.
    pub target: &'a Target,
    /// What preflight learned before the dispatch ran.
    pub preflight: &'a Preflight,
    /// The result's commit, which the branch is made to point at.
    pub commit: &'a CommitSha,
    /// Already validated by `BranchValidator`.
    pub branch: &'a str,
    /// The dispatch's scoped credential: the only one a push ever presents.
    pub credential: &'a Arc<ScopedCredential>,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The branch pushed.
    pub branch: String,
    /// The commit it points at now.
    pub commit: CommitSha,
    /// What the branch pointed at before (`None`: it was created).
    pub previous: Option<CommitSha>,
}

/// A pull request the forge holds after opening or updating one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// The pull request's number.
    pub number: u64,
    /// Where a person reads it: a web URL, or the review record's path for the local forge.
    pub url: String,
    /// `true` when this call opened it, `false` when it updated an existing one.
    pub opened: bool,
}

/// A forge: checks a target, pushes a result, opens or updates its pull request.
#[async_trait]
pub trait Forge: Send + Sync + fmt::Debug {
    /// A short name for errors, events and provenance (`github`, `local`).
    fn name(&self) -> &'static str;

    /// Checks that the repository and base exist and, for an existing pull request, resolves its real
    /// head. No side effects.
    async fn preflight(&self, target: &Target) -> Result<Preflight>;

    /// Pushes `commit` to `refs/heads/<branch>` with the scoped credential; fails before pushing when
    /// the base moved since preflight.
    async fn push_branch(&self, push: PushBranch<'_>) -> Result<Pushed>;

    /// Opens a pull request from `draft.head` into `draft.base`.
    async fn open_pull_request(
        &self,
        target: &Target,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest>;

    /// Updates the title and body of the existing pull request `number`; never opens a new one.
    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest>;

    /// What `stet doctor` reports about this forge, changing nothing: whether it is reachable,
    /// whether the token is accepted, and whether it may read, push to and propose on each
    /// repository the checkout has as a remote there. Every problem names its fix.
    async fn diagnose(&self) -> Vec<Check>;
}

/// The configured forge and the provider that mints each dispatch's scoped credential.
#[derive(Debug, Clone)]
pub(crate) struct ForgeSetup {
    pub forge: Arc<dyn Forge>,
    pub credentials: Arc<dyn CredentialProvider>,
    /// The repositories on the forge a brief of this checkout may target.
    pub repositories: Vec<String>,
}

/// Builds the forge and credential provider `config` selects. `repository` is the repository stet runs
/// in (the local forge's default remote, and the checkout whose remotes a brief may target);
/// `sanitizer` learns the primary token. Must run inside the tokio runtime (the REST clients start
/// tasks there).
pub(crate) fn from_settings(
    forge_config: &ForgeConfig,
    credential_config: &CredentialConfig,
    repository: &Path,
    state_dir: &Path,
    sanitizer: &SanitizerHandle,
) -> Result<ForgeSetup> {
    // The primary token is read once: the providers that need it get the value the forge holds.
    let Made {
        forge,
        primary,
        repositories,
    } = match forge_config {
        ForgeConfig::Local { remote } => Made {
            forge: Arc::new(local::LocalForge::new(
                remote.clone().unwrap_or_else(|| repository.to_owned()),
                state_dir,
            )),
            primary: None,
            repositories: Vec::new(),
        },
        ForgeConfig::GitHub(settings) => {
            github_dialect(github::Dialect::GitHub, settings, repository, sanitizer)?
        }
        ForgeConfig::Gitea(settings) => {
            github_dialect(github::Dialect::Gitea, settings, repository, sanitizer)?
        }
        ForgeConfig::GitLab(settings) => {
            let token = primary_token("gitlab", &settings.token)?;
            let remotes = checkout_remotes::CheckoutRemotes::of_checkout_namespaced(
                repository,
                &gitlab::GitLabForge::git_host(&settings.git_url)?,
            );
            let repositories = remotes.repositories().to_vec();
            let forge = gitlab::GitLabForge::with_token(
                settings.clone(),
                token.clone(),
                sanitizer.clone(),
                remotes,
            )?;
            Made {
                forge: Arc::new(forge),
                primary: Some((token, settings)),
                repositories,
            }
        }
    };
    let refused = |error: crate::credential::CredentialError| ForgeError::Settings {
        forge: forge.name(),
        detail: error.to_string(),
    };
    let credentials: Arc<dyn CredentialProvider> = match (credential_config, primary) {
        (CredentialConfig::Local, None) => Arc::new(LocalCredentialProvider::default()),
        (CredentialConfig::GitHubApp(settings), Some(_)) => Arc::new(
            github_app::GitHubAppCredentialProvider::new(settings.clone()).map_err(refused)?,
        ),
        (CredentialConfig::GiteaToken(settings), Some((primary, _))) => Arc::new(
            gitea_token::GiteaTokenProvider::new(settings.clone(), primary, sanitizer.clone())
                .map_err(refused)?,
        ),
        (CredentialConfig::GitLabProjectToken, Some((primary, forge_settings))) => Arc::new(
            gitlab_token::GitLabProjectTokenProvider::new(
                &forge_settings.api_url,
                primary,
                forge_settings.retry,
                sanitizer.clone(),
            )
            .map_err(refused)?,
        ),
        (CredentialConfig::Fallback { reason }, Some((primary, _))) => Arc::new(
            fallback::FallbackCredentialProvider::new(primary, reason.clone()),
        ),
        (credentials, _) => {
            return Err(ForgeError::Settings {
                forge: forge.name(),
                detail: format!(
                    "the credential provider {credentials:?} does not serve this forge"
                ),
            });
        }
    };
    Ok(ForgeSetup {
        forge,
        credentials,
        repositories,
    })
}

/// A forge of the GitHub REST dialect (GitHub or Gitea) for `settings`, with the primary token it
/// holds and the repositories of the checkout's remotes there.
fn github_dialect<'a>(
    dialect: github::Dialect,
    settings: &'a ForgeSettings,
    repository: &Path,
    sanitizer: &SanitizerHandle,
) -> Result<Made<'a>> {
    let token = primary_token(dialect.name(), &settings.token)?;
    let remotes = checkout_remotes::CheckoutRemotes::of_checkout(
        repository,
        &github::GitHubForge::git_host(&settings.git_url)?,
    );
    let repositories = remotes.repositories().to_vec();
    let forge = github::GitHubForge::with_dialect(
        dialect,
        settings.clone(),
        token.clone(),
        sanitizer.clone(),
        remotes,
    )?;
    Ok(Made {
        forge: Arc::new(forge),
        primary: Some((token, settings)),
        repositories,
    })
}

/// A configured forge as [`from_settings`] makes it, before its credential provider.
struct Made<'a> {
    forge: Arc<dyn Forge>,
    /// The primary token the forge holds and its settings; `None` for the local forge.
    primary: Option<(SecretValue, &'a ForgeSettings)>,
    /// The repositories on the forge a brief of this checkout may target.
    repositories: Vec<String>,
}

/// Reads the primary token from its configured source; the error names the source, never a value.
fn primary_token(forge: &'static str, source: &TokenSource) -> Result<SecretValue> {
    source.resolve().map_err(|error| ForgeError::Token {
        forge,
        detail: error.to_string(),
    })
}

/// The push every forge shares: list the remote's refs with the scoped credential, fail before pushing
/// when the base (or an existing pull request's head) moved since preflight, then push
/// `<commit>:refs/heads/<branch>` without force. git2 blocks, so it runs on the blocking pool.
pub async fn push_checked(forge: &'static str, request: PushBranch<'_>) -> Result<Pushed> {
    let repository = request.repository.to_owned();
    let url = request.preflight.push_url.clone();
    let credential = Arc::clone(request.credential);
    let refs = run_blocking(forge, {
        let (repository, url, credential) =
            (repository.clone(), url.clone(), Arc::clone(&credential));
        move || remote_refs(&repository, &url, Some(&credential))
    })
    .await?;
    check_unmoved(forge, &request, &refs)?;
    let previous = refs.get(&format!("refs/heads/{}", request.branch)).cloned();
    let (commit, branch) = (request.commit.clone(), request.branch.to_owned());
    run_blocking(forge, {
        let (commit, branch) = (commit.clone(), branch.clone());
        move || {
            push(&PushRequest {
                repository: &repository,
                url: &url,
                commit: &commit,
                branch: &branch,
                credential: Some(&credential),
            })
        }
    })
    .await?;
    tracing::info!(forge, %branch, %commit, previous = ?previous, "pushed");
    Ok(Pushed {
        branch,
        commit,
        previous,
    })
}

/// Fails when the base branch (or an existing pull request's head) no longer points where preflight
/// saw it, given the remote's refs (full ref name → commit).
pub fn check_unmoved(
    forge: &'static str,
    request: &PushBranch<'_>,
    refs: &BTreeMap<String, CommitSha>,
) -> Result<()> {
    match refs.get(&format!("refs/heads/{}", request.target.base)) {
        None => {
            return Err(ForgeError::BaseNotFound {
                forge,
                repo: request.target.repo.clone(),
                base: request.target.base.clone(),
            });
        }
        Some(found) if found != &request.preflight.base_sha => {
            return Err(ForgeError::BaseMoved {
                forge,
                repo: request.target.repo.clone(),
                base: request.target.base.clone(),
                expected: request.preflight.base_sha.clone(),
                found: found.clone(),
            });
        }
        Some(_) => {}
    }
    if let Some(head) = &request.preflight.head {
        let found = refs.get(&format!("refs/heads/{}", head.branch));
        if found != Some(&head.sha) {
            return Err(ForgeError::HeadMoved {
                forge,
                number: head.number,
                expected: head.sha.clone(),
                found: found.map_or_else(
                    || "nothing (the branch is gone)".to_owned(),
                    ToString::to_string,
                ),
            });
        }
    }
    Ok(())
}

async fn run_blocking<T, F>(forge: &'static str, work: F) -> Result<T>
where
    F: FnOnce() -> std::result::Result<T, PushError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ForgeError::Protocol {
            forge,
            detail: format!("the git task ended abnormally: {error}"),
        })?
        .map_err(ForgeError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use stet_sanitize::sanitize::TokenSanitizer;

    fn config(text: &str) -> crate::config::Config {
        crate::config::Config::from_files(&[crate::config::ConfigFile::new(
            PathBuf::from("/home/u/.config/stet/config.toml"),
            text,
            crate::config::FileRole::User,
        )])
        .unwrap()
    }

    #[tokio::test]
    async fn configuration_selects_the_forge_and_the_credential_provider() {
        let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
        let here = Path::new("/src/app");
        let local = config("");
        let local = from_settings(
            &local.forge,
            &local.credentials,
            here,
            Path::new("/state"),
            &sanitizer,
        )
        .unwrap();
        assert_eq!(
            (local.forge.name(), local.credentials.name()),
            ("local", "local")
        );
        assert!(local.credentials.enters_sandbox());

        let token = format!("t{}", uuid::Uuid::new_v4().simple());
        let runs = tempfile::tempdir().unwrap();
        let log = runs.path().join("runs");
        let fallback = config(&format!(
            "[forge]\nkind = \"github\"\n[forge.github]\ntoken_command = [\"sh\", \"-c\", \"echo run >> {}; printf %s {token}\"]\n[credentials]\nprovider = \"fallback\"\n",
            log.display()
        ));
        let github = from_settings(
            &fallback.forge,
            &fallback.credentials,
            here,
            Path::new("/state"),
            &sanitizer,
        )
        .unwrap();
        assert_eq!(
            (github.forge.name(), github.credentials.name()),
            ("github", "fallback")
        );
        assert!(
            !github.credentials.enters_sandbox(),
            "the fallback wraps the primary token: never into a sandbox"
        );
        assert_eq!(
            sanitizer
                .current()
                .sanitize(&format!("x {token} y"))
                .as_str(),
            "x [REDACTED:primary-token] y",
            "the primary token was registered with the sanitizer"
        );
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "run\n",
            "the token command ran once for the forge and the fallback provider together"
        );
    }
}
