//! `[network]`'s egress settings read across the layers (issue 30): which hosts the agent may reach
//! through the host's egress proxy. What adds a host (`allow`, `presets`, `allow_http`, the
//! test-only `loopback_for_tests`) is a machine setting; a repository's own file may only remove
//! hosts (`deny`), lower the bounds, or turn egress off (`egress = false`). The certificate
//! authorities the sandbox's clients trust (`sandbox_ca_bundle`) come only from the user's own file,
//! read and checked here. Nothing configured: no proxy, exactly the network-less sandbox of before.

use std::path::{Path, PathBuf};

use crate::egress::hosts::AllowRule;
use crate::egress::proxy::EgressBounds;
use crate::egress::{EgressPolicy, EgressSettings, SandboxCa, presets};

use super::layers::{Layers, Reason};
use super::{ConfigError, Origin, Sourced};

/// What a dispatch may upload in all unless configured (uploads are how code leaves).
pub(super) const DEFAULT_MAX_UPLOAD_BYTES: u64 = 16 << 20;

/// Bytes uploaded past which a result is held at review unless configured.
pub(super) const DEFAULT_REVIEW_UPLOAD_BYTES: u64 = 1 << 20;

/// The egress settings as read, before they are checked.
pub(super) struct EgressReads {
    allow: Option<Sourced<Vec<String>>>,
    presets: Option<Sourced<Vec<String>>>,
    allow_http: Option<Sourced<bool>>,
    egress: Option<Sourced<bool>>,
    deny: Vec<Sourced<Vec<String>>>,
    max_upload_bytes: Option<Sourced<u64>>,
    review_upload_bytes: Option<Sourced<u64>>,
    loopback_for_tests: Option<Sourced<bool>>,
    sandbox_ca_bundle: Option<Sourced<PathBuf>>,
}

/// Reads the settings by their classes (refusals gather in `layers`).
pub(super) fn read(layers: &mut Layers) -> EgressReads {
    let deny = layers.adds("network.deny", |s| &s.network.deny);
    EgressReads {
        allow: layers.machine("network.allow", Reason::Network, |s| &s.network.allow),
        presets: layers.machine("network.presets", Reason::Network, |s| &s.network.presets),
        allow_http: layers.stays_off("network.allow_http", Reason::Network, |s| {
            &s.network.allow_http
        }),
        egress: layers.stays_off("network.egress", Reason::Network, |s| &s.network.egress),
        deny: deny.base.into_iter().chain(deny.added).collect(),
        max_upload_bytes: layers.at_most(
            "network.max_upload_bytes",
            |s| &s.network.max_upload_bytes,
            Some(DEFAULT_MAX_UPLOAD_BYTES),
        ),
        review_upload_bytes: layers.at_most(
            "network.review_upload_bytes",
            |s| &s.network.review_upload_bytes,
            Some(DEFAULT_REVIEW_UPLOAD_BYTES),
        ),
        loopback_for_tests: layers.machine("network.loopback_for_tests", Reason::Network, |s| {
            &s.network.loopback_for_tests
        }),
        sandbox_ca_bundle: layers.machine("network.sandbox_ca_bundle", Reason::HostPath, |s| {
            &s.network.sandbox_ca_bundle
        }),
    }
}

/// The dispatch's egress: `None` when no host is allowed or egress is turned off. `bridge`: where
/// `dispatch.allow_network` was turned on, which gives the container a network of its own and so
/// cannot go with the proxy. `repository`: the repository's own file, when it is read (trusted).
pub(super) fn resolve(
    reads: EgressReads,
    bridge: Option<&Origin>,
    repository: Option<&Path>,
) -> Result<Option<EgressSettings>, ConfigError> {
    let mut rules = Vec::new();
    if let Some(allow) = &reads.allow {
        for line in &allow.value {
            let rule = AllowRule::parse(line)
                .map_err(|error| invalid(&allow.origin, "network.allow", error.to_string()))?;
            rules.push((rule, format!("network.allow at {}", allow.origin)));
        }
    }
    if let Some(chosen) = &reads.presets {
        for name in &chosen.value {
            let Some(preset) = presets::rules(name) else {
                return Err(invalid(
                    &chosen.origin,
                    "network.presets",
                    format!(
                        "{:?} is not a preset; the presets are {}",
                        shown(name),
                        presets::names()
                    ),
                ));
            };
            rules.extend(
                preset
                    .into_iter()
                    .map(|rule| (rule, format!("preset {name} at {}", chosen.origin))),
            );
        }
    }
    let mut deny = Vec::new();
    for list in &reads.deny {
        for line in &list.value {
            let rule = AllowRule::parse(line)
                .map_err(|error| invalid(&list.origin, "network.deny", error.to_string()))?;
            deny.push((rule, format!("network.deny at {}", list.origin)));
        }
    }
    let turned_off = reads.egress.as_ref().is_some_and(|on| !on.value);
    if rules.is_empty() || turned_off {
        return Ok(None);
    }
    if let Some(bridge) = bridge {
        return Err(invalid(
            bridge,
            "dispatch.allow_network",
            "gives the container a network of its own, which the egress proxy's allowlist ([network] allow or presets) would not bound; use one or the other".to_owned(),
        ));
    }
    let sandbox_ca = match reads.sandbox_ca_bundle {
        Some(bundle) => Some(sandbox_ca(bundle, repository)?),
        None => None,
    };
    let max_upload_bytes = reads
        .max_upload_bytes
        .map_or(DEFAULT_MAX_UPLOAD_BYTES, |bytes| bytes.value);
    let review_upload_bytes = reads
        .review_upload_bytes
        .map_or(DEFAULT_REVIEW_UPLOAD_BYTES, |bytes| bytes.value);
    Ok(Some(EgressSettings {
        policy: EgressPolicy {
            rules,
            deny,
            allow_http: reads.allow_http.is_some_and(|on| on.value),
            never: Vec::new(),
            loopback_for_tests: reads.loopback_for_tests.is_some_and(|on| on.value),
        },
        bounds: EgressBounds {
            max_upload_bytes,
            ..EgressBounds::default()
        },
        review_upload_bytes,
        sandbox_ca,
    }))
}

/// The sandbox's certificate authorities, read from the file `bundle` names and checked: a PEM file
/// of certificates, each a trust anchor. Never from a repository's file, trusted or not: it names a
/// file on the user's machine whose content goes into the sandbox.
fn sandbox_ca(
    bundle: Sourced<PathBuf>,
    repository: Option<&Path>,
) -> Result<SandboxCa, ConfigError> {
    const FIELD: &str = "network.sandbox_ca_bundle";
    let origin = bundle.origin.clone();
    if repository.is_some_and(|path| origin.file() == path) {
        return Err(invalid(
            &origin,
            FIELD,
            "is read only from your own configuration ($XDG_CONFIG_HOME/stet/config.toml), never from a repository's, trusted or not: it names a file on your machine that stet copies into the sandbox".to_owned(),
        ));
    }
    let path = bundle.into_path();
    let (pem, certificates) = crate::https::read_ca_file(&path)
        .map_err(|problem| invalid(&origin, FIELD, format!("{}: {problem}", path.display())))?;
    Ok(SandboxCa {
        path,
        pem,
        certificates: certificates.len(),
    })
}

fn invalid(origin: &Origin, field: &'static str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.clone(),
        field,
        problem,
    }
}

/// A value for a message: no control characters, bounded.
fn shown(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect()
}
