//! What the origin-rule suites (`git_origins`, `redteam_origins`) set up alike: a raw listener that
//! records every request head it is sent and answers as the test says (a trap at another origin, a
//! hostile front end), a credential minted for the test, and a repository with one commit pushed.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stet_engine::credential::{CredentialProvider, ScopedCredential};

use super::support::git;

/// The repository every credential here is minted for.
pub(super) const REPO: &str = "octo/app";

/// A Basic challenge: bait for a credential.
pub(super) const CHALLENGE: &[u8] = b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"forge\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// What a settle probe sends, so the listener tells it from a client's connection.
const SETTLE: &[u8] = b"STET-LISTENER-SETTLE\n";

/// The bytes each accepted connection sent up to the end of its request head, in the order accepted.
type Recorded = Arc<Mutex<Vec<Arc<Mutex<Vec<u8>>>>>>;

/// A listener on loopback that records each connection's request head and answers it with what
/// `answer` makes of the head; it stops when dropped.
pub(super) struct Listener {
    address: SocketAddr,
    connections: Recorded,
    stopping: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// A listener answering every request with `answer(head)`.
    pub(super) fn start(answer: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Listener {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let address = listener.local_addr().unwrap();
        let connections: Recorded = Arc::default();
        let stopping = Arc::new(AtomicBool::new(false));
        let (recorded, stop) = (Arc::clone(&connections), Arc::clone(&stopping));
        let answer = Arc::new(answer);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let bytes = Arc::new(Mutex::new(Vec::new()));
                recorded.lock().unwrap().push(Arc::clone(&bytes));
                let answer = Arc::clone(&answer);
                std::thread::spawn(move || {
                    let head = read_head(&mut stream);
                    bytes.lock().unwrap().clone_from(&head);
                    if !head.starts_with(SETTLE) {
                        let _ = stream.write_all(&answer(&head));
                    }
                });
            }
        });
        Listener {
            address,
            connections,
            stopping,
            thread: Some(thread),
        }
    }

    /// A trap at another origin: it answers every request with a challenge.
    pub(super) fn trap() -> Listener {
        Listener::start(|_| CHALLENGE.to_vec())
    }

    pub(super) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Waits until the listener accepted every connection made before this call (it accepts in
    /// order, so once a probe made now is accepted, so are they), then returns the head each of those
    /// connections sent.
    pub(super) fn settle(&self) -> Vec<Vec<u8>> {
        let mut probe = TcpStream::connect(self.address).unwrap();
        probe.write_all(SETTLE).unwrap();
        probe.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = Vec::new();
        let _ = probe.read_to_end(&mut answer);
        let connections = self.connections.lock().unwrap();
        connections
            .iter()
            .map(|bytes| bytes.lock().unwrap().clone())
            .filter(|bytes| !bytes.starts_with(SETTLE))
            .collect()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.address);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request head (up to 64 KiB, or a settle probe).
pub(super) fn read_head(stream: &mut TcpStream) -> Vec<u8> {
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
        if bytes.starts_with(SETTLE)
            || bytes.windows(4).any(|window| window == b"\r\n\r\n")
            || bytes.len() > 64 * 1024
        {
            break;
        }
    }
    bytes
}

/// A credential from `provider` for [`REPO`], as a dispatch mints it.
pub(super) async fn mint(provider: Arc<dyn CredentialProvider>) -> ScopedCredential {
    ScopedCredential::mint(provider, REPO, "stet/origins", Duration::from_secs(300))
        .await
        .unwrap()
}

/// [`mint`] outside a runtime.
pub(super) fn mint_blocking(provider: Arc<dyn CredentialProvider>) -> ScopedCredential {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(mint(provider))
}

/// A repository at `dir` on `main` with one commit (a README), pushed to the bare `remote`; returns
/// the commit.
pub(super) fn seeded(dir: &Path, remote: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README.md"), "app\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "initial"]);
    git(dir, &["push", "-q", remote.to_str().unwrap(), "main"]);
    git(dir, &["rev-parse", "HEAD"])
}
