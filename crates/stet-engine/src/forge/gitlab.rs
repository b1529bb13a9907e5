//! `GitLabForge` (ADR-0018 rows 3 and 5, the invariant): the host's side of GitLab (gitlab.com or
//! self-managed). It holds the person's primary token privately inside its REST client — the token
//! leaves only as the `Authorization` header of REST calls, never into git, a container, a log or an
//! error — checks a target before anything is created, and opens or updates the merge request. The
//! push itself uses the dispatch's scoped credential only.
//!
//! GitLab nests groups (`group/sub/project`, up to [`MAX_NAMESPACE_DEPTH`] parts) and names a project
//! in its API by its whole path as one percent-encoded segment (`group%2Fsub%2Fproject`); a branch in
//! a path is one segment too (`feature%2Fx`). Merge requests are numbered per project by their `iid`,
//! which is what a brief's `pr` names.

use std::fmt;

use async_trait::async_trait;
use http::{Method, StatusCode};
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;
use serde_json::json;

use super::checkout_remotes::{CheckoutRemotes, MAX_NAMESPACE_DEPTH};
use super::rest::{Auth, Reply, Rest, SEGMENT, is_name_part};
use super::{
    Forge, ForgeError, ForgeSettings, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed,
    ResolvedHead, Result,
};
use crate::brief::Target;
use crate::check::{Check, Status};
use crate::credential::SecretValue;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizerHandle;

const FORGE: &str = "gitlab";

/// GitLab's Developer role: the lowest that may push to an unprotected branch.
pub(crate) const DEVELOPER: u32 = 30;
/// GitLab's Maintainer role: the lowest that may mint project access tokens.
const MAINTAINER: u32 = 40;

/// The fix for a token GitLab does not accept, or one without the `api` scope.
const TOKEN_FIX: &str = "put a valid token where forge.gitlab names it (token_env, default GITLAB_TOKEN, or token_command); it needs the api scope";

/// The project's `:id` in GitLab's API: its whole path (`group/sub/project`) as one percent-encoded
/// segment, each part checked to be a name GitLab can hold.
pub(crate) fn project_segment(project: &str) -> Result<String> {
    let parts: Vec<&str> = project.split('/').collect();
    if (2..=MAX_NAMESPACE_DEPTH).contains(&parts.len()) && parts.iter().all(|p| is_name_part(p)) {
        return Ok(utf8_percent_encode(project, SEGMENT).to_string());
    }
    Err(ForgeError::InvalidTarget {
        forge: FORGE,
        detail: format!(
            "project {project:?} is not group/name (with at most {MAX_NAMESPACE_DEPTH} parts of letters, digits, '-', '_' and '.')"
        ),
    })
}

/// `/projects/<:id>`.
fn project_path(project: &str) -> Result<String> {
    Ok(format!("/projects/{}", project_segment(project)?))
}

/// A branch name as one path segment (`feature/x` → `feature%2Fx`); `None` for a name no branch can
/// have (an empty, `.` or `..` part).
fn branch_segment(name: &str) -> Option<String> {
    name.split('/')
        .all(|part| !part.is_empty() && part != "." && part != "..")
        .then(|| utf8_percent_encode(name, SEGMENT).to_string())
}

#[derive(Deserialize)]
struct ProjectBody {
    id: u64,
    permissions: Option<PermissionsBody>,
}

/// The token's roles on a project: its own membership and that of the project's group.
#[derive(Deserialize)]
struct PermissionsBody {
    project_access: Option<AccessBody>,
    group_access: Option<AccessBody>,
}

#[derive(Deserialize)]
struct AccessBody {
    access_level: u32,
}

impl ProjectBody {
    /// The higher of the token's two roles on the project (0: none).
    fn access_level(&self) -> u32 {
        let level = |access: &Option<AccessBody>| access.as_ref().map_or(0, |a| a.access_level);
        self.permissions
            .as_ref()
            .map_or(0, |p| level(&p.project_access).max(level(&p.group_access)))
    }
}

#[derive(Deserialize)]
struct BranchBody {
    commit: CommitBody,
}

#[derive(Deserialize)]
struct CommitBody {
    id: String,
}

#[derive(Deserialize)]
struct MergeRequestBody {
    iid: u64,
    state: String,
    source_branch: String,
    target_branch: String,
    sha: Option<String>,
    source_project_id: u64,
    target_project_id: u64,
}

#[derive(Deserialize)]
struct OpenedBody {
    iid: u64,
    web_url: String,
}

#[derive(Deserialize)]
struct UserBody {
    username: String,
}

#[derive(Deserialize)]
struct TokenScopes {
    scopes: Vec<String>,
}

/// The GitLab forge. Its primary token lives only inside its REST client.
pub struct GitLabForge {
    rest: Rest,
    git_url: String,
    /// The only projects a brief may target: those the user's checkout has as remotes.
    remotes: CheckoutRemotes,
}

impl fmt::Debug for GitLabForge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitLabForge")
            .field("api_url", &self.rest.api_url())
            .field("git_url", &self.git_url)
            .field("token", &"<withheld>")
            .finish()
    }
}

impl GitLabForge {
    /// Teaches the primary token to the sanitizer (`primary-token`) so no sink can show it, and keeps
    /// it inside the REST client (sent as `Authorization: Bearer`, which GitLab accepts for personal
    /// and project access tokens). Briefs may target only the projects in `remotes` (built with
    /// [`CheckoutRemotes::of_checkout_namespaced`], since GitLab nests groups).
    pub fn with_token(
        settings: ForgeSettings,
        token: SecretValue,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitLabForge> {
        let rest = settings.primary_client(FORGE, token, Auth::Bearer, sanitizer)?;
        Ok(GitLabForge {
            rest,
            git_url: settings.git_url.trim_end_matches('/').to_owned(),
            remotes,
        })
    }

    /// The host of `git_url`, which the checkout's remotes are matched on.
    pub fn git_host(git_url: &str) -> Result<String> {
        super::rest::git_host(FORGE, git_url)
    }

    /// `GET /projects/:id`: the project as GitLab answers about it (404: not found, or not visible).
    async fn project(&self, target: &Target, project: &str) -> Result<ProjectBody> {
        let reply = self.rest.send(Method::GET, project, None).await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::RepositoryNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
            });
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("project {}", target.repo)));
        }
        self.rest.parse(&reply, "project")
    }

    /// The commit the base branch points at.
    async fn base_sha(&self, target: &Target, project: &str) -> Result<CommitSha> {
        let base_not_found = || ForgeError::BaseNotFound {
            forge: FORGE,
            repo: target.repo.clone(),
            base: target.base.clone(),
        };
        let branch = branch_segment(&target.base).ok_or_else(base_not_found)?;
        let reply = self
            .rest
            .send(
                Method::GET,
                &format!("{project}/repository/branches/{branch}"),
                None,
            )
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
        CommitSha::parse(&branch.commit.id).map_err(|err| ForgeError::Protocol {
            forge: FORGE,
            detail: format!(
                "branch {:?} of {}: commit SHA: {err}",
                target.base, target.repo
            ),
        })
    }

    /// Fails when the brief's own branch already exists: a push there would be refused (or land on
    /// someone's work) only after the whole agent run.
    async fn refuse_existing_branch(
        &self,
        target: &Target,
        project: &str,
        branch: &str,
    ) -> Result<()> {
        let Some(segment) = branch_segment(branch) else {
            return Ok(());
        };
        let reply = self
            .rest
            .send(
                Method::GET,
                &format!("{project}/repository/branches/{segment}"),
                None,
            )
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

    /// Fails unless `reply` is a success about merge request `iid` (404: it does not exist).
    fn merge_request_found(&self, reply: &Reply, target: &Target, iid: u64) -> Result<()> {
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::PullRequestNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
                number: iid,
            });
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(reply, &format!("merge request !{iid}")));
        }
        Ok(())
    }

    /// The merge request's real head, refusing one stet cannot build on ([`head_of`]).
    async fn resolve_head(
        &self,
        target: &Target,
        project: &str,
        project_id: u64,
        iid: u64,
    ) -> Result<ResolvedHead> {
        let reply = self
            .rest
            .send(
                Method::GET,
                &format!("{project}/merge_requests/{iid}"),
                None,
            )
            .await?;
        self.merge_request_found(&reply, target, iid)?;
        head_of(
            target,
            project_id,
            self.rest.parse(&reply, "merge request")?,
        )
    }

    /// The merge request GitLab answered with.
    fn merge_request(&self, reply: &Reply, opened: bool) -> Result<PullRequest> {
        let body: OpenedBody = self.rest.parse(reply, "merge request")?;
        Ok(PullRequest {
            number: body.iid,
            url: body.web_url,
            opened,
        })
    }

    /// `GET /user`: whether GitLab answers and accepts the token, and `true` when it does (the other
    /// checks need that).
    async fn user_check(&self) -> (Check, bool) {
        let api = self.rest.api_url();
        match self.rest.send(Method::GET, "/user", None).await {
            Err(error) => (
                Check::problem(
                    "forge",
                    Status::Fail,
                    error.to_string(),
                    "check forge.gitlab.api_url (https://<host>/api/v4) and this machine's network or proxy",
                ),
                false,
            ),
            Ok(reply) if reply.status.is_success() => {
                let user = self.rest.parse::<UserBody>(&reply, "user").map_or_else(
                    |_| "an account".to_owned(),
                    |user| self.rest.shown(&user.username),
                );
                (
                    Check::ok(
                        "forge",
                        format!("gitlab: {api} accepts the token of {user}"),
                    ),
                    true,
                )
            }
            Ok(reply) => (
                Check::problem(
                    "forge",
                    Status::Fail,
                    self.rest.failure(&reply, "the token's user").to_string(),
                    TOKEN_FIX,
                ),
                false,
            ),
        }
    }

    /// `GET /personal_access_tokens/self`: whether the token has the `api` scope (merge requests and
    /// project access tokens need it). An older GitLab (404) cannot say.
    async fn scope_check(&self) -> Check {
        let fix_scope = "create a token with the api scope and put it where forge.gitlab names it (token_env, default GITLAB_TOKEN, or token_command)";
        match self
            .rest
            .send(Method::GET, "/personal_access_tokens/self", None)
            .await
        {
            Err(error) => Check::problem("forge", Status::Warn, error.to_string(), "check the network"),
            Ok(reply) if reply.status.is_success() => {
                match self.rest.parse::<TokenScopes>(&reply, "token") {
                    Ok(token) if token.scopes.iter().any(|scope| scope == "api") => {
                        Check::ok("forge", "gitlab: the token has the api scope".to_owned())
                    }
                    Ok(token) => Check::problem(
                        "forge",
                        Status::Fail,
                        format!(
                            "gitlab: the token's scopes are [{}], without api: stet cannot open merge requests or mint project access tokens with it",
                            self.rest.shown(&token.scopes.join(", "))
                        ),
                        fix_scope,
                    ),
                    Err(error) => Check::problem("forge", Status::Warn, error.to_string(), fix_scope),
                }
            }
            Ok(reply) if reply.status == StatusCode::NOT_FOUND => Check::problem(
                "forge",
                Status::Warn,
                "gitlab: the token's scopes could not be read (GET /personal_access_tokens/self: 404; GitLab before 15.5)".to_owned(),
                "make sure the token has the api scope",
            ),
            Ok(reply) => Check::problem(
                "forge",
                Status::Warn,
                self.rest.failure(&reply, "the token's scopes").to_string(),
                fix_scope,
            ),
        }
    }

    /// The token's role on `repo`: Developer to push, Maintainer to mint project access tokens.
    async fn project_check(&self, repo: &str) -> Check {
        let path = match project_path(repo) {
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
        let reply = match self.rest.send(Method::GET, &path, None).await {
            Ok(reply) => reply,
            Err(error) => {
                return Check::problem(
                    "repository",
                    Status::Fail,
                    error.to_string(),
                    "check the network",
                );
            }
        };
        if !reply.status.is_success() {
            return Check::problem(
                "repository",
                Status::Fail,
                self.rest
                    .failure(&reply, &format!("project {repo}"))
                    .to_string(),
                TOKEN_FIX,
            );
        }
        match self.rest.parse::<ProjectBody>(&reply, "project") {
            Ok(project) => access_check(repo, project.access_level()),
            Err(error) => Check::problem(
                "repository",
                Status::Fail,
                error.to_string(),
                "check forge.gitlab.api_url: it does not answer as GitLab does",
            ),
        }
    }
}

/// The head of merge request `merge` of the target project (numeric id `project_id`), refusing one
/// that is not open, comes from a fork (another project), or merges into another branch than the
/// brief's base.
fn head_of(target: &Target, project_id: u64, merge: MergeRequestBody) -> Result<ResolvedHead> {
    let iid = merge.iid;
    if merge.state != "opened" {
        return Err(ForgeError::PullRequestClosed {
            forge: FORGE,
            repo: target.repo.clone(),
            number: iid,
            state: merge.state,
        });
    }
    let refused = |detail: String| ForgeError::InvalidTarget {
        forge: FORGE,
        detail,
    };
    if merge.source_project_id != project_id || merge.target_project_id != project_id {
        return Err(refused(format!(
            "merge request !{iid} in {} comes from another project (a fork, project id {}); stet pushes only to {} itself and cannot update it",
            target.repo, merge.source_project_id, target.repo
        )));
    }
    if merge.target_branch != target.base {
        return Err(refused(format!(
            "merge request !{iid} in {} merges into {:?}, but the brief's base is {:?}",
            target.repo, merge.target_branch, target.base
        )));
    }
    let sha = merge.sha.as_deref().ok_or_else(|| {
        refused(format!(
            "merge request !{iid} in {}: GitLab names no head commit",
            target.repo
        ))
    })?;
    let sha = CommitSha::parse(sha)
        .map_err(|err| refused(format!("merge request !{iid}: head SHA: {err}")))?;
    Ok(ResolvedHead {
        number: iid,
        branch: merge.source_branch,
        sha,
    })
}

/// What a role of `level` on `repo` lets stet do.
fn access_check(repo: &str, level: u32) -> Check {
    if level < DEVELOPER {
        return Check::problem(
            "repository",
            Status::Fail,
            format!(
                "gitlab: {repo}: the token's role (access level {level}) cannot push; stet needs Developer (30) at least"
            ),
            "ask for the Developer role on the project (Maintainer to mint project access tokens), or use the token of an account that has it",
        );
    }
    if level < MAINTAINER {
        return Check::problem(
            "repository",
            Status::Warn,
            format!(
                "gitlab: {repo}: the token may push (access level {level}) but cannot mint project access tokens (Maintainer needed): each push falls back to your own token"
            ),
            "ask for the Maintainer role, or set credentials.provider = \"fallback\" to choose that knowingly",
        );
    }
    Check::ok(
        "repository",
        format!(
            "gitlab: {repo}: the token may push and mint project access tokens (access level {level})"
        ),
    )
}

#[async_trait]
impl Forge for GitLabForge {
    fn name(&self) -> &'static str {
        FORGE
    }

    async fn diagnose(&self) -> Vec<Check> {
        let (user, accepted) = self.user_check().await;
        let mut checks = vec![user];
        if !accepted {
            return checks;
        }
        checks.push(self.scope_check().await);
        checks.extend(self.remotes.diagnose(FORGE, &self.git_url));
        for repo in self.remotes.repositories() {
            checks.push(self.project_check(repo).await);
        }
        checks
    }

    async fn preflight(&self, target: &Target) -> Result<Preflight> {
        self.remotes.refuse_others(FORGE, &target.repo)?;
        let project = project_path(&target.repo)?;
        let project_id = self.project(target, &project).await?.id;
        let base_sha = self.base_sha(target, &project).await?;
        if target.pr.is_none()
            && let Some(wanted) = &target.branch
        {
            self.refuse_existing_branch(target, &project, wanted)
                .await?;
        }
        let head = match target.pr {
            Some(iid) => Some(self.resolve_head(target, &project, project_id, iid).await?),
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
        self.remotes.refuse_others(FORGE, &target.repo)?;
        let project = project_path(&target.repo)?;
        let body = json!({
            "source_branch": draft.head,
            "target_branch": draft.base,
            "title": draft.title.as_str(),
            "description": draft.body.as_str(),
        });
        let reply = self
            .rest
            .send(
                Method::POST,
                &format!("{project}/merge_requests"),
                Some(&body),
            )
            .await?;
        if reply.status == StatusCode::CONFLICT {
            // "Another open merge request already exists for this source branch: !N"
            return Err(ForgeError::PullRequestExists {
                forge: FORGE,
                repo: target.repo.clone(),
                head: draft.head.clone(),
                base: draft.base.clone(),
                detail: self.rest.detail(&reply),
            });
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("project {}", target.repo)));
        }
        let opened = self.merge_request(&reply, true)?;
        tracing::info!(repo = %target.repo, iid = opened.number, head = %draft.head, base = %draft.base, "GitLab merge request opened");
        Ok(opened)
    }

    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        self.remotes.refuse_others(FORGE, &target.repo)?;
        let project = project_path(&target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "description": draft.body.as_str(),
        });
        let reply = self
            .rest
            .send(
                Method::PUT,
                &format!("{project}/merge_requests/{number}"),
                Some(&body),
            )
            .await?;
        self.merge_request_found(&reply, target, number)?;
        let updated = self.merge_request(&reply, false)?;
        tracing::info!(repo = %target.repo, iid = number, "GitLab merge request updated");
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_is_one_encoded_segment_of_checked_parts() {
        assert_eq!(project_segment("octo/app.rs").unwrap(), "octo%2Fapp.rs");
        assert_eq!(
            project_segment("group/sub-1/my_app").unwrap(),
            "group%2Fsub-1%2Fmy_app"
        );
        let deepest = vec!["g"; MAX_NAMESPACE_DEPTH].join("/");
        assert!(project_segment(&deepest).is_ok());
        let too_deep = vec!["g"; MAX_NAMESPACE_DEPTH + 1].join("/");
        for bad in [
            "octo",
            "octo/",
            "/app",
            "a//b",
            "a/..",
            "./a",
            "o/r#x",
            "o/r?x",
            "o /r",
            "o/r%2Fx",
            too_deep.as_str(),
        ] {
            assert!(
                matches!(project_segment(bad), Err(ForgeError::InvalidTarget { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_branch_is_one_encoded_segment() {
        assert_eq!(branch_segment("main").as_deref(), Some("main"));
        assert_eq!(
            branch_segment("feature/x#1").as_deref(),
            Some("feature%2Fx%231")
        );
        for bad in ["", "a//b", "../main", "a/."] {
            assert_eq!(branch_segment(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn roles_below_developer_fail_and_below_maintainer_warn() {
        assert_eq!(access_check("g/a", 20).status, Status::Fail);
        let developer = access_check("g/a", 30);
        assert_eq!(developer.status, Status::Warn);
        assert!(
            developer.detail.contains("Maintainer needed"),
            "{developer:?}"
        );
        assert!(
            developer
                .fix
                .as_deref()
                .is_some_and(|fix| fix.contains("credentials.provider = \"fallback\"")),
            "{developer:?}"
        );
        assert_eq!(access_check("g/a", 40).status, Status::Ok);
        assert_eq!(access_check("g/a", 50).status, Status::Ok);
    }
}
