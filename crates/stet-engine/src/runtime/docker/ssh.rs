//! The Docker client over SSH (`[runtime] host = "ssh://…"`), as the docker CLI reaches such an
//! engine: each connection is the user's own `ssh` running `docker system dial-stdio` on the host,
//! the API spoken over its stdin and stdout, so the user's keys, agent, configuration and known
//! hosts decide who may connect, and nothing of the engine is exposed on the network. Upgraded
//! connections (an exec's attached streams) ride the same pipe.

use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll};

use bollard::{BollardRequest, Docker};
use futures_util::future::BoxFuture;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{Join, join};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::runtime::endpoint::SshTarget;

/// The program run for each connection, looked up in `PATH` as the docker CLI does.
const SSH: &str = "ssh";

/// The address bollard puts in its requests; the connector ignores it and dials the target.
const REQUEST_BASE: &str = "http://docker.over.ssh";

/// A client of the engine `target` reaches, with `timeout` seconds per request.
pub(super) fn client(target: SshTarget, timeout: u64) -> Result<Docker, bollard::errors::Error> {
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(Dialer {
                target: Arc::new(target),
            }),
    );
    Docker::connect_with_custom_transport(
        move |request: BollardRequest| {
            let client = Arc::clone(&client);
            async move {
                client
                    .request(request)
                    .await
                    .map_err(|error| bollard::errors::Error::IOError {
                        err: io::Error::other(format!(
                            "{error} (the engine is reached through `ssh … docker system dial-stdio`; run it by hand to see why it fails)"
                        )),
                    })
            }
        },
        Some(REQUEST_BASE),
        timeout,
        bollard::API_DEFAULT_VERSION,
    )
}

/// Opens a connection by starting `ssh`.
#[derive(Clone)]
struct Dialer {
    target: Arc<SshTarget>,
}

impl tower_service::Service<Uri> for Dialer {
    type Response = SshConnection;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<SshConnection>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let target = Arc::clone(&self.target);
        Box::pin(async move {
            let mut child = Command::new(SSH)
                .args(target.dial_stdio_args())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|error| {
                    io::Error::new(error.kind(), format!("starting {SSH}: {error}"))
                })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(io::Error::other("ssh started without its pipes"));
            };
            Ok(SshConnection {
                io: TokioIo::new(join(stdout, stdin)),
                _ssh: child,
            })
        })
    }
}

/// One connection: `ssh`'s stdout read and its stdin written; the process ends with it.
struct SshConnection {
    io: TokioIo<Join<ChildStdout, ChildStdin>>,
    _ssh: Child,
}

impl Connection for SshConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for SshConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SshConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
