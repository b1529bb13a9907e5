//! Every piece of advice stet prints that names a setting names a place that accepts it: the walk
//! reads each string literal of the non-test code under `crates/` and `src/`, finds the settings it
//! names (as `section.field` or `[section] field`), and checks with the configuration loader's own
//! catalog that a repository's `stet.toml`, when the text sends the user there, may set them (or
//! that the text names `stet trust`, which lets it).

use std::path::{Path, PathBuf};

use stet_engine::config::{Class, settings_catalog};

/// The string literals of Rust `source` outside comments, raw strings included, escapes left as
/// written.
fn string_literals(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut literals = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        match chars[at] {
            '/' if chars.get(at + 1) == Some(&'/') => {
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
            }
            '\'' => {
                // A char literal ('"', '\'', '\u{..}') or a lifetime.
                if chars.get(at + 1) == Some(&'\\') {
                    at += 2;
                    while at < chars.len() && chars[at] != '\'' {
                        at += 1;
                    }
                    at += 1;
                } else if chars.get(at + 2) == Some(&'\'') {
                    at += 3;
                } else {
                    at += 1;
                }
            }
            'r' if matches!(chars.get(at + 1), Some('"' | '#'))
                && !chars
                    .get(at.wrapping_sub(1))
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_') =>
            {
                let mut hashes = 0;
                let mut next = at + 1;
                while chars.get(next) == Some(&'#') {
                    hashes += 1;
                    next += 1;
                }
                if chars.get(next) != Some(&'"') {
                    at += 1;
                    continue;
                }
                let start = next + 1;
                let closing: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let rest: String = chars[start..].iter().collect();
                let end = rest.find(&closing).unwrap_or(rest.len());
                literals.push(rest[..end].to_owned());
                at = start + rest[..end].chars().count() + closing.chars().count();
            }
            '"' => {
                let mut text = String::new();
                at += 1;
                while at < chars.len() && chars[at] != '"' {
                    if chars[at] == '\\' {
                        text.push(chars[at]);
                        at += 1;
                    }
                    if let Some(c) = chars.get(at) {
                        text.push(*c);
                    }
                    at += 1;
                }
                at += 1;
                literals.push(text);
            }
            _ => at += 1,
        }
    }
    literals
}

/// Whether `text` names `key` as a whole word.
fn names_word(text: &str, key: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    text.match_indices(key).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(word)
            && !text[at + key.len()..].chars().next().is_some_and(word)
    })
}

/// The settings of `catalog` that `text` names, as `section.field`, `[section] field` or a TOML
/// table's first line.
fn settings_named<'c>(
    text: &str,
    catalog: &'c [(&'static str, Class)],
) -> Vec<&'c (&'static str, Class)> {
    catalog
        .iter()
        .filter(|(key, _)| {
            let written = key.rsplit_once('.').map(|(section, field)| {
                [
                    format!("[{section}] {field}"),
                    format!("[{section}]\n{field}"),
                ]
            });
            names_word(text, key)
                || written.is_some_and(|written| written.iter().any(|w| names_word(text, w)))
        })
        .collect()
}

/// Why `text` is wrong advice: it sends the user to a repository's `stet.toml` for a machine
/// setting without naming `stet trust`, the one way that file may set it.
fn wrong_place(text: &str, catalog: &[(&'static str, Class)]) -> Vec<String> {
    let sends_to_repository = text.contains("stet.toml") || text.contains("{REPOSITORY_FILE}");
    if !sends_to_repository || text.contains("stet trust") {
        return Vec::new();
    }
    settings_named(text, catalog)
        .into_iter()
        .filter(|(_, class)| matches!(class, Class::Machine(_)))
        .map(|(key, _)| format!("{key} is a machine setting, which stet.toml refuses: {text:?}"))
        .collect()
}

/// Every non-test `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                sources(&path, found);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            found.push(path);
        }
    }
}

/// Each advice literal of the tree (a literal naming a setting), with its file.
fn advice() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let catalog = settings_catalog();
    let mut files = Vec::new();
    sources(&root.join("crates"), &mut files);
    sources(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for literal in string_literals(code) {
            if !settings_named(&literal, &catalog).is_empty() {
                found.push((file.clone(), literal));
            }
        }
    }
    found
}

#[test]
fn every_advice_naming_a_setting_names_a_place_that_accepts_it() {
    let catalog = settings_catalog();
    let advice = advice();
    // The walk finds the advice it is about: the image error, the model errors, the limits' hints.
    let image = advice
        .iter()
        .find(|(_, text)| text.starts_with("no sandbox image is configured"))
        .unwrap_or_else(|| panic!("the image error was not found among {advice:#?}"));
    assert!(image.0.ends_with("src/cli/session.rs"), "{image:?}");
    assert!(advice.len() >= 8, "{advice:#?}");
    let wrong: Vec<String> = advice
        .iter()
        .flat_map(|(file, text)| {
            wrong_place(text, &catalog)
                .into_iter()
                .map(move |why| format!("{}: {why}", file.display()))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_walk_flags_the_advice_this_issue_found() {
    let catalog = settings_catalog();
    let source =
        r##"bail!("set [dispatch] image = \"<name>@sha256:<digest>\" in stet.toml (see x)"); "##;
    let literals = string_literals(source);
    assert_eq!(literals.len(), 1, "{literals:?}");
    assert_eq!(wrong_place(&literals[0], &catalog).len(), 1);
    let flagged = wrong_place(
        "no model: set harness.openhands.model in stet.toml",
        &catalog,
    );
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    // A project setting is the repository's to lower, and `stet trust` lets a file set the rest.
    assert!(
        wrong_place(
            "a repository's stet.toml may only lower inbox.max_briefs",
            &catalog
        )
        .is_empty()
    );
    assert!(
        wrong_place(
            "set dispatch.image in stet.toml once you run `stet trust`",
            &catalog
        )
        .is_empty()
    );
    assert!(
        settings_named("/* '\"' */ x", &catalog).is_empty()
            && string_literals("let c = '\"'; let s = \"a\";") == vec!["a".to_owned()]
    );
}

/// What the loader says of the settings this advice names: the user's file accepts a machine
/// setting, an untrusted `stet.toml` refuses it, and the refusal names the user's file as resolved.
#[test]
fn the_image_setting_is_accepted_where_the_advice_points() {
    use stet_engine::config::{Config, ConfigFile, FileRole};
    let text = "[dispatch]\nimage = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n";
    let user = Config::from_files(&[ConfigFile::new(
        "/home/u/.config/stet/config.toml",
        text,
        FileRole::User,
    )]);
    assert!(user.is_ok(), "{user:?}");
    let repository =
        Config::from_files(&[ConfigFile::new("/r/stet.toml", text, FileRole::Repository)]);
    let refused = repository.unwrap_err().to_string();
    assert!(refused.contains("dispatch.image"), "{refused}");
    assert!(refused.contains("stet trust /r"), "{refused}");
    assert!(
        refused.contains(&stet_engine::config::user_file_shown()),
        "{refused}"
    );
}

/// The paragraphs of a Markdown `text`, one that ends with `:` together with the next (the block it
/// introduces).
fn paragraphs(text: &str) -> Vec<String> {
    let mut joined: Vec<String> = Vec::new();
    for paragraph in text.split("\n\n") {
        match joined.last_mut() {
            Some(last) if last.trim_end().ends_with(':') => {
                last.push_str("\n\n");
                last.push_str(paragraph);
            }
            _ => joined.push(paragraph.to_owned()),
        }
    }
    joined
}

/// The documents a user follows to a real agent say the same as the errors: a paragraph that sends
/// a machine setting to a repository's `stet.toml` names `stet trust`, or says that file refuses it.
#[test]
fn the_agent_documents_send_machine_settings_where_they_are_accepted() {
    let catalog = settings_catalog();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for document in ["docs/agents.md", "docker/dispatch/README.md"] {
        let text = std::fs::read_to_string(root.join(document)).unwrap();
        for paragraph in paragraphs(&text) {
            let paragraph = paragraph.as_str();
            if settings_named(paragraph, &catalog).is_empty() {
                continue;
            }
            checked += 1;
            let says_refused = ["cannot", "refused", "may not"]
                .iter()
                .any(|word| paragraph.contains(word));
            if !says_refused {
                let wrong = wrong_place(paragraph, &catalog);
                assert!(wrong.is_empty(), "{document}: {wrong:#?}");
            }
        }
    }
    assert!(checked >= 3, "{checked}");
    // What docker/dispatch/README.md said before issue 29 is caught.
    let before = "Then pin the digest (not the tag) in the repository's `stet.toml`:\n\n```toml\n[dispatch]\nimage = \"x@sha256:0\"\n```";
    let caught: Vec<String> = paragraphs(before)
        .iter()
        .flat_map(|paragraph| wrong_place(paragraph, &catalog))
        .collect();
    assert_eq!(caught.len(), 1, "{caught:?}");
}
