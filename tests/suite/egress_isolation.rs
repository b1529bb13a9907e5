//! One dispatch's egress proxy is its own (issue 30), against the real Docker engine: from inside one
//! sandbox, another running dispatch's proxy socket cannot be reached by its path on the host, no
//! socket the sandbox can find leads anywhere but to its own proxy, and the host the other dispatch
//! allows is never connected to. The other dispatch's stet is then SIGKILLed: its proxy socket
//! outlives it only until the sweep, which removes it with its directory.

use std::os::unix::fs::FileTypeExt as _;

use stet_engine::dispatch::socket_dir::SocketPlace;
use stet_protocol::channel::Channel;
use stet_protocol::event::EventKind;

use super::egress::{Loopback, egress_events, output_of};
use super::headless::{Project, Watched, docker_ready, forever, run, run_text, scenario};

/// Run in the sandbox as `python3 -c SCRIPT <host socket path> <port>`: asks the path it is given,
/// then every unix socket it finds under /run, /tmp and the home directory, for a tunnel to
/// `localhost:<port>`, printing one line each.
const ASK_EVERY_SOCKET: &str = r#"import os, socket, stat, sys
path, port = sys.argv[1], sys.argv[2]
def ask(where):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    try:
        s.connect(where)
    except OSError as e:
        return "unreachable: " + type(e).__name__
    s.sendall(("CONNECT localhost:%s HTTP/1.1\r\nHost: localhost:%s\r\n\r\n" % (port, port)).encode())
    try:
        answer = s.recv(200).decode(errors="replace")
    except OSError as e:
        return "no answer: " + type(e).__name__
    return "answered: " + (answer.splitlines() or [""])[0]
print("theirs", ask(path))
for top in ["/run", "/tmp", os.environ.get("HOME", "/home")]:
    for root, dirs, files in os.walk(top):
        for name in files:
            full = os.path.join(root, name)
            try:
                sock = stat.S_ISSOCK(os.lstat(full).st_mode)
            except OSError:
                continue
            if sock:
                print("seen", full, ask(full))
"#;

#[test]
fn another_dispatchs_proxy_socket_is_out_of_reach_and_gone_once_its_killed_stet_is_swept() {
    docker_ready();
    let own = Loopback::http("own");
    let theirs = Loopback::http("theirs");

    // The other dispatch: egress on, allowing only its own host, its agent at work for good.
    let other = Project::new(&forever());
    other.allow_egress(&[format!("localhost:{}", theirs.port())], "");
    let mut watched = Watched::start(other.headless(&["--timeout", "3m"]));
    let at = watched.until("the agent at work", |event| {
        matches!(event.kind, EventKind::Transcript(_))
    });
    let sockets = SocketPlace::for_installation(&other.home.state());
    let their_dir = sockets.dispatch_dir(at.dispatch);
    let their_socket = their_dir.join(Channel::egress().socket_name());
    assert!(
        std::fs::symlink_metadata(&their_socket)
            .unwrap()
            .file_type()
            .is_socket(),
        "{}",
        their_socket.display()
    );

    // This dispatch: allowed its own host; its agent asks the other's socket by its host path, every
    // socket it can find, and its own proxy, for the other's host.
    let script = format!("{ASK_EVERY_SOCKET:?}");
    let project = Project::new(&scenario(&[
        &format!(
            "run = [\"python3\", \"-c\", {script}, {:?}, \"{}\"]",
            their_socket.display().to_string(),
            theirs.port()
        ),
        &format!("tunnel = {{ target = \"localhost:{}\" }}", theirs.port()),
        &format!("fetch = {{ url = \"http://localhost:{}/\" }}", own.port()),
        "finish = \"Tried every socket.\"",
    ]));
    project.allow_egress(&[format!("localhost:{}", own.port())], "");
    // The real dispatch image, which has Python.
    project.home.add_user_config(&format!(
        "\n[dispatch]\nimage = \"{}\"\n",
        super::openhands_live::live_image()
    ));
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let output = output_of(&finished);

    // The other's socket is not there to connect to, inside this sandbox.
    assert!(
        output.contains("theirs unreachable: FileNotFoundError"),
        "{output}"
    );
    // Every socket the sandbox sees is in its own socket directory, and its proxy among them refused
    // the other's host; none opened a tunnel.
    let seen: Vec<&str> = output
        .lines()
        .filter(|line| line.starts_with("seen "))
        .collect();
    assert!(
        seen.iter()
            .any(|line| line.starts_with("seen /run/stet/egress.sock answered: HTTP/1.1 403")),
        "{output}"
    );
    for line in &seen {
        assert!(line.starts_with("seen /run/stet/"), "{output}");
        assert!(!line.contains(" 200 "), "{output}");
    }
    // By effect: the other dispatch's host was never connected to; this one's own host was.
    assert_eq!(theirs.connections(), 0);
    assert_eq!(own.connections(), 1);
    let egress = egress_events(&finished.events);
    let refused = egress
        .iter()
        .filter(|(host, port, allowed, _)| {
            host == "localhost" && *port == theirs.port() && !allowed
        })
        .count();
    assert_eq!(refused, 2, "the python ask and the tunnel: {egress:#?}");
    finished.torn_down_cleanly();

    // The other stet, SIGKILLed while its proxy serves: nothing of its removed the socket, and the
    // sweep removes it with the dispatch's socket directory.
    let dispatch = at.dispatch;
    let status = watched.kill();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let mut sweep = other.home.stet();
    sweep.arg("sweep");
    let swept = run_text(sweep);
    assert_eq!(swept.code(), Some(0), "{swept:#?}");
    assert!(
        swept
            .stdout
            .lines()
            .any(|line| line == format!("removed {}", their_dir.display())),
        "{}",
        swept.stdout
    );
    assert!(
        std::fs::symlink_metadata(&their_socket).is_err(),
        "{} is left",
        their_socket.display()
    );
    super::headless::assert_nothing_left(&other.home, dispatch);
}
