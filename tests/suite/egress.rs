//! Egress through the host (issue 30) end to end, against the real Docker engine: the scripted agent
//! in a `--network none` sandbox reaches servers on the test's loopback only through stet's egress
//! proxy and only where `[network] allow` says (the loopback override is on for these tests, as its
//! docs say it is for), and every connection shows in the events, the provenance and the review gate.
//! Proved by effect: what each server received, what was pushed, what the sandbox could reach
//! directly.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stet_protocol::event::{EventKind, ItemKind};
use stet_protocol::state::Phase;

use super::headless::{Project, docker_ready, files_under, run, scenario};

/// One request a loopback server received: its request line, its `Host` header, its body's size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Received {
    line: String,
    host: String,
    body: usize,
}

/// A server's accept loop on the test's loopback, each connection handed to its handler in turn
/// (read timeouts set); it stops when dropped.
struct Serving {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Serving {
    fn start(mut handle: impl FnMut(TcpStream) + Send + 'static) -> Serving {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let serving = Serving {
            address: listener.local_addr().unwrap(),
            stop: Arc::default(),
        };
        let stop = Arc::clone(&serving.stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                handle(stream);
            }
        });
        serving
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.address);
    }
}

/// A server on the test's loopback that answers every request with `body`, or (a sink) reads
/// whatever comes and counts it. It records what it received and stops when dropped.
pub(super) struct Loopback {
    serving: Serving,
    received: Arc<Mutex<Vec<Received>>>,
    /// Bytes a sink read, over every connection.
    sunk: Arc<Mutex<usize>>,
    connections: Arc<Mutex<usize>>,
}

impl Loopback {
    /// An HTTP server answering `body`.
    pub(super) fn http(body: &str) -> Loopback {
        Loopback::serve(Some(body.to_owned()))
    }

    /// A sink: reads until the client is done, answers `ok`.
    fn sink() -> Loopback {
        Loopback::serve(None)
    }

    fn serve(body: Option<String>) -> Loopback {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let sunk: Arc<Mutex<usize>> = Arc::default();
        let connections: Arc<Mutex<usize>> = Arc::default();
        let (seen, read_in, counted) = (
            Arc::clone(&received),
            Arc::clone(&sunk),
            Arc::clone(&connections),
        );
        let serving = Serving::start(move |mut stream| {
            *counted.lock().unwrap() += 1;
            match &body {
                Some(body) => {
                    if let Some(request) = read_request(&mut stream) {
                        seen.lock().unwrap().push(request);
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes());
                }
                None => {
                    let mut read = Vec::new();
                    let _ = stream.read_to_end(&mut read);
                    *read_in.lock().unwrap() += read.len();
                    let _ = stream.write_all(b"ok\n");
                }
            }
        });
        Loopback {
            serving,
            received,
            sunk,
            connections,
        }
    }

    pub(super) fn port(&self) -> u16 {
        self.serving.address.port()
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn sunk(&self) -> usize {
        *self.sunk.lock().unwrap()
    }

    pub(super) fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

/// Reads one request's head and its `Content-Length` body.
fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let header = |name: &str| {
        head.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some(Received {
        line: head.lines().next().unwrap_or_default().to_owned(),
        host: header("host"),
        body: length,
    })
}

impl Project {
    /// Adds `[network]` to the user's configuration: `allow` and any `extra` lines, the loopback
    /// override on (these servers are on loopback).
    pub(super) fn allow_egress(&self, allow: &[String], extra: &str) {
        let allow: Vec<String> = allow.iter().map(|rule| format!("{rule:?}")).collect();
        self.home.add_user_config(&format!(
            "\n[network]\nallow = [{}]\nloopback_for_tests = true\n{extra}",
            allow.join(", ")
        ));
    }
}

/// Each `egress` event: its host, port, whether it was allowed, and its hint or else its outcome.
pub(super) fn egress_events(
    events: &[stet_protocol::event::Event],
) -> Vec<(String, u16, bool, String)> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Egress {
                host,
                port,
                allowed,
                outcome,
                hint,
                ..
            } => Some((
                host.as_str().to_owned(),
                *port,
                *allowed,
                hint.as_ref()
                    .map_or(outcome.as_str(), |hint| hint.as_str())
                    .to_owned(),
            )),
            _ => None,
        })
        .collect()
}

pub(super) fn output_of(finished: &super::headless::Finished) -> String {
    finished
        .transcript()
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Output)
        .map(|(_, text)| format!("{text}\n"))
        .collect()
}

#[test]
fn the_agent_reaches_an_allowed_host_through_the_proxy_and_nothing_else() {
    reaches_an_allowed_host_and_nothing_else(None);
}

/// In copy mode the egress channel rides the relay's exec stream, not a mounted socket: the same
/// connections, the same events.
#[test]
fn in_copy_mode_the_agent_reaches_an_allowed_host_through_the_stream_and_nothing_else() {
    reaches_an_allowed_host_and_nothing_else(Some("[runtime]\nmounts = \"copy\"\n"));
}

/// A dispatch whose agent fetches from an allowed host, a forbidden one and an IP literal, tunnels
/// to an allowed sink and probes the network directly, with `config` added to the user's
/// configuration.
fn reaches_an_allowed_host_and_nothing_else(config: Option<&str>) {
    docker_ready();
    let body = format!("package-{}", uuid::Uuid::new_v4().simple());
    let index = Loopback::http(&body);
    let forbidden = Loopback::http("never");
    let sink = Loopback::sink();
    let (direct, direct_address) =
        super::support::serving_runtime().block_on(super::support::host_listener());
    direct.set_nonblocking(true).unwrap();
    let project = Project::new(&scenario(&[
        &format!(
            "fetch = {{ url = \"http://localhost:{}/simple/pkg/\", save = \"src/fetched.txt\" }}",
            index.port()
        ),
        &format!(
            "fetch = {{ url = \"http://localhost:{}/\" }}",
            forbidden.port()
        ),
        &format!("fetch = {{ url = \"http://127.0.0.1:{}/\" }}", index.port()),
        &format!(
            "tunnel = {{ target = \"localhost:{}\", upload = 1000 }}",
            sink.port()
        ),
        &format!(
            "run = [\"stet\", \"probe\", \"--environment\", \"--connect\", \"{direct_address}\", \"--connect\", \"1.1.1.1:443\"]"
        ),
        "finish = \"Fetched the package index.\"",
    ]));
    project.allow_egress(
        &[
            format!("localhost:{}", index.port()),
            format!("localhost:{}", sink.port()),
        ],
        "",
    );
    if let Some(config) = config {
        project.home.add_user_config(config);
    }
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert_eq!(finished.outcome().0, Phase::Done);

    // The allowed host got one GET (asked of the proxy in absolute form, passed on in origin form)
    // and its answer is what was pushed.
    assert_eq!(
        index.received(),
        [Received {
            line: "GET /simple/pkg/ HTTP/1.1".to_owned(),
            host: format!("localhost:{}", index.port()),
            body: 0,
        }]
    );
    let sha = finished.pushed_sha();
    let pushed = super::support::git(
        &project.remote,
        &["show", &format!("{sha}:src/fetched.txt")],
    );
    assert_eq!(pushed, body);
    // The host no rule allows and the IP literal were never connected to; the tunnel carried the
    // bytes sent through it.
    assert_eq!(forbidden.connections(), 0);
    assert_eq!(index.connections(), 1);
    assert_eq!(sink.sunk(), 1000);
    // The sandbox itself still reaches nothing: not the host's bridge address, not the internet.
    let output = output_of(&finished);
    assert!(
        direct.accept().is_err(),
        "the sandbox connected to the host directly"
    );
    let probe: serde_json::Value = output
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .expect("the probe's report");
    for outcome in probe["connect"].as_array().unwrap() {
        assert_eq!(outcome["ok"], false, "{probe:#}");
    }
    // The agent's clients were told where the proxy is, and the loopback stays direct.
    assert!(
        output.contains("HTTPS_PROXY=http://127.0.0.1:4142"),
        "{output}"
    );
    assert!(
        output.contains("NO_PROXY=127.0.0.1,localhost,::1"),
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "fetch http://localhost:{}/: HTTP/1.1 403 Forbidden",
            forbidden.port()
        )),
        "{output}"
    );

    // Every connection is in the events, the refusals with the line that would allow them.
    let egress = egress_events(&finished.events);
    assert_eq!(egress.len(), 4, "{egress:#?}");
    assert!(
        egress
            .iter()
            .any(|(host, port, allowed, _)| host == "localhost"
                && *port == index.port()
                && *allowed),
        "{egress:#?}"
    );
    assert!(
        egress.contains(&(
            "localhost".to_owned(),
            forbidden.port(),
            false,
            format!(
                "add \"localhost:{}\" to [network] allow in your config.toml",
                forbidden.port()
            )
        )),
        "{egress:#?}"
    );
    assert!(
        egress
            .iter()
            .any(|(host, _, allowed, _)| host == "127.0.0.1" && !allowed),
        "{egress:#?}"
    );
    let summary = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::EgressSummary {
                allowed,
                refused,
                uploaded,
                hosts,
                ..
            } => Some((*allowed, *refused, *uploaded, hosts.clone())),
            _ => None,
        })
        .expect("an egress_summary event");
    assert_eq!((summary.0, summary.1), (2, 2), "{summary:?}");
    assert!(summary.2 >= 1000, "{summary:?}");
    assert_eq!(summary.3.len(), 2, "{summary:?}");

    // The pull request's provenance says where the agent went (the local forge keeps it in the
    // state directory).
    let bodies: Vec<String> = files_under(&project.home.state())
        .into_iter()
        .filter(|path| path.to_string_lossy().contains("reviews"))
        .map(|path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned())
        .collect();
    assert!(
        bodies
            .iter()
            .any(|body| body.contains("| Egress | through stet's proxy: `localhost:")),
        "{bodies:#?}"
    );
    finished.torn_down_cleanly();
}

#[test]
fn uploads_past_the_review_threshold_hold_the_result_and_the_upload_bound_cuts_the_tunnel() {
    docker_ready();
    let sink = Loopback::sink();
    let project = Project::new(&scenario(&[
        &format!(
            "tunnel = {{ target = \"localhost:{}\", upload = 3000 }}",
            sink.port()
        ),
        &format!(
            "tunnel = {{ target = \"localhost:{}\", upload = 200000 }}",
            sink.port()
        ),
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Sent the notes out.\"",
    ]));
    project.allow_egress(
        &[format!("localhost:{}", sink.port())],
        "max_upload_bytes = 65536\nreview_upload_bytes = 2048\n",
    );
    let finished = run(project.headless(&["--push"]));
    // Held at review: nothing pushed, the reason names the bytes, the threshold and the host.
    assert_ne!(finished.code(), Some(0), "{finished:#?}");
    let (_, _, reason) = finished.outcome();
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains("through the egress proxy, past the review threshold of 2048")
            && reason.contains(&format!("localhost:{}", sink.port())),
        "{reason}"
    );
    let branches = super::support::git(&project.remote, &["branch", "--list"]);
    assert!(!branches.contains("stet/"), "{branches}");
    // The upload bound held: the first tunnel's 3000 bytes and at most the rest of 65536.
    assert!(sink.sunk() <= 65536, "the sink read {} bytes", sink.sunk());
    assert!(sink.sunk() >= 3000, "the sink read {} bytes", sink.sunk());
    let egress = egress_events(&finished.events);
    assert!(
        egress
            .iter()
            .any(|(_, _, _, said)| said.contains("upload bound")),
        "{egress:#?}"
    );
    finished.torn_down_cleanly();
}

#[test]
fn without_network_settings_the_agent_gets_no_proxy_and_a_repository_cannot_add_one() {
    docker_ready();
    let index = Loopback::http("never");
    let project = Project::new(&scenario(&[
        &format!("fetch = {{ url = \"http://localhost:{}/\" }}", index.port()),
        "finish = \"Tried.\"",
    ]));
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let output = output_of(&finished);
    assert!(
        output.contains("failed: no HTTP_PROXY in the environment"),
        "{output}"
    );
    assert!(egress_events(&finished.events).is_empty());
    assert_eq!(index.connections(), 0);

    // The repository's own file may not allow a host: refused, naming the file and the setting.
    std::fs::write(
        project.repo.join("stet.toml"),
        format!(
            "[harness.script]\npace = 0\n\n[network]\nallow = [\"localhost:{}\"]\n",
            index.port()
        ),
    )
    .unwrap();
    super::support::git(&project.repo, &["commit", "--quiet", "-am", "allow"]);
    let refused = run(project.headless(&[]));
    assert_eq!(refused.code(), Some(2), "{refused:#?}");
    assert!(
        refused.stderr.contains("network.allow") && refused.stderr.contains("stet.toml"),
        "{}",
        refused.stderr
    );
    assert_eq!(index.connections(), 0);
}

/// A package index on the test's loopback (PEP 503's simple API, as pip reads it) serving one
/// pure-Python wheel, `stetprobe` 1.0, whose module holds `value`. It answers each request and closes
/// the connection, and records the paths asked for.
pub(super) struct PackageIndex {
    serving: Serving,
    asked: Arc<Mutex<Vec<String>>>,
}

/// The wheel's file name.
const WHEEL: &str = "stetprobe-1.0-py3-none-any.whl";

impl PackageIndex {
    pub(super) fn serve(value: &str) -> PackageIndex {
        let wheel = wheel(value);
        let digest = sha256_hex(&wheel);
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = Arc::clone(&asked);
        let serving = Serving::start(move |mut stream| {
            let Some(request) = read_request(&mut stream) else {
                return;
            };
            let path = request
                .line
                .split(' ')
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            seen.lock().unwrap().push(path.clone());
            let (kind, body) = if path.trim_end_matches('/') == "/simple/stetprobe" {
                let page = format!(
                    "<!DOCTYPE html><html><body><a href=\"/files/{WHEEL}#sha256={digest}\">{WHEEL}</a></body></html>\n"
                );
                ("text/html", page.into_bytes())
            } else if path == format!("/files/{WHEEL}") {
                ("application/octet-stream", wheel.clone())
            } else {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                return;
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        });
        PackageIndex { serving, asked }
    }

    pub(super) fn port(&self) -> u16 {
        self.serving.address.port()
    }

    pub(super) fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A wheel (a zip with its entries stored) of the module `stetprobe`, `VALUE = value`, with the
/// metadata and the RECORD pip reads.
fn wheel(value: &str) -> Vec<u8> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let info = "stetprobe-1.0.dist-info";
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "stetprobe/__init__.py".to_owned(),
            format!("VALUE = {value:?}\n").into_bytes(),
        ),
        (
            format!("{info}/METADATA"),
            b"Metadata-Version: 2.1\nName: stetprobe\nVersion: 1.0\n".to_vec(),
        ),
        (
            format!("{info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: stet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ),
    ];
    let mut record = String::new();
    for (name, content) in &files {
        let digest =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(content));
        record.push_str(&format!("{name},sha256={digest},{}\n", content.len()));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    files.push((format!("{info}/RECORD"), record.into_bytes()));
    stored_zip(&files)
}

/// A zip archive of `files`, each stored (no compression).
fn stored_zip(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut archive = Vec::new();
    let mut central = Vec::new();
    for (name, content) in files {
        let offset = archive.len() as u32;
        let crc = crc32(content);
        let size = content.len() as u32;
        let common = |out: &mut Vec<u8>| {
            out.extend_from_slice(&20u16.to_le_bytes()); // version needed
            out.extend_from_slice(&0u16.to_le_bytes()); // flags
            out.extend_from_slice(&0u16.to_le_bytes()); // stored
            out.extend_from_slice(&0u32.to_le_bytes()); // time and date
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes()); // extra
        };
        archive.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        common(&mut archive);
        archive.extend_from_slice(name.as_bytes());
        archive.extend_from_slice(content);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        common(&mut central);
        central.extend_from_slice(&0u16.to_le_bytes()); // comment
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let start = archive.len() as u32;
    archive.extend_from_slice(&central);
    archive.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    archive.extend_from_slice(&[0; 4]); // disk numbers
    archive.extend_from_slice(&(files.len() as u16).to_le_bytes());
    archive.extend_from_slice(&(files.len() as u16).to_le_bytes());
    archive.extend_from_slice(&(central.len() as u32).to_le_bytes());
    archive.extend_from_slice(&start.to_le_bytes());
    archive.extend_from_slice(&0u16.to_le_bytes());
    archive
}

/// The CRC-32 of zip (IEEE 802.3, reflected).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn the_test_wheel_is_a_zip_with_the_known_crc() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    let wheel = wheel("x");
    assert_eq!(&wheel[..4], b"PK\x03\x04");
    assert_eq!(&wheel[wheel.len() - 22..wheel.len() - 18], b"PK\x05\x06");
}

/// The published hash of the wheel the smoke test fetches from PyPI (six 1.17.0, 11,050 bytes): pip
/// refuses any other bytes (`--require-hashes`), so what arrived is the real package.
const SIX_WHEEL_SHA256: &str = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274";

/// This host's trust store (Debian's), handed to the sandbox by the smoke test.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The one test that leaves this machine (these machines reach PyPI; the issue allows one such
/// smoke test): with `presets = ["python"]` and no loopback override, the real pip in the real
/// dispatch image downloads a real wheel from PyPI through the egress proxy, checked against its
/// published hash, trusting the host's certificate authorities (`sandbox_ca_bundle`), and a tunnel to the upload host (not in the preset) is refused. These machines'
/// resolver answers with a documentation address (fake-IP DNS, `203.0.113.80`), which the proxy
/// connects to like a public one. Where the host's resolver gives pypi.org an address the proxy
/// refuses (loopback, private…), the test says so on stderr and checks that the proxy refused it for
/// exactly that reason: the real PyPI was not reached, and the test does not pretend it was. When
/// pypi.org does not even resolve on the host, the test fails saying so, rather than blaming the
/// proxy.
#[test]
fn smoke_pip_fetches_a_real_package_from_pypi_through_the_python_preset_or_says_why_not() {
    docker_ready();
    let resolved = match "pypi.org:443".to_socket_addrs_checked() {
        Ok(address) => address,
        Err(why) => panic!(
            "this smoke test needs pypi.org to resolve on the host, and it does not ({why}); the egress proxy was not tried"
        ),
    };
    let special = stet_engine::egress::address::refused(resolved.ip());
    let fetch = format!(
        "printf 'six==1.17.0 --hash=sha256:{SIX_WHEEL_SHA256}\\n' > /tmp/requirements.txt \
         && python3 -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
         --only-binary=:all: --require-hashes -d /tmp/wheels -r /tmp/requirements.txt \
         && echo fetched: $(ls /tmp/wheels)"
    );
    let project = Project::new(&scenario(&[
        &format!("run = [\"/bin/sh\", \"-c\", {fetch:?}]"),
        "tunnel = { target = \"upload.pypi.org:443\" }",
        "finish = \"Fetched from PyPI.\"",
    ]));
    // The sandbox trusts what this host trusts, as a user behind a TLS-inspecting network
    // configures it (these machines' network re-signs every TLS connection with its own CA).
    project.home.add_user_config(&format!(
        "\n[network]\npresets = [\"python\"]\nsandbox_ca_bundle = \"{HOST_CA_BUNDLE}\"\n\n[dispatch]\nimage = \"{}\"\n",
        super::live::live_image("openhands")
    ));
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let output = output_of(&finished);
    let reached = egress_events(&finished.events);
    let pypi = reached
        .iter()
        .find(|(host, ..)| host == "pypi.org")
        .unwrap_or_else(|| panic!("pip never asked for pypi.org: {reached:#?}\n{output}"));
    match special {
        None => {
            assert!(
                output.contains("fetched: six-1.17.0-py2.py3-none-any.whl"),
                "{output}\n{reached:#?}"
            );
            assert!(pypi.2, "{reached:#?}");
            assert!(
                reached
                    .iter()
                    .any(|(host, port, allowed, _)| host == "files.pythonhosted.org"
                        && *port == 443
                        && *allowed),
                "{reached:#?}"
            );
        }
        Some(kind) => {
            eprintln!(
                "smoke: the real PyPI was not reached: this machine resolves pypi.org to {}, {kind}, which the egress proxy never connects to",
                resolved.ip()
            );
            assert!(!output.contains("fetched:"), "{output}");
            assert!(!pypi.2, "{reached:#?}");
            assert!(
                pypi.3
                    .contains(&format!("resolves to {}, {kind}", resolved.ip())),
                "{reached:#?}"
            );
        }
    }
    // The upload host is not in the preset: a package can be fetched, not published.
    assert!(
        reached
            .iter()
            .any(|(host, _, allowed, _)| host == "upload.pypi.org" && !allowed),
        "{reached:#?}"
    );
    finished.torn_down_cleanly();
}

/// `host:port` to its first address, with the resolver's error as text.
trait ToSocketAddrsChecked {
    fn to_socket_addrs_checked(&self) -> Result<SocketAddr, String>;
}

impl ToSocketAddrsChecked for &str {
    fn to_socket_addrs_checked(&self) -> Result<SocketAddr, String> {
        use std::net::ToSocketAddrs as _;
        self.to_socket_addrs()
            .map_err(|err| format!("{self} does not resolve: {err}"))?
            .next()
            .ok_or_else(|| format!("{self} resolves to no address"))
    }
}
