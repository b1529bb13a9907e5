//! Fields from outside never reach a terminal unfiltered (DESIGN §5 rows 19 and 23), against the
//! built binary under a real terminal (`script`, every byte it wrote captured): a real branch whose
//! name carries bidi controls (U+202E, U+2066), a CSI (U+009B) and an OSC 52 clipboard write
//! (U+009D … U+009C) is refused as a brief's base, naming the character by its code point; and a
//! review record carrying such names, title and body (as a record written before the base was
//! checked would) is shown by `stet reviews` and `stet reviews N` with none of them raw.

use std::path::PathBuf;
use std::process::Command;

use stet_engine::credential::random_token;
use stet_engine::forge::local::{REVIEWS_DIR, ReviewRecord, ReviewState};
use stet_sanitize::display::{Treatment, treatment};

use super::headless::{Home, Project, STET_VARIABLES, scenario};
use super::support::git;

/// A branch name git accepts that would reorder the line (U+202E, U+2066), start a CSI (U+009B)
/// and write the clipboard through OSC 52 (U+009D … U+009C), with a payload made now.
fn hostile_name() -> String {
    let payload = random_token(12).unwrap();
    format!("fix\u{202e}nigol\u{2066}x\u{9b}31m\u{9d}52;c;{payload}\u{9c}end")
}

/// Runs `stet <args>` with `home`'s XDG directories in `dir` under `script`, a real terminal;
/// returns its exit status and every byte the terminal received.
pub(super) fn on_a_terminal(home: &Home, dir: &std::path::Path, args: &[&str]) -> (i32, Vec<u8>) {
    let mut line = shell_quoted(env!("CARGO_BIN_EXE_stet"));
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quoted(arg));
    }
    let mut command = Command::new("script");
    command
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .current_dir(dir)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .stdin(std::process::Stdio::null());
    for variable in STET_VARIABLES {
        command.env_remove(variable);
    }
    let output = command.output().unwrap();
    (output.status.code().unwrap_or(-1), output.stdout)
}

fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Every character in `bytes` that the display policy would not show, by code point (the
/// terminal's own CR LF and tabs aside).
pub(super) fn hidden_characters(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| match c {
            '\r' | '\n' | '\t' => false,
            c if c.is_control() => true,
            c => treatment(*c) != Treatment::Keep,
        })
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect()
}

#[test]
fn a_base_named_with_bidi_and_c1_controls_is_refused_by_code_point_on_a_terminal() {
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let base = hostile_name();
    git(&project.repo, &["branch", &base]);
    let listed = git(&project.repo, &["branch", "--list", "fix*"]);
    assert!(listed.contains("nigol"), "git made the branch: {listed}");
    let brief = project.repo.join(".stet/briefs/tidy-notes.toml");
    let text = std::fs::read_to_string(&brief).unwrap();
    std::fs::write(
        &brief,
        text.replace("base = \"main\"", &format!("base = \"{base}\"")),
    )
    .unwrap();

    let (status, shown) = on_a_terminal(
        &project.home,
        &project.repo,
        &["--headless", "--brief", "tidy-notes"],
    );
    let text = String::from_utf8_lossy(&shown);
    assert_eq!(status, 2, "{text}");
    assert!(text.contains("target.base"), "{text}");
    assert!(text.contains("U+202E"), "the character is named: {text}");
    assert_eq!(hidden_characters(&shown), Vec::<String>::new(), "{text:?}");
}

#[test]
fn stet_reviews_shows_no_raw_control_bidi_or_invisible_character_on_a_terminal() {
    let home = Home::new();
    let reviews = home.state().join(REVIEWS_DIR);
    std::fs::create_dir_all(&reviews).unwrap();
    let name = hostile_name();
    let now = chrono::Utc::now();
    let record = ReviewRecord {
        number: 1,
        repo: format!("octo/{name}"),
        remote: PathBuf::from(format!("/srv/{name}.git")),
        remote_git_dir: None,
        title: format!("Title {name} \u{200b}\u{e0041}"),
        body: format!("Body\u{1b}]52;c;aGk=\u{7}\n{name}\n\u{1b}[2J\u{feff}end"),
        base: name.clone(),
        head: format!("stet/{name}"),
        state: ReviewState::Open,
        created: now,
        updated: now,
    };
    std::fs::write(
        reviews.join("1.json"),
        serde_json::to_string_pretty(&record).unwrap(),
    )
    .unwrap();

    for args in [&["reviews"][..], &["reviews", "1"][..]] {
        let (status, shown) = on_a_terminal(&home, home.path(), args);
        let text = String::from_utf8_lossy(&shown);
        assert_eq!(status, 0, "stet {args:?}: {text}");
        assert!(
            text.contains(r"fix\u{202e}nigol\u{2066}x\u{9b}31m\u{9d}52;c;"),
            "stet {args:?} shows the base with its hidden characters escaped: {text}"
        );
        assert_eq!(
            hidden_characters(&shown),
            Vec::<String>::new(),
            "stet {args:?}: {text:?}"
        );
    }
}
