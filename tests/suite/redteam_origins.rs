//! Red-team attacks on the origin rule (issue 27 part 1) from a hostile forge front end, pinned: each
//! proves by what another listener recorded that the credential and libgit2 stay at the checked origin.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use git2::Repository;

use stet_engine::dispatch::credential::{
    CredentialProvider, LocalCredentialProvider, ScopedCredential,
};
use stet_engine::git::push::{PushError, remote_refs};

/// Everything each accepted connection sent, up to the end of its request head.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// Reads one request head (up to 64 KiB).
fn read_head(stream: &mut std::net::TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut buffer = [0; 4096];
    while let Ok(read) = stream.read(&mut buffer) {
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..read]);
        if bytes.windows(4).any(|window| window == b"\r\n\r\n") || bytes.len() > 64 * 1024 {
            break;
        }
    }
    bytes
}

/// A listener answering every request with `answer(head)`, recording each head.
fn listener(answer: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let address = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let recorded = Arc::clone(&seen);
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (recorded, answer) = (Arc::clone(&recorded), Arc::clone(&answer));
            std::thread::spawn(move || {
                let head = read_head(&mut stream);
                recorded.lock().unwrap().push(head.clone());
                let _ = stream.write_all(&answer(&head));
            });
        }
    });
    (address, seen)
}

const CHALLENGE: &[u8] = b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"forge\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

async fn credential() -> ScopedCredential {
    let provider: Arc<dyn CredentialProvider> = Arc::new(LocalCredentialProvider::default());
    ScopedCredential::mint(
        provider,
        "octo/app",
        "stet/origins",
        Duration::from_secs(300),
    )
    .await
    .unwrap()
}

/// A forge front end that challenges, then — once it holds the credential — redirects to another port
/// with a `Location` holding one byte that is not visible ASCII (legal obs-text in HTTP/1.1). The guard
/// reads `Location` with `HeaderValue::to_str`, which fails on such a byte, and then passes the answer
/// through untouched; libgit2 follows it to the other origin. The other origin must see nothing.
#[tokio::test]
async fn a_location_with_a_non_ascii_byte_does_not_slip_past_the_guard() {
    let credential = credential().await;
    let canary = credential.host_push_secret().expose_secret().to_owned();
    let (trap, trapped) = listener(|_| CHALLENGE.to_vec());
    let (front, _) = listener(move |head| {
        let text = String::from_utf8_lossy(head).to_ascii_lowercase();
        if !text.contains("\r\nauthorization:") {
            return CHALLENGE.to_vec();
        }
        let mut answer = b"HTTP/1.1 302 Found\r\nLocation: http://".to_vec();
        answer.extend_from_slice(trap.to_string().as_bytes());
        answer.extend_from_slice(b"/octo/app.git/info/refs\xff?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        answer
    });
    let dir = tempfile::tempdir().unwrap();
    Repository::init(dir.path()).unwrap();
    let url = format!("http://{front}/octo/app.git");
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
    let trapped = trapped.lock().unwrap().clone();
    for head in &trapped {
        let text = String::from_utf8_lossy(head);
        assert!(
            !text.contains(&basic) && !text.contains(&canary),
            "the credential reached another origin ({trap}):\n{text}"
        );
    }
    assert!(
        trapped.is_empty(),
        "libgit2 connected to another origin ({trap}) than the one stet checked: {:?}",
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
    let (trap, trapped) = listener(|_| CHALLENGE.to_vec());
    let port = trap.port();
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
            let (front, _) = listener(move |head| {
                let text = String::from_utf8_lossy(head).to_ascii_lowercase();
                if text.contains("\r\nauthorization:") {
                    answer.clone().into_bytes()
                } else {
                    CHALLENGE.to_vec()
                }
            });
            let dir = tempfile::tempdir().unwrap();
            Repository::init(dir.path()).unwrap();
            let url = format!("http://{front}/octo/app.git");
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
    let trapped = trapped.lock().unwrap().clone();
    for head in &trapped {
        let text = String::from_utf8_lossy(head);
        assert!(
            !text.contains(&basic) && !text.contains(&canary),
            "the credential reached another origin ({trap}):\n{text}"
        );
    }
    assert!(
        trapped.is_empty(),
        "libgit2 connected to another origin ({trap}): {:?}",
        trapped
            .iter()
            .map(|head| String::from_utf8_lossy(head).into_owned())
            .collect::<Vec<_>>()
    );
}

/// A forge front end that accepts the connection, reads the request and never answers. Before, neither
/// the guard (its upstream client had a connect timeout only) nor libgit2 (no server timeout is set)
/// gave up, so a listing, a base fetch or a push held its blocking thread — and the dispatch, or
/// `stet doctor` — for ever. The guard gives an answer's head 60 s, as the REST clients do; the
/// operation gets twice that here and must have failed.
#[tokio::test]
async fn a_git_front_end_that_never_answers_does_not_hold_stet_for_ever() {
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
        let _ = done.send(remote_refs(&path, &url, Some(&credential)).is_err());
    });
    let answered =
        tokio::task::spawn_blocking(move || finished.recv_timeout(Duration::from_secs(120)))
            .await
            .unwrap();
    assert_eq!(
        answered,
        Ok(true),
        "a git listing against a silent front end did not end within 120 s"
    );
}
