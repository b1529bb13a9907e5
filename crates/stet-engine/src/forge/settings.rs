//! Where a REST forge is and how it is reached, as configuration builds it: its own file so the
//! configuration names it without depending on the forges themselves.

use super::rest::RetryPolicy;
use super::token::TokenSource;

/// Where a forge's REST API and git server are, and how to reach them (GitHub, Gitea, GitLab).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeSettings {
    /// The REST API: `https://api.github.com`, `https://<host>/api/v1` (Gitea), `https://<host>/api/v4`
    /// (GitLab).
    pub api_url: String,
    /// Where repositories are pushed: `https://github.com`, `https://<host>`.
    pub git_url: String,
    /// Where the primary token comes from (a reference, never the value).
    pub token: TokenSource,
    /// How failed REST calls are retried.
    pub retry: RetryPolicy,
}
