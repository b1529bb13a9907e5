//! One dispatch from `queued` to its outcome (DESIGN §4, ADR-0018's guaranteed-cleanup pattern), as
//! a sequence of steps, each a type in a file of its own that covers some phases of the state machine
//! and hands what it made to the next: [`Admission`] (`queued`), [`TargetCheck`] (`preflight`, no
//! side effects), [`Provisioning`] (stops cleanly when told to), [`AgentRun`] (`running`, raced by
//! cancel, the wall-clock timeout, the disk bound and the cost ceiling of the [`meter`]; the model
//! gateway is its [`ModelLink`]), [`Collect`] (the trusted import and the review gate), [`Handover`]
//! (the review, the host-side push and the pull request) and [`Ending`]. Each step borrows the
//! dispatch's [`Steering`]: every event goes through its [`publisher`]. Once provisioning
//! succeeded, the later steps run with their outcome captured, teardown runs exactly once, and a
//! teardown failure is a warning that never replaces the outcome.

mod admission;
mod agent;
mod collect;
mod delivery;
mod egress;
mod ending;
mod meter;
mod model;
mod preflight;
mod provision;
mod publisher;
mod steering;
mod stream;

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::error::DispatchError;
use crate::dispatch::order::{DispatchControl, DispatchRun};
use crate::dispatch::record::RunRecord;
use crate::dispatch::salvage::SalvagePlan;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::dispatch::service::{DispatchContext, DispatchService};
use crate::forge::Preflight;
use crate::harness::{HarnessPlan, ModelAccess, PLACEHOLDER_KEY};
use stet_protocol::event::Event;
use stet_protocol::state::Phase;

use admission::{Admission, Timeout};
use agent::AgentRun;
use collect::Collect;
use delivery::Handover;
use egress::EgressLink;
use ending::{Completion, Ending};
use meter::Meter;
use model::ModelLink;
use preflight::TargetCheck;
use provision::Provisioning;
use publisher::Publisher;
use steering::{Gathered, Steering};

/// Runs one dispatch to its end, publishing every event to `events` and its run record, and returns
/// its terminal phase. Never panics on a dispatch error: every error becomes the outcome's reason.
pub async fn run(
    service: DispatchService,
    parts: Arc<DispatchContext>,
    dispatch: DispatchRun,
    events: mpsc::Sender<Event>,
    control: DispatchControl,
) -> Phase {
    Dispatch::new(service, parts, dispatch, events, control)
        .run()
        .await
}

/// One dispatch in flight: its steering, lent to each step in turn, and what outlives a single step.
struct Dispatch {
    steering: Steering,
    /// Why the run record could not be created, if it could not.
    record_error: Option<String>,
    /// The channels the sandbox's relay serves (the model gateway's, when one runs).
    channels: DispatchChannels,
    model: ModelLink,
    egress: EgressLink,
}

impl Dispatch {
    fn new(
        service: DispatchService,
        parts: Arc<DispatchContext>,
        run: DispatchRun,
        events: mpsc::Sender<Event>,
        control: DispatchControl,
    ) -> Dispatch {
        let channels = DispatchChannels::for_dispatch(
            parts.settings.gateway.is_some(),
            parts.settings.egress.is_some(),
        );
        let access = channels.model_url().map(|base_url| ModelAccess {
            base_url,
            placeholder_key: PLACEHOLDER_KEY.to_owned(),
        });
        let (record, record_error) =
            match RunRecord::create(service.state_dir(), run.id, parts.settings.max_record_bytes) {
                Ok(record) => (Some(record), None),
                Err(error) => {
                    tracing::error!(dispatch = %run.id, %error, "cannot create the run record");
                    (None, Some(error.to_string()))
                }
            };
        let stop = control.cancel.child_token();
        let branch = planned_branch(&run);
        let now = (Utc::now(), Instant::now());
        let steering = Steering {
            publisher: Publisher::new(run.id, run.brief.id.clone(), events, record, now),
            meter: Meter::new(
                parts.settings.cost_ceiling_usd,
                parts.settings.gateway.is_some(),
            ),
            gathered: Gathered {
                branch,
                ..Gathered::default()
            },
            started: now,
            service,
            parts,
            run,
            control,
            stop,
            expired: CancellationToken::new(),
            permit: None,
        };
        Dispatch {
            steering,
            record_error,
            channels,
            model: ModelLink::new(access),
            egress: EgressLink::default(),
        }
    }

    /// The steps in order.
    async fn run(mut self) -> Phase {
        let admitted = Admission::new(&mut self.steering)
            .admit(self.record_error.take())
            .await;
        let timeout = match admitted {
            Ok(timeout) => timeout,
            Err(error) => return self.end(Err(error)).await,
        };
        let checked = TargetCheck::new(&mut self.steering)
            .check(self.model.access.as_ref())
            .await;
        let (preflight, plan) = match checked {
            Ok(checked) => checked,
            Err(error) => return self.end(Err(error)).await,
        };
        let provisioned = Provisioning::new(&mut self.steering, &self.channels)
            .provision(&preflight)
            .await;
        let sandbox = match provisioned {
            Ok(sandbox) => sandbox,
            Err(error) => return self.end(Err(error)).await,
        };
        let outcome = self
            .after_provisioning(&sandbox, &preflight, plan, &timeout)
            .await;
        if let Err(error) = &outcome {
            let reason = self.steering.sanitize(&error.to_string());
            self.steering
                .publisher
                .advance(error.input(), Some(reason))
                .await;
        }
        let mut ending = Ending::new(&mut self.steering);
        ending
            .teardown(&sandbox, &mut self.model, &mut self.egress)
            .await;
        ending.end(outcome).await
    }

    /// The steps from a provisioned sandbox to the outcome, teardown aside.
    async fn after_provisioning(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
        plan: HarnessPlan,
        timeout: &Timeout,
    ) -> Result<Completion, DispatchError> {
        Provisioning::new(&mut self.steering, &self.channels)
            .arm(sandbox)
            .await?;
        self.plan_salvage(sandbox, preflight).await?;
        let links = agent::Links {
            model: &mut self.model,
            egress: &mut self.egress,
        };
        let summary = AgentRun::new(&mut self.steering, links, &self.channels, sandbox)
            .run(plan)
            .await?;
        self.steering.gathered.summary = summary;
        let collected = Collect::new(&mut self.steering, sandbox)
            .collect(preflight)
            .await?;
        timeout.disarm();
        Handover::new(&mut self.steering, sandbox, preflight)
            .hand_over(collected)
            .await
    }

    /// Journals how the sweep salvages the agent's work should stet die while the agent runs.
    async fn plan_salvage(
        &mut self,
        sandbox: &DispatchSandbox,
        preflight: &Preflight,
    ) -> Result<(), DispatchError> {
        let message = Collect::new(&mut self.steering, sandbox).commit_message();
        let settings = &self.steering.parts.settings;
        let plan = SalvagePlan::new(
            &self.steering.parts.repository,
            preflight.parent(),
            message.as_str().lines().next().unwrap_or_default(),
            &settings.agent,
            settings.import,
            &settings.protected,
        );
        sandbox.plan_salvage(plan).await.map_err(|failure| {
            self.steering.fail(format!(
                "the journal cannot record how to salvage the agent's work after a crash: {failure}"
            ))
        })
    }

    /// Ends a dispatch that stopped before it had a sandbox.
    async fn end(mut self, outcome: Result<Completion, DispatchError>) -> Phase {
        Ending::new(&mut self.steering).end(outcome).await
    }
}

/// The branch a dispatch pushes to: the brief's, or `stet/<brief id>-<8 hex of the dispatch id>`. For
/// an existing pull request it is replaced by the head branch the forge reports.
fn planned_branch(run: &DispatchRun) -> String {
    match (&run.brief.target.branch, run.brief.target.pr) {
        (Some(branch), _) => branch.clone(),
        (None, Some(number)) => format!("(the head branch of pull request #{number})"),
        (None, None) => {
            let id = run.id.to_string();
            let short: String = id
                .trim_start_matches("stet-dispatch-")
                .chars()
                .take(8)
                .collect();
            format!("stet/{}-{short}", run.brief.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brief::Brief;
    use crate::dispatch::order::Delivery;
    use std::path::Path;
    use stet_protocol::event::DispatchId;
    use stet_sanitize::branch::BranchValidator;

    #[test]
    fn default_branches_are_unique_per_dispatch_and_valid() {
        let brief = Brief::parse(
            "fix-login",
            Path::new("fix-login.toml"),
            "title = \"t\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n[[items]]\ntext = \"x\"\n",
        )
        .unwrap();
        let run = |brief: &Brief| DispatchRun {
            id: DispatchId::new(),
            brief: brief.clone(),
            delivery: Delivery::Keep,
        };
        let (a, b) = (planned_branch(&run(&brief)), planned_branch(&run(&brief)));
        assert_ne!(a, b);
        assert!(a.starts_with("stet/fix-login-"));
        BranchValidator::default()
            .validate(&a, Some("main"))
            .unwrap();
    }
}
