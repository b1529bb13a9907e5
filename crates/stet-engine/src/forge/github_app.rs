//! Scoped credentials for GitHub (ADR-0018, credential-injection mechanism and row 7).
//!
//! [`GitHubAppCredentialProvider`] mints an installation token per dispatch for one repository with
//! exactly `contents: write` and `pull_requests: write`, and revokes it with `DELETE
//! /installation/token`. GitHub fixes an installation token's lifetime (one hour) and cannot shorten
//! it: the credential's expiry stet records is the earlier of GitHub's and the dispatch's TTL, and the
//! token itself stays valid until GitHub's expiry unless it is revoked — which is why revoke runs on
//! every exit. The tokens live in this process's memory only, so an id from an earlier process (the
//! journal sweep after a crash) cannot be revoked and simply expires.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;
use zeroize::Zeroizing;

use super::app_jwt::AppKey;
use super::rest::{Auth, Rest, RetryPolicy};
use crate::credential::{
    CredentialError, CredentialId, CredentialProvider, Minted, Result, Revocation, SecretValue,
};
use stet_sanitize::sanitize::{KnownValue, SanitizerHandle, TokenSanitizer};

const PROVIDER: &str = "github-app";

/// GitHub's lifetime of an installation token, assumed when its answer does not say.
const INSTALLATION_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Which GitHub App installation mints the credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHubAppSettings {
    /// The REST API, `https://api.github.com`.
    pub api_url: String,
    /// The GitHub App's id.
    pub app_id: u64,
    /// The id of the app's installation on the repository's owner.
    pub installation_id: u64,
    /// The app's RSA private key, a PEM file: configuration holds its path, never its contents.
    pub private_key: PathBuf,
}

/// One token this process minted, kept until GitHub expires it so it can be revoked.
struct Grant {
    value: SecretValue,
    github_expires_at: DateTime<Utc>,
}

/// Mints and revokes GitHub App installation tokens.
pub struct GitHubAppCredentialProvider {
    api_url: String,
    app_id: u64,
    installation_id: u64,
    /// Authenticates as the app (a JWT per request).
    app: Rest,
    /// Learns every minted token, so no error text of this provider can show one.
    sanitizer: SanitizerHandle,
    grants: Mutex<HashMap<CredentialId, Grant>>,
}

impl fmt::Debug for GitHubAppCredentialProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubAppCredentialProvider")
            .field("api_url", &self.api_url)
            .field("app_id", &self.app_id)
            .field("installation_id", &self.installation_id)
            .field("live", &self.grants().len())
            .finish()
    }
}

/// A provider error: credential-free (forge errors are built from sanitized text).
fn refused(detail: impl fmt::Display) -> CredentialError {
    CredentialError::Provider {
        provider: PROVIDER,
        detail: detail.to_string(),
    }
}

/// The answer to a mint.
#[derive(Deserialize)]
struct TokenBody {
    token: String,
    expires_at: Option<String>,
}

impl GitHubAppCredentialProvider {
    /// Reads the app's private key from its file.
    pub fn new(settings: GitHubAppSettings) -> Result<GitHubAppCredentialProvider> {
        let path = settings.private_key.display().to_string();
        let pem = Zeroizing::new(
            std::fs::read(&settings.private_key)
                .map_err(|err| refused(format!("private key {path}: {err}")))?,
        );
        let key = AppKey::from_pem(settings.app_id, &pem)
            .map_err(|why| refused(format!("private key {path} {why}")))?;
        let sanitizer = SanitizerHandle::new(TokenSanitizer::new()?);
        let app = Rest::new(
            PROVIDER,
            &settings.api_url,
            Auth::GitHubApp(Box::new(key)),
            RetryPolicy::default(),
            sanitizer.clone(),
        )
        .map_err(refused)?;
        Ok(GitHubAppCredentialProvider {
            app,
            api_url: settings.api_url,
            app_id: settings.app_id,
            installation_id: settings.installation_id,
            sanitizer,
            grants: Mutex::new(HashMap::new()),
        })
    }

    /// The live grants, with those GitHub has expired already dropped.
    fn grants(&self) -> MutexGuard<'_, HashMap<CredentialId, Grant>> {
        let mut grants = match self.grants.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = Utc::now();
        grants.retain(|_, grant| grant.github_expires_at > now);
        grants
    }
}

/// The repository's name in `owner/name`.
fn repository_name(repository: &str) -> Result<&str> {
    match repository.split_once('/') {
        Some((owner, name)) if !owner.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(name)
        }
        _ => Err(refused(format!(
            "repository {repository:?} is not of the form owner/name"
        ))),
    }
}

#[async_trait]
impl CredentialProvider for GitHubAppCredentialProvider {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    async fn mint(&self, repository: &str, branch: &str, ttl: Duration) -> Result<Minted> {
        let name = repository_name(repository)?;
        let ttl_chrono = chrono::Duration::from_std(ttl).map_err(|_| CredentialError::Ttl(ttl))?;
        let body = json!({
            "repositories": [name],
            "permissions": { "contents": "write", "pull_requests": "write" },
        });
        let path = format!("/app/installations/{}/access_tokens", self.installation_id);
        let reply = self
            .app
            .send(Method::POST, &path, Some(&body))
            .await
            .map_err(refused)?;
        if !reply.status.is_success() {
            return Err(refused(self.app.failure(
                &reply,
                &format!(
                    "installation {} of app {}",
                    self.installation_id, self.app_id
                ),
            )));
        }
        let parsed: TokenBody = self
            .app
            .parse(&reply, "installation token")
            .map_err(refused)?;
        let value = SecretValue::new(parsed.token);
        if !value.expose_secret().bytes().all(|b| b.is_ascii_graphic()) {
            return Err(refused(
                "GitHub answered with an installation token an HTTP header cannot carry",
            ));
        }
        self.sanitizer.register(KnownValue::new(
            "installation-token",
            value.expose_secret(),
        )?)?;
        let now = Utc::now();
        let github_expires_at = match parsed
            .expires_at
            .as_deref()
            .map(DateTime::parse_from_rfc3339)
        {
            Some(Ok(at)) => at.with_timezone(&Utc),
            answer => {
                tracing::warn!(
                    provider = PROVIDER,
                    answered = answer.is_some(),
                    "GitHub gave no readable expiry for the installation token; assuming one hour"
                );
                now + chrono::Duration::from_std(INSTALLATION_TOKEN_LIFETIME).unwrap_or(ttl_chrono)
            }
        };
        let expires_at = github_expires_at.min(now + ttl_chrono);
        let id = CredentialId::new(format!("github-app-{}", uuid::Uuid::new_v4()));
        self.grants().insert(
            id.clone(),
            Grant {
                value: value.clone(),
                github_expires_at,
            },
        );
        tracing::info!(credential = %id, repository, branch, %expires_at, %github_expires_at, "installation token minted (valid at GitHub until its own expiry unless revoked)");
        Ok(Minted {
            id,
            value,
            expires_at,
            stand_in: None,
        })
    }

    /// `DELETE /installation/token`, authenticated with the token itself. A token GitHub no longer
    /// knows (404, or 401 for one already revoked or expired) counts as gone.
    async fn revoke(&self, id: &CredentialId) -> Result<Revocation> {
        let token = self.grants().get(id).map(|grant| grant.value.clone());
        let Some(token) = token else {
            tracing::warn!(credential = %id, provider = PROVIDER, "this process did not mint the credential (or GitHub expired it already); it cannot be revoked and expires at GitHub's TTL");
            return Ok(Revocation::NotRevocable);
        };
        let rest = Rest::new(
            PROVIDER,
            &self.api_url,
            Auth::Bearer(token),
            RetryPolicy::default(),
            self.sanitizer.clone(),
        )
        .map_err(refused)?;
        let reply = rest
            .send(Method::DELETE, "/installation/token", None)
            .await
            .map_err(refused)?;
        match reply.status {
            status if status.is_success() => Ok(Revocation::Revoked),
            StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED => Ok(Revocation::AlreadyGone),
            _ => Err(refused(rest.failure(&reply, "installation token"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_private_key_that_is_some_other_file_is_named_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let secret = format!("canary{}", uuid::Uuid::new_v4().simple());
        for text in [
            format!("-----BEGIN {secret}-----\nAAAA\n-----END OTHER-----\n"),
            format!("-----BEGIN RSA PRIVATE KEY-----\n{secret}!\n-----END RSA PRIVATE KEY-----\n"),
            format!("db.example.invalid:5432:app:admin:{secret}\n"),
        ] {
            let key = dir.path().join("pgpass");
            std::fs::write(&key, &text).unwrap();
            let error = GitHubAppCredentialProvider::new(GitHubAppSettings {
                api_url: "https://api.github.com".to_owned(),
                app_id: 1,
                installation_id: 2,
                private_key: key.clone(),
            })
            .err()
            .unwrap()
            .to_string();
            assert!(error.contains(&key.display().to_string()), "{error}");
            assert!(!error.contains(&secret), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_token_is_asked_for_the_repository_name_only() {
        assert_eq!(repository_name("octo/app").unwrap(), "app");
        for bad in ["app", "octo/", "/app", "octo/app/x"] {
            assert!(repository_name(bad).is_err(), "{bad:?}");
        }
    }
}
