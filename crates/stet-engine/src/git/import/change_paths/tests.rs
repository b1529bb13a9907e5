//! Unit tests of the change's path count: each kind of change counts its paths once, a subtree
//! equal on both sides counts nothing, and the count refuses one byte past the limit.

use git2::{FileMode, Oid, Repository};

use super::*;

/// A tree of `(path, content)` files (a content starting with `->` is a link to the rest).
fn tree(repository: &Repository, files: &[(&str, &str)]) -> Oid {
    let mut index = git2::Index::new().unwrap();
    for (path, content) in files {
        let (content, mode) = match content.strip_prefix("->") {
            Some(target) => (target, FileMode::Link),
            None => (*content, FileMode::Blob),
        };
        let id = repository.blob(content.as_bytes()).unwrap();
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: u32::from(mode),
            uid: 0,
            gid: 0,
            file_size: 0,
            id,
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        };
        index.add(&entry).unwrap();
    }
    index.write_tree_to(repository).unwrap()
}

/// What `within` says of `before` → `after` under `limit`.
fn counted(before: &[(&str, &str)], after: &[(&str, &str)], limit: u64) -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let repository = Repository::init_bare(dir.path()).unwrap();
    let before = repository.find_tree(tree(&repository, before)).unwrap();
    let after = repository.find_tree(tree(&repository, after)).unwrap();
    within(&repository, &before, &after, limit, &|| false)
}

/// The least limit `before` → `after` passes, found by asking.
fn figure(before: &[(&str, &str)], after: &[(&str, &str)]) -> u64 {
    (0..100_000)
        .find(|limit| counted(before, after, *limit).is_ok())
        .unwrap()
}

const BASE: &[(&str, &str)] = &[
    ("README.md", "hello\n"),
    ("src/lib.rs", "pub fn one() {}\n"),
    ("src/deep/a.rs", "a\n"),
    ("src/deep/b.rs", "b\n"),
    ("docs/guide.md", "guide\n"),
];

#[test]
fn an_unchanged_tree_names_no_path() {
    assert_eq!(figure(BASE, BASE), 0);
}

#[test]
fn added_changed_and_deleted_paths_each_count_their_whole_path_once() {
    let mut after: Vec<(&str, &str)> = BASE.to_vec();
    // Changed: "src/lib.rs" (10 bytes); added: "src/new/x.rs" (12); deleted: "docs/guide.md" (13).
    after[1].1 = "pub fn two() {}\n";
    after.push(("src/new/x.rs", "x\n"));
    after.retain(|(path, _)| *path != "docs/guide.md");
    assert_eq!(figure(BASE, &after), 10 + 12 + 13);
    assert!(counted(BASE, &after, 35).is_ok());
    match counted(BASE, &after, 34) {
        Err(ImportError::PathsTooLong { figure, limit: 34 }) => assert!(figure > 34),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_deleted_directory_counts_every_path_under_it() {
    let after: Vec<(&str, &str)> = BASE
        .iter()
        .copied()
        .filter(|(path, _)| !path.starts_with("src/"))
        .collect();
    // "src/lib.rs", "src/deep/a.rs", "src/deep/b.rs".
    assert_eq!(figure(BASE, &after), 10 + 13 + 13);
}

#[test]
fn a_file_turned_directory_counts_the_file_and_what_the_directory_holds() {
    let mut after: Vec<(&str, &str)> = BASE
        .iter()
        .copied()
        .filter(|(path, _)| *path != "README.md")
        .collect();
    after.push(("README.md/inner", "now a directory\n"));
    assert_eq!(figure(BASE, &after), 9 + 15);
    let mut linked = BASE.to_vec();
    linked[0].1 = "->elsewhere";
    assert_eq!(figure(BASE, &linked), 9, "a file turned link is one path");
}

#[test]
fn the_count_asks_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let repository = Repository::init_bare(dir.path()).unwrap();
    let before = repository.find_tree(tree(&repository, BASE)).unwrap();
    let after = repository.find_tree(tree(&repository, &[])).unwrap();
    let error = within(&repository, &before, &after, u64::MAX, &|| true).unwrap_err();
    assert!(matches!(error, ImportError::Interrupted), "{error}");
}
