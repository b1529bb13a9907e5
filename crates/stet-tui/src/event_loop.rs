//! The theater's event loop: one `select!` over the terminal's input, the engine's events, signals and
//! a frame tick, feeding the pure app model and drawing only when it changed. What the app asks of the
//! engine runs on a task of its own, so a slow engine never freezes the keys (helix passes input in as
//! a stream the same way, so tests drive the whole loop). When the terminal goes away the loop stops
//! drawing and reading it, and ends once every dispatch has been cancelled and torn down.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crossterm::event::{Event as TerminalEvent, MouseEvent, MouseEventKind};
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use ratatui::Terminal;
use ratatui::backend::Backend;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::app::{App, Confirm, InboxRow, Msg, Request};
use crate::engine::EngineHandle;
use crate::form::{self, BriefDraft};
use crate::view::Pane;
use crate::{keymap, view};
use stet_protocol::event::{DispatchId, Event, EventKind};

/// How often the clock advances live elapsed times and spinners.
pub const FRAME: Duration = Duration::from_millis(250);

/// The most engine events folded into one frame: a flooding agent still leaves room for keys.
const MAX_BATCH: usize = 4096;

/// A signal the theater is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT or SIGTERM: someone asks stet to stop; a second one exits at once.
    Stop,
    /// SIGHUP: the terminal went away. The hangup and the shell's exit may each send one, so a
    /// repeat means nothing more.
    HangUp,
}

#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum LoopError {
    #[error("reading the terminal's input: {0}")]
    Input(std::io::Error),
    #[error("drawing the terminal: {0}")]
    Draw(String),
}

/// Result alias of the event loop.
pub type Result<T> = std::result::Result<T, LoopError>;

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The person quit (or a signal asked to) and every dispatch has finished and torn down.
    Quit,
    /// The terminal went away (SIGHUP, its input ended or failed, or drawing to it failed): every
    /// dispatch has been cancelled and has torn down, and nothing more may be written to it.
    HungUp,
    /// A second SIGINT/SIGTERM arrived while dispatches were still tearing down: exit now; the
    /// journal lets the next launch (or `stet sweep`) reclaim what is left. `hung_up` says whether
    /// the terminal had gone away before (then nothing more may be written to it).
    Interrupted {
        /// Whether the terminal had gone away before.
        hung_up: bool,
    },
}

/// Whether `error`, from reading or writing the terminal, says the terminal is gone: EIO (a tty
/// that hung up), ENXIO (no such device any more), EPIPE, or an unexpected end of input.
pub fn terminal_gone(error: &std::io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        error.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::UnexpectedEof
    ) || Errno::from_io_error(error)
        .is_some_and(|errno| [Errno::IO, Errno::NXIO, Errno::PIPE].contains(&errno))
}

/// Whether a backend's `error` says the terminal is gone: an I/O error (at its top or anywhere in
/// its sources) that [`terminal_gone`] recognises.
fn backend_gone(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |error| error.source())
        .filter_map(|error| error.downcast_ref::<std::io::Error>())
        .any(terminal_gone)
}

/// How many transcript items (or diff lines) one notch of the mouse wheel scrolls.
const WHEEL_LINES: usize = 3;

/// What a request to the engine came to, fed back into the loop.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one reply per request a person makes: a boxed message would save nothing measurable"
)]
enum Reply {
    /// Something for the app: the engine's refusal, or what was read from disk.
    Update(Msg),
    /// Every dispatch has finished and torn down.
    ShutDown,
}

/// Runs the theater on `terminal` until the person quits and every dispatch has torn down.
/// `input` is the terminal's event stream, `events` the engine's, `interrupts` yields once per
/// signal: the first SIGINT/SIGTERM quits the way `q` + `y` does, the second returns
/// [`Exit::Interrupted`] at once. A SIGHUP, an end or a hangup error of `input`, or a draw that fails
/// with one, means the terminal went away: the loop stops drawing and reading it, quits the same
/// way, and returns [`Exit::HungUp`] once every dispatch has torn down, however many SIGHUPs follow.
/// Everything from the engine, the review gate's patch included, comes through `handle` and `events`;
/// `repository` is the root of the repository whose inbox (`.stet/briefs`) the new-brief form writes
/// into; `inbox` yields the inbox read again each time it changed on disk (the caller watches it).
#[expect(
    clippy::too_many_arguments,
    reason = "each is one independent source or sink of the loop; a struct would only rename them"
)]
pub async fn run<B>(
    terminal: &mut Terminal<B>,
    app: App,
    input: impl Stream<Item = std::io::Result<TerminalEvent>> + Unpin,
    events: mpsc::Receiver<Event>,
    interrupts: impl Stream<Item = Interrupt> + Unpin,
    inbox: mpsc::Receiver<Vec<InboxRow>>,
    handle: Arc<dyn EngineHandle>,
    repository: PathBuf,
) -> Result<Exit>
where
    B: Backend,
    B::Error: 'static,
{
    let perform = move |request: Request| -> BoxFuture<'static, Option<Reply>> {
        match request {
            Request::LoadPatch(dispatch) => Box::pin(load_patch(Arc::clone(&handle), dispatch)),
            Request::SaveBrief(draft) => Box::pin(save_brief(repository.clone(), draft)),
            request => Box::pin(ask_engine(Arc::clone(&handle), request)),
        }
    };
    drive(terminal, app, input, events, interrupts, inbox, perform).await
}

/// Asks the engine for the diff of `dispatch`'s result.
async fn load_patch(handle: Arc<dyn EngineHandle>, dispatch: DispatchId) -> Option<Reply> {
    let patch = handle.patch(dispatch).await;
    Some(Reply::Update(Msg::PatchLoaded { dispatch, patch }))
}

/// Writes the form's brief into the inbox of `repository` on the blocking pool and reads it back.
async fn save_brief(repository: PathBuf, draft: BriefDraft) -> Option<Reply> {
    let saved = tokio::task::spawn_blocking(move || form::save(&repository, &draft))
        .await
        .map_err(|error| format!("saving stopped: {error}"))
        .and_then(|saved| saved.map_err(|error| error.to_string()));
    let msg = match saved {
        Ok(entry) => Msg::BriefSaved {
            saved: entry.brief.map(Box::new).map_err(|error| error.to_string()),
            file: Some(entry.path),
        },
        Err(reason) => Msg::BriefSaved {
            file: None,
            saved: Err(reason),
        },
    };
    Some(Reply::Update(msg))
}

/// Sends `request` through `handle`; the engine's refusal comes back as a message for the app.
async fn ask_engine(handle: Arc<dyn EngineHandle>, request: Request) -> Option<Reply> {
    let refusal = match &request {
        Request::Dispatch { brief } => handle.dispatch(brief.as_ref().clone()).await.err(),
        Request::LoadPatch(_) | Request::SaveBrief(_) => None,
        Request::Cancel(dispatch) => handle.cancel(*dispatch).await.err(),
        Request::Approve(dispatch) => handle.approve(*dispatch).await.err(),
        Request::Discard(dispatch) => handle.discard(*dispatch).await.err(),
        Request::Shutdown => {
            handle.shutdown().await;
            return Some(Reply::ShutDown);
        }
        Request::HangUp => {
            handle.hang_up().await;
            return Some(Reply::ShutDown);
        }
    };
    refusal.map(|reason| Reply::Update(Msg::RequestFailed { request, reason }))
}

/// The loop itself; `perform` turns a request into the future that carries it out.
async fn drive<B, P>(
    terminal: &mut Terminal<B>,
    mut app: App,
    mut input: impl Stream<Item = std::io::Result<TerminalEvent>> + Unpin,
    mut events: mpsc::Receiver<Event>,
    mut interrupts: impl Stream<Item = Interrupt> + Unpin,
    mut inbox: mpsc::Receiver<Vec<InboxRow>>,
    mut perform: P,
) -> Result<Exit>
where
    B: Backend,
    B::Error: 'static,
    P: FnMut(Request) -> BoxFuture<'static, Option<Reply>>,
{
    let (replies_sender, mut replies) = mpsc::unbounded_channel::<Reply>();
    let mut tick = tokio::time::interval(FRAME);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let (mut input_open, mut events_open, mut interrupts_open) = (true, true, true);
    let mut inbox_open = true;
    let mut stops = 0u32;
    let mut hung_up = false;
    let mut resized = false;
    loop {
        let mut pages = None;
        if !hung_up
            && (app.take_changed() || std::mem::take(&mut resized))
            && let Err(error) = terminal.draw(|frame| {
                view::render(frame, &app);
                pages = Some(view::pages(&app, frame.area()));
            })
        {
            if !backend_gone(&error) {
                return Err(LoopError::Draw(error.to_string()));
            }
            let cause = format!("drawing it failed: {error}");
            hang_up(
                &mut hung_up,
                &cause,
                &mut app,
                &mut perform,
                &replies_sender,
            );
        }
        if let Some(pages) = pages {
            app.set_pages(pages);
        }
        if app.can_exit() {
            return Ok(ending(hung_up));
        }
        // How the terminal went away, when this turn found out.
        let mut went_away = None;
        // Keys first: a flooding agent never delays a keypress by more than one batch.
        let msg = tokio::select! {
            biased;
            item = input.next(), if input_open && !hung_up => match item {
                Some(Ok(TerminalEvent::Key(key))) => keymap::message_for(key, &app),
                Some(Ok(TerminalEvent::Mouse(mouse))) => match terminal.size() {
                    Ok(size) => wheel(mouse, &app, size.into()),
                    Err(error) if backend_gone(&error) => {
                        went_away = Some(format!("measuring it failed: {error}"));
                        None
                    }
                    Err(error) => return Err(LoopError::Draw(error.to_string())),
                },
                Some(Ok(TerminalEvent::Resize(..))) => {
                    resized = true;
                    None
                }
                Some(Ok(_)) => None,
                Some(Err(error)) if terminal_gone(&error) => {
                    went_away = Some(format!("reading it failed: {error}"));
                    None
                }
                Some(Err(error)) => return Err(LoopError::Input(error)),
                None => {
                    input_open = false;
                    went_away = Some("its input ended".to_owned());
                    None
                }
            },
            Some(reply) = replies.recv() => match reply {
                Reply::Update(msg) => Some(msg),
                Reply::ShutDown => {
                    // The engine is the authority: everything has torn down, so whatever events are
                    // still queued are the last ones.
                    if let Ok(first) = events.try_recv() {
                        app.update(Msg::EngineBatch(drain(first, &mut events)));
                    }
                    return Ok(ending(hung_up));
                }
            },
            signal = interrupts.next(), if interrupts_open => match signal {
                Some(Interrupt::Stop) => {
                    stops += 1;
                    if stops > 1 {
                        return Ok(Exit::Interrupted { hung_up });
                    }
                    if let Some(request) = quit_now(&mut app) {
                        spawn_request(&mut perform, request, &replies_sender);
                    }
                    None
                }
                Some(Interrupt::HangUp) => {
                    went_away = Some("SIGHUP".to_owned());
                    None
                }
                None => {
                    interrupts_open = false;
                    None
                }
            },
            received = events.recv(), if events_open => match received {
                Some(first) => {
                    let batch = drain(first, &mut events);
                    for dispatch in collected(&batch) {
                        spawn_request(&mut perform, Request::LoadPatch(dispatch), &replies_sender);
                    }
                    Some(Msg::EngineBatch(batch))
                }
                None => {
                    events_open = false;
                    None
                }
            },
            reloaded = inbox.recv(), if inbox_open => match reloaded {
                Some(rows) => Some(Msg::InboxReloaded(rows)),
                None => {
                    inbox_open = false;
                    None
                }
            },
            _ = tick.tick() => Some(Msg::Tick(Utc::now())),
        };
        if let Some(cause) = went_away {
            hang_up(
                &mut hung_up,
                &cause,
                &mut app,
                &mut perform,
                &replies_sender,
            );
        }
        if let Some(request) = msg.and_then(|msg| app.update(msg)) {
            spawn_request(&mut perform, request, &replies_sender);
        }
    }
}

/// How the loop ends once every dispatch has torn down.
fn ending(hung_up: bool) -> Exit {
    if hung_up { Exit::HungUp } else { Exit::Quit }
}

/// The terminal went away (`cause` says how): from now on nothing is drawn or read, and the app
/// quits as on a signal. Once hung up, a repeat (another SIGHUP, a later failure) changes nothing.
fn hang_up<P>(
    hung_up: &mut bool,
    cause: &str,
    app: &mut App,
    perform: &mut P,
    replies: &mpsc::UnboundedSender<Reply>,
) where
    P: FnMut(Request) -> BoxFuture<'static, Option<Reply>>,
{
    if std::mem::replace(hung_up, true) {
        return;
    }
    tracing::warn!(
        cause,
        "the terminal went away: cancelling every dispatch and waiting for every teardown"
    );
    if let Some(request) = quit_now(app) {
        // The engine records why every dispatch was cancelled.
        let request = match request {
            Request::Shutdown => Request::HangUp,
            request => request,
        };
        spawn_request(perform, request, replies);
    }
}

/// `first` and everything else already waiting on `events`, up to [`MAX_BATCH`].
fn drain(first: Event, events: &mut mpsc::Receiver<Event>) -> Vec<Event> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match events.try_recv() {
            Ok(event) => batch.push(event),
            Err(_) => break,
        }
    }
    batch
}

/// The dispatches in `batch` whose result was collected: their patch is worth reading.
fn collected(batch: &[Event]) -> Vec<DispatchId> {
    batch
        .iter()
        .filter(|event| matches!(event.kind, EventKind::Collected { .. }))
        .map(|event| event.dispatch)
        .collect()
}

/// What a turn of the mouse wheel means over the pane under the pointer (other mouse events mean
/// nothing).
fn wheel(mouse: MouseEvent, app: &App, area: ratatui::layout::Rect) -> Option<Msg> {
    let up = match mouse.kind {
        MouseEventKind::ScrollUp => true,
        MouseEventKind::ScrollDown => false,
        _ => return None,
    };
    match view::pane_at(app, area, mouse.column, mouse.row)? {
        Pane::Inbox if up => Some(Msg::SelectPrevious),
        Pane::Inbox => Some(Msg::SelectNext),
        Pane::Transcript | Pane::Review if up => Some(Msg::ScrollUp(WHEEL_LINES)),
        Pane::Transcript | Pane::Review => Some(Msg::ScrollDown(WHEEL_LINES)),
    }
}

/// Quits on a signal as `q` then `y` would, whatever question was open.
fn quit_now(app: &mut App) -> Option<Request> {
    if app
        .confirm()
        .is_some_and(|confirm| *confirm != Confirm::Quit)
    {
        app.update(Msg::ConfirmNo);
    }
    if app.confirm().is_none()
        && let Some(request) = app.update(Msg::Quit)
    {
        return Some(request);
    }
    match app.confirm() {
        Some(Confirm::Quit) => app.update(Msg::ConfirmYes),
        _ => None,
    }
}

/// Runs `request` on a task of its own; its reply comes back through `replies`.
fn spawn_request<P>(perform: &mut P, request: Request, replies: &mpsc::UnboundedSender<Reply>)
where
    P: FnMut(Request) -> BoxFuture<'static, Option<Reply>>,
{
    let work = perform(request);
    let replies = replies.clone();
    tokio::spawn(async move {
        if let Some(reply) = work.await {
            let _ = replies.send(reply);
        }
    });
}

#[cfg(test)]
mod tests;
