use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use futures_util::stream;
use ratatui::backend::{ClearType, TestBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};
use rustix::io::Errno;
use tokio::sync::oneshot;

use super::*;
use stet_protocol::brief::Brief;
use stet_protocol::event::{DispatchId, EventKind, ItemKind, TranscriptItem};
use stet_protocol::inbox::InboxEntry;
use stet_protocol::state::Phase;
use stet_sanitize::sanitize::TokenSanitizer;

const BRIEF: &str = "fix-greeting";

fn entry() -> InboxEntry {
    let path = PathBuf::from(format!("briefs/{BRIEF}.toml"));
    let text = "title = \"Fix the greeting\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n";
    InboxEntry {
        brief: Brief::parse(BRIEF, &path, text),
        path,
    }
}

fn app() -> App {
    App::new(&[entry()], Utc::now())
}

/// The request that dispatches the brief of [`app`].
fn dispatch_request() -> Request {
    Request::Dispatch {
        brief: Box::new(entry().brief.unwrap()),
    }
}

/// The loop's collaborators, driven by hand: keys in, engine events in, signals in, and every
/// request the loop made.
struct Rig {
    keys: mpsc::UnboundedSender<std::io::Result<TerminalEvent>>,
    events: mpsc::Sender<Event>,
    signals: mpsc::UnboundedSender<Interrupt>,
    inbox: mpsc::Sender<Vec<InboxRow>>,
    asked: mpsc::UnboundedReceiver<Request>,
    sanitizer: Arc<TokenSanitizer>,
    dispatch: DispatchId,
}

/// What `drive` is given, for one test.
struct Parts {
    input: stream::BoxStream<'static, std::io::Result<TerminalEvent>>,
    events: mpsc::Receiver<Event>,
    interrupts: stream::BoxStream<'static, Interrupt>,
    inbox: mpsc::Receiver<Vec<InboxRow>>,
    perform: Box<dyn FnMut(Request) -> BoxFuture<'static, Option<Reply>> + Send>,
}

/// A rig whose fake engine accepts everything, refuses the first dispatch when `refuse_first`, and
/// answers a shutdown at once.
fn rig(refuse_first: bool) -> (Rig, Parts) {
    let (keys, key_receiver) = mpsc::unbounded_channel();
    let (events, event_receiver) = mpsc::channel(64);
    let (signals, signal_receiver) = mpsc::unbounded_channel();
    let (inbox, inbox_receiver) = mpsc::channel(4);
    let (asked_sender, asked) = mpsc::unbounded_channel();
    let mut refusals = u32::from(refuse_first);
    let perform = move |request: Request| -> BoxFuture<'static, Option<Reply>> {
        asked_sender.send(request.clone()).unwrap();
        let reply = match request {
            Request::Shutdown | Request::HangUp => Some(Reply::ShutDown),
            Request::Dispatch { .. } if refusals > 0 => {
                refusals -= 1;
                Some(Reply::Update(Msg::RequestFailed {
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
        inbox: inbox_receiver,
        perform: Box::new(perform),
    };
    let rig = Rig {
        keys,
        events,
        signals,
        inbox,
        asked,
        sanitizer: Arc::new(TokenSanitizer::new().unwrap()),
        dispatch: DispatchId::new(),
    };
    (rig, parts)
}

/// Makes the rig's engine never answer a shutdown: only the dispatches' ends let the loop exit.
fn withhold_shutdown(parts: &mut Parts) {
    let mut inner = std::mem::replace(&mut parts.perform, Box::new(|_| Box::pin(async { None })));
    parts.perform = Box::new(move |request| {
        let work = inner(request);
        Box::pin(async move { work.await.filter(|reply| !matches!(reply, Reply::ShutDown)) })
    });
}

/// Makes the rig's engine answer a shutdown only once the returned sender is told to: until then
/// the dispatches are still tearing down.
fn hold_shutdown_until_told(parts: &mut Parts) -> oneshot::Sender<()> {
    let (tell, told) = oneshot::channel::<()>();
    let mut told = Some(told);
    let mut inner = std::mem::replace(&mut parts.perform, Box::new(|_| Box::pin(async { None })));
    parts.perform = Box::new(move |request| {
        let gate = matches!(request, Request::Shutdown | Request::HangUp)
            .then(|| told.take())
            .flatten();
        let work = inner(request);
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.await.unwrap();
            }
            work.await
        })
    });
    tell
}

/// What the transcript shows while the dispatch tears down after the terminal went away: it must
/// never be drawn.
const AFTER_HANGUP: &str = "Stopping: nobody is watching any more.";

/// The screen shows what happened before the terminal went away, and nothing after.
fn assert_drawn_only_before_the_hangup(shown: &str) {
    assert!(
        shown.contains("Looking at the greeting."),
        "what ran before the hangup was drawn: {shown}"
    );
    assert!(
        !shown.contains(AFTER_HANGUP),
        "drawn after the hangup: {shown}"
    );
}

/// Makes the error a terminal fails with.
type MakeError = fn() -> std::io::Error;

/// What a [`FailingBackend`] fails its frames with, once set.
type Failure = Arc<Mutex<Option<MakeError>>>;

/// A [`TestBackend`] that counts the frames it is asked to draw and, once `failure` holds an error
/// maker, fails every frame with that error.
struct FailingBackend {
    screen: TestBackend,
    failure: Failure,
    frames: Arc<AtomicUsize>,
}

impl FailingBackend {
    fn new(failure: &Failure, frames: &Arc<AtomicUsize>) -> Self {
        FailingBackend {
            screen: TestBackend::new(100, 24),
            failure: Arc::clone(failure),
            frames: Arc::clone(frames),
        }
    }
}

fn infallible<T>(result: std::result::Result<T, std::convert::Infallible>) -> std::io::Result<T> {
    result.map_err(|never| match never {})
}

impl Backend for FailingBackend {
    type Error = std::io::Error;

    fn draw<'a, I>(&mut self, content: I) -> std::io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.frames
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(failure) = *self.failure.lock().unwrap() {
            return Err(failure());
        }
        infallible(self.screen.draw(content))
    }

    fn hide_cursor(&mut self) -> std::io::Result<()> {
        infallible(self.screen.hide_cursor())
    }

    fn show_cursor(&mut self) -> std::io::Result<()> {
        infallible(self.screen.show_cursor())
    }

    fn get_cursor_position(&mut self) -> std::io::Result<Position> {
        infallible(self.screen.get_cursor_position())
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> std::io::Result<()> {
        infallible(self.screen.set_cursor_position(position))
    }

    fn clear(&mut self) -> std::io::Result<()> {
        infallible(self.screen.clear())
    }

    fn clear_region(&mut self, clear_type: ClearType) -> std::io::Result<()> {
        infallible(self.screen.clear_region(clear_type))
    }

    fn size(&self) -> std::io::Result<Size> {
        infallible(self.screen.size())
    }

    fn window_size(&mut self) -> std::io::Result<WindowSize> {
        infallible(self.screen.window_size())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        infallible(self.screen.flush())
    }
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
                cost_ceiling_usd: None,
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

    /// Enter + y dispatches the brief, which the engine then runs.
    async fn dispatch_running(&mut self) {
        self.press(KeyCode::Enter);
        self.press(KeyCode::Char('y'));
        self.next_request().await;
        self.engine(self.running()).await;
    }

    /// The dispatch ends with `outcome`; then `q` asks for the shutdown at once.
    async fn finish_and_quit(&mut self, outcome: Phase) {
        self.engine(self.finished(outcome)).await;
        self.press(KeyCode::Char('q'));
        assert_eq!(self.next_request().await, Request::Shutdown);
    }

    /// The dispatch reports its teardown ([`AFTER_HANGUP`] in its transcript, then its cancelled
    /// phase) and the loop takes it: it is still running, and the dispatch not finished yet.
    async fn tearing_down(&self) {
        self.engine(vec![
            self.says(AFTER_HANGUP),
            self.phase(Phase::Running, Phase::Cancelled),
        ])
        .await;
    }

    /// The agent says `text`.
    fn says(&self, text: &str) -> EventKind {
        EventKind::Transcript(TranscriptItem {
            item: ItemKind::Message,
            text: self.sanitizer.sanitize(text),
        })
    }

    /// Ends the terminal's input stream.
    fn close_input(&mut self) {
        let (open, _) = mpsc::unbounded_channel();
        self.keys = open;
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

async fn drive_with<B>(terminal: &mut Terminal<B>, parts: Parts) -> Result<Exit>
where
    B: Backend,
    B::Error: 'static,
{
    drive(
        terminal,
        app(),
        parts.input,
        parts.events,
        parts.interrupts,
        parts.inbox,
        parts.perform,
    )
    .await
}

#[tokio::test]
async fn a_brief_added_on_disk_joins_the_inbox_without_a_restart() {
    let (mut rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    let script = async {
        let path = PathBuf::from("briefs/add-tests.toml");
        let text = "title = \"Add the tests\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n";
        let added = InboxEntry {
            brief: Brief::parse("add-tests", &path, text),
            path,
        };
        rig.inbox
            .send(vec![
                InboxRow::from_entry(&added),
                InboxRow::from_entry(&entry()),
            ])
            .await
            .unwrap();
        while rig.inbox.capacity() < rig.inbox.max_capacity() {
            tokio::task::yield_now().await;
        }
        rig.press(KeyCode::Char('q'));
        assert_eq!(rig.next_request().await, Request::Shutdown);
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
    let shown = terminal.backend().to_string();
    assert!(shown.contains("Inbox (2)"), "{shown}");
    assert!(shown.contains("[new] Add the tests"), "{shown}");
    assert!(
        shown.contains("▸ [new] Fix the greeting"),
        "the cursor stayed on its brief:\n{shown}"
    );
}

#[tokio::test]
async fn enter_dispatches_the_brief_c_cancels_it_and_q_quits_once_it_finished() {
    let (mut rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, dispatch_request());
        rig.engine(rig.running()).await;
        rig.press(KeyCode::Char('c'));
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, Request::Cancel(rig.dispatch));
        rig.finish_and_quit(Phase::Cancelled).await;
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
    withhold_shutdown(&mut parts);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.dispatch_running().await;
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
    let dispatch = dispatch_request();
    let script = async {
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, dispatch);
        // Without the refusal fed back the brief would stay queued and Enter would do nothing.
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, dispatch);
        rig.engine(rig.running()).await;
        rig.finish_and_quit(Phase::Done).await;
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
}

#[tokio::test]
async fn a_signal_shuts_down_without_asking_and_a_second_one_exits_at_once() {
    let (mut rig, mut parts) = rig(false);
    withhold_shutdown(&mut parts);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.dispatch_running().await;
        // A question is open when the signal comes: it is dismissed, not answered.
        rig.press(KeyCode::Char('c'));
        rig.signals.send(Interrupt::Stop).unwrap();
        assert_eq!(rig.next_request().await, Request::Shutdown);
        rig.signals.send(Interrupt::Stop).unwrap();
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Interrupted { hung_up: false });
    assert!(rig.asked.try_recv().is_err(), "no cancel was asked for");
}

/// The terminal hung up while a dispatch runs: the loop asks for the shutdown at once, takes the
/// teardown's events without drawing any of them, lets the SIGHUPs that follow (the shell's exit
/// sends another) change nothing, and ends hung up once the engine says everything has torn down.
#[tokio::test]
async fn a_hangup_shuts_down_draws_nothing_more_and_repeats_change_nothing() {
    let (mut rig, mut parts) = rig(false);
    let tell = hold_shutdown_until_told(&mut parts);
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    let script = async {
        rig.dispatch_running().await;
        rig.signals.send(Interrupt::HangUp).unwrap();
        assert_eq!(
            rig.next_request().await,
            Request::HangUp,
            "the engine is told why: the terminal went away"
        );
        rig.signals.send(Interrupt::HangUp).unwrap();
        rig.signals.send(Interrupt::HangUp).unwrap();
        // Signals are taken before engine events: the loop took both repeats and went on.
        rig.tearing_down().await;
        tell.send(()).unwrap();
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::HungUp);
    assert_drawn_only_before_the_hangup(&terminal.backend().to_string());
    assert!(
        rig.asked.try_recv().is_err(),
        "one shutdown was asked for, nothing else"
    );
}

/// With the terminal gone, SIGINT/SIGTERM still mean what they always do: the first changes nothing
/// more (the shutdown is under way), the second exits at once — and says the terminal is gone.
#[tokio::test]
async fn after_a_hangup_a_second_stop_signal_still_exits_at_once() {
    let (mut rig, mut parts) = rig(false);
    withhold_shutdown(&mut parts);
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    let script = async {
        rig.dispatch_running().await;
        rig.signals.send(Interrupt::HangUp).unwrap();
        assert_eq!(
            rig.next_request().await,
            Request::HangUp,
            "the engine is told why: the terminal went away"
        );
        rig.signals.send(Interrupt::Stop).unwrap();
        rig.tearing_down().await;
        rig.signals.send(Interrupt::Stop).unwrap();
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Interrupted { hung_up: true });
    assert_drawn_only_before_the_hangup(&terminal.backend().to_string());
}

/// The terminal's input fails the way a terminal that went away makes it fail (EIO from a tty that
/// hung up, ENXIO, EPIPE, an unexpected end), or simply ends: each ends the loop as a hangup does.
#[tokio::test]
async fn an_input_that_fails_or_ends_because_the_terminal_went_away_ends_like_a_hangup() {
    let endings: [(&str, Option<MakeError>); 5] = [
        ("EIO", Some(|| Errno::IO.into())),
        ("ENXIO", Some(|| Errno::NXIO.into())),
        ("EPIPE", Some(|| Errno::PIPE.into())),
        (
            "an unexpected end",
            Some(|| std::io::ErrorKind::UnexpectedEof.into()),
        ),
        ("the end of the input", None),
    ];
    for (ending, failure) in endings {
        let (mut rig, mut parts) = rig(false);
        let tell = hold_shutdown_until_told(&mut parts);
        let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
        let script = async {
            rig.dispatch_running().await;
            match failure {
                Some(error) => rig.keys.send(Err(error())).unwrap(),
                None => rig.close_input(),
            }
            assert_eq!(rig.next_request().await, Request::HangUp, "{ending}");
            rig.tearing_down().await;
            tell.send(()).unwrap();
        };
        let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
        assert_eq!(exit.unwrap(), Exit::HungUp, "{ending}");
        assert_drawn_only_before_the_hangup(&terminal.backend().to_string());
    }
}

/// A frame fails the way writing to a terminal that went away fails: the loop hangs up at that
/// frame, tries no other, and ends once everything has torn down.
#[tokio::test]
async fn a_draw_that_finds_the_terminal_gone_ends_like_a_hangup() {
    let failure = Arc::new(Mutex::new(None));
    let frames = Arc::new(AtomicUsize::new(0));
    let mut terminal = Terminal::new(FailingBackend::new(&failure, &frames)).unwrap();
    let (mut rig, mut parts) = rig(false);
    let tell = hold_shutdown_until_told(&mut parts);
    let frame_count = || frames.load(std::sync::atomic::Ordering::SeqCst);
    let script = async {
        rig.dispatch_running().await;
        *failure.lock().unwrap() = Some(|| Errno::IO.into());
        let drawn = frame_count();
        // Something to draw: that frame fails.
        rig.engine(vec![rig.says("Still looking.")]).await;
        assert_eq!(
            rig.next_request().await,
            Request::HangUp,
            "the engine is told why: the terminal went away"
        );
        rig.tearing_down().await;
        tell.send(()).unwrap();
        drawn
    };
    let (exit, drawn) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::HungUp);
    assert_eq!(
        frame_count() - drawn,
        1,
        "one frame failed and no other was tried"
    );
    assert_drawn_only_before_the_hangup(&terminal.backend().screen.to_string());
}

#[tokio::test]
async fn a_draw_that_fails_otherwise_ends_the_loop_with_an_error() {
    let failure: Failure = Arc::new(Mutex::new(Some(|| {
        std::io::Error::other("the backend broke")
    })));
    let frames = Arc::new(AtomicUsize::new(0));
    let mut terminal = Terminal::new(FailingBackend::new(&failure, &frames)).unwrap();
    let (_rig, parts) = rig(false);
    let exit = drive_with(&mut terminal, parts).await;
    assert!(
        matches!(&exit, Err(LoopError::Draw(reason)) if reason == "the backend broke"),
        "{exit:?}"
    );
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

#[tokio::test]
async fn a_collected_result_has_its_patch_read_for_the_review_gate() {
    let (mut rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(80, 20)).unwrap();
    let script = async {
        rig.dispatch_running().await;
        rig.engine(vec![EventKind::Collected {
            commit: crate::app::tests::sha(),
            reference: rig.sanitizer.sanitize("refs/stet/x"),
            files: Vec::new(),
            files_not_listed: 0,
            insertions: 0,
            deletions: 0,
            gate: Box::default(),
        }])
        .await;
        assert_eq!(rig.next_request().await, Request::LoadPatch(rig.dispatch));
        rig.finish_and_quit(Phase::Done).await;
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
}

#[test]
fn the_wheel_scrolls_the_pane_under_the_pointer() {
    use crate::app::tests::{Script, app as app_of, dispatch_selected};
    use crossterm::event::{MouseButton, MouseEvent};
    let mut app = app_of(&["a", "b"]);
    let script = Script::fixed("a", 1);
    dispatch_selected(&mut app);
    app.update(Msg::EngineBatch(script.started()));
    let area = ratatui::layout::Rect::new(0, 0, 100, 30);
    let at = |kind, column, row| MouseEvent {
        kind,
        column,
        row,
        modifiers: KeyModifiers::NONE,
    };
    assert_eq!(
        wheel(at(MouseEventKind::ScrollDown, 5, 5), &app, area),
        Some(Msg::SelectNext)
    );
    assert_eq!(
        wheel(at(MouseEventKind::ScrollUp, 60, 26), &app, area),
        Some(Msg::ScrollUp(WHEEL_LINES))
    );
    assert_eq!(
        wheel(
            at(MouseEventKind::Down(MouseButton::Left), 60, 26),
            &app,
            area
        ),
        None,
        "a click is not a scroll"
    );
    assert_eq!(
        wheel(at(MouseEventKind::ScrollUp, 60, 29), &app, area),
        None,
        "the footer scrolls nothing"
    );
}

/// An agent flooding the transcript from another thread never keeps a key waiting more than one
/// batch: the events sent between the key press and the moment the loop makes the request the keys
/// ask for stay within one drained batch and the channel's capacity, however long the flood lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_agent_never_holds_up_a_key_by_more_than_one_batch() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (mut rig, mut parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let at_cancel = Arc::new(AtomicU64::new(0));
    let mut inner = parts.perform;
    parts.perform = {
        let (sent, at_cancel) = (sent.clone(), at_cancel.clone());
        Box::new(move |request| {
            if matches!(request, Request::Cancel(_)) {
                at_cancel.store(sent.load(Ordering::SeqCst), Ordering::SeqCst);
            }
            inner(request)
        })
    };
    let script = async {
        rig.dispatch_running().await;
        let flood = {
            let (events, sent, dispatch) = (rig.events.clone(), sent.clone(), rig.dispatch);
            let line = rig
                .sanitizer
                .sanitize("flood flood flood flood flood flood");
            tokio::spawn(async move {
                loop {
                    let item = EventKind::Transcript(TranscriptItem {
                        item: ItemKind::Output,
                        text: line.clone(),
                    });
                    if events
                        .send(Event::new(dispatch, BRIEF, item))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        while sent.load(Ordering::SeqCst) < 50_000 {
            tokio::task::yield_now().await;
        }
        let before = sent.load(Ordering::SeqCst);
        rig.press(KeyCode::Char('c'));
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, Request::Cancel(rig.dispatch));
        let taken = at_cancel.load(Ordering::SeqCst) - before;
        let bound = (2 * MAX_BATCH + rig.events.max_capacity()) as u64;
        assert!(
            taken <= bound,
            "{taken} events went ahead of the key (bound {bound})"
        );
        flood.abort();
        rig.finish_and_quit(Phase::Cancelled).await;
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
}

#[tokio::test]
async fn a_saved_brief_is_written_into_the_inbox_and_read_back() {
    let repository = tempfile::tempdir().unwrap();
    let draft = BriefDraft {
        title: "Cut a release".to_owned(),
        repo: "demo/app".to_owned(),
        base: "main".to_owned(),
        items: vec!["tag it".to_owned()],
    };
    let reply = save_brief(repository.path().to_owned(), draft).await;
    let Some(Reply::Update(Msg::BriefSaved {
        file: Some(file),
        saved: Ok(brief),
    })) = reply
    else {
        panic!("{reply:?}");
    };
    assert_eq!(
        file,
        repository.path().join(".stet/briefs/cut-a-release.toml")
    );
    assert_eq!(brief.title, "Cut a release");
    assert_eq!(
        Brief::from_file(&file).unwrap(),
        *brief,
        "what the inbox shows is what the file says"
    );
}

/// Keys drive search and scrolling through the loop: `/greeting` + Enter pins the match, `k` scrolls
/// on from it, and the transcript says so in its title on the last frame drawn.
#[tokio::test]
async fn search_and_scroll_through_the_loop() {
    let (mut rig, parts) = rig(false);
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    let script = async {
        rig.dispatch_running().await;
        let lines = (0..30)
            .map(|n| {
                EventKind::Transcript(TranscriptItem {
                    item: ItemKind::Output,
                    text: rig.sanitizer.sanitize(&format!("line {n}")),
                })
            })
            .collect();
        rig.engine(lines).await;
        rig.press(KeyCode::Char('/'));
        for c in "greeting".chars() {
            rig.press(KeyCode::Char(c));
        }
        rig.press(KeyCode::Enter);
        rig.press(KeyCode::Char('k'));
        // A request after the keys: by the time it arrives they have all been acted on.
        rig.press(KeyCode::Char('c'));
        rig.press(KeyCode::Char('y'));
        assert_eq!(rig.next_request().await, Request::Cancel(rig.dispatch));
        rig.finish_and_quit(Phase::Cancelled).await;
    };
    let (exit, ()) = tokio::join!(drive_with(&mut terminal, parts), script);
    assert_eq!(exit.unwrap(), Exit::Quit);
    let shown = terminal.backend().to_string();
    assert!(shown.contains("— paused, G follows — /greeting"), "{shown}");
    assert!(
        !shown.contains("line 29"),
        "scrolled away from the tail: {shown}"
    );
}
