//! The terminal the theater draws on: raw mode and the alternate screen, given back on every exit (a
//! panic included), and nothing written once the terminal has gone away.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

/// Whether standard input and standard output are both a terminal, as the theater needs.
pub(crate) fn on_a_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The terminal in raw mode on the alternate screen, given back as it was when this is dropped (on
/// return, on error, and while a panic on this thread unwinds) — unless it went away meanwhile, when
/// nothing more is written to it. A panic hook installed before the terminal is touched restores it
/// too, before the panic message is printed.
pub(crate) struct TerminalSession {
    pub(crate) terminal: ratatui::Terminal<ratatui::backend::CrosstermBackend<TtyWriter>>,
    /// Set once the terminal is known to be gone: by a write that failed so, or by [`Self::hang_up`].
    pub(crate) gone: Arc<AtomicBool>,
}

impl TerminalSession {
    pub(crate) fn enter() -> anyhow::Result<TerminalSession> {
        let gone = Arc::new(AtomicBool::new(false));
        install_restoring_panic_hook(Arc::clone(&gone));
        crossterm::terminal::enable_raw_mode().context("putting the terminal in raw mode")?;
        let entered = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::event::EnableMouseCapture,
            crossterm::cursor::Hide
        )
        .context("switching to the alternate screen")
        .and_then(|()| TtyWriter::new(Arc::clone(&gone)))
        .and_then(|writer| {
            ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(writer))
                .context("measuring the terminal")
        });
        match entered {
            Ok(terminal) => Ok(TerminalSession { terminal, gone }),
            Err(error) => {
                restore_terminal(&gone);
                Err(error)
            }
        }
    }

    /// The terminal went away: nothing more is written to it, not even what restores it.
    pub(crate) fn hang_up(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        restore_terminal(&self.gone);
    }
}

/// The terminal's keys, mouse and resizes, ending with an EIO error once the terminal hangs up.
/// crossterm's reader does not notice a tty that hung up (it reads it again and again:
/// crossterm-rs/crossterm#793), so the tty itself is watched as well.
pub(crate) fn terminal_input() -> anyhow::Result<
    impl futures_util::Stream<Item = std::io::Result<crossterm::event::Event>> + Unpin,
> {
    use futures_util::StreamExt;
    let hangup = futures_util::stream::once(stdin_hangup()?).map(Err);
    Ok(futures_util::stream::select(
        crossterm::event::EventStream::new(),
        Box::pin(hangup),
    ))
}

/// Resolves, with an EIO error, once the terminal on standard input hangs up: a thread of its own
/// waits for it in poll(2) ([`tty_hung_up`]).
pub(crate) fn stdin_hangup() -> anyhow::Result<impl Future<Output = std::io::Error>> {
    let tty = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("watching the terminal for a hangup")?;
    let (hung_up, told) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("stet-hangup".to_owned())
        .spawn(move || {
            loop {
                match tty_hung_up(&tty, None) {
                    Ok(true) => {
                        let _ = hung_up.send(());
                        return;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "cannot watch the terminal for a hangup");
                        return;
                    }
                }
            }
        })
        .context("watching the terminal for a hangup")?;
    Ok(async move {
        if told.await.is_err() {
            // Not watched after all (the warning is in the log): never a hangup from here.
            std::future::pending::<()>().await;
        }
        std::io::Error::from(rustix::io::Errno::IO)
    })
}

/// Whether the terminal `tty` has hung up, waiting at most `timeout` for it (`None`: until it
/// does). poll(2) is asked for no event at all, so only the hangup (or error) condition the kernel
/// always reports wakes it.
pub(crate) fn tty_hung_up(
    tty: &impl AsFd,
    timeout: Option<&rustix::event::Timespec>,
) -> rustix::io::Result<bool> {
    use rustix::event::{PollFd, PollFlags};
    loop {
        let mut watched = [PollFd::new(tty, PollFlags::empty())];
        match rustix::event::poll(&mut watched, timeout) {
            Ok(_) => {
                let gone = PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL;
                return Ok(watched[0].revents().intersects(gone));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error),
        }
    }
}

/// Where the theater draws: standard output's file, with what is drawn held until the frame is
/// flushed (no buffer of std's that would still try to write it at exit). A flush that finds the
/// terminal gone ([`stet_tui::event_loop::terminal_gone`]) says so (the event loop then hangs up)
/// and marks it gone; from then on whatever is written is dropped, so nothing — the cursor ratatui
/// shows again when dropped included — reaches a dead terminal or fails there.
pub(crate) struct TtyWriter {
    pub(crate) file: std::fs::File,
    pub(crate) frame: Vec<u8>,
    pub(crate) gone: Arc<AtomicBool>,
}

impl TtyWriter {
    fn new(gone: Arc<AtomicBool>) -> anyhow::Result<TtyWriter> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .context("opening the terminal for drawing")?;
        Ok(TtyWriter {
            file: std::fs::File::from(fd),
            frame: Vec::new(),
            gone,
        })
    }
}

impl Write for TtyWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if !self.gone.load(Ordering::SeqCst) {
            self.frame.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let frame = std::mem::take(&mut self.frame);
        if self.gone.load(Ordering::SeqCst) {
            return Ok(());
        }
        let written = self.file.write_all(&frame).and_then(|()| self.file.flush());
        if let Err(error) = &written
            && stet_tui::event_loop::terminal_gone(error)
        {
            self.gone.store(true, Ordering::SeqCst);
        }
        written
    }
}

/// Leaves raw mode and the alternate screen, unless the terminal is `gone`; safe to call more than
/// once.
pub(crate) fn restore_terminal(gone: &AtomicBool) {
    if gone.load(Ordering::SeqCst) {
        return;
    }
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::event::DisableMouseCapture,
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

/// A panic on the thread that draws restores the terminal before the message is printed. A panic
/// on another thread (an engine task; the dispatcher turns it into a failed dispatch), or any panic
/// once the terminal is `gone`, goes to the log only, so it never scribbles over the theater nor
/// writes to a terminal that went away.
pub(crate) fn install_restoring_panic_hook(gone: Arc<AtomicBool>) {
    let ui_thread = std::thread::current().id();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == ui_thread && !gone.load(Ordering::SeqCst) {
            restore_terminal(&gone);
            previous(info);
        } else {
            tracing::error!(panic = %info, "panicked");
        }
    }));
}
