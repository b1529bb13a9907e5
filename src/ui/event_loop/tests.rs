#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use futures_util::stream;
use ratatui::backend::TestBackend;

use super::*;
use crate::dispatch::event::{DispatchId, EventKind, ItemKind, TranscriptItem};
use crate::dispatch::sanitize::TokenSanitizer;
use crate::dispatch::state::Phase;
use crate::inbox::InboxEntry;

const BRIEF: &str = "fix-greeting";

fn app() -> App {
    let path = PathBuf::from(format!("briefs/{BRIEF}.toml"));
    let text = "title = \"Fix the greeting\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n";
    let entry = InboxEntry {
        brief: Brief::parse(BRIEF, &path, text),
        path,
    };
    App::new(&[entry], Utc::now())
}

/// The loop's collaborators, driven by hand: keys in, engine events in, signals in, and every
/// request the loop made.
struct Rig {
    keys: mpsc::UnboundedSender<std::io::Result<TerminalEvent>>,
    events: mpsc::Sender<Event>,
    signals: mpsc::UnboundedSender<()>,
    asked: mpsc::UnboundedReceiver<Request>,
    sanitizer: Arc<TokenSanitizer>,
    dispatch: DispatchId,
}

/// What `drive` is given, for one test.
struct Parts {
    input: stream::BoxStream<'static, std::io::Result<TerminalEvent>>,
    events: mpsc::Receiver<Event>,
    interrupts: stream::BoxStream<'static, ()>,
    perform: Box<dyn FnMut(Request) -> BoxFuture<'static, Option<Reply>> + Send>,
}

/// A rig whose fake engine accepts everything, refuses the first dispatch when `refuse_first`, and
/// answers a shutdown at once.
fn rig(refuse_first: bool) -> (Rig, Parts) {
    let (keys, key_receiver) = mpsc::unbounded_channel();
    let (events, event_receiver) = mpsc::channel(64);
    let (signals, signal_receiver) = mpsc::unbounded_channel();
    let (asked_sender, asked) = mpsc::unbounded_channel();
    let mut refusals = u32::from(refuse_first);
    let perform = move |request: Request| -> BoxFuture<'static, Option<Reply>> {
        asked_sender.send(request.clone()).unwrap();
        let reply = match request {
            Request::Shutdown => Some(Reply::ShutDown),
            Request::Dispatch { .. } if refusals > 0 => {
                refusals -= 1;
                Some(Reply::Refused(Msg::RequestFailed {
                    request,
                    reason: "the dispatcher has stopped".to_owned(),
                }))
            }
            _ => None,
        };
        Box::pin(async move { reply })
    };
    let parts = Parts {
        input: receiver_stream(key_receiver),
        events: event_receiver,
        interrupts: receiver_stream(signal_receiver),
        perform: Box::new(perform),
    };
    let rig = Rig {
        keys,
        events,
        signals,
        asked,
        sanitizer: Arc::new(TokenSanitizer::new().unwrap()),
        dispatch: DispatchId::new(),
    };
    (rig, parts)
}

fn receiver_stream<T: Send + 'static>(
    receiver: mpsc::UnboundedReceiver<T>,
) -> stream::BoxStream<'static, T> {
    stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
    .boxed()
}

impl Rig {
    fn press(&self, code: KeyCode) {
        let key = KeyEvent::new(code, KeyModifiers::NONE);
        self.keys.send(Ok(TerminalEvent::Key(key))).unwrap();
    }

    async fn next_request(&mut self) -> Request {
        self.asked.recv().await.unwrap()
    }

    /// Sends engine events and returns once the loop has taken (and so applied) all of them.
    async fn engine(&self, kinds: Vec<EventKind>) {
        for kind in kinds {
            let event = Event::new(self.dispatch, BRIEF, kind);
            self.events.send(event).await.unwrap();
        }
        while self.events.capacity() < self.events.max_capacity() {
            tokio::task::yield_now().await;
        }
    }

    fn phase(&self, from: Phase, to: Phase) -> EventKind {
        EventKind::Phase {
            from,
            to,
            reason: None,
        }
    }

    fn running(&self) -> Vec<EventKind> {
        let text = |text: &str| self.sanitizer.sanitize(text);
        vec![
            EventKind::Dispatched {
                title: text("Fix the greeting"),
                repo: text("demo/app"),
                base: text("main"),
                branch: text("stet/fix-greeting"),
                harness: text("script"),
                image: text("stet-sandbox:test"),
            },
            self.phase(Phase::Queued, Phase::Preflight),
            self.phase(Phase::Preflight, Phase::Provisioning),
            self.phase(Phase::Provisioning, Phase::Running),
            EventKind::Transcript(TranscriptItem {
                item: ItemKind::Message,
                text: text("Looking at the greeting."),
            }),
        ]
    }

    fn finished(&self, outcome: Phase) -> Vec<EventKind> {
        vec![
            self.phase(Phase::Running, outcome),
            EventKind::Finished {
                outcome,
                exit_code: outcome.exit_code().unwrap(),
                reason: None,
            },
        ]
    }
}

async fn drive_with(terminal: &mut Terminal<TestBackend>, parts: Parts) -> Result<Exit> {
    drive(
        terminal,
        app(),
        parts.input,
        parts.events,
        parts.interrupts,
        parts.perform,
    )
    .await
}

#[tokio::test]
async fn enter_dispatches_the_brief_c_cancels_it_and_q_quits_once_it_finished() {
    let (mut rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(
            rig.next_request().await,
            Request::Dispatch {
                brief: BRIEF.to_owned()
            }
        );
        rig.engine(rig.running()).await;
        rig.press(KeyCode::Char('c'));
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, Request::Cancel(rig.dispatch));
        rig.engine(rig.finished(Phase::Cancelled)).await;
        rig.press(KeyCode::Char('q'));
        assert_eq!(rig.next_request().await, Request::Shutdown);
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
    let blank = Terminal::new(TestBackend::new(80, 20)).unwrap();
    assert_ne!(
        terminal.backend().buffer(),
        blank.backend().buffer(),
        "the loop drew the app"
    );
}

#[tokio::test]
async fn quitting_with_a_dispatch_running_waits_until_it_finished() {
    let (mut rig, mut parts) = rig(false);
    // This engine never answers the shutdown: only the dispatch's end lets the loop exit.
    let mut inner = parts.perform;
    parts.perform = Box::new(move |request| {
        let work = inner(request);
        Box::pin(async move { work.await.filter(|reply| !matches!(reply, Reply::ShutDown)) })
    });
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        rig.next_request().await;
        rig.engine(rig.running()).await;
        rig.press(KeyCode::Char('q'));
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, Request::Shutdown);
        // Still running: the loop keeps taking events while the dispatch tears down.
        rig.engine(vec![rig.phase(Phase::Running, Phase::Cancelled)])
            .await;
        let last = rig.finished(Phase::Cancelled).pop().unwrap();
        rig.events
            .send(Event::new(rig.dispatch, BRIEF, last))
            .await
            .unwrap();
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
}

#[tokio::test]
async fn a_refused_dispatch_can_be_asked_for_again() {
    let (mut rig, parts) = rig(true);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let dispatch = Request::Dispatch {
        brief: BRIEF.to_owned(),
    };
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, dispatch);
        // Without the refusal fed back the brief would stay queued and Enter would do nothing.
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, dispatch);
        rig.engine(rig.running()).await;
        rig.engine(rig.finished(Phase::Done)).await;
        rig.press(KeyCode::Char('q'));
        assert_eq!(rig.next_request().await, Request::Shutdown);
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
}

#[tokio::test]
async fn a_signal_shuts_down_without_asking_and_a_second_one_exits_at_once() {
    let (mut rig, mut parts) = rig(false);
    let mut inner = parts.perform;
    parts.perform = Box::new(move |request| {
        let work = inner(request);
        Box::pin(async move { work.await.filter(|reply| !matches!(reply, Reply::ShutDown)) })
    });
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        rig.next_request().await;
        rig.engine(rig.running()).await;
        // A question is open when the signal comes: it is dismissed, not answered.
        rig.press(KeyCode::Char('c'));
        rig.signals.send(()).unwrap();
        assert_eq!(rig.next_request().await, Request::Shutdown);
        rig.signals.send(()).unwrap();
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Interrupted);
    assert!(rig.asked.try_recv().is_err(), "no cancel was asked for");
}

#[tokio::test]
async fn a_resize_is_taken_and_a_broken_input_ends_the_loop_with_an_error() {
    let (rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    rig.keys.send(Ok(TerminalEvent::Resize(40, 10))).unwrap();
    rig.keys
        .send(Err(std::io::Error::other("the terminal went away")))
        .unwrap();
    let exit = drive_with(&mut terminal, parts).await;
    assert!(
        matches!(&exit, Err(LoopError::Input(error)) if error.to_string() == "the terminal went away"),
        "{exit:?}"
    );
}
