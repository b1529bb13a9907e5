//! Unit tests of `crate::harness::replay`, in a file of their own so the module reads as code.

use super::*;
use crate::runtime::OutputLine;
use stet_protocol::event::ItemKind;

const FINISH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/openhands-1.16/run-finish.stdout"
);

fn labels() -> ReplayLabels {
    ReplayLabels {
        dispatch: DispatchId::new(),
        brief: "replay".into(),
    }
}

fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

fn events_of(out: Vec<u8>) -> Vec<Event> {
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Event>(line).unwrap())
        .collect()
}

fn replay_capture(input: &[u8], outputs: Option<&Path>) -> (Phase, Vec<Event>) {
    let mut out = Vec::new();
    let phase = replay_openhands(input, &mut out, outputs, &labels(), &sanitizer()).unwrap();
    (phase, events_of(out))
}

/// A parser reading `item <text>` and `usage <cost>` lines, and stderr as nothing.
struct Lines {
    sanitizer: Arc<TokenSanitizer>,
    streams: Vec<OutputStream>,
}

impl OutputParser for Lines {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        self.streams.push(line.stream);
        let text = String::from_utf8_lossy(&line.line.bytes).into_owned();
        match text.split_once(' ') {
            Some(("item", rest)) => {
                vec![Parsed::Item(stet_protocol::event::TranscriptItem {
                    item: ItemKind::Message,
                    text: self.sanitizer.sanitize(rest),
                })]
            }
            Some(("usage", cost)) => vec![Parsed::Usage(crate::gateway::usage::UsageReport {
                model: self.sanitizer.sanitize("m"),
                input_tokens: 10,
                output_tokens: 2,
                cached_tokens: 1,
                cost_usd: cost.parse().ok(),
            })],
            _ => Vec::new(),
        }
    }

    fn failure(&self, _finished: bool) -> Option<stet_sanitize::sanitize::SanitizedText> {
        None
    }
}

#[test]
fn a_capture_becomes_transcript_events_and_a_finished_event() {
    let (phase, events) = replay_capture(&std::fs::read(FINISH).unwrap(), None);
    assert_eq!(phase, Phase::Done);
    let items: Vec<ItemKind> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Transcript(item) => Some(item.item),
            _ => None,
        })
        .collect();
    assert_eq!(
        items,
        [
            ItemKind::Other,
            ItemKind::Thought,
            ItemKind::Command,
            ItemKind::Output,
            ItemKind::Finish
        ]
    );
    assert!(matches!(
        &events.last().unwrap().kind,
        EventKind::Finished { outcome: Phase::Done, exit_code: 0, reason: Some(r) } if r.as_str() == "Created hello.txt"
    ));
    assert!(events.iter().all(|e| e.brief == "replay"));
}

#[test]
fn a_capture_cut_mid_line_and_without_a_finish_is_a_failure_not_an_error() {
    let whole = std::fs::read(FINISH).unwrap();
    let cut = &whole[..whole.len() / 2];
    let (phase, events) = replay_capture(cut, None);
    assert_eq!(phase, Phase::Failed);
    assert!(matches!(
        &events.last().unwrap().kind,
        EventKind::Finished {
            outcome: Phase::Failed,
            exit_code: 1,
            ..
        }
    ));
}

#[test]
fn usage_reports_carry_a_running_total_and_the_final_usage_comes_before_the_finish() {
    let sanitizer = sanitizer();
    let mut parser = Lines {
        sanitizer: Arc::clone(&sanitizer),
        streams: Vec::new(),
    };
    let input = b"item hello\nnoise\nusage 0.25\nusage unknown\nusage 0.5\nitem bye";
    let last = Usage {
        model: sanitizer.sanitize("m"),
        input_tokens: 30,
        output_tokens: 6,
        cached_tokens: 3,
        cost_usd: Some(0.75),
        total_cost_usd: 0.75,
        latency_ms: None,
    };
    let mut out = Vec::new();
    let phase = replay(
        &input[..],
        &mut out,
        &mut parser,
        Some(last.clone()),
        &labels(),
        &sanitizer,
    )
    .unwrap();
    assert_eq!(phase, Phase::Done);
    assert!(parser.streams.iter().all(|s| *s == OutputStream::Stdout));
    assert_eq!(parser.streams.len(), 6);
    let kinds: Vec<String> = events_of(out)
        .into_iter()
        .map(|event| match event.kind {
            EventKind::Transcript(item) => format!("item {}", item.text),
            EventKind::Usage(usage) => {
                format!("usage {:?} {}", usage.cost_usd, usage.total_cost_usd)
            }
            EventKind::Finished { outcome, .. } => format!("finished {outcome:?}"),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "item hello",
            "usage Some(0.25) 0.25",
            "usage None 0.25",
            "usage Some(0.5) 0.75",
            "item bye",
            "usage Some(0.75) 0.75",
            "finished Done",
        ]
    );
}

#[test]
fn an_openhands_replay_adds_the_usage_recorded_in_the_outputs_directory() {
    let outputs = tempfile::tempdir().unwrap();
    let conversation = outputs
        .path()
        .join("conversations/4c35125b83d94f83a83ae8357a19aa13");
    std::fs::create_dir_all(&conversation).unwrap();
    let state = serde_json::json!({"stats": {"usage_to_metrics": {"agent": {
        "model_name": "openai/mock-model", "accumulated_cost": 0.5,
        "accumulated_token_usage": {"prompt_tokens": 100, "completion_tokens": 20, "cache_read_tokens": 5}
    }}}});
    std::fs::write(conversation.join("base_state.json"), state.to_string()).unwrap();
    let (phase, events) = replay_capture(&std::fs::read(FINISH).unwrap(), Some(outputs.path()));
    assert_eq!(phase, Phase::Done);
    let [.., usage, finished] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert!(
        matches!(&usage.kind, EventKind::Usage(u) if u.input_tokens == 100 && u.total_cost_usd == 0.5),
        "{usage:?}"
    );
    assert!(matches!(finished.kind, EventKind::Finished { .. }));
}
