//! Tests of `crate::mux` over in-memory streams: a relay and a host end to end, a stalled
//! connection beside a live one, and a hostile relay's bytes against the host.

use std::path::Path;
use std::time::Duration;

use stet_protocol::channel_stream::{Frame, Kind, WINDOW};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::*;

/// A host end that echoes every connection back, each in a task of its own.
fn echo_server(path: &Path) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut read, mut write) = socket.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    })
}

/// A relay on `channels` (each listening on a free loopback port) and a host leading them to
/// `ends`, joined by in-memory pipes; the relay's ports, and a handle that stops both.
async fn relay_and_host(
    channels: &[&str],
    ends: Vec<PathBuf>,
) -> (
    Vec<u16>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<(Ended, Ended)>,
) {
    let (relay_io, host_io) = tokio::io::duplex(256 * 1024);
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    for _ in channels {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        ports.push(listener.local_addr().unwrap().port());
        listeners.push(listener);
    }
    let names: Vec<String> = channels.iter().map(|name| (*name).to_owned()).collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let (relay_read, relay_write) = tokio::io::split(relay_io);
        let (host_read, host_write) = tokio::io::split(host_io);
        let relay = run(
            relay_read,
            relay_write,
            names.clone(),
            Role::Relay { listeners },
            std::future::pending(),
        );
        let host = run(host_read, host_write, names, Role::Host { ends }, async {
            let _ = stopped.await;
        });
        tokio::join!(relay, host)
    });
    (ports, stop, handle)
}

async fn round_trip(port: u16, message: &[u8]) -> Vec<u8> {
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(message).await.unwrap();
    client.shutdown().await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    back
}

#[tokio::test]
async fn connections_of_two_channels_go_to_their_host_ends_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let (model, egress) = (
        dir.path().join("model.sock"),
        dir.path().join("egress.sock"),
    );
    let _servers = (echo_server(&model), echo_server(&egress));
    let (ports, stop, both) = relay_and_host(&["model", "egress"], vec![model, egress]).await;
    let big: Vec<u8> = (0..3 * WINDOW).map(|i| (i % 251) as u8).collect();
    let (one, two, three) = tokio::join!(
        round_trip(ports[0], b"hello model"),
        round_trip(ports[1], b"hello egress"),
        round_trip(ports[0], &big),
    );
    assert_eq!(one, b"hello model");
    assert_eq!(two, b"hello egress");
    assert!(three == big, "{} bytes back of {}", three.len(), big.len());
    // More connections one after the other than the bound: each ends and frees its place.
    for round in 0..(2 * MAX_CONNECTIONS) {
        let message = format!("round {round}");
        assert_eq!(
            round_trip(ports[0], message.as_bytes()).await,
            message.as_bytes()
        );
    }
    stop.send(()).unwrap();
    let (relay, host) = both.await.unwrap();
    assert_eq!(host, Ended::Stopped);
    assert_eq!(relay, Ended::Closed);
}

#[tokio::test]
async fn a_connection_whose_host_end_stalls_does_not_hold_back_another() {
    let dir = tempfile::tempdir().unwrap();
    let stalled = dir.path().join("stalled.sock");
    let listener = UnixListener::bind(&stalled).unwrap();
    // Accepts, keeps the socket and never reads it.
    let (held_tx, mut held_rx) = mpsc::unbounded_channel();
    let _holder = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let _ = held_tx.send(socket);
        }
    });
    let echo = dir.path().join("echo.sock");
    let _server = echo_server(&echo);
    let (ports, stop, both) = relay_and_host(&["stalled", "echo"], vec![stalled, echo]).await;
    let mut flood = TcpStream::connect(("127.0.0.1", ports[0])).await.unwrap();
    let writer = tokio::spawn(async move {
        // Far past the window and every buffer on the way: it blocks, as it should.
        let block = vec![7u8; 1024 * 1024];
        for _ in 0..64 {
            if flood.write_all(&block).await.is_err() {
                return;
            }
        }
    });
    let _held = held_rx.recv().await.unwrap();
    for round in 0..20 {
        let message = format!("still served {round}");
        let back = tokio::time::timeout(
            Duration::from_secs(20),
            round_trip(ports[1], message.as_bytes()),
        )
        .await
        .expect("the second channel was held back by the stalled one");
        assert_eq!(back, message.as_bytes());
    }
    assert!(!writer.is_finished(), "the flood should be blocked");
    writer.abort();
    stop.send(()).unwrap();
    let (_, host) = both.await.unwrap();
    assert_eq!(host, Ended::Stopped);
}

/// The host against bytes a hostile relay writes: the stream ends with the violation, the host's
/// writer is shut down (the relay reads the end), and no host end is dialled.
async fn host_against(bytes: Vec<u8>, ends: Vec<PathBuf>) -> (Ended, Vec<u8>) {
    let (relay_io, host_io): (DuplexStream, DuplexStream) = tokio::io::duplex(64 * 1024);
    let (host_read, host_write) = tokio::io::split(host_io);
    let (mut relay_read, mut relay_write) = tokio::io::split(relay_io);
    let host = tokio::spawn(run(
        host_read,
        host_write,
        vec!["model".to_owned()],
        Role::Host { ends },
        std::future::pending(),
    ));
    let writing = tokio::spawn(async move {
        let _ = relay_write.write_all(&bytes).await;
        // Keeps its end open: the host must end on what it read, not on the stream's end.
        std::future::pending::<()>().await;
    });
    let mut back = Vec::new();
    relay_read.read_to_end(&mut back).await.unwrap();
    let ended = host.await.unwrap();
    writing.abort();
    (ended, back)
}

fn frames(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        frame.encode(&mut out);
    }
    out
}

#[tokio::test]
async fn garbage_from_the_relay_ends_the_stream_and_dials_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let end = dir.path().join("model.sock");
    let listener = UnixListener::bind(&end).unwrap();
    let (ended, _) = host_against(b"\x00\xff garbage".to_vec(), vec![end.clone()]).await;
    assert_eq!(ended, Ended::Violation(Violation::UnknownKind { kind: 0 }));

    // An open of a channel the stream does not carry, after a good one.
    let bytes = frames(&[
        Frame::Open {
            connection: 0,
            channel: "model".to_owned(),
        },
        Frame::Open {
            connection: 1,
            channel: "docker".to_owned(),
        },
    ]);
    let (ended, _) = host_against(bytes, vec![end.clone()]).await;
    assert!(
        matches!(&ended, Ended::Violation(Violation::UnknownChannel { channel, .. }) if channel == "docker"),
        "{ended:?}"
    );

    // Data past the window.
    let mut flood = vec![Frame::Open {
        connection: 0,
        channel: "model".to_owned(),
    }];
    for _ in 0..=(WINDOW as usize / MAX_PAYLOAD) {
        flood.push(Frame::Data {
            connection: 0,
            bytes: vec![1; MAX_PAYLOAD],
        });
    }
    let (ended, _) = host_against(frames(&flood), vec![end.clone()]).await;
    assert!(
        matches!(ended, Ended::Violation(Violation::PastCredit { .. })),
        "{ended:?}"
    );
    drop(listener);

    // A host end that is not there resets the connection; the stream goes on.
    let missing = dir.path().join("missing.sock");
    let bytes = frames(&[Frame::Open {
        connection: 0,
        channel: "model".to_owned(),
    }]);
    let (relay_io, host_io) = tokio::io::duplex(64 * 1024);
    let (host_read, host_write) = tokio::io::split(host_io);
    let (mut relay_read, mut relay_write) = tokio::io::split(relay_io);
    let (stop, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(run(
        host_read,
        host_write,
        vec!["model".to_owned()],
        Role::Host {
            ends: vec![missing],
        },
        async {
            let _ = stopped.await;
        },
    ));
    relay_write.write_all(&bytes).await.unwrap();
    let mut reset = [0u8; 9];
    relay_read.read_exact(&mut reset).await.unwrap();
    assert_eq!(reset[0], Kind::Reset as u8);
    stop.send(()).unwrap();
    assert_eq!(host.await.unwrap(), Ended::Stopped);
}

#[tokio::test]
async fn a_stream_cut_inside_a_frame_is_a_violation_and_between_frames_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let end = dir.path().join("model.sock");
    for (bytes, expected) in [
        (
            vec![2, 0, 0, 0, 0, 0, 0, 0],
            Ended::Violation(Violation::Truncated { held: 8 }),
        ),
        (Vec::new(), Ended::Closed),
    ] {
        let (relay_io, host_io) = tokio::io::duplex(1024);
        let (host_read, host_write) = tokio::io::split(host_io);
        let (_relay_read, mut relay_write) = tokio::io::split(relay_io);
        relay_write.write_all(&bytes).await.unwrap();
        relay_write.shutdown().await.unwrap();
        let ended = run(
            host_read,
            host_write,
            vec!["model".to_owned()],
            Role::Host {
                ends: vec![end.clone()],
            },
            std::future::pending(),
        )
        .await;
        assert_eq!(ended, expected);
    }
}
