//! What becomes of a collected result ([`Handover`]): kept at its ref, pushed at once, or held at
//! review for a person's decision (the concurrency slot given up meanwhile); then the host-side push
//! and the pull request with its provenance. A result holding a value stet handles is never pushed.

use std::sync::Arc;

use crate::dispatch::error::{CancelPoint, DispatchError};
use crate::dispatch::gate::GateReport;
use crate::dispatch::order::{Decision, Delivery, result_ref};
use crate::dispatch::sandbox::DispatchSandbox;
use crate::forge::{EgressProvenance, Preflight, Provenance, PullRequestDraft, PushBranch};
use crate::runtime::NetworkPolicy;
use stet_protocol::event::{EventKind, PullRequestAction};
use stet_protocol::state::Input;
use stet_sanitize::branch::CommitSha;

use super::collect::{Collected, MAX_NAMED};
use super::ending::Completion;
use super::steering::Steering;

/// The most hosts the pull request's provenance names (the run record has them all).
const MAX_PROVENANCE_HOSTS: usize = 20;

/// Covers what follows `collecting`: nothing to push, kept, or `awaiting_approval`, then `pushing`
/// and `opening_pr` to `done`; hands the [`Completion`] to [`Ending`](super::ending::Ending).
pub(super) struct Handover<'d> {
    steering: &'d mut Steering,
    sandbox: &'d DispatchSandbox,
    preflight: &'d Preflight,
}

impl<'d> Handover<'d> {
    pub(super) fn new(
        steering: &'d mut Steering,
        sandbox: &'d DispatchSandbox,
        preflight: &'d Preflight,
    ) -> Handover<'d> {
        Handover {
            steering,
            sandbox,
            preflight,
        }
    }

    /// Keeps, pushes or holds for review the collected result, as the dispatch's delivery says and
    /// the review gate allows; `None`: the agent changed nothing.
    pub(super) async fn hand_over(
        mut self,
        collected: Option<Collected>,
    ) -> Result<Completion, DispatchError> {
        let Some(Collected { commit, gate }) = collected else {
            self.steering
                .publisher
                .advance(Input::NothingToPush, None)
                .await;
            return Ok(Completion {
                reason: Some(
                    self.steering
                        .sanitize("the agent changed nothing; there is nothing to push"),
                ),
            });
        };
        let known = gate.known_values();
        if !known.is_empty() {
            // Whatever the delivery: no decision at review can push it.
            return Err(self.steering.fail(format!(
                "the result holds a value stet itself handles ({}); it is never pushed. It stays only at {} in this repository: remove it with `git update-ref -d {}` and rotate the value",
                joined(&known),
                result_ref(self.steering.run.id),
                result_ref(self.steering.run.id)
            )));
        }
        match self.steering.run.delivery {
            Delivery::Keep => {
                let mut reason = format!(
                    "the result is kept at {} in the repository and was not pushed (run with --push to push it)",
                    result_ref(self.steering.run.id)
                );
                if gate.needs_approval() {
                    reason.push_str(&format!("; {}", needs_approval(&gate)));
                }
                let reason = self.steering.sanitize(&reason);
                self.steering
                    .publisher
                    .advance(Input::Kept, Some(reason.clone()))
                    .await;
                return Ok(Completion {
                    reason: Some(reason),
                });
            }
            Delivery::Push if gate.needs_approval() => {
                return Err(self.steering.fail(format!(
                    "{}; it was kept at {} and not pushed: review it and push it from the theater",
                    needs_approval(&gate),
                    result_ref(self.steering.run.id)
                )));
            }
            Delivery::Push => {
                self.steering
                    .publisher
                    .advance(Input::Collected { review: false }, None)
                    .await;
            }
            Delivery::Review => {
                if let Some(ending) = self.review().await? {
                    return Ok(ending);
                }
            }
        }
        self.deliver(&commit).await
    }

    /// Waits at `awaiting_approval` for a person's decision, without holding a concurrency slot.
    /// `None`: approved, and a slot to push is held again; an ending: discarded.
    async fn review(&mut self) -> Result<Option<Completion>, DispatchError> {
        // A decision sent before there was anything to review is not a decision about it.
        while self.steering.control.decisions.try_recv().is_ok() {}
        self.steering
            .publisher
            .advance(Input::Collected { review: true }, None)
            .await;
        // A person may take their time: the slot goes to the next queued dispatch meanwhile.
        self.steering.permit = None;
        let decision = tokio::select! {
            biased;
            () = self.steering.control.cancel.cancelled() => None,
            decision = self.steering.control.decisions.recv() => decision,
        };
        match decision {
            Some(Decision::Approve) => {
                let slots = Arc::clone(&self.steering.control.slots);
                self.steering.permit = tokio::select! {
                    biased;
                    () = self.steering.control.cancel.cancelled() => None,
                    permit = slots.acquire_owned() => permit.ok(),
                };
                if self.steering.permit.is_none() {
                    return Err(DispatchError::Cancelled(CancelPoint::WaitingForSlot));
                }
                self.steering.publisher.advance(Input::Approved, None).await;
                Ok(None)
            }
            Some(Decision::Discard) => {
                let reason = self.steering.sanitize("the result was discarded at review");
                self.steering
                    .publisher
                    .advance(Input::Discarded, Some(reason.clone()))
                    .await;
                Ok(Some(Completion {
                    reason: Some(reason),
                }))
            }
            None => Err(DispatchError::Cancelled(CancelPoint::AwaitingApproval)),
        }
    }

    /// Pushes the result and opens or updates the pull request, host side.
    async fn deliver(&mut self, commit: &CommitSha) -> Result<Completion, DispatchError> {
        let (sandbox, preflight) = (self.sandbox, self.preflight);
        let Some(credential) = sandbox.credential() else {
            return Err(self
                .steering
                .fail("the dispatch has no scoped credential to push with".to_owned()));
        };
        let forge = Arc::clone(&self.steering.parts.forge);
        // A push in flight is not interrupted: a cancel takes effect once it returned.
        let pushed = forge
            .push_branch(PushBranch {
                repository: &self.steering.parts.repository,
                target: &self.steering.run.brief.target,
                preflight,
                commit,
                branch: &self.steering.gathered.branch,
                credential,
            })
            .await
            .map_err(|error| self.steering.fail(format!("push: {error}")))?;
        let event = EventKind::Pushed {
            branch: self.steering.sanitize(&pushed.branch),
            sha: pushed.commit.clone(),
            remote: self.steering.sanitize(&preflight.push_url),
        };
        self.steering.publisher.emit(event).await;
        if self.steering.control.cancel.is_cancelled() {
            return Err(DispatchError::Cancelled(CancelPoint::AfterPush));
        }
        self.steering.publisher.advance(Input::Pushed, None).await;
        let provenance = self.provenance(preflight, commit, credential.kind());
        let draft = PullRequestDraft::compose(
            &self.steering.run.brief,
            &self.steering.gathered.branch,
            self.steering.gathered.summary.as_deref(),
            &provenance,
            &self.steering.sanitizer(),
        );
        let target = &self.steering.run.brief.target;
        let (opened, action) = match &preflight.head {
            Some(head) => (
                forge.update_pull_request(target, head.number, &draft).await,
                PullRequestAction::Updated,
            ),
            None => (
                forge.open_pull_request(target, &draft).await,
                PullRequestAction::Opened,
            ),
        };
        let pull_request = opened.map_err(|error| {
            self.steering.fail(format!(
                "the branch was pushed but the pull request failed: {error}"
            ))
        })?;
        let url = self.steering.sanitize(&pull_request.url);
        self.steering
            .publisher
            .emit(EventKind::PullRequest {
                action,
                number: pull_request.number,
                url: url.clone(),
            })
            .await;
        self.steering.gathered.pull_request = Some((pull_request.number, url));
        self.steering
            .publisher
            .advance(Input::PullRequestReady, None)
            .await;
        Ok(Completion::default())
    }

    fn provenance(
        &self,
        preflight: &Preflight,
        commit: &CommitSha,
        credential_kind: &str,
    ) -> Provenance {
        let harness = &self.steering.parts.harness;
        let has_usage = self.steering.meter.model.is_some();
        Provenance {
            dispatch: self.steering.run.id,
            image: self.steering.parts.settings.image.to_string(),
            harness: harness.name().to_owned(),
            harness_version: harness.version(),
            model: self
                .steering
                .meter
                .model
                .as_ref()
                .map(|m| m.as_str().to_owned())
                .or_else(|| harness.model()),
            input_tokens: has_usage.then_some(self.steering.meter.input_tokens),
            output_tokens: has_usage.then_some(self.steering.meter.output_tokens),
            cost_usd: has_usage.then_some(self.steering.meter.cost_usd),
            peak_reserved_usd: (self.steering.meter.peak_reserved_usd > 0.0)
                .then_some(self.steering.meter.peak_reserved_usd),
            network: match self.steering.parts.settings.network {
                NetworkPolicy::None => "none".to_owned(),
                NetworkPolicy::Bridge => "bridge".to_owned(),
            },
            egress: self.steering.gathered.egress.as_ref().map(|report| {
                let reached = report.hosts_reached();
                EgressProvenance {
                    hosts_not_listed: reached.len().saturating_sub(MAX_PROVENANCE_HOSTS),
                    hosts: reached.into_iter().take(MAX_PROVENANCE_HOSTS).collect(),
                    uploaded: report.uploaded,
                    downloaded: report.downloaded,
                    refused: report.refused,
                }
            }),
            credential_kind: credential_kind.to_owned(),
            redactions: self.steering.publisher.redactions(),
            duration: self.steering.started.1.elapsed(),
            base: preflight.base_sha.clone(),
            commit: commit.clone(),
        }
    }
}

/// What the review gate holds a result for, as one sentence.
fn needs_approval(gate: &GateReport) -> String {
    let mut parts = Vec::new();
    if !gate.held.is_empty() {
        parts.push(format!(
            "it changes {}",
            joined(&gate.held.iter().collect::<Vec<_>>())
        ));
    }
    let shaped = gate.shaped_secrets();
    if !shaped.is_empty() {
        parts.push(format!(
            "it holds what looks like a secret: {}",
            joined(&shaped)
        ));
    }
    if let Some(uploads) = &gate.uploads {
        parts.push(uploads.to_string());
    }
    format!("the result needs a person's approval: {}", parts.join("; "))
}

fn joined<T: std::fmt::Display>(items: &[&T]) -> String {
    let mut named: Vec<String> = items
        .iter()
        .take(MAX_NAMED)
        .map(ToString::to_string)
        .collect();
    if items.len() > MAX_NAMED {
        named.push(format!(
            "and {} more (the collected event lists the first {})",
            items.len() - MAX_NAMED,
            stet_protocol::event::MAX_LISTED
        ));
    }
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_is_cut_with_a_count() {
        let items: Vec<String> = (0..20).map(|n| format!("f{n}")).collect();
        let items: Vec<&String> = items.iter().collect();
        let text = joined(&items);
        assert!(text.starts_with("f0, f1, "), "{text}");
        assert!(text.contains("f11, and 8 more"), "{text}");
        assert!(!text.contains("f12"), "{text}");
    }

    #[test]
    fn what_needs_approval_names_each_path_and_finding_with_its_rule() {
        use crate::dispatch::gate::{HeldPath, SecretFinding};
        let gate = GateReport {
            held: vec![
                HeldPath {
                    path: "stet.toml".into(),
                    reasons: vec!["stet's own configuration".into()],
                },
                HeldPath {
                    path: "bin/run".into(),
                    reasons: vec!["newly executable".into()],
                },
            ],
            secrets: vec![SecretFinding {
                path: "app.env".into(),
                line: Some(2),
                kind: "github-token".into(),
                known: false,
            }],
            uploads: Some(crate::dispatch::gate::UploadHold {
                uploaded: 5,
                threshold: 4,
                hosts: vec!["paste.example.org:443 (5 B)".into()],
            }),
        };
        assert_eq!(
            needs_approval(&gate),
            "the result needs a person's approval: it changes stet.toml (stet's own configuration), bin/run (newly executable); it holds what looks like a secret: app.env line 2 (github-token); the agent uploaded 5 bytes through the egress proxy, past the review threshold of 4 (network.review_upload_bytes), to paste.example.org:443 (5 B)"
        );
    }
}
