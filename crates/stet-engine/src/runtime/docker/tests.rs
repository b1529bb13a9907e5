//! Unit tests of `crate::runtime::docker`, in a file of their own so the module reads as code.

use std::path::PathBuf;

use super::*;
use crate::runtime::{DispatchLimits, SandboxUser};
use stet_protocol::event::DispatchId;

fn spec(dir: &Path) -> SandboxSpec {
    let workspace = dir.join("workspace");
    let outputs = dir.join("outputs");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&outputs).unwrap();
    SandboxSpec {
        dispatch: DispatchId::new(),
        image: ImageRef::parse(&format!("sha256:{}", "a".repeat(64)), false).unwrap(),
        workspace,
        outputs,
        mounts: MountMode::Bind,
        gateway: None,
        limits: DispatchLimits::default(),
        network: NetworkPolicy::None,
        user: SandboxUser {
            uid: 1000,
            gid: 1000,
        },
        keepalive: vec!["/usr/local/bin/stet".into(), "sandbox-idle".into()],
        state_label: "0123456789abcdef".into(),
        warm: None,
    }
}

#[test]
fn the_hardened_configuration_sets_every_restriction() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path());
    let body = hardened_create_body(&spec).unwrap();
    let host = body.host_config.clone().unwrap();
    assert_eq!(body.user.as_deref(), Some("1000:1000"));
    let labels = body.labels.unwrap();
    assert_eq!(labels[DISPATCH_LABEL], spec.dispatch.to_string());
    assert_eq!(labels[STATE_LABEL], "0123456789abcdef");
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.memory, Some(spec.limits.memory_bytes));
    assert_eq!(
        host.memory_swap, host.memory,
        "no swap beyond the memory cap"
    );
    assert_eq!(host.nano_cpus, Some(spec.limits.nano_cpus));
    assert_eq!(host.pids_limit, Some(spec.limits.pids));
    let ulimits = host.ulimits.as_deref().unwrap_or_default();
    assert_eq!(ulimits.len(), 1);
    assert_eq!(ulimits[0].name.as_deref(), Some("fsize"));
    assert_eq!(ulimits[0].hard, Some(spec.limits.file_bytes));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(
        host.security_opt,
        Some(vec!["no-new-privileges".to_owned()])
    );
    assert_eq!(host.readonly_rootfs, Some(true));
    let tmpfs = host.tmpfs.unwrap();
    assert!(tmpfs["/tmp"].contains("uid=1000,gid=1000"));
    assert!(tmpfs[SANDBOX_HOME].contains("uid=1000,gid=1000,mode=0700"));
    let mounts = host.mounts.unwrap();
    let targets: Vec<_> = mounts
        .iter()
        .map(|m| (m.target.clone().unwrap(), m.typ))
        .collect();
    assert_eq!(
        targets,
        vec![
            (WORKSPACE_MOUNT.to_owned(), Some(MountType::BIND)),
            (OUTPUTS_MOUNT.to_owned(), Some(MountType::BIND))
        ]
    );
}

#[test]
fn the_hardened_configuration_never_grants_privilege_or_host_access() {
    let dir = tempfile::tempdir().unwrap();
    let body = hardened_create_body(&spec(dir.path())).unwrap();
    let host = body.host_config.clone().unwrap();
    assert_eq!(host.privileged, Some(false));
    assert!(host.cap_add.is_none());
    assert!(host.binds.is_none(), "only the typed mounts, nothing else");
    assert!(host.pid_mode.is_none(), "no host pid namespace");
    assert_eq!(host.ipc_mode.as_deref(), Some("private"));
    assert!(host.userns_mode.is_none());
    assert!(host.devices.is_none());
    let json = serde_json::to_string(&body).unwrap();
    assert!(!json.contains("docker.sock"));
    assert!(
        !json.contains("\"host\""),
        "no host network, pid or ipc mode: {json}"
    );
}

#[test]
fn network_is_bridged_only_when_the_guardrail_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path());
    spec.network = NetworkPolicy::Bridge;
    let body = hardened_create_body(&spec).unwrap();
    assert_eq!(
        body.host_config.unwrap().network_mode.as_deref(),
        Some("bridge")
    );
}

#[test]
fn root_users_and_bad_mount_sources_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut root = spec(dir.path());
    root.user = SandboxUser { uid: 0, gid: 0 };
    assert!(matches!(
        hardened_create_body(&root),
        Err(RuntimeError::RootUser)
    ));

    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("workspace"), &link).unwrap();
    for (path, why) in [
        (link, "symbolic link"),
        (PathBuf::from("relative/ws"), "absolute"),
        (dir.path().join("missing"), "exist"),
    ] {
        let mut bad = spec(dir.path());
        bad.workspace = path;
        let error = hardened_create_body(&bad).unwrap_err().to_string();
        assert!(error.contains(why), "{error}");
    }
}

#[test]
fn a_denied_pull_is_told_apart_from_a_missing_image() {
    let image = ImageRef::parse(&format!("r.example/x@sha256:{}", "b".repeat(64)), false).unwrap();
    let stream = |error: &str| BollardError::DockerStreamError {
        error: error.to_owned(),
    };
    let denied = classify_pull_error(&image, stream("unauthorized: authentication required"));
    assert!(matches!(denied, RuntimeError::PullDenied { .. }));
    assert!(
        denied.to_string().contains("log in to the registry"),
        "{denied}"
    );
    let missing = classify_pull_error(&image, stream("manifest unknown: manifest unknown"));
    assert!(matches!(missing, RuntimeError::ImageNotFound { .. }));
    let other = classify_pull_error(&image, stream("connection reset by peer"));
    assert!(matches!(other, RuntimeError::Pull { .. }));
}

#[test]
fn an_engine_warning_about_a_limit_refuses_the_sandbox_and_names_the_flag() {
    let warning = "Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded.".to_owned();
    let error = dropped_limit(&[warning]).unwrap();
    assert!(error.to_string().contains("--pids-limit"), "{error}");
    assert!(dropped_limit(&["something harmless".to_owned()]).is_none());
}

#[test]
fn copy_mode_shares_no_host_path() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SandboxSpec {
        mounts: MountMode::Copy,
        // Copy mode reads no host directory: these need not exist.
        workspace: PathBuf::from("/nonexistent/workspace"),
        outputs: PathBuf::from("/nonexistent/outputs"),
        ..spec(dir.path())
    };
    let host = hardened_create_body(&spec).unwrap().host_config.unwrap();
    assert!(host.binds.is_none());
    let mounts = host.mounts.unwrap();
    assert_eq!(mounts.len(), 2);
    for (mount, target) in mounts.iter().zip([WORKSPACE_MOUNT, OUTPUTS_MOUNT]) {
        assert_eq!(mount.target.as_deref(), Some(target));
        assert_eq!(mount.typ, Some(MountType::VOLUME));
        // Anonymous: removed with the container, named by no one else.
        assert_eq!(mount.source, None);
        let driver = mount
            .volume_options
            .as_ref()
            .and_then(|options| options.driver_config.as_ref())
            .unwrap();
        let options = driver.options.as_ref().unwrap();
        assert_eq!(options["type"], "tmpfs");
        assert!(
            options["o"].contains(&format!("size={}", spec.limits.file_bytes))
                && options["o"].contains("uid=1000,gid=1000"),
            "{}",
            options["o"]
        );
    }
    assert_eq!(host.readonly_rootfs, Some(true));
}
