//! `DispatchError`: why a dispatch stopped, in words that are safe to show anywhere.
//!
//! Credential-free by construction (ADR-0018, Confirmation): payloads are [`SanitizedText`], made by
//! passing the underlying error's message through the sanitizer, never a live error or a token.

use std::sync::Arc;

use crate::dispatch::sanitize::{SanitizedText, TokenSanitizer};
use crate::dispatch::state::Input;

/// The stage of a dispatch that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Preflight,
    Provisioning,
    Agent,
    Collecting,
    Push,
    PullRequest,
}

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Preflight => "preflight",
            Stage::Provisioning => "provisioning",
            Stage::Agent => "the agent run",
            Stage::Collecting => "collecting the result",
            Stage::Push => "the push",
            Stage::PullRequest => "the pull request",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Why a dispatch ended without a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DispatchError {
    #[error("{stage} failed: {detail}")]
    Failed { stage: Stage, detail: SanitizedText },
    #[error("cancelled")]
    Cancelled,
    #[error("timed out after {after_secs} s")]
    TimedOut { after_secs: u64 },
    #[error("cost ceiling hit: ${spent_usd:.2} spent of ${ceiling_usd:.2}")]
    CostCeilingHit { spent_usd: f64, ceiling_usd: f64 },
}

pub type Result<T> = std::result::Result<T, DispatchError>;

impl DispatchError {
    /// A failure at `stage`, described by `error`'s message after it passed through `sanitizer`.
    pub fn failed(
        sanitizer: &Arc<TokenSanitizer>,
        stage: Stage,
        error: &dyn std::error::Error,
    ) -> DispatchError {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        DispatchError::Failed {
            stage,
            detail: sanitizer.sanitize(&message),
        }
    }

    /// The state-machine input this error feeds.
    pub fn input(&self) -> Input {
        match self {
            DispatchError::Failed { .. } => Input::Fail,
            DispatchError::Cancelled => Input::Cancel,
            DispatchError::TimedOut { .. } => Input::TimeOut,
            DispatchError::CostCeilingHit { .. } => Input::CostCeilingReached,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::dispatch::sanitize::KnownValue;

    #[derive(Debug, thiserror::Error)]
    #[error("push to https://x-access-token:{0}@git.example.com/o/r.git rejected")]
    struct LeakyError(String, #[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("server said: bad credential {0}")]
    struct Inner(String);

    #[test]
    fn the_message_and_its_causes_are_credential_free() {
        let canary = format!(
            "canary{}",
            crate::dispatch::credential::random_token(24).unwrap()
        );
        let sanitizer = Arc::new(
            TokenSanitizer::with_known_values(vec![
                KnownValue::new("primary-token", &canary).unwrap(),
            ])
            .unwrap(),
        );
        let leaky = LeakyError(canary.clone(), Inner(canary.clone()));
        for stage in [
            Stage::Preflight,
            Stage::Provisioning,
            Stage::Agent,
            Stage::Collecting,
            Stage::Push,
            Stage::PullRequest,
        ] {
            let error = DispatchError::failed(&sanitizer, stage, &leaky);
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains(&canary), "{shown}");
            assert!(
                shown.contains("server said: bad credential [REDACTED:primary-token]"),
                "{shown}"
            );
            assert_eq!(error.input(), Input::Fail);
        }
    }

    #[test]
    fn each_ending_maps_to_its_input() {
        assert_eq!(DispatchError::Cancelled.input(), Input::Cancel);
        assert_eq!(
            DispatchError::TimedOut { after_secs: 1 }.input(),
            Input::TimeOut
        );
        let ceiling = DispatchError::CostCeilingHit {
            spent_usd: 2.0,
            ceiling_usd: 2.0,
        };
        assert_eq!(ceiling.input(), Input::CostCeilingReached);
        assert_eq!(
            ceiling.to_string(),
            "cost ceiling hit: $2.00 spent of $2.00"
        );
    }
}
