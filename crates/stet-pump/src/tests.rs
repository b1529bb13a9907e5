//! Unit tests of the pump: real sockets on this machine, the bytes checked whole.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

use super::*;

/// A connected TCP pair on loopback.
async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

/// A connected unix socket pair through a socket file in `dir`.
async fn unix_pair(dir: &std::path::Path) -> (UnixStream, UnixStream) {
    let path = dir.join("pump.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (client, accepted) = tokio::join!(UnixStream::connect(&path), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length)
        .map(|i| (i % 251) as u8 ^ seed)
        .collect::<Vec<u8>>()
}

/// TCP ↔ unix socket, 9 MiB one way and 5 MiB the other at once, each side half-closing: every
/// byte arrives in order, each end is passed on, and the counts are the bytes moved.
#[tokio::test]
async fn both_ways_moves_every_byte_and_passes_each_end_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tcp_outer, tcp_inner) = tcp_pair().await;
    let (unix_inner, mut unix_outer) = unix_pair(dir.path()).await;
    let relay = tokio::spawn(async move { both_ways(&tcp_inner, &unix_inner).await });

    let forth = pattern(9 << 20, 0);
    let back = pattern(5 << 20, 0x5a);
    let (sent_forth, sent_back) = (forth.clone(), back.clone());
    let (mut tcp_read, mut tcp_write) = tcp_outer.split();
    let (mut unix_read, mut unix_write) = unix_outer.split();
    let ((), (), got_forth, got_back) = tokio::join!(
        async {
            tcp_write.write_all(&sent_forth).await.unwrap();
            tcp_write.shutdown().await.unwrap();
        },
        async {
            unix_write.write_all(&sent_back).await.unwrap();
            unix_write.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::new();
            unix_read.read_to_end(&mut got).await.unwrap();
            got
        },
        async {
            let mut got = Vec::new();
            tcp_read.read_to_end(&mut got).await.unwrap();
            got
        },
    );
    assert!(
        got_forth == forth,
        "tcp → unix differs ({} bytes)",
        got_forth.len()
    );
    assert!(
        got_back == back,
        "unix → tcp differs ({} bytes)",
        got_back.len()
    );
    let (a_to_b, b_to_a) = relay.await.unwrap().unwrap();
    assert_eq!((a_to_b, b_to_a), (9 << 20, 5 << 20));
}

/// A fill takes at most what it is allowed and nothing more until drained; what it took arrives
/// whole at the other side, and the rest is still in the socket for the next fill.
#[tokio::test]
async fn a_fill_takes_at_most_its_allowance_and_holds_it_until_drained() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, from) = tcp_pair().await;
    let (to, mut sink) = unix_pair(dir.path()).await;
    source.write_all(&pattern(10_000, 1)).await.unwrap();
    let mut pipe = Pipe::new();

    let mut taken = 0;
    loop {
        let took = pipe.fill(&from, 1000 - taken).await.unwrap();
        assert!(
            took > 0 && took <= 1000 - taken,
            "took {took} with {taken} of 1000 taken"
        );
        assert_eq!(pipe.held(), took);
        taken += took;
        if taken == 1000 {
            break;
        }
        pipe.drain(&to).await.unwrap();
    }
    let refused = pipe.fill(&from, 10).await.unwrap_err();
    assert!(
        refused.to_string().contains("before what it held"),
        "{refused}"
    );
    pipe.drain(&to).await.unwrap();
    assert_eq!(pipe.held(), 0);
    let mut first = vec![0u8; 1000];
    sink.read_exact(&mut first).await.unwrap();
    assert_eq!(first, pattern(10_000, 1)[..1000]);

    assert_eq!(pipe.fill(&from, 0).await.unwrap(), 0, "an allowance of 0");
    let mut rest = 0;
    while rest < 9000 {
        rest += pipe.fill(&from, usize::MAX).await.unwrap();
        pipe.drain(&to).await.unwrap();
    }
    let mut second = vec![0u8; 9000];
    sink.read_exact(&mut second).await.unwrap();
    assert_eq!(second, pattern(10_000, 1)[1000..]);
}

/// A fill given up while nothing had arrived took nothing: what comes later goes whole to the
/// next fill.
#[tokio::test]
async fn a_fill_cancelled_while_waiting_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, from) = tcp_pair().await;
    let (to, mut sink) = unix_pair(dir.path()).await;
    let mut pipe = Pipe::new();
    let waited = tokio::time::timeout(Duration::from_millis(50), pipe.fill(&from, 64)).await;
    assert!(waited.is_err(), "a fill returned with nothing sent");
    assert_eq!(pipe.held(), 0);
    source.write_all(b"after").await.unwrap();
    assert_eq!(pipe.fill(&from, 64).await.unwrap(), 5);
    pipe.drain(&to).await.unwrap();
    let mut got = [0u8; 5];
    sink.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"after");
    drop(source);
    assert_eq!(
        pipe.fill(&from, 64).await.unwrap(),
        0,
        "the end of the stream"
    );
}

/// A drain to a peer that went away fails instead of spinning or hanging.
#[tokio::test]
async fn a_drain_to_a_closed_peer_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, from) = tcp_pair().await;
    let (to, sink) = unix_pair(dir.path()).await;
    drop(sink);
    source.write_all(b"lost").await.unwrap();
    let mut pipe = Pipe::new();
    assert_eq!(pipe.fill(&from, 64).await.unwrap(), 4);
    let error = pipe.drain(&to).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe, "{error}");
}

/// A direction makes its pipe only once its socket has bytes (or its end) to take: a fill given up
/// while waiting leaves none made, the first fill that takes makes it, and a large pipe still takes
/// no more than the fill allows, to the byte.
#[tokio::test]
async fn a_pipe_is_made_on_the_first_bytes_and_still_takes_exactly_its_allowance() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, from) = tcp_pair().await;
    let (to, mut sink) = unix_pair(dir.path()).await;
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        sink.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut pipe = Pipe::new();
    assert!(!pipe.is_made(), "a new direction holds a pipe");
    let waited = tokio::time::timeout(Duration::from_millis(50), pipe.fill(&from, 64)).await;
    assert!(waited.is_err(), "a fill returned with nothing sent");
    assert!(!pipe.is_made(), "an idle direction made its pipe");

    let sent = pattern(3 << 20, 7);
    let writing = sent.clone();
    let writer = tokio::spawn(async move {
        source.write_all(&writing).await.unwrap();
        source.shutdown().await.unwrap();
        source
    });
    // One byte short of a mebibyte, then the rest: each fill stops at its allowance exactly.
    let mut allowance = (1 << 20) - 1;
    let mut passed = 0;
    while allowance > 0 {
        let took = pipe.fill(&from, allowance).await.unwrap();
        assert!(pipe.is_made());
        assert!(took > 0 && took <= allowance, "took {took} of {allowance}");
        allowance -= took;
        passed += took;
        pipe.drain(&to).await.unwrap();
    }
    assert_eq!(passed, (1 << 20) - 1);
    let mut rest = 0;
    loop {
        let took = pipe.fill(&from, usize::MAX).await.unwrap();
        if took == 0 {
            break;
        }
        rest += took;
        pipe.drain(&to).await.unwrap();
    }
    assert_eq!(passed + rest, sent.len());
    drop(writer.await.unwrap());
    drop(to);
    assert!(reader.await.unwrap() == sent, "the bytes differ");
}

/// A direction that never carries a byte (and so never makes its pipe) still passes its side's
/// end on, while the other direction carries everything after it.
#[tokio::test]
async fn an_end_with_no_bytes_before_it_is_passed_on_while_the_other_way_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tcp_outer, tcp_inner) = tcp_pair().await;
    let (unix_inner, mut unix_outer) = unix_pair(dir.path()).await;
    let relay = tokio::spawn(async move { both_ways(&tcp_inner, &unix_inner).await });
    tcp_outer.shutdown().await.unwrap();
    let mut nothing = Vec::new();
    unix_outer.read_to_end(&mut nothing).await.unwrap();
    assert!(nothing.is_empty(), "bytes came from a side that sent none");

    let back = pattern(2 << 20, 3);
    unix_outer.write_all(&back).await.unwrap();
    unix_outer.shutdown().await.unwrap();
    let mut got = Vec::new();
    tcp_outer.read_to_end(&mut got).await.unwrap();
    assert!(got == back, "unix → tcp differs ({} bytes)", got.len());
    assert_eq!(relay.await.unwrap().unwrap(), (0, 2 << 20));
}

/// A direction that has moved only a little (a request head, an answer, a handshake) closes its
/// pipe each time it is emptied; once it has moved [`KEEP_AFTER`] bytes it keeps it.
#[tokio::test]
async fn a_pipe_is_closed_when_emptied_until_the_direction_moves_in_bulk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, from) = tcp_pair().await;
    let (to, mut sink) = unix_pair(dir.path()).await;
    let mut pipe = Pipe::new();
    const HEAD: &[u8] = b"CONNECT a.test:443 HTTP/1.1\r\n\r\n";
    source.write_all(HEAD).await.unwrap();
    let mut head = Vec::new();
    while head.len() < HEAD.len() {
        let took = pipe.fill(&from, usize::MAX).await.unwrap();
        assert!(pipe.is_made(), "a fill that took {took} bytes had no pipe");
        pipe.drain(&to).await.unwrap();
        assert!(
            !pipe.is_made(),
            "an emptied pipe of a small direction was kept"
        );
        let mut got = vec![0u8; took];
        sink.read_exact(&mut got).await.unwrap();
        head.extend_from_slice(&got);
    }
    assert_eq!(head, HEAD);

    let bulk = pattern(KEEP_AFTER as usize * 2, 9);
    let writing = bulk.clone();
    let writer = tokio::spawn(async move { source.write_all(&writing).await.unwrap() });
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; KEEP_AFTER as usize * 2];
        sink.read_exact(&mut got).await.unwrap();
        got
    });
    let mut moved = HEAD.len();
    while moved < HEAD.len() + bulk.len() {
        moved += pipe.fill(&from, usize::MAX).await.unwrap();
        pipe.drain(&to).await.unwrap();
        assert_eq!(
            pipe.is_made(),
            moved as u64 >= KEEP_AFTER,
            "after {moved} bytes"
        );
    }
    writer.await.unwrap();
    assert!(reader.await.unwrap() == bulk, "the bulk bytes differ");
}
