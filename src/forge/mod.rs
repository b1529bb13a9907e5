//! The forge seam (ADR-0018 rows 3 and 5): where a dispatch's result goes, pushed and proposed by the
//! host, never by the container. `GitHubForge` holds the primary token privately; `LocalForge` needs no
//! account. Both push with the dispatch's scoped credential only.

pub mod github;
pub mod github_app;
pub mod local;
pub mod protected;
pub mod pull_request;
pub mod token;

use std::fmt;
use std::path::Path;

use async_trait::async_trait;

use crate::brief::Target;
use crate::dispatch::branch::CommitSha;
use crate::dispatch::credential::ScopedCredential;
use crate::git::push::PushError;

pub use pull_request::{Provenance, PullRequestDraft};

/// Everything a forge can answer wrongly. Messages name the repository, ref or pull request, and
/// never carry a token (they are built from status codes and forge messages that were sanitized).
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
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
        "{forge}: the token was refused (401 Unauthorized): it is missing, expired or revoked; {detail}"
    )]
    Unauthorized { forge: &'static str, detail: String },
    #[error(
        "{forge}: the token may not do this (403 Forbidden): {detail}; check its scopes or the app's permissions"
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
    #[error(transparent)]
    Push(#[from] PushError),
}

pub type Result<T> = std::result::Result<T, ForgeError>;

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
    pub number: u64,
    /// The head branch's name (in the same repository).
    pub branch: String,
    pub sha: CommitSha,
}

/// One host-side push of a result.
#[derive(Debug)]
pub struct PushBranch<'a> {
    /// The user's repository: its object store holds `commit` (the trusted import put it there).
    pub repository: &'a Path,
    pub target: &'a Target,
    pub preflight: &'a Preflight,
    pub commit: &'a CommitSha,
    /// Already validated by `BranchValidator`.
    pub branch: &'a str,
    /// The dispatch's scoped credential: the only one a push ever presents.
    pub credential: &'a ScopedCredential,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub branch: String,
    pub commit: CommitSha,
    /// What the branch pointed at before (`None`: it was created).
    pub previous: Option<CommitSha>,
}

/// A pull request the forge holds after opening or updating one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
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
}
