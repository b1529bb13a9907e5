//! `GitHubForge` (ADR-0018 rows 3 and 5, the invariant): the host's side of GitHub, and in its Gitea
//! [`Dialect`] of Gitea and Forgejo, whose REST API has GitHub's shape. It holds the
//! person's primary token privately inside its REST client — the token leaves only as the
//! `Authorization` header of REST calls, never into git, a container, a log or an error — checks a
//! target before anything is created, and opens or updates the pull request. The push itself uses the
//! dispatch's scoped credential only.
//!
//! Requests go through [`Rest`], which retries server errors and rate limits, honouring
//! `Retry-After`, and gives up rather than wait longer than [`RetryPolicy::max_delay`].

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use http::{Method, StatusCode};
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::octocrab_client::OctocrabClient;
use super::rest::{Auth, Reply, Rest, SEGMENT, is_name_part, ref_path};
use super::token::TokenSource;
use super::{
    Forge, ForgeError, ForgeSettings, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed,
    ResolvedHead, Result,
};
use crate::brief::Target;
use crate::check::{Check, Status};
use crate::credential::SecretValue;
use crate::forge::checkout_remotes::CheckoutRemotes;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizerHandle;

/// Which of the forges that speak GitHub's REST shape this one is. Gitea and Forgejo answer the same
/// paths with the same bodies, save the spelling of the token's header, a branch's commit (`id` for
/// `sha`) and a duplicate pull request (409 for 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// GitHub, or GitHub Enterprise.
    GitHub,
    /// Gitea, or Forgejo.
    Gitea,
}

impl Dialect {
    /// The forge's short name in errors, events and provenance.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::GitHub => "github",
            Dialect::Gitea => "gitea",
        }
    }

    /// How the primary token authenticates REST calls.
    fn auth(self) -> fn(SecretValue) -> Auth {
        match self {
            Dialect::GitHub => Auth::Bearer,
            Dialect::Gitea => Auth::Token,
        }
    }

    /// What a person does about a token the forge refuses or that may not do enough.
    fn token_fix(self) -> &'static str {
        match self {
            Dialect::GitHub => {
                "put a valid token where forge.github names it (token_env, default GITHUB_TOKEN, or token_command); a fine-grained token needs Contents and Pull requests: write on the repository"
            }
            Dialect::Gitea => {
                "put a valid token where forge.gitea names it (token_env, default GITEA_TOKEN, or token_command); it needs the write:repository and read:user scopes"
            }
        }
    }

    /// What a repository's `permissions.push` proves.
    fn may_push(self) -> &'static str {
        match self {
            Dialect::GitHub => "the token may read it and push to it",
            Dialect::Gitea => {
                "the account may read it and push to it (Gitea shows the account's role, not the token's scope: write:repository is proven by the first push)"
            }
        }
    }

    /// What a person does about a forge that cannot be reached.
    fn reach_fix(self) -> &'static str {
        match self {
            Dialect::GitHub => "check forge.github.api_url and this machine's network or proxy",
            Dialect::Gitea => "check forge.gitea.api_url and this machine's network or proxy",
        }
    }
}

/// Reads the primary token from its configured source.
pub fn resolve_token(source: &TokenSource) -> Result<SecretValue> {
    source.resolve().map_err(|err| ForgeError::Token {
        forge: Dialect::GitHub.name(),
        detail: err.to_string(),
    })
}

/// `owner/name`, each part percent-encoded, checked to be a repository name the forge can hold.
fn repo_path(forge: &'static str, repo: &str) -> Result<String> {
    match repo.split_once('/') {
        Some((owner, name)) if is_name_part(owner) && is_name_part(name) => Ok(format!(
            "/repos/{}/{}",
            utf8_percent_encode(owner, SEGMENT),
            utf8_percent_encode(name, SEGMENT)
        )),
        _ => Err(ForgeError::InvalidTarget {
            forge,
            detail: format!("repository {repo:?} is not owner/name"),
        }),
    }
}

#[derive(Deserialize)]
struct BranchBody {
    commit: CommitBody,
}

#[derive(Deserialize)]
struct CommitBody {
    #[serde(alias = "id")]
    sha: String,
}

#[derive(Deserialize)]
struct PullBody {
    number: u64,
    state: String,
    #[serde(default)]
    merged: bool,
    head: PullEnd,
    base: PullEnd,
}

#[derive(Deserialize)]
struct PullEnd {
    #[serde(rename = "ref")]
    branch: String,
    /// Only the head's is read; an empty one is refused as no SHA.
    #[serde(default)]
    sha: String,
    repo: Option<RepoBody>,
}

#[derive(Deserialize)]
struct RepoBody {
    full_name: String,
}

#[derive(Deserialize)]
struct PullRequestBody {
    number: u64,
    html_url: String,
}

#[derive(Deserialize)]
struct UserBody {
    login: String,
}

/// What the token may do to a repository, as GitHub answers about it.
#[derive(Deserialize)]
struct RepositoryAccess {
    permissions: Option<Permissions>,
}

#[derive(Deserialize)]
struct Permissions {
    #[serde(default)]
    push: bool,
}

/// The GitHub forge, or in [`Dialect::Gitea`] the Gitea and Forgejo one. Its primary token lives only
/// inside its REST client.
pub struct GitHubForge {
    dialect: Dialect,
    /// The forge's REST client: Gitea's requests go out on it, GitHub's through [`OctocrabClient`]
    /// over it; it reads the forge's errors for both.
    rest: Arc<Rest>,
    /// GitHub's requests, built by octocrab; `None` for Gitea.
    octocrab: Option<OctocrabClient>,
    git_url: String,
    /// The only repositories a brief may target: those the user's checkout has as remotes.
    remotes: CheckoutRemotes,
}

impl fmt::Debug for GitHubForge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubForge")
            .field("dialect", &self.dialect)
            .field("api_url", &self.rest.api_url())
            .field("git_url", &self.git_url)
            .field("token", &"<withheld>")
            .finish()
    }
}

impl GitHubForge {
    /// Reads the primary token from its source and builds the forge with it ([`GitHubForge::with_token`]).
    /// Must run inside the async runtime.
    pub fn new(
        settings: ForgeSettings,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitHubForge> {
        let token = resolve_token(&settings.token)?;
        GitHubForge::with_token(settings, token, sanitizer, remotes)
    }

    /// Teaches the primary token to the sanitizer (`primary-token`) so no sink can show it, and keeps
    /// it inside the REST client. For a caller that already read the token from `settings.token` and
    /// needs it once more (the fallback credential provider), so its source runs only once. Briefs
    /// may target only the repositories in `remotes` ([`CheckoutRemotes`]).
    pub fn with_token(
        settings: ForgeSettings,
        token: SecretValue,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitHubForge> {
        GitHubForge::with_dialect(Dialect::GitHub, settings, token, sanitizer, remotes)
    }

    /// [`GitHubForge::with_token`] for a forge of `dialect` (`Authorization: token <t>` for Gitea).
    pub fn with_dialect(
        dialect: Dialect,
        settings: ForgeSettings,
        token: SecretValue,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitHubForge> {
        let rest =
            Arc::new(settings.primary_client(dialect.name(), token, dialect.auth(), sanitizer)?);
        let octocrab = (dialect == Dialect::GitHub).then(|| OctocrabClient::new(Arc::clone(&rest)));
        Ok(GitHubForge {
            dialect,
            rest,
            octocrab,
            git_url: settings.git_url.trim_end_matches('/').to_owned(),
            remotes,
        })
    }

    /// Sends `method path` on the forge's API: through octocrab for GitHub, on the REST client for
    /// Gitea; either way with every bound of [`Rest::send`].
    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Reply> {
        match &self.octocrab {
            Some(octocrab) => octocrab.send(method, path, body).await,
            None => self.rest.send(method, path, body).await,
        }
    }

    /// The host of `git_url`, which the checkout's remotes are matched on.
    pub fn git_host(git_url: &str) -> Result<String> {
        super::rest::git_host(Dialect::GitHub.name(), git_url)
    }

    /// Fails unless `reply` is a success about pull request `number` (404: it does not exist).
    fn pull_request_found(&self, reply: &Reply, target: &Target, number: u64) -> Result<()> {
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::PullRequestNotFound {
                forge: self.name(),
                repo: target.repo.clone(),
                number,
            });
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(reply, &format!("pull request #{number}")));
        }
        Ok(())
    }

    /// The pull request's real head, refusing one stet cannot build on.
    /// Fails when the brief's own branch already exists: a push there would be refused (or land on
    /// someone's work) only after the whole agent run.
    async fn refuse_existing_branch(
        &self,
        target: &Target,
        repo: &str,
        branch: &str,
    ) -> Result<()> {
        let Some(path) = ref_path(branch) else {
            return Ok(());
        };
        let reply = self
            .send(Method::GET, &format!("{repo}/branches/{path}"), None)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(&reply, &format!("branch {branch:?}")));
        }
        Err(ForgeError::BranchExists {
            forge: self.name(),
            repo: target.repo.clone(),
            branch: branch.to_owned(),
        })
    }

    async fn resolve_head(&self, target: &Target, repo: &str, number: u64) -> Result<ResolvedHead> {
        let reply = self
            .send(Method::GET, &format!("{repo}/pulls/{number}"), None)
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let pull: PullBody = self.rest.parse(&reply, "pull request")?;
        if pull.state != "open" {
            return Err(ForgeError::PullRequestClosed {
                forge: self.name(),
                repo: target.repo.clone(),
                number,
                state: if pull.merged {
                    "merged".to_owned()
                } else {
                    pull.state
                },
            });
        }
        let refused = |detail: String| ForgeError::InvalidTarget {
            forge: self.name(),
            detail,
        };
        match &pull.head.repo {
            None => {
                return Err(refused(format!(
                    "pull request #{number} in {}: its head repository no longer exists; stet can only update a pull request whose branch is in {}",
                    target.repo, target.repo
                )));
            }
            Some(head) if !head.full_name.eq_ignore_ascii_case(&target.repo) => {
                return Err(refused(format!(
                    "pull request #{number} in {} comes from the fork {}; stet pushes only to {} itself and cannot update it",
                    target.repo, head.full_name, target.repo
                )));
            }
            Some(_) => {}
        }
        if pull.base.branch != target.base {
            return Err(refused(format!(
                "pull request #{number} in {} merges into {:?}, but the brief's base is {:?}",
                target.repo, pull.base.branch, target.base
            )));
        }
        let sha = CommitSha::parse(&pull.head.sha)
            .map_err(|err| refused(format!("pull request #{number}: head SHA: {err}")))?;
        Ok(ResolvedHead {
            number: pull.number,
            branch: pull.head.branch,
            sha,
        })
    }

    /// Whether the token may read `repo` and push to it (GitHub says so in `permissions`).
    async fn repository_check(&self, repo: &str, token_fix: &str) -> Check {
        let path = match repo_path(self.name(), repo) {
            Ok(path) => path,
            Err(error) => {
                return Check::problem(
                    "repository",
                    Status::Warn,
                    error.to_string(),
                    "a brief cannot target this remote",
                );
            }
        };
        match self.send(Method::GET, &path, None).await {
            Err(error) => Check::problem(
                "repository",
                Status::Fail,
                error.to_string(),
                "check the network",
            ),
            Ok(reply) if reply.status.is_success() => {
                match self.rest.parse::<RepositoryAccess>(&reply, "repository") {
                    Ok(RepositoryAccess {
                        permissions: Some(Permissions { push: true }),
                    }) => Check::ok(
                        "repository",
                        format!("{}: {repo}: {}", self.name(), self.dialect.may_push()),
                    ),
                    Ok(_) => Check::problem(
                        "repository",
                        Status::Fail,
                        format!(
                            "{}: {repo}: the token may read it but not push to it",
                            self.name()
                        ),
                        token_fix,
                    ),
                    Err(error) => Check::problem(
                        "repository",
                        Status::Fail,
                        error.to_string(),
                        self.dialect.reach_fix(),
                    ),
                }
            }
            Ok(reply) => Check::problem(
                "repository",
                Status::Fail,
                self.rest
                    .failure(&reply, &format!("repository {repo}"))
                    .to_string(),
                token_fix,
            ),
        }
    }

    fn pull_request(reply: &Reply, rest: &Rest, opened: bool) -> Result<PullRequest> {
        let body: PullRequestBody = rest.parse(reply, "pull request")?;
        Ok(PullRequest {
            number: body.number,
            url: body.html_url,
            opened,
        })
    }
}

#[async_trait]
impl Forge for GitHubForge {
    fn name(&self) -> &'static str {
        self.dialect.name()
    }

    async fn diagnose(&self) -> Vec<Check> {
        let api = self.rest.api_url();
        let forge = self.name();
        let token_fix = self.dialect.token_fix();
        let mut checks = Vec::new();
        match self.send(Method::GET, "/user", None).await {
            Err(error) => {
                checks.push(Check::problem(
                    "forge",
                    Status::Fail,
                    error.to_string(),
                    self.dialect.reach_fix(),
                ));
                return checks;
            }
            Ok(reply) if reply.status.is_success() => {
                let login = self.rest.parse::<UserBody>(&reply, "user").map_or_else(
                    |_| "an account".to_owned(),
                    |user| self.rest.shown(&user.login),
                );
                checks.push(Check::ok(
                    "forge",
                    format!("{forge}: {api} accepts the token of {login}"),
                ));
            }
            Ok(reply) => {
                checks.push(Check::problem(
                    "forge",
                    Status::Fail,
                    self.rest.failure(&reply, "the token's user").to_string(),
                    token_fix,
                ));
                return checks;
            }
        }
        checks.extend(self.remotes.diagnose(forge, &self.git_url));
        for repo in self.remotes.repositories() {
            checks.push(self.repository_check(repo, token_fix).await);
        }
        checks
    }

    async fn preflight(&self, target: &Target) -> Result<Preflight> {
        self.remotes.refuse_others(self.name(), &target.repo)?;
        let repo = repo_path(self.name(), &target.repo)?;
        let reply = self.send(Method::GET, &repo, None).await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::RepositoryNotFound {
                forge: self.name(),
                repo: target.repo.clone(),
            });
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("repository {}", target.repo)));
        }
        let base_not_found = || ForgeError::BaseNotFound {
            forge: self.name(),
            repo: target.repo.clone(),
            base: target.base.clone(),
        };
        let branch = ref_path(&target.base).ok_or_else(base_not_found)?;
        let reply = self
            .send(Method::GET, &format!("{repo}/branches/{branch}"), None)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(base_not_found());
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("branch {:?}", target.base)));
        }
        let branch: BranchBody = self.rest.parse(&reply, "branch")?;
        let base_sha =
            CommitSha::parse(&branch.commit.sha).map_err(|err| ForgeError::Protocol {
                forge: self.name(),
                detail: format!("branch {:?}: commit SHA: {err}", target.base),
            })?;
        if target.pr.is_none()
            && let Some(wanted) = &target.branch
        {
            self.refuse_existing_branch(target, &repo, wanted).await?;
        }
        let head = match target.pr {
            Some(number) => Some(self.resolve_head(target, &repo, number).await?),
            None => None,
        };
        Ok(Preflight {
            base_sha,
            head,
            push_url: format!("{}/{}.git", self.git_url, target.repo),
        })
    }

    /// Pushes with the dispatch's scoped credential through the shared checked push; the primary
    /// token never reaches git.
    async fn push_branch(&self, push: PushBranch<'_>) -> Result<Pushed> {
        super::push_checked(self.name(), push).await
    }

    async fn open_pull_request(
        &self,
        target: &Target,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        self.remotes.refuse_others(self.name(), &target.repo)?;
        let repo = repo_path(self.name(), &target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
            "head": draft.head,
            "base": draft.base,
        });
        let reply = self
            .send(Method::POST, &format!("{repo}/pulls"), Some(&body))
            .await?;
        // GitHub: 422 "A pull request already exists"; Gitea: 409 "pull request already exists"
        // (GitHub's own 409s are about something else, an empty repository say).
        let gitea_conflict = self.dialect == Dialect::Gitea && reply.status == StatusCode::CONFLICT;
        if reply.status == StatusCode::UNPROCESSABLE_ENTITY || gitea_conflict {
            let detail = self.rest.detail(&reply);
            if gitea_conflict
                || detail
                    .to_ascii_lowercase()
                    .contains("a pull request already exists")
            {
                return Err(ForgeError::PullRequestExists {
                    forge: self.name(),
                    repo: target.repo.clone(),
                    head: draft.head.clone(),
                    base: draft.base.clone(),
                    detail,
                });
            }
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("repository {}", target.repo)));
        }
        let opened = Self::pull_request(&reply, &self.rest, true)?;
        tracing::info!(repo = %target.repo, number = opened.number, head = %draft.head, base = %draft.base, "pull request opened");
        Ok(opened)
    }

    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        self.remotes.refuse_others(self.name(), &target.repo)?;
        let repo = repo_path(self.name(), &target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
        });
        let reply = self
            .send(
                Method::PATCH,
                &format!("{repo}/pulls/{number}"),
                Some(&body),
            )
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let updated = Self::pull_request(&reply, &self.rest, false)?;
        tracing::info!(repo = %target.repo, number, "pull request updated");
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_must_be_owner_slash_name() {
        assert_eq!(
            repo_path("github", "octo/app.rs").unwrap(),
            "/repos/octo/app.rs"
        );
        for bad in [
            "octo", "octo/", "/app", "a/b/c", "a/..", "o/r#x", "o/r?x", "o /r",
        ] {
            assert!(
                matches!(
                    repo_path("github", bad),
                    Err(ForgeError::InvalidTarget { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
