//! The channel stream of one dispatch in copy mode ([`StreamLink`]): attached once the model
//! gateway and the egress proxy listen, before the agent runs, and stopped once its work is over.
//! A stream that ends on its own (the relay broke the protocol, or exited) cuts the agent off the
//! model and the allowed hosts; the dispatch goes on, and a warning in the run record says why.

use tokio_util::sync::CancellationToken;

use crate::dispatch::channel_stream::{ChannelStream, StreamEnd, attach_channels};
use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::copy_mode::Mounts;
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::DispatchSandbox;
use stet_protocol::event::EventKind;

use super::steering::Steering;

/// The channel stream of one dispatch, when its channels ride one.
#[derive(Debug, Default)]
pub(super) struct StreamLink {
    /// The stream while it runs (taken out while the agent's processes run).
    pub(super) stream: Option<ChannelStream>,
    /// Whether its end was reported already.
    reported: bool,
}

impl StreamLink {
    /// Attaches the sandbox's channels over the relay's exec stream, in copy mode when the dispatch
    /// opens any; nothing otherwise (bind mode relays through the mounted socket directory).
    pub(super) async fn attach(
        &mut self,
        steering: &Steering,
        channels: &DispatchChannels,
        sandbox: &DispatchSandbox,
    ) -> Result<(), DispatchError> {
        if channels.is_empty() || steering.parts.settings.mounts == Mounts::Bind {
            return Ok(());
        }
        let Some(directory) = &sandbox.paths().gateway else {
            return Err(steering.fail(
                "the sandbox was provisioned without the channels' socket directory".to_owned(),
            ));
        };
        let runtime = steering.service.runtime();
        let stream = attach_channels(&runtime, sandbox.container(), channels, directory)
            .await
            .map_err(|error| steering.fail(format!("attaching the sandbox's channels: {error}")))?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Publishes the warning of a stream that ended while the agent ran (once).
    pub(super) async fn report(
        &mut self,
        steering: &mut Steering,
        end: &StreamEnd,
        stop: &CancellationToken,
    ) -> bool {
        if self.reported || end.stopped() {
            return true;
        }
        self.reported = true;
        let event = warning(steering, end);
        steering.publisher.emit_until(event, stop).await
    }

    /// Stops the stream (the agent's work is over); an end it met before and did not report yet
    /// is reported now.
    pub(super) async fn stop(&mut self, steering: &mut Steering) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let end = stream.stop().await;
        if !self.reported && !end.stopped() {
            self.reported = true;
            let event = warning(steering, &end);
            steering.publisher.emit(event).await;
        }
    }
}

/// The warning of a stream that ended on its own.
fn warning(steering: &Steering, end: &StreamEnd) -> EventKind {
    let message = steering.sanitize(&format!(
        "the sandbox's channels (the model gateway, the egress proxy) are cut: {end}; the agent can no longer reach them, and the dispatch goes on without them"
    ));
    EventKind::Warning { message }
}

/// The end of the stream, or never while it runs or when there is none (a `select!` arm that
/// stays quiet).
pub(super) async fn next_end(stream: &mut Option<ChannelStream>) -> StreamEnd {
    match stream {
        Some(stream) => stream.ended().await,
        None => std::future::pending().await,
    }
}
