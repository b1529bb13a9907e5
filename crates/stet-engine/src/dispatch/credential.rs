//! `ScopedCredential`: the only credential a sandbox may ever see (ADR-0018 rows 2, 3 and 7).
//!
//! The value lives in memory only and is zeroized on drop. It has no `Display` or `Serialize`, and its
//! `Debug` withholds it. It leaves this type in exactly three ways, each named: into a sandbox's
//! environment ([`ScopedCredential::as_environment`]), into the host's own push as the answer of a git2
//! credentials callback ([`ScopedCredential::host_push_secret`]), and into the sanitizer so every sink
//! masks it ([`ScopedCredential::mask_in`]).
//! `revoke()` is idempotent and never fails the caller: the short TTL is the primary defence.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use zeroize::Zeroizing;

use crate::check::Check;
use stet_sanitize::sanitize::{KnownValue, SanitizeError, SanitizerHandle};

/// The one environment key a credential is injected under.
pub const CREDENTIAL_ENV: &str = "STET_GIT_CREDENTIAL";

/// The kind of a credential that is the person's primary token under stet's short TTL.
pub const FALLBACK_KIND: &str = "fallback";

/// Everything that can go wrong minting or revoking. Messages never contain a credential value.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum CredentialError {
    #[error("the system random number generator failed: {0}")]
    Random(String),
    #[error("credential TTL of {0:?} is out of range (1 s to 24 h)")]
    Ttl(Duration),
    #[error("credential provider {provider} refused: {detail}")]
    Provider {
        provider: &'static str,
        detail: String,
    },
    #[error("the credential could not be registered with the sanitizer: {0}")]
    Mask(#[from] SanitizeError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, CredentialError>;

/// A secret string: zeroized on drop, withheld from `Debug`, no `Display`, no `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    /// Wraps `value`; every copy is zeroized when it drops.
    pub fn new(value: String) -> SecretValue {
        SecretValue(Zeroizing::new(value))
    }

    /// The value itself. Call sites are the audit trail: keep them few and host-side.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<withheld>)")
    }
}

/// A provider's public handle on a credential: safe to log and to journal.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct CredentialId(String);

impl CredentialId {
    /// The handle a provider gave.
    pub fn new(id: String) -> CredentialId {
        CredentialId(id)
    }

    /// The handle as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a provider hands back from a mint.
#[derive(Debug)]
pub struct Minted {
    /// The provider's handle on it.
    pub id: CredentialId,
    /// The secret itself.
    pub value: SecretValue,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// Set when the value is the person's primary token standing in for the narrow credential the
    /// provider could not mint: why, in words a person is shown (never the value).
    pub stand_in: Option<String>,
}

/// How a revocation went, as far as the provider could tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// The provider revoked it.
    Revoked,
    /// The provider no longer knew it (expired, or revoked before): the goal is met.
    AlreadyGone,
    /// The provider cannot revoke (the fallback provider): the credential lives until its TTL.
    NotRevocable,
}

/// The logged outcome of [`ScopedCredential::revoke`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// This call revoked it.
    Revoked,
    /// It was gone already: revoked by an earlier call, or no longer known to the provider.
    AlreadyRevoked,
    /// The provider cannot revoke; the credential expires at its TTL (logged, not a failure).
    NotRevocable,
    /// The provider failed; the credential still expires at its TTL. The text is credential-free.
    Failed(String),
}

/// Mints and revokes short-lived, repository-scoped credentials (one implementation per forge).
#[async_trait]
pub trait CredentialProvider: Send + Sync + fmt::Debug {
    /// A short name for logs and errors (`local`, `github`).
    fn name(&self) -> &'static str;
    /// Mints a credential for `repository` that lives `ttl` (pushing to `branch` only, where the
    /// forge can scope that).
    async fn mint(&self, repository: &str, branch: &str, ttl: Duration) -> Result<Minted>;
    /// Whether its credentials may be handed to a sandbox. A provider whose value is (or unlocks) the
    /// primary token answers `false`, and the sandbox refuses it.
    fn enters_sandbox(&self) -> bool {
        true
    }
    /// An id the provider knew but no longer holds (expired, revoked) is [`Revocation::AlreadyGone`];
    /// one it cannot act on (minted by an earlier process, or a provider that cannot revoke) is
    /// [`Revocation::NotRevocable`].
    async fn revoke(&self, id: &CredentialId) -> Result<Revocation>;
    /// What `stet doctor` reports about minting for `repositories`, changing nothing (a provider
    /// that needs no account has nothing to report).
    async fn diagnose(&self, repositories: &[String]) -> Vec<Check> {
        let _ = repositories;
        Vec::new()
    }
}

/// A short-lived, repository-scoped credential.
pub struct ScopedCredential {
    id: CredentialId,
    repository: String,
    branch: String,
    expires_at: DateTime<Utc>,
    value: SecretValue,
    stand_in: Option<String>,
    provider: Arc<dyn CredentialProvider>,
    revoked: AtomicBool,
}

impl fmt::Debug for ScopedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedCredential")
            .field("id", &self.id)
            .field("provider", &self.provider.name())
            .field("repository", &self.repository)
            .field("branch", &self.branch)
            .field("expires_at", &self.expires_at)
            .field("stand_in", &self.stand_in.is_some())
            .field("value", &"<withheld>")
            .finish()
    }
}

impl ScopedCredential {
    /// Asks `provider` for a credential scoped to `repository` (and `branch` where the forge can).
    pub async fn mint(
        provider: Arc<dyn CredentialProvider>,
        repository: &str,
        branch: &str,
        ttl: Duration,
    ) -> Result<ScopedCredential> {
        if ttl < Duration::from_secs(1) || ttl > Duration::from_secs(24 * 3600) {
            return Err(CredentialError::Ttl(ttl));
        }
        let minted = provider.mint(repository, branch, ttl).await?;
        tracing::info!(credential = %minted.id, provider = provider.name(), repository, branch, "credential minted");
        Ok(ScopedCredential {
            id: minted.id,
            repository: repository.to_owned(),
            branch: branch.to_owned(),
            expires_at: minted.expires_at,
            value: minted.value,
            stand_in: minted.stand_in,
            provider,
            revoked: AtomicBool::new(false),
        })
    }

    /// The provider's handle on it.
    pub fn id(&self) -> &CredentialId {
        &self.id
    }

    /// When it stops working.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }

    /// The credential's kind, the one a pull request's provenance block names: the provider's short
    /// name (`local`, `github-app`, `gitlab-project-token`), or `fallback` when the primary token
    /// stood in for it.
    pub fn kind(&self) -> &'static str {
        match self.stand_in {
            Some(_) => FALLBACK_KIND,
            None => self.provider.name(),
        }
    }

    /// Why the primary token stands in for a narrow credential, when it does: a person is told.
    pub fn stand_in(&self) -> Option<&str> {
        self.stand_in.as_deref()
    }

    /// Whether this credential may go into a sandbox's environment: the provider allows it, and it
    /// is not the primary token standing in.
    pub fn enters_sandbox(&self) -> bool {
        self.provider.enters_sandbox() && self.stand_in.is_none()
    }

    /// The credential's sanctioned way into a sandbox: one environment entry, never argv.
    pub fn as_environment(&self) -> BTreeMap<String, SecretValue> {
        BTreeMap::from([(CREDENTIAL_ENV.to_owned(), self.value.clone())])
    }

    /// The credential's exit into the host's own `git push`: the answer a git2 credentials callback
    /// gives, in memory. Never put it in a URL, an argv or a child's environment.
    pub fn host_push_secret(&self) -> &SecretValue {
        &self.value
    }

    /// Teaches the sanitizer this value, so every sink masks it (and its encodings).
    pub fn mask_in(&self, sanitizer: &SanitizerHandle) -> Result<()> {
        let known = KnownValue::new("scoped-credential", self.value.expose_secret())?;
        sanitizer.register(known)?;
        Ok(())
    }

    /// Revokes at the provider. Idempotent: after one success, later calls do nothing. Never fails
    /// the caller: a provider error is logged and returned as [`RevokeOutcome::Failed`].
    pub async fn revoke(&self) -> RevokeOutcome {
        if self.revoked.load(Ordering::SeqCst) {
            return RevokeOutcome::AlreadyRevoked;
        }
        let outcome = match self.provider.revoke(&self.id).await {
            Ok(Revocation::Revoked) => RevokeOutcome::Revoked,
            Ok(Revocation::AlreadyGone) => RevokeOutcome::AlreadyRevoked,
            Ok(Revocation::NotRevocable) => RevokeOutcome::NotRevocable,
            Err(err) => RevokeOutcome::Failed(err.to_string()),
        };
        match &outcome {
            RevokeOutcome::Failed(detail) => {
                tracing::warn!(credential = %self.id, provider = self.provider.name(), %detail, "credential revoke failed; it expires at its TTL");
            }
            RevokeOutcome::NotRevocable => {
                self.revoked.store(true, Ordering::SeqCst);
                tracing::warn!(credential = %self.id, provider = self.provider.name(), expires_at = %self.expires_at, "credential provider cannot revoke; it expires at its TTL");
            }
            done => {
                self.revoked.store(true, Ordering::SeqCst);
                tracing::info!(credential = %self.id, provider = self.provider.name(), outcome = ?done, "credential revoked");
            }
        }
        outcome
    }
}

/// Random URL-safe characters from the operating system's generator.
pub fn random_token(len: usize) -> Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = Zeroizing::new(vec![0u8; len]);
    getrandom::fill(&mut bytes).map_err(|err| CredentialError::Random(err.to_string()))?;
    // 62 does not divide 256; the bias (under 1%) does not matter for a 40-character secret.
    Ok(bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect())
}

/// One credential the local provider handed out.
struct LocalGrant {
    value: SecretValue,
    repository: String,
    expires_at: DateTime<Utc>,
}

/// The credential provider of the local forge: mints random tokens and answers whether a presented
/// token is live for a repository (the local git server asks it on every push).
#[derive(Default)]
pub struct LocalCredentialProvider {
    grants: Mutex<HashMap<CredentialId, LocalGrant>>,
    /// Ids this provider minted and has revoked or seen expire, to tell them from ids it never held
    /// (minted by another, perhaps crashed, process).
    gone: Mutex<std::collections::HashSet<CredentialId>>,
}

impl fmt::Debug for LocalCredentialProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let live = self.grants.lock().map(|g| g.len()).unwrap_or_default();
        f.debug_struct("LocalCredentialProvider")
            .field("live", &live)
            .finish()
    }
}

impl LocalCredentialProvider {
    fn grants(&self) -> std::sync::MutexGuard<'_, HashMap<CredentialId, LocalGrant>> {
        match self.grants.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether `presented` is an unexpired, unrevoked credential for `repository`.
    pub fn authorizes(&self, repository: &str, presented: &str) -> bool {
        let now = Utc::now();
        self.grants().values().any(|grant| {
            grant.repository == repository
                && grant.expires_at > now
                && constant_time_eq(grant.value.expose_secret().as_bytes(), presented.as_bytes())
        })
    }

    /// How many credentials are live right now.
    pub fn live_count(&self) -> usize {
        let now = Utc::now();
        self.grants()
            .values()
            .filter(|grant| grant.expires_at > now)
            .count()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[async_trait]
impl CredentialProvider for LocalCredentialProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn mint(&self, repository: &str, _branch: &str, ttl: Duration) -> Result<Minted> {
        let id = CredentialId::new(format!("local-{}", uuid::Uuid::new_v4()));
        let value = SecretValue::new(format!("stet_{}", random_token(40)?));
        let ttl = chrono::Duration::from_std(ttl).map_err(|_| CredentialError::Ttl(ttl))?;
        let expires_at = Utc::now() + ttl;
        self.grants().insert(
            id.clone(),
            LocalGrant {
                value: value.clone(),
                repository: repository.to_owned(),
                expires_at,
            },
        );
        Ok(Minted {
            id,
            value,
            expires_at,
            stand_in: None,
        })
    }

    async fn revoke(&self, id: &CredentialId) -> Result<Revocation> {
        let removed = self.grants().remove(id);
        let mut gone = match self.gone.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        Ok(match removed {
            Some(_) => {
                gone.insert(id.clone());
                Revocation::Revoked
            }
            None if gone.contains(id) => Revocation::AlreadyGone,
            // Minted by another process: its tokens lived in that process's memory only.
            None => Revocation::NotRevocable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stet_sanitize::sanitize::TokenSanitizer;

    const TTL: Duration = Duration::from_secs(600);

    async fn minted() -> (Arc<LocalCredentialProvider>, ScopedCredential) {
        let provider = Arc::new(LocalCredentialProvider::default());
        let credential = ScopedCredential::mint(provider.clone(), "demo/app", "stet/x", TTL)
            .await
            .unwrap();
        (provider, credential)
    }

    #[tokio::test]
    async fn the_value_never_shows_in_debug_and_leaves_only_through_the_environment() {
        let (_, credential) = minted().await;
        let value = credential.as_environment()[CREDENTIAL_ENV]
            .expose_secret()
            .to_owned();
        assert!(value.starts_with("stet_") && value.len() == 45);
        assert!(!format!("{credential:?}").contains(&value));
        assert!(!format!("{:?}", credential.as_environment()).contains(&value));
        let env = credential.as_environment();
        assert_eq!(env.len(), 1);
        assert_eq!(env[CREDENTIAL_ENV].expose_secret(), value);
    }

    #[tokio::test]
    async fn the_local_provider_tells_revoked_ids_from_ids_it_never_held() {
        let provider = LocalCredentialProvider::default();
        let minted = provider
            .mint("o/r", "b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            provider.revoke(&minted.id).await.unwrap(),
            Revocation::Revoked
        );
        assert_eq!(
            provider.revoke(&minted.id).await.unwrap(),
            Revocation::AlreadyGone
        );
        let elsewhere = CredentialId::new("local-minted-by-a-dead-process".into());
        assert_eq!(
            provider.revoke(&elsewhere).await.unwrap(),
            Revocation::NotRevocable
        );
    }

    #[tokio::test]
    async fn revoke_is_idempotent_and_the_provider_stops_authorizing() {
        let (provider, credential) = minted().await;
        let value = credential.as_environment()[CREDENTIAL_ENV]
            .expose_secret()
            .to_owned();
        assert!(provider.authorizes("demo/app", &value));
        assert!(
            !provider.authorizes("other/repo", &value),
            "scoped to one repository"
        );
        assert!(!provider.authorizes("demo/app", "stet_wrong"));
        assert_eq!(credential.revoke().await, RevokeOutcome::Revoked);
        assert_eq!(credential.revoke().await, RevokeOutcome::AlreadyRevoked);
        assert!(!provider.authorizes("demo/app", &value));
        assert_eq!(provider.live_count(), 0);
    }

    #[derive(Debug)]
    struct BrokenProvider;

    #[async_trait]
    impl CredentialProvider for BrokenProvider {
        fn name(&self) -> &'static str {
            "broken"
        }
        async fn mint(&self, _: &str, _: &str, ttl: Duration) -> Result<Minted> {
            Ok(Minted {
                id: CredentialId::new("b-1".into()),
                value: SecretValue::new("broken-secret-value".into()),
                expires_at: Utc::now() + chrono::Duration::from_std(ttl).unwrap(),
                stand_in: None,
            })
        }
        async fn revoke(&self, _: &CredentialId) -> Result<Revocation> {
            Err(CredentialError::Provider {
                provider: "broken",
                detail: "503 from the forge".into(),
            })
        }
    }

    #[tokio::test]
    async fn a_failing_revoke_is_reported_not_raised_and_can_be_retried() {
        let credential = ScopedCredential::mint(Arc::new(BrokenProvider), "o/r", "b", TTL)
            .await
            .unwrap();
        let first = credential.revoke().await;
        assert!(matches!(&first, RevokeOutcome::Failed(detail) if detail.contains("503")));
        assert!(!format!("{first:?}").contains("broken-secret-value"));
        assert!(matches!(
            credential.revoke().await,
            RevokeOutcome::Failed(_)
        ));
    }

    #[tokio::test]
    async fn ttl_out_of_range_is_refused() {
        let provider = Arc::new(LocalCredentialProvider::default());
        let err = ScopedCredential::mint(provider, "o/r", "b", Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, CredentialError::Ttl(_)));
    }

    #[tokio::test]
    async fn masking_teaches_the_sanitizer_the_value() {
        let (_, credential) = minted().await;
        let value = credential.as_environment()[CREDENTIAL_ENV]
            .expose_secret()
            .to_owned();
        let handle = SanitizerHandle::new(TokenSanitizer::new().unwrap());
        credential.mask_in(&handle).unwrap();
        let text = handle
            .current()
            .sanitize(&format!("env STET_GIT_CREDENTIAL={value}"));
        assert_eq!(
            text.as_str(),
            "env STET_GIT_CREDENTIAL=[REDACTED:scoped-credential]"
        );
    }

    #[test]
    fn random_tokens_differ() {
        assert_ne!(random_token(40).unwrap(), random_token(40).unwrap());
    }
}
