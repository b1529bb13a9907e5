//! What the network tests stand on, made at test time: a private certificate authority and a server
//! certificate it signed (by the openssl command line), an HTTPS server on loopback that records the
//! `Authorization` header of each request, and a CONNECT proxy on loopback that records every byte
//! it carries in either direction.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A certificate authority made for one test, and a server certificate for `localhost` and
/// `127.0.0.1` it signed.
pub(crate) struct Pki {
    /// The CA's certificate, PEM.
    pub(crate) ca_pem: std::path::PathBuf,
    server_pem: std::path::PathBuf,
    server_key: std::path::PathBuf,
}

impl Pki {
    /// A fresh CA named `name` and its server certificate, in `dir`.
    pub(crate) fn new(dir: &Path, name: &str) -> Pki {
        let path = |file: &str| dir.join(format!("{name}-{file}"));
        let ext = path("ext.cnf");
        std::fs::write(
            &ext,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let arg = |p: &std::path::PathBuf| p.to_str().unwrap().to_owned();
        let (ca_key, ca_pem, key, csr, pem) = (
            path("ca.key"),
            path("ca.pem"),
            path("server.key"),
            path("server.csr"),
            path("server.pem"),
        );
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &arg(&ca_key),
            "-out",
            &arg(&ca_pem),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name} test CA"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &arg(&key),
            "-out",
            &arg(&csr),
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &arg(&csr),
            "-CA",
            &arg(&ca_pem),
            "-CAkey",
            &arg(&ca_key),
            "-CAcreateserial",
            "-out",
            &arg(&pem),
            "-days",
            "2",
            "-extfile",
            &arg(&ext),
        ]);
        Pki {
            ca_pem,
            server_pem: pem,
            server_key: key,
        }
    }

    /// The CA's certificate, as a trust anchor.
    pub(crate) fn ca(&self) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(&self.ca_pem)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl").args(args).output().unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An HTTPS server on loopback with `pki`'s server certificate: answers `{"ok":true}` to every
/// request and records each request's `Authorization` header.
pub(crate) struct TlsServer {
    pub(crate) address: SocketAddr,
    pub(crate) authorizations: Arc<Mutex<Vec<String>>>,
}

impl TlsServer {
    pub(crate) async fn start(pki: &Pki) -> TlsServer {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.server_pem)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&pki.server_key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&authorizations);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |request: Request<Incoming>| {
                        let seen = Arc::clone(&seen);
                        async move {
                            let authorization = request
                                .headers()
                                .get("authorization")
                                .map(|value| value.to_str().unwrap().to_owned())
                                .unwrap_or_default();
                            seen.lock().unwrap().push(authorization);
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from_static(b"{\"ok\":true}"),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsServer {
            address,
            authorizations,
        }
    }
}

/// A CONNECT proxy on loopback: records the head of each request and every byte it then carries,
/// both ways; answers 403 to every request when made `refusing`.
pub(crate) struct ConnectProxy {
    pub(crate) address: SocketAddr,
    /// Each request's head, as received.
    pub(crate) heads: Arc<Mutex<Vec<String>>>,
    /// Every byte carried through the tunnels, both ways.
    pub(crate) carried: Arc<Mutex<Vec<u8>>>,
}

impl ConnectProxy {
    pub(crate) async fn start(refusing: bool) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let carried = Arc::new(Mutex::new(Vec::new()));
        let (seen_heads, seen_bytes) = (Arc::clone(&heads), Arc::clone(&carried));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let heads = Arc::clone(&seen_heads);
                let carried = Arc::clone(&seen_bytes);
                tokio::spawn(tunnel(client, refusing, heads, carried));
            }
        });
        ConnectProxy {
            address,
            heads,
            carried,
        }
    }

    /// The URL to set `HTTPS_PROXY` to.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

async fn tunnel(
    mut client: TcpStream,
    refusing: bool,
    heads: Arc<Mutex<Vec<String>>>,
    carried: Arc<Mutex<Vec<u8>>>,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read_exact(&mut byte).await.is_err() {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    heads.lock().unwrap().push(head.clone());
    let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
    if refusing || !head.starts_with("CONNECT ") {
        let _ = client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(&target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .unwrap();
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let upstream = relay(&mut client_read, &mut server_write, Arc::clone(&carried));
    let downstream = relay(&mut server_read, &mut client_write, carried);
    tokio::join!(upstream, downstream);
}

/// Copies `from` to `to` until either ends, recording every byte.
async fn relay(
    from: &mut tokio::net::tcp::ReadHalf<'_>,
    to: &mut tokio::net::tcp::WriteHalf<'_>,
    carried: Arc<Mutex<Vec<u8>>>,
) {
    let mut buffer = [0u8; 4096];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(read) => {
                carried.lock().unwrap().extend_from_slice(&buffer[..read]);
                if to.write_all(&buffer[..read]).await.is_err() {
                    return;
                }
            }
        }
    }
}
