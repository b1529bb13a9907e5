//! The in-sandbox end of the host's channels (DESIGN §5 row 13): the container keeps `--network
//! none`, so an agent inside it reaches the model gateway through a TCP port on the container's own
//! loopback, which this relay pipes, byte for byte, to the unix socket the host gateway listens on
//! in the socket directory stet mounts into the sandbox. It serves a table of such channels
//! ([`stet_protocol::channel`]; today the one row is `model`): a port of the table to that row's
//! socket, and nothing else. The relay understands nothing of HTTP; the key, the metering and the
//! ceiling are all the gateway's, on the host.
//!
//! `stet sandbox-idle --socket-dir <dir> --channel <name>=<port>…` runs it as part of the
//! container's main process (bind mode). In copy mode no host path is shared: `stet sandbox-relay
//! --stdio --channel <name>=<port>…`, an exec the host starts and attaches to, carries every
//! connection over its own stdin/stdout instead ([`relay_stdio`], the frames of
//! [`stet_protocol::channel_stream`]); its diagnostics go to stderr, never among the frames.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use stet_protocol::channel::ChannelTable;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// How many connections the relay pipes at once on one channel; later ones wait in the listen
/// backlog.
pub const MAX_CONNECTIONS: usize = 64;

/// How long the relay waits before accepting again after the system refused it a connection (for
/// example when out of file descriptors), so that such a failure does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The longest unix socket path the kernel accepts, without its terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum RelayError {
    #[error("the model relay cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "the model relay cannot use the socket {}: the path is {length} bytes, and unix sockets allow {MAX_SOCKET_PATH}",
        path.display()
    )]
    SocketPathTooLong { path: PathBuf, length: usize },
    #[error(
        "channel {name:?}: a table over stdio has no socket; run it with `stet sandbox-relay --stdio`"
    )]
    NoSocket { name: String },
    #[error("channel {name:?}: a table over a socket directory is not for `--stdio`")]
    NotStdio { name: String },
}

/// Result alias of the relay.
pub type Result<T> = std::result::Result<T, RelayError>;

/// Accepts TCP connections on `listen` and pipes each, byte for byte in both directions, to a new
/// connection to the unix socket `socket`, until `stop` resolves; connections still open then are
/// cut. A socket that cannot be reached closes that one TCP connection, never the listener, so the
/// relay may start before the socket exists. A side that closes its writing half is passed on as a
/// half-close while the other direction goes on. At most [`MAX_CONNECTIONS`] are piped at once.
pub async fn relay(
    listen: SocketAddr,
    socket: PathBuf,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let listener = listen_for(listen, &socket).await?;
    serve(listener, socket, stop, MAX_CONNECTIONS).await;
    Ok(())
}

/// Serves every channel of `table` as [`relay`] serves one, until `stop` resolves: each channel's
/// port on the container's loopback piped to its endpoint, that channel's socket in the table's
/// socket directory. Every port is bound before any is served, so a channel that cannot listen
/// fails the relay as a whole; no port and no socket outside the table is ever used. An empty
/// table serves nothing and waits for `stop`.
pub async fn relay_channels(
    table: &ChannelTable,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let bound = bind_channels(table).await?;
    serve_channels(bound, stop).await;
    Ok(())
}

/// Serves every channel of `table` (a table over stdio) over `input` and `output`, the relay's
/// stdin and stdout: each connection accepted on a channel's port is opened on the stream and
/// piped as frames, within the credit the host gives, until the host closes the stream, breaks
/// the protocol, or `stop` resolves. Every port is bound before the stream is read, and then
/// [`stet_protocol::channel_stream::READY_LINE`] written on stderr.
pub async fn relay_stdio<R, W>(
    table: &ChannelTable,
    input: R,
    output: W,
    stop: impl std::future::Future<Output = ()>,
) -> Result<stet_pump::mux::Ended>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut listeners = Vec::with_capacity(table.channels().len());
    for channel in table.channels() {
        if table.endpoint(channel).is_some() {
            return Err(RelayError::NotStdio {
                name: channel.name().to_owned(),
            });
        }
        let address = channel.address();
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| RelayError::Bind { address, source })?;
        listeners.push(listener);
    }
    // Diagnostics go to stderr only: stdout is the host's stream.
    let _ = writeln!(
        std::io::stderr(),
        "{}",
        stet_protocol::channel_stream::READY_LINE
    );
    let role = stet_pump::mux::Role::Relay { listeners };
    Ok(stet_pump::mux::run(input, output, table.names(), role, stop).await)
}

/// Each channel of `table`'s listener and host socket, every port bound (or none, on an error).
async fn bind_channels(table: &ChannelTable) -> Result<Vec<(TcpListener, PathBuf)>> {
    let mut bound = Vec::with_capacity(table.channels().len());
    for channel in table.channels() {
        let socket = table
            .endpoint(channel)
            .ok_or_else(|| RelayError::NoSocket {
                name: channel.name().to_owned(),
            })?;
        bound.push((listen_for(channel.address(), &socket).await?, socket));
    }
    Ok(bound)
}

/// Serves each bound channel with its own accept loop, all stopped together when `stop` resolves.
async fn serve_channels(
    bound: Vec<(TcpListener, PathBuf)>,
    stop: impl std::future::Future<Output = ()>,
) {
    let (stopping, stopped) = watch::channel(());
    let mut channels = JoinSet::new();
    for (listener, socket) in bound {
        let mut stopped = stopped.clone();
        channels.spawn(serve(
            listener,
            socket,
            async move {
                // A change or the sender's drop: either way the relay is stopping.
                let _ = stopped.changed().await;
            },
            MAX_CONNECTIONS,
        ));
    }
    stop.await;
    drop(stopping);
    while channels.join_next().await.is_some() {}
}

/// The listener on `listen` of a channel whose host end is `socket`, once the socket's path is known
/// to fit a unix socket address.
async fn listen_for(listen: SocketAddr, socket: &Path) -> Result<TcpListener> {
    let length = socket.as_os_str().len();
    if length > MAX_SOCKET_PATH {
        return Err(RelayError::SocketPathTooLong {
            path: socket.to_owned(),
            length,
        });
    }
    TcpListener::bind(listen)
        .await
        .map_err(|source| RelayError::Bind {
            address: listen,
            source,
        })
}

/// The relay's accept loop on a bound `listener`, piping at most `limit` connections at once.
async fn serve(
    listener: TcpListener,
    socket: PathBuf,
    stop: impl std::future::Future<Output = ()>,
    limit: usize,
) {
    let socket: Arc<Path> = socket.into();
    let permits = Arc::new(Semaphore::new(limit));
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            () = &mut stop => break,
            permit = Arc::clone(&permits).acquire_owned() => permit,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let socket = Arc::clone(&socket);
                connections.spawn(async move {
                    pipe(stream, &socket).await;
                    tracing::debug!(%peer, "model relay connection closed");
                    drop(permit);
                });
            }
            Err(error) => {
                tracing::warn!(%error, "the model relay could not accept a connection");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
    connections.shutdown().await;
}

/// Pipes one accepted connection to a fresh connection to `socket` until both directions end.
async fn pipe(stream: TcpStream, socket: &Path) {
    // Requests are small writes answered quickly: do not hold them back.
    let _ = stream.set_nodelay(true);
    let upstream = match UnixStream::connect(socket).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::warn!(socket = %socket.display(), %error, "the model relay cannot reach the gateway");
            return;
        }
    };
    // Through a pipe each way: the bytes are never copied into this process.
    if let Err(error) = stet_pump::both_ways(&stream, &upstream).await {
        tracing::debug!(%error, "a model relay connection broke");
    }
}

#[cfg(test)]
mod tests;
