//! A dispatch's preflight ([`TargetCheck`]), which has no side effects: the branch checked, the
//! target checked on the forge, the agent's instructions rendered and its run planned, so that a
//! misnamed workflow or a missing model key fails before anything is provisioned.

use std::sync::Arc;

use crate::dispatch::error::DispatchError;
use crate::forge::Preflight;
use crate::harness::{HarnessLaunch, HarnessPlan, ModelAccess};
use crate::workflow::Workflow;
use stet_protocol::state::Input;
use stet_sanitize::branch::BranchValidator;

use super::steering::Steering;

/// Covers `preflight`: moves to `provisioning` and hands the forge's [`Preflight`] and the harness's
/// [`HarnessPlan`] to [`Provisioning`](super::provision::Provisioning) and the agent's run.
pub(super) struct TargetCheck<'d> {
    steering: &'d mut Steering,
}

impl<'d> TargetCheck<'d> {
    pub(super) fn new(steering: &'d mut Steering) -> TargetCheck<'d> {
        TargetCheck { steering }
    }

    /// Checks the target and plans the agent's run; `model`: how the agent will reach the model, when
    /// a gateway will run.
    pub(super) async fn check(
        self,
        model: Option<&ModelAccess>,
    ) -> Result<(Preflight, HarnessPlan), DispatchError> {
        let steering = self.steering;
        let target = &steering.run.brief.target;
        if target.pr.is_none() {
            BranchValidator::default()
                .validate(&steering.gathered.branch, Some(&target.base))
                .map_err(|error| {
                    steering.fail(format!("branch {:?}: {error}", steering.gathered.branch))
                })?;
        }
        let forge = Arc::clone(&steering.parts.forge);
        let preflight = steering
            .guarded(forge.preflight(target))
            .await?
            .map_err(|error| steering.fail(format!("preflight: {error}")))?;
        if let Some(head) = &preflight.head {
            BranchValidator::default()
                .validate(&head.branch, Some(&target.base))
                .map_err(|error| {
                    steering.fail(format!(
                        "pull request #{}'s head branch {:?}: {error}",
                        head.number, head.branch
                    ))
                })?;
            steering.gathered.branch = head.branch.clone();
        }
        steering.gathered.base = Some(preflight.base_sha.clone());
        let plan = plan_agent(steering, model)?;
        steering
            .publisher
            .advance(Input::PreflightPassed, None)
            .await;
        Ok((preflight, plan))
    }
}

/// Renders the instructions and lets the harness plan its run.
fn plan_agent(
    steering: &Steering,
    model: Option<&ModelAccess>,
) -> Result<HarnessPlan, DispatchError> {
    let brief = &steering.run.brief;
    let workflow = Workflow::builtin(&brief.workflow).map_err(|error| {
        steering.fail(format!(
            "brief {}: workflow {:?}: {error}",
            brief.id, brief.workflow
        ))
    })?;
    let instructions = workflow.render(brief, &steering.gathered.branch);
    steering
        .parts
        .harness
        .plan(&HarnessLaunch {
            dispatch: steering.run.id,
            brief,
            instructions: &instructions,
            model,
        })
        .map_err(|error| steering.fail(format!("brief {}: {error}", brief.id)))
}
