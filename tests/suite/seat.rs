//! The user's seat, from the outside: what the built binary says on a stderr that is a file, what
//! `stet doctor` checks and leaves, what `stet image build-local` refuses, and what `stet --version`
//! names (issue 29).

use std::path::Path;
use std::process::Stdio;

use super::headless::{Home, Project, docker_ready, scenario};

/// Runs `command` with stderr sent to a file (not a terminal, not a pipe): its exit code, stdout
/// and what the file holds.
fn with_stderr_in_a_file(
    mut command: std::process::Command,
    dir: &Path,
) -> (Option<i32>, String, String) {
    let log = dir.join("err.log");
    let output = command
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        std::fs::read_to_string(log).unwrap(),
    )
}

#[test]
fn a_headless_failure_leaves_its_reason_on_one_line_of_a_stderr_file() {
    docker_ready();
    let project = Project::new(&scenario(&[
        "say = \"Building.\"",
        "fail = { code = 7, message = \"the build is broken\" }",
    ]));
    // Without a repository file, nothing is said about one.
    std::fs::remove_file(project.repo.join("stet.toml")).unwrap();
    super::support::git(&project.repo, &["commit", "--quiet", "-am", "no stet.toml"]);
    let (code, stdout, stderr) = with_stderr_in_a_file(project.headless(&[]), project.home.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.contains("\"kind\":\"finished\""), "{stdout}");
    let reasons: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("stet: brief tidy-notes: failed (exit 1): "))
        .collect();
    assert_eq!(reasons.len(), 1, "{stderr}");
    assert!(reasons[0].contains("exited with code 7"), "{stderr}");
    assert!(!stderr.contains("no repository stet.toml"), "{stderr}");
}

#[test]
fn a_configuration_error_is_one_line_on_a_stderr_file() {
    let home = Home::new();
    home.add_user_config("[dispatch]\ntimeout_secs = \"10m\"\n");
    let repo = home.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    super::support::git(&repo, &["init", "--quiet"]);
    let mut command = home.stet();
    command.current_dir(&repo).args(["--headless", "--all"]);
    let (code, _, stderr) = with_stderr_in_a_file(command, home.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("stet: ") && stderr.contains("config.toml:2:"),
        "{stderr}"
    );
}
