//! How a dispatch ends: the sandbox torn down exactly once with each step reported (a failure is a
//! warning and stays journaled for the sweep, never the outcome), then the terminal phase, the
//! result file and `finished`.

use std::time::{Duration, Instant};

use chrono::Utc;

use crate::dispatch::error::DispatchError;
use crate::dispatch::record::RunResult;
use crate::dispatch::sandbox::{DispatchSandbox, TeardownReport};
use stet_protocol::event::{EventKind, TeardownStepReport};
use stet_protocol::state::Phase;

use super::publisher::millis;
use super::{Completion, Dispatch};

impl Dispatch {
    pub(super) async fn teardown(&mut self, sandbox: &DispatchSandbox) {
        self.stop_gateway().await;
        let started = Instant::now();
        let report = sandbox.teardown().await;
        self.report_teardown(&report, started.elapsed()).await;
    }

    /// Publishes a teardown: each step as a `torn_down` event, each failure as a warning.
    pub(super) async fn report_teardown(&mut self, report: &TeardownReport, took: Duration) {
        let mut steps = Vec::with_capacity(report.steps.len());
        for step in &report.steps {
            let failure = step.failure.as_deref().map(|f| self.sanitize(f));
            if let Some(failure) = &failure {
                self.gathered.teardown_failures.push(failure.clone());
            }
            steps.push(TeardownStepReport {
                resource: self.sanitize(&step.resource.to_string()),
                failure,
            });
        }
        for extra in [&report.journal_failure, &report.directory_failure]
            .into_iter()
            .flatten()
        {
            self.gathered.teardown_failures.push(self.sanitize(extra));
        }
        self.publisher
            .emit(EventKind::TornDown {
                steps,
                millis: millis(took),
            })
            .await;
        for failure in self.gathered.teardown_failures.clone() {
            let message = self.sanitize(&format!(
                "teardown: {}; it stays journaled and `stet sweep` retries it",
                failure.as_str()
            ));
            self.publisher.emit(EventKind::Warning { message }).await;
        }
    }

    /// Publishes the terminal phase (when the workflow did not reach it itself), writes the result
    /// and publishes `finished`.
    pub(super) async fn end(&mut self, outcome: Result<Completion, DispatchError>) -> Phase {
        let reason = match outcome {
            Ok(ending) => ending.reason,
            Err(error) => {
                let mut said = error.to_string();
                if let (DispatchError::Cancelled(_), Some(cause)) =
                    (&error, self.control.cause.get())
                {
                    said = format!("{said}: {cause}");
                }
                let reason = self.sanitize(&said);
                if !self.publisher.phase().is_terminal() {
                    self.publisher
                        .advance(error.input(), Some(reason.clone()))
                        .await;
                }
                Some(reason)
            }
        };
        // A value registered after the reason was written (the agent's own keys) is masked too.
        let reason = reason.map(|reason| self.sanitize(reason.as_str()));
        let phase = self.publisher.phase();
        let exit_code = phase.exit_code().unwrap_or(1);
        let now = Utc::now();
        let result = RunResult {
            dispatch: self.run.id,
            brief: self.run.brief.id.clone(),
            outcome: phase,
            exit_code,
            reason: reason.clone(),
            started: self.started.0,
            ended: now,
            phases: self.publisher.take_spans(),
            harness: self.parts.harness.name().to_owned(),
            image: self.parts.settings.image.to_string(),
            branch: self.sanitize(&self.gathered.branch),
            base: self.gathered.base.clone(),
            commit: self.gathered.commit.clone(),
            reference: self.gathered.reference.clone(),
            pull_request: self.gathered.pull_request.as_ref().map(|(n, _)| *n),
            pull_request_url: self.gathered.pull_request.as_ref().map(|(_, u)| u.clone()),
            input_tokens: self.meter.input_tokens,
            output_tokens: self.meter.output_tokens,
            cost_usd: self.meter.cost_usd,
            redactions: self.publisher.redactions(),
            teardown_failures: self.gathered.teardown_failures.clone(),
        };
        if let Some(record) = self.publisher.record()
            && let Err(error) = record.write_result(&result)
        {
            tracing::error!(dispatch = %self.run.id, %error, "writing the run result");
        }
        self.publisher
            .emit(EventKind::Finished {
                outcome: phase,
                exit_code,
                reason,
            })
            .await;
        phase
    }
}
