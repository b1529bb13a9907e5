//! What the origin guard (issue 27, docs/security.md "The origin rule") adds to a git operation over
//! HTTP: starting and stopping the guard (once per operation: listing refs, the base fetch, a push),
//! and one request with its answer passing through the guard rather than going straight to the forge,
//! for an answer the size of a ref advertisement (1 KiB) and one the size of a pack (4 MiB). Everything
//! runs on loopback against a tiny upstream in this file that answers every request with a fixed body
//! and closes the connection; the client sends `Connection: close` both ways, as a fresh connection per
//! request is the worst case for the guard (it cannot reuse its upstream connection either).
//!
//! `cargo bench --bench push` (about 40 s on 2 cores once built).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use stet_engine::git::origin_guard::OriginGuard;

/// A loopback server answering every request with `200` and `body_len` bytes, then closing.
fn upstream(body_len: usize) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| panic!("{e}"));
    let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-result\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    answer.extend(std::iter::repeat_n(b'p', body_len));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buffer = [0; 1024];
                while !head.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                let _ = stream.write_all(&answer);
            });
        }
    });
    address
}

/// `GET url` (an `http://host:port/path` URL) on a fresh connection; the number of bytes answered.
fn get(url: &str) -> usize {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}"));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or_else(|| panic!("{url}")));
    let mut stream = TcpStream::connect(authority).unwrap_or_else(|e| panic!("{e}"));
    write!(
        stream,
        "GET {path}/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    answer.len()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("origin_guard");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(4));
    group.bench_function("start_and_stop", |b| {
        b.iter(|| {
            drop(
                OriginGuard::start("http://127.0.0.1:9/octo/app.git")
                    .unwrap_or_else(|e| panic!("{e}")),
            )
        });
    });
    for (name, body_len) in [("1KiB", 1024), ("4MiB", 4 * 1024 * 1024)] {
        let address = upstream(body_len);
        let direct = format!("http://{address}/octo/app.git");
        let guard = OriginGuard::start(&direct).unwrap_or_else(|e| panic!("{e}"));
        let guarded = guard.local_url();
        group.throughput(Throughput::Bytes(body_len as u64));
        group.bench_function(format!("direct/{name}"), |b| b.iter(|| get(&direct)));
        group.bench_function(format!("guarded/{name}"), |b| b.iter(|| get(&guarded)));
        drop(guard);
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
