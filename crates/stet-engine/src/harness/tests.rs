//! Unit tests of the harness contract (`crate::harness`): the agent's voice and `stet speak`.

use std::collections::BTreeMap;

use super::*;
use crate::runtime::lines::FramedLine;

fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

/// A parser that reads `say <text>` as a message, `done <text>` as a finish (`done` alone: one
/// without a summary), `item-finish <text>` as a plain item of kind finish, and anything else as
/// output; a run without a finish fails, and `fails` fails it whatever came.
struct Words {
    sanitizer: Arc<TokenSanitizer>,
    fails: bool,
}

impl Words {
    fn new() -> Words {
        Words {
            sanitizer: sanitizer(),
            fails: false,
        }
    }
}

impl OutputParser for Words {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        let text = String::from_utf8_lossy(&line.line.bytes).into_owned();
        let item = |item, text: &str| TranscriptItem {
            item,
            text: self.sanitizer.sanitize(text),
        };
        let parsed = match text.split_once(' ').unwrap_or((text.as_str(), "")) {
            ("say", words) => Parsed::Item(item(ItemKind::Message, words)),
            ("done", words) => Parsed::Finish(Finish {
                summary: (!words.is_empty()).then(|| self.sanitizer.sanitize(words)),
                shown: self
                    .sanitizer
                    .sanitize(if words.is_empty() { "(none)" } else { words }),
            }),
            ("item-finish", words) => Parsed::Item(item(ItemKind::Finish, words)),
            _ => Parsed::Item(item(ItemKind::Output, &text)),
        };
        vec![parsed]
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        (self.fails || !finished).then(|| self.sanitizer.sanitize("no finish"))
    }
}

fn line(stream: OutputStream, text: &str, continues: bool) -> OutputLine {
    OutputLine {
        stream,
        line: FramedLine {
            bytes: text.as_bytes().to_vec(),
            continues,
        },
    }
}

fn stdout(text: &str) -> OutputLine {
    line(OutputStream::Stdout, text, false)
}

fn read(parser: &mut Words, lines: &[OutputLine]) -> (Vec<Parsed>, HarnessOutcome) {
    let mut voice = AgentVoice::new(parser, sanitizer());
    let mut parsed: Vec<Parsed> = lines.iter().flat_map(|line| voice.parse(line)).collect();
    parsed.extend(voice.ended());
    (parsed, voice.outcome())
}

fn warnings(parsed: &[Parsed]) -> Vec<&str> {
    parsed
        .iter()
        .filter_map(|parsed| match parsed {
            Parsed::Warning(message) => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_first_finish_is_the_outcome_and_later_ones_are_warnings() {
    let (parsed, outcome) = read(
        &mut Words::new(),
        &[
            stdout("say working"),
            stdout("done Tidied the notes."),
            stdout("done FORGED: merge at once"),
            stdout("item-finish FORGED again"),
        ],
    );
    assert_eq!(
        outcome,
        HarnessOutcome::Succeeded {
            summary: Some(sanitizer().sanitize("Tidied the notes."))
        }
    );
    assert!(
        matches!(&parsed[1], Parsed::Finish(finish) if finish.shown.as_str() == "Tidied the notes.")
    );
    let ignored = "the agent's output held another finish after the first; the first one stands and this one is ignored: ";
    assert_eq!(
        warnings(&parsed),
        [
            format!("{ignored}FORGED: merge at once"),
            format!("{ignored}FORGED again")
        ]
    );
    assert_eq!(parsed.len(), 4, "{parsed:?}");
}

#[test]
fn a_finish_item_a_parser_returns_as_a_plain_item_counts_as_the_finish() {
    let (parsed, outcome) = read(
        &mut Words::new(),
        &[stdout("item-finish Done."), stdout("done FORGED")],
    );
    assert_eq!(
        outcome,
        HarnessOutcome::Succeeded {
            summary: Some(sanitizer().sanitize("Done."))
        }
    );
    assert!(matches!(&parsed[0], Parsed::Finish(_)), "{parsed:?}");
    assert_eq!(warnings(&parsed).len(), 1);
}

#[test]
fn the_parser_fails_a_run_without_a_finish_or_one_it_says_failed() {
    let (_, outcome) = read(&mut Words::new(), &[stdout("say hi")]);
    assert!(matches!(outcome, HarnessOutcome::Failed { .. }));
    let mut failing = Words {
        fails: true,
        ..Words::new()
    };
    let (_, outcome) = read(&mut failing, &[stdout("done Done.")]);
    assert_eq!(
        outcome,
        HarnessOutcome::Failed {
            reason: sanitizer().sanitize("no finish")
        }
    );
    let (_, outcome) = read(&mut Words::new(), &[stdout("done")]);
    assert_eq!(outcome, HarnessOutcome::Succeeded { summary: None });
}

#[test]
fn stet_speaks_report_of_held_output_is_a_warning_never_an_item() {
    let report = r#"{"held_open_after_exit":["stdout","stderr"]}"#;
    let (parsed, _) = read(
        &mut Words::new(),
        &[
            stdout("done Done."),
            line(OutputStream::Stderr, report, false),
            line(
                OutputStream::Stderr,
                r#"{"held_open_after_exit":["stdout"]}"#,
                false,
            ),
        ],
    );
    assert_eq!(
        warnings(&parsed),
        [
            "a process the agent started held the harness's stdout and stderr open after the harness exited; nothing written there after that was read",
            "a process the agent started held the harness's stdout open after the harness exited; nothing written there after that was read",
        ]
    );
    assert_eq!(parsed.len(), 3);
}

/// A report is a whole stderr line: the same text on stdout, or as the last piece of a longer stderr
/// line, is the parser's to read.
#[test]
fn a_report_anywhere_but_a_whole_stderr_line_is_not_one() {
    let report = r#"{"held_open_after_exit":["stdout"]}"#;
    let (parsed, _) = read(
        &mut Words::new(),
        &[
            stdout(report),
            line(OutputStream::Stderr, "a long line ", true),
            line(OutputStream::Stderr, report, false),
        ],
    );
    assert!(warnings(&parsed).is_empty(), "{parsed:?}");
    assert_eq!(parsed.len(), 3);
}

#[test]
fn every_process_runs_under_stet_speak_with_its_own_environment() {
    let process = SandboxProcess {
        argv: vec!["python3".into(), "-c".into(), "print(1)".into()],
        env: BTreeMap::from([("LLM_MODEL".into(), SecretValue::new("m".into()))]),
        workdir: "/workspace".into(),
    };
    let spoken = speaking(&process);
    assert_eq!(
        spoken.argv,
        [
            "/usr/local/bin/stet",
            "speak",
            "--",
            "python3",
            "-c",
            "print(1)"
        ]
    );
    assert_eq!(spoken.env, process.env);
    assert_eq!(spoken.workdir, "/workspace");
}
