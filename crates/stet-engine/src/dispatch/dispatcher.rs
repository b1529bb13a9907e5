//! The `Dispatcher`: the one place that turns consumers' `Command`s into running dispatches (DESIGN §3),
//! with the rules of ADR-0018 row 8 kept by `DispatchModel` — a concurrency ceiling (further dispatches
//! wait as `queued`), no second dispatch of a brief already in flight, none for a pull request already
//! being updated — and a `Shutdown` that cancels everything and waits for every teardown.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::FutureExt;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::brief::Brief;
use crate::dispatch::order::{Decision, Delivery, DispatchControl, DispatchRun};
use crate::dispatch::service::{DispatchContext, DispatchService};
use stet_protocol::event::{DispatchId, Event, EventKind};
use stet_protocol::state::Phase;

/// How many commands may wait for the dispatcher.
const COMMAND_BUFFER: usize = 64;

/// Why a dispatch was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum DispatcherError {
    #[error("brief {brief:?} is already being dispatched ({dispatch}); cancel it first")]
    BriefInFlight { brief: String, dispatch: DispatchId },
    #[error(
        "pull request #{number} of {repo} is already being updated by {dispatch}; wait for it or cancel it"
    )]
    PullRequestInFlight {
        repo: String,
        number: u64,
        dispatch: DispatchId,
    },
    #[error("stet is shutting down; no new dispatch starts")]
    ShuttingDown,
    #[error("no dispatch {0} is in flight")]
    Unknown(DispatchId),
    #[error("dispatch {0} is not waiting for a decision")]
    NotAwaitingDecision(DispatchId),
    #[error("the dispatcher has stopped")]
    Stopped,
    #[error("the diff of {dispatch} could not be read: {reason}")]
    Patch {
        dispatch: DispatchId,
        reason: String,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, DispatcherError>;

/// What consumers ask of the engine.
#[derive(Debug)]
pub(crate) enum Command {
    Dispatch {
        brief: Box<Brief>,
        delivery: Delivery,
        reply: oneshot::Sender<Result<DispatchId>>,
    },
    Cancel {
        dispatch: DispatchId,
        reply: oneshot::Sender<Result<()>>,
    },
    Decide {
        dispatch: DispatchId,
        decision: Decision,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Cancels every dispatch and answers once every teardown finished.
    Shutdown {
        done: oneshot::Sender<()>,
        /// Why, as each dispatch's record will say after "cancelled …".
        cause: Option<String>,
    },
}

/// The cloneable handle consumers send `Command`s through.
#[derive(Debug, Clone)]
pub struct DispatchHandle {
    commands: mpsc::Sender<Command>,
    /// Where the run records are, for [`DispatchHandle::patch`].
    state_dir: Arc<PathBuf>,
}

impl DispatchHandle {
    /// Accepts `brief` for dispatch; its events follow on the event channel.
    pub async fn dispatch(&self, brief: Brief, delivery: Delivery) -> Result<DispatchId> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Dispatch {
            brief: Box::new(brief),
            delivery,
            reply,
        })
        .await?;
        answer.await.map_err(|_| DispatcherError::Stopped)?
    }

    /// Cancels `dispatch`: it ends as cancelled, its sandbox torn down.
    pub async fn cancel(&self, dispatch: DispatchId) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Cancel { dispatch, reply }).await?;
        answer.await.map_err(|_| DispatcherError::Stopped)?
    }

    /// Approves `dispatch`'s result at review: it is pushed and its pull request opened.
    pub async fn approve(&self, dispatch: DispatchId) -> Result<()> {
        self.decide(dispatch, Decision::Approve).await
    }

    /// Discards `dispatch`'s result at review: nothing is pushed.
    pub async fn discard(&self, dispatch: DispatchId) -> Result<()> {
        self.decide(dispatch, Decision::Discard).await
    }

    async fn decide(&self, dispatch: DispatchId, decision: Decision) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Decide {
            dispatch,
            decision,
            reply,
        })
        .await?;
        answer.await.map_err(|_| DispatcherError::Stopped)?
    }

    /// The diff of `dispatch`'s result as its run record keeps it (sanitized, bounded), read on the
    /// blocking pool: a consumer gets it from the engine, never from the record's file.
    pub async fn patch(&self, dispatch: DispatchId) -> Result<String> {
        let state_dir = Arc::clone(&self.state_dir);
        let read = tokio::task::spawn_blocking(move || {
            crate::dispatch::record::read_patch(&state_dir, dispatch)
        })
        .await
        .map_err(|error| DispatcherError::Patch {
            dispatch,
            reason: format!("reading stopped: {error}"),
        })?;
        read.map_err(|error| DispatcherError::Patch {
            dispatch,
            reason: error.to_string(),
        })
    }

    /// Cancels everything and returns once every dispatch has torn down.
    pub async fn shutdown(&self) {
        self.stop_all(None).await;
    }

    /// [`Self::shutdown`], each dispatch's record saying why after "cancelled …" (`the terminal went
    /// away`).
    pub async fn shutdown_because(&self, cause: &str) {
        self.stop_all(Some(cause.to_owned())).await;
    }

    async fn stop_all(&self, cause: Option<String>) {
        let (done, finished) = oneshot::channel();
        if self.send(Command::Shutdown { done, cause }).await.is_ok() {
            let _ = finished.await;
        }
    }

    async fn send(&self, command: Command) -> Result<()> {
        self.commands
            .send(command)
            .await
            .map_err(|_| DispatcherError::Stopped)
    }
}

/// The admission rules over the dispatches in flight (queued or running). Pure: no I/O.
#[derive(Debug, Default)]
pub struct DispatchModel {
    in_flight: HashMap<DispatchId, InFlight>,
}

#[derive(Debug, Clone)]
struct InFlight {
    brief: String,
    pull_request: Option<(String, u64)>,
}

impl DispatchModel {
    /// Admits `brief` as `dispatch`, or says why not.
    pub fn admit(&mut self, dispatch: DispatchId, brief: &Brief) -> Result<()> {
        let pull_request = brief
            .target
            .pr
            .map(|number| (brief.target.repo.clone(), number));
        for (other, flight) in &self.in_flight {
            if flight.brief == brief.id {
                return Err(DispatcherError::BriefInFlight {
                    brief: brief.id.clone(),
                    dispatch: *other,
                });
            }
            if let (Some(wanted), Some(taken)) = (&pull_request, &flight.pull_request)
                && wanted == taken
            {
                return Err(DispatcherError::PullRequestInFlight {
                    repo: wanted.0.clone(),
                    number: wanted.1,
                    dispatch: *other,
                });
            }
        }
        self.in_flight.insert(
            dispatch,
            InFlight {
                brief: brief.id.clone(),
                pull_request,
            },
        );
        Ok(())
    }

    /// The dispatch ended.
    pub fn release(&mut self, dispatch: DispatchId) {
        self.in_flight.remove(&dispatch);
    }
}

/// Runs dispatches for consumers.
#[derive(Debug)]
pub struct Dispatcher {
    service: DispatchService,
    parts: Arc<DispatchContext>,
    slots: Arc<Semaphore>,
    events: mpsc::Sender<Event>,
    model: DispatchModel,
    steering: HashMap<DispatchId, Steering>,
    tasks: JoinSet<(DispatchId, Phase)>,
    shutting_down: bool,
}

#[derive(Debug)]
struct Steering {
    cancel: CancellationToken,
    cause: Arc<std::sync::OnceLock<String>>,
    decisions: mpsc::Sender<Decision>,
}

impl Dispatcher {
    /// Starts the dispatcher task; at most `ceiling` dispatches run at once (at least one).
    pub fn start(
        service: DispatchService,
        parts: Arc<DispatchContext>,
        ceiling: usize,
        events: mpsc::Sender<Event>,
    ) -> (DispatchHandle, tokio::task::JoinHandle<()>) {
        let (commands, receiver) = mpsc::channel(COMMAND_BUFFER);
        let state_dir = Arc::new(service.state_dir().to_owned());
        let dispatcher = Dispatcher {
            service,
            parts,
            slots: Arc::new(Semaphore::new(ceiling.max(1))),
            events,
            model: DispatchModel::default(),
            steering: HashMap::new(),
            tasks: JoinSet::new(),
            shutting_down: false,
        };
        let task = tokio::spawn(dispatcher.serve(receiver));
        (
            DispatchHandle {
                commands,
                state_dir,
            },
            task,
        )
    }

    async fn serve(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut waiting_for_shutdown: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(Command::Shutdown { done, cause }) => {
                        self.shutting_down = true;
                        for steering in self.steering.values() {
                            if let Some(cause) = &cause {
                                let _ = steering.cause.set(cause.clone());
                            }
                            steering.cancel.cancel();
                        }
                        waiting_for_shutdown.push(done);
                    }
                    Some(command) => self.handle(command),
                    None => {
                        // Every handle is gone: nobody can steer or watch; cancel and drain.
                        self.shutting_down = true;
                        for steering in self.steering.values() {
                            steering.cancel.cancel();
                        }
                        while let Some(joined) = self.tasks.join_next().await {
                            self.finished(joined);
                        }
                        self.service.drain_pool().await;
                        return;
                    }
                },
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.finished(joined);
                }
            }
            if self.shutting_down && self.tasks.is_empty() && !waiting_for_shutdown.is_empty() {
                // Nothing of the warm pool outlives stet: its idle containers go before it exits.
                self.service.drain_pool().await;
                for done in waiting_for_shutdown.drain(..) {
                    let _ = done.send(());
                }
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Dispatch {
                brief,
                delivery,
                reply,
            } => {
                let _ = reply.send(self.accept(*brief, delivery));
            }
            Command::Cancel { dispatch, reply } => {
                let answer = match self.steering.get(&dispatch) {
                    Some(steering) => {
                        steering.cancel.cancel();
                        Ok(())
                    }
                    None => Err(DispatcherError::Unknown(dispatch)),
                };
                let _ = reply.send(answer);
            }
            Command::Decide {
                dispatch,
                decision,
                reply,
            } => {
                let answer = match self.steering.get(&dispatch) {
                    Some(steering) => steering
                        .decisions
                        .try_send(decision)
                        .map_err(|_| DispatcherError::NotAwaitingDecision(dispatch)),
                    None => Err(DispatcherError::Unknown(dispatch)),
                };
                let _ = reply.send(answer);
            }
            Command::Shutdown { .. } => {}
        }
    }

    fn accept(&mut self, brief: Brief, delivery: Delivery) -> Result<DispatchId> {
        if self.shutting_down {
            return Err(DispatcherError::ShuttingDown);
        }
        let id = DispatchId::new();
        self.model.admit(id, &brief)?;
        let cancel = CancellationToken::new();
        let cause = Arc::new(std::sync::OnceLock::new());
        let (decisions, decision_receiver) = mpsc::channel(1);
        self.steering.insert(
            id,
            Steering {
                cancel: cancel.clone(),
                cause: Arc::clone(&cause),
                decisions,
            },
        );
        let control = DispatchControl {
            cancel,
            cause,
            decisions: decision_receiver,
            slots: Arc::clone(&self.slots),
        };
        let run = DispatchRun {
            id,
            brief,
            delivery,
        };
        let service = self.service.clone();
        let parts = Arc::clone(&self.parts);
        let events = self.events.clone();
        self.tasks.spawn(async move {
            let brief = run.brief.id.clone();
            let sanitizer = parts.sanitizer.current();
            let ran = AssertUnwindSafe(crate::dispatch::run::run(
                service,
                parts,
                run,
                events.clone(),
                control,
            ))
                .catch_unwind()
                .await;
            let phase = match ran {
                Ok(phase) => phase,
                Err(_) => {
                    // A bug, not a dispatch outcome: the consumer still hears that this dispatch
                    // ended, and its journaled resources are reclaimed by the next sweep.
                    tracing::error!(dispatch = %id, "the dispatch task panicked");
                    let reason = sanitizer.sanitize(
                        "stet stopped this dispatch on an internal error; `stet sweep` reclaims what it left",
                    );
                    let finished = EventKind::Finished {
                        outcome: Phase::Failed,
                        exit_code: Phase::Failed.exit_code().unwrap_or(1),
                        reason: Some(reason),
                    };
                    let _ = events.send(Event::new(id, &brief, finished)).await;
                    Phase::Failed
                }
            };
            (id, phase)
        });
        Ok(id)
    }

    fn finished(
        &mut self,
        joined: std::result::Result<(DispatchId, Phase), tokio::task::JoinError>,
    ) {
        match joined {
            Ok((id, phase)) => {
                tracing::info!(dispatch = %id, outcome = %phase, "dispatch ended");
                self.model.release(id);
                self.steering.remove(&id);
            }
            Err(error) => {
                // A dispatch task that panicked: its sandbox stays journaled for the next sweep.
                tracing::error!(%error, "a dispatch task ended abnormally");
                let ids: Vec<DispatchId> = self
                    .steering
                    .iter()
                    .filter(|(_, s)| s.decisions.is_closed())
                    .map(|(id, _)| *id)
                    .collect();
                for id in ids {
                    self.model.release(id);
                    self.steering.remove(&id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn brief(id: &str, pr: Option<u64>) -> Brief {
        let pr = pr.map(|n| format!("pr = {n}\n")).unwrap_or_default();
        Brief::parse(
            id,
            Path::new("b.toml"),
            &format!(
                "title = \"t\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n{pr}[[items]]\ntext = \"x\"\n"
            ),
        )
        .unwrap()
    }

    #[test]
    fn a_brief_in_flight_is_refused_until_it_is_released() {
        let mut model = DispatchModel::default();
        let first = DispatchId::new();
        model.admit(first, &brief("a", None)).unwrap();
        let again = model.admit(DispatchId::new(), &brief("a", None));
        assert_eq!(
            again,
            Err(DispatcherError::BriefInFlight {
                brief: "a".into(),
                dispatch: first
            })
        );
        model.admit(DispatchId::new(), &brief("b", None)).unwrap();
        assert_eq!(model.in_flight.len(), 2);
        model.release(first);
        model.admit(DispatchId::new(), &brief("a", None)).unwrap();
    }

    #[test]
    fn two_briefs_updating_the_same_pull_request_are_refused() {
        let mut model = DispatchModel::default();
        let first = DispatchId::new();
        model.admit(first, &brief("a", Some(7))).unwrap();
        let error = model
            .admit(DispatchId::new(), &brief("b", Some(7)))
            .unwrap_err();
        assert!(matches!(
            error,
            DispatcherError::PullRequestInFlight { number: 7, .. }
        ));
        model
            .admit(DispatchId::new(), &brief("c", Some(8)))
            .unwrap();
        model.admit(DispatchId::new(), &brief("d", None)).unwrap();
    }
}
