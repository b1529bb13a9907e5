//! The connection machinery of the channel stream ([`stet_protocol::channel_stream`]), shared by
//! the host's demultiplexer and the in-sandbox relay, which must not depend on each other: one
//! byte stream (the engine's exec stream, or the relay's stdin/stdout) carries every connection of
//! every channel as frames. Each connection is two tasks — one reads its socket within the credit
//! the other side gave and sends data frames, one writes the data received and returns credit as it
//! drains — so a connection whose socket stalls holds back only itself. Received frames are checked
//! by the side's [`Ledger`]; on the host a frame that breaks a rule ends the whole stream
//! ([`Ended::Violation`]), its connections cut.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stet_protocol::channel_stream::{
    Decoder, Frame, HEADER_BYTES, Inbound, Ledger, MAX_CONNECTIONS, MAX_PAYLOAD, Side, Violation,
};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;

/// How many bytes the stream is read by at once.
const READ_CHUNK: usize = 64 * 1024;

/// How long the relay waits before accepting again after the system refused it a connection (out
/// of file descriptors, say), so that such a failure does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How many bytes of frames may wait to be written to the stream. Past it a connection's task
/// waits for room, so a peer that reads nothing (a stopped relay, or a process in its place)
/// holds back the connections, and the host's memory does not grow with what it cannot send.
const QUEUE_BYTES: usize = 1024 * 1024;

/// How long, once the stream ended, its last frames may take to be written; a peer that reads
/// none of them does not hold the end longer (its stdin is then closed with what was not sent).
const WRITER_GRACE: Duration = Duration::from_secs(5);

/// What one side does with connections.
#[derive(Debug)]
pub enum Role {
    /// The host: each connection the relay opens goes to its channel's host end, the unix socket
    /// at the channel's index in `ends` (and nowhere else).
    Host {
        /// Each channel's host end, in the order of the channel names.
        ends: Vec<PathBuf>,
    },
    /// The relay: each connection accepted on a channel's listener is opened on the stream.
    Relay {
        /// Each channel's listener on the sandbox's loopback, in the order of the channel names.
        listeners: Vec<TcpListener>,
    },
}

/// How the stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The other side closed the stream between frames.
    Closed,
    /// This side was told to stop.
    Stopped,
    /// What the other side sent broke the protocol.
    Violation(Violation),
    /// Reading or writing the stream failed.
    Broken(String),
}

impl fmt::Display for Ended {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Closed => formatter.write_str("the other end closed the channel stream"),
            Ended::Stopped => formatter.write_str("the channel stream was stopped"),
            Ended::Violation(violation) => {
                write!(
                    formatter,
                    "the channel stream broke the protocol: {violation}"
                )
            }
            Ended::Broken(error) => write!(formatter, "the channel stream failed: {error}"),
        }
    }
}

/// What a connection's writing task receives.
enum Incoming {
    Data(Vec<u8>),
    Close,
}

/// A connection as the stream's loop holds it.
struct Connection {
    incoming: mpsc::UnboundedSender<Incoming>,
    credit: Arc<Notify>,
    task: tokio::task::AbortHandle,
}

/// A frame waiting to be written, and the room of the queue it holds (in bytes; 0 for the few
/// frames the relay's own loop sends, which it never waits for).
struct Queued {
    frame: Frame,
    held: u32,
}

/// The sending half every task shares: the ledger and the queue of frames to write, kept in the
/// same order, and the room left in the queue ([`QUEUE_BYTES`]).
struct Out {
    ledger: Mutex<Ledger>,
    frames: mpsc::UnboundedSender<Queued>,
    room: Arc<Semaphore>,
}

impl Out {
    /// Sends `frame` if the ledger lets it go, once the queue has room for it; `false` otherwise
    /// (its connection is gone, or the stream is).
    async fn send(&self, frame: Frame) -> bool {
        let held = u32::try_from(HEADER_BYTES + payload_bytes(&frame)).unwrap_or(u32::MAX);
        let Ok(room) = self.room.acquire_many(held).await else {
            return false;
        };
        let mut ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let sent = ledger.send(&frame) && self.frames.send(Queued { frame, held }).is_ok();
        if sent {
            // Given back by the writer once the frame is written.
            room.forget();
        }
        sent
    }

    /// Queues `frame` at once, holding no room (the relay's loop: opens and acknowledgements).
    fn send_now(&self, frame: Frame) -> bool {
        self.frames.send(Queued { frame, held: 0 }).is_ok()
    }

    /// The credit left on `connection`.
    fn credit(&self, connection: u32) -> u32 {
        let ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        ledger.credit(connection)
    }

    /// Opens a connection on `channel`: its number, the open frame queued.
    fn open(&self, channel: usize) -> Option<u32> {
        let mut ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let connection = ledger.opened(channel)?;
        let name = ledger.channels()[channel].clone();
        self.send_now(Frame::Open {
            connection,
            channel: name,
        })
        .then_some(connection)
    }

    fn receive(&self, frame: &Frame) -> Result<Inbound, Violation> {
        let mut ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        ledger.receive(frame)
    }
}

/// Runs the stream read from `reader` and written to `writer`, carrying `channels` (names) as
/// `role` says, until the other side closes it, it breaks the protocol, or `stop` resolves. Every
/// connection is cut when it ends; `writer` is shut down.
pub async fn run<R, W>(
    reader: R,
    writer: W,
    channels: Vec<String>,
    role: Role,
    stop: impl Future<Output = ()>,
) -> Ended
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let side = match role {
        Role::Host { .. } => Side::Host,
        Role::Relay { .. } => Side::Relay,
    };
    let (frames, queued) = mpsc::unbounded_channel();
    let room = Arc::new(Semaphore::new(QUEUE_BYTES));
    let out = Arc::new(Out {
        ledger: Mutex::new(Ledger::new(side, channels)),
        frames,
        room: Arc::clone(&room),
    });
    let mut writing = tokio::spawn(write_frames(writer, queued, room));
    let mut tasks = JoinSet::new();
    let (accepted_tx, mut accepted) = mpsc::channel::<Accepted>(1);
    let ends = match role {
        Role::Host { ends } => ends,
        Role::Relay { listeners } => {
            for (channel, listener) in listeners.into_iter().enumerate() {
                tasks.spawn(accept(channel, listener, accepted_tx.clone()));
            }
            Vec::new()
        }
    };
    drop(accepted_tx);
    let mut state = Loop {
        out: Arc::clone(&out),
        connections: HashMap::new(),
        connection_tasks: JoinSet::new(),
        ends,
    };
    let mut writer_done = None;
    let ended = state
        .serve(
            reader,
            &mut accepted,
            (&mut writing, &mut writer_done),
            stop,
        )
        .await;
    tasks.shutdown().await;
    state.connection_tasks.shutdown().await;
    state.connections.clear();
    drop(state);
    drop(out);
    // Queued frames go out, then the writer shuts down: the other end sees the stream's end. A
    // peer that reads none of them is not waited for: the writer is dropped, which closes it.
    let written = match writer_done {
        Some(written) => written,
        None => match tokio::time::timeout(WRITER_GRACE, &mut writing).await {
            Ok(Ok(written)) => written,
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => {
                writing.abort();
                Err(format!(
                    "the other end read none of the stream's last frames within {} s",
                    WRITER_GRACE.as_secs()
                ))
            }
        },
    };
    match (ended, written) {
        (Ended::Closed | Ended::Stopped, Err(error)) => Ended::Broken(error),
        (ended, _) => ended,
    }
}

/// The task writing the stream's frames, and how it ended.
type Writing = tokio::task::JoinHandle<Result<(), String>>;

/// A connection the relay accepted on the channel at the index, with its place among the bound.
type Accepted = (usize, TcpStream, OwnedSemaphorePermit);

/// The loop of one stream: its connections and where they lead.
struct Loop {
    out: Arc<Out>,
    connections: HashMap<u32, Connection>,
    connection_tasks: JoinSet<u32>,
    ends: Vec<PathBuf>,
}

impl Loop {
    async fn serve<R: AsyncRead + Unpin>(
        &mut self,
        mut reader: R,
        accepted: &mut mpsc::Receiver<Accepted>,
        (writing, writer_done): (&mut Writing, &mut Option<Result<(), String>>),
        stop: impl Future<Output = ()>,
    ) -> Ended {
        tokio::pin!(stop);
        let mut decoder = Decoder::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            tokio::select! {
                () = &mut stop => return Ended::Stopped,
                written = &mut *writing => {
                    let written = written.unwrap_or_else(|error| Err(error.to_string()));
                    *writer_done = Some(written.clone());
                    return Ended::Broken(match written {
                        Ok(()) => "the stream's writer ended".to_owned(),
                        Err(error) => error,
                    });
                }
                Some(Ok(connection)) = self.connection_tasks.join_next() => {
                    self.connections.remove(&connection);
                }
                Some((channel, stream, permit)) = accepted.recv() => {
                    self.accepted(channel, stream, permit);
                }
                read = reader.read(&mut chunk) => {
                    let read = match read {
                        Ok(0) => {
                            return match decoder.finish() {
                                Ok(()) => Ended::Closed,
                                Err(violation) => Ended::Violation(violation),
                            };
                        }
                        Ok(read) => read,
                        Err(error) => return Ended::Broken(error.to_string()),
                    };
                    decoder.push(&chunk[..read]);
                    loop {
                        match decoder.next_frame() {
                            Ok(Some(frame)) => {
                                if let Err(violation) = self.received(frame) {
                                    return Ended::Violation(violation);
                                }
                            }
                            Ok(None) => break,
                            Err(violation) => return Ended::Violation(violation),
                        }
                    }
                    // One chunk may have opened and reset thousands of connections: their
                    // finished tasks are reaped now, not one per turn of the loop.
                    while let Some(joined) = self.connection_tasks.try_join_next() {
                        if let Ok(connection) = joined {
                            self.connections.remove(&connection);
                        }
                    }
                }
            }
        }
    }

    /// Acts on one frame from the other side.
    fn received(&mut self, frame: Frame) -> Result<(), Violation> {
        match self.out.receive(&frame)? {
            Inbound::Open {
                connection,
                channel,
            } => {
                let end = self.ends[channel].clone();
                self.spawn(connection, None, move || async move {
                    UnixStream::connect(&end).await
                });
            }
            Inbound::Data { connection } => {
                if let (Some(open), Frame::Data { bytes, .. }) =
                    (self.connections.get(&connection), frame)
                {
                    let _ = open.incoming.send(Incoming::Data(bytes));
                }
            }
            Inbound::Credit { connection, .. } => {
                if let Some(open) = self.connections.get(&connection) {
                    open.credit.notify_one();
                }
            }
            Inbound::Close { connection } => {
                if let Some(open) = self.connections.get(&connection) {
                    let _ = open.incoming.send(Incoming::Close);
                }
            }
            Inbound::Reset { connection } => {
                if let Some(open) = self.connections.remove(&connection) {
                    open.task.abort();
                }
                if self.ends.is_empty() {
                    // The relay acknowledges the host's reset, so the host stops ignoring.
                    self.out.send_now(Frame::Reset { connection });
                }
            }
            Inbound::Ignored => {}
        }
        Ok(())
    }

    /// A connection the relay accepted: opened on the stream and served.
    fn accepted(&mut self, channel: usize, stream: TcpStream, permit: OwnedSemaphorePermit) {
        let Some(connection) = self.out.open(channel) else {
            // The numbers are used up: the connection is refused.
            return;
        };
        let _ = stream.set_nodelay(true);
        self.spawn(connection, Some(permit), move || async move { Ok(stream) });
    }

    /// Serves `connection` over the socket `connect` yields (a failure resets it).
    fn spawn<S, F, C>(&mut self, connection: u32, permit: Option<OwnedSemaphorePermit>, connect: C)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
        F: Future<Output = std::io::Result<S>> + Send + 'static,
        C: FnOnce() -> F + Send + 'static,
    {
        let (incoming, received) = mpsc::unbounded_channel();
        let credit = Arc::new(Notify::new());
        let out = Arc::clone(&self.out);
        let wake = Arc::clone(&credit);
        let task = self.connection_tasks.spawn(async move {
            let served = match connect().await {
                Ok(socket) => serve_connection(socket, connection, &out, &wake, received).await,
                Err(_) => Err(()),
            };
            if served.is_err() {
                out.send(Frame::Reset { connection }).await;
            }
            drop(permit);
            connection
        });
        self.connections.insert(
            connection,
            Connection {
                incoming,
                credit,
                task,
            },
        );
    }
}

/// Pipes one connection's socket and its frames both ways until both directions closed; an error
/// of the socket is `Err` (the caller resets the connection).
async fn serve_connection<S: AsyncRead + AsyncWrite + Send>(
    socket: S,
    connection: u32,
    out: &Out,
    credit: &Notify,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
) -> Result<(), ()> {
    let (mut read, mut write) = tokio::io::split(socket);
    let upstream = async {
        let mut buffer = vec![0u8; MAX_PAYLOAD];
        loop {
            let allowed = out.credit(connection) as usize;
            if allowed == 0 {
                if !out.ledger_has(connection) {
                    return Ok(());
                }
                credit.notified().await;
                continue;
            }
            let read = read
                .read(&mut buffer[..allowed.min(MAX_PAYLOAD)])
                .await
                .map_err(drop)?;
            if read == 0 {
                out.send(Frame::Close { connection }).await;
                return Ok::<(), ()>(());
            }
            if !out
                .send(Frame::Data {
                    connection,
                    bytes: buffer[..read].to_vec(),
                })
                .await
            {
                return Ok(());
            }
        }
    };
    let downstream = async {
        while let Some(incoming) = incoming.recv().await {
            match incoming {
                Incoming::Data(bytes) => {
                    write.write_all(&bytes).await.map_err(drop)?;
                    let bytes = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    out.send(Frame::Credit { connection, bytes }).await;
                }
                Incoming::Close => {
                    write.shutdown().await.map_err(drop)?;
                    return Ok::<(), ()>(());
                }
            }
        }
        Ok(())
    };
    tokio::try_join!(upstream, downstream).map(drop)
}

impl Out {
    /// Whether the ledger still has `connection` open.
    fn ledger_has(&self, connection: u32) -> bool {
        let ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        ledger.is_open(connection)
    }
}

/// The relay's accept loop on one channel: at most [`MAX_CONNECTIONS`] at once, each handed to the
/// stream's loop with its permit.
async fn accept(channel: usize, listener: TcpListener, accepted: mpsc::Sender<Accepted>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                if accepted.send((channel, stream, permit)).await.is_err() {
                    return;
                }
            }
            Err(_) => {
                // Out of descriptors, say: wait a moment rather than spin, and try again.
                drop(permit);
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// The bytes of `frame`'s payload.
fn payload_bytes(frame: &Frame) -> usize {
    match frame {
        Frame::Open { channel, .. } => channel.len(),
        Frame::Data { bytes, .. } => bytes.len(),
        Frame::Credit { .. } => 4,
        Frame::Close { .. } | Frame::Reset { .. } => 0,
    }
}

/// Writes the queued frames to `writer` as they come, several at once when they are there, giving
/// their room back to `room` once written, and shuts it down once the queue closes.
async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    room: Arc<Semaphore>,
) -> Result<(), String> {
    let mut buffer = Vec::with_capacity(2 * (MAX_PAYLOAD + 16));
    while let Some(first) = queued.recv().await {
        buffer.clear();
        first.frame.encode(&mut buffer);
        let mut held = first.held as usize;
        while buffer.len() < MAX_PAYLOAD
            && let Ok(next) = queued.try_recv()
        {
            next.frame.encode(&mut buffer);
            held += next.held as usize;
        }
        writer
            .write_all(&buffer)
            .await
            .map_err(|error| error.to_string())?;
        writer.flush().await.map_err(|error| error.to_string())?;
        room.add_permits(held);
    }
    writer.shutdown().await.map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod redteam;
