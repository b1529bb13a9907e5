//! The scripted agent's own HTTP client for the `fetch` and `tunnel` steps: it reaches out only as
//! the sandbox's clients do, through the proxy its environment names (`HTTP_PROXY`, `HTTPS_PROXY`),
//! so tests see by effect what an agent's pip or curl would get from stet's egress proxy.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a proxied step may wait on the proxy or the host at any one read or write.
const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// The most of an answer a step reads.
const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// What a `fetch` got: the proxy's or the host's status line and the answer's body.
pub(super) struct Fetched {
    pub(super) status: String,
    pub(super) body: Vec<u8>,
}

/// What a `tunnel` got: the proxy's status line and the bytes each way.
pub(super) struct Tunnelled {
    pub(super) status: String,
    pub(super) sent: u64,
    pub(super) received: u64,
}

/// Asks the proxy of `HTTP_PROXY` for `url` (absolute form), as a POST of `upload` bytes when not 0.
pub(super) fn fetch(url: &str, upload: u64) -> Result<Fetched, String> {
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .filter(|host| !host.is_empty())
        .ok_or_else(|| format!("{url:?} names no host"))?;
    let mut stream = proxy("HTTP_PROXY")?;
    let method = if upload == 0 { "GET" } else { "POST" };
    let head = format!(
        "{method} {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {upload}\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .map_err(|err| format!("sending the request: {err}"))?;
    send_zeros(&mut stream, upload)?;
    let answer = read_all(&mut stream)?;
    let (status, body) = split_answer(&answer);
    Ok(Fetched { status, body })
}

/// Asks the proxy of `HTTPS_PROXY` for a tunnel to `target`, sends `upload` bytes through it and
/// reads until it closes.
pub(super) fn tunnel(target: &str, upload: u64) -> Result<Tunnelled, String> {
    let mut stream = proxy("HTTPS_PROXY")?;
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .map_err(|err| format!("sending CONNECT: {err}"))?;
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => answer.push(byte[0]),
            Err(err) => return Err(format!("reading the proxy's answer: {err}")),
        }
        if answer.len() > 64 << 10 {
            return Err("the proxy's answer head is over 64 KiB".to_owned());
        }
    }
    let (status, _) = split_answer(&answer);
    if !status.contains(" 200 ") {
        let rest = read_all(&mut stream).unwrap_or_default();
        let reason = String::from_utf8_lossy(&rest).trim().to_owned();
        return Ok(Tunnelled {
            status: format!("{status} {reason}"),
            sent: 0,
            received: 0,
        });
    }
    let sent = match send_zeros(&mut stream, upload) {
        Ok(()) => upload,
        Err(_) => 0,
    };
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let received = read_all(&mut stream).map_or(0, |bytes| bytes.len() as u64);
    Ok(Tunnelled {
        status,
        sent,
        received,
    })
}

/// A connection to the proxy the variable `name` (or its lower-case twin) names, `http://host:port`.
fn proxy(name: &str) -> Result<TcpStream, String> {
    let value = std::env::var(name)
        .or_else(|_| std::env::var(name.to_ascii_lowercase()))
        .map_err(|_| format!("no {name} in the environment"))?;
    let address = value
        .strip_prefix("http://")
        .unwrap_or(&value)
        .trim_end_matches('/');
    let stream = TcpStream::connect(address)
        .map_err(|err| format!("connecting to the proxy {address}: {err}"))?;
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    Ok(stream)
}

fn send_zeros(stream: &mut TcpStream, mut bytes: u64) -> Result<(), String> {
    let chunk = [0u8; 16 << 10];
    while bytes > 0 {
        let now = bytes.min(chunk.len() as u64) as usize;
        stream
            .write_all(&chunk[..now])
            .map_err(|err| format!("sending the body: {err}"))?;
        bytes -= now as u64;
    }
    Ok(())
}

fn read_all(stream: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER_BYTES)
        .read_to_end(&mut answer)
        .map_err(|err| format!("reading the answer: {err}"))?;
    Ok(answer)
}

/// The status line and the body of an answer (everything after the head's blank line).
fn split_answer(answer: &[u8]) -> (String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map_or(answer.len(), |at| at + 4);
    let head = String::from_utf8_lossy(&answer[..end]);
    let status = head.lines().next().unwrap_or("").trim().to_owned();
    (status, answer[end..].to_vec())
}
