//! How a dispatch ends ([`Ending`]): the sandbox torn down exactly once with each step reported (a
//! failure is a warning and stays journaled for the sweep, never the outcome), then the terminal
//! phase, the result file and `finished`.

use std::time::{Duration, Instant};

use chrono::Utc;

use crate::dispatch::error::DispatchError;
use crate::dispatch::record::RunResult;
use crate::dispatch::sandbox::{DispatchSandbox, TeardownReport};
use stet_protocol::event::{EventKind, TeardownStepReport};
use stet_protocol::state::Phase;
use stet_sanitize::sanitize::SanitizedText;

use super::egress::EgressLink;
use super::model::ModelLink;
use super::publisher::millis;
use super::steering::Steering;

/// How a dispatch ended when it went as far as it could: the reason, if it stopped short of a pull
/// request (kept, discarded, nothing to push).
#[derive(Debug, Default)]
pub(super) struct Completion {
    pub(super) reason: Option<SanitizedText>,
}

/// Covers the teardown and the terminal phase: takes the outcome, a [`Completion`] or the error that
/// stopped the dispatch, and hands the terminal [`Phase`] back to the dispatcher.
pub(super) struct Ending<'d> {
    steering: &'d mut Steering,
}

impl<'d> Ending<'d> {
    pub(super) fn new(steering: &'d mut Steering) -> Ending<'d> {
        Ending { steering }
    }

    /// Tears the sandbox down, the model gateway and the egress proxy first if they still run, and
    /// reports each step.
    pub(super) async fn teardown(
        &mut self,
        sandbox: &DispatchSandbox,
        model: &mut ModelLink,
        egress: &mut EgressLink,
    ) {
        model.stop(self.steering).await;
        egress.stop(self.steering).await;
        let started = Instant::now();
        let report = sandbox.teardown().await;
        self.report_teardown(&report, started.elapsed()).await;
    }

    /// Publishes a teardown: each step as a `torn_down` event, each failure as a warning.
    pub(super) async fn report_teardown(&mut self, report: &TeardownReport, took: Duration) {
        let mut steps = Vec::with_capacity(report.steps.len());
        for step in &report.steps {
            let failure = step.failure.as_deref().map(|f| self.steering.sanitize(f));
            if let Some(failure) = &failure {
                self.steering
                    .gathered
                    .teardown_failures
                    .push(failure.clone());
            }
            steps.push(TeardownStepReport {
                resource: self.steering.sanitize(&step.resource.to_string()),
                failure,
            });
        }
        for extra in [&report.journal_failure, &report.directory_failure]
            .into_iter()
            .flatten()
        {
            self.steering
                .gathered
                .teardown_failures
                .push(self.steering.sanitize(extra));
        }
        self.steering
            .publisher
            .emit(EventKind::TornDown {
                steps,
                millis: millis(took),
            })
            .await;
        for failure in self.steering.gathered.teardown_failures.clone() {
            let message = self.steering.sanitize(&format!(
                "teardown: {}; it stays journaled and `stet sweep` retries it",
                failure.as_str()
            ));
            self.steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
    }

    /// Publishes the terminal phase (when the workflow did not reach it itself), writes the result
    /// and publishes `finished`.
    pub(super) async fn end(self, outcome: Result<Completion, DispatchError>) -> Phase {
        let reason = match outcome {
            Ok(ending) => ending.reason,
            Err(error) => {
                let mut said = error.to_string();
                if let (DispatchError::Cancelled(_), Some(cause)) =
                    (&error, self.steering.control.cause.get())
                {
                    said = format!("{said}: {cause}");
                }
                let reason = self.steering.sanitize(&said);
                if !self.steering.publisher.phase().is_terminal() {
                    self.steering
                        .publisher
                        .advance(error.input(), Some(reason.clone()))
                        .await;
                }
                Some(reason)
            }
        };
        // A value registered after the reason was written (the agent's own keys) is masked too.
        let reason = reason.map(|reason| self.steering.sanitize(reason.as_str()));
        let phase = self.steering.publisher.phase();
        let exit_code = phase.exit_code().unwrap_or(1);
        let now = Utc::now();
        let result = RunResult {
            dispatch: self.steering.run.id,
            brief: self.steering.run.brief.id.clone(),
            outcome: phase,
            exit_code,
            reason: reason.clone(),
            started: self.steering.started.0,
            ended: now,
            phases: self.steering.publisher.take_spans(),
            harness: self.steering.parts.harness.name().to_owned(),
            image: self.steering.parts.settings.image.to_string(),
            branch: self.steering.sanitize(&self.steering.gathered.branch),
            base: self.steering.gathered.base.clone(),
            commit: self.steering.gathered.commit.clone(),
            reference: self.steering.gathered.reference.clone(),
            pull_request: self
                .steering
                .gathered
                .pull_request
                .as_ref()
                .map(|(n, _)| *n),
            pull_request_url: self
                .steering
                .gathered
                .pull_request
                .as_ref()
                .map(|(_, u)| u.clone()),
            input_tokens: self.steering.meter.input_tokens,
            output_tokens: self.steering.meter.output_tokens,
            cost_usd: self.steering.meter.cost_usd,
            redactions: self.steering.publisher.redactions(),
            teardown_failures: self.steering.gathered.teardown_failures.clone(),
        };
        if let Some(record) = self.steering.publisher.record()
            && let Err(error) = record.write_result(&result)
        {
            tracing::error!(dispatch = %self.steering.run.id, %error, "writing the run result");
        }
        self.steering
            .publisher
            .emit(EventKind::Finished {
                outcome: phase,
                exit_code,
                reason,
            })
            .await;
        phase
    }
}
