//! A dispatch's sandbox made ([`Provisioning`]): the journal entry, the workspace from the base, the
//! scoped credential and the container, with the image's pull reported as it goes; provisioning stops
//! cleanly when told to. Then the sandbox armed: its credential masked in everything shown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::dispatch::channels::DispatchChannels;
use crate::dispatch::copy_mode::Mounts;
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::{
    BaseFetch, CredentialRequest, DispatchSandbox, SandboxError, SandboxRequest, WorkspaceSource,
};
use crate::forge::Preflight;
use crate::runtime::PullProgress;
use stet_protocol::event::EventKind;
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

use super::ending::Ending;
use super::steering::Steering;

/// How many image-pull progress reports may wait to become events.
const PULL_PROGRESS_BUFFER: usize = 64;

/// Covers `provisioning` up to the sandbox armed: hands the [`DispatchSandbox`] to
/// [`AgentRun`](super::agent::AgentRun) (which moves to `running`), and from then on the teardown
/// of [`Ending`] is guaranteed.
pub(super) struct Provisioning<'d> {
    steering: &'d mut Steering,
    /// The channels the sandbox's relay serves.
    channels: &'d DispatchChannels,
}

impl<'d> Provisioning<'d> {
    pub(super) fn new(
        steering: &'d mut Steering,
        channels: &'d DispatchChannels,
    ) -> Provisioning<'d> {
        Provisioning { steering, channels }
    }

    /// Makes the sandbox for the checked target; a failure tears down what was made.
    pub(super) async fn provision(
        self,
        preflight: &Preflight,
    ) -> Result<DispatchSandbox, DispatchError> {
        let steering = self.steering;
        let settings = &steering.parts.settings;
        let request = SandboxRequest {
            dispatch: steering.run.id,
            image: settings.image.clone(),
            limits: settings.limits,
            network: settings.network,
            user: settings.user,
            // In copy mode the relay is an exec attached later, not the main process.
            keepalive: match settings.mounts {
                Mounts::Bind => self.channels.keepalive(&settings.keepalive),
                Mounts::Copy(_) => settings.keepalive.clone(),
            },
            gateway: (!self.channels.is_empty()).then(|| steering.service.socket_place().clone()),
            workspace_source: Some(WorkspaceSource {
                repository: steering.parts.repository.clone(),
                base: preflight.base_sha.clone(),
                fetch: Some(BaseFetch {
                    url: preflight.push_url.clone(),
                    branch: steering.run.brief.target.base.clone(),
                }),
                limits: settings.base,
            }),
            credential: Some(CredentialRequest {
                provider: Arc::clone(&steering.parts.credentials),
                repository: steering.run.brief.target.repo.clone(),
                branch: steering.gathered.branch.clone(),
                ttl: settings.credential_ttl,
                into_sandbox: false,
            }),
            mounts: settings.mounts,
        };
        let (progress, mut pulls) = mpsc::channel::<PullProgress>(PULL_PROGRESS_BUFFER);
        let image = steering
            .parts
            .sanitizer
            .current()
            .sanitize(settings.image.as_str());
        let provisioned = {
            let provisioning = DispatchSandbox::provision_until(
                steering.service.runtime(),
                steering.service.journal(),
                steering.service.state_dir(),
                request,
                &steering.stop,
                Some(progress),
            );
            tokio::pin!(provisioning);
            loop {
                tokio::select! {
                    provisioned = &mut provisioning => break provisioned,
                    Some(pull) = pulls.recv() => {
                        let event = image_pull(&image, pull, &steering.parts.sanitizer.current());
                        steering.publisher.emit_until(event, &steering.stop).await;
                    }
                }
            }
        };
        while let Ok(pull) = pulls.try_recv() {
            let event = image_pull(&image, pull, &steering.parts.sanitizer.current());
            steering.publisher.emit(event).await;
        }
        match provisioned {
            Ok(sandbox) => Ok(sandbox),
            Err(failure) => {
                if let Some(report) = &failure.teardown {
                    Ending::new(steering)
                        .report_teardown(report, Duration::ZERO)
                        .await;
                }
                match failure.error {
                    SandboxError::Stopped => Err(steering.stop_reason()),
                    error => Err(steering.fail(format!("provisioning: {error}"))),
                }
            }
        }
    }

    /// Masks the sandbox's scoped credential in everything shown, and warns when it is the person's
    /// own token standing in for a narrow one.
    pub(super) async fn arm(self, sandbox: &DispatchSandbox) -> Result<(), DispatchError> {
        let steering = self.steering;
        if let Some(credential) = sandbox.credential()
            && let Err(error) = credential.mask_in(&steering.parts.sanitizer)
        {
            return Err(steering.fail(format!(
                "the scoped credential cannot be masked in output: {error}"
            )));
        }
        if let Some(why) = sandbox
            .credential()
            .and_then(|credential| credential.stand_in())
        {
            let message = steering.sanitize(&format!(
                "the push uses your own forge token, not a narrow one (stet drops it after {} s, but it stays valid at the forge; it never enters the sandbox): {why}",
                steering.parts.settings.credential_ttl.as_secs()
            ));
            steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
        if steering.stop.is_cancelled() {
            return Err(steering.stop_reason());
        }
        Ok(())
    }
}

/// An image pull's progress as an event.
fn image_pull(
    image: &SanitizedText,
    pull: PullProgress,
    sanitizer: &Arc<TokenSanitizer>,
) -> EventKind {
    EventKind::ImagePull {
        image: image.clone(),
        layer: pull.layer.map(|layer| sanitizer.sanitize(&layer)),
        status: sanitizer.sanitize(&pull.status),
        current_bytes: pull.current_bytes,
        total_bytes: pull.total_bytes,
    }
}
