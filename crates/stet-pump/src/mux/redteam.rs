//! Red-team tests of `crate::mux` on the host's side: a relay (or whatever writes the relay's
//! stdout) that never reads the host's frames must not hold the host's stop, nor make the host
//! hold an unbounded backlog of frames for it, nor leave the host an unbounded set of finished
//! connection tasks.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stet_protocol::channel_stream::Frame;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::*;

fn encoded(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        frame.encode(&mut out);
    }
    out
}

fn open(connection: u32) -> Frame {
    Frame::Open {
        connection,
        channel: "model".to_owned(),
    }
}

/// This process's resident memory in KiB (a figure for the report, never asserted on).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A host end that answers every connection with `reply` bytes, reads what comes to its end, and
/// counts the connections it has finished with; `done` is told of each.
fn replying_end(
    path: &Path,
    reply: usize,
    finished: Arc<AtomicUsize>,
    done: mpsc::UnboundedSender<()>,
) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let finished = Arc::clone(&finished);
            let done = done.clone();
            tokio::spawn(async move {
                let _ = socket.write_all(&vec![b'r'; reply]).await;
                let _ = socket.shutdown().await;
                let mut sink = Vec::new();
                let _ = socket.read_to_end(&mut sink).await;
                finished.fetch_add(1, Ordering::SeqCst);
                let _ = done.send(());
            });
        }
    })
}

/// A relay that opened a connection, read the header of the host's first data frame, and reads
/// nothing more (an agent that stopped its relay with SIGSTOP, or a process in its place): the
/// host's writer is stuck in a full pipe, and stopping the stream must still end it.
#[tokio::test]
async fn a_relay_that_stops_reading_cannot_hold_the_hosts_stop() {
    let dir = tempfile::tempdir().unwrap();
    let end = dir.path().join("model.sock");
    let (done, _done) = mpsc::unbounded_channel();
    let _server = replying_end(&end, 1024 * 1024, Arc::new(AtomicUsize::new(0)), done);
    // A pipe of a few bytes: whatever the host has queued past them waits on the relay.
    let (relay_io, host_io) = tokio::io::duplex(16);
    let (host_read, host_write) = tokio::io::split(host_io);
    let (mut relay_read, mut relay_write) = tokio::io::split(relay_io);
    let (stop, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(run(
        host_read,
        host_write,
        vec!["model".to_owned()],
        Role::Host { ends: vec![end] },
        async {
            let _ = stopped.await;
        },
    ));
    relay_write.write_all(&encoded(&[open(0)])).await.unwrap();
    let mut header = [0u8; HEADER];
    relay_read.read_exact(&mut header).await.unwrap();
    assert_eq!(
        header[0], 2,
        "the host's first frame is not data: {header:?}"
    );
    // The relay reads no more; the agent's work is over and the host stops the stream.
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), host)
        .await
        .expect("the host's stop waited forever on a relay that reads nothing")
        .unwrap();
    assert!(
        matches!(ended, Ended::Stopped | Ended::Broken(_)),
        "{ended:?}"
    );
    drop((relay_read, relay_write));
}

const HEADER: usize = stet_protocol::channel_stream::HEADER_BYTES;

/// A relay that never reads its stdin and keeps opening and closing connections on a channel
/// whose host end replies (the gateway's error page, a proxy's refusal): each reply is queued for
/// a relay that never takes it. The host must stop taking connections once its backlog is full,
/// not hold one reply per connection for ever.
#[tokio::test]
async fn a_relay_that_never_reads_cannot_make_the_host_queue_replies_without_bound() {
    const REPLY: usize = 32 * 1024;
    const CYCLES: u32 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let end = dir.path().join("model.sock");
    let finished = Arc::new(AtomicUsize::new(0));
    let (done, mut served) = mpsc::unbounded_channel();
    let _server = replying_end(&end, REPLY, Arc::clone(&finished), done);
    let (relay_io, host_io) = tokio::io::duplex(16);
    let (host_read, host_write) = tokio::io::split(host_io);
    let (_relay_read, mut relay_write) = tokio::io::split(relay_io);
    let host = tokio::spawn(run(
        host_read,
        host_write,
        vec!["model".to_owned()],
        Role::Host { ends: vec![end] },
        std::future::pending(),
    ));
    let before = rss_kib();
    let mut cycles = 0;
    for connection in 0..CYCLES {
        let frames = encoded(&[open(connection), Frame::Close { connection }]);
        if relay_write.write_all(&frames).await.is_err() {
            break;
        }
        // One at a time: the next opens once the host end is done with this one (or the host
        // ended the stream).
        tokio::select! {
            _ = served.recv() => {}
            () = async { while !host.is_finished() { tokio::task::yield_now().await; } } => break,
        }
        cycles += 1;
    }
    let grown = rss_kib().saturating_sub(before);
    eprintln!(
        "{cycles} open/close cycles, host end finished {} connections, resident memory +{grown} KiB",
        finished.load(Ordering::SeqCst)
    );
    assert!(
        cycles < 4 * MAX_CONNECTIONS as u32,
        "the host took {cycles} connections (+{grown} KiB resident) for a relay that never reads their replies"
    );
    let ended = tokio::time::timeout(Duration::from_secs(20), host)
        .await
        .expect("the host did not end the stream")
        .unwrap();
    assert!(matches!(ended, Ended::Violation(_)), "{ended:?}");
}

/// A flood of opens each reset at once: the host dials and aborts, and must not keep a finished
/// task per connection until the flood ends (its join set reaped one per turn of its loop).
#[tokio::test]
async fn a_flood_of_opens_and_resets_leaves_no_backlog_of_finished_tasks() {
    const CYCLES: u32 = 400_000;
    let dir = tempfile::tempdir().unwrap();
    let end = dir.path().join("model.sock");
    let listener = UnixListener::bind(&end).unwrap();
    let _holder = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let (relay_io, host_io) = tokio::io::duplex(256 * 1024);
    let (host_read, host_write) = tokio::io::split(host_io);
    let (mut relay_read, mut relay_write) = tokio::io::split(relay_io);
    let _drain = tokio::spawn(async move {
        let mut sink = vec![0u8; 64 * 1024];
        while relay_read.read(&mut sink).await.is_ok_and(|read| read > 0) {}
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(run(
        host_read,
        host_write,
        vec!["model".to_owned()],
        Role::Host { ends: vec![end] },
        async {
            let _ = stopped.await;
        },
    ));
    let before = rss_kib();
    let mut batch = Vec::new();
    for connection in 0..CYCLES {
        open(connection).encode(&mut batch);
        Frame::Reset { connection }.encode(&mut batch);
        if batch.len() > 60 * 1024 {
            relay_write.write_all(&batch).await.unwrap();
            batch.clear();
        }
    }
    relay_write.write_all(&batch).await.unwrap();
    let grown = rss_kib().saturating_sub(before);
    stop.send(()).unwrap();
    eprintln!("{CYCLES} open/reset cycles: resident memory +{grown} KiB");
    assert_eq!(host.await.unwrap(), Ended::Stopped);
    assert!(grown < 64 * 1024, "+{grown} KiB");
}
