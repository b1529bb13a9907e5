//! Unit tests of `crate::dispatch::gate::paths`, in a file of their own so the module reads as code.

use super::*;
use crate::git::changes::AddedText;

fn entry(kind: EntryKind, target: Option<&str>) -> Option<Entry> {
    Some(Entry {
        kind,
        link_target: target.map(|target| target.as_bytes().to_vec()),
    })
}

fn file() -> Option<Entry> {
    entry(EntryKind::File, None)
}

fn exec() -> Option<Entry> {
    entry(EntryKind::Executable, None)
}

fn link(target: &str) -> Option<Entry> {
    entry(EntryKind::Link, Some(target))
}

fn change(path: &str, before: Option<Entry>, after: Option<Entry>) -> PathChange {
    PathChange {
        path: path.into(),
        before,
        after,
        added: AddedText::default(),
        binary: false,
        unread: None,
    }
}

/// The held paths of `changes`, the result's tree holding `links` besides the changed ones.
fn held_of(changes: Vec<PathChange>, links: &[(&str, &str)]) -> Vec<String> {
    let mut all_links: Vec<(String, Vec<u8>)> = links
        .iter()
        .map(|(path, target)| ((*path).to_owned(), target.as_bytes().to_vec()))
        .collect();
    for change in &changes {
        if let Some(target) = change.after.as_ref().and_then(|e| e.link_target.clone()) {
            all_links.push((change.path.clone(), target));
        }
    }
    let changes = ResultChanges {
        changes,
        removed: Vec::new(),
        links: all_links,
        links_cut: false,
    };
    held(&changes, &ProtectedPaths::default())
        .into_iter()
        .map(|held| held.to_string())
        .collect()
}

#[test]
fn protected_rules_hold_changes_deletions_included() {
    assert_eq!(
        held_of(
            vec![
                change("stet.toml", file(), file()),
                change(".github/actions/x/action.yml", None, file()),
                change(".github/workflows/ci.yml", file(), None),
                change("src/lib.rs", file(), file()),
            ],
            &[]
        ),
        vec![
            "stet.toml (stet's own configuration)",
            ".github/actions/x/action.yml (CI: .github/**)",
            ".github/workflows/ci.yml (CI: .github/**)",
        ]
    );
}

#[test]
fn newly_executable_files_are_held_and_unchanged_modes_are_not() {
    assert_eq!(
        held_of(
            vec![
                change("bin/run", None, exec()),
                change("bin/old", file(), exec()),
                change("bin/was-a-link", link("x"), exec()),
                change("bin/still", exec(), exec()),
                change("bin/dropped", exec(), file()),
            ],
            &[]
        ),
        vec![
            "bin/run (newly executable)",
            "bin/old (newly executable)",
            "bin/was-a-link (newly executable)",
        ]
    );
}

#[test]
fn new_and_retargeted_links_say_where_they_lead() {
    assert_eq!(
        held_of(
            vec![
                change("ci", None, link(".github")),
                change("docs/x", None, link("../.github/workflows/ci.yml")),
                change("etc", None, link("/etc/passwd")),
                change("up", None, link("../../outside")),
                change("loop", None, link("loop")),
                change("moved", link("a"), link("b")),
                change("kept", link("a"), link("a")),
                change("docs/readme", None, link("../README.md")),
            ],
            &[]
        ),
        vec![
            "ci (new symlink → .github, which is CI: .github/**)",
            "docs/x (new symlink → ../.github/workflows/ci.yml, which is CI: .github/**)",
            "etc (new symlink → /etc/passwd, outside the repository)",
            "up (new symlink → ../../outside, outside the repository)",
            "loop (new symlink → loop, a loop of links)",
            "moved (symlink retargeted → b)",
            "docs/readme (new symlink → ../README.md)",
        ]
    );
}

#[test]
fn dot_github_replaced_by_a_link_is_held_on_both_counts() {
    assert_eq!(
        held_of(
            vec![
                change(".github", None, link("tools/ci")),
                change(".github/workflows/ci.yml", file(), None),
            ],
            &[]
        ),
        vec![
            ".github (CI: .github/**; new symlink → tools/ci)",
            ".github/workflows/ci.yml (CI: .github/**)",
        ]
    );
}

#[test]
fn a_path_reached_through_an_existing_link_is_held_under_that_name() {
    assert_eq!(
        held_of(
            vec![
                change("tools/hooks/pre-commit", file(), file()),
                change("ci-config/workflows/deploy.yml", None, file()),
                change("shared/rules.md", file(), file()),
                change("src/lib.rs", file(), file()),
            ],
            &[
                (".husky", "tools/hooks"),
                (".github", "ci-config"),
                ("docs/a", "../shared"),
                ("AGENTS.md", "docs/a/rules.md"),
            ]
        ),
        vec![
            "tools/hooks/pre-commit (reached as .husky/pre-commit through the symlink .husky: runs on developer machines: .husky/**)",
            "ci-config/workflows/deploy.yml (reached as .github/workflows/deploy.yml through the symlink .github: CI: .github/**)",
            "shared/rules.md (reached as AGENTS.md through the symlink AGENTS.md: agent configuration: **/AGENTS.md)",
        ]
    );
}

#[test]
fn a_directory_colliding_with_a_link_on_case_insensitive_file_systems_is_held() {
    assert_eq!(
        held_of(
            vec![change("Docs/workflows/x.yml", None, file())],
            &[("docs", ".github")]
        ),
        vec![
            "Docs/workflows/x.yml (its directory Docs is the symlink docs on case-insensitive file systems)"
        ]
    );
}

#[test]
fn ntfs_short_names_are_held() {
    assert_eq!(
        held_of(
            vec![
                change("GITHUB~1/workflows/x.yml", None, file()),
                change("STET~1.TOM", None, file()),
                change("docs/backup~1.txt", None, file()),
                change("notes~/x.txt", None, file()),
                change("a~0", None, file()),
                change("verylongname~1", None, file()),
            ],
            &[]
        ),
        vec![
            "GITHUB~1/workflows/x.yml (GITHUB~1 is an NTFS short name, which Windows may resolve to another file or directory)",
            "STET~1.TOM (STET~1.TOM is an NTFS short name, which Windows may resolve to another file or directory)",
            "docs/backup~1.txt (backup~1.txt is an NTFS short name, which Windows may resolve to another file or directory)",
        ]
    );
}

#[test]
fn links_resolve_through_other_links_and_dot_dot_after_a_link() {
    let owned = vec![
        ("a".to_owned(), b"b/c".to_vec()),
        ("b".to_owned(), b"real".to_vec()),
        ("real/c".to_owned(), b"../.stet".to_vec()),
        ("self".to_owned(), b"self/x".to_vec()),
    ];
    let links = Links::new(&owned, &|| false).unwrap();
    assert_eq!(links.resolve("a"), Resolved::Inside(".stet".into()));
    assert_eq!(
        links.resolve("a/briefs/x.toml"),
        Resolved::Inside(".stet/briefs/x.toml".into())
    );
    assert_eq!(links.resolve("b/../src"), Resolved::Inside("src".into()));
    assert_eq!(links.resolve("self"), Resolved::Loop);
    assert_eq!(links.resolve("../x"), Resolved::Outside);
    let aliases: Vec<String> = links
        .aliases(".stet/briefs/x.toml")
        .0
        .into_iter()
        .map(|(alias, _)| alias)
        .collect();
    assert!(
        aliases.contains(&"a/briefs/x.toml".to_owned()),
        "{aliases:?}"
    );
    assert!(
        aliases.contains(&"real/c/briefs/x.toml".to_owned()),
        "{aliases:?}"
    );
}

#[test]
fn links_of_thousands_of_components_resolve_and_their_reading_stops_when_told() {
    let deep = vec!["x"; 2_000].join("/");
    let owned = vec![
        ("far".to_owned(), format!("{deep}/../../near").into_bytes()),
        ("x".to_owned(), b"y".to_vec()),
    ];
    let links = Links::new(&owned, &|| false).unwrap();
    let expected = format!("y/{}/near", vec!["x"; 1_997].join("/"));
    assert_eq!(links.resolve("far"), Resolved::Inside(expected));
    assert!(Links::new(&owned, &|| true).is_err());
}
