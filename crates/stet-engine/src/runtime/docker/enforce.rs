//! Whether the engine will enforce every limit stet asks for, found by effect: the limits the
//! engine recorded for a container (its inspect output) against the ones asked. Rootless Podman on
//! a cgroup v1 host accepts memory, pids and cpu caps and records none of them ("Resource limits
//! are not supported and ignored on cgroups V1 rootless systems" in its log, nothing in the API's
//! warnings), so a sandbox there would run unbounded: stet refuses it before an agent runs. Also
//! what Podman needs in the container's spec to start the hardened container at all (explicit
//! `nofile` and `nproc` ulimits: its defaults exceed the hard limits of many hosts; tmpfs owned by
//! the sandbox user through its own `U` option, since it refuses `uid=`/`gid=`).

use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};

use super::DockerRuntime;
use crate::runtime::endpoint::Engine;
use crate::runtime::{DispatchLimits, ImageRef, Result, RuntimeError};

/// The open-file limit a sandbox gets on Podman (soft and hard).
pub const PODMAN_NOFILE: i64 = 4096;
/// The process limit (per user, `RLIMIT_NPROC`) a sandbox gets on Podman; the pids cgroup is the
/// real bound per sandbox, this only has to be set, and high enough for several sandboxes at once.
pub const PODMAN_NPROC: i64 = 16384;

/// What `engine` needs in a hardened container's spec besides what every engine gets: on Podman,
/// explicit `nofile` and `nproc` ulimits (its defaults, 1048576 files, exceed the hard limit of
/// hosts like these, and runc then fails with "error setting rlimit type 7").
pub fn adjust_for_engine(body: &mut ContainerCreateBody, engine: Engine) {
    if engine != Engine::Podman {
        return;
    }
    let host = body.host_config.get_or_insert_with(HostConfig::default);
    // Podman refuses tmpfs `uid=`/`gid=` options ("unknown mount option"); its `U` gives the
    // tmpfs to the container's user instead.
    for options in host.tmpfs.iter_mut().flat_map(|tmpfs| tmpfs.values_mut()) {
        let mut kept: Vec<&str> = options
            .split(',')
            .filter(|option| !option.starts_with("uid=") && !option.starts_with("gid="))
            .filter(|option| *option != "U")
            .collect();
        kept.push("U");
        *options = kept.join(",");
    }
    let ulimits = host.ulimits.get_or_insert_with(Vec::new);
    for (name, value) in [("nofile", PODMAN_NOFILE), ("nproc", PODMAN_NPROC)] {
        ulimits.retain(|limit| limit.name.as_deref() != Some(name));
        ulimits.push(ResourcesUlimits {
            name: Some(name.to_owned()),
            soft: Some(value),
            hard: Some(value),
        });
    }
}

/// The limits the engine recorded that differ from the ones asked, as `name asked, recorded`
/// phrases; empty when every one was applied.
pub fn unapplied(recorded: &HostConfig, asked: &DispatchLimits) -> Vec<String> {
    let cpu = match (recorded.nano_cpus, recorded.cpu_quota, recorded.cpu_period) {
        (Some(nano), _, _) if nano > 0 => nano,
        (_, Some(quota), Some(period)) if quota > 0 && period > 0 => {
            quota.saturating_mul(1_000_000_000) / period
        }
        _ => 0,
    };
    [
        ("memory", asked.memory_bytes, recorded.memory.unwrap_or(0)),
        (
            "memory+swap",
            asked.memory_bytes,
            recorded.memory_swap.unwrap_or(0),
        ),
        ("pids", asked.pids, recorded.pids_limit.unwrap_or(0)),
        ("cpu (nano-CPUs)", asked.nano_cpus, cpu),
    ]
    .into_iter()
    .filter(|(_, asked, recorded)| asked != recorded)
    .map(|(name, asked, recorded)| format!("{name} {asked} asked, {recorded} recorded"))
    .collect()
}

/// The fix for an engine that drops limits, by what it is.
fn fix_for(engine: Engine, cgroup_version: &str) -> &'static str {
    match (engine, cgroup_version) {
        (Engine::Podman, "1") => {
            "rootless Podman enforces no memory, pids or cpu limits on a cgroup v1 host: boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1) and delegate the memory, pids and cpu controllers to your user (systemd: Delegate=memory pids cpu for user@.service), or use rootful Podman (/run/podman/podman.sock) or Docker"
        }
        (Engine::Podman, _) => {
            "delegate the memory, pids and cpu cgroup controllers to your user (systemd: Delegate=memory pids cpu for user@.service), or use rootful Podman or Docker"
        }
        (Engine::Docker, _) => {
            "enable the engine's memory, pids and cpu cgroup controllers (e.g. boot with cgroup v2, or `swapaccount=1` for swap limits)"
        }
    }
}

impl DockerRuntime {
    /// Refuses, with the reason and the fix, when `recorded` (what the engine recorded for a
    /// container) lacks any of `asked`.
    pub(super) async fn refuse_unapplied(
        &self,
        recorded: &HostConfig,
        asked: &DispatchLimits,
    ) -> Result<()> {
        let missing = unapplied(recorded, asked);
        if missing.is_empty() {
            return Ok(());
        }
        let cgroup_version = self
            .docker
            .info()
            .await
            .ok()
            .and_then(|info| info.cgroup_version)
            .map(|version| version.to_string())
            .unwrap_or_default();
        let endpoint = &self.endpoint;
        Err(RuntimeError::LimitsNotEnforced {
            engine: endpoint.engine.display_name(),
            host: endpoint.host.clone(),
            reason: format!(
                "a container asked for limits was recorded without them ({}; cgroup v{})",
                missing.join(", "),
                if cgroup_version.is_empty() {
                    "?"
                } else {
                    &cgroup_version
                }
            ),
            fix: fix_for(endpoint.engine, &cgroup_version),
        })
    }

    /// Creates (never starts) a container of `image` with `limits`, reads back what the engine
    /// recorded, removes it, and refuses an engine that dropped any limit.
    pub async fn check_limits(&self, image: &ImageRef, limits: &DispatchLimits) -> Result<()> {
        let suffix = crate::credential::random_token(12).map_err(|error| RuntimeError::Engine {
            container: "stet-limits-probe".to_owned(),
            operation: "naming",
            detail: error.to_string(),
        })?;
        let name = format!("stet-limits-probe-{}", suffix.to_ascii_lowercase());
        self.check_limits_as(&name, image, limits).await
    }

    /// [`DockerRuntime::check_limits`] with a probe container named `name`, which the caller may
    /// have journaled first.
    pub async fn check_limits_as(
        &self,
        name: &str,
        image: &ImageRef,
        limits: &DispatchLimits,
    ) -> Result<()> {
        let name = name.to_owned();
        let mut body = ContainerCreateBody {
            image: Some(image.as_str().to_owned()),
            entrypoint: Some(vec!["/nonexistent".to_owned()]),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_owned()),
                memory: Some(limits.memory_bytes),
                memory_swap: Some(limits.memory_bytes),
                nano_cpus: Some(limits.nano_cpus),
                pids_limit: Some(limits.pids),
                cap_drop: Some(vec!["ALL".to_owned()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        adjust_for_engine(&mut body, self.endpoint.engine);
        let engine_error = |operation, error: bollard::errors::Error| RuntimeError::Engine {
            container: name.clone(),
            operation,
            detail: error.to_string(),
        };
        self.docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                body,
            )
            .await
            .map_err(|error| engine_error("create (limits probe)", error))?;
        let inspected = self.docker.inspect_container(&name, None).await;
        let removed = self
            .docker
            .remove_container(
                &name,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await;
        let recorded = inspected
            .map_err(|error| engine_error("inspect (limits probe)", error))?
            .host_config
            .unwrap_or_default();
        removed.map_err(|error| engine_error("remove (limits probe)", error))?;
        self.refuse_unapplied(&recorded, limits).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HostConfig` as Podman 4.3.1 recorded it here for a container created with memory 256 MiB,
    /// pids 64, 1 CPU: rootful (every limit kept, the cpu as quota/period too) and rootless on
    /// cgroup v1 (none kept).
    const ROOTFUL: &str =
        include_str!("../../../../../tests/fixtures/engines/podman-rootful-hostconfig.json");
    const ROOTLESS: &str = include_str!(
        "../../../../../tests/fixtures/engines/podman-rootless-cgroupv1-hostconfig.json"
    );

    fn asked() -> DispatchLimits {
        DispatchLimits {
            memory_bytes: 268_435_456,
            pids: 64,
            nano_cpus: 1_000_000_000,
            ..DispatchLimits::default()
        }
    }

    #[test]
    fn rootful_podman_recorded_every_limit() {
        let recorded: HostConfig = serde_json::from_str(ROOTFUL).unwrap();
        assert_eq!(unapplied(&recorded, &asked()), Vec::<String>::new());
        let quota_only = HostConfig {
            nano_cpus: Some(0),
            ..recorded
        };
        assert!(unapplied(&quota_only, &asked()).is_empty());
    }

    #[test]
    fn rootless_podman_on_cgroup_v1_recorded_none_and_each_is_named() {
        let recorded: HostConfig = serde_json::from_str(ROOTLESS).unwrap();
        let missing = unapplied(&recorded, &asked());
        assert_eq!(
            missing,
            [
                "memory 268435456 asked, 0 recorded",
                "memory+swap 268435456 asked, 0 recorded",
                "pids 64 asked, 0 recorded",
                "cpu (nano-CPUs) 1000000000 asked, 0 recorded",
            ]
        );
        assert!(fix_for(Engine::Podman, "1").contains("cgroup v2"));
        assert!(fix_for(Engine::Podman, "1").contains("Delegate="));
    }

    #[test]
    fn podman_gets_explicit_nofile_and_nproc_and_its_own_tmpfs_owner_and_docker_gets_nothing_new() {
        let tmpfs = std::collections::HashMap::from([(
            "/tmp".to_owned(),
            "rw,nosuid,size=1024,uid=1000,gid=1000,mode=1777".to_owned(),
        )]);
        let mut body = ContainerCreateBody {
            host_config: Some(HostConfig {
                tmpfs: Some(tmpfs),
                ..Default::default()
            }),
            ..Default::default()
        };
        let docker = body.clone();
        adjust_for_engine(&mut body, Engine::Docker);
        assert_eq!(body, docker);
        adjust_for_engine(&mut body, Engine::Podman);
        adjust_for_engine(&mut body, Engine::Podman);
        let host = body.host_config.unwrap();
        assert_eq!(
            host.tmpfs.unwrap()["/tmp"],
            "rw,nosuid,size=1024,mode=1777,U"
        );
        let ulimits = host.ulimits.unwrap();
        let names: Vec<_> = ulimits.iter().filter_map(|u| u.name.as_deref()).collect();
        assert_eq!(names, ["nofile", "nproc"]);
        assert!(ulimits.iter().all(|u| u.soft == u.hard && u.hard.is_some()));
    }
}
