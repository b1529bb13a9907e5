//! `DispatchError`: why a dispatch stopped before its natural end, in words that are safe to show
//! anywhere.
//!
//! Credential-free by construction (ADR-0018, Confirmation): a failure's words are a
//! [`SanitizedText`], made by passing the message through the sanitizer when the error is made; the
//! other endings are stet's own words and numbers.

use std::fmt;
use std::time::Duration;

use stet_protocol::state::{Input, Phase};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// Where a cancel caught the dispatch, when that changes what the person must know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelPoint {
    /// Waiting for a concurrency slot before preflight.
    Queued,
    /// During a phase of the workflow.
    During(Phase),
    /// After the push returned: the branch is on the remote, no pull request was opened.
    AfterPush,
    /// Approved, waiting for a concurrency slot to push.
    WaitingForSlot,
    /// At review, before a decision.
    AwaitingApproval,
}

/// Why a dispatch ended without going all the way.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DispatchError {
    /// A step failed; the words say which and why.
    Failed(SanitizedText),
    Cancelled(CancelPoint),
    TimedOut {
        after: Duration,
    },
    /// The model cost reached the ceiling, as the gateway's ledger settled it (`refused`: the
    /// gateway refuses further requests) or as the agent reported it.
    CostCeilingHit {
        spent_usd: f64,
        ceiling_usd: f64,
        /// What the request refused for the ceiling needed at least, when a refusal reached it.
        needed_usd: Option<f64>,
        refused: bool,
    },
}

impl DispatchError {
    /// A failure described by `what`, after it passed through `sanitizer`.
    pub(crate) fn failed(
        sanitizer: &std::sync::Arc<TokenSanitizer>,
        what: impl fmt::Display,
    ) -> Self {
        DispatchError::Failed(sanitizer.sanitize(&what.to_string()))
    }

    /// The state-machine input this ending feeds.
    pub(crate) fn input(&self) -> Input {
        match self {
            DispatchError::Failed(_) => Input::Fail,
            DispatchError::Cancelled(_) => Input::Cancel,
            DispatchError::TimedOut { .. } => Input::TimeOut,
            DispatchError::CostCeilingHit { .. } => Input::CostCeilingReached,
        }
    }
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DispatchError::Failed(what) => f.write_str(what.as_str()),
            DispatchError::Cancelled(point) => match point {
                CancelPoint::Queued => f.write_str("cancelled while queued"),
                CancelPoint::During(phase) => write!(f, "cancelled during {phase}"),
                CancelPoint::AfterPush => f.write_str(
                    "cancelled during pushing; the branch was pushed, no pull request was opened",
                ),
                CancelPoint::WaitingForSlot => {
                    f.write_str("cancelled while waiting for a slot to push")
                }
                CancelPoint::AwaitingApproval => f.write_str("cancelled while awaiting approval"),
            },
            DispatchError::TimedOut { after } => write!(
                f,
                "the dispatch ran past its wall-clock timeout of {}",
                spoken_duration(*after)
            ),
            DispatchError::CostCeilingHit {
                spent_usd,
                ceiling_usd,
                needed_usd: Some(needed_usd),
                ..
            } => write!(
                f,
                "the ceiling of ${ceiling_usd:.4} leaves too little for the next model request (${spent_usd:.4} spent, ${needed_usd:.4} needed at least); the gateway refuses further requests"
            ),
            DispatchError::CostCeilingHit {
                spent_usd,
                ceiling_usd,
                needed_usd: None,
                refused,
            } => {
                write!(
                    f,
                    "the model cost reached ${spent_usd:.4}, at or past the ceiling of ${ceiling_usd:.4}"
                )?;
                if *refused {
                    f.write_str("; the gateway refuses further requests")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DispatchError {}

/// A duration the way a person reads it: `90 s` is `1 min 30 s`.
fn spoken_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s} s"),
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use stet_sanitize::sanitize::KnownValue;

    #[test]
    fn a_failure_is_credential_free_whatever_its_message_held() {
        let canary = format!("canary{}", crate::credential::random_token(24).unwrap());
        let sanitizer = Arc::new(
            TokenSanitizer::with_known_values(vec![
                KnownValue::new("primary-token", &canary).unwrap(),
            ])
            .unwrap(),
        );
        let error = DispatchError::failed(
            &sanitizer,
            format_args!(
                "push to https://x-access-token:{canary}@git.example.com/o/r.git rejected: bad credential {canary}"
            ),
        );
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(&canary), "{shown}");
        assert!(shown.contains("[REDACTED:primary-token]"), "{shown}");
        assert_eq!(error.input(), Input::Fail);
    }

    #[test]
    fn each_ending_maps_to_its_input_and_says_where_it_stopped() {
        let cases = [
            (
                DispatchError::Cancelled(CancelPoint::During(Phase::Running)),
                Input::Cancel,
                "cancelled during running",
            ),
            (
                DispatchError::Cancelled(CancelPoint::AfterPush),
                Input::Cancel,
                "cancelled during pushing; the branch was pushed, no pull request was opened",
            ),
            (
                DispatchError::TimedOut {
                    after: Duration::from_secs(90),
                },
                Input::TimeOut,
                "the dispatch ran past its wall-clock timeout of 1 min 30 s",
            ),
            (
                DispatchError::CostCeilingHit {
                    spent_usd: 0.0123,
                    ceiling_usd: 0.01,
                    needed_usd: None,
                    refused: true,
                },
                Input::CostCeilingReached,
                "the model cost reached $0.0123, at or past the ceiling of $0.0100; the gateway refuses further requests",
            ),
            (
                DispatchError::CostCeilingHit {
                    spent_usd: 0.0,
                    ceiling_usd: 0.001,
                    needed_usd: Some(0.0013),
                    refused: true,
                },
                Input::CostCeilingReached,
                "the ceiling of $0.0010 leaves too little for the next model request ($0.0000 spent, $0.0013 needed at least); the gateway refuses further requests",
            ),
        ];
        for (error, input, words) in cases {
            assert_eq!(error.input(), input);
            assert_eq!(error.to_string(), words);
        }
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(spoken_duration(Duration::from_secs(45)), "45 s");
        assert_eq!(spoken_duration(Duration::from_secs(120)), "2 min");
        assert_eq!(spoken_duration(Duration::from_secs(3601)), "60 min 1 s");
    }
}
