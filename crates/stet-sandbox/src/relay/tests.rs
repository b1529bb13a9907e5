//! Unit tests of `crate::relay`, in a file of their own so the module reads as code.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::*;
use stet_protocol::sandbox::{RELAY_ADDR, SOCKET_NAME, model_base_url};

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
    let address = RELAY_ADDR;
    assert!(address.ip().is_loopback());
}
