//! The egress proxy of one dispatch ([`EgressLink`]): started on the sandbox's egress socket beside
//! the model gateway when a person allowed hosts (with the certificate authorities they gave the
//! sandbox written beside it, or in copy mode among the outputs copied in), stopped once the
//! agent's work is over (or at teardown). Each connection becomes an `egress` event as it ends; what the proxy saw in all becomes
//! the `egress_summary` event, the pull request's provenance and, past the upload threshold, a hold
//! at review.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::dispatch::channels::{DispatchChannels, SANDBOX_CA_FILE};
use crate::dispatch::copy_mode::Mounts;
use crate::dispatch::error::DispatchError;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::egress::proxy::{EgressProxy, EgressRecord, EgressReport, HostNetwork, SystemResolver};
use crate::runtime::OUTPUTS_MOUNT;
use stet_protocol::event::{EventKind, MAX_LISTED};
use stet_sanitize::sanitize::TokenSanitizer;

use super::steering::Steering;

/// The file of the sandbox's certificate authorities in the outputs directory, in copy mode.
const COPIED_CA_FILE: &str = "stet-sandbox-ca.pem";

/// The egress proxy of one dispatch, from the agent's start until its work is over.
#[derive(Default)]
pub(super) struct EgressLink {
    proxy: Option<EgressProxy>,
    /// Each connection's record as it ends, while the proxy runs.
    pub(super) records: Option<mpsc::Receiver<EgressRecord>>,
    /// The variables naming the sandbox's certificate authorities, when the user gave some.
    pub(super) ca_env: Vec<(String, String)>,
}

impl EgressLink {
    /// Starts the proxy on the egress socket of the sandbox's socket directory, when the dispatch
    /// opens the egress channel.
    pub(super) fn start(
        &mut self,
        steering: &Steering,
        channels: &DispatchChannels,
        sandbox: &DispatchSandbox,
    ) -> Result<(), DispatchError> {
        let Some(settings) = &steering.parts.settings.egress else {
            return Ok(());
        };
        let Some(directory) = &sandbox.paths().gateway else {
            return Err(steering.fail(
                "the sandbox was provisioned without the egress proxy's socket directory"
                    .to_owned(),
            ));
        };
        let Some(socket) = channels.host_socket(directory, stet_protocol::channel::EGRESS) else {
            return Err(
                steering.fail("the sandbox was provisioned without the egress channel".to_owned())
            );
        };
        let host = HostNetwork::current()
            .map_err(|error| steering.fail(format!("starting the egress proxy: {error}")))?;
        let (proxy, records) = EgressProxy::start(
            &socket,
            settings.policy.clone(),
            settings.bounds,
            Arc::new(SystemResolver),
            Arc::new(host),
        )
        .map_err(|error| steering.fail(format!("starting the egress proxy: {error}")))?;
        let dispatch = &steering.parts.settings;
        if dispatch.mounts.shares_sockets() {
            crate::dispatch::sandbox::hand_over(&socket, dispatch.user).map_err(|error| {
                steering.fail(format!("handing the egress proxy over: {error}"))
            })?;
        }
        if let Some(ca) = &settings.sandbox_ca {
            // In copy mode the socket directory is not mounted: the file goes in with the outputs.
            let (file, ca_env) = match steering.parts.settings.mounts {
                Mounts::Bind => (directory.join(SANDBOX_CA_FILE), channels.sandbox_ca_env()),
                Mounts::Copy(_) => (
                    sandbox.paths().outputs.join(COPIED_CA_FILE),
                    channels.sandbox_ca_env_at(&format!("{OUTPUTS_MOUNT}/{COPIED_CA_FILE}")),
                ),
            };
            write_public(&file, &ca.pem)
                .and_then(|()| {
                    crate::dispatch::sandbox::hand_over(&file, steering.parts.settings.user)
                        .map_err(|error| std::io::Error::other(error.to_string()))
                })
                .map_err(|error| {
                    steering.fail(format!(
                        "giving the sandbox the certificate authorities of {} (network.sandbox_ca_bundle): {error}",
                        ca.path.display()
                    ))
                })?;
            self.ca_env = ca_env;
        }
        self.proxy = Some(proxy);
        self.records = Some(records);
        Ok(())
    }

    /// Stops the proxy (every connection ends and leaves its record), publishes the records not
    /// published yet and the summary, and keeps what the review and the pull request need.
    pub(super) async fn stop(&mut self, steering: &mut Steering) {
        let Some(proxy) = self.proxy.take() else {
            return;
        };
        let report = proxy.shutdown().await;
        if let Some(mut records) = self.records.take() {
            while let Ok(record) = records.try_recv() {
                let event = record_event(&steering.sanitizer(), record);
                steering.publisher.emit(event).await;
            }
        }
        let event = summary_event(&steering.sanitizer(), &report);
        steering.publisher.emit(event).await;
        steering.gathered.egress = Some(report);
    }
}

/// Writes `bytes` to the new file `path`, readable by all (certificates are public; the sandbox's
/// user must read it), refusing one that is already there.
fn write_public(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The next record of the proxy, or never when none runs (a `select!` arm that stays quiet).
pub(super) async fn next_record(
    records: &mut Option<mpsc::Receiver<EgressRecord>>,
) -> Option<EgressRecord> {
    match records {
        Some(records) => records.recv().await,
        None => std::future::pending().await,
    }
}

/// The `egress` event of one connection; every text the agent chose is sanitized.
pub(super) fn record_event(sanitizer: &Arc<TokenSanitizer>, record: EgressRecord) -> EventKind {
    EventKind::Egress {
        host: sanitizer.sanitize(&record.host),
        port: record.port,
        address: record.address.map(|address| address.to_string()),
        allowed: record.allowed,
        outcome: sanitizer.sanitize(&record.outcome),
        hint: record.hint.map(|hint| sanitizer.sanitize(&hint)),
        up: record.up,
        down: record.down,
        millis: record.millis,
    }
}

/// The `egress_summary` event of what the proxy saw in all.
fn summary_event(sanitizer: &Arc<TokenSanitizer>, report: &EgressReport) -> EventKind {
    let reached = report.hosts_reached();
    let hosts_not_listed = reached.len().saturating_sub(MAX_LISTED);
    EventKind::EgressSummary {
        allowed: report.allowed,
        refused: report.refused,
        uploaded: report.uploaded,
        downloaded: report.downloaded,
        hosts: reached
            .iter()
            .take(MAX_LISTED)
            .map(|host| sanitizer.sanitize(host))
            .collect(),
        hosts_not_listed,
        not_shown: report.not_sent,
    }
}
