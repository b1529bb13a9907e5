//! A hostile agent's own HTTP client, for the model-channel red team (tests/suite/redteam_model.rs):
//! built with the suite and shipped in a scratch repository that the scripted agent runs inside a
//! real sandbox. It writes each request file of a directory, byte for byte, to the model relay (the
//! host and port of `$STET_MODEL_URL`), then two bodies past the gateway's cap that it makes up
//! itself (too big to ship), and prints one line a request: `RESULT <name> <statuses> <reply>`, the
//! statuses of every response read back and the start of the first one's body.
//!
//! `raw_model_http <dir> <canary>`: the canary goes into the made-up bodies.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::time::Duration;

/// The gateway's cap on a request body; the made-up bodies pass it by a little.
const CAP: usize = 32 * 1024 * 1024;

/// How much of a reply's body a line shows.
const SHOWN: usize = 700;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("raw_model_http: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(canary)) = (args.next(), args.next()) else {
        return Err("usage: raw_model_http <dir> <canary>".to_owned());
    };
    let url = std::env::var("STET_MODEL_URL").map_err(|_| "no STET_MODEL_URL".to_owned())?;
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|err| format!("{dir}: {err}"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let request =
            std::fs::read(Path::new(&dir).join(&name)).map_err(|err| format!("{name}: {err}"))?;
        report(&name, exchange(&authority, request, Vec::new()));
    }

    let start = format!(
        "{{\"model\":\"redteam-model\",\"messages\":[{{\"role\":\"user\",\"content\":\"{canary} "
    );
    // Declared past the cap: the head and the start of the body only.
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{start}",
        CAP + 1
    );
    report(
        "zz-oversize-length",
        exchange(&authority, head.into_bytes(), Vec::new()),
    );
    // Chunked, with no length: the body itself runs past the cap.
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let mut chunks = Vec::with_capacity(CAP + (1 << 20));
    let mut piece = start.into_bytes();
    piece.resize(64 * 1024, b'a');
    while chunks.len() <= CAP + 65 * 1024 {
        chunks.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunks.extend_from_slice(&piece);
        chunks.extend_from_slice(b"\r\n");
        piece.fill(b'a');
    }
    chunks.extend_from_slice(b"0\r\n\r\n");
    report(
        "zz-oversize-chunked",
        exchange(&authority, head.into_bytes(), chunks),
    );
    Ok(())
}

/// Writes `head` then `rest` (from a thread of its own, so that a reply that comes before the
/// whole body is read as it comes) and reads until the gateway closes.
fn exchange(authority: &str, head: Vec<u8>, rest: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect(authority).map_err(|err| format!("connect: {err}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|err| err.to_string())?;
    let mut writer = stream.try_clone().map_err(|err| err.to_string())?;
    let sending = std::thread::spawn(move || {
        // The gateway may answer and close before all of it is written: that is its right.
        if writer.write_all(&head).is_ok() && writer.write_all(&rest).is_ok() {
            let _ = writer.flush();
        }
    });
    let mut reply = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => reply.extend_from_slice(&buffer[..read]),
            Err(err) if reply.is_empty() => return Err(format!("read: {}", err.kind())),
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    let _ = sending.join();
    Ok(reply)
}

/// Prints the line the test reads.
fn report(name: &str, reply: Result<Vec<u8>, String>) {
    let reply = match reply {
        Ok(reply) => reply,
        Err(err) => {
            println!("RESULT {name} none {err}");
            return;
        }
    };
    let text = String::from_utf8_lossy(&reply);
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.")
        .filter_map(|(at, _)| text.get(at + 9..at + 12))
        .filter(|code| code.bytes().all(|byte| byte.is_ascii_digit()))
        .collect();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .replace(['\r', '\n'], " ");
    let shown: String = body.chars().take(SHOWN).collect();
    let statuses = if statuses.is_empty() {
        "none".to_owned()
    } else {
        statuses.join(",")
    };
    println!("RESULT {name} {statuses} {shown}");
}
