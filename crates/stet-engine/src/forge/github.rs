//! `GitHubForge` (ADR-0018 rows 3 and 5, the invariant): the host's side of GitHub. It holds the
//! person's primary token privately inside its REST client — the token leaves only as the
//! `Authorization` header of REST calls, never into git, a container, a log or an error — checks a
//! target before anything is created, and opens or updates the pull request. The push itself uses the
//! dispatch's scoped credential only.
//!
//! Requests go through [`Rest`], which retries server errors and rate limits, honouring
//! `Retry-After`, and gives up rather than wait longer than [`RetryPolicy::max_delay`].

use std::fmt;

use async_trait::async_trait;
use http::{Method, StatusCode};
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;
use serde_json::json;

use super::rest::{Auth, Reply, Rest, SEGMENT, ref_path, web_url};
use super::token::TokenSource;
use super::{
    Forge, ForgeError, ForgeSettings, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed, ResolvedHead,
    Result,
};
use crate::brief::Target;
use crate::check::{Check, Status};
use crate::dispatch::branch::CommitSha;
use crate::dispatch::credential::SecretValue;
use crate::dispatch::sanitize::{KnownValue, SanitizerHandle};
use crate::forge::checkout_remotes::CheckoutRemotes;

const FORGE: &str = "github";

/// Reads the primary token from its configured source.
pub fn resolve_token(source: &TokenSource) -> Result<SecretValue> {
    source.resolve().map_err(|err| ForgeError::Token {
        forge: FORGE,
        detail: err.to_string(),
    })
}

/// `owner/name`, each part percent-encoded, checked to be a repository name GitHub can hold.
fn repo_path(repo: &str) -> Result<String> {
    let valid_part = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if valid_part(owner) && valid_part(name) => Ok(format!(
            "/repos/{}/{}",
            utf8_percent_encode(owner, SEGMENT),
            utf8_percent_encode(name, SEGMENT)
        )),
        _ => Err(ForgeError::InvalidTarget {
            forge: FORGE,
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

/// The GitHub forge. Its primary token lives only inside its REST client.
pub struct GitHubForge {
    rest: Rest,
    git_url: String,
    /// The only repositories a brief may target: those the user's checkout has as remotes.
    remotes: CheckoutRemotes,
}

impl fmt::Debug for GitHubForge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubForge")
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
        web_url(FORGE, &settings.git_url, "git_url")?;
        let token_error = |detail: String| ForgeError::Token {
            forge: FORGE,
            detail,
        };
        let known = KnownValue::new("primary-token", token.expose_secret())
            .map_err(|err| token_error(format!("{}: {err}", settings.token.describe())))?;
        sanitizer
            .register(known)
            .map_err(|err| token_error(err.to_string()))?;
        let rest = Rest::new(
            FORGE,
            &settings.api_url,
            Auth::Bearer(token),
            settings.retry,
            sanitizer,
        )?;
        tracing::info!(api_url = %settings.api_url, source = %settings.token.describe(), "GitHub primary token read");
        Ok(GitHubForge {
            rest,
            git_url: settings.git_url.trim_end_matches('/').to_owned(),
            remotes,
        })
    }

    /// The host of `git_url`, which the checkout's remotes are matched on.
    pub fn git_host(git_url: &str) -> Result<String> {
        let uri = web_url(FORGE, git_url, "git_url")?;
        Ok(uri.host().unwrap_or_default().to_owned())
    }

    /// Fails unless `reply` is a success about pull request `number` (404: it does not exist).
    fn pull_request_found(&self, reply: &Reply, target: &Target, number: u64) -> Result<()> {
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::PullRequestNotFound {
                forge: FORGE,
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
            .rest
            .send(Method::GET, &format!("{repo}/branches/{path}"), None)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(&reply, &format!("branch {branch:?}")));
        }
        Err(ForgeError::BranchExists {
            forge: FORGE,
            repo: target.repo.clone(),
            branch: branch.to_owned(),
        })
    }

    async fn resolve_head(&self, target: &Target, repo: &str, number: u64) -> Result<ResolvedHead> {
        let reply = self
            .rest
            .send(Method::GET, &format!("{repo}/pulls/{number}"), None)
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let pull: PullBody = self.rest.parse(&reply, "pull request")?;
        if pull.state != "open" {
            return Err(ForgeError::PullRequestClosed {
                forge: FORGE,
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
            forge: FORGE,
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
        let path = match repo_path(repo) {
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
        match self.rest.send(Method::GET, &path, None).await {
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
                        format!("github: {repo}: the token may read it and push to it"),
                    ),
                    Ok(_) => Check::problem(
                        "repository",
                        Status::Fail,
                        format!("github: {repo}: the token may read it but not push to it"),
                        token_fix,
                    ),
                    Err(error) => Check::problem(
                        "repository",
                        Status::Fail,
                        error.to_string(),
                        "check forge.github.api_url: it does not answer as GitHub does",
                    ),
                }
            }
            Ok(reply) => Check::problem(
                "repository",
                Status::Fail,
                self.rest.failure(&reply, &format!("repository {repo}")).to_string(),
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
        FORGE
    }

    async fn diagnose(&self) -> Vec<Check> {
        let api = self.rest.api_url();
        let token_fix = "put a valid token where forge.github names it (token_env, default GITHUB_TOKEN, or token_command); a fine-grained token needs Contents and Pull requests: write on the repository";
        let mut checks = Vec::new();
        match self.rest.send(Method::GET, "/user", None).await {
            Err(error) => {
                checks.push(Check::problem(
                    "forge",
                    Status::Fail,
                    error.to_string(),
                    "check forge.github.api_url and this machine's network or proxy",
                ));
                return checks;
            }
            Ok(reply) if reply.status.is_success() => {
                let login = self
                    .rest
                    .parse::<UserBody>(&reply, "user")
                    .map_or_else(|_| "an account".to_owned(), |user| user.login);
                checks.push(Check::ok(
                    "forge",
                    format!("github: {api} accepts the token of {login}"),
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
        checks.extend(self.remotes.diagnose(FORGE, &self.git_url));
        for repo in self.remotes.repositories() {
            checks.push(self.repository_check(repo, token_fix).await);
        }
        checks
    }

    async fn preflight(&self, target: &Target) -> Result<Preflight> {
        if !self.remotes.allows(&target.repo) {
            return Err(ForgeError::NotThisCheckout {
                forge: FORGE,
                repo: target.repo.clone(),
                remotes: match self.remotes.repositories() {
                    [] => "none".to_owned(),
                    own => own.join(", "),
                },
            });
        }
        let repo = repo_path(&target.repo)?;
        let reply = self.rest.send(Method::GET, &repo, None).await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::RepositoryNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
            });
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("repository {}", target.repo)));
        }
        let base_not_found = || ForgeError::BaseNotFound {
            forge: FORGE,
            repo: target.repo.clone(),
            base: target.base.clone(),
        };
        let branch = ref_path(&target.base).ok_or_else(base_not_found)?;
        let reply = self
            .rest
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
                forge: FORGE,
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
        super::push_checked(FORGE, push).await
    }

    async fn open_pull_request(
        &self,
        target: &Target,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let repo = repo_path(&target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
            "head": draft.head,
            "base": draft.base,
        });
        let reply = self
            .rest
            .send(Method::POST, &format!("{repo}/pulls"), Some(&body))
            .await?;
        if reply.status == StatusCode::UNPROCESSABLE_ENTITY {
            let detail = self.rest.detail(&reply);
            if detail
                .to_ascii_lowercase()
                .contains("a pull request already exists")
            {
                return Err(ForgeError::PullRequestExists {
                    forge: FORGE,
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
        tracing::info!(repo = %target.repo, number = opened.number, head = %draft.head, base = %draft.base, "GitHub pull request opened");
        Ok(opened)
    }

    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let repo = repo_path(&target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
        });
        let reply = self
            .rest
            .send(
                Method::PATCH,
                &format!("{repo}/pulls/{number}"),
                Some(&body),
            )
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let updated = Self::pull_request(&reply, &self.rest, false)?;
        tracing::info!(repo = %target.repo, number, "GitHub pull request updated");
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_must_be_owner_slash_name() {
        assert_eq!(repo_path("octo/app.rs").unwrap(), "/repos/octo/app.rs");
        for bad in [
            "octo", "octo/", "/app", "a/b/c", "a/..", "o/r#x", "o/r?x", "o /r",
        ] {
            assert!(
                matches!(repo_path(bad), Err(ForgeError::InvalidTarget { .. })),
                "{bad:?}"
            );
        }
    }
}
