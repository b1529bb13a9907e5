//! The egress proxy of one dispatch: HTTP/1.1 on a unix socket (private to stet's account), each
//! connection read head first, decided by the policy, its host resolved once by stet and connected
//! to the address stet checked, then relayed within the dispatch's bounds (connections, bytes up and
//! down, idle and total time). Every connection, allowed or refused, leaves a record.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::unix_server::{self, BindError};

use super::address;
use super::head::{self, Asked, Body, MAX_HEAD_BYTES};
use super::hosts::Target;
use super::{EgressPolicy, Verdict};

/// How many records a proxy keeps (the oldest go first; the counts stay whole).
const MAX_RECORDS: usize = 4096;

/// How many records may wait to be published live; past it a record is only counted and kept.
const LIVE_RECORDS: usize = 256;

/// The buffer a plain request's body is read into (a tunnel's bytes go through a pipe instead).
const RELAY_BUFFER: usize = 64 << 10;

/// What one dispatch's proxy allows in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressBounds {
    /// Connections open at once; more wait in the socket's backlog, holding nothing of stet's.
    pub max_connections: usize,
    /// Bytes the agent may send out over all connections (uploads are how code leaves).
    pub max_upload_bytes: u64,
    /// Bytes it may receive over all connections.
    pub max_download_bytes: u64,
    /// How long a connection may carry nothing either way.
    pub idle: Duration,
    /// How long one connection may last.
    pub max_connection_time: Duration,
    /// How long a client may take to send its request head, and stet to resolve and connect.
    pub head_time: Duration,
}

impl Default for EgressBounds {
    fn default() -> EgressBounds {
        EgressBounds {
            max_connections: 64,
            max_upload_bytes: 16 << 20,
            max_download_bytes: 4 << 30,
            idle: Duration::from_secs(120),
            max_connection_time: Duration::from_secs(30 * 60),
            head_time: Duration::from_secs(10),
        }
    }
}

/// One connection, as the run record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord {
    /// The host as asked (control characters removed, bounded).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// The address stet connected to, when it did.
    pub address: Option<SocketAddr>,
    /// Whether the policy allowed it.
    pub allowed: bool,
    /// `allowed by <rule>` or `refused: <reason>`, and how it ended.
    pub outcome: String,
    /// For a refusal a rule would lift, the line to add to the configuration.
    pub hint: Option<String>,
    /// Bytes the agent sent through it.
    pub up: u64,
    /// Bytes it received through it.
    pub down: u64,
    /// How long it lasted, in milliseconds.
    pub millis: u64,
}

/// What a proxy has seen so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressReport {
    /// Connections allowed.
    pub allowed: u64,
    /// Connections refused.
    pub refused: u64,
    /// Bytes the agent sent out.
    pub uploaded: u64,
    /// Bytes it received.
    pub downloaded: u64,
    /// The last refusal's host and the line that would allow it.
    pub last_refused: Option<(String, Option<String>)>,
    /// The latest records, oldest first (at most [`MAX_RECORDS`]).
    pub records: std::collections::VecDeque<EgressRecord>,
    /// Records that could not be handed over live (too many at once).
    pub not_sent: usize,
}

impl EgressReport {
    /// The hosts reached (allowed and connected), as `host:port`, each once, in the order first
    /// reached.
    pub fn hosts_reached(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for record in self
            .records
            .iter()
            .filter(|record| record.address.is_some())
        {
            let host = format!("{}:{}", record.host, record.port);
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        hosts
    }
}

/// Why a proxy could not start.
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the egress proxy could not listen: {0}")]
    Bind(#[from] BindError),
}

/// Name resolution, stet's own: the proxy connects only to an address this returned and checked.
#[async_trait::async_trait]
pub trait Resolve: Send + Sync {
    /// The addresses of `host` on `port`.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system's resolver.
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// How the proxy reaches an address it checked: straight there, or through the machine's own proxy.
#[async_trait::async_trait]
pub trait Dial: Send + Sync {
    /// A connection to `address`, which `name` resolved to (or which the agent named as a literal).
    async fn dial(&self, name: &str, address: SocketAddr) -> Result<TcpStream, String>;
}

/// The machine's network as stet's own clients reach it: straight, or through the proxy of
/// `HTTPS_PROXY` unless `NO_PROXY` names the host, tunnelling to the checked address so the machine's
/// proxy resolves nothing of its own.
pub struct HostNetwork(crate::https::Network);

impl HostNetwork {
    /// The process's proxy settings; a proxy variable that is not an HTTP proxy's URL is an error
    /// naming it.
    pub fn current() -> Result<HostNetwork, String> {
        crate::https::Network::current()
            .map(HostNetwork)
            .map_err(|err| err.to_string())
    }

    /// The proxy settings `env` finds.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<HostNetwork, String> {
        crate::https::Network::from_env(env, Arc::default())
            .map(HostNetwork)
            .map_err(|err| err.to_string())
    }
}

#[async_trait::async_trait]
impl Dial for HostNetwork {
    async fn dial(&self, name: &str, address: SocketAddr) -> Result<TcpStream, String> {
        self.0.dial(name, address).await
    }
}

/// A running proxy; dropping it ends every connection.
pub struct EgressProxy {
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    policy: EgressPolicy,
    bounds: EgressBounds,
    resolver: Arc<dyn Resolve>,
    dialer: Arc<dyn Dial>,
    upload_left: AtomicU64,
    download_left: AtomicU64,
    report: Mutex<EgressReport>,
    /// Each record as it is made, for the dispatch to publish live.
    live: mpsc::Sender<EgressRecord>,
    /// Cancelled when the proxy shuts down: each connection ends and leaves its record.
    ending: CancellationToken,
}

impl EgressProxy {
    /// Binds `socket` (mode 0600; refused if it exists) and serves on it in a background task,
    /// resolving with `resolver` and connecting with `dialer`; returns the proxy and its records as
    /// they are made.
    pub fn start(
        socket: &Path,
        policy: EgressPolicy,
        bounds: EgressBounds,
        resolver: Arc<dyn Resolve>,
        dialer: Arc<dyn Dial>,
    ) -> Result<(EgressProxy, mpsc::Receiver<EgressRecord>), ProxyError> {
        let listener = unix_server::bind_private(socket)?;
        let (live, records) = mpsc::channel(LIVE_RECORDS);
        let shared = Arc::new(Shared {
            upload_left: AtomicU64::new(bounds.max_upload_bytes),
            download_left: AtomicU64::new(bounds.max_download_bytes),
            policy,
            bounds,
            resolver,
            dialer,
            report: Mutex::new(EgressReport::default()),
            live,
            ending: CancellationToken::new(),
        });
        let (stop, stopped) = oneshot::channel();
        let serving = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            let max = serving.bounds.max_connections;
            let connections = unix_server::accept_bounded(listener, max, stopped, |client| {
                let shared = Arc::clone(&serving);
                async move { serve(client, &shared).await }
            });
            let mut connections = connections.await;
            serving.ending.cancel();
            while connections.join_next().await.is_some() {}
        });
        let proxy = EgressProxy {
            socket: socket.to_owned(),
            shared,
            stop: Some(stop),
            accept: Some(accept),
        };
        Ok((proxy, records))
    }

    /// What the proxy has seen so far.
    pub fn report(&self) -> EgressReport {
        lock(&self.shared.report).clone()
    }

    /// Stops accepting, ends every connection (each leaves its record), removes the socket and
    /// returns what the proxy saw.
    pub async fn shutdown(mut self) -> EgressReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        unix_server::remove_socket(&self.socket);
        self.report()
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            unix_server::remove_socket(&self.socket);
        }
    }
}

fn lock(report: &Mutex<EgressReport>) -> std::sync::MutexGuard<'_, EgressReport> {
    report
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How one connection went, before it is recorded.
struct Served {
    host: String,
    port: u16,
    address: Option<SocketAddr>,
    outcome: String,
    refusal: Option<Option<String>>,
    up: u64,
    down: u64,
}

/// What a connection has moved so far, kept outside its handling so that one cut at a bound still
/// leaves its host and every byte it carried in its record (and so in the upload total the review
/// hold reads).
#[derive(Default)]
struct Moved {
    up: AtomicU64,
    down: AtomicU64,
    /// Once relaying: the host, the port, the address and `allowed by <rule>`.
    relaying: Mutex<Option<(String, u16, SocketAddr, String)>>,
}

async fn serve(mut client: UnixStream, shared: &Shared) {
    let started = Instant::now();
    let moved = Moved::default();
    let cut = |ended: &str| {
        let relaying = moved
            .relaying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match relaying {
            Some((host, port, address, allowed)) => Served {
                host,
                port,
                address: Some(address),
                outcome: format!("{allowed}; {ended}"),
                refusal: None,
                up: 0,
                down: 0,
            },
            None => Served {
                host: String::new(),
                port: 0,
                address: None,
                outcome: ended.to_owned(),
                refusal: None,
                up: 0,
                down: 0,
            },
        }
    };
    let bounded = tokio::time::timeout(
        shared.bounds.max_connection_time,
        handle(&mut client, shared, &moved),
    );
    // A relayed connection sees the end itself and returns its counts in the same poll; only one
    // still being read or connected is cut here.
    let mut served = tokio::select! {
        biased;
        handled = bounded => match handled {
            Ok(served) => served,
            Err(_) => cut("ended: it lasted past the connection's time bound"),
        },
        () = shared.ending.cancelled() => cut("ended: the dispatch ended before it was relayed"),
    };
    served.up = moved.up.load(Ordering::Relaxed);
    served.down = moved.down.load(Ordering::Relaxed);
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (allowed, hint) = match served.refusal {
        Some(hint) => (false, hint),
        None => (true, None),
    };
    let record = EgressRecord {
        host: served.host,
        port: served.port,
        address: served.address,
        allowed,
        outcome: served.outcome,
        hint,
        up: served.up,
        down: served.down,
        millis,
    };
    let sent = shared.live.try_send(record.clone()).is_ok();
    let mut report = lock(&shared.report);
    if allowed {
        report.allowed += 1;
    } else {
        report.refused += 1;
        report.last_refused = Some((record.host.clone(), record.hint.clone()));
    }
    report.uploaded += record.up;
    report.downloaded += record.down;
    if !sent {
        report.not_sent += 1;
    }
    if report.records.len() == MAX_RECORDS {
        report.records.pop_front();
    }
    report.records.push_back(record);
}

/// Reads, decides, connects and relays one connection.
async fn handle(client: &mut UnixStream, shared: &Shared, moved: &Moved) -> Served {
    let mut served = Served {
        host: String::new(),
        port: 0,
        address: None,
        outcome: String::new(),
        refusal: Some(None),
        up: 0,
        down: 0,
    };
    let (head_bytes, rest) =
        match tokio::time::timeout(shared.bounds.head_time, read_head(client)).await {
            Ok(Ok(read)) => read,
            Ok(Err(reason)) => return refuse(client, served, 400, reason).await,
            Err(_) => {
                served.outcome = "refused: no request head within the time bound".into();
                return served;
            }
        };
    let asked = match head::parse(&head_bytes) {
        Ok(asked) => asked,
        Err(err) => return refuse(client, served, 400, err.to_string()).await,
    };
    served.host = shown(asked.host());
    served.port = asked.port();
    let target = match Target::parse(asked.host()) {
        Ok(target) => target,
        Err(reason) => return refuse(client, served, 400, format!("the host {reason}")).await,
    };
    served.host = target.to_string();
    let (rule, chosen) = match shared.policy.decide(&target, asked.port()) {
        Verdict::Allowed { rule, chosen } => (rule, chosen),
        Verdict::Refused { reason, hint } => {
            served.refusal = Some(hint.clone());
            let body = match hint {
                Some(hint) => format!("{reason}: {hint}"),
                None => reason,
            };
            return refuse(client, served, 403, body).await;
        }
    };
    if chosen {
        // Resolving a name a `*.` rule allowed sends its labels, the agent's choice, to DNS.
        let name = target.to_string().len();
        if !take(&shared.upload_left, name) {
            return refuse(
                client,
                served,
                403,
                format!("the dispatch's upload bound was reached (resolving {target} sends its name out)"),
            )
            .await;
        }
        moved.up.fetch_add(name as u64, Ordering::Relaxed);
    }
    let connected = tokio::time::timeout(
        shared.bounds.head_time,
        connect(&target, asked.port(), shared),
    )
    .await;
    let upstream = match connected {
        Ok(Ok((upstream, address))) => {
            served.address = Some(address);
            upstream
        }
        Ok(Err(reason)) => return refuse(client, served, 403, reason).await,
        Err(_) => {
            return refuse(
                client,
                served,
                504,
                "resolving or connecting took too long".into(),
            )
            .await;
        }
    };
    served.refusal = None;
    let (first, body) = match asked {
        Asked::Tunnel { .. } => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                served.outcome = format!("allowed by {rule}; the agent went away");
                return served;
            }
            (rest, None)
        }
        Asked::Plain { head, mut body, .. } => {
            let taken = body.take(&rest);
            ([head.as_slice(), &rest[..taken]].concat(), Some(body))
        }
    };
    let allowed = format!("allowed by {rule}");
    if let Some(address) = served.address {
        *moved
            .relaying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((served.host.clone(), served.port, address, allowed.clone()));
    }
    let ended = relay(client, upstream, first, body, shared, moved).await;
    served.outcome = format!("{allowed}; {ended}");
    served
}

/// Reads until the head's blank line, at most [`MAX_HEAD_BYTES`]; returns the head and what came
/// after it.
async fn read_head(client: &mut UnixStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head::end_of_head(&buffer) {
            let rest = buffer.split_off(end);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(head::HeadError::TooLarge.to_string());
        }
        let read = client
            .read(&mut chunk)
            .await
            .map_err(|err| err.to_string())?;
        if read == 0 {
            return Err("the connection closed before its request head ended".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Resolves `target` once and connects to the first address the rules allow.
async fn connect(
    target: &Target,
    port: u16,
    shared: &Shared,
) -> Result<(TcpStream, SocketAddr), String> {
    let addresses = match target {
        Target::Address(address) => vec![SocketAddr::new(*address, port)],
        Target::Name(name) => shared
            .resolver
            .resolve(name, port)
            .await
            .map_err(|err| format!("{name} does not resolve: {err}"))?,
    };
    let mut refusal = format!("{target} resolves to no address");
    for address in addresses {
        let ip = address.ip();
        let lifted = shared.policy.loopback_for_tests && address::is_loopback(ip);
        if let Some(reason) = address::refused(ip).filter(|_| !lifted) {
            refusal =
                format!("{target} resolves to {ip}, {reason}, which the proxy never connects to");
            continue;
        }
        match shared.dialer.dial(&target.to_string(), address).await {
            Ok(stream) => return Ok((stream, address)),
            Err(err) => refusal = err,
        }
    }
    Err(refusal)
}

/// Answers with `status` and `reason`, and records the refusal.
async fn refuse(
    client: &mut UnixStream,
    mut served: Served,
    status: u16,
    reason: String,
) -> Served {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Gateway Timeout",
    };
    let body = format!("stet egress: {reason}\n");
    let answer = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
    served.outcome = format!("refused: {reason}");
    if served.refusal.is_none() {
        served.refusal = Some(None);
    }
    served
}

/// Relays both ways until both sides are done or a bound ends it, counting the bytes each way in
/// `moved`; returns how it ended. The bytes pass through a pipe each way (`splice`, no copy in
/// stet), each chunk counted against its bound before it goes on. For a plain request (`body`),
/// only what is left of its body goes up, read into a buffer to find its end: once it has ended,
/// nothing more the agent sends is read, so a request pipelined behind it never reaches the host.
async fn relay(
    client: &mut UnixStream,
    upstream: TcpStream,
    first: Vec<u8>,
    mut body: Option<Body>,
    shared: &Shared,
    moved: &Moved,
) -> String {
    let client: &UnixStream = client;
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let idle = shared.bounds.idle;
    if !first.is_empty() {
        if !take(&shared.upload_left, first.len()) {
            return "ended: the dispatch's upload bound was reached".into();
        }
        // Counted as soon as taken: a write cut half way may still have sent it.
        moved.up.fetch_add(first.len() as u64, Ordering::Relaxed);
        if write(&mut upstream_write, &first, idle).await.is_err() {
            return "ended: the host went away".into();
        }
    }
    // Each direction makes its pipe on its first bytes: an idle tunnel holds none.
    let (mut up_pipe, mut down_pipe) = (stet_pump::Pipe::new(), stet_pump::Pipe::new());
    let mut up_buffer = vec![0u8; if body.is_some() { RELAY_BUFFER } else { 0 }];
    let (mut client_done, mut upstream_done) = (body.as_ref().is_some_and(Body::done), false);
    loop {
        if client_done && upstream_done {
            break "closed".to_owned();
        }
        tokio::select! {
            read = read_some(client, &mut up_buffer), if !client_done && body.is_some() => match read {
                Ok(0) | Err(_) => {
                    client_done = true;
                    let _ = upstream_write.shutdown().await;
                }
                Ok(read) => {
                    let read = body.as_mut().map_or(read, |body| body.take(&up_buffer[..read]));
                    client_done = body.as_ref().is_some_and(Body::done);
                    if !take(&shared.upload_left, read) {
                        break "ended: the dispatch's upload bound was reached".to_owned();
                    }
                    moved.up.fetch_add(read as u64, Ordering::Relaxed);
                    if write(&mut upstream_write, &up_buffer[..read], idle).await.is_err() {
                        break "ended: the host stopped reading".to_owned();
                    }
                }
            },
            taken = up_pipe.fill(client, allowance(&shared.upload_left)), if !client_done && body.is_none() => match taken {
                Err(error) if stet_pump::NoPipe::is(&error) => break format!("ended: {error}"),
                Ok(0) | Err(_) => {
                    client_done = true;
                    let _ = upstream_write.shutdown().await;
                }
                Ok(taken) => {
                    if !take(&shared.upload_left, taken) {
                        break "ended: the dispatch's upload bound was reached".to_owned();
                    }
                    moved.up.fetch_add(taken as u64, Ordering::Relaxed);
                    if drain(&mut up_pipe, upstream_write.as_ref(), idle).await.is_err() {
                        break "ended: the host stopped reading".to_owned();
                    }
                }
            },
            taken = down_pipe.fill(upstream_read.as_ref(), allowance(&shared.download_left)), if !upstream_done => match taken {
                Err(error) if stet_pump::NoPipe::is(&error) => break format!("ended: {error}"),
                Ok(0) | Err(_) => {
                    upstream_done = true;
                    let _ = stet_pump::shut_write(client);
                }
                Ok(taken) => {
                    if !take(&shared.download_left, taken) {
                        break "ended: the dispatch's download bound was reached".to_owned();
                    }
                    moved.down.fetch_add(taken as u64, Ordering::Relaxed);
                    if drain(&mut down_pipe, client, idle).await.is_err() {
                        break "ended: the agent stopped reading".to_owned();
                    }
                }
            },
            () = tokio::time::sleep(idle) => break format!("ended: nothing moved for {}s", idle.as_secs()),
            () = shared.ending.cancelled() => break "ended: the dispatch ended".to_owned(),
        }
    }
}

/// Passes on all `pipe` holds, failing when the other side takes nothing for `idle`.
async fn drain<S: stet_pump::Socket>(
    pipe: &mut stet_pump::Pipe,
    to: &S,
    idle: Duration,
) -> std::io::Result<()> {
    while pipe.held() > 0 {
        match tokio::time::timeout(idle, pipe.pass(to)).await {
            Ok(passed) => passed?,
            Err(_) => return Err(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        };
    }
    Ok(())
}

/// Reads what the agent has sent, once some has come.
async fn read_some(client: &UnixStream, buffer: &mut [u8]) -> std::io::Result<usize> {
    loop {
        client.readable().await?;
        match client.try_read(buffer) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            read => return read,
        }
    }
}

/// How many bytes a fill may take against `budget`: what is left of it, so that a bound is reached
/// at the byte, and at least one, so that a spent budget shows as a chunk it cannot pay for rather
/// than as the end of the stream.
fn allowance(budget: &AtomicU64) -> usize {
    usize::try_from(budget.load(Ordering::Relaxed))
        .unwrap_or(usize::MAX)
        .max(1)
}

/// Takes `bytes` from a budget, or nothing when it holds fewer.
fn take(budget: &AtomicU64, bytes: usize) -> bool {
    let bytes = bytes as u64;
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(bytes)
        })
        .is_ok()
}

/// Writes all of `bytes`, failing when the other side takes nothing for `idle`.
async fn write<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    idle: Duration,
) -> std::io::Result<()> {
    match tokio::time::timeout(idle, writer.write_all(bytes)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    }
}

/// A host for a record: no control characters, at most 255 bytes.
fn shown(host: &str) -> String {
    host.chars().filter(|c| !c.is_control()).take(255).collect()
}

#[cfg(test)]
mod tests;
