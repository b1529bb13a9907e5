//! Where a REST forge is and how it is reached, as configuration builds it, and the primary-token
//! client every REST forge builds from it: its own file so the configuration names it without
//! depending on the forges themselves.

use super::rest::{Auth, Rest, RetryPolicy, web_url};
use super::token::TokenSource;
use super::{ForgeError, Result};
use crate::credential::SecretValue;
use stet_sanitize::sanitize::{KnownValue, SanitizerHandle};

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

impl ForgeSettings {
    /// The client a forge holds with the person's primary token: `git_url` checked, the token taught
    /// to the sanitizer (`primary-token`) before anything can show it, then sent as `auth` makes it
    /// (`Auth::Bearer`, `Auth::Token`).
    pub(crate) fn primary_client(
        &self,
        forge: &'static str,
        token: SecretValue,
        auth: fn(SecretValue) -> Auth,
        sanitizer: SanitizerHandle,
    ) -> Result<Rest> {
        web_url(forge, &self.git_url, "git_url")?;
        let token_error = |detail: String| ForgeError::Token { forge, detail };
        let known = KnownValue::new("primary-token", token.expose_secret())
            .map_err(|err| token_error(format!("{}: {err}", self.token.describe())))?;
        sanitizer
            .register(known)
            .map_err(|err| token_error(err.to_string()))?;
        let rest = Rest::new(forge, &self.api_url, auth(token), self.retry, sanitizer)?;
        tracing::info!(forge, api_url = %self.api_url, source = %self.token.describe(), "primary token read");
        Ok(rest)
    }
}
