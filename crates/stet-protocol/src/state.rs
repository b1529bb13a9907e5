//! The dispatch state machine (DESIGN §4): phases and the one pure function that moves between them.
//!
//! Every phase change of a dispatch goes through [`transition`], so an illegal move (pushing before
//! collecting, leaving a terminal phase) is refused in one place instead of being prevented by care.

use serde::{Deserialize, Serialize};

/// Where a dispatch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for a concurrency slot.
    Queued,
    /// Checking the target on the forge before anything is created.
    Preflight,
    /// Making the workspace, the credential and the container.
    Provisioning,
    /// The agent is at work in the sandbox.
    Running,
    /// Importing the agent's work into a trusted commit.
    Collecting,
    /// The result waits for a person's review.
    AwaitingApproval,
    /// Pushing the branch, host-side.
    Pushing,
    /// Opening or updating the pull request.
    OpeningPr,
    /// Finished with a result delivered (or nothing to deliver).
    Done,
    /// Ended by an error.
    Failed,
    /// Cancelled by the person, a signal or a discarded review.
    Cancelled,
    /// Ended by the dispatch's timeout.
    TimedOut,
    /// Ended by the cost ceiling.
    CostCeilingHit,
}

impl Phase {
    /// Every phase, in lifecycle order (terminal outcomes last).
    pub const ALL: [Phase; 13] = [
        Phase::Queued,
        Phase::Preflight,
        Phase::Provisioning,
        Phase::Running,
        Phase::Collecting,
        Phase::AwaitingApproval,
        Phase::Pushing,
        Phase::OpeningPr,
        Phase::Done,
        Phase::Failed,
        Phase::Cancelled,
        Phase::TimedOut,
        Phase::CostCeilingHit,
    ];

    /// Whether the dispatch has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Phase::Done
                | Phase::Failed
                | Phase::Cancelled
                | Phase::TimedOut
                | Phase::CostCeilingHit
        )
    }

    /// What a person reads on the timeline.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Preflight => "preflight",
            Phase::Provisioning => "provisioning",
            Phase::Running => "running",
            Phase::Collecting => "collecting",
            Phase::AwaitingApproval => "awaiting approval",
            Phase::Pushing => "pushing",
            Phase::OpeningPr => "opening pull request",
            Phase::Done => "done",
            Phase::Failed => "failed",
            Phase::Cancelled => "cancelled",
            Phase::TimedOut => "timed out",
            Phase::CostCeilingHit => "cost ceiling hit",
        }
    }

    /// The `--headless` exit code of a terminal phase (DESIGN §6); `None` while the dispatch runs.
    pub fn exit_code(self) -> Option<u8> {
        match self {
            Phase::Done => Some(0),
            Phase::Failed => Some(1),
            Phase::Cancelled => Some(3),
            Phase::TimedOut => Some(4),
            Phase::CostCeilingHit => Some(5),
            _ => None,
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// What happened, as the engine reports it to the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// A concurrency slot is free: begin checking.
    Start,
    /// The target checked out: provision.
    PreflightPassed,
    /// The sandbox is up: run the agent.
    Provisioned,
    /// The agent's process ended: collect its work.
    AgentFinished,
    /// The result was imported; `review` says whether it waits for a person.
    Collected {
        /// Whether the result waits for a person's review.
        review: bool,
    },
    /// The agent changed nothing: there is nothing to push.
    NothingToPush,
    /// The result is kept in the local repository and not pushed (`--headless` without `--push`).
    Kept,
    /// The person approved the result at review.
    Approved,
    /// The person discarded the result at review: the dispatch ends as cancelled.
    Discarded,
    /// The branch is on the forge.
    Pushed,
    /// The pull request is opened or updated.
    PullRequestReady,
    /// Something failed.
    Fail,
    /// The dispatch was cancelled.
    Cancel,
    /// The dispatch's time ran out.
    TimeOut,
    /// The model spend reached the ceiling.
    CostCeilingReached,
}

impl Input {
    /// Every input, for exhaustive tests and documentation.
    pub const ALL: [Input; 16] = [
        Input::Start,
        Input::PreflightPassed,
        Input::Provisioned,
        Input::AgentFinished,
        Input::Collected { review: true },
        Input::Collected { review: false },
        Input::NothingToPush,
        Input::Kept,
        Input::Approved,
        Input::Discarded,
        Input::Pushed,
        Input::PullRequestReady,
        Input::Fail,
        Input::Cancel,
        Input::TimeOut,
        Input::CostCeilingReached,
    ];
}

/// A move the state machine refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal dispatch transition: {input:?} while {from}")]
pub struct StateError {
    /// The phase the dispatch was in.
    pub from: Phase,
    /// What happened.
    pub input: Input,
}

/// The result of a transition.
pub type Result<T> = std::result::Result<T, StateError>;

/// The next phase, or an error when `input` cannot happen in `from`.
pub fn transition(from: Phase, input: Input) -> Result<Phase> {
    use Input as I;
    use Phase as P;
    let next = match (from, input) {
        (from, _) if from.is_terminal() => None,
        (_, I::Fail) => Some(P::Failed),
        (_, I::Cancel) => Some(P::Cancelled),
        (_, I::TimeOut) => Some(P::TimedOut),
        (_, I::CostCeilingReached) => Some(P::CostCeilingHit),
        (P::Queued, I::Start) => Some(P::Preflight),
        (P::Preflight, I::PreflightPassed) => Some(P::Provisioning),
        (P::Provisioning, I::Provisioned) => Some(P::Running),
        (P::Running, I::AgentFinished) => Some(P::Collecting),
        (P::Collecting, I::Collected { review: true }) => Some(P::AwaitingApproval),
        (P::Collecting, I::Collected { review: false }) => Some(P::Pushing),
        (P::Collecting, I::NothingToPush | I::Kept) => Some(P::Done),
        (P::AwaitingApproval, I::Approved) => Some(P::Pushing),
        (P::AwaitingApproval, I::Discarded) => Some(P::Cancelled),
        (P::Pushing, I::Pushed) => Some(P::OpeningPr),
        (P::OpeningPr, I::PullRequestReady) => Some(P::Done),
        _ => None,
    };
    next.ok_or(StateError { from, input })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole legal table, written out independently of `transition`.
    fn legal() -> Vec<(Phase, Input, Phase)> {
        use Input as I;
        use Phase as P;
        let mut table = vec![
            (P::Queued, I::Start, P::Preflight),
            (P::Preflight, I::PreflightPassed, P::Provisioning),
            (P::Provisioning, I::Provisioned, P::Running),
            (P::Running, I::AgentFinished, P::Collecting),
            (
                P::Collecting,
                I::Collected { review: true },
                P::AwaitingApproval,
            ),
            (P::Collecting, I::Collected { review: false }, P::Pushing),
            (P::Collecting, I::NothingToPush, P::Done),
            (P::Collecting, I::Kept, P::Done),
            (P::AwaitingApproval, I::Approved, P::Pushing),
            (P::AwaitingApproval, I::Discarded, P::Cancelled),
            (P::Pushing, I::Pushed, P::OpeningPr),
            (P::OpeningPr, I::PullRequestReady, P::Done),
        ];
        for from in Phase::ALL.into_iter().filter(|p| !p.is_terminal()) {
            table.push((from, I::Fail, P::Failed));
            table.push((from, I::Cancel, P::Cancelled));
            table.push((from, I::TimeOut, P::TimedOut));
            table.push((from, I::CostCeilingReached, P::CostCeilingHit));
        }
        table
    }

    #[test]
    fn every_legal_transition_is_taken_and_every_other_is_refused() {
        let table = legal();
        let mut refused = 0;
        for from in Phase::ALL {
            for input in Input::ALL {
                let expected = table
                    .iter()
                    .find(|(f, i, _)| *f == from && *i == input)
                    .map(|(_, _, to)| *to);
                match expected {
                    Some(to) => assert_eq!(transition(from, input), Ok(to), "{from:?} + {input:?}"),
                    None => {
                        assert_eq!(transition(from, input), Err(StateError { from, input }));
                        refused += 1;
                    }
                }
            }
        }
        assert_eq!(refused, Phase::ALL.len() * Input::ALL.len() - table.len());
        assert!(refused > 100);
    }

    #[test]
    fn terminal_phases_have_exit_codes_and_running_ones_do_not() {
        for phase in Phase::ALL {
            assert_eq!(
                phase.exit_code().is_some(),
                phase.is_terminal(),
                "{phase:?}"
            );
        }
        let codes: Vec<u8> = Phase::ALL.iter().filter_map(|p| p.exit_code()).collect();
        assert_eq!(codes, vec![0, 1, 3, 4, 5]);
    }

    #[test]
    fn the_happy_path_walks_every_working_phase() {
        let steps = [
            Input::Start,
            Input::PreflightPassed,
            Input::Provisioned,
            Input::AgentFinished,
            Input::Collected { review: true },
            Input::Approved,
            Input::Pushed,
            Input::PullRequestReady,
        ];
        let end = steps
            .into_iter()
            .try_fold(Phase::Queued, transition)
            .unwrap();
        assert_eq!(end, Phase::Done);
    }

    #[test]
    fn phases_serialise_in_snake_case() {
        assert_eq!(
            serde_json::to_string(&Phase::AwaitingApproval).unwrap(),
            "\"awaiting_approval\""
        );
        assert_eq!(
            serde_json::to_string(&Phase::CostCeilingHit).unwrap(),
            "\"cost_ceiling_hit\""
        );
    }
}
