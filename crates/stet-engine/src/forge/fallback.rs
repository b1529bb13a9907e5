//! The ADR's fallback credential, shared by every forge: the person's primary token itself behind a
//! short TTL of stet's own bookkeeping. It may serve the host's push but never a sandbox, and it cannot
//! be revoked (revoking would revoke the person's token). Every credential it hands out says why it
//! stands in for a narrow one, and the dispatch tells the person.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use crate::check::{Check, Status};
use crate::credential::{
    CredentialError, CredentialId, CredentialProvider, FALLBACK_KIND, Minted, Result, Revocation,
    SecretValue,
};

/// The prefix of every fallback credential's id: a provider that falls back per dispatch tells its
/// own credentials from these by it.
const ID_PREFIX: &str = "fallback-";

/// Hands out the primary token as the dispatch's credential, for the host's push only.
pub struct FallbackCredentialProvider {
    primary: SecretValue,
    /// Why the configuration has no narrow credential: shown with each dispatch.
    reason: String,
}

impl fmt::Debug for FallbackCredentialProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackCredentialProvider")
            .field("primary", &"<withheld>")
            .field("reason", &self.reason)
            .finish()
    }
}

impl FallbackCredentialProvider {
    /// A provider that hands out `primary`, the person's own token; `reason` says why no narrow
    /// credential is minted (it names the setting that would change that).
    pub fn new(primary: SecretValue, reason: impl Into<String>) -> FallbackCredentialProvider {
        FallbackCredentialProvider {
            primary,
            reason: reason.into(),
        }
    }
}

/// The primary token as a credential living `ttl` in stet's books, standing in for `reason`.
pub(crate) fn stand_in(
    primary: &SecretValue,
    repository: &str,
    branch: &str,
    ttl: Duration,
    reason: &str,
) -> Result<Minted> {
    let ttl_chrono = chrono::Duration::from_std(ttl).map_err(|_| CredentialError::Ttl(ttl))?;
    let id = CredentialId::new(format!("{ID_PREFIX}{}", uuid::Uuid::new_v4()));
    tracing::warn!(credential = %id, repository, branch, reason, "fallback credential: the primary token under a short TTL; host push only, never a sandbox");
    Ok(Minted {
        id,
        value: primary.clone(),
        expires_at: Utc::now() + ttl_chrono,
        stand_in: Some(reason.to_owned()),
    })
}

/// Whether `id` names a fallback credential (which nothing can revoke).
pub(crate) fn is_fallback(id: &CredentialId) -> bool {
    id.as_str().starts_with(ID_PREFIX)
}

/// What revoking a fallback credential does: nothing at the forge.
pub(crate) fn not_revocable(id: &CredentialId) -> Revocation {
    tracing::info!(credential = %id, "fallback credential cannot be revoked; stet stops using it and the primary token stays valid");
    Revocation::NotRevocable
}

#[async_trait]
impl CredentialProvider for FallbackCredentialProvider {
    fn name(&self) -> &'static str {
        FALLBACK_KIND
    }

    async fn mint(&self, repository: &str, branch: &str, ttl: Duration) -> Result<Minted> {
        stand_in(&self.primary, repository, branch, ttl, &self.reason)
    }

    fn enters_sandbox(&self) -> bool {
        false
    }

    async fn revoke(&self, id: &CredentialId) -> Result<Revocation> {
        Ok(not_revocable(id))
    }

    async fn diagnose(&self, _repositories: &[String]) -> Vec<Check> {
        vec![Check::problem(
            "credential",
            Status::Warn,
            format!(
                "fallback: each push uses your own token, not narrowed to the repository (it never enters a sandbox): {}",
                self.reason
            ),
            "to push with a narrow credential, set up the forge's own provider under [credentials] (assets/config.example.toml lists them)",
        )]
    }
}
