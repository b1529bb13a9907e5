//! Red-team attacks on the origin rule (issue 27 part 1) from a hostile forge front end, pinned: each
//! proves by what another listener recorded that the credential and libgit2 stay at the checked origin.

use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use git2::Repository;

use stet_engine::credential::{LocalCredentialProvider, ScopedCredential};
use stet_engine::git::origin_guard::TransferBounds;
use stet_engine::git::push::{
    PushError, PushRequest, fetch_commit_within, push_within, remote_refs, remote_refs_within,
};
use stet_sanitize::branch::CommitSha;

use super::origin_listener::{CHALLENGE, Listener, mint, read_head};

async fn credential() -> ScopedCredential {
    mint(Arc::new(LocalCredentialProvider::default())).await
}

/// A forge front end that challenges, then — once it holds the credential — redirects to another port
/// with a `Location` holding one byte that is not visible ASCII (legal obs-text in HTTP/1.1). The guard
/// reads `Location` with `HeaderValue::to_str`, which fails on such a byte, and then passes the answer
/// through untouched; libgit2 follows it to the other origin. The other origin must see nothing.
#[tokio::test]
async fn a_location_with_a_non_ascii_byte_does_not_slip_past_the_guard() {
    let credential = credential().await;
    let canary = credential.host_push_secret().expose_secret().to_owned();
    let trap = Listener::trap();
    let trap_address = trap.address();
    let front = Listener::start(move |head| {
        let text = String::from_utf8_lossy(head).to_ascii_lowercase();
        if !text.contains("\r\nauthorization:") {
            return CHALLENGE.to_vec();
        }
        let mut answer = b"HTTP/1.1 302 Found\r\nLocation: http://".to_vec();
        answer.extend_from_slice(trap_address.to_string().as_bytes());
        answer.extend_from_slice(b"/octo/app.git/info/refs\xff?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        answer
    });
    let dir = tempfile::tempdir().unwrap();
    Repository::init(dir.path()).unwrap();
    let url = format!("http://{}/octo/app.git", front.address());
    let path = dir.path().to_owned();
    let listed = tokio::task::spawn_blocking(move || remote_refs(&path, &url, Some(&credential)))
        .await
        .unwrap();
    assert!(
        matches!(listed, Err(PushError::RedirectRefused { .. })),
        "the redirect must be refused: {listed:?}"
    );
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{canary}"));
    let trapped = trap.settle();
    for head in &trapped {
        let text = String::from_utf8_lossy(head);
        assert!(
            !text.contains(&basic) && !text.contains(&canary),
            "the credential reached another origin ({trap_address}):\n{text}"
        );
    }
    assert!(
        trapped.is_empty(),
        "libgit2 connected to another origin ({trap_address}) than the one stet checked: {:?}",
        trapped
            .iter()
            .map(|head| String::from_utf8_lossy(head).into_owned())
            .collect::<Vec<_>>()
    );
}

/// The same front end, with each spelling of another origin a hostile forge can put in a `Location`,
/// and each redirect status: protocol-relative, with userinfo, upper-case scheme, a trailing-dot host,
/// the address as one number, a percent-encoded host. The guard refuses each; nothing reaches the trap.
#[tokio::test]
async fn every_spelling_of_another_origin_is_refused_by_the_guard() {
    let credential = Arc::new(credential().await);
    let canary = credential.host_push_secret().expose_secret().to_owned();
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{canary}"));
    let trap = Listener::trap();
    let port = trap.address().port();
    let spellings = [
        format!("//127.0.0.1:{port}/octo/app.git/info/refs?service=git-upload-pack"),
        format!("http://x-access-token:guess@127.0.0.1:{port}/octo/app.git/info/refs"),
        format!("HTTP://127.0.0.1:{port}/octo/app.git/info/refs"),
        format!("http://127.0.0.1.:{port}/octo/app.git/info/refs"),
        format!("http://2130706433:{port}/octo/app.git/info/refs"),
        format!("http://%31%32%37.0.0.1:{port}/octo/app.git/info/refs"),
    ];
    for status in [
        "301 Moved",
        "302 Found",
        "303 See Other",
        "307 Temporary",
        "308 Permanent",
    ] {
        for location in &spellings {
            let answer = format!(
                "HTTP/1.1 {status}\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let front = Listener::start(move |head| {
                let text = String::from_utf8_lossy(head).to_ascii_lowercase();
                if text.contains("\r\nauthorization:") {
                    answer.clone().into_bytes()
                } else {
                    CHALLENGE.to_vec()
                }
            });
            let dir = tempfile::tempdir().unwrap();
            Repository::init(dir.path()).unwrap();
            let url = format!("http://{}/octo/app.git", front.address());
            let path = dir.path().to_owned();
            let held = Arc::clone(&credential);
            let listed = tokio::task::spawn_blocking(move || remote_refs(&path, &url, Some(&held)))
                .await
                .unwrap();
            assert!(
                listed.is_err(),
                "{status} to {location}: the listing cannot succeed: {listed:?}"
            );
            let shown = listed.unwrap_err().to_string();
            assert!(!shown.contains(&canary), "{status} to {location}: {shown}");
        }
    }
    let trapped = trap.settle();
    for head in &trapped {
        let text = String::from_utf8_lossy(head);
        assert!(
            !text.contains(&basic) && !text.contains(&canary),
            "the credential reached another origin ({}):\n{text}",
            trap.address()
        );
    }
    assert!(
        trapped.is_empty(),
        "libgit2 connected to another origin ({}): {:?}",
        trap.address(),
        trapped
            .iter()
            .map(|head| String::from_utf8_lossy(head).into_owned())
            .collect::<Vec<_>>()
    );
}

/// Bounds short enough for a test: one second standing still, two of grace, then 256 bytes/s.
const SHORT: TransferBounds = TransferBounds {
    idle: Duration::from_secs(1),
    grace: Duration::from_secs(2),
    floor_bytes_per_second: 256,
};

/// How long past the grace and the idle bound an operation may take to report the cut.
const SLACK: Duration = Duration::from_secs(8);

/// What a hostile front end does once it holds the credential, for the request it chose to stall.
#[derive(Debug, Clone, Copy)]
enum Stalling {
    /// Reads the request and never answers.
    Silent,
    /// Sends the answer's head, then one byte of its body every 300 ms (under the idle bound).
    Trickle,
    /// Sends the answer's head and a first byte, then nothing.
    HeadThenSilent,
}

/// One pkt-line.
fn pkt(line: &str) -> String {
    format!("{:04x}{line}", line.len() + 4)
}

/// A smart-HTTP ref advertisement for `service`, `main` at `sha`; the front end answers one request per
/// connection, so it says so (a connection kept for reuse after the front end hung up would fail the
/// next request with a 502 before any stalling began).
fn advertisement(service: &str, sha: &str) -> Vec<u8> {
    let body = format!(
        "{}0000{}{}0000",
        pkt(&format!("# service={service}\n")),
        pkt(&format!(
            "{sha} refs/heads/main\0report-status side-band-64k ofs-delta\n"
        )),
        pkt(&format!("{sha} refs/heads/trunk\n")),
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-{service}-advertisement\r\nCache-Control: no-cache\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A front end that challenges until it holds the credential, advertises `main` at `sha` on each
/// `info/refs`, and stalls the request whose head holds `stalled` in the way `how` says.
fn stalling_front(stalled: &'static str, how: Stalling, sha: String) -> std::net::SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let sha = sha.clone();
            std::thread::spawn(move || {
                let head = read_head(&mut stream);
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if !text.contains("\r\nauthorization:") {
                    let _ = stream.write_all(CHALLENGE);
                    return;
                }
                let request_line = text.lines().next().unwrap_or_default().to_owned();
                if !request_line.contains(stalled) {
                    let service = if request_line.contains("git-receive-pack") {
                        "git-receive-pack"
                    } else {
                        "git-upload-pack"
                    };
                    let _ = stream.write_all(&advertisement(service, &sha));
                    return;
                }
                let kind = if request_line.contains("receive") {
                    "receive"
                } else {
                    "upload"
                };
                let answer_head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-{kind}-pack-{}\r\nTransfer-Encoding: chunked\r\n\r\n",
                    if request_line.starts_with("get") {
                        "advertisement"
                    } else {
                        "result"
                    }
                );
                match how {
                    Stalling::Silent => {}
                    Stalling::HeadThenSilent => {
                        let _ = stream.write_all(answer_head.as_bytes());
                        let _ = stream.write_all(b"1\r\nf\r\n");
                    }
                    Stalling::Trickle => {
                        if stream.write_all(answer_head.as_bytes()).is_err() {
                            return;
                        }
                        // The attack itself: a byte now and then, for as long as anyone listens. The
                        // bytes open a pkt-line of 65,520 bytes, so libgit2 waits for the rest.
                        for byte in b"fff0".iter().chain(std::iter::repeat_n(&b'a', 400)) {
                            let chunk = [b'1', b'\r', b'\n', *byte, b'\r', b'\n'];
                            if stream.write_all(&chunk).is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(300));
                        }
                        return;
                    }
                }
                // Hold the connection open without a word until the guard gives up on it.
                let mut rest = [0; 1024];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
                while matches!(std::io::Read::read(&mut stream, &mut rest), Ok(read) if read > 0) {}
            });
        }
    });
    address
}

/// Which git operation meets the stalling front end.
#[derive(Debug, Clone, Copy)]
enum Operation {
    List,
    Fetch,
    Push,
}

/// Runs `operation` against a front end stalling `stalled` as `how` says, with [`SHORT`] bounds: it
/// must end with [`PushError::Stalled`] naming the origin and never the credential, within the bound.
async fn is_cut(operation: Operation, stalled: &'static str, how: Stalling) {
    let credential = Arc::new(credential().await);
    let canary = credential.host_push_secret().expose_secret().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let repository = Repository::init(dir.path()).unwrap();
    let signature = git2::Signature::now("stet test", "test@stet.invalid").unwrap();
    let tree = repository
        .find_tree(repository.index().unwrap().write_tree().unwrap())
        .unwrap();
    let commit = repository
        .commit(None, &signature, &signature, "result", &tree, &[])
        .unwrap()
        .to_string();
    // What the front end advertises: a commit the repository lacks, so the fetch asks for it.
    let advertised = "1".repeat(40);
    let front = stalling_front(stalled, how, advertised.clone());
    let url = format!("http://{front}/octo/app.git");
    let path = dir.path().to_owned();
    let started = Instant::now();
    let held = Arc::clone(&credential);
    let ended = tokio::task::spawn_blocking(move || match operation {
        Operation::List => remote_refs_within(&path, &url, Some(&held), SHORT).map(drop),
        Operation::Fetch => fetch_commit_within(
            &path,
            &url,
            "main",
            &CommitSha::parse(&advertised).unwrap(),
            Some(&held),
            SHORT,
        ),
        Operation::Push => push_within(
            &PushRequest {
                repository: &path,
                url: &url,
                commit: &CommitSha::parse(&commit).unwrap(),
                branch: "stet/slow",
                credential: Some(&held),
            },
            SHORT,
        ),
    });
    let ended = tokio::time::timeout(SHORT.grace + SHORT.idle + SLACK, ended)
        .await
        .unwrap_or_else(|_| {
            panic!("{operation:?} against a front end stalling {stalled} ({how:?}) was not cut within {:?}", SHORT.grace + SHORT.idle + SLACK)
        })
        .unwrap();
    let took = started.elapsed();
    let case = format!("{operation:?}, {stalled} {how:?}, after {took:?}");
    let err = match ended {
        Err(err @ PushError::Stalled { .. }) => err.to_string(),
        other => panic!("{case}: the operation must be cut for moving too slowly: {other:?}"),
    };
    assert!(
        err.contains(&format!("http://{front}")) && err.to_ascii_lowercase().contains(stalled),
        "{case}: the error names the origin and the request: {err}"
    );
    assert!(
        !err.contains(&canary),
        "{case}: the error shows the credential: {err}"
    );
    eprintln!("{case}: {err}");
}

/// Before: the guard bounded only the wait for an answer's head (60 s), so a front end that sent a
/// head and then a byte every 50 s held a listing, a base fetch or a push for ever (and before the
/// head bound, one that never answered did). Now each exchange is cut once nothing moved for the idle
/// bound, or once, past the grace, its bytes fall under the floor; the operation fails naming the
/// origin. Each request kind, each way of stalling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_front_end_that_trickles_or_stalls_is_cut_within_the_bound() {
    for how in [
        Stalling::Trickle,
        Stalling::HeadThenSilent,
        Stalling::Silent,
    ] {
        is_cut(Operation::List, "info/refs?service=git-upload-pack", how).await;
        is_cut(Operation::Fetch, "post /octo/app.git/git-upload-pack", how).await;
        is_cut(Operation::Push, "info/refs?service=git-receive-pack", how).await;
        is_cut(Operation::Push, "post /octo/app.git/git-receive-pack", how).await;
    }
}

/// The default bounds still let a front end that never answers go after the idle bound, as the head
/// deadline did before (60 s; the operation gets twice that).
#[tokio::test]
async fn a_git_front_end_that_never_answers_does_not_hold_stet_for_ever() {
    assert_eq!(TransferBounds::default().idle, Duration::from_secs(60));
    let credential = credential().await;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let front = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            read_head(&mut stream);
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    Repository::init(dir.path()).unwrap();
    let url = format!("http://{front}/octo/app.git");
    let path = dir.path().to_owned();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(matches!(
            remote_refs(&path, &url, Some(&credential)),
            Err(PushError::Stalled { .. })
        ));
    });
    let answered =
        tokio::task::spawn_blocking(move || finished.recv_timeout(Duration::from_secs(120)))
            .await
            .unwrap();
    assert_eq!(
        answered,
        Ok(true),
        "a git listing against a silent front end did not end, cut, within 120 s"
    );
}
