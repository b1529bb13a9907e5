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

/// A fresh checkout with one brief, in `home`, and no configuration at all.
fn bare_checkout(home: &Home) -> std::path::PathBuf {
    let repo = home.path().join("repo");
    std::fs::create_dir_all(repo.join(".stet/briefs")).unwrap();
    std::fs::write(
        repo.join(".stet/briefs/tidy.toml"),
        "title = \"Tidy\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n\n[[items]]\ntext = \"Tidy up.\"\n",
    )
    .unwrap();
    super::support::git(&repo, &["init", "--quiet", "--initial-branch=main"]);
    repo
}

/// `stet doctor` in `dir` with `home`'s XDG directories and `XDG_RUNTIME_DIR` at `home/run` (made
/// empty and private here): its exit code and report.
fn doctor(home: &Home, dir: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    use std::os::unix::fs::PermissionsExt;
    let run = home.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut command = home.stet();
    command
        .current_dir(dir)
        .env("XDG_RUNTIME_DIR", &run)
        .envs(env.iter().copied())
        .arg("doctor");
    let output = command.output().unwrap();
    (
        output.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Every path under `dir`, directories included, sorted; none when it is not there.
fn tree(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            paths.extend(tree(&path));
        }
        paths.push(path);
    }
    paths.sort();
    paths
}

#[test]
fn doctor_fails_where_stet_would_exit_2_and_changes_nothing_on_disk() {
    let home = Home::new();
    let repo = bare_checkout(&home);
    std::fs::create_dir(home.path().join("run")).unwrap();
    let before = tree(home.path());
    let (code, report) = doctor(&home, &repo, &[]);
    assert_eq!(code, Some(1), "{report}");
    let user_file = home.user_config();
    let (failure, fix) = {
        let lines: Vec<&str> = report.lines().collect();
        let at = lines
            .iter()
            .position(|line| line.starts_with("[FAIL] harness: "))
            .unwrap_or_else(|| panic!("{report}"));
        (lines[at], lines[at + 1])
    };
    assert!(failure.contains("harness.openhands.model"), "{report}");
    assert!(fix.contains(&user_file.display().to_string()), "{report}");
    assert!(
        report.contains(&format!(
            "[ok  ] configuration: user file {} (absent",
            user_file.display()
        )) && report.contains("repository file: no repository stet.toml"),
        "{report}"
    );
    assert!(!report.contains("this machine can run"), "{report}");
    // Nothing was made: no state directory, no socket place, nothing else in the home.
    assert!(!home.path().join("state").exists(), "{report}");
    assert_eq!(
        tree(&home.path().join("run")),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(before, tree(home.path()));
    // The dispatch it vouches for does not start: stet exits 2 for the reason doctor fails on.
    let mut headless = home.stet();
    headless
        .current_dir(&repo)
        .args(["--headless", "--brief", "tidy"]);
    let dispatch = headless.output().unwrap();
    let said = String::from_utf8_lossy(&dispatch.stderr).into_owned();
    assert_eq!(dispatch.status.code(), Some(2), "{said}");
    assert!(said.contains("harness.openhands.model"), "{said}");
}

#[test]
fn doctor_outside_a_repository_says_what_it_did_not_check() {
    let home = Home::new();
    home.add_user_config("[harness]\nkind = \"script\"\n");
    let (code, report) = doctor(&home, home.path(), &[]);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("[----] not checked: a repository's stet.toml, its forge and its briefs"),
        "{report}"
    );
    assert!(
        report.contains("repository file: not in a repository"),
        "{report}"
    );
    assert!(
        report.ends_with("nothing checked failed, but a dispatch needs what was not checked too\n"),
        "{report}"
    );
    assert!(!home.path().join("state").exists(), "{report}");
}

/// The Codex harness is checked as OpenHands is: its model named, its image pinned and present (a
/// missing one's fix names the Codex build), its endpoint configured.
#[test]
fn doctor_checks_the_codex_harness_its_image_and_its_endpoint() {
    let home = Home::new();
    let repo = bare_checkout(&home);
    let absent = format!("sha256:{}", "0".repeat(64));
    home.add_user_config(&format!(
        "[harness]\nkind = \"codex\"\n[harness.codex]\nmodel = \"gpt-5.1-codex\"\n[dispatch]\nimage = \"{absent}\"\n"
    ));
    let (code, report) = doctor(&home, &repo, &[]);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("[ok  ] harness: codex, model gpt-5.1-codex"),
        "{report}"
    );
    assert!(
        report.contains("docker/dispatch/build-offline --harness codex"),
        "{report}"
    );
    assert!(
        report.contains("the codex harness reaches its model only through stet's gateway"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_asks_the_model_endpoint_for_its_models_with_the_key_a_dispatch_sends() {
    use stet_scripted_model::{DEMO_MODEL, ScriptedModel};
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let image = super::support::sandbox_image().await;
    let home = Home::new();
    let repo = bare_checkout(&home);
    let prices = home.path().join("prices.toml");
    std::fs::write(
        &prices,
        format!("[models.\"{DEMO_MODEL}\"]\ninput = 1.0\noutput = 2.0\n"),
    )
    .unwrap();
    home.add_user_config(&format!(
        "[harness.openhands]\nmodel = \"openai/{DEMO_MODEL}\"\n[dispatch]\nimage = \"{}\"\ncost_ceiling_usd = 0.5\n[model]\nbase_url = \"{}\"\napi_key_env = \"STET_TEST_DOCTOR_MODEL_KEY\"\nprices = {}\n",
        image.id,
        model.base_url(),
        super::headless::toml_string(&prices)
    ));
    let key = format!("sk-{}", stet_engine::credential::random_token(32).unwrap());
    let (code, report) = {
        let (home, repo, key) = (&home, &repo, key.clone());
        tokio::task::block_in_place(move || {
            doctor(home, repo, &[("STET_TEST_DOCTOR_MODEL_KEY", key.as_str())])
        })
    };
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains(&format!(
            "[ok  ] model endpoint: GET {}/models with the key in STET_TEST_DOCTOR_MODEL_KEY: answered, and lists {DEMO_MODEL}",
            model.base_url()
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "[ok  ] harness image: {}: present, pinned",
            image.id
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "[ok  ] prices: openai/{DEMO_MODEL} is priced; a dispatch stops at $0.50"
        )),
        "{report}"
    );
    assert!(!report.contains(&key), "{report}");
    // One free request, with the key a dispatch would send; nothing that is billed.
    let asked = model.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].path, "/v1/models");
    assert_eq!(
        asked[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );

    // A key the endpoint refuses fails the check.
    let refusing = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .respond_with(wiremock::ResponseTemplate::new(401))
        .mount(&refusing)
        .await;
    let config = std::fs::read_to_string(home.user_config())
        .unwrap()
        .replace(&model.base_url(), &format!("{}/v1", refusing.uri()));
    std::fs::write(home.user_config(), config).unwrap();
    let (code, report) = tokio::task::block_in_place(|| {
        doctor(
            &home,
            &repo,
            &[("STET_TEST_DOCTOR_MODEL_KEY", key.as_str())],
        )
    });
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("[FAIL] model endpoint: GET ") && report.contains("refused (401)"),
        "{report}"
    );
}

/// Claude Code's endpoint speaks Anthropic's API: doctor asks it for its models with the key as
/// `x-api-key` and the API version, never as a bearer token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_asks_an_anthropic_endpoint_with_its_own_key_header_for_claude_code() {
    use stet_scripted_model::{DEMO_MODEL, ScriptedModel};
    let model = ScriptedModel::serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let home = Home::new();
    let repo = bare_checkout(&home);
    home.add_user_config(&format!(
        "[harness]\nkind = \"claude\"\n[harness.claude]\nmodel = \"{DEMO_MODEL}\"\n[model]\nbase_url = \"{}\"\napi_key_env = \"STET_TEST_DOCTOR_MODEL_KEY\"\n",
        model.base_url(),
    ));
    let key = format!(
        "sk-ant-{}",
        stet_engine::credential::random_token(32).unwrap()
    );
    let (_, report) = {
        let (home, repo, key) = (&home, &repo, key.clone());
        tokio::task::block_in_place(move || {
            doctor(home, repo, &[("STET_TEST_DOCTOR_MODEL_KEY", key.as_str())])
        })
    };
    assert!(
        report.contains(&format!(
            "[ok  ] model endpoint: GET {}/models with the key in STET_TEST_DOCTOR_MODEL_KEY: answered, and lists {DEMO_MODEL}",
            model.base_url()
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!("[ok  ] harness: claude, model {DEMO_MODEL}")),
        "{report}"
    );
    assert!(!report.contains(&key), "{report}");
    let asked = model.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].path, "/v1/models");
    assert_eq!(asked[0].header("x-api-key"), Some(key.as_str()));
    assert_eq!(asked[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(asked[0].header("authorization"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_local_refuses_what_is_not_an_executable_for_the_engines_platform() {
    use sha2::Digest;
    let docker = super::support::docker();
    let engine_arch = docker.version().await.unwrap().arch.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho not stet\n").unwrap();
    let mut foreign = std::fs::read(env!("CARGO_BIN_EXE_stet-sandbox")).unwrap();
    let other: u16 = if engine_arch == "arm64" { 0x3e } else { 0xb7 };
    foreign[18..20].copy_from_slice(&other.to_le_bytes());
    let foreign_file = dir.path().join("stet-sandbox-elsewhere");
    std::fs::write(&foreign_file, &foreign).unwrap();
    for (file, what) in [
        (Path::new("/etc/passwd").to_owned(), "is a text file"),
        (script, "is a script"),
        (foreign_file, "is an ELF executable for "),
    ] {
        let output = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_stet"))
                .args(["image", "build-local", "--binary"])
                .arg(&file)
                .env("XDG_STATE_HOME", dir.path())
                .output()
                .unwrap()
        });
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{said}");
        assert!(said.contains(what), "{said}");
        assert!(
            said.contains(&format!(
                "not an executable for the engine's platform (linux/{engine_arch})"
            )),
            "{said}"
        );
        assert_eq!(output.stdout, b"", "{said}");
        // Nothing was loaded under the tag that file would have had.
        let hash = sha2::Sha256::digest(std::fs::read(&file).unwrap());
        let tag = stet_engine::image::tag_for(
            &hash.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        );
        assert!(
            docker.inspect_image(&tag).await.is_err(),
            "{tag} was loaded"
        );
    }
}

#[test]
fn an_image_that_is_not_the_harness_s_is_named_so() {
    use stet_scripted_model::{DEMO_MODEL, ScriptedModel};
    docker_ready();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime
        .block_on(ScriptedModel::serve("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let image = runtime.block_on(super::support::sandbox_image());
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    // The OpenHands harness, told to run in the scripted agent's image, which holds no OpenHands.
    project.home.add_user_config(&format!(
        "\n[dispatch]\nimage = \"{}\"\n[model]\nbase_url = \"{}\"\n",
        image.id,
        model.base_url()
    ));
    let config = std::fs::read_to_string(project.home.user_config())
        .unwrap()
        .replace("[harness]\nkind = \"script\"", &format!("[harness]\nkind = \"openhands\"\n[harness.openhands]\nmodel = \"openai/{DEMO_MODEL}\""));
    std::fs::write(project.home.user_config(), config).unwrap();
    let (code, _, stderr) = with_stderr_in_a_file(project.headless(&[]), project.home.path());
    assert_eq!(code, Some(1), "{stderr}");
    let reason = stderr
        .lines()
        .find(|line| line.starts_with("stet: brief tidy-notes: failed"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        reason.contains("so it is not an image of the openhands harness"),
        "{reason}"
    );
    assert!(reason.contains("exited with code 12"), "{reason}");
}

#[test]
fn version_names_the_commit_and_the_profile() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stet"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let said = String::from_utf8(output.stdout).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let commit = if root.join(".git").exists() {
        format!(
            "commit {}",
            // The tree may be another account's (CI's non-root lane): git's ownership check is
            // not what this test is about.
            super::support::git(
                root,
                &["-c", "safe.directory=*", "rev-parse", "--short=12", "HEAD"]
            )
            .trim()
        )
    } else {
        "unknown commit".to_owned()
    };
    // The tests are built with the dev profile's settings, which cargo calls "debug".
    assert_eq!(
        said,
        format!(
            "stet {} ({commit}, debug build)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// Runs `stet <args>` with `home`'s directories in `dir`: exit code and stdout parsed as one JSON
/// object on one line.
fn json_of(home: &Home, dir: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let output = home.stet().current_dir(dir).args(args).output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    let value: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"));
    assert_eq!(value["v"], 1, "{value}");
    (output.status.code(), value)
}

#[test]
fn doctor_json_holds_every_check_the_report_shows() {
    let home = Home::new();
    home.add_user_config("[harness]\nkind = \"script\"\n");
    let (code, value) = json_of(&home, home.path(), &["doctor", "--json"]);
    assert_eq!(code, Some(0), "{value}");
    assert_eq!(value["ok"], true, "{value}");
    let (_, report) = doctor(&home, home.path(), &[]);
    let names: Vec<&str> = value["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|check| {
            assert!(
                ["ok", "warn", "fail"].contains(&check["status"].as_str().unwrap()),
                "{check}"
            );
            check["name"].as_str().unwrap()
        })
        .collect();
    let shown: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with('['))
        .filter_map(|line| line.get(7..)?.split_once(": ").map(|(name, _)| name))
        .filter(|name| *name != "not checked")
        .collect();
    assert_eq!(names, shown, "{report}");
    assert_eq!(names[0], "configuration");
    assert!(
        value["unchecked"][0]
            .as_str()
            .unwrap()
            .starts_with("a repository's stet.toml"),
        "{value}"
    );
}

#[test]
fn trust_list_json_says_what_each_trusted_file_holds_now() {
    let home = Home::new();
    let repo = bare_checkout(&home);
    std::fs::write(repo.join("stet.toml"), "[dispatch]\nallow_network = true\n").unwrap();
    let (code, empty) = json_of(&home, &repo, &["trust", "--list", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(empty["files"], serde_json::json!([]), "{empty}");
    let trusted = home
        .stet()
        .current_dir(&repo)
        .arg("trust")
        .output()
        .unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    let (_, listed) = json_of(&home, &repo, &["trust", "--list", "--json"]);
    let file = &listed["files"][0];
    assert_eq!(file["now"], "trusted", "{listed}");
    assert_eq!(file["sha256"].as_str().unwrap().len(), 64, "{listed}");
    assert!(
        file["path"].as_str().unwrap().ends_with("/repo/stet.toml"),
        "{listed}"
    );
    std::fs::write(
        repo.join("stet.toml"),
        "[dispatch]\nallow_network = false\n",
    )
    .unwrap();
    let (_, changed) = json_of(&home, &repo, &["trust", "--list", "--json"]);
    assert_eq!(changed["files"][0]["now"], "changed", "{changed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_and_sweep_json_list_what_the_text_lists() {
    use stet_engine::forge::Forge;
    let home = Home::new();
    let (_, none) = json_of(&home, home.path(), &["reviews", "--json"]);
    assert_eq!(none["reviews"], serde_json::json!([]), "{none}");
    git2::Repository::init(home.path().join("remote")).unwrap();
    let forge =
        stet_engine::forge::local::LocalForge::new(home.path().join("remote"), &home.state());
    let sanitizer = std::sync::Arc::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap());
    for title in ["Fix the loop", "Tidy \u{202e}up"] {
        let draft = stet_engine::forge::PullRequestDraft {
            title: sanitizer.sanitize(title),
            body: sanitizer.sanitize("The agent says:\n\u{1b}[2Jcleared\n"),
            base: "main".into(),
            head: format!("stet/{}", title.len()),
        };
        let target = stet_engine::brief::Target {
            repo: "demo/app".into(),
            base: "main".into(),
            branch: None,
            pr: None,
        };
        forge.open_pull_request(&target, &draft).await.unwrap();
    }
    let (code, listed) =
        tokio::task::block_in_place(|| json_of(&home, home.path(), &["reviews", "--json"]));
    assert_eq!(code, Some(0));
    let reviews = listed["reviews"].as_array().unwrap();
    assert_eq!(reviews.len(), 2, "{listed}");
    assert_eq!(reviews[0]["number"], 1);
    assert_eq!(reviews[0]["title"], "Fix the loop");
    assert_eq!(
        reviews[1]["title"], "Tidy up",
        "what the display policy hides is gone"
    );
    assert!(reviews[0].get("body").is_none(), "{listed}");
    let (_, one) =
        tokio::task::block_in_place(|| json_of(&home, home.path(), &["reviews", "1", "--json"]));
    assert_eq!(one["review"]["body"], "The agent says:\ncleared\n", "{one}");

    let (code, swept) =
        tokio::task::block_in_place(|| json_of(&home, home.path(), &["sweep", "--json"]));
    assert_eq!(code, Some(0), "{swept}");
    assert_eq!(swept["records_closed"], 0, "{swept}");
    for list in [
        "containers_removed",
        "containers_already_gone",
        "directories_removed",
        "credentials_revoked",
        "credentials_left_to_expire",
        "failures",
    ] {
        assert_eq!(swept[list], serde_json::json!([]), "{list}: {swept}");
    }
}
