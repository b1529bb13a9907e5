//! Unit tests of `crate::agent::act`, in a file of their own so the module reads as code.

use std::net::TcpListener;

use serde_json::json;

use super::super::{run, run_with_model};
use super::*;
use stet_scripted_model::{Behaviour, ScriptedModel};

/// A run of `steps` (TOML `[[step]]` tables) in a fresh workspace.
struct Run {
    code: Result<u8>,
    records: Vec<AgentRecord>,
    raw: Vec<String>,
    workspace: tempfile::TempDir,
}

fn act_out(steps: &str) -> Run {
    act_out_in(tempfile::tempdir().unwrap(), steps)
}

fn act_out_in(workspace: tempfile::TempDir, steps: &str) -> Run {
    act_out_using(workspace, steps, |options, out| run(options, out))
}

/// A run of `steps` whose asks go to `model`.
fn ask_out(model: Option<&ModelEndpoint>, steps: &str) -> Run {
    act_out_using(tempfile::tempdir().unwrap(), steps, |options, out| {
        run_with_model(options, model, out)
    })
}

fn act_out_using(
    workspace: tempfile::TempDir,
    steps: &str,
    runner: impl FnOnce(&AgentOptions, &mut Vec<u8>) -> Result<u8>,
) -> Run {
    let files = tempfile::tempdir().unwrap();
    let scenario = files.path().join("scenario.toml");
    std::fs::write(&scenario, format!("model = \"demo-model\"\n{steps}")).unwrap();
    let instructions = files.path().join("task.md");
    std::fs::write(&instructions, "\n# Task: Greet the user\n\n## More\n").unwrap();
    let options = AgentOptions {
        scenario,
        instructions,
        pace: 0.0,
        workspace: workspace.path().to_owned(),
    };
    let mut out = Vec::new();
    let code = runner(&options, &mut out);
    let text = String::from_utf8(out).unwrap();
    let mut records = Vec::new();
    let mut raw = Vec::new();
    for line in text.lines() {
        match serde_json::from_str::<AgentRecord>(line) {
            Ok(record) => records.push(record),
            Err(_) => raw.push(line.to_owned()),
        }
    }
    Run {
        code,
        records,
        raw,
        workspace,
    }
}

fn message(text: &str) -> AgentRecord {
    AgentRecord::Message { text: text.into() }
}
fn command(text: &str) -> AgentRecord {
    AgentRecord::Command { text: text.into() }
}
fn output(text: &str) -> AgentRecord {
    AgentRecord::Output { text: text.into() }
}
fn error(text: &str) -> AgentRecord {
    AgentRecord::Error { text: text.into() }
}

#[test]
fn talking_thinking_reading_and_finishing() {
    let run = act_out(
        "[[step]]\nsay = \"hi\"\npause = 5\n[[step]]\nthink = \"hmm\"\n[[step]]\nread_instructions = true\n[[step]]\nfinish = \"all done\"\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records.len(), 4);
    assert_eq!(run.records[0], message("hi"));
    assert_eq!(run.records[1], AgentRecord::Thought { text: "hmm".into() });
    let AgentRecord::Message { text } = &run.records[2] else {
        panic!("{:?}", run.records[2])
    };
    assert!(text.contains("task.md"), "{text}");
    assert!(text.ends_with("\"# Task: Greet the user\""), "{text}");
    assert_eq!(
        run.records[3],
        AgentRecord::Finish {
            summary: "all done".into()
        }
    );
}

#[test]
fn edits_change_the_workspace_and_are_described() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("old.txt"), "x").unwrap();
    std::fs::create_dir(workspace.path().join("old")).unwrap();
    std::fs::write(workspace.path().join("old/inner"), "x").unwrap();
    let run = act_out_in(
        workspace,
        r#"
[[step]]
write = { path = "src/main.rs", content = "fn main() {\n    greet();\n}\n" }
[[step]]
replace = { path = "src/main.rs", find = "greet();", with = "greet(name);\n    count();" }
[[step]]
append = { path = "NOTES.md", content = "one line\n" }
[[step]]
symlink = { path = ".git/hooks/pre-commit", target = "/etc/passwd" }
[[step]]
remove = "old.txt"
[[step]]
remove = "old"
"#,
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        run.records,
        vec![
            command("write src/main.rs (3 lines)"),
            command("edit src/main.rs: replace 1 line with 2 lines"),
            command("append to NOTES.md (1 line)"),
            command("symlink .git/hooks/pre-commit -> /etc/passwd"),
            command("remove old.txt"),
            command("remove old"),
        ]
    );
    let root = run.workspace.path();
    assert_eq!(
        std::fs::read_to_string(root.join("src/main.rs")).unwrap(),
        "fn main() {\n    greet(name);\n    count();\n}\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("NOTES.md")).unwrap(),
        "one line\n"
    );
    assert_eq!(
        std::fs::read_link(root.join(".git/hooks/pre-commit")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert!(!root.join("old.txt").exists());
    assert!(!root.join("old").exists());
}

#[test]
fn a_failed_edit_is_an_error_record_and_ends_the_run_with_one() {
    let run = act_out(
        "[[step]]\nwrite = { path = \"a.txt\", content = \"abc\" }\n[[step]]\nreplace = { path = \"a.txt\", find = \"zzz\", with = \"y\" }\n[[step]]\nsay = \"never\"\n",
    );
    assert_eq!(run.code.unwrap(), 1);
    let AgentRecord::Error { text } = run.records.last().unwrap() else {
        panic!("{:?}", run.records)
    };
    assert!(text.starts_with("step 2: replace in "), "{text}");
    assert!(text.contains("a.txt"), "{text}");
    assert!(text.contains("\"zzz\""), "{text}");
    assert!(!run.records.contains(&message("never")));

    let run = act_out("[[step]]\nremove = \"missing\"\n");
    assert_eq!(run.code.unwrap(), 1);
    let AgentRecord::Error { text } = &run.records[1] else {
        panic!("{:?}", run.records)
    };
    assert!(text.starts_with("step 1: remove "), "{text}");
    assert!(text.contains("missing"), "{text}");
}

#[test]
fn a_daemon_is_started_and_not_waited_for() {
    let workspace = tempfile::tempdir().unwrap();
    // The background process waits for the test to open this FIFO, then leaves a marker.
    let fifo = workspace.path().join("release");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let marker = workspace.path().join("written-later");
    let script = format!(
        "cat {} > /dev/null; touch {}",
        fifo.display(),
        marker.display()
    );
    let run = act_out_in(
        workspace,
        &format!(
            "[[step]]\ndaemon = [\"/bin/sh\", \"-c\", {script:?}]\n[[step]]\ndaemon = [\"/nonexistent/program\"]\n[[step]]\nsay = \"done\"\n"
        ),
    );
    assert_eq!(run.code.unwrap(), 0);
    assert!(!marker.exists(), "the agent did not wait for it");
    std::fs::write(&fifo, "go").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the background process never ran on"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let AgentRecord::Output { text } = &run.records[1] else {
        panic!("{:?}", run.records)
    };
    assert!(text.ends_with("in the background"), "{text}");
    let AgentRecord::Error { text } = &run.records[3] else {
        panic!("{:?}", run.records)
    };
    assert!(text.starts_with("step 2: cannot start"), "{text}");
    assert_eq!(run.records[4], message("done"));
}

#[test]
fn a_program_runs_in_the_workspace_and_its_lines_and_exit_code_are_output() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("here.txt"), "").unwrap();
    let run = act_out_in(
        workspace,
        r#"
[[step]]
run = ["/bin/sh", "-c", "ls; echo two; echo three >&2; exit 3"]
[[step]]
run = ["/nonexistent/program"]
[[step]]
say = "still here"
"#,
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        run.records[0],
        command("/bin/sh -c \"ls; echo two; echo three >&2; exit 3\"")
    );
    let mut printed: Vec<&AgentRecord> = run.records[1..4].iter().collect();
    printed.sort_by_key(|record| format!("{record:?}"));
    assert_eq!(
        printed,
        vec![&output("here.txt"), &output("three"), &output("two")]
    );
    assert_eq!(run.records[4], output("[exit code 3]"));
    assert_eq!(run.records[5], command("/nonexistent/program"));
    let AgentRecord::Error { text } = &run.records[6] else {
        panic!("{:?}", run.records)
    };
    assert!(
        text.starts_with("step 2: cannot start \"/nonexistent/program\""),
        "{text}"
    );
    assert_eq!(run.records[7], message("still here"));
}

#[test]
fn a_long_output_line_comes_in_bounded_records() {
    let run = act_out(&format!(
        "[[step]]\nrun = [\"/bin/sh\", \"-c\", \"head -c {} /dev/zero | tr '\\\\0' a\"]\n",
        MAX_OUTPUT_LINE * 2 + 5
    ));
    let lengths: Vec<usize> = run.records[1..run.records.len() - 1]
        .iter()
        .map(|record| match record {
            AgentRecord::Output { text } => text.len(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(lengths, vec![MAX_OUTPUT_LINE, MAX_OUTPUT_LINE, 5]);
}

#[test]
fn usage_reports_the_scenario_model() {
    let run = act_out(
        "[[step]]\nusage = { input_tokens = 1200, output_tokens = 80, cached_tokens = 600, cost_usd = 0.0042 }\n[[step]]\nusage = { input_tokens = 1, output_tokens = 2 }\n",
    );
    assert_eq!(
        run.records,
        vec![
            AgentRecord::Usage {
                model: "demo-model".into(),
                input_tokens: 1200,
                output_tokens: 80,
                cached_tokens: 600,
                cost_usd: Some(0.0042)
            },
            AgentRecord::Usage {
                model: "demo-model".into(),
                input_tokens: 1,
                output_tokens: 2,
                cached_tokens: 0,
                cost_usd: None
            },
        ]
    );
}

#[test]
fn leaks_print_the_value_or_a_fresh_github_shaped_token() {
    let run = act_out(
        "[[step]]\nleak = { value = \"plain-value\" }\n[[step]]\nleak = { shape = \"github\" }\n[[step]]\nleak = { shape = \"github\" }\n",
    );
    assert_eq!(run.records[0], output("export DEMO_TOKEN=plain-value"));
    let tokens: Vec<&str> = run.records[1..]
        .iter()
        .map(|record| match record {
            AgentRecord::Output { text } => text.strip_prefix("export DEMO_TOKEN=").unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    for token in &tokens {
        let body = token.strip_prefix("ghp_").unwrap();
        assert_eq!(body.len(), GITHUB_TOKEN_BODY);
        assert!(body.bytes().all(|b| b.is_ascii_alphanumeric()), "{token}");
    }
    assert_ne!(tokens[0], tokens[1]);
}

#[test]
fn chmod_sets_the_mode_and_plant_appends_a_token_line_never_printing_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::create_dir(workspace.path().join("bin")).unwrap();
    std::fs::write(workspace.path().join("bin/run"), "#!/bin/sh\n").unwrap();
    std::fs::write(workspace.path().join("app.env"), "MODE=dev\n").unwrap();
    let run = act_out_in(
        workspace,
        r#"
[[step]]
chmod = { path = "bin/run", mode = 0o755 }
[[step]]
plant = { path = "app.env", shape = "github" }
[[step]]
plant = { path = "deep/new.txt", value = "plain-value" }
[[step]]
chmod = { path = "missing", mode = 0o755 }
"#,
    );
    assert_eq!(
        run.code.unwrap(),
        1,
        "a chmod of a missing file fails the run"
    );
    let root = run.workspace.path();
    let mode = std::fs::metadata(root.join("bin/run"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    let planted = std::fs::read_to_string(root.join("app.env")).unwrap();
    let token = planted
        .strip_prefix("MODE=dev\nDEMO_TOKEN=")
        .and_then(|rest| rest.strip_suffix('\n'))
        .unwrap();
    let body = token.strip_prefix("ghp_").unwrap();
    assert_eq!(body.len(), GITHUB_TOKEN_BODY);
    assert_eq!(
        std::fs::read_to_string(root.join("deep/new.txt")).unwrap(),
        "DEMO_TOKEN=plain-value\n"
    );
    assert_eq!(
        run.records[..3],
        [
            command("chmod 755 bin/run"),
            command("append to app.env (1 line)"),
            command("append to deep/new.txt (1 line)"),
        ]
    );
    assert!(
        run.records
            .iter()
            .all(|record| !format!("{record:?}").contains(token)),
        "the planted token is never printed"
    );
}

#[test]
fn network_reports_how_the_connection_went_and_never_fails_the_run() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap();
    let closed = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let run = act_out(&format!(
        "[[step]]\nnetwork = \"{open}\"\n[[step]]\nnetwork = \"{closed}\"\n[[step]]\nfinish = \"ok\"\n"
    ));
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        run.records[0],
        output(&format!("connect {open}: connected"))
    );
    assert_eq!(
        run.records[1],
        output(&format!("connect {closed}: refused"))
    );
}

#[test]
fn flood_prints_raw_lines_of_the_given_length() {
    let run = act_out(
        "[[step]]\nflood = { lines = 1000, bytes_per_line = 300 }\n[[step]]\nfinish = \"done\"\n",
    );
    assert_eq!(run.raw.len(), 1000);
    assert!(
        run.raw
            .iter()
            .all(|line| line.len() == 300 && line.starts_with("abc"))
    );
    assert_eq!(
        run.records,
        vec![AgentRecord::Finish {
            summary: "done".into()
        }]
    );
}

#[test]
fn fail_and_give_up_print_an_error_and_exit_with_their_codes() {
    let run = act_out("[[step]]\nfail = { code = 7, message = \"it broke\" }\n");
    assert_eq!(run.code.unwrap(), 7);
    assert_eq!(run.records, vec![error("it broke")]);
    let run = act_out("[[step]]\ngive_up = \"too hard\"\n");
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records, vec![error("too hard")]);
    let run = act_out("[[step]]\nsay = \"bye\"\n");
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records, vec![message("bye")]);
}

/// A writer that takes a few lines, then fails as a closed pipe does.
struct ClosingPipe {
    lines_left: usize,
    written: Vec<u8>,
}

impl Write for ClosingPipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.lines_left == 0 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.lines_left -= buf
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            .min(self.lines_left);
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn forever_beats_every_second_until_its_output_closes() {
    let files = tempfile::tempdir().unwrap();
    let scenario = files.path().join("scenario.toml");
    std::fs::write(&scenario, "model = \"m\"\n[[step]]\nforever = true\n").unwrap();
    let options = AgentOptions {
        scenario,
        instructions: files.path().join("task.md"),
        pace: 1.0,
        workspace: files.path().to_owned(),
    };
    let mut pipe = ClosingPipe {
        lines_left: 1,
        written: Vec::new(),
    };
    let started = std::time::Instant::now();
    let error = run(&options, &mut pipe).unwrap_err();
    assert!(matches!(error, AgentError::Write(_)), "{error:?}");
    assert!(started.elapsed() >= 2 * HEARTBEAT);
    assert_eq!(
        String::from_utf8(pipe.written).unwrap(),
        "{\"type\":\"thought\",\"text\":\"still working (1 s)\"}\n"
    );
}

#[test]
fn a_missing_instruction_file_is_an_error_record_naming_it() {
    let files = tempfile::tempdir().unwrap();
    let scenario = files.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        "model = \"m\"\n[[step]]\nread_instructions = true\n",
    )
    .unwrap();
    let options = AgentOptions {
        scenario,
        instructions: files.path().join("absent.md"),
        pace: 0.0,
        workspace: files.path().to_owned(),
    };
    let mut out = Vec::new();
    assert_eq!(run(&options, &mut out).unwrap(), 1);
    let record: AgentRecord = serde_json::from_slice(out.trim_ascii_end()).unwrap();
    let AgentRecord::Error { text } = record else {
        panic!("{record:?}")
    };
    assert!(text.contains("absent.md"), "{text}");
}

#[test]
fn a_bad_scenario_or_pace_is_refused_before_anything_is_printed() {
    let files = tempfile::tempdir().unwrap();
    let scenario = files.path().join("scenario.toml");
    std::fs::write(&scenario, "model = \"m\"\n[[step]]\njump = true\n").unwrap();
    let mut options = AgentOptions {
        scenario: scenario.clone(),
        instructions: files.path().join("task.md"),
        pace: 0.0,
        workspace: files.path().to_owned(),
    };
    let mut out = Vec::new();
    let message = run(&options, &mut out).unwrap_err().to_string();
    assert!(
        message.contains("scenario.toml: step 1: field `jump`"),
        "{message}"
    );
    options.pace = -1.0;
    assert!(matches!(
        run(&options, &mut out),
        Err(AgentError::InvalidPace { .. })
    ));
    options.pace = 0.0;
    options.scenario = files.path().join("missing.toml");
    let message = run(&options, &mut out).unwrap_err().to_string();
    assert!(message.contains("missing.toml"), "{message}");
    assert!(out.is_empty());
}

#[test]
fn pauses_are_scaled_by_the_pace() {
    let files = tempfile::tempdir().unwrap();
    let scenario = files.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        "model = \"m\"\n[[step]]\nsay = \"a\"\npause = 2\n",
    )
    .unwrap();
    let options = AgentOptions {
        scenario,
        instructions: files.path().join("task.md"),
        pace: 0.1,
        workspace: files.path().to_owned(),
    };
    let started = std::time::Instant::now();
    run(&options, &mut Vec::new()).unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

/// A scripted model on loopback, served by a runtime of its own while the agent, which is not
/// async, runs on the test's thread.
struct Upstream {
    model: ScriptedModel,
    _runtime: tokio::runtime::Runtime,
}

impl Upstream {
    fn start() -> Upstream {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let model = runtime
            .block_on(ScriptedModel::serve("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        Upstream {
            model,
            _runtime: runtime,
        }
    }

    /// The endpoint of this model with a bearer token made up now.
    fn endpoint(&self) -> ModelEndpoint {
        let mut random = [0u8; 12];
        getrandom::fill(&mut random).unwrap();
        let key: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        ModelEndpoint {
            base_url: self.model.base_url(),
            api_key: Some(format!("dummy-{key}")),
            timeout: Duration::from_secs(30),
        }
    }
}

fn error_text(record: &AgentRecord) -> &str {
    match record {
        AgentRecord::Error { text } => text,
        other => panic!("not an error record: {other:?}"),
    }
}

#[test]
fn ask_prints_the_reply_plain_or_streamed_and_no_usage() {
    let upstream = Upstream::start();
    let endpoint = upstream.endpoint();
    let run = ask_out(
        Some(&endpoint),
        "[[step]]\nask = { prompt = \"What should I do first?\" }\n[[step]]\nask = { prompt = \"And then?\", stream = true }\n[[step]]\nfinish = \"done\"\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        run.records,
        vec![
            message("step 1: What should I do first?"),
            message("step 2: And then?"),
            AgentRecord::Finish {
                summary: "done".into()
            },
        ]
    );
    let requests = upstream.model.requests();
    assert_eq!(requests.len(), 2);
    let bearer = format!("Bearer {}", endpoint.api_key.as_deref().unwrap());
    for (request, (prompt, stream)) in requests
        .iter()
        .zip([("What should I do first?", false), ("And then?", true)])
    {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.header("authorization"), Some(bearer.as_str()));
        assert_eq!(request.body["model"], json!("demo-model"));
        assert_eq!(
            request.body["messages"],
            json!([{ "role": "user", "content": prompt }])
        );
        assert_eq!(request.body["stream"], json!(stream));
    }
}

#[test]
fn a_refusal_is_an_error_record_naming_the_status_and_the_run_goes_on() {
    let upstream = Upstream::start();
    upstream.model.set_behaviour(Behaviour::TooManyRequests {
        retry_after_secs: 7,
    });
    let run = ask_out(
        Some(&upstream.endpoint()),
        "[[step]]\nsay = \"asking\"\n[[step]]\nask = { prompt = \"hi\" }\n[[step]]\nask = { prompt = \"hi\", stream = true }\n[[step]]\nsay = \"still here\"\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records.len(), 4, "{:?}", run.records);
    for (record, step) in run.records[1..3].iter().zip([2, 3]) {
        assert_eq!(
            error_text(record),
            format!(
                "step {step}: ask: the model answered 429 Too Many Requests: rate limited by the scripted model (retry after 7 s)"
            )
        );
    }
    assert_eq!(run.records[3], message("still here"));

    upstream.model.set_behaviour(Behaviour::ServerError);
    let run = ask_out(
        Some(&upstream.endpoint()),
        "[[step]]\nask = { prompt = \"hi\" }\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        error_text(&run.records[0]),
        "step 1: ask: the model answered 500 Internal Server Error: the scripted model failed"
    );
}

#[test]
fn a_broken_reply_is_an_error_record_and_the_run_goes_on() {
    let upstream = Upstream::start();
    let endpoint = upstream.endpoint();
    let steps = "[[step]]\nask = { prompt = \"hi\" }\n[[step]]\nask = { prompt = \"hi\", stream = true }\n[[step]]\nsay = \"next\"\n";
    for (behaviour, plain, streamed) in [
        (
            Behaviour::MalformedJson,
            "step 1: ask: the reply is not JSON",
            "step 2: ask: a streamed chunk is not JSON",
        ),
        (
            Behaviour::CutStream,
            "step 1: ask: the reply broke off",
            "step 2: ask: the reply stream broke after ",
        ),
    ] {
        upstream.model.set_behaviour(behaviour);
        let run = ask_out(Some(&endpoint), steps);
        assert_eq!(run.code.unwrap(), 0, "{behaviour:?}");
        assert_eq!(run.records.len(), 3, "{behaviour:?}: {:?}", run.records);
        let (first, second) = (error_text(&run.records[0]), error_text(&run.records[1]));
        assert!(first.starts_with(plain), "{behaviour:?}: {first}");
        assert!(second.starts_with(streamed), "{behaviour:?}: {second}");
        assert_eq!(run.records[2], message("next"));
    }
}

#[test]
fn a_model_that_never_answers_is_given_up_after_the_timeout() {
    let upstream = Upstream::start();
    upstream.model.set_behaviour(Behaviour::Stall);
    let endpoint = ModelEndpoint {
        timeout: Duration::from_millis(200),
        ..upstream.endpoint()
    };
    let started = std::time::Instant::now();
    let run = ask_out(Some(&endpoint), "[[step]]\nask = { prompt = \"hi\" }\n");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        error_text(&run.records[0]),
        "step 1: ask: no answer within 0.2 s"
    );
}

#[test]
fn an_unreachable_model_is_an_error_record_naming_the_url() {
    let closed = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let endpoint = ModelEndpoint {
        base_url: format!("http://{closed}/v1/"),
        api_key: None,
        timeout: Duration::from_secs(30),
    };
    let run = ask_out(
        Some(&endpoint),
        "[[step]]\nask_until_refused = { prompt = \"hi\", max = 5 }\n[[step]]\nsay = \"on\"\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records.len(), 2, "{:?}", run.records);
    let text = error_text(&run.records[0]);
    assert!(
        text.starts_with(&format!(
            "step 1: ask: cannot reach the model at http://{closed}/v1/chat/completions: "
        )),
        "{text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert_eq!(run.records[1], message("on"));
}

#[test]
fn ask_without_a_model_url_is_an_error_naming_the_step_and_the_run_goes_on() {
    let run = ask_out(
        None,
        "[[step]]\nsay = \"first\"\n[[step]]\nask = { prompt = \"hi\" }\n[[step]]\nsay = \"after\"\n",
    );
    assert_eq!(run.records.len(), 3, "{:?}", run.records);
    assert_eq!(
        error_text(&run.records[1]),
        "step 2: ask: STET_MODEL_URL is not set, so there is no model to ask"
    );
    assert_eq!(run.records[2], message("after"));

    let endpoint = ModelEndpoint {
        base_url: "https://127.0.0.1:4141/v1".into(),
        api_key: None,
        timeout: Duration::from_secs(30),
    };
    let run = ask_out(Some(&endpoint), "[[step]]\nask = { prompt = \"hi\" }\n");
    assert_eq!(run.code.unwrap(), 1);
    let text = error_text(&run.records[0]);
    assert!(
        text.starts_with("step 1: ask: the model URL \"https://127.0.0.1:4141/v1\""),
        "{text}"
    );
}

#[test]
fn each_run_names_one_end_user_so_the_model_numbers_its_replies_from_one() {
    let upstream = Upstream::start();
    let steps = "[[step]]\nask = { prompt = \"first?\" }\n[[step]]\nask = { prompt = \"second?\", stream = true }\n";
    let expected = vec![message("step 1: first?"), message("step 2: second?")];
    // Two runs against one model, as the dispatches of one `stet demo` share it.
    for _ in 0..2 {
        let run = ask_out(Some(&upstream.endpoint()), steps);
        assert_eq!(run.code.unwrap(), 0);
        assert_eq!(run.records, expected);
    }
    let users: Vec<String> = upstream
        .model
        .requests()
        .iter()
        .map(|request| request.body["user"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users.len(), 4);
    assert_eq!(users[0], users[1], "one run, one name");
    assert_eq!(users[2], users[3], "one run, one name");
    assert_ne!(users[0], users[2], "each run its own name");
    for user in &users {
        assert!(user.starts_with("stet-agent-"), "{user}");
        assert_eq!(user.len(), "stet-agent-".len() + 16, "{user}");
    }
}

#[test]
fn ask_until_refused_asks_max_times_or_until_refused() {
    let upstream = Upstream::start();
    let run = ask_out(
        Some(&upstream.endpoint()),
        "[[step]]\nask_until_refused = { prompt = \"more?\", max = 3 }\n[[step]]\nask_until_refused = { prompt = \"streamed?\", max = 2, stream = true }\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(
        run.records,
        vec![
            message("step 1: more?"),
            message("step 2: more?"),
            message("step 3: more?"),
            message("step 4: streamed?"),
            message("step 5: streamed?"),
        ]
    );
    assert_eq!(upstream.model.requests().len(), 5);

    upstream.model.set_behaviour(Behaviour::ServerError);
    let run = ask_out(
        Some(&upstream.endpoint()),
        "[[step]]\nask_until_refused = { prompt = \"more?\", max = 50 }\n[[step]]\nsay = \"stopped\"\n",
    );
    assert_eq!(run.code.unwrap(), 0);
    assert_eq!(run.records.len(), 2, "{:?}", run.records);
    assert!(
        error_text(&run.records[0]).contains("500 Internal Server Error"),
        "{:?}",
        run.records
    );
    assert_eq!(run.records[1], message("stopped"));
    assert_eq!(upstream.model.requests().len(), 6);
}
