//! The host's end of the channel stream (copy mode, issue #33): a dispatch's channels (the model
//! gateway's, the egress proxy's) reach the sandbox over the engine's own exec stream instead of a
//! socket directory bind-mounted into it, so the container shares no host path. [`attach_channels`]
//! starts the relay in the container as an exec (`stet sandbox-relay --stdio --channel …`) with its
//! stdin and stdout attached, and demultiplexes what it sends ([`stet_pump::mux`]): each connection
//! the relay opens goes to its channel's fixed host end, the gateway's or the proxy's unix socket
//! in the dispatch's socket directory, which stays private to stet. One path for a fresh container
//! and a warm-pool one claimed later: both call [`attach_channels`] once the container runs.
//!
//! The stream is untrusted input: a frame outside the protocol ends it ([`StreamEnd`]); the agent
//! loses its model and egress, the dispatch goes on and says why. The relay's stderr is kept apart
//! (its last [`MAX_RELAY_SAID`] bytes, for that message), never read as frames.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stet_protocol::channel_stream::READY_LINE;
use stet_pump::mux::{self, Role};

/// How a channel stream ended (the relay's side and the host's share it).
pub use stet_pump::mux::Ended;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::sync::{oneshot, watch};

use crate::dispatch::channels::DispatchChannels;
use crate::runtime::{
    AttachedProcess, ContainerRuntime, RuntimeError, SandboxProcess, WORKSPACE_MOUNT,
};

/// How many of the relay's last bytes of stderr are kept to say why its stream ended.
pub const MAX_RELAY_SAID: usize = 2048;

/// How long the relay may take to bind its ports once started (it takes milliseconds; nothing of
/// the agent's runs yet).
const READY_WAIT: Duration = Duration::from_secs(60);

/// How long, once the stream ended, the relay's last words on stderr are waited for: an honest
/// relay exits at once when its stdin closes; one that does not is not waited for longer.
const RELAY_SAID_WAIT: Duration = Duration::from_secs(2);

/// Why the channel stream could not be attached.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ChannelStreamError {
    #[error("the dispatch opens no channel: there is nothing to attach")]
    NoChannels,
    #[error("the host end of channel {channel:?} is not in the socket directory {}", dir.display())]
    NoHostEnd { channel: String, dir: PathBuf },
    #[error("starting the relay in the sandbox: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("the relay in the sandbox ended before it listened: {0}")]
    Ended(StreamEnd),
    #[error("the relay in the sandbox did not listen within {} s", READY_WAIT.as_secs())]
    NotReady,
}

/// How the channel stream ended, and what the relay said on stderr meanwhile (untrusted text:
/// sanitize it before showing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEnd {
    /// How it ended.
    pub ended: Ended,
    /// The relay's last bytes of stderr, lossily decoded.
    pub relay_said: String,
}

impl StreamEnd {
    /// Whether the host stopped it (the agent's work is over): nothing to report.
    pub fn stopped(&self) -> bool {
        self.ended == Ended::Stopped
    }
}

impl fmt::Display for StreamEnd {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.ended)?;
        let said = self.relay_said.replace(READY_LINE, "");
        let said = said.trim();
        if !said.is_empty() {
            write!(formatter, " (the relay said: {said})")?;
        }
        Ok(())
    }
}

/// A running channel stream; stopped by [`ChannelStream::stop`] or by being dropped.
#[derive(Debug)]
pub struct ChannelStream {
    stop: Option<oneshot::Sender<()>>,
    ended: watch::Receiver<Option<StreamEnd>>,
    /// Whether the relay said it listens ([`READY_LINE`] on its stderr).
    ready: watch::Receiver<bool>,
}

/// Starts the relay in `container` for `channels` and attaches to it: every connection it opens is
/// led to that channel's unix socket in `host_ends` (the dispatch's socket directory, on the host
/// only), nowhere else.
pub async fn attach_channels(
    runtime: &Arc<dyn ContainerRuntime>,
    container: &str,
    channels: &DispatchChannels,
    host_ends: &Path,
) -> Result<ChannelStream, ChannelStreamError> {
    if channels.is_empty() {
        return Err(ChannelStreamError::NoChannels);
    }
    let names = channels.names();
    let ends = names
        .iter()
        .map(|name| {
            channels
                .host_socket(host_ends, name)
                .ok_or_else(|| ChannelStreamError::NoHostEnd {
                    channel: name.clone(),
                    dir: host_ends.to_owned(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let process = SandboxProcess {
        argv: channels.relay_command(crate::image::BINARY_PATH),
        env: Default::default(),
        workdir: WORKSPACE_MOUNT.to_owned(),
    };
    let attached = runtime.exec_attached(container, &process).await?;
    let mut stream = ChannelStream::over(attached, names.clone(), ends);
    // The agent's first connection must find the ports bound.
    let mut ready = stream.ready.clone();
    let listening = async move {
        tokio::time::timeout(READY_WAIT, ready.wait_for(|ready| *ready))
            .await
            .map(|said| said.is_ok())
    };
    let heard = tokio::select! {
        heard = listening => heard,
        end = stream.ended() => return Err(ChannelStreamError::Ended(end)),
    };
    match heard {
        Ok(true) => {}
        Ok(false) => return Err(ChannelStreamError::Ended(stream.ended().await)),
        Err(_) => return Err(ChannelStreamError::NotReady),
    }
    tracing::info!(container, channels = ?names, "channel stream attached");
    Ok(stream)
}

impl ChannelStream {
    /// The host's end of a channel stream carrying `names` over the attached process `process`,
    /// each channel led to the unix socket at its index in `ends`. [`attach_channels`] starts the
    /// relay and calls this; a test may attach any process to see what the host makes of it.
    pub fn over(process: AttachedProcess, names: Vec<String>, ends: Vec<PathBuf>) -> ChannelStream {
        let (stop, stopped) = oneshot::channel::<()>();
        let (report, ended) = watch::channel(None);
        let (listening, ready) = watch::channel(false);
        tokio::spawn(async move {
            let AttachedProcess {
                input,
                output,
                errors,
            } = process;
            let said = Arc::new(Mutex::new(Vec::new()));
            let mut listening = tokio::spawn(keep_tail(errors, Arc::clone(&said), listening));
            let stopped = async {
                // A send or the handle's drop: either way, stop.
                let _ = stopped.await;
            };
            let ended = mux::run(output, input, names, Role::Host { ends }, stopped).await;
            // The stream's end closed the relay's stdin: its stderr ends with it, unless it
            // lingers, which is not waited for.
            if tokio::time::timeout(RELAY_SAID_WAIT, &mut listening)
                .await
                .is_err()
            {
                listening.abort();
            }
            let relay_said = {
                let said = said.lock().unwrap_or_else(|poison| poison.into_inner());
                String::from_utf8_lossy(&said).into_owned()
            };
            if ended != Ended::Stopped {
                tracing::warn!(%ended, relay_said = %relay_said.escape_debug(), "the channel stream ended");
            }
            let _ = report.send(Some(StreamEnd { ended, relay_said }));
        });
        ChannelStream {
            stop: Some(stop),
            ended,
            ready,
        }
    }

    /// Resolves once the stream has ended, with how (at once when it already has).
    pub async fn ended(&mut self) -> StreamEnd {
        match self.ended.wait_for(Option::is_some).await {
            Ok(end) => end.clone().unwrap_or_else(broken),
            Err(_) => broken(),
        }
    }

    /// Stops the stream (every connection cut, the relay's stdin closed) and returns how it
    /// ended: [`Ended::Stopped`], or what had ended it before.
    pub async fn stop(mut self) -> StreamEnd {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.ended().await
    }
}

/// The end of a stream whose task ended without a word (it panicked).
fn broken() -> StreamEnd {
    StreamEnd {
        ended: Ended::Broken("the channel stream's task ended abnormally".to_owned()),
        relay_said: String::new(),
    }
}

/// Reads `errors` to its end, keeping its last [`MAX_RELAY_SAID`] bytes in `said`, and tells
/// `ready` once the relay said [`READY_LINE`].
async fn keep_tail(
    mut errors: impl AsyncRead + Unpin,
    said: Arc<Mutex<Vec<u8>>>,
    ready: watch::Sender<bool>,
) {
    let mut chunk = vec![0u8; 4096];
    while let Ok(read) = errors.read(&mut chunk).await {
        if read == 0 {
            return;
        }
        let mut said = said.lock().unwrap_or_else(|poison| poison.into_inner());
        said.extend_from_slice(&chunk[..read]);
        if !*ready.borrow()
            && said
                .windows(READY_LINE.len())
                .any(|at| at == READY_LINE.as_bytes())
        {
            ready.send_replace(true);
        }
        let excess = said.len().saturating_sub(MAX_RELAY_SAID);
        said.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    /// An attached process made of in-memory pipes: what the test writes as its stdout and stderr,
    /// and its stdin's far end.
    fn fake_process() -> (
        AttachedProcess,
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
    ) {
        let (input, stdin) = tokio::io::duplex(1024);
        let (stdout, output) = tokio::io::duplex(1024);
        let (stderr, errors) = tokio::io::duplex(1024);
        let process = AttachedProcess {
            input: Box::pin(input),
            output: Box::pin(output),
            errors: Box::pin(errors),
        };
        (process, stdin, stdout, stderr)
    }

    #[tokio::test]
    async fn garbage_ends_the_stream_with_the_violation_and_the_relays_last_words() {
        let (process, mut stdin, mut stdout, mut stderr) = fake_process();
        let dir = tempfile::tempdir().unwrap();
        let mut stream = ChannelStream::over(
            process,
            vec!["model".to_owned()],
            vec![dir.path().join("model.sock")],
        );
        stderr
            .write_all(b"relay: about to misbehave\n")
            .await
            .unwrap();
        stdout.write_all(&[9; 20]).await.unwrap();
        // The host closes the relay's stdin once the stream broke.
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stdin, &mut rest)
            .await
            .unwrap();
        drop(stderr);
        let end = stream.ended().await;
        assert!(
            matches!(
                end.ended,
                Ended::Violation(stet_protocol::channel_stream::Violation::UnknownKind { kind: 9 })
            ),
            "{end:?}"
        );
        assert!(!end.stopped());
        assert_eq!(end.relay_said, "relay: about to misbehave\n");
        let shown = end.to_string();
        assert!(shown.contains("broke the protocol"), "{shown}");
        assert!(
            shown.contains("(the relay said: relay: about to misbehave)"),
            "{shown}"
        );
        assert_eq!(stream.stop().await, end);
    }

    #[tokio::test]
    async fn a_stop_or_a_drop_ends_it_and_closes_the_relays_stdin() {
        let (process, mut stdin, _stdout, stderr) = fake_process();
        let stream = ChannelStream::over(process, vec!["model".to_owned()], vec!["/x".into()]);
        drop(stderr);
        let end = stream.stop().await;
        assert!(end.stopped(), "{end:?}");
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stdin, &mut rest)
            .await
            .unwrap();
        assert!(rest.is_empty());

        let (process, mut stdin, _stdout, _stderr) = fake_process();
        drop(ChannelStream::over(
            process,
            vec!["model".to_owned()],
            vec!["/x".into()],
        ));
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stdin, &mut rest)
            .await
            .unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn the_relays_ready_line_is_heard_and_not_repeated_in_its_last_words() {
        let (process, _stdin, _stdout, mut stderr) = fake_process();
        let stream = ChannelStream::over(process, vec!["model".to_owned()], vec!["/x".into()]);
        let mut ready = stream.ready.clone();
        assert!(!*ready.borrow());
        stderr
            .write_all(format!("{READY_LINE}\n").as_bytes())
            .await
            .unwrap();
        ready.wait_for(|ready| *ready).await.unwrap();
        stderr.write_all(b"a last word\n").await.unwrap();
        drop(stderr);
        let mut end = stream.stop().await;
        assert!(end.stopped());
        end.ended = Ended::Closed;
        assert_eq!(
            end.to_string(),
            "the other end closed the channel stream (the relay said: a last word)"
        );
    }

    #[test]
    fn the_relays_tail_keeps_its_last_bytes() {
        let said = Arc::new(Mutex::new(Vec::new()));
        let long = vec![b'a'; 3 * MAX_RELAY_SAID];
        let mut text = long.clone();
        text.extend_from_slice(b"the end");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(keep_tail(
                &text[..],
                Arc::clone(&said),
                watch::channel(false).0,
            ));
        let kept = said.lock().unwrap().clone();
        assert_eq!(kept.len(), MAX_RELAY_SAID);
        assert!(kept.ends_with(b"the end"));
    }
}
