//! What `stet doctor` asks the engine (Docker, or Podman's compatible service), changing nothing:
//! that it answers, that it enforces the memory, swap, pids and cpu limits a sandbox relies on (a
//! cap the engine silently ignores leaves a sandbox that is not locked down: what it says of itself,
//! then by effect, with a container of the offline image created, read back and removed, never
//! started), and whether the offline image of this stet-sandbox executable is there.

use std::path::Path;

use super::DockerRuntime;
use crate::check::{Check, Status};
use crate::runtime::endpoint::Engine;
use crate::runtime::{DispatchLimits, ImageRef};

/// Every check of the engine `runtime` reaches, in order; after an unreachable engine, none more.
pub(super) async fn engine_checks(runtime: &DockerRuntime, binary: &Path) -> Vec<Check> {
    let docker = &runtime.docker;
    let endpoint = &runtime.endpoint;
    let mut checks = Vec::new();
    if let Err(error) = docker.ping().await {
        let host = endpoint.host.clone();
        checks.push(match super::socket_denied(&host) {
            Some(denied) => Check::problem(
                "engine",
                Status::Fail,
                denied.to_string(),
                "join the socket's group (then log in again), or use an engine you may reach",
            ),
            None => Check::problem(
                "engine",
                Status::Fail,
                format!(
                    "{} not reachable at {host} (chosen by {}): {error}",
                    endpoint.engine.display_name(),
                    endpoint.chosen_by
                ),
                match endpoint.engine {
                    Engine::Docker => {
                        "start the Docker daemon, or point [runtime] host or DOCKER_HOST at a running engine"
                    }
                    Engine::Podman => {
                        "start Podman's API service (`podman --runtime runc system service --time=0 unix://<socket>`), or point [runtime] host at it"
                    }
                },
            ),
        });
        return checks;
    }
    match docker.version().await {
        Ok(version) => checks.push(Check::ok(
            "engine",
            format!(
                "{} {} (API {}), {}/{}, at {} (chosen by {})",
                endpoint.engine.display_name(),
                version.version.unwrap_or_default(),
                version.api_version.unwrap_or_default(),
                version.os.unwrap_or_default(),
                version.arch.unwrap_or_default(),
                endpoint.host,
                endpoint.chosen_by
            ),
        )),
        Err(error) => checks.push(Check::problem(
            "engine",
            Status::Fail,
            format!("version request failed: {error}"),
            "check the engine's logs",
        )),
    }
    match docker.info().await {
        Ok(info) => {
            let cgroup = format!(
                "cgroup {} driver, version {}",
                info.cgroup_driver
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                info.cgroup_version
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            );
            let limits = [
                ("memory", info.memory_limit, "--memory"),
                ("swap", info.swap_limit, "--memory-swap"),
                ("pids", info.pids_limit, "--pids-limit"),
                ("cpu quota", info.cpu_cfs_quota, "--cpus"),
            ];
            let missing: Vec<&str> = limits
                .iter()
                .filter(|(_, enforced, _)| *enforced != Some(true))
                .map(|(_, _, flag)| *flag)
                .collect();
            if missing.is_empty() {
                checks.push(Check::ok(
                    "limits",
                    format!("memory, swap, pids and cpu limits are enforced ({cgroup})"),
                ));
            } else {
                checks.push(Check::problem(
                    "limits",
                    Status::Fail,
                    format!("the engine does not enforce {} ({cgroup})", missing.join(", ")),
                    "enable the missing cgroup controllers (e.g. boot with cgroup v2, or `swapaccount=1` for swap limits)",
                ));
            }
            for warning in info.warnings.unwrap_or_default() {
                checks.push(Check::problem(
                    "engine warning",
                    Status::Warn,
                    warning,
                    "see the engine's documentation for this warning",
                ));
            }
        }
        Err(error) => checks.push(Check::problem(
            "limits",
            Status::Fail,
            format!("info request failed: {error}"),
            "check the engine's logs",
        )),
    }
    let (check, image) = image_check(docker, binary).await;
    checks.push(check);
    if let Some(image) = image {
        checks.push(
            match runtime
                .check_limits(&image, &DispatchLimits::default())
                .await
            {
                Ok(()) => Check::ok(
                    "limits by effect",
                    "a container asked for memory, pids and cpu caps was recorded with every one"
                        .to_owned(),
                ),
                Err(refused) => Check::problem(
                    "limits by effect",
                    Status::Fail,
                    refused.to_string(),
                    "stet refuses to dispatch on this engine until it enforces every limit",
                ),
            },
        );
    }
    checks
}

/// Whether the offline image is there, and if so, the image to check the limits with.
async fn image_check(docker: &bollard::Docker, binary: &Path) -> (Check, Option<ImageRef>) {
    let hash = match file_sha256(binary) {
        Ok(hash) => hash,
        Err(error) => {
            let check = Check::problem(
                "sandbox image",
                Status::Warn,
                format!(
                    "cannot read the sandbox executable {}: {error}",
                    binary.display()
                ),
                "build or install stet-sandbox beside stet (`cargo install --path .` installs both)",
            );
            return (check, None);
        }
    };
    let tag = crate::image::tag_for(&hash);
    match docker.inspect_image(&tag).await {
        Ok(image) => {
            let id = image.id.unwrap_or_default();
            let check = Check::ok(
                "sandbox image",
                format!("offline sandbox image {tag} is present, pinned as {id}"),
            );
            (check, ImageRef::parse(&id, false).ok())
        }
        Err(_) => (
            Check::problem(
                "sandbox image",
                Status::Warn,
                format!("no offline sandbox image for this stet-sandbox executable ({tag})"),
                "run `stet image build-local` (stet demo builds it too); the limits are checked by effect once it is there",
            ),
            None,
        ),
    }
}

fn file_sha256(path: &Path) -> std::io::Result<String> {
    use sha2::Digest as _;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
