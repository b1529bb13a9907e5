//! Unit tests of `crate::harness::codex`: the committed captures of Codex 0.163 read as a dispatch
//! reads them, usage as deltas of the running total, the outcome, hostile output, the launch plan.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::launch::{CONFIG_FILE, KEY_VARIABLE, LAUNCH, TASK_FILE, config_toml};
use super::*;
use crate::harness::captures::{self, items, usage};
use crate::harness::{AgentVoice, Harness, HarnessLaunch, HarnessOutcome, ModelAccess, Parsed};
use crate::runtime::lines::LineFramer;
use crate::runtime::{OUTPUTS_MOUNT, OutputLine, OutputStream};
use stet_protocol::event::ItemKind;
use stet_sanitize::sanitize::TokenSanitizer;

fn sanitizer() -> Arc<TokenSanitizer> {
    captures::sanitizer()
}

fn capture(name: &str) -> Vec<u8> {
    captures::capture("codex", name)
}

/// Reads `bytes` as a dispatch reads `stream` of a run against the scripted model.
fn voiced(bytes: &[u8], stream: OutputStream) -> (Vec<Parsed>, HarnessOutcome) {
    let sanitizer = sanitizer();
    let mut output = CodexOutput::new(Arc::clone(&sanitizer), Some("stet-scripted".into()));
    captures::voiced(&mut output, sanitizer, bytes, stream)
}

fn pair(kind: ItemKind, text: &str) -> (ItemKind, String) {
    (kind, text.to_owned())
}

const METADATA_WARNING: &str = "Model metadata for `stet-scripted` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.";

fn succeeded_with(outcome: &HarnessOutcome) -> &str {
    match outcome {
        HarnessOutcome::Succeeded {
            summary: Some(summary),
        } => summary.as_str(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_shell_edit_capture_reads_as_reasoning_command_output_message_and_finish() {
    let (read, outcome) = voiced(&capture("shell-edit.stdout"), OutputStream::Stdout);
    let command =
        r#"/bin/bash -lc "sed -i 's/Hello/Hello, stet/' greeting.txt && cat greeting.txt""#;
    let message = "I edited greeting.txt: it now says Hello, stet.";
    assert_eq!(
        items(&read),
        [
            pair(ItemKind::Error, METADATA_WARNING),
            pair(ItemKind::Thought, "The greeting needs editing."),
            pair(ItemKind::Command, command),
            pair(ItemKind::Output, "Hello, stet\n[exit code 0]"),
            pair(ItemKind::Message, message),
            pair(ItemKind::Finish, message),
        ]
    );
    assert_eq!(succeeded_with(&outcome), message);
    let reports = usage(&read);
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (
            reports[0].input_tokens,
            reports[0].cached_tokens,
            reports[0].output_tokens,
            reports[0].cost_usd
        ),
        (2500, 1000, 81, None)
    );
    assert_eq!(reports[0].model.as_str(), "stet-scripted");
    let thread = read.iter().find_map(|parsed| match parsed {
        Parsed::RecordOnly(item) => Some(item.text.as_str().to_owned()),
        _ => None,
    });
    assert!(
        thread.is_some_and(|text| text.starts_with("Codex thread ") && text.ends_with(" started")),
        "the thread's start goes to the run record"
    );
}

#[test]
fn the_apply_patch_capture_reads_as_a_file_change() {
    let (read, outcome) = voiced(&capture("apply-patch.stdout"), OutputStream::Stdout);
    assert_eq!(
        items(&read)[1..],
        [
            pair(
                ItemKind::Command,
                "file change: add /workspace/notes/added.md"
            ),
            pair(ItemKind::Message, "I created notes/added.md."),
            pair(ItemKind::Finish, "I created notes/added.md."),
        ]
    );
    assert_eq!(succeeded_with(&outcome), "I created notes/added.md.");
}

#[test]
fn a_failed_command_shows_its_exit_code_and_does_not_decide_the_outcome() {
    let (read, outcome) = voiced(&capture("failed-command.stdout"), OutputStream::Stdout);
    assert_eq!(
        items(&read)[1..3],
        [
            pair(ItemKind::Command, "/bin/bash -lc 'cat missing.txt'"),
            pair(
                ItemKind::Output,
                "cat: missing.txt: No such file or directory\n[exit code 1]"
            ),
        ]
    );
    assert_eq!(
        succeeded_with(&outcome),
        "missing.txt does not exist; I stopped."
    );
}

#[test]
fn the_text_capture_is_a_message_and_a_finish() {
    let (read, outcome) = voiced(&capture("text.stdout"), OutputStream::Stdout);
    let answer = "The repository holds one file, greeting.txt; I changed nothing.";
    assert_eq!(
        items(&read),
        [
            pair(ItemKind::Error, METADATA_WARNING),
            pair(ItemKind::Message, answer),
            pair(ItemKind::Finish, answer),
        ]
    );
    assert_eq!(succeeded_with(&outcome), answer);
}

#[test]
fn the_error_capture_fails_the_run_with_the_providers_words() {
    let (read, outcome) = voiced(&capture("error.stdout"), OutputStream::Stdout);
    let shown = items(&read);
    assert!(
        shown.iter().all(|(kind, _)| *kind != ItemKind::Finish),
        "{shown:?}"
    );
    assert_eq!(
        shown
            .iter()
            .filter(|(kind, _)| *kind == ItemKind::Error)
            .count(),
        3
    );
    assert!(usage(&read).is_empty());
    let HarnessOutcome::Failed { reason } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        reason.as_str().starts_with("Codex's turn failed: "),
        "{reason:?}"
    );
    assert!(reason.as_str().contains("scripted_refusal"), "{reason:?}");
}

/// What the parser reads from `stream` (JSON Lines) and what it reports went wrong, as the
/// dispatch asks when Codex exits non-zero.
fn reported(stream: &str) -> (HarnessOutcome, Option<String>) {
    let sanitizer = sanitizer();
    let mut output = CodexOutput::new(Arc::clone(&sanitizer), None);
    let mut voice = AgentVoice::new(&mut output, sanitizer);
    let mut framer = LineFramer::default();
    let mut lines = framer.push(stream.as_bytes());
    lines.extend(framer.finish());
    for line in lines {
        voice.parse(&OutputLine {
            stream: OutputStream::Stdout,
            line,
        });
    }
    voice.ended();
    let reported = voice
        .reported_failure()
        .map(|reason| reason.as_str().to_owned());
    (voice.outcome(), reported)
}

#[test]
fn the_failure_codex_reported_is_known_and_a_warning_item_is_not_one() {
    // The real refusal: `turn.failed` with the provider's words.
    let refusal = String::from_utf8(capture("error.stdout")).unwrap();
    let (_, refused) = reported(&refusal);
    let refused = refused.unwrap();
    assert!(
        refused.starts_with("Codex's turn failed: ") && refused.contains("scripted_refusal"),
        "{refused}"
    );
    // A thread's fatal `error` with no turn completed nor failed after it.
    let error = json!({"type": "error", "message": "stream disconnected before completion"});
    let (outcome, stopped) = reported(&error.to_string());
    assert_eq!(
        stopped.as_deref(),
        Some("Codex stopped on an error: stream disconnected before completion")
    );
    assert!(
        matches!(&outcome, HarnessOutcome::Failed { reason } if Some(reason.as_str()) == stopped.as_deref()),
        "{outcome:?}"
    );
    // An `error` event before a turn that completed did not end the run; an `error` item (the
    // model's missing metadata, in every capture) never says the run failed.
    let completed = [
        error.to_string(),
        json!({"type": "item.completed", "item": {"id": "m", "type": "agent_message", "text": "Done."}})
            .to_string(),
        json!({"type": "turn.completed", "usage": {}}).to_string(),
    ]
    .join("\n");
    let (outcome, nothing) = reported(&completed);
    assert_eq!(nothing, None);
    assert_eq!(succeeded_with(&outcome), "Done.");
    let text = String::from_utf8(capture("text.stdout")).unwrap();
    assert!(
        text.contains("\"type\":\"error\""),
        "the capture holds an error item"
    );
    assert_eq!(reported(&text).1, None);
    // Output cut before the turn ended reports nothing of its own: the exit code is the reason.
    assert_eq!(reported("").1, None);
}

#[test]
fn usage_is_reported_as_what_each_turn_adds_to_the_running_total() {
    let turn = |input: u64, cached: u64, output: u64| {
        json!({"type": "turn.completed", "usage": {"input_tokens": input,
            "cached_input_tokens": cached, "output_tokens": output}})
        .to_string()
    };
    let stream = [turn(1000, 0, 10), turn(2500, 900, 30), turn(100, 0, 1)].join("\n");
    let (read, _) = voiced(stream.as_bytes(), OutputStream::Stdout);
    let reports: Vec<_> = usage(&read)
        .iter()
        .map(|r| (r.input_tokens, r.cached_tokens, r.output_tokens))
        .collect();
    // A total that went down (it never should) adds nothing rather than wrapping.
    assert_eq!(reports, vec![(1000, 0, 10), (1500, 900, 20), (0, 0, 0)]);
    let warnings = read
        .iter()
        .filter(|parsed| matches!(parsed, Parsed::Warning(_)))
        .count();
    assert_eq!(
        warnings, 2,
        "a later turn's finish is a warning; the first stands"
    );
}

#[test]
fn output_that_ends_before_the_turn_completes_is_a_failure_quoting_the_last_message() {
    let capture = capture("shell-edit.stdout");
    let text = String::from_utf8(capture).unwrap();
    let cut: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains("turn.completed"))
        .collect();
    let (read, outcome) = voiced(cut.join("\n").as_bytes(), OutputStream::Stdout);
    assert!(
        items(&read)
            .iter()
            .all(|(kind, _)| *kind != ItemKind::Finish)
    );
    let HarnessOutcome::Failed { reason } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        reason.as_str(),
        "Codex stopped before its turn completed; its last message: I edited greeting.txt: it now says Hello, stet."
    );
    let (_, nothing) = voiced(b"", OutputStream::Stdout);
    assert!(matches!(nothing, HarnessOutcome::Failed { .. }));
}

#[test]
fn a_failed_turn_fails_the_run_even_after_a_completed_one() {
    let stream = [
        json!({"type": "turn.completed", "usage": {}}).to_string(),
        json!({"type": "turn.failed", "error": {"message": "quota"}}).to_string(),
    ]
    .join("\n");
    let (_, outcome) = voiced(stream.as_bytes(), OutputStream::Stdout);
    assert!(
        matches!(&outcome, HarnessOutcome::Failed { reason } if reason.as_str() == "Codex's turn failed: quota"),
        "{outcome:?}"
    );
}

/// The real plan (Codex's update_plan, shown as it starts and changes, its completion repeating
/// the last state), MCP tool call and web search, each followed by the closing message.
#[test]
fn the_plan_mcp_and_web_search_captures_read_as_their_items() {
    let warning = "Model metadata for `stet-scripted` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.";
    for (name, expected) in [
        (
            "plan.stdout",
            vec![
                pair(ItemKind::Error, warning),
                pair(
                    ItemKind::Other,
                    "plan:\n[ ] Edit greeting.txt\n[ ] Report the result",
                ),
                pair(
                    ItemKind::Other,
                    "plan:\n[x] Edit greeting.txt\n[x] Report the result",
                ),
                pair(ItemKind::Message, "Both steps are done."),
                pair(ItemKind::Finish, "Both steps are done."),
            ],
        ),
        (
            "mcp.stdout",
            vec![
                pair(ItemKind::Error, warning),
                pair(ItemKind::Command, r#"MCP stetdocs.lookup {"word":"stet"}"#),
                pair(
                    ItemKind::Output,
                    "stet: let it stand (a proofreader's mark).",
                ),
                pair(
                    ItemKind::Message,
                    "The glossary says stet means let it stand.",
                ),
                pair(
                    ItemKind::Finish,
                    "The glossary says stet means let it stand.",
                ),
            ],
        ),
        (
            "web-search.stdout",
            vec![
                pair(ItemKind::Error, warning),
                pair(ItemKind::Command, "web search: stet proofreading mark"),
                pair(
                    ItemKind::Message,
                    "Stet is a proofreading mark meaning let it stand.",
                ),
                pair(
                    ItemKind::Finish,
                    "Stet is a proofreading mark meaning let it stand.",
                ),
            ],
        ),
    ] {
        let (read, outcome) = voiced(&capture(name), OutputStream::Stdout);
        assert_eq!(items(&read), expected, "{name}");
        assert!(
            matches!(outcome, HarnessOutcome::Succeeded { .. }),
            "{name}: {outcome:?}"
        );
    }
}

/// What no capture holds (a failed MCP call, a declined command, a failed file change) and what
/// Codex may add later.
#[test]
fn every_item_type_is_shown_and_unknown_ones_are_never_dropped() {
    let lines = [
        json!({"type": "item.started", "item": {"id": "m", "type": "mcp_tool_call", "server": "docs",
            "tool": "search", "arguments": {"q": "x"}, "status": "in_progress"}}),
        json!({"type": "item.completed", "item": {"id": "m", "type": "mcp_tool_call", "server": "docs",
            "tool": "search", "arguments": {"q": "x"}, "error": {"message": "refused"}, "status": "failed"}}),
        json!({"type": "item.completed", "item": {"id": "c", "type": "command_execution",
            "command": "make", "aggregated_output": "", "exit_code": null, "status": "declined"}}),
        json!({"type": "item.completed", "item": {"id": "f", "type": "file_change",
            "changes": [{"path": "a", "kind": "update"}, {"path": "b", "kind": "delete"}], "status": "failed"}}),
        json!({"type": "item.completed", "item": {"id": "n", "type": "novelty", "x": 1}}),
        json!({"type": "session.renamed", "name": "n"}),
        json!({"no": "type"}),
    ]
    .map(|line| line.to_string());
    let mut stream = lines.join("\n");
    stream.push_str("\nnot json at all\n");
    let (read, _) = voiced(stream.as_bytes(), OutputStream::Stdout);
    assert_eq!(
        items(&read),
        vec![
            pair(ItemKind::Command, r#"MCP docs.search {"q":"x"}"#),
            pair(ItemKind::Error, "refused"),
            pair(ItemKind::Command, "make"),
            pair(ItemKind::Error, "[declined]"),
            pair(ItemKind::Command, "file change failed: update a, delete b"),
            pair(ItemKind::Other, r#"item.completed novelty {"x":1}"#),
            pair(ItemKind::Other, r#"session.renamed {"name":"n"}"#),
            pair(ItemKind::Other, r#"an event without a type {"no":"type"}"#),
            pair(
                ItemKind::Other,
                "Codex printed a line that is not an event: not json at all"
            ),
        ]
    );
}

#[test]
fn stderr_lines_are_shown_as_they_are_cleaned_and_bounded() {
    let (read, outcome) = voiced(
        b"\x1b[31mwarning\x1b[0m: something\n\n",
        OutputStream::Stderr,
    );
    assert_eq!(
        items(&read),
        vec![pair(ItemKind::Other, "warning: something")]
    );
    assert!(matches!(outcome, HarnessOutcome::Failed { .. }));
}

#[test]
fn a_huge_command_output_is_bounded_and_a_line_over_the_limit_is_skipped_whole() {
    let output: String = (0..200_000).map(|n| format!("line {n}\n")).collect();
    let big = json!({"type": "item.completed", "item": {"id": "c", "type": "command_execution",
        "command": "seq", "aggregated_output": output, "exit_code": 0, "status": "completed"}})
    .to_string();
    let mut huge =
        br#"{"type": "item.completed", "item": {"type": "agent_message", "text": ""#.to_vec();
    huge.resize(MAX_EVENT_BYTES + 100, b'a');
    huge.extend_from_slice(b"\"}}");
    let mut stream = big.into_bytes();
    stream.push(b'\n');
    stream.extend_from_slice(&huge);
    stream.extend_from_slice(b"\n{\"type\":\"turn.completed\"}\n");
    let (read, outcome) = voiced(&stream, OutputStream::Stdout);
    let shown = items(&read);
    assert_eq!(
        shown.len(),
        4,
        "{:?}",
        shown.iter().map(|(k, t)| (k, t.len())).collect::<Vec<_>>()
    );
    assert_eq!(shown[0], pair(ItemKind::Command, "seq"));
    assert_eq!(shown[1].0, ItemKind::Output);
    assert!(shown[1].1.len() <= MAX_ITEM_BYTES, "{}", shown[1].1.len());
    assert!(shown[1].1.ends_with(" bytes more)"), "the cut is said");
    assert_eq!(
        shown[2],
        pair(
            ItemKind::Other,
            &format!(
                "a Codex event line of {} bytes was not read (the limit is {MAX_EVENT_BYTES} bytes)",
                MAX_EVENT_BYTES + 103
            )
        )
    );
    assert_eq!(
        shown[3],
        pair(ItemKind::Finish, "(Codex ended its turn without a message)")
    );
    assert!(matches!(
        outcome,
        HarnessOutcome::Succeeded { summary: None }
    ));
}

#[test]
fn deep_json_and_lines_of_too_many_values_are_not_parsed() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let wide = format!(
        "{{\"type\":\"error\",\"x\":[{}0]}}",
        "0,".repeat(MAX_EVENT_VALUES)
    );
    let stream = format!("{deep}\n{wide}\n");
    let (read, _) = voiced(stream.as_bytes(), OutputStream::Stdout);
    let shown = items(&read);
    assert_eq!(shown.len(), 2);
    assert!(
        shown[0]
            .1
            .starts_with("Codex printed a line that is not an event: [[[[")
    );
    assert!(shown[0].1.len() <= MAX_ITEM_BYTES);
    assert!(
        shown[1].1.starts_with("a Codex event line of ")
            && shown[1].1.ends_with(&format!(
                "values was not read (the limit is {MAX_EVENT_VALUES})"
            )),
        "{}",
        shown[1].1
    );
}

#[test]
fn escape_sequences_control_characters_and_secrets_never_reach_the_transcript() {
    let hex = || uuid::Uuid::new_v4().simple().to_string();
    let token = format!("ghp_{}", &(hex() + &hex())[..36]);
    let text = format!("\u{1b}[1;31mred\u{1b}[0m \u{1b}]0;title\u{7}done\u{0}\u{202e} {token}");
    let line = json!({"type": "item.completed", "item": {"id": "1", "type": "agent_message", "text": text}});
    let (read, _) = voiced(line.to_string().as_bytes(), OutputStream::Stdout);
    let shown = items(&read);
    assert_eq!(shown.len(), 1);
    assert!(shown[0].1.starts_with("red done "), "{:?}", shown[0].1);
    assert!(!shown[0].1.contains(&token), "{:?}", shown[0].1);
    assert!(
        !shown[0]
            .1
            .chars()
            .any(|c| c.is_control() || c == '\u{202e}')
    );
}

fn relay() -> ModelAccess {
    ModelAccess {
        base_url: "http://127.0.0.1:4141/v1".to_owned(),
        placeholder_key: crate::harness::PLACEHOLDER_KEY.to_owned(),
    }
}

fn hostile_brief() -> crate::brief::Brief {
    let text = r#"
title = "--help $(touch /tmp/x)"
workflow = "implement"
[target]
repo = "octo/app"
base = "main"
[[items]]
text = "--help $(touch /tmp/x) \"; exec rm -rf / #"
"#;
    crate::brief::Brief::parse("hostile", Path::new("hostile.toml"), text).unwrap()
}

#[test]
fn the_plan_stages_the_task_and_the_configuration_and_puts_no_brief_text_on_the_command_line() {
    let brief = hostile_brief();
    let instructions = crate::workflow::Workflow::builtin("implement")
        .unwrap()
        .render(&brief, "stet/hostile");
    assert!(instructions.contains("$(touch /tmp/x)"));
    let harness = CodexHarness::new(CodexSettings::new("gpt-5.1-\"codex\"\n[x]"));
    let plan = harness
        .plan(&HarnessLaunch {
            dispatch: stet_protocol::event::DispatchId::new(),
            brief: &brief,
            instructions: &instructions,
            model: Some(&relay()),
        })
        .unwrap();
    assert_eq!(plan.processes.len(), 1);
    let process = &plan.processes[0];
    assert_eq!(process.argv, ["sh", "-c", LAUNCH]);
    assert_eq!(process.workdir, crate::runtime::WORKSPACE_MOUNT);
    for part in process
        .argv
        .iter()
        .map(String::as_str)
        .chain(process.env.values().map(|v| v.expose_secret()))
    {
        assert!(!part.contains("touch"), "{part}");
    }
    assert_eq!(
        process.env.keys().collect::<Vec<_>>(),
        [KEY_VARIABLE],
        "the placeholder key is all the environment carries"
    );
    assert_eq!(
        process.env[KEY_VARIABLE].expose_secret(),
        crate::harness::PLACEHOLDER_KEY
    );
    assert!(LAUNCH.contains(&format!("{OUTPUTS_MOUNT}/{TASK_FILE}")));
    assert!(LAUNCH.contains(&format!("{OUTPUTS_MOUNT}/{CONFIG_FILE}")));
    assert!(LAUNCH.contains("exec codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox - <"));
    let names: Vec<&str> = plan.files.iter().map(|file| file.name.as_str()).collect();
    assert_eq!(names, [TASK_FILE, CONFIG_FILE]);
    assert_eq!(plan.files[0].contents, instructions.as_bytes());
    let config: toml::Table = std::str::from_utf8(&plan.files[1].contents)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(config["model"].as_str(), Some("gpt-5.1-\"codex\"\n[x]"));
    let provider = &config["model_providers"]["stet"];
    assert_eq!(config["model_provider"].as_str(), Some("stet"));
    assert_eq!(
        provider["base_url"].as_str(),
        Some("http://127.0.0.1:4141/v1")
    );
    assert_eq!(provider["wire_api"].as_str(), Some("responses"));
    assert_eq!(provider["env_key"].as_str(), Some(KEY_VARIABLE));
    assert_eq!(config["check_for_update_on_startup"].as_bool(), Some(false));
    assert_eq!(config["analytics"]["enabled"].as_bool(), Some(false));
    assert_eq!(config["feedback"]["enabled"].as_bool(), Some(false));
    assert_eq!(config["web_search"].as_str(), Some("disabled"));
    assert_eq!(config["sandbox_mode"].as_str(), Some("danger-full-access"));
    assert_eq!(config["approval_policy"].as_str(), Some("never"));
    assert_eq!(config["features"]["multi_agent"].as_bool(), Some(false));
    // Codex's exit waits for its plugin sync, which cannot reach GitHub from the sandbox.
    assert_eq!(config["features"]["plugins"].as_bool(), Some(false));
}

#[test]
fn the_capture_configuration_is_the_one_the_harness_writes() {
    let committed: toml::Table = String::from_utf8(capture("config.toml.in"))
        .unwrap()
        .replace("@BASE_URL@", "http://127.0.0.1:4141/v1")
        .parse()
        .unwrap();
    let written: toml::Table = config_toml("stet-scripted", "http://127.0.0.1:4141/v1")
        .parse()
        .unwrap();
    assert_eq!(committed, written);
}

#[test]
fn without_a_model_or_the_gateway_the_harness_refuses_to_plan() {
    let brief = hostile_brief();
    let launch = |model| HarnessLaunch {
        dispatch: stet_protocol::event::DispatchId::new(),
        brief: &brief,
        instructions: "task",
        model,
    };
    let relay = relay();
    let no_model = CodexHarness::new(CodexSettings::new(" "));
    let error = no_model
        .plan(&launch(Some(&relay)))
        .unwrap_err()
        .to_string();
    assert!(error.contains("harness.codex.model"), "{error}");
    let harness = CodexHarness::new(CodexSettings::new("gpt-5.1-codex"));
    let error = harness.plan(&launch(None)).unwrap_err().to_string();
    assert!(error.contains("[model] base_url"), "{error}");
    assert_eq!(harness.name(), "codex");
    assert_eq!(harness.version().as_deref(), Some(CODEX_VERSION));
    assert!(!harness.runs_in_offline_image());
}
