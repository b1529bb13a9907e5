//! Scoped credentials for Gitea and Forgejo (ADR-0018, credential injection: "Gitea scoped token —
//! DELETE, 404 no-ops").

use super::token::TokenSource;

/// How Gitea access tokens are minted: only with the account's password (basic authentication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiteaTokenSettings {
    /// The REST API, `https://<host>/api/v1`.
    pub api_url: String,
    /// The account's login name; `None`: the primary token's own account (`GET /user`).
    pub user: Option<String>,
    /// Where the account's password comes from (`password_command`: a reference, never the value).
    pub password: TokenSource,
    /// Where the current one-time code of the account's second factor comes from, when it has one.
    pub otp: Option<TokenSource>,
}
