//! The in-sandbox end of the model gateway (DESIGN §5 row 13): the container keeps `--network none`,
//! so an agent inside it reaches the model through a TCP port on the container's own loopback, which
//! this relay pipes, byte for byte, to the unix socket the host gateway listens on and stet mounts
//! into the sandbox. The relay understands nothing of HTTP; the key, the metering and the ceiling are
//! all the gateway's, on the host.
//!
//! `stet sandbox-idle --relay <socket>` runs it as part of the container's main process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The gateway socket's name in its directory, which the sandbox sees at
/// [`crate::GATEWAY_MOUNT`].
pub const SOCKET_NAME: &str = "model.sock";

/// The relay's address on the container's loopback.
pub const RELAY_ADDR: &str = "127.0.0.1:4141";

/// How many connections the relay pipes at once; later ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

/// The buffer of each direction of a piped connection.
const COPY_BUFFER: usize = 64 * 1024;

/// How long the relay waits before accepting again after the system refused it a connection (for
/// example when out of file descriptors), so that such a failure does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The longest unix socket path the kernel accepts, without its terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The base URL an agent in the sandbox uses: `http://127.0.0.1:4141/v1`.
pub fn model_base_url() -> String {
    format!("http://{RELAY_ADDR}/v1")
}

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
    let length = socket.as_os_str().len();
    if length > MAX_SOCKET_PATH {
        return Err(RelayError::SocketPathTooLong {
            path: socket,
            length,
        });
    }
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| RelayError::Bind {
            address: listen,
            source,
        })?;
    serve(listener, socket, stop, MAX_CONNECTIONS).await;
    Ok(())
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
async fn pipe(mut stream: TcpStream, socket: &Path) {
    // Requests are small writes answered quickly: do not hold them back.
    let _ = stream.set_nodelay(true);
    let mut upstream = match UnixStream::connect(socket).await {
        Ok(upstream) => upstream,
        Err(error) => {
            tracing::warn!(socket = %socket.display(), %error, "the model relay cannot reach the gateway");
            return;
        }
    };
    if let Err(error) = tokio::io::copy_bidirectional_with_sizes(
        &mut stream,
        &mut upstream,
        COPY_BUFFER,
        COPY_BUFFER,
    )
    .await
    {
        tracing::debug!(%error, "a model relay connection broke");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;
    use tokio::sync::oneshot;

    use super::*;

    /// A relay on an ephemeral loopback port to `socket`, stopped by the returned sender.
    struct Running {
        address: SocketAddr,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(socket: &Path, limit: usize) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let socket = socket.to_owned();
        let task = tokio::spawn(async move {
            serve(
                listener,
                socket,
                async {
                    let _ = stopped.await;
                },
                limit,
            )
            .await;
        });
        Running {
            address,
            stop,
            task,
        }
    }

    /// A unix socket server that echoes every connection back until the client half-closes, then
    /// writes how many bytes it got and closes.
    fn echo_server(socket: &Path) -> tokio::task::JoinHandle<()> {
        let listener = UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut total = 0usize;
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        let read = stream.read(&mut buffer).await.unwrap();
                        if read == 0 {
                            break;
                        }
                        total += read;
                        stream.write_all(&buffer[..read]).await.unwrap();
                    }
                    stream
                        .write_all(format!("[{total} bytes]").as_bytes())
                        .await
                        .unwrap();
                    stream.shutdown().await.unwrap();
                });
            }
        })
    }

    async fn exchange(address: SocketAddr, message: &[u8]) -> Vec<u8> {
        let stream = TcpStream::connect(address).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        let message = message.to_vec();
        let writing = tokio::spawn(async move {
            writer.write_all(&message).await.unwrap();
            writer.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        reader.read_to_end(&mut received).await.unwrap();
        writing.await.unwrap();
        received
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_a_half_close_is_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(SOCKET_NAME);
        let _server = echo_server(&socket);
        let relay = start(&socket, MAX_CONNECTIONS).await;

        let message: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let received = exchange(relay.address, &message).await;
        // The echo came back whole, and only after our half-close did the server answer its count,
        // which it could only send because its own writing half was still open.
        let suffix = format!("[{} bytes]", message.len());
        assert_eq!(received.len(), message.len() + suffix.len());
        assert!(received[..message.len()] == message[..], "the echo differs");
        assert_eq!(&received[message.len()..], suffix.as_bytes());
    }

    #[tokio::test]
    async fn many_connections_at_once_each_get_their_own_pipe() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(SOCKET_NAME);
        let _server = echo_server(&socket);
        let relay = start(&socket, MAX_CONNECTIONS).await;
        let mut clients = JoinSet::new();
        for index in 0..200u32 {
            let address = relay.address;
            clients.spawn(async move {
                let message = format!("connection {index}");
                let received = exchange(address, message.as_bytes()).await;
                assert_eq!(
                    String::from_utf8(received).unwrap(),
                    format!("{message}[{} bytes]", message.len())
                );
            });
        }
        let mut done = 0;
        while let Some(result) = clients.join_next().await {
            result.unwrap();
            done += 1;
        }
        assert_eq!(done, 200);
    }

    #[tokio::test]
    async fn connections_past_the_limit_wait_for_a_free_pipe() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(SOCKET_NAME);
        let _server = echo_server(&socket);
        let relay = start(&socket, 2).await;
        let mut open = Vec::new();
        for index in 0..2u8 {
            let mut stream = TcpStream::connect(relay.address).await.unwrap();
            stream.write_all(&[index]).await.unwrap();
            let mut echoed = [0u8; 1];
            stream.read_exact(&mut echoed).await.unwrap();
            assert_eq!(echoed, [index]);
            open.push(stream);
        }
        let mut third = TcpStream::connect(relay.address).await.unwrap();
        third.write_all(b"3").await.unwrap();
        let mut echoed = [0u8; 1];
        assert!(
            tokio::time::timeout(Duration::from_millis(200), third.read_exact(&mut echoed))
                .await
                .is_err(),
            "a third connection was piped while two were open"
        );
        drop(open.pop());
        third.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"3");
    }

    #[tokio::test]
    async fn a_missing_socket_closes_only_that_connection() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(SOCKET_NAME);
        let relay = start(&socket, MAX_CONNECTIONS).await;

        let mut stream = TcpStream::connect(relay.address).await.unwrap();
        let mut received = Vec::new();
        // The relay closes the connection: end of file, or a reset if our write raced the close.
        let _ = stream.write_all(b"hello").await;
        let read = stream.read_to_end(&mut received).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?} {received:?}");
        assert!(received.is_empty());

        let _server = echo_server(&socket);
        assert_eq!(exchange(relay.address, b"again").await, b"again[5 bytes]");
    }

    #[tokio::test]
    async fn stop_ends_the_relay_and_its_connections() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(SOCKET_NAME);
        let _server = echo_server(&socket);
        let relay = start(&socket, MAX_CONNECTIONS).await;
        let mut open = TcpStream::connect(relay.address).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut echoed = [0u8; 1];
        open.read_exact(&mut echoed).await.unwrap();

        relay.stop.send(()).unwrap();
        relay.task.await.unwrap();
        let mut rest = Vec::new();
        let read = open.read_to_end(&mut rest).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?} {rest:?}");
        assert!(TcpStream::connect(relay.address).await.is_err());
    }

    #[tokio::test]
    async fn relay_refuses_an_address_in_use_and_an_overlong_socket_path() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = taken.local_addr().unwrap();
        let error = relay(address, PathBuf::from("/run/stet/model.sock"), async {})
            .await
            .unwrap_err();
        assert!(matches!(error, RelayError::Bind { .. }), "{error:?}");
        assert!(error.to_string().contains(&address.to_string()), "{error}");

        let long = PathBuf::from(format!("/{}", "d".repeat(200)));
        let error = relay("127.0.0.1:0".parse().unwrap(), long, async {})
            .await
            .unwrap_err();
        assert!(error.to_string().contains("ddd"), "{error}");
        assert!(error.to_string().contains("201 bytes"), "{error}");
    }

    #[test]
    fn the_base_url_is_the_relay_address() {
        assert_eq!(model_base_url(), "http://127.0.0.1:4141/v1");
        let address: SocketAddr = RELAY_ADDR.parse().unwrap();
        assert!(address.ip().is_loopback());
    }
}
