//! Scoped credentials for GitLab (ADR-0018, credential-injection mechanism and row 7): a project
//! access token per dispatch, narrowed to one project, the `write_repository` scope and the Developer
//! role, expiring at GitLab's earliest date after the dispatch's TTL, and revoked after the push.
//!
//! GitLab mints project access tokens only for a Maintainer, and GitLab.com only on its paid plans.
//! Where it refuses for that (403; 404 where the feature is absent; the 400 "User does not have
//! permission to create project access token" it answers a Developer and GitLab.com's free plan), the
//! dispatch falls back to the person's own token for the host's push ([`super::fallback`]), saying why
//! and what would fix it; any other failure (a primary token without the `api` scope, 5xx, the
//! network) is an error.
//!
//! A credential's id carries everything its revocation needs — a tag of the GitLab instance, the
//! token's id and the project — so a later process (the journal's sweep after a crash) revokes it with
//! the id alone, and never at another instance than the one that minted it.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::gitlab::{DEVELOPER, project_segment};
use super::rest::{Auth, Reply, Rest, RetryPolicy, instance_tag, minted_id, parse_minted_id};
use crate::check::{Check, Status};
use crate::credential::{
    CredentialError, CredentialId, CredentialProvider, Minted, Result, Revocation, SecretValue,
};
use stet_sanitize::sanitize::{KnownValue, SanitizerHandle};

const PROVIDER: &str = "gitlab-project-token";

/// The prefix of every id this provider mints (the fallback's ids have their own).
const ID_PREFIX: &str = "gitlab-project-token-";

/// The one scope a minted token has: pull and push over HTTPS, no API.
const SCOPE: &str = "write_repository";

/// What would let GitLab mint, for the fallback's reason and `stet doctor`.
const MINT_FIX: &str = "ask for the Maintainer role on the project (on GitLab.com, project access tokens also need the Premium or Ultimate plan), or set credentials.provider = \"fallback\" to choose your own token knowingly";

/// A provider error: credential-free (forge errors are built from sanitized text).
fn refused(detail: impl fmt::Display) -> CredentialError {
    CredentialError::Provider {
        provider: PROVIDER,
        detail: detail.to_string(),
    }
}

/// The `expires_at` date GitLab is asked for. GitLab expires a token at 00:00 UTC of that date and
/// accepts no date before tomorrow, so this is the day after the one the TTL ends on: the earliest
/// date that still outlives the TTL (and always tomorrow at the earliest).
fn expiry_date(now: DateTime<Utc>, ttl: chrono::Duration) -> NaiveDate {
    (now + ttl + chrono::Duration::days(1)).date_naive()
}

/// What an id of this provider says: the token's id and the project's `:id` segment.
#[derive(Debug, PartialEq, Eq)]
struct Grant {
    token_id: u64,
    project: String,
}

/// `gitlab-project-token-<instance>-<token id>-<project segment>`: only unreserved URL characters and
/// `%2F`.
fn grant_id(instance: &str, grant: &Grant) -> CredentialId {
    CredentialId::new(minted_id(
        ID_PREFIX,
        instance,
        grant.token_id,
        &grant.project,
    ))
}

/// The grant an id of this provider at `instance` names; `None` for any other id.
fn parse_grant(id: &CredentialId, instance: &str) -> Option<Grant> {
    let (token_id, project) = parse_minted_id(id.as_str(), ID_PREFIX, instance)?;
    // The project must be exactly what minting wrote: a checked path, encoded.
    let path = project.replace("%2F", "/");
    (project_segment(&path).ok()? == project).then(|| Grant {
        token_id,
        project: project.to_owned(),
    })
}

/// The answer to a mint.
#[derive(Deserialize)]
struct TokenBody {
    id: u64,
    token: String,
}

/// Mints and revokes GitLab project access tokens with the person's primary token.
pub struct GitLabProjectTokenProvider {
    /// Authenticates with the primary token (it needs the `api` scope).
    rest: Rest,
    /// The primary token again, for the fallback where GitLab refuses to mint.
    primary: SecretValue,
    /// [`instance_tag`] of the API URL.
    instance: String,
    /// Learns every minted token, so no error text of this provider can show one.
    sanitizer: SanitizerHandle,
}

impl fmt::Debug for GitLabProjectTokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitLabProjectTokenProvider")
            .field("api_url", &self.rest.api_url())
            .field("primary", &"<withheld>")
            .finish()
    }
}

impl GitLabProjectTokenProvider {
    /// A provider minting at the GitLab API `api_url` (`https://<host>/api/v4`) with `primary`, the
    /// person's token (taught to `sanitizer` as `primary-token`, like the forge does).
    pub fn new(
        api_url: &str,
        primary: SecretValue,
        retry: RetryPolicy,
        sanitizer: SanitizerHandle,
    ) -> Result<GitLabProjectTokenProvider> {
        sanitizer.register(KnownValue::new("primary-token", primary.expose_secret())?)?;
        let rest = Rest::new(
            "gitlab",
            api_url,
            Auth::Bearer(primary.clone()),
            retry,
            sanitizer.clone(),
        )
        .map_err(refused)?;
        Ok(GitLabProjectTokenProvider {
            instance: instance_tag(rest.api_url()),
            rest,
            primary,
            sanitizer,
        })
    }

    /// Keeps a freshly minted token: refused unless an HTTP header can carry it, then taught to the
    /// sanitizer. A token refused here is revoked at once.
    async fn accept(&self, grant: &Grant, token: String) -> Result<SecretValue> {
        let value = SecretValue::new(token);
        let known = if value.expose_secret().bytes().all(|b| b.is_ascii_graphic()) {
            KnownValue::new("project-token", value.expose_secret()).map_err(CredentialError::from)
        } else {
            Err(refused(
                "GitLab answered with a project access token that is not printable ASCII (an HTTP header cannot carry it)",
            ))
        };
        match known.and_then(|known| Ok(self.sanitizer.register(known)?)) {
            Ok(()) => Ok(value),
            Err(error) => {
                let outcome = self.delete(grant).await;
                tracing::warn!(provider = PROVIDER, token_id = grant.token_id, revoked = ?outcome, "a minted project access token was refused and revoked");
                Err(error)
            }
        }
    }

    /// What a failed mint means: the reason the primary token stands in when GitLab cannot mint for
    /// this account or plan — 403, 404 where the feature is absent, and the 400 "User does not have
    /// permission to create project access token" GitLab answers a non-Maintainer and GitLab.com's
    /// free plan — else the error (a token without the `api` scope among them: it could not open the
    /// merge request either).
    fn refusal(&self, reply: &Reply, repository: &str) -> Result<String> {
        let detail = self.rest.detail(reply);
        let cannot_mint = match reply.status {
            StatusCode::FORBIDDEN => !reply.body.contains("insufficient_scope"),
            StatusCode::NOT_FOUND => true,
            StatusCode::BAD_REQUEST => detail.contains("does not have permission to create"),
            _ => false,
        };
        if cannot_mint {
            return Ok(format!(
                "GitLab refused to mint a project access token for {repository} ({}: {detail}); each push uses your own token instead. To fix: {MINT_FIX}",
                reply.status
            ));
        }
        if reply.status == StatusCode::FORBIDDEN {
            return Err(refused(format!(
                "{repository}: the primary token lacks the api scope GitLab needs to mint project access tokens (403 insufficient_scope); put a token with the api scope where forge.gitlab names it (token_env, default GITLAB_TOKEN, or token_command)"
            )));
        }
        Err(refused(
            self.rest.failure(reply, &format!("project {repository}")),
        ))
    }

    /// `DELETE /projects/:id/access_tokens/:token_id`.
    async fn delete(&self, grant: &Grant) -> Result<Revocation> {
        let path = format!(
            "/projects/{}/access_tokens/{}",
            grant.project, grant.token_id
        );
        let reply = self
            .rest
            .send(Method::DELETE, &path, None)
            .await
            .map_err(refused)?;
        match reply.status {
            status if status.is_success() => Ok(Revocation::Revoked),
            StatusCode::NOT_FOUND => Ok(Revocation::AlreadyGone),
            _ => Err(refused(self.rest.failure(
                &reply,
                &format!("project access token {}", grant.token_id),
            ))),
        }
    }

    /// One repository's [`CredentialProvider::diagnose`].
    async fn mint_check(&self, repository: &str) -> Check {
        let project = match project_segment(repository) {
            Ok(project) => project,
            Err(error) => {
                return Check::problem(
                    "credentials",
                    Status::Warn,
                    error.to_string(),
                    "a brief cannot target this remote",
                );
            }
        };
        let path = format!("/projects/{project}/access_tokens");
        match self.rest.send(Method::GET, &path, None).await {
            Err(error) => Check::problem(
                "credentials",
                Status::Warn,
                error.to_string(),
                "check the network",
            ),
            Ok(reply) if reply.status.is_success() => Check::ok(
                "credentials",
                format!(
                    "{PROVIDER}: GitLab lets the token mint project access tokens for {repository}"
                ),
            ),
            Ok(reply) if matches!(reply.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND) => {
                Check::problem(
                    "credentials",
                    Status::Warn,
                    format!(
                        "{PROVIDER}: GitLab will not mint project access tokens for {repository} ({}: {}): each push falls back to your own token",
                        reply.status,
                        self.rest.detail(&reply)
                    ),
                    MINT_FIX,
                )
            }
            Ok(reply) => Check::problem(
                "credentials",
                Status::Warn,
                self.rest
                    .failure(
                        &reply,
                        &format!("the project access tokens of {repository}"),
                    )
                    .to_string(),
                MINT_FIX,
            ),
        }
    }
}

#[async_trait]
impl CredentialProvider for GitLabProjectTokenProvider {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    /// `POST /projects/:id/access_tokens`; where GitLab cannot mint for this account or plan, the
    /// primary token stands in, saying why ([`GitLabProjectTokenProvider::refusal`]).
    async fn mint(&self, repository: &str, branch: &str, ttl: Duration) -> Result<Minted> {
        let project = project_segment(repository).map_err(refused)?;
        let ttl_chrono = chrono::Duration::from_std(ttl).map_err(|_| CredentialError::Ttl(ttl))?;
        let now = Utc::now();
        let expires_on = expiry_date(now, ttl_chrono);
        let body = json!({
            "name": format!("stet-{}", uuid::Uuid::new_v4()),
            "scopes": [SCOPE],
            "access_level": DEVELOPER,
            "expires_at": expires_on.format("%Y-%m-%d").to_string(),
        });
        let reply = self
            .rest
            .send(
                Method::POST,
                &format!("/projects/{project}/access_tokens"),
                Some(&body),
            )
            .await
            .map_err(refused)?;
        if !reply.status.is_success() {
            let reason = self.refusal(&reply, repository)?;
            return super::fallback::stand_in(&self.primary, repository, branch, ttl, &reason);
        }
        let parsed: TokenBody = self
            .rest
            .parse(&reply, "project access token")
            .map_err(refused)?;
        let grant = Grant {
            token_id: parsed.id,
            project,
        };
        let value = self.accept(&grant, parsed.token).await?;
        let id = grant_id(&self.instance, &grant);
        tracing::info!(credential = %id, repository, branch, %expires_on, scope = SCOPE, "project access token minted (valid at GitLab until 00:00 UTC of its date unless revoked)");
        Ok(Minted {
            id,
            value,
            expires_at: now + ttl_chrono,
            stand_in: None,
        })
    }

    /// A fallback's id cannot be revoked; one of ours is deleted at GitLab (404: gone already); any
    /// other id (another provider's, another instance's) is not ours to revoke.
    async fn revoke(&self, id: &CredentialId) -> Result<Revocation> {
        if super::fallback::is_fallback(id) {
            return Ok(super::fallback::not_revocable(id));
        }
        match parse_grant(id, &self.instance) {
            Some(grant) => self.delete(&grant).await,
            None => {
                tracing::warn!(credential = %id, provider = PROVIDER, "not a project access token this provider minted at this GitLab; it cannot be revoked here and expires at its date");
                Ok(Revocation::NotRevocable)
            }
        }
    }

    /// Whether GitLab would mint for each repository, asked without minting:
    /// `GET /projects/:id/access_tokens` answers only a Maintainer on a plan with project access
    /// tokens. (A group that forbids creating them is seen only when a mint falls back.)
    async fn diagnose(&self, repositories: &[String]) -> Vec<Check> {
        let mut checks = Vec::new();
        for repository in repositories {
            checks.push(self.mint_check(repository).await);
        }
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_expiry_date_is_the_earliest_midnight_after_the_ttl() {
        let minute = chrono::Duration::seconds(60);
        let day = chrono::Duration::hours(24);
        for (now, ttl, expected) in [
            ("2026-03-10T12:00:00Z", minute, "2026-03-11"),
            ("2026-03-10T23:59:30Z", minute, "2026-03-12"),
            ("2026-03-10T23:59:00Z", minute, "2026-03-12"),
            ("2026-03-10T00:00:00Z", minute, "2026-03-11"),
            ("2026-03-10T00:00:00Z", day, "2026-03-12"),
            (
                "2026-12-31T23:30:00Z",
                chrono::Duration::hours(1),
                "2027-01-02",
            ),
            (
                "2028-02-28T20:00:00Z",
                chrono::Duration::hours(4),
                "2028-03-01",
            ),
        ] {
            let now = at(now);
            let on = expiry_date(now, ttl);
            assert_eq!(on, date(expected), "{now} + {ttl}");
            let midnight = on.and_hms_opt(0, 0, 0).unwrap().and_utc();
            assert!(midnight > now + ttl, "outlives the TTL: {now} + {ttl}");
            assert!(
                midnight - (now + ttl) <= day,
                "the earliest such date: {now} + {ttl}"
            );
            assert!(on > now.date_naive(), "never before tomorrow");
        }
    }

    #[test]
    fn an_id_names_its_instance_token_and_project_and_nothing_else_parses() {
        let instance = instance_tag("https://gitlab.example/api/v4/");
        assert_eq!(instance, instance_tag("https://gitlab.example/api/v4"));
        assert_ne!(instance, instance_tag("https://other.example/api/v4"));
        let grant = Grant {
            token_id: 42,
            project: project_segment("group/sub.x/my-app").unwrap(),
        };
        let id = grant_id(&instance, &grant);
        assert_eq!(
            id.as_str(),
            format!("gitlab-project-token-{instance}-42-group%2Fsub.x%2Fmy-app")
        );
        assert!(
            id.as_str()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._%".contains(&b))
        );
        assert_eq!(parse_grant(&id, &instance), Some(grant));
        assert_eq!(
            parse_grant(&id, &instance_tag("https://other.example/api/v4")),
            None
        );
        for other in [
            "fallback-1".to_owned(),
            "github-app-1".to_owned(),
            format!("gitlab-project-token-{instance}-x-group%2Fapp"),
            format!("gitlab-project-token-{instance}--group%2Fapp"),
            format!("gitlab-project-token-{instance}-1-group"),
            format!("gitlab-project-token-{instance}-1-group%2F..%2Fx"),
            format!("gitlab-project-token-{instance}-1-group/app"),
            format!("gitlab-project-token-{instance}-1-group%2fapp"),
            format!("gitlab-project-token-{instance}-1-group%2Fapp%3Fx"),
        ] {
            assert_eq!(
                parse_grant(&CredentialId::new(other.clone()), &instance),
                None,
                "{other}"
            );
        }
    }
}
