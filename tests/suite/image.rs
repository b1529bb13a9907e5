//! The offline sandbox image on the real engine, and `stet probe` measuring sandboxes from inside.
//!
//! Each hardening property is checked by effect with a positive control beside it where the effect is a
//! refusal (a connection refused only counts if the same probe connects when the network allows it).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::models::{ContainerCreateBody, EventMessageTypeEnum, HostConfig};
use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};

use stet_engine::image::{BINARY_PATH, BINARY_SHA256_LABEL, SandboxImage};

use super::support;

/// The host's stet, whose `image build-local` packages the sandbox executable.
const STET: &str = env!("CARGO_BIN_EXE_stet");
/// What the image carries: the sandbox side's executable, built beside `STET`.
const SANDBOX: &str = env!("CARGO_BIN_EXE_stet-sandbox");

fn unix_time_arg(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap();
    format!(
        "{}.{:09}",
        since_epoch.as_secs(),
        since_epoch.subsec_nanos()
    )
}

/// A container body for `stet <args>` in `image`.
fn stet_in(image: &SandboxImage, args: &[&str], host_config: HostConfig) -> ContainerCreateBody {
    let mut cmd = vec![BINARY_PATH.to_owned()];
    cmd.extend(args.iter().map(|arg| (*arg).to_owned()));
    ContainerCreateBody {
        image: Some(image.id.clone()),
        cmd: Some(cmd),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// DESIGN §5 row 11 in engine terms: no network, not root, no capabilities, read-only root, `/tmp` a
/// tmpfs the sandbox user owns.
fn locked_down() -> HostConfig {
    HostConfig {
        network_mode: Some("none".into()),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_owned(),
            "uid=65532,gid=65532".to_owned(),
        )])),
        ..Default::default()
    }
}

/// Runs `stet probe <args>` in a container and returns its JSON report.
async fn probe(
    image: &SandboxImage,
    args: &[&str],
    host_config: HostConfig,
    env: &[&str],
) -> Value {
    let mut probe_args = vec!["probe"];
    probe_args.extend_from_slice(args);
    let mut body = stet_in(image, &probe_args, host_config);
    body.user = Some("65532:65532".into());
    body.env = Some(env.iter().map(|e| (*e).to_owned()).collect());
    let finished = support::run_to_completion(&support::docker(), body).await;
    assert_eq!(finished.exit_code, 0, "{finished:?}");
    serde_json::from_str(&finished.stdout).unwrap_or_else(|err| panic!("{err}: {finished:?}"))
}

#[tokio::test]
async fn building_twice_reuses_the_image() {
    let first = support::sandbox_image().await;
    let binary_sha256 = format!("{:x}", Sha256::digest(std::fs::read(SANDBOX).unwrap()));
    assert_eq!(first.binary_sha256, binary_sha256);
    assert_eq!(first.tag, format!("stet-sandbox:{}", &binary_sha256[..12]));
    assert!(
        first.id.len() == 71
            && first.id.starts_with("sha256:")
            && first.id[7..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{}",
        first.id
    );

    let docker = support::docker();
    let before = SystemTime::now();
    let second =
        stet_engine::runtime::docker::offline_image::build_local(&docker, Path::new(SANDBOX))
            .await
            .unwrap();
    let after = SystemTime::now();
    assert_eq!(second, first);

    // The engine's own record: nothing was loaded, imported or tagged while building the second time.
    let filters = HashMap::from([("type", vec!["image"])]);
    let mut events = docker.events(Some(
        EventsOptionsBuilder::default()
            .since(&unix_time_arg(before))
            .until(&unix_time_arg(after))
            .filters(&filters)
            .build(),
    ));
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        assert_eq!(event.typ, Some(EventMessageTypeEnum::IMAGE));
        let actor = event.actor.as_ref().and_then(|actor| actor.id.clone());
        assert_ne!(
            actor.as_deref(),
            Some(first.id.as_str()),
            "second build touched the image: {event:?}"
        );
    }

    let inspected = docker.inspect_image(&first.id).await.unwrap();
    assert!(inspected.repo_tags.unwrap_or_default().contains(&first.tag));
    let labels = inspected.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get(BINARY_SHA256_LABEL), Some(&first.binary_sha256));
}

#[tokio::test]
async fn the_image_runs_stet_version() {
    let image = support::sandbox_image().await;
    let body = stet_in(&image, &["--version"], HostConfig::default());
    let finished = support::run_to_completion(&support::docker(), body).await;
    assert_eq!(finished.exit_code, 0, "{finished:?}");
    assert_eq!(
        finished.stdout.trim(),
        format!("stet {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test]
async fn probe_in_a_locked_down_container() {
    let image = support::sandbox_image().await;
    let (_listener, host) = support::host_listener().await;
    let report = probe(
        &image,
        &[
            "--connect",
            &host,
            "--find-env-in-cmdlines",
            "STET_PROBE_SECRET",
        ],
        locked_down(),
        &["STET_PROBE_SECRET=probe-secret-value-7f3a"],
    )
    .await;

    assert_eq!(report["uid"], 65532, "{report:#}");
    assert_eq!(report["gid"], 65532, "{report:#}");
    assert_eq!(report["cap_eff"], "0000000000000000", "{report:#}");
    assert_eq!(report["caps_all_dropped"], true, "{report:#}");
    assert_eq!(report["no_new_privs"], true, "{report:#}");
    assert_eq!(report["root_writable"], false, "{report:#}");
    assert_eq!(report["tmp_writable"], true, "{report:#}");
    assert_eq!(report["workspace_writable"], false, "{report:#}");
    assert_eq!(report["docker_socket_present"], false, "{report:#}");

    let mounts = report["mounts"].as_array().unwrap();
    let mount = |target: &str| {
        mounts
            .iter()
            .find(|m| m["target"] == target)
            .unwrap_or_else(|| panic!("no mount at {target}: {report:#}"))
    };
    let root_options = mount("/")["options"].as_str().unwrap();
    assert!(root_options.split(',').any(|o| o == "ro"), "{root_options}");
    assert_eq!(mount("/tmp")["fstype"], "tmpfs");

    let connect = &report["connect"][0];
    assert_eq!(connect["address"], host.as_str());
    assert_eq!(connect["ok"], false, "{report:#}");
    assert!(connect["error"].is_string(), "{report:#}");

    let secret = &report["cmdlines_containing"][0];
    assert_eq!(secret["name"], "STET_PROBE_SECRET");
    assert_eq!(secret["env_has_value"], true);
    assert_eq!(secret["pids"], serde_json::json!([]));
}

/// The positive control of the refused connection above: on the default bridge the same probe reaches
/// the same listener.
#[tokio::test]
async fn probe_connects_where_the_network_allows_it() {
    let image = support::sandbox_image().await;
    let (_listener, host) = support::host_listener().await;
    let report = probe(&image, &["--connect", &host], HostConfig::default(), &[]).await;
    assert_eq!(
        report["connect"],
        serde_json::json!([{ "address": host, "ok": true, "error": null }])
    );
}

#[tokio::test]
async fn probe_forks_stop_at_the_pids_limit() {
    let image = support::sandbox_image().await;
    let limited = HostConfig {
        pids_limit: Some(8),
        ..locked_down()
    };
    let report = probe(&image, &["--fork-up-to", "64"], limited, &[]).await;
    let started = report["forks"]["started"].as_u64().unwrap();
    assert!((1..8).contains(&started), "{report:#}");
    let error = report["forks"]["error"].as_str().unwrap();
    assert!(error.contains("os error 11"), "{error}");

    let report = probe(&image, &["--fork-up-to", "3"], locked_down(), &[]).await;
    assert_eq!(
        report["forks"],
        serde_json::json!({ "started": 3, "error": null })
    );
}

#[tokio::test]
async fn probe_allocation_past_the_memory_limit_is_killed() {
    let image = support::sandbox_image().await;
    let limited = || HostConfig {
        memory: Some(64 * 1024 * 1024),
        memory_swap: Some(64 * 1024 * 1024),
        ..locked_down()
    };
    let report = probe(&image, &["--allocate-mb", "8"], limited(), &[]).await;
    assert_eq!(
        report["allocate"],
        serde_json::json!({ "allocated_mb": 8, "error": null })
    );

    let mut body = stet_in(&image, &["probe", "--allocate-mb", "256"], limited());
    body.user = Some("65532:65532".into());
    let finished = support::run_to_completion(&support::docker(), body).await;
    assert_eq!(finished.exit_code, 137, "{finished:?}");
    assert!(
        finished.stderr.contains("allocated and touched 16 MiB"),
        "{finished:?}"
    );
    assert!(finished.stdout.is_empty(), "{finished:?}");
}

/// On the host: the probe finds a value in another process's command line (the positive control of the
/// empty list inside the sandbox), and reads the value only from its environment.
#[test]
fn probe_finds_an_environment_value_in_another_command_line() {
    let marker = format!("STET_MARKER_{}", uuid::Uuid::new_v4().simple());
    let state = tempfile::tempdir().unwrap();
    // `stet sanitize` blocks on its input, so it stays alive with the marker in its argv.
    let mut holder = Command::new(STET)
        .args(["sanitize", "--known-value-env", &marker])
        .env(&marker, "a value long enough to be masked")
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let output = Command::new(SANDBOX)
        .args([
            "probe",
            "--find-env-in-cmdlines",
            "PROBE_NEEDLE",
            "--find-env-in-cmdlines",
            "STET_PROBE_SURELY_UNSET",
        ])
        .env("PROBE_NEEDLE", &marker)
        .env_remove("STET_PROBE_SURELY_UNSET")
        .output()
        .unwrap();

    drop(holder.stdin.take());
    let held = holder.wait().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(held.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["cmdlines_containing"],
        serde_json::json!([
            { "name": "PROBE_NEEDLE", "env_has_value": true, "pids": [holder.id()] },
            { "name": "STET_PROBE_SURELY_UNSET", "env_has_value": false, "pids": [] },
        ])
    );
}

#[test]
fn probe_hold_returns_when_input_closes() {
    let mut child = Command::new(SANDBOX)
        .args(["probe", "--hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert!(output.stdout.is_empty());
}

#[test]
fn build_local_names_an_unreachable_docker() {
    let output = Command::new(STET)
        .args(["image", "build-local", "--binary", SANDBOX])
        .env("DOCKER_HOST", "unix:///nonexistent/stet-test/docker.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Docker is not reachable at unix:///nonexistent/stet-test/docker.sock: "),
        "{stderr}"
    );
    assert!(stderr.contains("is the daemon running?"), "{stderr}");
}

/// What `stet <args>` printed on stdout, having succeeded.
async fn stet_prints(args: &[&str]) -> String {
    let output = tokio::process::Command::new(STET)
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn build_local_command_prints_id_and_tag() {
    let image = support::sandbox_image().await;
    assert_eq!(
        stet_prints(&["image", "build-local", "--binary", SANDBOX]).await,
        format!("{} {}\n", image.id, image.tag)
    );
}

#[tokio::test]
async fn build_local_packages_the_sandbox_executable_beside_stet_by_default() {
    let image = support::sandbox_image().await;
    assert_eq!(
        stet_prints(&["image", "build-local"]).await,
        format!("{} {}\n", image.id, image.tag),
        "the image of {SANDBOX}, not of {STET}"
    );
}

#[test]
fn a_stet_without_its_sandbox_executable_says_which_file_is_missing() {
    let installed = tempfile::tempdir().unwrap();
    let lone = installed.path().join("stet");
    std::fs::copy(STET, &lone).unwrap();
    let output = Command::new(&lone)
        .args(["image", "build-local"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let missing = installed.path().join("stet-sandbox");
    assert!(
        stderr.contains(&format!("{} is not there", missing.display())),
        "{stderr}"
    );
    assert!(stderr.contains("cargo install --path ."), "{stderr}");
}

/// The attack: a directory the user runs `stet` from (a cloned repository, say) holds a link named
/// `stet` to the installed one and a `stet-sandbox` of its own, and puts itself first on `PATH`. The
/// image is packaged from the file beside the executable that runs, found through no link, no
/// working directory and no `PATH`: here there is none, and the planted one is never packaged.
#[test]
fn a_stet_sandbox_beside_a_link_to_stet_or_in_the_working_directory_is_not_packaged() {
    let installed = tempfile::tempdir().unwrap();
    let lone = installed.path().join("stet");
    std::fs::copy(STET, &lone).unwrap();
    let planted = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&lone, planted.path().join("stet")).unwrap();
    std::fs::copy(SANDBOX, planted.path().join("stet-sandbox")).unwrap();
    let path = format!(
        "{}:{}",
        planted.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let output = Command::new(planted.path().join("stet"))
        .args(["image", "build-local"])
        .current_dir(planted.path())
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let missing = installed.path().join("stet-sandbox");
    assert!(
        stderr.contains(&format!("{} is not there", missing.display())),
        "{stderr}"
    );
}
