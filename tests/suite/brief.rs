//! Briefs and the inbox from real files: the demo briefs, directory listing rules, and every kind of
//! bad file a person (or an attacker) could leave in `.stet/briefs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use stet_engine::brief::{Brief, BriefError, MAX_BRIEF_BYTES};
use stet_engine::inbox::{Inbox, InboxError};
use stet_engine::workflow::Workflow;

const VALID: &str = r#"title = "Fix the login redirect loop"
workflow = "implement"

[target]
repo = "octo/app"
base = "main"

[[items]]
text = "The redirect after login loops when ?next= is empty."
anchor = { path = "src/auth/login.rs", lines = [120, 148] }
"#;

fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, contents).unwrap();
    path
}

fn file_names(inbox: &Inbox) -> Vec<String> {
    inbox
        .entries()
        .iter()
        .map(|entry| {
            entry
                .path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn demo_briefs_are_valid_and_render_with_the_implement_workflow() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo/briefs");
    let inbox = Inbox::load(&dir).unwrap();
    assert_eq!(inbox.entries().len(), 2);
    let workflow = Workflow::builtin("implement").unwrap();
    for entry in inbox.entries() {
        let brief = entry
            .brief
            .as_ref()
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(brief.workflow, "implement");
        assert_eq!(brief.target.repo, "demo/app");
        assert_eq!(brief.target.base, "main");
        let branch = brief
            .target
            .branch
            .clone()
            .unwrap_or_else(|| format!("stet/{}", brief.id));
        let instructions = workflow.render(brief, &branch);
        assert!(instructions.contains(&brief.title), "{instructions}");
        assert!(instructions.contains(&branch), "{instructions}");
        assert!(instructions.contains("1. "), "{instructions}");
        assert!(!instructions.contains("{{"), "{instructions}");
    }
}

#[test]
fn from_file_takes_the_id_from_the_file_stem() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "fix-login_2.toml", VALID);
    let brief = Brief::from_file(&path).unwrap();
    assert_eq!(brief.id, "fix-login_2");
    assert_eq!(brief.title, "Fix the login redirect loop");
}

#[test]
fn file_names_that_cannot_be_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "Fix-Login.toml",
        "fix login.toml",
        ".hidden.toml",
        "fix.login.toml",
    ] {
        let path = write(dir.path(), name, VALID);
        assert!(
            matches!(Brief::from_file(&path), Err(BriefError::InvalidId { .. })),
            "{name}"
        );
    }
}

#[test]
fn errors_name_the_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "bad.toml",
        VALID.replace("base = \"main\"", "base = \"main\"\nbranch = \"main\""),
    );
    let message = Brief::from_file(&path).unwrap_err().to_string();
    let expected_start = format!("{}:7:10: field `target.branch`: ", path.display());
    assert!(message.starts_with(&expected_start), "{message}");
    assert!(message.contains("protected branch"), "{message}");
}

#[test]
fn a_ten_megabyte_file_is_refused_without_reading_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "huge.toml", vec![b'#'; 10 * 1024 * 1024]);
    match Brief::from_file(&path) {
        Err(BriefError::TooLarge { size, limit, .. }) => {
            assert_eq!(size, 10 * 1024 * 1024);
            assert_eq!(limit, MAX_BRIEF_BYTES);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let just_fits = write(
        dir.path(),
        "big.toml",
        format!(
            "{VALID}{}",
            "#".repeat(usize::try_from(MAX_BRIEF_BYTES).unwrap() - VALID.len())
        ),
    );
    assert!(Brief::from_file(&just_fits).is_ok());
}

#[test]
fn invalid_utf8_is_refused_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"title = \"ok\"\ntitle2 = \"caf".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b"\"\n");
    let path = write(dir.path(), "latin.toml", bytes);
    let error = Brief::from_file(&path).unwrap_err();
    assert!(
        matches!(
            error,
            BriefError::NotUtf8 {
                line: 2,
                column: 14,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("not valid UTF-8"), "{error}");
}

#[test]
fn a_fifo_is_refused_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipe.toml");
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());
    assert!(matches!(
        Brief::from_file(&path),
        Err(BriefError::NotAFile { .. })
    ));
}

#[test]
fn a_missing_file_is_a_read_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.toml");
    let error = Brief::from_file(&path).unwrap_err();
    assert!(matches!(error, BriefError::Read { .. }), "{error:?}");
    assert!(error.to_string().contains("gone.toml"), "{error}");
}

#[test]
fn inbox_lists_toml_files_in_byte_order_and_keeps_bad_ones_visible() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b-second.toml", VALID);
    write(dir.path(), "a-first.toml", VALID);
    write(dir.path(), "Upper.toml", VALID);
    write(dir.path(), "c-broken.toml", "title = \n");
    write(dir.path(), "notes.md", "not a brief");
    write(dir.path(), "d.toml.bak", VALID);
    fs::create_dir(dir.path().join("folder.toml")).unwrap();
    fs::create_dir(dir.path().join("nested")).unwrap();
    write(&dir.path().join("nested"), "deep.toml", VALID);

    let inbox = Inbox::load(dir.path()).unwrap();
    assert_eq!(
        file_names(&inbox),
        [
            "Upper.toml",
            "a-first.toml",
            "b-second.toml",
            "c-broken.toml"
        ]
    );
    let validity: Vec<bool> = inbox
        .entries()
        .iter()
        .map(|entry| entry.brief.is_ok())
        .collect();
    assert_eq!(validity, [false, true, true, false]);
    assert!(matches!(
        inbox.entries()[3].brief,
        Err(BriefError::Toml { line: 1, .. })
    ));
}

#[test]
fn inbox_order_is_stable_across_loads() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "z.toml", "m.toml", "a.toml", "a-b.toml", "a_b.toml", "0.toml",
    ] {
        write(dir.path(), name, VALID);
    }
    let first = file_names(&Inbox::load(dir.path()).unwrap());
    assert_eq!(
        first,
        [
            "0.toml", "a-b.toml", "a.toml", "a_b.toml", "m.toml", "z.toml"
        ]
    );
    assert_eq!(file_names(&Inbox::load(dir.path()).unwrap()), first);
}

#[test]
fn an_empty_or_missing_inbox_has_no_entries() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Inbox::load(dir.path()).unwrap().entries().is_empty());
    let missing = Inbox::default_dir(dir.path());
    assert!(Inbox::load(&missing).unwrap().entries().is_empty());
}

#[test]
fn an_unreadable_inbox_is_an_error_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_directory = write(dir.path(), "briefs", "a file, not a directory");
    let error = Inbox::load(&not_a_directory).unwrap_err();
    assert!(matches!(error, InboxError::ReadDirectory { .. }));
    assert!(
        error
            .to_string()
            .contains(&not_a_directory.display().to_string()),
        "{error}"
    );
}

mod never_panics {
    use std::path::Path;

    use proptest::prelude::*;
    use stet_engine::brief::Brief;
    use stet_engine::workflow::Workflow;

    use super::VALID;

    /// `VALID` with the bytes in `start..start + removed` replaced by `inserted`, cut at char boundaries.
    fn mutated(start: usize, removed: usize, inserted: &str) -> String {
        let start = start.min(VALID.len());
        let end = (start + removed).min(VALID.len());
        let mut text = String::new();
        text.push_str(VALID.get(..start).unwrap_or(VALID));
        text.push_str(inserted);
        text.push_str(VALID.get(end..).unwrap_or_default());
        text
    }

    proptest! {
        #[test]
        fn parsing_any_text_returns_a_result(text in any::<String>()) {
            let _ = Brief::parse("any", Path::new("any.toml"), &text);
        }

        #[test]
        fn parsing_a_damaged_brief_returns_a_result(
            start in 0..VALID.len(),
            removed in 0usize..12,
            inserted in "[\\[\\]{}=\",.\\n a-z0-9#'\\\\-]{0,8}",
        ) {
            if let Err(error) = Brief::parse("any", Path::new("any.toml"), &mutated(start, removed, &inserted)) {
                prop_assert!(error.to_string().starts_with("any.toml"), "{}", error);
            }
        }

        #[test]
        fn any_template_either_parses_or_is_refused(template in any::<String>(), braces in "[{} a-z_]{0,16}") {
            let brief = Brief::parse("any", Path::new("any.toml"), VALID).unwrap();
            for text in [template, braces] {
                if let Ok(workflow) = Workflow::from_template("any", &text) {
                    let _ = workflow.render(&brief, "stet/any");
                }
            }
        }
    }
}
