//! Attacks on the egress proxy as a hostile agent in the sandbox would make them, each proven by
//! effect: a loopback server that must receive no connection or no byte it was not meant to, a
//! resolver that must not be asked past the upload bound, the descriptors a flood holds counted.

use super::*;

/// A resolver that answers from a table and keeps every name it was asked, as the DNS servers
/// between stet and an attacker's zone would see them.
struct Recording {
    table: HashMap<String, Vec<IpAddr>>,
    asked: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Resolve for Recording {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        self.asked.lock().unwrap().push(host.to_owned());
        Ok(self
            .table
            .get(host)
            .into_iter()
            .flatten()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect())
    }
}

/// A proxy over `resolver`, reaching the network straight.
fn proxy_with(policy: EgressPolicy, bounds: EgressBounds, resolver: Arc<dyn Resolve>) -> Fixture {
    fixture_resolving(
        policy,
        bounds,
        resolver,
        HostNetwork::from_env(&|_| None).unwrap(),
    )
}

/// Every spelling of loopback and of the metadata service as a literal, a number or a name: none
/// reaches a loopback server, even with loopback lifted for tests and a `*.` rule in place.
#[tokio::test]
async fn no_spelling_of_an_address_reaches_a_host_the_rules_do_not_name() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&["*.example.org", &format!("pkg.test:{port}")], true),
        EgressBounds::default(),
        &[
            ("localhost", LOOPBACK),
            ("127.0.0.1.nip.io", LOOPBACK),
            ("example.org", LOOPBACK),
        ],
    );
    for host in [
        "127.0.0.1",
        "127.0.0.1.",
        "2130706433",
        "0x7f000001",
        "0X7F000001",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "0X7F.0X0.0X0.0X1",
        "127.1",
        "127.000.000.001",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:0:0:1]",
        "[::1%25lo]",
        "169.254.169.254",
        "[::ffff:a9fe:a9fe]",
        "[fd00:ec2::254]",
        "localhost",
        "LOCALHOST.",
        "127.0.0.1.nip.io",
        "example.org",
        "example.org.",
        "evilexample.org",
        "example.org.evil.test",
        "x.example.org.evil.test",
        ".example.org",
        "x..example.org",
        "x.example.org..",
        "x.example.org%2e",
        "x_y.example.org",
        "xn--pkg-test",
    ] {
        for request in [
            format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n"),
            format!("GET http://{host}:{port}/ HTTP/1.1\r\n\r\n"),
        ] {
            let (answer, _) = ask(&f.socket, &request).await;
            assert!(
                answer.starts_with("HTTP/1.1 403") || answer.starts_with("HTTP/1.1 400"),
                "{request:?}: {answer}"
            );
        }
    }
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// A rule written with a numeric spelling is refused like a request for one, and a request for
/// one never reaches the system's resolver (which would read `0X7F.1` as 127.0.0.1).
#[tokio::test]
async fn a_hexadecimal_spelling_in_upper_case_is_neither_a_rule_nor_a_host() {
    for line in ["0X7F.1", "0X7F.0X0.0X0.0X1", "a.0X1", "0Xa9.0Xfe.0Xa9.0Xfe"] {
        assert!(AllowRule::parse(line).is_err(), "{line} read as a rule");
    }
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let written = AllowRule {
        host: crate::egress::hosts::HostPattern::Exact("0x7f.0x0.0x0.0x1".into()),
        port: Some(port),
    };
    let lifted = EgressPolicy {
        rules: vec![(written, "allow".to_owned())],
        ..policy(&[], true)
    };
    let f = proxy_with(lifted, EgressBounds::default(), Arc::new(SystemResolver));
    for host in ["0X7F.0X0.0X0.0X1", "0X7f.0x0.0X0.0X1."] {
        let (answer, _) = ask(
            &f.socket,
            &format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{host}: {answer}");
    }
    f.proxy.shutdown().await;
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// An allowed name whose DNS answer carries loopback, a private or the metadata address in any
/// IPv6 wrapping gets nothing; lifting loopback for tests lifts this machine's loopback only, not
/// an address that carries 127.0.0.1 to another network (NAT64, 6to4).
#[tokio::test]
async fn a_dns_answer_in_any_wrapping_of_a_refused_address_is_refused() {
    let answers: [(&str, bool); 12] = [
        ("169.254.169.254", true),
        ("::ffff:169.254.169.254", true),
        ("64:ff9b::a9fe:a9fe", true),
        ("2002:a9fe:a9fe::1", true),
        ("fd00:ec2::254", true),
        ("10.1.2.3", true),
        ("100.64.0.1", true),
        ("::ffff:192.168.0.1", true),
        ("127.0.0.1", false),
        ("::1", false),
        ("64:ff9b::7f00:1", true),
        ("2002:7f00:1::1", true),
    ];
    for (address, lifted) in answers {
        let ip: IpAddr = address.parse().unwrap();
        let f = fixture(
            policy(&["pkg.test:8443"], lifted),
            EgressBounds::default(),
            &[("pkg.test", ip)],
        );
        let (answer, _) = ask(&f.socket, "CONNECT pkg.test:8443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{address}: {answer}");
        let record = f.proxy.report().records.pop_back().unwrap();
        assert!(
            record.outcome.contains("never connects to") && record.address.is_none(),
            "{address} (loopback lifted: {lifted}): {record:?}"
        );
    }
}

/// The forge's host stays out of reach in every spelling: upper case, a trailing dot, and a never
/// list written with a trailing dot or an IPv6 literal in another spelling.
#[tokio::test]
async fn the_forge_host_is_refused_in_every_spelling_of_it_and_of_its_entry() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        EgressPolicy {
            never: vec!["Forge.Example.org.".into(), "0:0::ffff:7f00:1".into()],
            ..policy(
                &[
                    &format!("*.example.org:{port}"),
                    &format!("127.0.0.1:{port}"),
                ],
                true,
            )
        },
        EgressBounds::default(),
        &[("forge.example.org", LOOPBACK)],
    );
    for host in [
        "forge.example.org",
        "FORGE.EXAMPLE.ORG",
        "forge.example.org.",
        "127.0.0.1",
        "[::ffff:127.0.0.1]",
    ] {
        let (mut answer, mut stream) = ask(
            &f.socket,
            &format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n"),
        )
        .await;
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        assert!(answer.contains("never reaches"), "{host}: {answer}");
    }
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// Requests two parsers could read differently never open a connection to the host.
#[tokio::test]
async fn smuggled_requests_never_reach_the_host() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("deb.test:{port}")], true),
        EgressBounds::default(),
        &[("deb.test", LOOPBACK), ("evil.test", LOOPBACK)],
    );
    let a = format!("deb.test:{port}");
    for request in [
        format!("GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nHost: evil.test:{port}\r\n\r\n"),
        format!("GET http://{a}/ HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"),
        format!("GET http://{a}/ HTTP/1.1\r\nhOsT: evil.test:{port}\r\n\r\n"),
        format!("GET http://{a}/ HTTP/1.1\r\nHost: {a}.\r\n\r\n"),
        format!("CONNECT {a} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"),
        format!("CONNECT u:p@{a} HTTP/1.1\r\n\r\n"),
        format!("CONNECT {a}@evil.test:{port} HTTP/1.1\r\n\r\n"),
        "CONNECT deb.test:0 HTTP/1.1\r\n\r\n".to_owned(),
        "CONNECT deb.test:65536 HTTP/1.1\r\n\r\n".to_owned(),
        format!("CONNECT deb.test:+{port} HTTP/1.1\r\n\r\n"),
        format!("GET http://u@{a}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://evil.test:{port}\\@{a}/ HTTP/1.1\r\n\r\n"),
        format!(
            "POST http://{a}/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        ),
        format!("POST http://{a}/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\n"),
        format!("POST http://{a}/ HTTP/1.1\r\nContent-Length: +4\r\n\r\n"),
        format!("POST http://{a}/ HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n"),
        format!("POST http://{a}/ HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n"),
        format!(
            "POST http://{a}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
        ),
        format!("GET http://{a}/ HTTP/1.1\r\nX: a\r\n Host: evil.test\r\n\r\n"),
        format!("GET http://{a}/ HTTP/1.1\r\nX: a\rHost: evil.test\r\n\r\n"),
        format!("GET http://{a}/a\nHost:evil.test\n HTTP/1.1\r\n\r\n"),
        format!("GET http://{a}/a\tHTTP/1.1\nHost:evil.test\nX: HTTP/1.1\r\n\r\n"),
        format!("GET\thttp://{a}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://{a}/ HTTP/1.1\r\nHost : {a}\r\n\r\n"),
    ] {
        let (answer, _) = ask(&f.socket, &request).await;
        assert!(
            answer.starts_with("HTTP/1.1 400") || answer.starts_with("HTTP/1.1 403"),
            "{request:?}: {answer}"
        );
    }
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// Serves one connection on `listener`: answers once it has `first_len` bytes (the request stet
/// checked) and closes its side, then keeps what else arrives until the proxy lets go; everything
/// it received comes back on the channel.
fn answering_once(listener: TcpListener, first_len: usize) -> oneshot::Receiver<Vec<u8>> {
    let (done, received) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut kept = Vec::new();
        let mut buffer = vec![0u8; 8192];
        let mut answered = false;
        loop {
            let read = stream.read(&mut buffer).await.unwrap_or(0);
            if read == 0 {
                break;
            }
            kept.extend_from_slice(&buffer[..read]);
            if !answered && kept.len() >= first_len {
                answered = true;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = stream.shutdown().await;
            }
        }
        let _ = done.send(kept);
    });
    received
}

/// A second request pipelined behind an allowed plain one (after no body, a `Content-Length` body
/// or a chunked one) is not passed on: the host gets the one request stet checked and nothing
/// that names another host.
#[tokio::test]
async fn a_request_pipelined_behind_an_allowed_plain_one_never_reaches_the_host() {
    let bodies = [
        ("GET", "", ""),
        ("POST", "Content-Length: 5\r\n", "hello"),
        (
            "POST",
            "Transfer-Encoding: chunked\r\n",
            "5;x=y\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
        ),
    ];
    for (method, framing, body) in bodies {
        let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let checked = format!(
            "{method} /up HTTP/1.1\r\nHost: deb.test:{port}\r\n{framing}Connection: close\r\n\r\n{body}"
        );
        let received = answering_once(listener, checked.len());
        let f = fixture(
            policy(&[&format!("deb.test:{port}")], true),
            EgressBounds::default(),
            &[("deb.test", LOOPBACK)],
        );
        let request = format!(
            "{method} http://deb.test:{port}/up HTTP/1.1\r\nHost: deb.test:{port}\r\n{framing}\r\n{body}GET http://evil.test/steal HTTP/1.1\r\nHost: evil.test\r\n\r\n"
        );
        let mut stream = UnixStream::connect(&f.socket).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        drop(stream);
        let received = tokio::time::timeout(Duration::from_secs(20), received)
            .await
            .expect("the proxy never let go of the host")
            .unwrap();
        let received = String::from_utf8_lossy(&received).into_owned();
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
            "{method}: {answer:?}"
        );
        assert!(
            received == checked,
            "{method} {framing:?}: the host received {received:?}"
        );
        let report = f.proxy.shutdown().await;
        assert_eq!(report.uploaded, received.len() as u64, "{method}");
    }
}

/// A plain request's head is an upload like any other: past the bound, the host gets no byte.
#[tokio::test]
async fn a_plain_head_is_charged_to_the_upload_bound() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("deb.test:{port}")], true),
        EgressBounds {
            max_upload_bytes: 256,
            ..EgressBounds::default()
        },
        &[("deb.test", LOOPBACK)],
    );
    let secret = "s".repeat(400);
    let (_, mut stream) = ask(
        &f.socket,
        &format!("GET http://deb.test:{port}/?{secret} HTTP/1.1\r\nX-Data: {secret}\r\n\r\n"),
    )
    .await;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    let report = f.proxy.shutdown().await;
    assert!(upstream.received.lock().unwrap().is_empty());
    assert_eq!(report.uploaded, 0);
}

/// The labels an agent chooses below a `*.` rule leave the host as DNS queries: they are charged
/// to the upload bound, so no more than the bound ever reaches a resolver, and what was sent
/// that way shows in the report (and so in the review hold).
#[tokio::test]
async fn names_chosen_under_a_wildcard_are_charged_to_the_upload_bound() {
    let resolver = Arc::new(Recording {
        table: HashMap::new(),
        asked: Mutex::new(Vec::new()),
    });
    let bound = 1024;
    let f = proxy_with(
        policy(&["*.exfil.example.org"], false),
        EgressBounds {
            max_upload_bytes: bound,
            ..EgressBounds::default()
        },
        Arc::clone(&resolver) as Arc<dyn Resolve>,
    );
    for round in 0..20 {
        let label = format!("{round:02}{}", "c".repeat(60));
        let name = format!("{label}.{label}.{label}.exfil.example.org");
        let (answer, _) = ask(&f.socket, &format!("CONNECT {name}:443 HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    let report = f.proxy.shutdown().await;
    let sent: usize = resolver.asked.lock().unwrap().iter().map(String::len).sum();
    assert!(
        sent as u64 <= bound,
        "{sent} bytes of chosen names reached the resolver past a {bound}-byte upload bound"
    );
    assert_eq!(report.uploaded, sent as u64);
}

/// A head trickled a byte at a time is cut at the head's time bound, whatever each byte's pace:
/// the host is never connected.
#[tokio::test]
async fn a_head_trickled_byte_by_byte_is_cut_at_the_time_bound() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds {
            head_time: Duration::from_millis(300),
            ..EgressBounds::default()
        },
        &[("pkg.test", LOOPBACK)],
    );
    let head = format!(
        "CONNECT pkg.test:{port} HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(40)
    );
    let mut stream = UnixStream::connect(&f.socket).await.unwrap();
    let mut pace = tokio::time::interval(Duration::from_millis(25));
    let mut sent = 0;
    for byte in head.bytes() {
        pace.tick().await;
        if stream.write_all(&[byte]).await.is_err() {
            break;
        }
        sent += 1;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    assert!(sent < head.len(), "the whole trickled head was taken");
    let records = f.proxy.shutdown().await.records;
    assert!(
        records[0]
            .outcome
            .contains("no request head within the time bound"),
        "{records:?}"
    );
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// A head that never ends is refused once past its bound; the host is never connected.
#[tokio::test]
async fn a_head_past_its_size_bound_is_refused_before_any_host() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds::default(),
        &[("pkg.test", LOOPBACK)],
    );
    let mut stream = UnixStream::connect(&f.socket).await.unwrap();
    stream
        .write_all(format!("CONNECT pkg.test:{port} HTTP/1.1\r\n").as_bytes())
        .await
        .unwrap();
    let line = format!("X-Pad: {}\r\n", "p".repeat(1000));
    for _ in 0..64 {
        if stream.write_all(line.as_bytes()).await.is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("larger than"), "{answer}");
    f.proxy.shutdown().await;
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 0);
}

/// The descriptors this process holds.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Raises this test process's soft limit on open files to its hard limit when it is under `wanted`
/// (an ordinary account's soft limit is often 1,024), with `prlimit` on our own pid: the test's
/// own clients need the descriptors, not the proxy. Fails naming the limit when even the hard limit
/// is under `wanted`.
fn allow_open_files(wanted: u64) {
    let limit = |which: usize| -> u64 {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .unwrap();
        let value = line.split_whitespace().nth(3 + which).unwrap();
        value.parse().unwrap_or(u64::MAX)
    };
    if limit(0) >= wanted {
        return;
    }
    let hard = limit(1);
    assert!(
        hard >= wanted,
        "this test opens {wanted} connections and the hard limit on open files is {hard}"
    );
    let raised = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={hard}:{hard}"))
        .status()
        .unwrap();
    assert!(raised.success(), "prlimit could not raise the soft limit");
    assert!(limit(0) >= wanted, "the soft limit stayed at {}", limit(0));
}

/// 2,000 idle connections to one dispatch's proxy hold at most its connection bound of stet's
/// descriptors (the rest wait in the kernel's backlog or are turned away there), while another
/// dispatch's proxy still serves a tunnel end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_leave_another_dispatchs_proxy_serving() {
    allow_open_files(4096);
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let bounds = EgressBounds {
        head_time: Duration::from_secs(60),
        ..EgressBounds::default()
    };
    let flooded = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        bounds,
        &[("pkg.test", LOOPBACK)],
    );
    let serving = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds::default(),
        &[("pkg.test", LOOPBACK)],
    );
    let before = open_descriptors();
    let mut idle = Vec::new();
    for _ in 0..2000 {
        if let Ok(stream) = UnixStream::connect(&flooded.socket).await {
            idle.push(stream);
        }
    }
    let (answer, mut stream) = ask(
        &serving.socket,
        &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream.write_all(b"still served").await.unwrap();
    let mut echoed = [0u8; 12];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"still served");
    let held = open_descriptors().saturating_sub(before);
    let proxy_held = held.saturating_sub(idle.len());
    assert!(
        proxy_held <= bounds.max_connections + 64,
        "{} idle clients made stet hold {proxy_held} descriptors of its own",
        idle.len()
    );
    drop(stream);
    drop(idle);
    let report = flooded.proxy.shutdown().await;
    assert_eq!(report.allowed, 0);
    serving.proxy.shutdown().await;
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 1);
}

/// Each proxy's socket is private to stet's account and gone once it stops or is dropped, so no
/// later dispatch, and nothing else on the machine, finds one to connect to.
#[tokio::test]
async fn the_socket_is_private_and_gone_after_shutdown_and_after_a_drop() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture(policy(&["pkg.test"], false), EgressBounds::default(), &[]);
    let mode = std::fs::metadata(&f.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let socket = f.socket.clone();
    let _open = UnixStream::connect(&socket).await.unwrap();
    f.proxy.shutdown().await;
    assert!(socket.symlink_metadata().is_err(), "the socket stayed");
    assert!(UnixStream::connect(&socket).await.is_err());
    let dropped = fixture(policy(&["pkg.test"], false), EgressBounds::default(), &[]);
    let socket = dropped.socket.clone();
    drop(dropped.proxy);
    assert!(
        socket.symlink_metadata().is_err(),
        "the socket stayed after a drop"
    );
}

/// A tunnel kept open past the connection's time bound is cut, and what it carried before the cut
/// still counts: the upload total (and so the review hold) cannot be evaded by outlasting the
/// bound.
#[tokio::test]
async fn bytes_sent_through_a_connection_cut_at_its_time_bound_still_count() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds {
            max_connection_time: Duration::from_millis(500),
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
    let sent = vec![b'u'; 4096];
    stream.write_all(&sent).await.unwrap();
    let mut echoed = vec![0u8; sent.len()];
    stream.read_exact(&mut echoed).await.unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    let report = f.proxy.shutdown().await;
    let record = &report.records[0];
    assert!(record.outcome.contains("time bound"), "{record:?}");
    assert_eq!(upstream.received.lock().unwrap().len(), sent.len());
    assert_eq!((record.up, record.down), (4096, 4096), "{record:?}");
    assert_eq!(report.uploaded, 4096);
}

/// A host the agent writes reaches the audit only as stet read it: a refused target holding
/// markdown, an escape sequence or a token-like string is never among the hosts reached (which
/// the pull request's provenance lists), is counted as refused, and no record holds a control
/// character.
#[tokio::test]
async fn a_hostile_host_name_is_never_listed_as_reached_nor_recorded_raw() {
    let f = fixture(
        policy(&["*.example.org"], false),
        EgressBounds::default(),
        &[],
    );
    // A token-shaped label made at test time, so no such value is written in the repository.
    let token = format!(
        "ghp_{}.example.org:443",
        crate::credential::random_token(36).unwrap()
    );
    let targets = [
        "![x](//evil.test/p.png):443",
        "[a](javascript:alert(1)):443",
        "a\u{1b}[31m.example.org:443",
        "a\u{7}.example.org:443",
        token.as_str(),
        "<img/src=x>.example.org:443",
    ];
    for target in targets {
        let (answer, _) = ask(&f.socket, &format!("CONNECT {target} HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target:?}: {answer}");
    }
    let report = f.proxy.shutdown().await;
    assert_eq!(report.hosts_reached(), Vec::<String>::new());
    assert_eq!((report.allowed, report.refused), (0, targets.len() as u64));
    for record in &report.records {
        assert!(!record.host.chars().any(char::is_control), "{record:?}");
    }
}

/// Red team (redpump): sixteen tunnels at once, each half-closing after an upload, share the one
/// upload bound: the host receives no byte past it, and every byte it received is in the upload
/// total the review hold reads.
#[tokio::test]
async fn tunnels_half_closing_at_once_share_one_upload_bound() {
    let upstream = Upstream::start(None).await;
    let port = upstream.port;
    let bound = 10_000;
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds {
            max_upload_bytes: bound,
            ..EgressBounds::default()
        },
        &[("pkg.test", LOOPBACK)],
    );
    let mut tunnels = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let socket = f.socket.clone();
        tunnels.spawn(async move {
            let (answer, mut stream) = ask(
                &socket,
                &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
            )
            .await;
            if !answer.starts_with("HTTP/1.1 200") {
                return;
            }
            let _ = stream.write_all(&[b'u'; 3000]).await;
            let _ = stream.shutdown().await;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
    }
    while tunnels.join_next().await.is_some() {}
    let report = f.proxy.shutdown().await;
    let received = upstream.received.lock().unwrap().len() as u64;
    assert!(received > 0, "{report:?}");
    assert!(
        received <= bound,
        "the host received {received} bytes past {bound}"
    );
    assert!(
        report.uploaded >= received,
        "the host received {received} bytes, the review hold reads {}",
        report.uploaded
    );
}

/// Red team (redpump): a host that never reads leaves the agent's bytes in the proxy's pipe and the
/// kernel's buffers; the connection is still cut at the idle bound, and what was taken from the
/// agent is counted.
#[tokio::test]
async fn a_host_that_never_reads_is_cut_at_the_idle_bound() {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (held, mut holding) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Held open, never read.
            let _ = held.send(stream).await;
        }
    });
    let f = fixture(
        policy(&[&format!("pkg.test:{port}")], true),
        EgressBounds {
            idle: Duration::from_millis(300),
            ..EgressBounds::default()
        },
        &[("pkg.test", LOOPBACK)],
    );
    let (answer, stream) = ask(
        &f.socket,
        &format!("CONNECT pkg.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (mut reading, mut writing) = stream.into_split();
    let writer = tokio::spawn(async move {
        let chunk = vec![b'u'; 64 << 10];
        let mut sent = 0u64;
        while writing.write_all(&chunk).await.is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    });
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), reading.read_to_end(&mut rest))
        .await
        .expect("the connection outlived its idle bound")
        .ok();
    let _host_side = holding.recv().await;
    let report = f.proxy.shutdown().await;
    writer.abort();
    let record = &report.records[0];
    assert!(record.outcome.contains("stopped reading"), "{record:?}");
    assert!(
        record.up <= EgressBounds::default().max_upload_bytes,
        "{record:?}"
    );
}
