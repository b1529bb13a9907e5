//! How stet's servers for a sandbox (the model gateway and the egress proxy) bind and accept, in
//! one place: a unix socket that fits `sun_path`, must not exist yet and is
//! private to stet's account before anything is served on it, and an accept loop that holds at most
//! a bounded number of connections (more wait in the socket's backlog, holding nothing of stet's)
//! and backs off when the system refuses one instead of spinning.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;

/// The longest unix socket path the kernel accepts, without its terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// How long the loop waits after the system refused it a connection (out of descriptors).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Why a socket could not be bound.
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "the socket path {} is {len} bytes, and unix sockets allow {MAX_SOCKET_PATH}",
        path.display()
    )]
    TooLong { path: PathBuf, len: usize },
    #[error("the socket {} already exists", .0.display())]
    Exists(PathBuf),
    #[error("the socket's directory {} does not exist", .0.display())]
    NoDirectory(PathBuf),
    #[error("could not bind the socket {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not make the socket {} private (mode 0600): {source}", path.display())]
    Mode {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Binds `socket`, refused when it is too long or exists already, and restricts it to its owner
/// (mode 0600) before it is returned.
pub fn bind_private(socket: &Path) -> Result<UnixListener, BindError> {
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(BindError::TooLong {
            path: socket.to_owned(),
            len,
        });
    }
    if socket.symlink_metadata().is_ok() {
        return Err(BindError::Exists(socket.to_owned()));
    }
    let parent = match socket.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
        None => Path::new("/"),
    };
    if !parent.is_dir() {
        return Err(BindError::NoDirectory(parent.to_owned()));
    }
    let listener = UnixListener::bind(socket).map_err(|source| match source.kind() {
        std::io::ErrorKind::AddrInUse => BindError::Exists(socket.to_owned()),
        _ => BindError::Bind {
            path: socket.to_owned(),
            source,
        },
    })?;
    // The socket is created with the umask's mode; tighten it before anything is served on it.
    if let Err(source) = std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)) {
        drop(listener);
        remove_socket(socket);
        return Err(BindError::Mode {
            path: socket.to_owned(),
            source,
        });
    }
    Ok(listener)
}

/// Removes a socket this module bound; one already gone is fine.
pub fn remove_socket(socket: &Path) {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => tracing::warn!("could not remove the socket {}: {err}", socket.display()),
    }
}

/// Accepts on `listener` until `stopped` resolves, serving each connection with `serve` in a task
/// of its own and holding at most `max_connections` at once. Returns the connections still being
/// served, for the caller to end or wait for.
pub async fn accept_bounded<F, Fut>(
    listener: UnixListener,
    max_connections: usize,
    mut stopped: oneshot::Receiver<()>,
    serve: F,
) -> JoinSet<()>
where
    F: Fn(UnixStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    loop {
        let slot = tokio::select! {
            _ = &mut stopped => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let served = serve(stream);
                connections.spawn(async move {
                    served.await;
                    drop(slot);
                });
            }
            Err(err) => {
                tracing::warn!("could not accept a connection: {err}");
                drop(slot);
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
    connections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_private_refused_when_it_exists_and_when_its_path_is_too_long() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let listener = bind_private(&socket).unwrap();
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(bind_private(&socket), Err(BindError::Exists(_))));
        drop(listener);
        remove_socket(&socket);
        remove_socket(&socket);
        let long = dir.path().join("x".repeat(MAX_SOCKET_PATH));
        assert!(matches!(
            bind_private(&long),
            Err(BindError::TooLong { .. })
        ));
        assert!(matches!(
            bind_private(&dir.path().join("gone/s.sock")),
            Err(BindError::NoDirectory(_))
        ));
    }

    /// Past the bound, a connection waits in the backlog: it is served only once one ends.
    #[tokio::test]
    async fn at_most_the_bound_is_served_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let listener = bind_private(&socket).unwrap();
        let (stop, stopped) = oneshot::channel();
        let (served, mut serving) = tokio::sync::mpsc::unbounded_channel();
        let (release, released) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(accept_bounded(listener, 2, stopped, move |stream| {
            let served = served.clone();
            let mut released = released.clone();
            async move {
                let _ = served.send(());
                let _ = released.wait_for(|go| *go).await;
                drop(stream);
            }
        }));
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(UnixStream::connect(&socket).await.unwrap());
        }
        serving.recv().await.unwrap();
        serving.recv().await.unwrap();
        assert!(serving.try_recv().is_err(), "a third was served at once");
        release.send(true).unwrap();
        serving.recv().await.unwrap();
        stop.send(()).unwrap();
        let mut left = server.await.unwrap();
        while left.join_next().await.is_some() {}
    }
}
