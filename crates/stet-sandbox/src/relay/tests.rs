//! Unit tests of `crate::relay`, in a file of their own so the module reads as code.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::*;
use stet_protocol::channel::Channel;

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
    let socket = dir.path().join(Channel::model().socket_name());
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
    let socket = dir.path().join(Channel::model().socket_name());
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
    let socket = dir.path().join(Channel::model().socket_name());
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
    let socket = dir.path().join(Channel::model().socket_name());
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
    let socket = dir.path().join(Channel::model().socket_name());
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

/// A unix socket server that reads each connection to its end, then answers `<name> got <bytes>`
/// and closes: which socket a connection reached, and what arrived there.
fn named_server(socket: &Path, name: &'static str) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut received = Vec::new();
                stream.read_to_end(&mut received).await.unwrap();
                let answer = format!("{name} got {}", String::from_utf8_lossy(&received));
                stream.write_all(answer.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            });
        }
    })
}

/// A loopback port nothing listens on (the system's choice, let go at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn table(dir: &Path, rows: &[(&str, u16)]) -> ChannelTable {
    let rows: Vec<String> = rows
        .iter()
        .map(|(name, port)| format!("{name}={port}"))
        .collect();
    ChannelTable::parse(dir, &rows).unwrap()
}

#[tokio::test]
async fn each_channel_reaches_its_own_socket_and_nothing_outside_the_table_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (model, second, outside) = (free_port(), free_port(), free_port());
    let table = table(dir.path(), &[("model", model), ("second", second)]);
    let _model_server = named_server(&dir.path().join("model.sock"), "model");
    let _second_server = named_server(&dir.path().join("second.sock"), "second");
    // A socket in the same directory that no row of the table names.
    let stray = std::os::unix::net::UnixListener::bind(dir.path().join("stray.sock")).unwrap();
    stray.set_nonblocking(true).unwrap();

    let bound = bind_channels(&table).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_channels(bound, async move {
        let _ = stopped.await;
    }));

    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(
        exchange(at(model), b"to the model").await,
        b"model got to the model"
    );
    assert_eq!(exchange(at(second), b"x").await, b"second got x");
    assert_eq!(exchange(at(second), b"again").await, b"second got again");
    assert!(
        TcpStream::connect(at(outside)).await.is_err(),
        "a port outside the table is served"
    );
    assert_eq!(
        stray.accept().map_err(|error| error.kind()).unwrap_err(),
        std::io::ErrorKind::WouldBlock,
        "a socket outside the table was reached"
    );

    stop.send(()).unwrap();
    task.await.unwrap();
    assert!(TcpStream::connect(at(model)).await.is_err());
    assert!(TcpStream::connect(at(second)).await.is_err());
}

#[tokio::test]
async fn a_channel_that_cannot_listen_fails_the_whole_table() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second = taken.local_addr().unwrap().port();
    let model = free_port();
    let table = table(dir.path(), &[("model", model), ("second", second)]);
    let error = relay_channels(&table, async {}).await.unwrap_err();
    assert!(matches!(error, RelayError::Bind { .. }), "{error:?}");
    assert!(error.to_string().contains(&second.to_string()), "{error}");
    // The model's port, bound first, was let go with the failure.
    TcpListener::bind(("127.0.0.1", model)).await.unwrap();
}

#[tokio::test]
async fn an_empty_table_serves_nothing_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    relay_channels(&table(dir.path(), &[]), async {})
        .await
        .unwrap();
}

#[tokio::test]
async fn over_stdio_a_connection_rides_the_stream_to_the_hosts_end_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("model.sock");
    let _server = echo_server(&socket);
    let port = free_port();
    let table = ChannelTable::parse_stdio(&[format!("model={port}")]).unwrap();
    let (relay_io, host_io) = tokio::io::duplex(64 * 1024);
    let (stop_host, host_stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(async move {
        let (read, write) = tokio::io::split(host_io);
        stet_pump::mux::run(
            read,
            write,
            vec!["model".to_owned()],
            stet_pump::mux::Role::Host { ends: vec![socket] },
            async {
                let _ = host_stopped.await;
            },
        )
        .await
    });
    let (relay_read, relay_write) = tokio::io::split(relay_io);
    let relay = tokio::spawn(async move {
        relay_stdio(&table, relay_read, relay_write, std::future::pending()).await
    });
    // The relay binds before it serves: retried until its port answers.
    let mut client = loop {
        if let Ok(client) = TcpStream::connect(("127.0.0.1", port)).await {
            break client;
        }
        tokio::task::yield_now().await;
    };
    client.write_all(b"over the stream").await.unwrap();
    client.shutdown().await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    assert!(back.starts_with(b"over the stream"), "{back:?}");
    stop_host.send(()).unwrap();
    assert_eq!(host.await.unwrap(), stet_pump::mux::Ended::Stopped);
    // The host closed the stream: the relay ends.
    assert_eq!(relay.await.unwrap().unwrap(), stet_pump::mux::Ended::Closed);
}

#[tokio::test]
async fn a_socket_table_is_not_served_over_stdio_nor_a_stdio_table_over_sockets() {
    let socket_table =
        ChannelTable::parse(Path::new("/run/stet"), &["model=4141".to_owned()]).unwrap();
    let (a, _b) = tokio::io::duplex(16);
    let (read, write) = tokio::io::split(a);
    assert!(matches!(
        relay_stdio(&socket_table, read, write, std::future::pending()).await,
        Err(RelayError::NotStdio { .. })
    ));
    let stdio = ChannelTable::parse_stdio(&["model=4141".to_owned()]).unwrap();
    assert!(matches!(
        relay_channels(&stdio, std::future::pending()).await,
        Err(RelayError::NoSocket { .. })
    ));
}
