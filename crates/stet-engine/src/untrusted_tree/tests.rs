//! Unit tests of `crate::untrusted_tree`, by effect: what a hostile tree holds is never followed,
//! never waited on and never read past its bound.

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// A directory outside the tree holding a file whose text must never be read through the tree.
fn elsewhere() -> tempfile::TempDir {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host-only-secret").unwrap();
    outside
}

fn listed(listing: &mut Listing) -> Vec<Entry> {
    let mut entries = listing
        .by_ref()
        .collect::<rustix::io::Result<Vec<_>>>()
        .unwrap();
    entries.sort_by(|left, right| left.name.cmp(&right.name));
    entries
}

#[test]
fn a_link_to_a_directory_is_a_link_and_is_never_opened() {
    let outside = elsewhere();
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("real")).unwrap();
    std::fs::write(tree.path().join("real/inside"), "x").unwrap();
    symlink(outside.path(), tree.path().join("link")).unwrap();

    let mut listing = Listing::new(open_root(tree.path()).unwrap()).unwrap();
    let entries = listed(&mut listing);
    let directory = listing.fd().unwrap();
    let types: Vec<(&[u8], FileType)> = entries
        .iter()
        .map(|entry| {
            let file_type = entry_type(directory, &entry.name, entry.file_type).unwrap();
            (entry.name.to_bytes(), file_type)
        })
        .collect();
    assert_eq!(
        types,
        [
            (&b"link"[..], FileType::Symlink),
            (&b"real"[..], FileType::Directory)
        ]
    );
    assert_eq!(
        entry_type(directory, c"link", FileType::Unknown).unwrap(),
        FileType::Symlink,
        "a type the listing did not give is looked up without following the link"
    );

    let refused = open_directory(directory, c"link").unwrap_err();
    assert!(matches!(refused, Errno::NOTDIR | Errno::LOOP), "{refused}");
    let refused = open_root(&tree.path().join("link")).unwrap_err();
    assert!(matches!(refused, Errno::NOTDIR | Errno::LOOP), "{refused}");

    let real = open_directory(directory, c"real").unwrap();
    let inside = listed(&mut Listing::new(real).unwrap());
    assert_eq!(
        inside,
        [Entry {
            name: c"inside".to_owned(),
            file_type: FileType::RegularFile
        }]
    );
}

#[test]
fn a_link_to_a_file_is_not_read() {
    let outside = elsewhere();
    let tree = tempfile::tempdir().unwrap();
    symlink(outside.path().join("secret"), tree.path().join("link")).unwrap();
    let root = open_root(tree.path()).unwrap();

    let refused = open_file(&root, c"link", 1024).unwrap_err();
    assert!(
        matches!(refused, FileError::Open(Errno::LOOP)),
        "{refused:?}"
    );
    assert!(!format!("{refused:?}").contains("host-only-secret"));
    assert_eq!(
        entry_type(&root, c"link", FileType::Unknown).unwrap(),
        FileType::Symlink
    );
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let tree = tempfile::tempdir().unwrap();
    let root = open_root(tree.path()).unwrap();
    rustix::fs::mknodat(
        &root,
        c"fifo",
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::fs::create_dir(tree.path().join("directory")).unwrap();

    // A blocking open would wait for a writer forever: the answer must come back well within this.
    let (sender, answers) = mpsc::channel();
    std::thread::spawn(move || {
        let answer = open_file(&root, c"fifo", 1024).map(|file| file.size());
        sender.send(answer).unwrap();
    });
    let answer = answers
        .recv_timeout(Duration::from_secs(10))
        .expect("opening a fifo blocked");
    assert!(matches!(answer, Err(FileError::NotRegular)), "{answer:?}");

    let root = open_root(tree.path()).unwrap();
    let refused = open_file(&root, c"directory", 1024).unwrap_err();
    assert!(matches!(refused, FileError::NotRegular), "{refused:?}");
    let refused = open_file(&root, c"gone", 1024).unwrap_err();
    assert!(
        matches!(refused, FileError::Open(Errno::NOENT)),
        "{refused:?}"
    );
}

#[test]
fn a_file_over_the_limit_is_refused_when_opened_or_once_it_grows() {
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("at-limit"), "12345678").unwrap();
    std::fs::write(tree.path().join("over"), "123456789").unwrap();
    let root = open_root(tree.path()).unwrap();

    let refused = open_file(&root, c"over", 8).unwrap_err();
    assert!(
        matches!(refused, FileError::TooLarge { size: 9, limit: 8 }),
        "{refused:?}"
    );

    let file = open_file(&root, c"at-limit", 8).unwrap();
    assert_eq!(file.size(), 8);
    assert_eq!(file.read().unwrap(), b"12345678");

    let growing = open_file(&root, c"at-limit", 8).unwrap();
    std::fs::write(tree.path().join("at-limit"), "1234567890123").unwrap();
    let refused = growing.read().unwrap_err();
    assert!(
        matches!(refused, FileError::TooLarge { size: 9, limit: 8 }),
        "only one byte past the limit is ever read: {refused:?}"
    );
}

#[test]
fn the_owners_execute_bit_is_what_makes_a_file_executable() {
    let tree = tempfile::tempdir().unwrap();
    for (name, mode) in [("tool", 0o744), ("plain", 0o655)] {
        let path = tree.path().join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let root = open_root(tree.path()).unwrap();
    assert!(open_file(&root, c"tool", 64).unwrap().owner_may_execute());
    assert!(!open_file(&root, c"plain", 64).unwrap().owner_may_execute());
}
