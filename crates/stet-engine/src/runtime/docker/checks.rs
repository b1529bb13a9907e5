//! What `stet doctor` asks the Docker engine, changing nothing: that it answers, that it enforces
//! the memory, swap, pids and cpu limits a sandbox relies on (a cap the engine silently ignores
//! leaves a sandbox that is not locked down), and whether the offline image of this stet-sandbox
//! executable is there.

use std::path::Path;

use bollard::Docker;

use crate::check::{Check, Status};

/// Every check of the engine at `docker`, in order; after an unreachable engine, none more.
pub(super) async fn engine_checks(docker: &Docker, binary: &Path) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Err(error) = docker.ping().await {
        let host = super::docker_host();
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
                format!("not reachable at {host}: {error}"),
                "start the Docker daemon, or point DOCKER_HOST at a running engine",
            ),
        });
        return checks;
    }
    match docker.version().await {
        Ok(version) => checks.push(Check::ok(
            "engine",
            format!(
                "Docker {} (API {}), {}/{}, at {}",
                version.version.unwrap_or_default(),
                version.api_version.unwrap_or_default(),
                version.os.unwrap_or_default(),
                version.arch.unwrap_or_default(),
                super::docker_host()
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
    checks.push(image_check(docker, binary).await);
    checks
}

async fn image_check(docker: &Docker, binary: &Path) -> Check {
    let hash = match file_sha256(binary) {
        Ok(hash) => hash,
        Err(error) => {
            return Check::problem(
                "sandbox image",
                Status::Warn,
                format!(
                    "cannot read the sandbox executable {}: {error}",
                    binary.display()
                ),
                "build or install stet-sandbox beside stet (`cargo install --path .` installs both)",
            );
        }
    };
    let tag = crate::image::tag_for(&hash);
    match docker.inspect_image(&tag).await {
        Ok(image) => Check::ok(
            "sandbox image",
            format!(
                "offline sandbox image {tag} is present, pinned as {}",
                image.id.unwrap_or_default()
            ),
        ),
        Err(_) => Check::problem(
            "sandbox image",
            Status::Warn,
            format!("no offline sandbox image for this stet-sandbox executable ({tag})"),
            "run `stet image build-local` (stet demo builds it too)",
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
