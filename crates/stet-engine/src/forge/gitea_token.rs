//! Scoped credentials for Gitea and Forgejo (ADR-0018, credential injection: "Gitea scoped token —
//! DELETE, 404 no-ops"): an access token per dispatch of the `write:repository` scope, deleted after
//! the push.
//!
//! Gitea mints and deletes access tokens only under basic authentication, so this provider reads the
//! account's password (and, with two factors, the current one-time code) by reference for each
//! request, keeps them in memory only, and teaches them to the sanitizer. A Gitea token does not
//! expire by itself: its id carries everything its deletion needs (a tag of the instance, the token's
//! id, the account), so a later process — the journal's sweep after a crash — deletes it too.
//! Gitea's scopes are per category, not per repository (docs/security.md, residual 43).

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use http::{Method, StatusCode};
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;
use serde_json::json;

use super::rest::{
    Auth, Reply, Rest, RetryPolicy, SEGMENT, instance_tag, is_name_part, minted_id, parse_minted_id,
};
use super::token::TokenSource;
use crate::check::{Check, Status};
use crate::credential::{
    CredentialError, CredentialId, CredentialProvider, Minted, Result, Revocation, SecretValue,
};
use stet_sanitize::sanitize::{KnownValue, MIN_KNOWN_VALUE_LEN, SanitizerHandle};

/// The provider's name, as the journal records it.
pub const PROVIDER: &str = "gitea-token";

/// The prefix of every id this provider mints.
const ID_PREFIX: &str = "gitea-token-";

/// The prefix of every token name this provider asks for: `stet doctor` finds what is left by it.
const TOKEN_NAME_PREFIX: &str = "stet-";

/// The one scope a minted token has.
const SCOPE: &str = "write:repository";

/// What a person does about a token stet cannot delete: it stays live until someone does.
pub const LEFT_LIVE: &str = "a Gitea token does not expire: run `stet sweep` in a repository configured for the Gitea and account that minted it, or delete the token named stet-… under Settings → Applications";

/// What to do about a password or one-time code Gitea refuses.
const PASSWORD_FIX: &str = "make credentials.gitea.password_command print the password of credentials.gitea.user (and, with two-factor authentication, credentials.gitea.otp_command the current code)";

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

/// A provider error: credential-free (forge errors are built from sanitized text).
fn refused(detail: impl fmt::Display) -> CredentialError {
    CredentialError::Provider {
        provider: PROVIDER,
        detail: detail.to_string(),
    }
}

/// A failed request made as `user`: a 401 is Gitea refusing the password or the one-time code (and
/// says which settings read them), anything else as the REST client reads it.
fn account_failure(account: &Rest, reply: &Reply, user: &str, what: &str) -> CredentialError {
    if reply.status == StatusCode::UNAUTHORIZED {
        return refused(format!(
            "Gitea refused the password (or one-time code) of {user} (401 Unauthorized): {}; {PASSWORD_FIX}",
            account.detail(reply)
        ));
    }
    refused(account.failure(reply, what))
}

/// What a minted token reaches beyond the dispatch's repository, for `stet doctor`.
fn reach_check(user: &str, repositories: &[String]) -> Check {
    let beyond = match repositories {
        [] => String::new(),
        own => format!(", not only {}", own.join(", ")),
    };
    Check::ok(
        "credential",
        format!(
            "gitea-token: a token of the {SCOPE} scope reaches every repository {user} may write{beyond}: Gitea's scopes are per category, not per repository (docs/security.md, residual 43)"
        ),
    )
}

/// What an id of this provider names: the token's id and its account.
#[derive(Debug, PartialEq, Eq)]
struct Grant {
    token_id: u64,
    user: String,
}

/// `gitea-token-<instance>-<token id>-<user>`.
fn grant_id(instance: &str, grant: &Grant) -> CredentialId {
    CredentialId::new(minted_id(ID_PREFIX, instance, grant.token_id, &grant.user))
}

/// The grant an id of this provider at `instance` names; `None` for any other id.
fn parse_grant(id: &CredentialId, instance: &str) -> Option<Grant> {
    let (token_id, user) = parse_minted_id(id.as_str(), ID_PREFIX, instance)?;
    is_name_part(user).then(|| Grant {
        token_id,
        user: user.to_owned(),
    })
}

/// The answer to a mint: Gitea calls the token's value `sha1`.
#[derive(Deserialize)]
struct TokenBody {
    id: u64,
    sha1: String,
}

/// One entry of the account's token list.
#[derive(Deserialize)]
struct ListedToken {
    name: String,
}

#[derive(Deserialize)]
struct UserBody {
    login: String,
}

/// Mints and deletes Gitea access tokens with the account's password.
pub struct GiteaTokenProvider {
    api_url: String,
    /// [`instance_tag`] of the API URL.
    instance: String,
    /// The account, once known: configured, or learned from the primary token.
    user: Mutex<Option<String>>,
    /// Authenticates with the primary token, only to learn its account.
    lookup: Rest,
    password: TokenSource,
    otp: Option<TokenSource>,
    retry: RetryPolicy,
    /// Learns the password and every minted token, so no sink can show them.
    sanitizer: SanitizerHandle,
}

impl fmt::Debug for GiteaTokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GiteaTokenProvider")
            .field("api_url", &self.api_url)
            .field("password", &"<read by credentials.gitea.password_command>")
            .field(
                "otp",
                &self
                    .otp
                    .as_ref()
                    .map(|_| "<read by credentials.gitea.otp_command>"),
            )
            .finish_non_exhaustive()
    }
}

impl GiteaTokenProvider {
    /// A provider minting at the Gitea API of `settings`; `primary` (the person's token, taught to
    /// `sanitizer` like the forge does) is used only to learn the account when none is configured.
    pub fn new(
        settings: GiteaTokenSettings,
        primary: SecretValue,
        sanitizer: SanitizerHandle,
    ) -> Result<GiteaTokenProvider> {
        if let Some(user) = settings.user.as_deref().filter(|user| !is_name_part(user)) {
            return Err(refused(format!(
                "credentials.gitea.user {user:?} is not a Gitea login (letters, digits, '-', '_' and '.')"
            )));
        }
        sanitizer.register(KnownValue::new("primary-token", primary.expose_secret())?)?;
        let retry = RetryPolicy::default();
        let lookup = Rest::new(
            PROVIDER,
            &settings.api_url,
            Auth::Token(primary),
            retry,
            sanitizer.clone(),
        )
        .map_err(refused)?;
        Ok(GiteaTokenProvider {
            instance: instance_tag(&settings.api_url),
            api_url: settings.api_url,
            user: Mutex::new(settings.user),
            lookup,
            password: settings.password,
            otp: settings.otp,
            retry,
            sanitizer,
        })
    }

    /// The account tokens are minted for: configured, or the primary token's (asked once).
    async fn user(&self) -> Result<String> {
        if let Some(user) = self.known_user() {
            return Ok(user);
        }
        let reply = self
            .lookup
            .send(Method::GET, "/user", None)
            .await
            .map_err(refused)?;
        if !reply.status.is_success() {
            return Err(refused(self.lookup.failure(&reply, "the token's user")));
        }
        let login = self
            .lookup
            .parse::<UserBody>(&reply, "user")
            .map_err(refused)?
            .login;
        if !is_name_part(&login) {
            return Err(refused(format!(
                "Gitea named the token's account {login:?}, which is not a login; set credentials.gitea.user"
            )));
        }
        *self.user_slot() = Some(login.clone());
        Ok(login)
    }

    fn known_user(&self) -> Option<String> {
        self.user_slot().clone()
    }

    fn user_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        match self.user.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A client authenticated as `user` with the password and one-time code read now (the commands
    /// block, so they run on the blocking pool), both taught to the sanitizer first.
    async fn as_account(&self, user: &str) -> Result<Rest> {
        let (password, otp) = (self.password.clone(), self.otp.clone());
        let (password, otp) = tokio::task::spawn_blocking(move || {
            let password = password
                .resolve_password()
                .map_err(|error| refused(format!("credentials.gitea.password_command: {error}")))?;
            let otp = otp
                .map(|otp| otp.resolve())
                .transpose()
                .map_err(|error| refused(format!("credentials.gitea.otp_command: {error}")))?;
            Ok::<_, CredentialError>((password, otp))
        })
        .await
        .map_err(|error| refused(format!("reading the password ended abnormally: {error}")))??;
        self.mask("gitea-password", password.expose_secret())?;
        if let Some(otp) = &otp {
            self.mask("gitea-otp", otp.expose_secret())?;
        }
        self.mask(
            "gitea-password",
            &format!("{user}:{}", password.expose_secret()),
        )?;
        Rest::new(
            PROVIDER,
            &self.api_url,
            Auth::Basic {
                user: user.to_owned(),
                password,
                otp,
            },
            self.retry,
            self.sanitizer.clone(),
        )
        .map_err(refused)
    }

    /// Teaches `value` to the sanitizer; one too short to mask without masking ordinary words is
    /// left out (the `user:password` pair still covers a short password in the header's encoding; a
    /// six-digit one-time code is not masked, and is worthless within a minute).
    fn mask(&self, label: &str, value: &str) -> Result<()> {
        if value.len() < MIN_KNOWN_VALUE_LEN {
            return Ok(());
        }
        self.sanitizer.register(KnownValue::new(label, value)?)?;
        Ok(())
    }

    /// `/users/<user>/tokens`, the user encoded.
    fn tokens_path(user: &str) -> String {
        format!("/users/{}/tokens", utf8_percent_encode(user, SEGMENT))
    }

    /// `DELETE /users/<user>/tokens/<id>`: 404 means it is gone already.
    async fn delete(&self, grant: &Grant) -> Result<Revocation> {
        let account = self.as_account(&grant.user).await?;
        let path = format!("{}/{}", Self::tokens_path(&grant.user), grant.token_id);
        let reply = account
            .send(Method::DELETE, &path, None)
            .await
            .map_err(refused)?;
        match reply.status {
            status if status.is_success() => Ok(Revocation::Revoked),
            StatusCode::NOT_FOUND => Ok(Revocation::AlreadyGone),
            _ => Err(account_failure(
                &account,
                &reply,
                &grant.user,
                &format!("token {} of {}", grant.token_id, grant.user),
            )),
        }
    }

    /// Whether the password mints, and which of stet's tokens are still live, changing nothing.
    async fn account_check(&self, user: &str) -> Check {
        let account = match self.as_account(user).await {
            Ok(account) => account,
            Err(error) => {
                return Check::problem("credential", Status::Fail, error.to_string(), PASSWORD_FIX);
            }
        };
        let reply = match account
            .send(Method::GET, &Self::tokens_path(user), None)
            .await
        {
            Ok(reply) => reply,
            Err(error) => {
                return Check::problem(
                    "credential",
                    Status::Fail,
                    error.to_string(),
                    "check forge.gitea.api_url and this machine's network or proxy",
                );
            }
        };
        if reply.status == StatusCode::UNAUTHORIZED {
            return Check::problem(
                "credential",
                Status::Fail,
                format!("gitea-token: Gitea refused the password (or one-time code) of {user}"),
                PASSWORD_FIX,
            );
        }
        if !reply.status.is_success() {
            return Check::problem(
                "credential",
                Status::Fail,
                account
                    .failure(&reply, &format!("the tokens of {user}"))
                    .to_string(),
                PASSWORD_FIX,
            );
        }
        let listed: Vec<ListedToken> = account.parse(&reply, "tokens").unwrap_or_default();
        let left: Vec<&str> = listed
            .iter()
            .map(|token| token.name.as_str())
            .filter(|name| name.starts_with(TOKEN_NAME_PREFIX))
            .collect();
        if left.is_empty() {
            Check::ok(
                "credential",
                format!(
                    "gitea-token: Gitea accepts the password of {user} where tokens are minted, and no token stet minted is left"
                ),
            )
        } else {
            Check::problem(
                "credential",
                Status::Warn,
                format!(
                    "gitea-token: {} token(s) stet minted for {user} are still live (a delete failed, or stet was killed before its sweep): {}",
                    left.len(),
                    account.shown(&left.join(", "))
                ),
                "delete them under Settings → Applications on the forge, or run stet (its launch sweep deletes those in its journal)",
            )
        }
    }
}

#[async_trait]
impl CredentialProvider for GiteaTokenProvider {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    async fn mint(&self, repository: &str, branch: &str, ttl: Duration) -> Result<Minted> {
        let ttl_chrono = chrono::Duration::from_std(ttl).map_err(|_| CredentialError::Ttl(ttl))?;
        let user = self.user().await?;
        let account = self.as_account(&user).await?;
        let body = json!({
            "name": format!("{TOKEN_NAME_PREFIX}{}", uuid::Uuid::new_v4()),
            "scopes": [SCOPE],
        });
        let reply = account
            .send(Method::POST, &Self::tokens_path(&user), Some(&body))
            .await
            .map_err(refused)?;
        if !reply.status.is_success() {
            return Err(account_failure(
                &account,
                &reply,
                &user,
                &format!("the account {user}"),
            ));
        }
        let parsed: TokenBody = account.parse(&reply, "access token").map_err(refused)?;
        let grant = Grant {
            token_id: parsed.id,
            user,
        };
        let value = SecretValue::new(parsed.sha1);
        let masked = KnownValue::new("gitea-token", value.expose_secret())
            .and_then(|known| self.sanitizer.register(known));
        if !value.expose_secret().bytes().all(|b| b.is_ascii_graphic()) || masked.is_err() {
            // A token stet cannot use or mask is deleted at once rather than left live.
            if let Err(error) = self.delete(&grant).await {
                tracing::warn!(provider = PROVIDER, token = grant.token_id, %error, "an unusable token could not be deleted");
            }
            return Err(refused(
                "Gitea answered with a token stet cannot use (not printable ASCII, or too short or too long to mask); it was deleted",
            ));
        }
        let id = grant_id(&self.instance, &grant);
        let expires_at = Utc::now() + ttl_chrono;
        tracing::info!(credential = %id, repository, branch, %expires_at, "Gitea access token minted (valid until deleted)");
        Ok(Minted {
            id,
            value,
            expires_at,
            stand_in: None,
        })
    }

    /// Deletes the token its id names, as the account it belongs to; a fallback id, or one of
    /// another instance or account, is not this provider's to delete.
    async fn revoke(&self, id: &CredentialId) -> Result<Revocation> {
        if super::fallback::is_fallback(id) {
            return Ok(super::fallback::not_revocable(id));
        }
        // A Gitea token never expires: one this provider may not delete is an error, so the journal
        // keeps it for a process configured for its instance and account.
        let Some(grant) = parse_grant(id, &self.instance) else {
            return Err(refused(format!(
                "{id} was not minted at {} and is not deleted here; {LEFT_LIVE}",
                self.api_url
            )));
        };
        let user = self.user().await?;
        if user != grant.user {
            return Err(refused(format!(
                "{id} belongs to {}, not to the configured account {user}, and is not deleted here; {LEFT_LIVE}",
                grant.user
            )));
        }
        self.delete(&grant).await
    }

    async fn diagnose(&self, repositories: &[String]) -> Vec<Check> {
        match self.user().await {
            Ok(user) => vec![
                self.account_check(&user).await,
                reach_check(&user, repositories),
            ],
            Err(error) => vec![Check::problem(
                "credential",
                Status::Fail,
                error.to_string(),
                "set credentials.gitea.user, or give forge.gitea a token with the read:user scope",
            )],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_instance_token_and_account_and_nothing_else_parses() {
        let instance = instance_tag("https://git.example/api/v1/");
        assert_eq!(instance, instance_tag("https://git.example/api/v1"));
        assert_ne!(instance, instance_tag("https://other.example/api/v1"));
        let grant = Grant {
            token_id: 42,
            user: "robot.one".to_owned(),
        };
        let id = grant_id(&instance, &grant);
        assert_eq!(parse_grant(&id, &instance), Some(grant));
        assert_eq!(
            parse_grant(&id, &instance_tag("https://other.example")),
            None
        );
        for bad in [
            format!("{ID_PREFIX}{instance}-x-robot"),
            format!("{ID_PREFIX}{instance}--robot"),
            format!("{ID_PREFIX}{instance}-42-"),
            format!("{ID_PREFIX}{instance}-42-../admin"),
            format!("{ID_PREFIX}{instance}-42-a/b"),
            format!("{ID_PREFIX}{instance}-42-a%2Fb"),
            format!("fallback-{instance}-42-robot"),
            format!("{ID_PREFIX}{instance}"),
        ] {
            assert_eq!(
                parse_grant(&CredentialId::new(bad.clone()), &instance),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn a_login_is_a_name_part_and_nothing_that_changes_a_path() {
        for good in ["alice", "a.b-c_d", "Bob42"] {
            assert!(is_name_part(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "a%2Fb", "a?b", "ü"] {
            assert!(!is_name_part(bad), "{bad:?}");
        }
    }
}
