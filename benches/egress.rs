//! Egress proxy overhead (issue 30, "Measure"): how fast a download passes through a dispatch's
//! egress proxy, and through the in-sandbox relay in front of it, against reading it straight from
//! the server; the time a connection gains on its way through; and what idle tunnels cost the host.
//!
//! Three paths to loopback servers on this machine:
//!
//! * direct: client → server (TCP);
//! * proxy: client → the proxy's unix socket, `CONNECT name:port` → server;
//! * relay + proxy: client → `stet_sandbox::relay::relay` on an ephemeral 127.0.0.1 port → the
//!   proxy's socket → server: the production path minus the container boundary.
//!
//! The proxy resolves the bench's host name from a static table (to 127.0.0.1), its policy allows
//! `name:port` for each server with the loopback override on, and it dials with the host's network
//! as `HostNetwork::from_env` sees it with no proxy variables.
//!
//! * Throughput: a server that sends `STET_BENCH_MIB` MiB (default 200) on each connection and
//!   closes; the client reads it all in 64 KiB reads. One download per path per turn, the paths
//!   taking turns (the first path rotating), `STET_BENCH_TURNS` turns (default 7) after one warm-up
//!   download each. Each path's CPU time per MiB is read per side (each side's threads, from
//!   `/proc/self/task/*/schedstat`): on a loaded 2-core machine the throughput ratio is decided by
//!   what each path costs the CPU. The same again from a server that sends at
//!   `STET_BENCH_PACED_RATE` MiB/s (default 100, 0 to skip; `STET_BENCH_PACED_MIB` MiB, default
//!   50), as a registry across the internet would.
//! * Latency: connect, `CONNECT` (not on the direct path) and the first byte of a server that writes
//!   one byte on accepting; `STET_BENCH_CONNECTIONS` connections per path (default 3000), in rounds
//!   of 100 after 100 of warm-up, each closed before the next.
//! * Host cost: `STET_BENCH_TUNNELS` (default 100) idle connections held at once, direct, as
//!   tunnels through a proxy and (at most the relay's bound, 64) through relay + proxy, with the process's resident memory (`VmRSS`) and open descriptors
//!   before and while held; then `STET_BENCH_IDLE` (default 2000) idle `CONNECT`s opened at one proxy
//!   at its default bounds while a second proxy serves downloads, timed against the same downloads
//!   before the idle load and after it is gone.
//!
//! Each side runs on a runtime and thread of its own, as it would in its own process: the client
//! on a current-thread runtime (the agent's), the relay on one (`stet sandbox-idle`'s), the proxies
//! on two workers (the engine's), the servers on one. Every download is checked whole, and each
//! proxy's report is checked at its shutdown: no refusal, the bytes it counted.
//!
//! `cargo bench --bench egress`: about 20 s on 2 cores once built. `STET_BENCH_TURNS=2
//! STET_BENCH_MIB=20 STET_BENCH_CONNECTIONS=300 STET_BENCH_IDLE=300` is a quick check.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stet_engine::egress::EgressPolicy;
use stet_engine::egress::hosts::AllowRule;
use stet_engine::egress::proxy::{EgressBounds, EgressProxy, EgressReport, HostNetwork, Resolve};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{oneshot, watch};

#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/side.rs"]
mod side;
use cpu::Cpu;
use side::Side;

/// The host name the bench's resolver answers (with 127.0.0.1).
const NAME: &str = "bench.egress.test";
/// The client's read buffer, the proxy's and the relay's own size.
const READ_BUFFER: usize = 64 << 10;
/// What the download server writes per call.
const WRITE_CHUNK: usize = 256 << 10;
/// Latency connections per path in one round; the paths take turns round by round.
const ROUND: usize = 100;
/// Warm-up connections per path before the timed ones.
const WARM_UP: usize = 100;
/// Downloads of the second proxy per phase of the idle-load measurement.
const LOADED_DOWNLOADS: usize = 3;

fn main() {
    let settings = Settings {
        turns: setting("STET_BENCH_TURNS", 7).max(1),
        bytes: setting("STET_BENCH_MIB", 200).max(1) << 20,
        connections: setting("STET_BENCH_CONNECTIONS", 3000).max(1),
        tunnels: setting("STET_BENCH_TUNNELS", 100).max(1),
        idle: setting("STET_BENCH_IDLE", 2000),
        paced_rate: setting("STET_BENCH_PACED_RATE", 100),
        paced_bytes: setting("STET_BENCH_PACED_MIB", 50).max(1) << 20,
    };
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let servers = Side::new("bench-servers", None);
    let proxies = Side::new("bench-proxies", Some(2));
    let relay = Side::new("bench-relay", None);
    client.block_on(bench(&servers, &proxies, &relay, &settings));
    drop(client);
    relay.stop();
    proxies.stop();
    servers.stop();
}

struct Settings {
    turns: usize,
    bytes: usize,
    connections: usize,
    tunnels: usize,
    idle: usize,
    /// MiB/s the paced server sends at (0: no paced measurement).
    paced_rate: usize,
    paced_bytes: usize,
}

fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
        Err(_) => default,
    }
}

async fn bench(servers: &Side, proxies: &Side, relay_side: &Side, settings: &Settings) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bytes = settings.bytes;
    let download = servers.run(serve_download(bytes, 0)).await;
    let paced = servers
        .run(serve_download(settings.paced_bytes, settings.paced_rate))
        .await;
    let byte = servers.run(serve_byte()).await;
    let (idle, held) = servers.run(serve_idle()).await;
    let ports = [download.port(), byte.port(), idle.port(), paced.port()];
    let raised = EgressBounds {
        max_download_bytes: u64::MAX,
        ..EgressBounds::default()
    };
    let main_proxy = start_proxy(proxies, dir.path().join("main.sock"), &ports, raised).await;
    let (relay, stop_relay) = start_relay(relay_side, main_proxy.socket.clone(), byte).await;
    let paths = [
        ("direct", Via::Direct),
        ("proxy (unix socket)", Via::Proxy(main_proxy.socket.clone())),
        ("relay + proxy", Via::Relay(relay)),
    ];
    println!(
        "egress proxy: {} turns of a {} MiB download per path, {} connections per path, \
         {} idle tunnels, {} idle CONNECTs",
        settings.turns,
        bytes >> 20,
        settings.connections,
        settings.tunnels,
        settings.idle
    );

    let results = throughput(&paths, download, bytes, settings.turns).await;
    print_throughput("", bytes, &results);
    if settings.paced_rate > 0 {
        let results = throughput(&paths, paced, settings.paced_bytes, settings.turns).await;
        print_throughput(
            &format!(" from a server sending at {} MiB/s", settings.paced_rate),
            settings.paced_bytes,
            &results,
        );
    }

    let results = latency(&paths, byte, settings.connections).await;
    print_latency(&results);

    tunnel_cost(
        proxies,
        relay_side,
        dir.path(),
        &ports,
        (idle, byte),
        &held,
        settings.tunnels,
    )
    .await;
    idle_load(proxies, dir.path(), &ports, &held, settings).await;

    let _ = stop_relay.send(());
    let report = main_proxy.shutdown(proxies).await;
    // Each timed and warm-up connection of the two proxied paths, and the relay's start-up probe.
    let paced_downloads = if settings.paced_rate > 0 {
        settings.turns + 1
    } else {
        0
    };
    let tunnels = 2 * (settings.turns + 1 + paced_downloads + WARM_UP + settings.connections) + 1;
    println!(
        "\nmain proxy: {} allowed, {} refused, {} MiB down",
        report.allowed,
        report.refused,
        report.downloaded >> 20
    );
    assert_eq!(report.refused, 0, "{:?}", report.last_refused);
    assert_eq!(report.allowed, tunnels as u64);
    let expected = 2
        * ((settings.turns + 1) * bytes
            + paced_downloads * settings.paced_bytes
            + WARM_UP
            + settings.connections)
        + 1;
    assert_eq!(report.downloaded, expected as u64);
}

/// Where a client connects, and how it reaches the server.
#[derive(Debug, Clone)]
enum Via {
    Direct,
    Proxy(PathBuf),
    Relay(SocketAddr),
}

/// A connection to `server` by `via`, through the tunnel when there is one; returns the stream and
/// the server's bytes that came with the proxy's answer.
async fn open(via: &Via, server: SocketAddr) -> (Box<dyn Stream>, usize) {
    match via {
        Via::Direct => {
            let stream = TcpStream::connect(server)
                .await
                .unwrap_or_else(|e| panic!("{server}: {e}"));
            stream.set_nodelay(true).unwrap_or_else(|e| panic!("{e}"));
            (Box::new(stream), 0)
        }
        Via::Proxy(socket) => {
            let mut stream = UnixStream::connect(socket)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", socket.display()));
            let early = tunnel(&mut stream, server.port()).await;
            (Box::new(stream), early)
        }
        Via::Relay(relay) => {
            let mut stream = TcpStream::connect(relay)
                .await
                .unwrap_or_else(|e| panic!("{relay}: {e}"));
            stream.set_nodelay(true).unwrap_or_else(|e| panic!("{e}"));
            let early = tunnel(&mut stream, server.port()).await;
            (Box::new(stream), early)
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// Asks for a tunnel to the bench's host on `port` and reads the proxy's answer, which must be
/// 200; returns how many bytes past the answer's head were read with it.
async fn tunnel<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, port: u16) -> usize {
    let ask = format!("CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n");
    stream
        .write_all(ask.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    loop {
        let read = stream
            .read(&mut chunk)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            read > 0,
            "the proxy closed: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&chunk[..read]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(
                answer.starts_with(b"HTTP/1.1 200"),
                "the proxy refused: {:?}",
                String::from_utf8_lossy(&answer)
            );
            return answer.len() - (end + 4);
        }
    }
}

/// Serves `bytes` bytes on each connection, then closes it: as fast as the client takes them, or
/// at `rate` MiB/s when it is not 0 (a chunk at a time, each sent once its time has come), as a
/// registry across the internet would.
async fn serve_download(bytes: usize, rate: usize) -> SocketAddr {
    let listener = TcpListener::bind(loopback())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let chunk: Arc<[u8]> = (0..WRITE_CHUNK).map(|i| (i % 251) as u8).collect();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let chunk = Arc::clone(&chunk);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let start = tokio::time::Instant::now();
                let mut sent = 0;
                while sent < bytes {
                    if rate > 0 {
                        let due = sent as f64 / (rate << 20) as f64;
                        tokio::time::sleep_until(start + Duration::from_secs_f64(due)).await;
                    }
                    let size = (bytes - sent).min(chunk.len());
                    if stream.write_all(&chunk[..size]).await.is_err() {
                        return;
                    }
                    sent += size;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}

/// Writes one byte on each connection as soon as it accepts it, then waits for the client to close.
async fn serve_byte() -> SocketAddr {
    let listener = TcpListener::bind(loopback())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                if stream.write_all(b"x").await.is_err() {
                    return;
                }
                let mut sink = [0u8; 64];
                while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {}
            });
        }
    });
    address
}

/// Holds each connection, sending nothing, until the client closes it; counts those it holds.
async fn serve_idle() -> (SocketAddr, watch::Receiver<usize>) {
    let listener = TcpListener::bind(loopback())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (count, held) = watch::channel(0usize);
    let count = Arc::new(count);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.send_modify(|held| *held += 1);
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut sink = [0u8; 64];
                while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {}
                drop(stream);
                count.send_modify(|held| *held -= 1);
            });
        }
    });
    (address, held)
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The bench's resolver: its one name is 127.0.0.1.
struct Table;

#[async_trait::async_trait]
impl Resolve for Table {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(if host == NAME {
            vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]
        } else {
            Vec::new()
        })
    }
}

/// A proxy running on the proxies' side, and its socket.
struct Proxy {
    proxy: EgressProxy,
    socket: PathBuf,
}

impl Proxy {
    /// Shuts the proxy down on its side; returns its report.
    async fn shutdown(self, side: &Side) -> EgressReport {
        side.run(self.proxy.shutdown()).await
    }
}

/// Starts a proxy on `side` allowing the bench's host on each of `ports`, loopback lifted.
async fn start_proxy(side: &Side, socket: PathBuf, ports: &[u16], bounds: EgressBounds) -> Proxy {
    let rules = ports
        .iter()
        .map(|port| {
            let rule =
                AllowRule::parse(&format!("{NAME}:{port}")).unwrap_or_else(|e| panic!("{e}"));
            (rule, "allow".to_owned())
        })
        .collect();
    let policy = EgressPolicy {
        rules,
        loopback_for_tests: true,
        ..EgressPolicy::default()
    };
    let dialer = HostNetwork::from_env(&|_| None).unwrap_or_else(|e| panic!("{e}"));
    let path = socket.clone();
    let proxy = side
        .run(async move {
            let (proxy, mut records) =
                EgressProxy::start(&path, policy, bounds, Arc::new(Table), Arc::new(dialer))
                    .unwrap_or_else(|e| panic!("{e}"));
            // The records are in the report at shutdown; the live copies are only drained.
            tokio::spawn(async move { while records.recv().await.is_some() {} });
            proxy
        })
        .await;
    Proxy { proxy, socket }
}

/// Starts a relay to `socket` on `side`, on a free loopback port, and waits until a tunnel through
/// it to `probe` (the one-byte server) answers; returns the port's address and what stops the relay.
async fn start_relay(
    side: &Side,
    socket: PathBuf,
    probe: SocketAddr,
) -> (SocketAddr, oneshot::Sender<()>) {
    // `relay` binds the address itself: find a free port, then let it go.
    let address = std::net::TcpListener::bind(loopback())
        .and_then(|listener| listener.local_addr())
        .unwrap_or_else(|e| panic!("{e}"));
    let (stop, stopped) = oneshot::channel::<()>();
    let (bound, listening) = oneshot::channel::<()>();
    side.handle.spawn(async move {
        let _ = bound.send(());
        stet_sandbox::relay::relay(address, socket, async {
            let _ = stopped.await;
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
    let _ = listening.await;
    // The relay binds in its first poll, right after the signal; a refused connect is retried
    // on the next turn of this runtime.
    for _ in 0..10_000 {
        if let Ok(mut stream) = TcpStream::connect(address).await {
            if tunnel(&mut stream, probe.port()).await == 0 {
                let mut byte = [0u8; 1];
                stream
                    .read_exact(&mut byte)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            return (address, stop);
        }
        tokio::task::yield_now().await;
    }
    panic!("the relay on {address} did not start");
}

/// Reads one download by `via` to its end; returns the bytes read.
async fn read_download(via: &Via, server: SocketAddr) -> usize {
    let (mut stream, mut read) = open(via, server).await;
    let mut buffer = vec![0u8; READ_BUFFER];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) => return read,
            Ok(got) => read += got,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Seconds per download of one path, and the CPU time each side spent on them.
struct Downloads {
    name: &'static str,
    seconds: Vec<f64>,
    cpu: Cpu,
}

/// One warm-up download per path, then `turns` turns of one download each.
async fn throughput(
    paths: &[(&'static str, Via)],
    server: SocketAddr,
    bytes: usize,
    turns: usize,
) -> Vec<Downloads> {
    for (name, via) in paths {
        assert_eq!(read_download(via, server).await, bytes, "{name}: short");
    }
    let mut results: Vec<Downloads> = paths
        .iter()
        .map(|(name, _)| Downloads {
            name,
            seconds: Vec::with_capacity(turns),
            cpu: Cpu::default(),
        })
        .collect();
    for turn in 0..turns {
        for index in (0..paths.len()).map(|i| (i + turn) % paths.len()) {
            let (name, via) = &paths[index];
            let (start, before) = (Instant::now(), Cpu::now());
            let read = read_download(via, server).await;
            results[index].seconds.push(start.elapsed().as_secs_f64());
            results[index].cpu.add(Cpu::now().since(before));
            assert_eq!(read, bytes, "{name}: a download came back short");
        }
    }
    results
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

fn median(values: &[f64]) -> f64 {
    let sorted = sorted(values);
    sorted[sorted.len() / 2]
}

fn print_throughput(what: &str, bytes: usize, results: &[Downloads]) {
    let mib = bytes as f64 / f64::from(1 << 20);
    println!(
        "\nthroughput: a {} MiB download{what}, {} turns per path",
        bytes >> 20,
        results[0].seconds.len()
    );
    println!(
        "  {:<22} {:>12} {:>12} {:>12} {:>10}",
        "path", "median MiB/s", "min MiB/s", "max MiB/s", "vs direct"
    );
    let direct = mib / median(&results[0].seconds);
    for result in results {
        let rates = sorted(&result.seconds.iter().map(|s| mib / s).collect::<Vec<_>>());
        let rate = mib / median(&result.seconds);
        println!(
            "  {:<22} {:>12.0} {:>12.0} {:>12.0} {:>8.1} %",
            result.name,
            rate,
            rates[0],
            rates[rates.len() - 1],
            100.0 * rate / direct,
        );
    }
    println!(
        "  CPU time per MiB, all turns (ms; each side's threads, from /proc/self/task/*/schedstat)"
    );
    println!(
        "  {:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "path", "client", "relay", "proxy", "server", "total", "vs direct"
    );
    let all = mib * results[0].seconds.len() as f64;
    let per_mib = |nanos: u64| nanos as f64 / 1e6 / all;
    let direct = per_mib(results[0].cpu.total());
    for result in results {
        let cpu = result.cpu;
        println!(
            "  {:<22} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.2}×",
            result.name,
            per_mib(cpu.client),
            per_mib(cpu.relay),
            per_mib(cpu.proxy),
            per_mib(cpu.server),
            per_mib(cpu.total()),
            per_mib(cpu.total()) / direct,
        );
    }
}

/// Per-connection latencies of one path, in nanoseconds.
struct Latencies {
    name: &'static str,
    nanos: Vec<u64>,
}

/// Nearest-rank percentile.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Connect, tunnel and the server's first byte, once.
async fn first_byte(via: &Via, server: SocketAddr) -> u64 {
    let start = Instant::now();
    let (mut stream, early) = open(via, server).await;
    if early == 0 {
        let mut byte = [0u8; 1];
        stream
            .read_exact(&mut byte)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let nanos = start.elapsed().as_nanos() as u64;
    drop(stream);
    nanos
}

/// Times `connections` connections per path, in rounds, after a warm-up.
async fn latency(
    paths: &[(&'static str, Via)],
    server: SocketAddr,
    connections: usize,
) -> Vec<Latencies> {
    for (_, via) in paths {
        for _ in 0..WARM_UP {
            first_byte(via, server).await;
        }
    }
    let mut results: Vec<Latencies> = paths
        .iter()
        .map(|(name, _)| Latencies {
            name,
            nanos: Vec::with_capacity(connections),
        })
        .collect();
    let mut done = 0;
    while done < connections {
        let round = ROUND.min(connections - done);
        for ((_, via), result) in paths.iter().zip(&mut results) {
            for _ in 0..round {
                result.nanos.push(first_byte(via, server).await);
            }
        }
        done += round;
    }
    results
}

fn micros(nanos: u64) -> String {
    format!("{:.1} µs", nanos as f64 / 1000.0)
}

fn print_latency(results: &[Latencies]) {
    println!(
        "\nlatency per connection (connect, CONNECT, first byte), {} per path",
        results[0].nanos.len()
    );
    println!(
        "  {:<22} {:>10} {:>10} {:>10} {:>11} {:>11}",
        "path", "p50", "p99", "mean", "added p50", "added p99"
    );
    let summary = |nanos: &[u64]| {
        let mut sorted = nanos.to_vec();
        sorted.sort_unstable();
        let mean = sorted.iter().sum::<u64>() / sorted.len() as u64;
        (percentile(&sorted, 50.0), percentile(&sorted, 99.0), mean)
    };
    let (direct_p50, direct_p99, _) = summary(&results[0].nanos);
    for (index, result) in results.iter().enumerate() {
        let (p50, p99, mean) = summary(&result.nanos);
        let added = |value: u64, base: u64| {
            if index == 0 {
                String::new()
            } else {
                format!("{:+.1} µs", (value as f64 - base as f64) / 1000.0)
            }
        };
        println!(
            "  {:<22} {:>10} {:>10} {:>10} {:>11} {:>11}",
            result.name,
            micros(p50),
            micros(p99),
            micros(mean),
            added(p50, direct_p50),
            added(p99, direct_p99),
        );
    }
}

/// The process's resident memory in KiB and its open descriptors.
fn host() -> (u64, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_else(|e| panic!("{e}"));
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/self/status"));
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap_or_else(|e| panic!("{e}"))
        .count();
    (rss, fds)
}

/// Waits until the idle server holds `count` connections.
async fn held_reaches(held: &watch::Receiver<usize>, count: usize) {
    let mut held = held.clone();
    let _ = held.wait_for(|now| *now == count).await;
}

fn print_cost(name: &str, count: usize, before: (u64, usize), during: (u64, usize)) {
    let rss = during.0 as f64 - before.0 as f64;
    let fds = during.1 as f64 - before.1 as f64;
    println!(
        "  {:<22} {:>8} {:>9} KiB {:>9} KiB {:>+9.0} KiB {:>6} {:>6} {:>+6.0} {:>8.1} KiB {:>6.2}",
        name,
        count,
        before.0,
        during.0,
        rss,
        before.1,
        during.1,
        fds,
        rss / count as f64,
        fds / count as f64,
    );
}

fn cost_header() {
    println!(
        "  {:<22} {:>8} {:>13} {:>13} {:>13} {:>6} {:>6} {:>6} {:>12} {:>6}",
        "held",
        "count",
        "RSS before",
        "RSS held",
        "RSS added",
        "fds",
        "held",
        "added",
        "RSS/conn",
        "fd/conn"
    );
}

/// `count` idle connections held at once, straight to the idle server and then as tunnels through
/// a proxy of their own; the process's memory and descriptors before and while held.
async fn tunnel_cost(
    proxies: &Side,
    relay_side: &Side,
    dir: &Path,
    ports: &[u16],
    (idle, probe): (SocketAddr, SocketAddr),
    held: &watch::Receiver<usize>,
    count: usize,
) {
    println!(
        "\nhost cost of {count} idle connections held at once (the whole process: client, proxy, server)"
    );
    cost_header();
    let before = host();
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        streams.push(open(&Via::Direct, idle).await.0);
    }
    held_reaches(held, count).await;
    print_cost("direct", count, before, host());
    drop(streams);
    held_reaches(held, 0).await;

    let bounds = EgressBounds {
        max_connections: count.max(EgressBounds::default().max_connections),
        ..EgressBounds::default()
    };
    let proxy = start_proxy(proxies, dir.join("tunnels.sock"), ports, bounds).await;
    let via = Via::Proxy(proxy.socket.clone());
    let before = host();
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        streams.push(open(&via, idle).await.0);
    }
    held_reaches(held, count).await;
    print_cost("proxy tunnels", count, before, host());
    drop(streams);
    let report = proxy.shutdown(proxies).await;
    held_reaches(held, 0).await;
    let after = host();
    println!(
        "  after closing and the proxy's shutdown: RSS {} KiB, {} fds; the proxy recorded {} allowed, {} refused",
        after.0, after.1, report.allowed, report.refused
    );
    assert_eq!(report.refused, 0);
    assert_eq!(report.allowed, count as u64);

    // The same through the in-sandbox relay in front of a proxy: the relay's two descriptors per
    // connection (and, in this process, the client's) come on top.
    let proxy = start_proxy(proxies, dir.join("relayed.sock"), ports, bounds).await;
    let (relay, stop_relay) = start_relay(relay_side, proxy.socket.clone(), probe).await;
    let via = Via::Relay(relay);
    // The relay pipes at most its own bound at once; more would wait in its backlog.
    let relayed = count.min(stet_sandbox::relay::MAX_CONNECTIONS);
    let before = host();
    let mut streams = Vec::with_capacity(relayed);
    for _ in 0..relayed {
        streams.push(open(&via, idle).await.0);
    }
    held_reaches(held, relayed).await;
    print_cost("relay + proxy tunnels", relayed, before, host());
    drop(streams);
    let _ = stop_relay.send(());
    let report = proxy.shutdown(proxies).await;
    held_reaches(held, 0).await;
    assert_eq!(report.refused, 0);
    // The relay's start-up probe is one more.
    assert_eq!(report.allowed, relayed as u64 + 1);
}

/// `settings.idle` idle `CONNECT`s at one proxy at its default bounds while a second proxy serves
/// downloads, timed against the same downloads before and after the load.
async fn idle_load(
    proxies: &Side,
    dir: &Path,
    ports: &[u16],
    held: &watch::Receiver<usize>,
    settings: &Settings,
) {
    let (download, idle) = (ports[0], ports[2]);
    let download = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), download);
    let idle = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), idle);
    let bounds = EgressBounds::default();
    let flooded = start_proxy(proxies, dir.join("flooded.sock"), ports, bounds).await;
    let raised = EgressBounds {
        max_download_bytes: u64::MAX,
        ..EgressBounds::default()
    };
    let other = start_proxy(proxies, dir.join("other.sock"), ports, raised).await;
    let other_via = Via::Proxy(other.socket.clone());
    let bytes = settings.bytes;
    let timed = |phase: &'static str| {
        let via = other_via.clone();
        async move {
            let mut seconds = Vec::with_capacity(LOADED_DOWNLOADS);
            for _ in 0..LOADED_DOWNLOADS {
                let start = Instant::now();
                let read = read_download(&via, download).await;
                seconds.push(start.elapsed().as_secs_f64());
                assert_eq!(read, bytes, "{phase}: a download came back short");
            }
            seconds
        }
    };
    assert_eq!(read_download(&other_via, download).await, bytes);
    let quiet = timed("before").await;

    let ask = format!(
        "CONNECT {NAME}:{} HTTP/1.1\r\nHost: {NAME}:{}\r\n\r\n",
        idle.port(),
        idle.port()
    );
    let before = host();
    let mut streams = Vec::with_capacity(settings.idle);
    let mut refused = 0usize;
    for _ in 0..settings.idle {
        match UnixStream::connect(&flooded.socket).await {
            Ok(mut stream) => {
                // Queued connections take the request into their buffer before they are accepted.
                stream
                    .write_all(ask.as_bytes())
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                streams.push(stream);
            }
            Err(_) => refused += 1,
        }
    }
    let tunnels = streams.len().min(bounds.max_connections);
    held_reaches(held, tunnels).await;
    let during = host();
    let loaded = timed("under load").await;
    let after_loaded = host();
    drop(streams);
    let flooded_report = flooded.shutdown(proxies).await;
    held_reaches(held, 0).await;
    let after = host();
    let recovered = timed("after").await;
    let other_report = other.shutdown(proxies).await;

    let connected = settings.idle - refused;
    println!(
        "\n{} idle CONNECTs at one proxy (bounds: {} connections) while a second proxy serves {} MiB downloads",
        settings.idle,
        bounds.max_connections,
        bytes >> 20
    );
    println!(
        "  connected {connected} (tunnelled {tunnels}, queued in the socket's backlog {}), refused by the kernel (backlog full) {refused}",
        connected - tunnels
    );
    cost_header();
    print_cost("idle CONNECTs", connected.max(1), before, during);
    println!(
        "  after the downloads under load: RSS {} KiB, {} fds; after closing and shutdown: RSS {} KiB, {} fds",
        after_loaded.0, after_loaded.1, after.0, after.1
    );
    println!(
        "  flooded proxy recorded {} allowed, {} refused",
        flooded_report.allowed, flooded_report.refused
    );
    println!("  second proxy's download ({LOADED_DOWNLOADS} each): median, min, max");
    let mib = bytes as f64 / f64::from(1 << 20);
    let base = median(&quiet);
    for (phase, seconds) in [
        ("before the load", &quiet),
        ("under the load", &loaded),
        ("after it", &recovered),
    ] {
        let sorted = sorted(seconds);
        println!(
            "  {:<22} {:>8.1} ms {:>8.1} ms {:>8.1} ms {:>8.0} MiB/s {:>7.2}×",
            phase,
            median(seconds) * 1000.0,
            sorted[0] * 1000.0,
            sorted[sorted.len() - 1] * 1000.0,
            mib / median(seconds),
            median(seconds) / base,
        );
    }
    assert_eq!(other_report.refused, 0);
    assert_eq!(
        other_report.downloaded,
        ((3 * LOADED_DOWNLOADS + 1) * bytes) as u64
    );
}
