//! The model gateway end to end, against the real Docker engine: the scripted agent asks a scripted
//! OpenAI-compatible upstream (on the test's loopback) through the relay in a `--network none`
//! sandbox and the gateway on the host. What the upstream received is checked (the key arrives there
//! and nowhere else), as is everything the dispatch showed and kept.

use super::support::serving_runtime;

use std::net::{Ipv4Addr, SocketAddr};

use stet_protocol::event::{EventKind, ItemKind};
use stet_protocol::state::Phase;
use stet_scripted_model::{Behaviour, ModelRequest, ScriptedModel};

use super::headless::{Project, docker_ready, files_under, run, scenario};

/// The variable of stet's environment that holds the model key in these tests.
pub(super) const KEY_ENV: &str = "STET_TEST_GATEWAY_KEY";

/// A model key made up at run time, shaped like no real provider's.
fn canary_key() -> String {
    format!("canary-{}", uuid::Uuid::new_v4().simple())
}

/// A scripted upstream on loopback, served by `runtime`'s workers while the test runs stet.
fn upstream(runtime: &tokio::runtime::Runtime) -> ScriptedModel {
    runtime
        .block_on(ScriptedModel::serve(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            0,
        ))))
        .unwrap()
}

impl Project {
    /// Points the user's `[model]` at `upstream`, the key in [`KEY_ENV`] (machine settings: the
    /// user's own configuration names them); `extra` lines go into the `[model]` table too.
    fn use_model(&self, upstream: &ScriptedModel, extra: &str) {
        self.home.add_user_config(&format!(
            "\n[model]\nbase_url = \"{}\"\napi_key_env = \"{KEY_ENV}\"\n{extra}",
            upstream.base_url()
        ));
    }
}

fn chat_requests(upstream: &ScriptedModel) -> Vec<ModelRequest> {
    upstream
        .requests()
        .into_iter()
        .filter(|request| request.path == "/v1/chat/completions")
        .collect()
}

/// Every file under `dir` with its contents, read as (lossy) text.
fn texts_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    files_under(dir)
        .into_iter()
        .map(|path| {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            (path, text)
        })
        .collect()
}

#[test]
fn asks_reach_the_upstream_with_the_hosts_key_which_never_enters_the_sandbox() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    let key = canary_key();
    // The third ask quotes the key (as if it had leaked from elsewhere) and the scripted model echoes
    // the question: the model traffic shown in the transcript must carry it masked.
    let echoed = format!("ask = {{ prompt = \"{key} was in the logs\" }}");
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Which file holds the notes?\" }",
        "ask = { prompt = \"Summarise the notes.\", stream = true }",
        &echoed,
        "run = [\"stet\", \"probe\", \"--environment\", \"--connect\", \"1.1.1.1:443\", \"--connect\", \"127.0.0.1:4141\"]",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Added a fourth note.\"",
    ]));
    project.use_model(&upstream, "");
    let mut command = project.headless(&["--push"]);
    command.env(KEY_ENV, &key);
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");

    // The upstream saw both asks, each with the host's key and not the agent's placeholder.
    let asks = chat_requests(&upstream);
    assert_eq!(asks.len(), 3, "{asks:#?}");
    for ask in &asks {
        assert_eq!(
            ask.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
        assert_eq!(ask.body["model"], "headless-test-model");
    }
    assert_eq!(asks[1].body["stream"], true);
    assert_eq!(
        asks[1].body["stream_options"]["include_usage"], true,
        "the gateway asks a stream for its usage"
    );

    // Both were metered, the streamed one from its final chunk.
    let usages: Vec<_> = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => Some(usage.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(usages.len(), 3, "{usages:#?}");
    for usage in &usages {
        assert!(
            usage.input_tokens > 0 && usage.output_tokens > 0,
            "{usage:?}"
        );
        assert!(
            usage.latency_ms.is_some(),
            "the gateway timed it: {usage:?}"
        );
    }
    assert!(
        usages[1].total_cost_usd >= usages[0].total_cost_usd,
        "{usages:?}"
    );

    // The agent read its replies; its environment held the relay and a placeholder, not the key.
    let transcript = finished.transcript();
    let said: Vec<&str> = transcript
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Message)
        .map(|(_, text)| *text)
        .collect();
    assert!(
        said.iter()
            .any(|text| text.contains("Which file holds the notes?")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|text| text.contains("[REDACTED:model-key] was in the logs")),
        "the echoed key is shown masked: {said:#?}"
    );
    let output: String = transcript
        .iter()
        .filter(|(kind, _)| *kind == ItemKind::Output)
        .map(|(_, text)| format!("{text}\n"))
        .collect();
    assert!(
        output.contains("STET_MODEL_URL=http://127.0.0.1:4141/v1"),
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "STET_MODEL_KEY={}",
            stet_engine::harness::PLACEHOLDER_KEY
        )),
        "{output}"
    );
    assert!(
        !output.contains(&key),
        "the key reached the sandbox: {output}"
    );
    // The sandbox still reaches nothing beyond its loopback, where the relay listens.
    let probe: serde_json::Value = output
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .expect("the probe's report");
    let connected: Vec<(String, bool)> = probe["connect"]
        .as_array()
        .unwrap()
        .iter()
        .map(|outcome| {
            (
                outcome["address"].as_str().unwrap_or_default().to_owned(),
                outcome["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        connected,
        [
            ("1.1.1.1:443".to_owned(), false),
            ("127.0.0.1:4141".to_owned(), true)
        ],
        "{probe:#}"
    );

    // The key is in no sink: stdout, stderr, the run record, the logs, the pull request (the local
    // forge's review record is under the state directory), the pushed commit.
    assert!(!finished.stdout.contains(&key));
    assert!(!finished.stderr.contains(&key));
    let state = texts_under(&project.home.state());
    assert!(
        state
            .iter()
            .any(|(path, _)| path.to_string_lossy().contains("reviews")),
        "a pull request was opened: {:?}",
        state.iter().map(|(path, _)| path).collect::<Vec<_>>()
    );
    for (path, text) in state {
        assert!(!text.contains(&key), "{} holds the key", path.display());
    }
    let sha = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Pushed { sha, .. } => Some(sha.as_str().to_owned()),
            _ => None,
        })
        .expect("a pushed event");
    let message = super::support::git(&project.remote, &["log", "--format=%B", "-1", &sha]);
    assert!(message.contains("Added a fourth note."), "{message}");
    assert!(!message.contains(&key), "{message}");
    assert_eq!(finished.outcome().0, Phase::Done);
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}

#[test]
fn the_ceiling_refuses_further_asks_and_ends_the_dispatch() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    let project = Project::new(&scenario(&[
        "ask_until_refused = { prompt = \"Keep going.\", max = 40 }",
        "finish = \"Never reached.\"",
    ]));
    // The test's model is priced by a price file of the user's, over the built-in table.
    let prices = project.home.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[models.\"headless-test-model\"]\ninput = 10.0\noutput = 30.0\n",
    )
    .unwrap();
    project.use_model(
        &upstream,
        &format!(
            "prices = {}\n",
            toml::Value::String(prices.display().to_string())
        ),
    );
    let mut command = project.headless(&["--cost-ceiling", "0.01"]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    let (outcome, code, reason) = finished.outcome();
    assert_eq!(
        (outcome, code),
        (Phase::CostCeilingHit, 5),
        "{reason:?}\n{finished:#?}"
    );
    let total = finished
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Usage(usage) => Some(usage.total_cost_usd),
            _ => None,
        })
        .fold(0.0, f64::max);
    // Bound: spend. Each request reserved its worst case first, so what was settled never passed the
    // ceiling; the dispatch ended when the next request no longer fitted.
    assert!(
        total > 0.0 && total <= 0.01,
        "the ledger settled ${total} under a $0.01 ceiling"
    );
    // Every request the upstream answered was metered, and none came after the ceiling.
    let answered = chat_requests(&upstream).len();
    let metered = finished
        .events
        .iter()
        .filter(|event| matches!(event.kind, EventKind::Usage(_)))
        .count();
    assert!(
        answered == metered && answered < 40,
        "{answered} requests reached the upstream, {metered} metered"
    );
    finished.torn_down_cleanly();
    runtime.block_on(upstream.shutdown());
}

#[test]
fn a_failing_upstream_is_an_error_in_the_transcript_and_the_run_goes_on() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    upstream.set_behaviour(Behaviour::TooManyRequests {
        retry_after_secs: 7,
    });
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Anyone there?\" }",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Worked without the model.\"",
    ]));
    project.use_model(&upstream, "request_timeout_secs = 5\n");
    let mut command = project.headless(&[]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let errors: Vec<&str> = finished
        .transcript()
        .into_iter()
        .filter(|(kind, _)| *kind == ItemKind::Error)
        .map(|(_, text)| text)
        .collect();
    assert!(
        errors.iter().any(|text| text.contains("429")),
        "the agent saw the refusal: {errors:#?}"
    );
    assert!(
        errors.iter().any(|text| text.contains("7")),
        "the gateway said when to retry: {errors:#?}"
    );
    finished.torn_down_cleanly();

    // An upstream that never answers is cut off at the request timeout, not at the dispatch's.
    upstream.set_behaviour(Behaviour::Stall);
    let project = Project::new(&scenario(&[
        "ask = { prompt = \"Hello?\" }",
        "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
        "finish = \"Gave up on the model.\"",
    ]));
    project.use_model(&upstream, "request_timeout_secs = 2\n");
    let mut command = project.headless(&["--timeout", "5m"]);
    command.env(KEY_ENV, canary_key());
    let finished = run(command);
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert!(
        finished
            .transcript()
            .iter()
            .any(|(kind, text)| *kind == ItemKind::Error && text.contains("within 2s")),
        "{:#?}",
        finished.transcript()
    );
    runtime.block_on(upstream.shutdown());
}

/// DESIGN §5 row 24 from inside a real sandbox: an ask naming a model with a routing suffix, and one
/// naming a model `[model] allow` does not list, go through the relay and are refused by the gateway's
/// request policy; the upstream receives neither, each refusal is a `gateway_refusal` event naming the
/// field, and the agent sees the 400 naming the setting.
#[test]
fn a_model_the_user_did_not_allow_never_reaches_the_upstream() {
    docker_ready();
    let runtime = serving_runtime();
    let upstream = upstream(&runtime);
    for (model, extra, rule) in [
        ("headless-test-model:online", "", "routing_suffix"),
        (
            "headless-test-model",
            "allow = [\"another-model\"]\n",
            "model_not_allowed",
        ),
    ] {
        let steps = scenario(&[
            "ask = { prompt = \"Search the web for the notes.\" }",
            "append = { path = \"src/notes.txt\", content = \"four\\n\" }",
            "finish = \"Worked without the model.\"",
        ])
        .replace("headless-test-model", model);
        let project = Project::new(&steps);
        project.use_model(&upstream, extra);
        let mut command = project.headless(&[]);
        command.env(KEY_ENV, canary_key());
        let finished = run(command);
        assert_eq!(finished.code(), Some(0), "{finished:#?}");
        let refusals: Vec<_> = finished
            .events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::GatewayRefusal {
                    field,
                    rule,
                    setting,
                    ..
                } => Some((
                    field.as_str().to_owned(),
                    rule.as_str().to_owned(),
                    setting.as_ref().map(|setting| setting.as_str().to_owned()),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            refusals,
            vec![(
                "model".to_owned(),
                rule.to_owned(),
                Some("[model] allow".to_owned())
            )],
            "{model}"
        );
        assert!(
            finished
                .transcript()
                .iter()
                .any(|(kind, text)| *kind == ItemKind::Error
                    && text.contains("400")
                    && text.contains("[model] allow")),
            "the agent saw the refusal: {:#?}",
            finished.transcript()
        );
        finished.torn_down_cleanly();
    }
    assert!(
        chat_requests(&upstream).is_empty(),
        "the upstream received a refused request"
    );
    runtime.block_on(upstream.shutdown());
}
