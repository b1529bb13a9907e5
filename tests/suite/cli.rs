//! The `stet` binary from the outside: `sanitize` as a Unix filter, `check-branch`, usage errors, and
//! the log files it leaves. Canary secrets are generated per run.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use stet_engine::credential::random_token;

fn stet(state: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stet"));
    command.env("XDG_STATE_HOME", state).env_remove("STET_LOG");
    command
}

fn run_with_stdin(mut command: Command, stdin: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || input.write_all(&bytes));
    let output = child.wait_with_output().unwrap();
    // A command that stops early (a usage error) closes its input: that is not a test failure.
    if let Err(error) = writer.join().unwrap() {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    output
}

fn log_text(state: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(state.join("stet/logs")).unwrap() {
        text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    text
}

#[test]
fn sanitize_masks_shapes_and_known_values_from_the_environment() {
    let state = tempfile::tempdir().unwrap();
    let github = format!("ghp_{}", random_token(36).unwrap());
    let known = format!("model-key-{}", random_token(32).unwrap());
    let input = format!("start\ntoken {github}\nkey {known}\n\u{1b}[31m{github}\u{1b}[0m\nend\n");
    let mut command = stet(state.path());
    command
        .args([
            "sanitize",
            "--known-value-env",
            "STET_TEST_MODEL_KEY",
            "--stats",
        ])
        .env("STET_TEST_MODEL_KEY", &known);
    let output = run_with_stdin(command, input.as_bytes());
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout,
        "start\ntoken [REDACTED:github-token]\nkey [REDACTED:env-stet-test-model-key]\n\u{1b}[31m[REDACTED:github-token]\u{1b}[0m\nend\n"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!("{} bytes read, 3 secrets masked", input.len())),
        "{stderr}"
    );
    let logs = log_text(state.path());
    assert!(logs.contains("stet sanitize finished"), "{logs}");
    for sink in [&stdout, &stderr, &logs] {
        assert!(!sink.contains(&github) && !sink.contains(&known));
    }
}

#[test]
fn sanitize_passes_invalid_utf8_through_and_streams_large_input() {
    let state = tempfile::tempdir().unwrap();
    let token = format!(
        "xoxb-{}-{}",
        random_token(12).unwrap(),
        random_token(24).unwrap()
    );
    let mut input: Vec<u8> = Vec::new();
    for i in 0..200_000u32 {
        input.extend_from_slice(format!("line {i} \u{fffd} ").as_bytes());
        input.extend_from_slice(&[0xff, 0xc3, 0x28, b'\n']);
    }
    let position = input.len() / 2;
    input.splice(position..position, format!(" {token} ").into_bytes());
    let output = run_with_stdin(
        {
            let mut c = stet(state.path());
            c.arg("sanitize");
            c
        },
        &input,
    );
    assert!(output.status.success());
    let mut expected = input.clone();
    expected.splice(
        position..position + token.len() + 2,
        b" [REDACTED:slack-token] ".iter().copied(),
    );
    assert_eq!(output.stdout.len(), expected.len());
    assert!(output.stdout == expected);
}

#[test]
fn sanitize_refuses_a_missing_or_unusable_known_value_with_exit_2() {
    let state = tempfile::tempdir().unwrap();
    let mut command = stet(state.path());
    command
        .args(["sanitize", "--known-value-env", "STET_TEST_UNSET_VARIABLE"])
        .env_remove("STET_TEST_UNSET_VARIABLE");
    let output = run_with_stdin(command, b"x");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("STET_TEST_UNSET_VARIABLE is not set"),
        "{stderr}"
    );

    let mut command = stet(state.path());
    command
        .args(["sanitize", "--known-value-env", "STET_TEST_SHORT"])
        .env("STET_TEST_SHORT", "abc");
    let output = run_with_stdin(command, b"x");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("STET_TEST_SHORT") && stderr.contains("8 to 1024 bytes"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn check_branch_prints_valid_names_and_explains_invalid_ones() {
    let state = tempfile::tempdir().unwrap();
    let output = stet(state.path())
        .args(["check-branch", "stet/fix-login", "--base", "main"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "stet/fix-login\n"
    );

    for (name, base, why) in [
        ("../evil", None, ".."),
        ("main", None, "main"),
        ("feature/x", Some("feature/x"), "base"),
        ("a b", None, "whitespace"),
    ] {
        let mut command = stet(state.path());
        command.args(["check-branch", name]);
        if let Some(base) = base {
            command.args(["--base", base]);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{name}");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8(output.stderr).unwrap().to_lowercase();
        assert!(stderr.contains(why), "{name}: {stderr}");
    }
}

#[test]
fn usage_errors_exit_2_and_help_documents_the_commands() {
    let state = tempfile::tempdir().unwrap();
    let output = stet(state.path()).arg("--no-such-flag").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    for (args, says) in [
        (&[][..], "stet demo"),
        (&["--headless"][..], "--brief ID|PATH"),
    ] {
        let output = stet(state.path()).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let help = stet(state.path()).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for word in [
        "sanitize",
        "check-branch",
        "demo",
        "--headless",
        "--brief",
        "--push",
        "--cost-ceiling",
        "Exit codes",
        "5  cost ceiling hit",
        "STET_LOG",
    ] {
        assert!(help.contains(word), "{word} missing from --help");
    }
    let help = stet(state.path())
        .args(["sanitize", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8(help.stdout)
            .unwrap()
            .contains("--known-value-env")
    );
}

#[test]
fn doctor_checks_the_engine_limits_and_disk() {
    let state = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("stet")).unwrap();
    std::fs::write(
        config.path().join("stet/config.toml"),
        "[harness]\nkind = \"script\"\n",
    )
    .unwrap();
    let stet = |state: &std::path::Path| {
        let mut command = stet(state);
        command
            .env("XDG_CONFIG_HOME", config.path())
            .current_dir(state);
        command
    };
    let output = stet(state.path()).arg("doctor").output().unwrap();
    let report = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(report.contains("[ok  ] engine: Docker"), "{report}");
    assert!(
        report.contains("[ok  ] limits: memory, swap, pids and cpu limits are enforced"),
        "{report}"
    );
    assert!(report.contains("disk: "), "{report}");
    assert!(report.contains("sandbox image"), "{report}");
    assert!(
        report.contains("[ok  ] mounts: bind (Docker at unix://")
            && report.contains("a local socket: bind mounts"),
        "{report}"
    );

    // A remote engine gets copies; bind mounts asked of it fail the check, naming the setting.
    let remote = stet(state.path())
        .arg("doctor")
        .env("DOCKER_HOST", "tcp://127.0.0.1:9")
        .output()
        .unwrap();
    let report = String::from_utf8(remote.stdout).unwrap();
    assert!(
        report.contains("[ok  ] mounts: copy (Docker at tcp://127.0.0.1:9, not a local socket"),
        "{report}"
    );
    std::fs::write(
        config.path().join("stet/config.toml"),
        "[harness]\nkind = \"script\"\n\n[runtime]\nmounts = \"bind\"\n",
    )
    .unwrap();
    let refused = stet(state.path())
        .arg("doctor")
        .env("DOCKER_HOST", "tcp://127.0.0.1:9")
        .output()
        .unwrap();
    let report = String::from_utf8(refused.stdout).unwrap();
    assert_eq!(refused.status.code(), Some(1), "{report}");
    assert!(
        report.contains("[FAIL] mounts: [runtime] mounts = \"bind\" cannot work with Docker at tcp://127.0.0.1:9 (chosen by DOCKER_HOST)")
            && report.contains("set [runtime] mounts = \"copy\""),
        "{report}"
    );
    std::fs::write(
        config.path().join("stet/config.toml"),
        "[harness]\nkind = \"script\"\n",
    )
    .unwrap();

    let unreachable = stet(state.path())
        .arg("doctor")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let report = String::from_utf8(unreachable.stdout).unwrap();
    assert_eq!(unreachable.status.code(), Some(1), "{report}");
    assert!(
        report.contains("[FAIL] engine") && report.contains("fix: start the Docker daemon"),
        "{report}"
    );
}

/// `stet doctor` run in a fresh checkout whose remote is `remote`, with `config` as the user's file
/// and `token` in `STET_TEST_DOCTOR_TOKEN`: its exit code and its report (stdout and stderr).
async fn doctor_in_checkout(config: &str, remote: &str, token: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let (state, home, repo) = (
        dir.path().join("state"),
        dir.path().join("config"),
        dir.path().join("repo"),
    );
    std::fs::create_dir_all(home.join("stet")).unwrap();
    std::fs::write(home.join("stet/config.toml"), config).unwrap();
    std::fs::create_dir(&repo).unwrap();
    super::support::git(&repo, &["init", "-q", "-b", "main"]);
    super::support::git(&repo, &["remote", "add", "origin", remote]);
    let token = token.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        stet(&state)
            .arg("doctor")
            .current_dir(&repo)
            .env("XDG_CONFIG_HOME", &home)
            .env("STET_TEST_DOCTOR_TOKEN", token)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), report)
}

/// The line of `report` that starts with `mark` and names `text`, and the fix line after it.
fn check_with_fix<'r>(report: &'r str, mark: &str, text: &str) -> (&'r str, &'r str) {
    let lines: Vec<&str> = report.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.starts_with(mark) && line.contains(text))
        .unwrap_or_else(|| panic!("no {mark} line naming {text:?}:\n{report}"));
    let fix = lines
        .get(at + 1)
        .filter(|line| line.trim_start().starts_with("fix: "))
        .unwrap_or_else(|| panic!("{:?} has no fix line:\n{report}", lines[at]));
    (lines[at], fix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_a_refused_gitlab_token_with_its_fix_and_never_the_token() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v4/user"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_json(serde_json::json!({"message": "401 Unauthorized"})),
        )
        .expect(1)
        .mount(&api)
        .await;
    let token = format!("glpat-{}", random_token(24).unwrap());
    let config = format!(
        "[forge]\nkind = \"gitlab\"\n[forge.gitlab]\napi_url = \"{0}/api/v4\"\ngit_url = \"{0}\"\ntoken_env = \"STET_TEST_DOCTOR_TOKEN\"\n",
        api.uri()
    );
    let (code, report) =
        doctor_in_checkout(&config, &format!("{}/group/sub/app.git", api.uri()), &token).await;
    assert_eq!(code, Some(1), "{report}");
    let (_, fix) = check_with_fix(&report, "[FAIL] forge", "gitlab");
    assert!(fix.contains("forge.gitlab"), "{fix}");
    assert!(
        !report.contains(&token),
        "the token reached the report:\n{report}"
    );
    let asked = api.received_requests().await.unwrap();
    assert!(
        asked.iter().all(|r| r.method.as_str() == "GET"),
        "{asked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_gitea_token_that_may_push_and_warns_that_the_fallback_is_not_narrow() {
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let api = MockServer::start().await;
    let token = random_token(40).unwrap();
    let json = |body: serde_json::Value| ResponseTemplate::new(200).set_body_json(body);
    Mock::given(method("GET"))
        .and(path("/api/v1/user"))
        .and(header("authorization", format!("token {token}").as_str()))
        .respond_with(json(serde_json::json!({"login": "alice"})))
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/repos/octo/app"))
        .respond_with(json(serde_json::json!({"full_name": "octo/app", "permissions": {"push": true, "pull": true}})))
        .mount(&api)
        .await;
    let config = format!(
        "[harness]\nkind = \"script\"\n[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"{}/api/v1\"\ntoken_env = \"STET_TEST_DOCTOR_TOKEN\"\n",
        api.uri()
    );
    let (code, report) =
        doctor_in_checkout(&config, &format!("{}/octo/app.git", api.uri()), &token).await;
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("[ok  ] forge: gitea:") && report.contains("alice"),
        "{report}"
    );
    assert!(
        report
            .contains("[ok  ] repository: gitea: octo/app: the account may read it and push to it"),
        "{report}"
    );
    let (warning, fix) = check_with_fix(&report, "[warn] credential", "fallback");
    assert!(warning.contains("password_command"), "{warning}");
    assert!(fix.contains("[credentials]"), "{fix}");
    assert!(
        !report.contains(&token),
        "the token reached the report:\n{report}"
    );
}

#[test]
fn sweep_reports_nothing_on_a_clean_state_and_exit_2_without_an_engine() {
    let state = tempfile::tempdir().unwrap();
    let output = stet(state.path()).arg("sweep").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "nothing to sweep: no dispatch left anything behind\n"
    );
    let unreachable = stet(state.path())
        .arg("sweep")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(2));
    let stderr = String::from_utf8(unreachable.stderr).unwrap();
    assert!(
        stderr.contains("Docker is not reachable at unix:///nonexistent/docker.sock"),
        "{stderr}"
    );
}

#[tokio::test]
async fn reviews_lists_and_shows_local_pull_requests_without_terminal_escapes() {
    use stet_engine::forge::Forge;
    let state = tempfile::tempdir().unwrap();
    let empty = stet(state.path()).arg("reviews").output().unwrap();
    assert!(empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stdout).starts_with("no reviews yet"));

    // Reviews belong to a remote that exists (the local forge knows it by its git directory).
    git2::Repository::init(state.path().join("repo")).unwrap();
    let forge = stet_engine::forge::local::LocalForge::new(
        state.path().join("repo"),
        &state.path().join("stet"),
    );
    let sanitizer = std::sync::Arc::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap());
    let draft = stet_engine::forge::PullRequestDraft {
        title: sanitizer.sanitize("Fix the loop"),
        body: sanitizer.sanitize(&format!(
            "The agent says:\n\u{1b}[2Jcleared your screen\n{}\n",
            stet_sanitize::display::inert_markdown("rename <name> & keep &lt;").text
        )),
        base: "main".into(),
        head: "stet/fix".into(),
    };
    let target = stet_engine::brief::Target {
        repo: "demo/app".into(),
        base: "main".into(),
        branch: None,
        pr: None,
    };
    forge.open_pull_request(&target, &draft).await.unwrap();

    let listed = stet(state.path()).arg("reviews").output().unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.starts_with("#1    open   stet/fix -> main  Fix the loop  (demo/app"),
        "{listed}"
    );
    // Two remotes may share a label: the listing names the remote too.
    assert!(
        listed.contains(&format!(
            "(demo/app at {}, updated ",
            state.path().join("repo").display()
        )),
        "{listed}"
    );
    let shown = stet(state.path()).args(["reviews", "1"]).output().unwrap();
    assert!(shown.status.success());
    let shown = String::from_utf8(shown.stdout).unwrap();
    assert!(
        shown.contains("The agent says:\ncleared your screen"),
        "the escape sequence is gone whole: {shown}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown}");
    assert!(
        shown.contains("rename <name> & keep &lt;"),
        "the terminal shows what the forge renders: {shown}"
    );
    let missing = stet(state.path()).args(["reviews", "9"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no review #9"));
}

#[test]
fn transcript_replays_a_capture_as_sanitized_event_lines() {
    let state = tempfile::tempdir().unwrap();
    let capture =
        std::fs::read_to_string("tests/fixtures/openhands-1.16/run-multi.stdout").unwrap();
    // A secret the agent printed in a command: the replay must show it masked.
    let planted = format!("ghp_{}", random_token(36).unwrap());
    let capture = capture.replacen(
        "\"kind\": \"TerminalAction\"",
        &format!("\"kind\": \"TerminalAction\", \"command\": \"export T={planted}\""),
        1,
    );
    let output = run_with_stdin(
        {
            let mut command = stet(state.path());
            command.args(["transcript", "-", "--brief", "multi"]);
            command
        },
        capture.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!stdout.contains(&planted), "{stdout}");
    assert!(stdout.contains("[REDACTED:github-token]"), "{stdout}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["brief"] == "multi" && e["v"] == stet_protocol::event::EVENT_SCHEMA_VERSION)
    );
    assert_eq!(events.last().unwrap()["kind"], "finished");
    assert_eq!(events.last().unwrap()["outcome"], "done");
    assert!(
        events
            .iter()
            .filter(|e| e["kind"] == "transcript" && e["item"] == "command")
            .count()
            >= 4
    );

    let text_only = stet(state.path())
        .args([
            "transcript",
            "tests/fixtures/openhands-1.16/run-text.stdout",
        ])
        .output()
        .unwrap();
    assert_eq!(
        text_only.status.code(),
        Some(1),
        "no finish: a failed outcome"
    );
    let missing = stet(state.path())
        .args(["transcript", "no/such/capture"])
        .output()
        .unwrap();
    assert_eq!(
        missing.status.code(),
        Some(2),
        "an unreadable capture is a usage error"
    );
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no/such/capture"));
}

/// The real Codex CLI's captures (tests/fixtures/codex) replayed as a dispatch reads them: its
/// commands, their output and exit codes, the usage of its running total, and the outcome from the
/// turn's end, never from Codex's exit code.
#[test]
fn transcript_replays_the_codex_captures() {
    let state = tempfile::tempdir().unwrap();
    let replay = |capture: &[u8]| {
        let output = run_with_stdin(
            {
                let mut command = stet(state.path());
                command.args(["transcript", "-", "--harness", "codex", "--brief", "codex"]);
                command
            },
            capture,
        );
        let events: Vec<serde_json::Value> = String::from_utf8(output.stdout.clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (output.status.code(), events)
    };
    let fixture = |name: &str| std::fs::read(format!("tests/fixtures/codex/{name}")).unwrap();

    let (code, events) = replay(&fixture("shell-edit.stdout"));
    assert_eq!(code, Some(0));
    let shown: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "transcript")
        .map(|e| (e["item"].as_str().unwrap(), e["text"].as_str().unwrap()))
        .collect();
    assert!(shown.contains(&(
        "command",
        r#"/bin/bash -lc "sed -i 's/Hello/Hello, stet/' greeting.txt && cat greeting.txt""#
    )));
    assert!(shown.contains(&("output", "Hello, stet\n[exit code 0]")));
    assert!(shown.contains(&("finish", "I edited greeting.txt: it now says Hello, stet.")));
    let usage: Vec<_> = events.iter().filter(|e| e["kind"] == "usage").collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(
        (
            &usage[0]["input_tokens"],
            &usage[0]["cached_tokens"],
            &usage[0]["output_tokens"]
        ),
        (&2500.into(), &1000.into(), &81.into())
    );
    assert_eq!(usage[0]["total_cost_usd"], 0.0, "Codex reports no cost");
    assert_eq!(events.last().unwrap()["outcome"], "done");

    let (code, events) = replay(&fixture("apply-patch.stdout"));
    assert_eq!(code, Some(0));
    assert!(events.iter().any(
        |e| e["item"] == "command" && e["text"] == "file change: add /workspace/notes/added.md"
    ));

    // Codex exited 1 here, and 0 in every other capture: the replay draws the outcome from
    // turn.failed, as it draws success from turn.completed.
    assert_eq!(fixture("error.exit"), b"1\n");
    let (code, events) = replay(&fixture("error.stdout"));
    assert_eq!(code, Some(1));
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"], "failed");
    assert!(
        finished["reason"]
            .as_str()
            .unwrap()
            .contains("scripted_refusal"),
        "{finished}"
    );

    // What Codex prints goes through the sanitizer like every agent's output.
    let planted = format!("ghp_{}", random_token(36).unwrap());
    let text = String::from_utf8(fixture("text.stdout"))
        .unwrap()
        .replace("I changed nothing.", &format!("the token is {planted}"));
    let (code, events) = replay(text.as_bytes());
    assert_eq!(code, Some(0));
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(&planted), "{all}");
    assert!(all.contains("[REDACTED:github-token]"), "{all}");
}

/// Claude Code's captures (tests/fixtures/claude) replayed as a dispatch reads them: its tool uses
/// and their results, the run's usage once with the CLI's own cost (a replay has no gateway to
/// count it), and the outcome from the result tree, never from the exit code or the subtype.
#[test]
fn transcript_replays_the_claude_code_captures() {
    let state = tempfile::tempdir().unwrap();
    let replay = |capture: &[u8]| {
        let output = run_with_stdin(
            {
                let mut command = stet(state.path());
                command.args([
                    "transcript",
                    "-",
                    "--harness",
                    "claude",
                    "--brief",
                    "claude",
                ]);
                command
            },
            capture,
        );
        let events: Vec<serde_json::Value> = String::from_utf8(output.stdout.clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (output.status.code(), events)
    };
    let fixture = |name: &str| std::fs::read(format!("tests/fixtures/claude/{name}")).unwrap();

    let (code, events) = replay(&fixture("bash-edit.stdout"));
    assert_eq!(code, Some(0));
    let shown: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "transcript")
        .map(|e| (e["item"].as_str().unwrap(), e["text"].as_str().unwrap()))
        .collect();
    assert!(shown.contains(&(
        "command",
        "sed -i 's/Hello/Hello, stet/' greeting.txt && cat greeting.txt"
    )));
    assert!(shown.contains(&("output", "Hello, stet\n[Bash done]")));
    assert!(shown.contains(&("finish", "The greeting now says Hello, stet.")));
    let usage: Vec<_> = events.iter().filter(|e| e["kind"] == "usage").collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(
        (&usage[0]["input_tokens"], &usage[0]["output_tokens"]),
        (&2000.into(), &100.into())
    );
    assert_eq!(usage[0]["total_cost_usd"], 0.0125);
    assert_eq!(events.last().unwrap()["outcome"], "done");

    // Two tool uses of one reply: both shown, the reply's usage once.
    let (code, events) = replay(&fixture("parallel.stdout"));
    assert_eq!(code, Some(0));
    let commands = events.iter().filter(|e| e["item"] == "command").count();
    assert_eq!(commands, 2);
    assert_eq!(events.iter().filter(|e| e["kind"] == "usage").count(), 1);

    // Claude Code exited 1 and its result's subtype says success: is_error and the terminal
    // reason fail the run.
    assert_eq!(fixture("error.exit"), b"1\n");
    let (code, events) = replay(&fixture("error.stdout"));
    assert_eq!(code, Some(1));
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"], "failed");
    assert!(
        finished["reason"]
            .as_str()
            .unwrap()
            .contains("api_error: API Error: 400 The scripted model refuses."),
        "{finished}"
    );
}

/// The scripted agent's own output, captured on the host and replayed: the same parsing a live
/// dispatch applies, ending with the outcome stet would draw.
#[test]
fn transcript_replays_a_scripted_agent_capture() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let instructions = workspace.path().join("task.md");
    std::fs::write(&instructions, "# Task: leave a note\n").unwrap();
    let planted = format!("ghp_{}", random_token(36).unwrap());
    let scenario = workspace.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        format!(
            "model = \"m\"\n[[step]]\nread_instructions = true\n[[step]]\nleak = {{ value = \"{planted}\" }}\n\
             [[step]]\nusage = {{ input_tokens = 10, output_tokens = 2, cost_usd = 0.5 }}\n[[step]]\nfinish = \"noted\"\n"
        ),
    )
    .unwrap();
    let capture = Command::new(env!("CARGO_BIN_EXE_stet-sandbox"))
        .args(["agent", "run", "--pace", "0", "--scenario"])
        .arg(&scenario)
        .arg("--instructions")
        .arg(&instructions)
        .arg("--workspace")
        .arg(workspace.path())
        .output()
        .unwrap();
    assert_eq!(capture.status.code(), Some(0), "{capture:?}");
    let output = run_with_stdin(
        {
            let mut command = stet(state.path());
            command.args(["transcript", "-", "--harness", "script", "--brief", "note"]);
            command
        },
        &capture.stdout,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!stdout.contains(&planted), "{stdout}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "transcript",
            "transcript",
            "usage",
            "transcript",
            "finished"
        ]
    );
    assert!(
        events[0]["text"]
            .as_str()
            .unwrap()
            .contains("# Task: leave a note")
    );
    assert_eq!(
        events[1]["text"],
        "export DEMO_TOKEN=[REDACTED:github-token]"
    );
    assert_eq!(events[2]["total_cost_usd"], 0.5);
    assert_eq!(events[4]["outcome"], "done");
}
