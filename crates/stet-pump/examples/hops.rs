use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

const BYTES: usize = 200 << 20;

fn rt(threads: Option<usize>) -> tokio::runtime::Runtime {
    match threads {
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
            .unwrap(),
    }
}

fn main() {
    let sndbuf: usize = std::env::var("SNDBUF")
        .ok()
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let servers = rt(None);
    let proxy = rt(Some(2));
    let relay = rt(None);
    let client = rt(None);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("p.sock");
    let server = servers.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            let chunk = vec![7u8; 256 << 10];
            while let Ok((mut s, _)) = l.accept().await {
                let chunk = chunk.clone();
                tokio::spawn(async move {
                    let mut left = BYTES;
                    while left > 0 {
                        let n = left.min(chunk.len());
                        s.write_all(&chunk[..n]).await.unwrap();
                        left -= n;
                    }
                });
            }
        });
        a
    });
    // proxy: unix listener -> tcp server, pump
    let ul = proxy.block_on(async { UnixListener::bind(&sock).unwrap() });
    proxy.spawn(async move {
        while let Ok((c, _)) = ul.accept().await {
            tokio::spawn(async move {
                if sndbuf > 0 {
                    rustix::net::sockopt::set_socket_send_buffer_size(&c, sndbuf).unwrap();
                }
                let up = TcpStream::connect(server).await.unwrap();
                let _ = stet_pump::both_ways(&c, &up).await;
            });
        }
    });
    let relay_addr = relay.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let sock = sock.clone();
        tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                let sock = sock.clone();
                tokio::spawn(async move {
                    let up = UnixStream::connect(&sock).await.unwrap();
                    if sndbuf > 0 {
                        rustix::net::sockopt::set_socket_send_buffer_size(&up, sndbuf).unwrap();
                    }
                    let _ = stet_pump::both_ways(&c, &up).await;
                });
            }
        });
        a
    });
    client.block_on(async {
        for turn in 0..6 {
            for (name, addr) in [("direct", server), ("relay+proxy", relay_addr)] {
                let start = Instant::now();
                let mut s = TcpStream::connect(addr).await.unwrap();
                let mut buf = vec![0u8; 64 << 10];
                let mut got = 0;
                while got < BYTES {
                    let n = s.read(&mut buf).await.unwrap();
                    assert!(n > 0);
                    got += n;
                }
                if turn > 0 {
                    println!(
                        "{name:12} {:.0} MiB/s",
                        200.0 / start.elapsed().as_secs_f64()
                    );
                }
            }
        }
    });
}
