//! Relaying between two sockets without copying through user memory: each direction moves its
//! bytes socket → pipe → socket with `splice(2)` (rustix's safe wrapper), so a relaying hop adds no
//! copy of its own to the kernel's. A direction hands its caller each chunk's length between the two
//! moves, before the chunk goes on, so the host's egress proxy can count it against its bounds; the
//! in-sandbox relay passes it straight on ([`both_ways`]). Shared by those two, which must not
//! depend on each other. [`mux`] is the other thing they share: the connections of the channel
//! stream that carries the relay's channels over the engine's exec stream (copy mode).

pub mod mux;

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::RecvFlags;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The size each pipe is asked for: a chunk of up to this many bytes moves per system call. An
/// account past its pipe allowance (`/proc/sys/fs/pipe-user-pages-soft`) keeps the default size.
pub const PIPE_SIZE: usize = 1 << 20;

/// A socket registered with tokio's reactor, whose readiness a direction waits on before each move.
pub trait Socket: AsFd {
    /// Resolves once the socket may be ready for `interest`.
    fn wait(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;

    /// Runs `attempt` on the socket; a `WouldBlock` from it clears the readiness it used.
    fn attempt<R>(
        &self,
        interest: Interest,
        attempt: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R>;
}

impl Socket for TcpStream {
    async fn wait(&self, interest: Interest) -> io::Result<()> {
        self.ready(interest).await.map(drop)
    }

    fn attempt<R>(
        &self,
        interest: Interest,
        attempt: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        self.try_io(interest, attempt)
    }
}

impl Socket for UnixStream {
    async fn wait(&self, interest: Interest) -> io::Result<()> {
        self.ready(interest).await.map(drop)
    }

    fn attempt<R>(
        &self,
        interest: Interest,
        attempt: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        self.try_io(interest, attempt)
    }
}

/// How many bytes a direction moves before it keeps its pipe between chunks. Until then each
/// emptied pipe is closed, so a direction that only carried a request head, a proxy's answer or a
/// TLS handshake holds no descriptors while its tunnel is idle; a bulk transfer pays for making its
/// pipe only on its first few chunks.
pub const KEEP_AFTER: u64 = 64 << 10;

/// One direction's pipe and how many bytes it holds, taken from one socket and not yet passed on.
/// The pipe itself is made on the direction's first bytes and, until it has moved [`KEEP_AFTER`]
/// bytes, closed again each time it is emptied, so a tunnel that carries nothing, or only a
/// handshake, holds no descriptor for it.
#[derive(Debug, Default)]
pub struct Pipe {
    ends: Option<Ends>,
    held: usize,
    moved: u64,
}

/// A made pipe's two ends and its size.
#[derive(Debug)]
struct Ends {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

/// Why a pipe could not be made (for example, the process is out of descriptors): the error a fill
/// returns then wraps this one, so a caller can tell it from the socket's own errors.
#[derive(Debug, thiserror::Error)]
#[error("no pipe could be made to relay through: {0}")]
pub struct NoPipe(#[source] io::Error);

impl NoPipe {
    /// Whether `error` is a fill's failure to make its pipe rather than the socket's.
    pub fn is(error: &io::Error) -> bool {
        error.get_ref().is_some_and(|inner| inner.is::<NoPipe>())
    }
}

impl Ends {
    /// A new, empty pipe (two descriptors, closed on exec), [`PIPE_SIZE`] when the account may.
    fn new() -> io::Result<Ends> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let capacity = match rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE) {
            Ok(size) => size,
            Err(_) => rustix::pipe::fcntl_getpipe_size(&write)?,
        };
        Ok(Ends {
            read,
            write,
            capacity,
        })
    }
}

impl Pipe {
    /// A direction with no pipe yet: the first fill that finds bytes to take makes it.
    pub fn new() -> Pipe {
        Pipe::default()
    }

    /// Whether the pipe is made (its two descriptors are open).
    pub fn is_made(&self) -> bool {
        self.ends.is_some()
    }

    /// Bytes taken and not yet passed on.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Takes what `from` has, at most `max` bytes, into the pipe once it has passed on all it held;
    /// returns how many (0: `from` ended, or `max` is 0). The pipe is made when `from` is first
    /// ready; a failure to make it is an error that [`NoPipe::is`] recognises. Safe to cancel:
    /// nothing is taken unless the call returns.
    pub async fn fill<S: Socket>(&mut self, from: &S, max: usize) -> io::Result<usize> {
        if self.held > 0 {
            return Err(io::Error::other(
                "a pipe was filled before what it held was passed on",
            ));
        }
        if max == 0 {
            return Ok(0);
        }
        loop {
            from.wait(Interest::READABLE).await?;
            let ends = match &mut self.ends {
                Some(ends) => ends,
                None => {
                    // Readiness can be spurious: look before making the pipe, so that only a
                    // direction with a byte or its end to take holds one.
                    let mut byte = [0u8; 1];
                    let peeked = from.attempt(Interest::READABLE, || {
                        Ok(rustix::net::recv(
                            from,
                            &mut byte,
                            RecvFlags::PEEK | RecvFlags::DONTWAIT,
                        )?)
                    });
                    match peeked {
                        Ok((0, _)) => return Ok(0),
                        Ok(_) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(error) => return Err(error),
                    }
                    let made =
                        Ends::new().map_err(|error| io::Error::new(error.kind(), NoPipe(error)))?;
                    self.ends.insert(made)
                }
            };
            let length = max.min(ends.capacity);
            let moved = from.attempt(Interest::READABLE, || {
                // The pipe is empty, so a `WouldBlock` can only be the socket's.
                Ok(rustix::pipe::splice(
                    from,
                    None,
                    &ends.write,
                    None,
                    length,
                    SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
                )?)
            });
            match moved {
                Ok(taken) => {
                    self.held = taken;
                    return Ok(taken);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// Passes everything the pipe holds on to `to`. Safe to cancel: what is left stays held for the
    /// next call.
    pub async fn drain<S: Socket>(&mut self, to: &S) -> io::Result<()> {
        while self.held > 0 {
            self.pass(to).await?;
        }
        Ok(())
    }

    /// Passes some of what the pipe holds on to `to`, once `to` takes any; returns how many bytes
    /// (0 only when it held none). Safe to cancel.
    pub async fn pass<S: Socket>(&mut self, to: &S) -> io::Result<usize> {
        while self.held > 0 {
            let Some(ends) = &self.ends else {
                return Err(io::Error::other("a pipe holds bytes but was never made"));
            };
            to.wait(Interest::WRITABLE).await?;
            let moved = to.attempt(Interest::WRITABLE, || {
                Ok(rustix::pipe::splice(
                    &ends.read,
                    None,
                    to,
                    None,
                    self.held,
                    SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
                )?)
            });
            match moved {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(passed) => {
                    self.held -= passed;
                    self.moved = self.moved.saturating_add(passed as u64);
                    if self.held == 0 && self.moved < KEEP_AFTER {
                        self.ends = None;
                    }
                    return Ok(passed);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
        Ok(0)
    }
}

/// Ends the writing half of `socket`: its peer reads the end of the stream while the other
/// direction goes on.
pub fn shut_write<S: AsFd>(socket: &S) -> io::Result<()> {
    Ok(rustix::net::shutdown(socket, rustix::net::Shutdown::Write)?)
}

/// Relays `a` and `b` both ways until each side has ended its writing, passing each end on as a
/// half-close; returns the bytes moved a → b and b → a. The first error of either direction ends
/// both. Each direction makes its pipe on its first bytes.
pub async fn both_ways<A: Socket, B: Socket>(a: &A, b: &B) -> io::Result<(u64, u64)> {
    let (mut forth, mut back) = (Pipe::new(), Pipe::new());
    tokio::try_join!(one_way(&mut forth, a, b), one_way(&mut back, b, a))
}

/// Moves `from` to `to` through `pipe` until `from` ends, then ends `to`'s writing half.
async fn one_way<F: Socket, T: Socket>(pipe: &mut Pipe, from: &F, to: &T) -> io::Result<u64> {
    let mut moved = 0u64;
    loop {
        let taken = pipe.fill(from, usize::MAX).await?;
        if taken == 0 {
            // The peer may already be gone; its end is what it would have read.
            let _ = shut_write(to);
            return Ok(moved);
        }
        pipe.drain(to).await?;
        moved += taken as u64;
    }
}

#[cfg(test)]
mod tests;
