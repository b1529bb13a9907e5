use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::egress::hosts::AllowRule;

/// A resolver answering from a table, as a hostile DNS server would answer.
struct Table(HashMap<String, Vec<IpAddr>>);

#[async_trait::async_trait]
impl Resolve for Table {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(self
            .0
            .get(host)
            .map(|addresses| {
                addresses
                    .iter()
                    .map(|ip| SocketAddr::new(*ip, port))
                    .collect()
            })
            .unwrap_or_default())
    }
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A loopback server that counts its connections and echoes what it reads, or records it.
struct Upstream {
    port: u16,
    accepted: Arc<AtomicU64>,
    received: Arc<Mutex<Vec<u8>>>,
}

impl Upstream {
    async fn start(answer: Option<&'static [u8]>) -> Upstream {
        let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicU64::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (counting, keeping) = (Arc::clone(&accepted), Arc::clone(&received));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                let keeping = Arc::clone(&keeping);
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 8192];
                    loop {
                        let Ok(read) = stream.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        keeping.lock().unwrap().extend_from_slice(&buffer[..read]);
                        match answer {
                            Some(answer) => {
                                let _ = stream.write_all(answer).await;
                                return;
                            }
                            None => {
                                if stream.write_all(&buffer[..read]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Upstream {
            port,
            accepted,
            received,
        }
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    proxy: EgressProxy,
    socket: PathBuf,
}

fn policy(lines: &[&str], loopback_for_tests: bool) -> EgressPolicy {
    EgressPolicy {
        rules: lines
            .iter()
            .map(|line| (AllowRule::parse(line).unwrap(), "allow".to_owned()))
            .collect(),
        deny: Vec::new(),
        allow_http: true,
        never: vec!["forge.example.org".into()],
        loopback_for_tests,
    }
}

fn fixture(policy: EgressPolicy, bounds: EgressBounds, names: &[(&str, IpAddr)]) -> Fixture {
    fixture_dialing(
        policy,
        bounds,
        names,
        HostNetwork::from_env(&|_| None).unwrap(),
    )
}

fn fixture_dialing(
    policy: EgressPolicy,
    bounds: EgressBounds,
    names: &[(&str, IpAddr)],
    host: HostNetwork,
) -> Fixture {
    let table = Table(
        names
            .iter()
            .map(|(name, ip)| ((*name).to_owned(), vec![*ip]))
            .collect(),
    );
    fixture_resolving(policy, bounds, Arc::new(table), host)
}

/// A proxy resolving with `resolver` and reaching the network as `host` says, on a socket of its own.
fn fixture_resolving(
    policy: EgressPolicy,
    bounds: EgressBounds,
    resolver: Arc<dyn Resolve>,
    host: HostNetwork,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let (proxy, _live) =
        EgressProxy::start(&socket, policy, bounds, resolver, Arc::new(host)).unwrap();
    Fixture {
        _dir: dir,
        proxy,
        socket,
    }
}

/// Sends `request` and reads until the proxy's answer head has ended; returns it and the stream.
async fn ask(socket: &Path, request: &str) -> (String, UnixStream) {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while head::end_of_head(&answer).is_none() {
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        answer.push(byte[0]);
    }
    (String::from_utf8_lossy(&answer).into_owned(), stream)
}

#[tokio::test]
async fn an_allowed_tunnel_carries_bytes_both_ways_and_is_recorded() {
    let upstream = Upstream::start(None).await;
    let f = fixture(
        policy(&[&format!("pkg.test:{}", upstream.port)], true),
        EgressBounds::default(),
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, mut stream) = ask(
        &f.socket,
        &format!(
            "CONNECT pkg.test:{} HTTP/1.1\r\nHost: pkg.test:{}\r\n\r\n",
            upstream.port, upstream.port
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping");
    drop(stream);
    let report = f.proxy.shutdown().await;
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 1);
    let record = &report.records[0];
    assert_eq!((report.allowed, report.refused), (1, 0));
    assert_eq!((record.up, record.down), (4, 4));
    assert_eq!(
        record.address,
        Some(SocketAddr::new(LOOPBACK, upstream.port))
    );
    assert!(
        record
            .outcome
            .starts_with(&format!("allowed by pkg.test:{} (allow)", upstream.port)),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_host_not_allowed_is_refused_with_the_line_to_add_and_never_connected() {
    let upstream = Upstream::start(None).await;
    let f = fixture(
        policy(&["pypi.org"], true),
        EgressBounds::default(),
        &[("paste.test", LOOPBACK)],
    );
    let (answer, _) = ask(
        &f.socket,
        &format!("CONNECT paste.test:{} HTTP/1.1\r\n\r\n", upstream.port),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let report = f.proxy.report();
    assert_eq!((report.allowed, report.refused), (0, 1));
    let (host, hint) = report.last_refused.unwrap();
    assert_eq!(host, "paste.test");
    assert_eq!(
        hint.as_deref(),
        Some(
            format!(
                "add \"paste.test:{}\" to [network] allow in your config.toml",
                upstream.port
            )
            .as_str()
        )
    );
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// DNS rebinding: an allowed name that resolves to loopback, a private or the metadata address gets
/// nothing unless loopback was lifted for tests, and then loopback only.
#[tokio::test]
async fn an_allowed_name_resolving_to_a_private_address_is_refused() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    for (address, lifted) in [
        (LOOPBACK, false),
        ("10.0.0.1".parse().unwrap(), true),
        ("169.254.169.254".parse().unwrap(), true),
        ("::ffff:127.0.0.1".parse().unwrap(), false),
    ] {
        let f = fixture(
            policy(&[&format!("pkg.test:{port}")], lifted),
            EgressBounds::default(),
            &[("pkg.test", address)],
        );
        let (answer, _) = ask(
            &f.socket,
            &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{address}: {answer}");
        let record = f.proxy.report().records.pop_back().unwrap();
        assert!(record.outcome.contains("never connects to"), "{record:?}");
    }
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_forge_host_and_ip_literals_are_refused_even_when_listed() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("forge.example.org:{port}")], true),
        EgressBounds::default(),
        &[("forge.example.org", LOOPBACK)],
    );
    for request in [
        format!("CONNECT forge.example.org:{port} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
        format!("CONNECT [::1]:{port} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 2130706433:{port} HTTP/1.1\r\n\r\n"),
        format!("CONNECT u@forge.example.org:{port} HTTP/1.1\r\n\r\n"),
        format!("GET http://x.test:{port}/ HTTP/1.1\r\nHost: forge.example.org:{port}\r\n\r\n"),
    ] {
        let (answer, _) = ask(&f.socket, &request).await;
        assert!(
            answer.starts_with("HTTP/1.1 403") || answer.starts_with("HTTP/1.1 400"),
            "{request:?}: {answer}"
        );
    }
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn uploads_past_the_dispatch_bound_end_the_connection_and_the_host_gets_no_more() {
    let upstream = Upstream::start(None).await;
    let bounds = EgressBounds {
        max_upload_bytes: 4096,
        ..EgressBounds::default()
    };
    let f = fixture(
        policy(&[&format!("pkg.test:{}", upstream.port)], true),
        bounds,
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, mut stream) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{} HTTP/1.1\r\n\r\n", upstream.port),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let chunk = vec![b'x'; 1024];
    for _ in 0..64 {
        if stream.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    f.proxy.shutdown().await;
    let received = upstream.received.lock().unwrap().len();
    assert!(
        received <= 4096,
        "the host received {received} bytes past a 4,096-byte bound"
    );
}

#[tokio::test]
async fn a_plain_request_reaches_the_host_in_origin_form_with_its_body() {
    let upstream = Upstream::start(Some(
        b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
    ))
    .await;
    let f = fixture(
        policy(&[&format!("deb.test:{}", upstream.port)], true),
        EgressBounds::default(),
        &[("deb.test", LOOPBACK)],
    );
    let port = upstream.port;
    let (answer, _) = ask(
        &f.socket,
        &format!("POST http://deb.test:{port}/upload?x=1 HTTP/1.1\r\nHost: deb.test:{port}\r\nProxy-Authorization: Basic eA==\r\nContent-Length: 5\r\n\r\nhello"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    let received = String::from_utf8(upstream.received.lock().unwrap().clone()).unwrap();
    assert_eq!(
        received,
        format!(
            "POST /upload?x=1 HTTP/1.1\r\nHost: deb.test:{port}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        )
    );
}

#[tokio::test]
async fn a_client_that_never_sends_its_head_is_let_go_and_frees_its_slot() {
    let upstream = Upstream::start(None).await;
    let bounds = EgressBounds {
        max_connections: 1,
        head_time: Duration::from_millis(200),
        ..EgressBounds::default()
    };
    let f = fixture(
        policy(&[&format!("pkg.test:{}", upstream.port)], true),
        bounds,
        &[("pkg.test", LOOPBACK)],
    );
    let mut silent = UnixStream::connect(&f.socket).await.unwrap();
    silent.write_all(b"CONNECT pkg.te").await.unwrap();
    let (answer, _) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{} HTTP/1.1\r\n\r\n", upstream.port),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut closed = Vec::new();
    silent.read_to_end(&mut closed).await.unwrap();
    assert!(closed.is_empty(), "{closed:?}");
    let outcomes: Vec<String> = f
        .proxy
        .report()
        .records
        .into_iter()
        .map(|record| record.outcome)
        .collect();
    assert!(outcomes[0].contains("no request head"), "{outcomes:?}");
}

/// The machine's own proxy, as `HTTPS_PROXY` names it: answers each CONNECT with 200, records its
/// target, and relays to that target.
async fn host_proxy() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while head::end_of_head(&head).is_none() {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                seen.lock().unwrap().push(line.clone());
                let target = line.split(' ').nth(1).unwrap_or("").to_owned();
                let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (port, asked)
}

/// Behind a corporate proxy: the egress proxy checks the name and its address itself, then asks
/// the machine's proxy for a tunnel to that very address (so the machine's proxy resolves nothing);
/// a host `NO_PROXY` names is reached straight.
#[tokio::test]
async fn the_machines_proxy_carries_the_checked_address_and_no_proxy_is_honoured() {
    let upstream = Upstream::start(None).await;
    let (proxy_port, asked) = host_proxy().await;
    let env = move |no_proxy: &'static str| {
        move |name: &str| match name {
            "HTTPS_PROXY" => Some(format!("http://127.0.0.1:{proxy_port}").into()),
            "NO_PROXY" => Some(no_proxy.into()),
            _ => None,
        }
    };
    let f = fixture_dialing(
        policy(&[&format!("pkg.test:{}", upstream.port)], true),
        EgressBounds::default(),
        &[("pkg.test", LOOPBACK)],
        HostNetwork::from_env(&env("other.test")).unwrap(),
    );
    let connect = format!("CONNECT pkg.test:{} HTTP/1.1\r\n\r\n", upstream.port);
    let (answer, mut stream) = ask(&f.socket, &connect).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping");
    assert_eq!(
        *asked.lock().unwrap(),
        [format!("CONNECT 127.0.0.1:{} HTTP/1.1", upstream.port)]
    );
    drop(stream);
    f.proxy.shutdown().await;

    let bypassed = fixture_dialing(
        policy(&[&format!("pkg.test:{}", upstream.port)], true),
        EgressBounds::default(),
        &[("pkg.test", LOOPBACK)],
        HostNetwork::from_env(&env("pkg.test")).unwrap(),
    );
    let (answer, mut stream) = ask(&bypassed.socket, &connect).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream.write_all(b"pong").await.unwrap();
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"pong");
    assert_eq!(
        asked.lock().unwrap().len(),
        1,
        "NO_PROXY went through the proxy"
    );
}

mod redteam;

/// A slow reader that keeps reading is never cut for idleness, however large the chunk the proxy
/// took from the host at once: the idle bound runs from the last byte passed on, not from the
/// chunk's start. The download arrives whole, counted once.
#[tokio::test]
async fn a_slow_reader_that_keeps_reading_is_not_cut_as_idle() {
    const SIZE: usize = 3 << 20;
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let body: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
        let _ = stream.write_all(&body).await;
    });
    let idle = Duration::from_millis(500);
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds {
            idle,
            ..EgressBounds::default()
        },
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, mut stream) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let started = Instant::now();
    let mut received = Vec::with_capacity(SIZE);
    let mut chunk = vec![0u8; 8 << 10];
    loop {
        let read = stream.read(&mut chunk).await.unwrap();
        if read == 0 {
            break;
        }
        received.extend_from_slice(&chunk[..read]);
        // At most 0.8 MiB/s: seconds to read it all, never idle for long.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started.elapsed() > 2 * idle, "the reader was not slow");
    assert_eq!(received.len(), SIZE);
    assert!(
        received
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8)
    );
    let report = f.proxy.shutdown().await;
    let record = &report.records[0];
    assert_eq!(record.down, SIZE as u64, "{record:?}");
    assert!(!record.outcome.contains("nothing moved"), "{record:?}");
}

/// A loopback server that takes one connection, writes `send` bytes on it and reads it to its end;
/// reports how many bytes it read.
async fn counting_upstream(send: usize) -> (u16, oneshot::Receiver<usize>) {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (report, count) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = stream.split();
        let sending = async {
            let _ = write.write_all(&vec![b'd'; send]).await;
        };
        let mut got = Vec::new();
        let reading = async {
            let _ = read.read_to_end(&mut got).await;
        };
        tokio::join!(sending, reading);
        let _ = report.send(got.len());
    });
    (port, count)
}

/// With a pipe far larger than the bounds, an upload is still cut at the byte: the host receives
/// exactly the bound and the record counts exactly that.
#[tokio::test]
async fn an_upload_bound_is_reached_at_the_byte_through_a_large_pipe() {
    const BOUND: u64 = 4097;
    let (port, received) = counting_upstream(0).await;
    let bounds = EgressBounds {
        max_upload_bytes: BOUND,
        ..EgressBounds::default()
    };
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        bounds,
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, mut stream) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream.write_all(&vec![b'u'; 64 << 10]).await.unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    assert_eq!(received.await.unwrap() as u64, BOUND);
    let report = f.proxy.shutdown().await;
    let record = &report.records[0];
    assert_eq!(record.up, BOUND, "{record:?}");
    assert!(record.outcome.contains("upload bound"), "{record:?}");
}

/// The same for a download: the agent reads exactly the bound, then the end of the tunnel.
#[tokio::test]
async fn a_download_bound_is_reached_at_the_byte_through_a_large_pipe() {
    const BOUND: u64 = 10_001;
    let (port, _received) = counting_upstream(1 << 20).await;
    let bounds = EgressBounds {
        max_download_bytes: BOUND,
        ..EgressBounds::default()
    };
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        bounds,
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, mut stream) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got).await;
    assert_eq!(got.len() as u64, BOUND);
    assert!(got.iter().all(|byte| *byte == b'd'));
    let report = f.proxy.shutdown().await;
    let record = &report.records[0];
    assert_eq!(record.down, BOUND, "{record:?}");
    assert!(record.outcome.contains("download bound"), "{record:?}");
}
