//! Unit tests of `crate::git::import`, in a file of their own so the module reads as code.

use super::*;

#[test]
fn every_spelling_git_reads_as_dot_git_is_recognized() {
    for name in [
        ".git",
        ".GIT",
        ".Git",
        ".git.",
        ".git ",
        ".git. .",
        ".git::$INDEX_ALLOCATION",
        ".git\\hooks",
        "git~1",
        "GIT~1",
        ".g\u{200c}it",
        "\u{feff}.git",
        ".gi\u{202e}t",
    ] {
        assert!(names_git_directory(name.as_bytes()), "{name:?}");
    }
}

#[test]
fn names_that_only_start_like_dot_git_are_kept() {
    for name in [
        ".github",
        ".gitignore",
        ".gitkeep",
        ".gitattributes",
        ".git-blame-ignore-revs",
        "git",
        "x.git",
        "repo.git",
        "git~2",
        ".git.x",
        ".g\u{e9}it",
    ] {
        assert!(!names_git_directory(name.as_bytes()), "{name:?}");
    }
    assert!(!names_git_directory(b".git\xff"));
    assert!(names_git_directory(b".GIT"));
}

#[test]
fn gitmodules_is_matched_the_same_way() {
    assert!(folds_to(b".gitmodules", b".gitmodules"));
    assert!(folds_to(b".GitModules ", b".gitmodules"));
    assert!(!folds_to(b".gitmodules.bak", b".gitmodules"));
    assert!(!folds_to(b"gitmodules", b".gitmodules"));
}

#[test]
fn paths_join_with_slashes_and_show_lossily() {
    assert_eq!(join(b"", b"a"), b"a");
    assert_eq!(join(b"a/b", b"c"), b"a/b/c");
    assert_eq!(lossy(b"caf\xe9"), "caf\u{fffd}");
}

#[test]
fn the_default_limits_are_the_documented_ones() {
    let limits = ImportLimits::default();
    assert_eq!(limits.max_files, 200_000);
    assert_eq!(limits.max_file_bytes, 100 << 20);
    assert_eq!(limits.max_total_bytes, 1 << 30);
}

/// A repository with one commit of `files`, and an empty workspace directory beside it.
struct Fixture {
    _dir: tempfile::TempDir,
    repository: PathBuf,
    workspace: PathBuf,
    parent: CommitSha,
}

impl Fixture {
    fn new(files: &[(&str, &[u8])]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repository = dir.path().join("repo");
        let workspace = dir.path().join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        let repo = Repository::init(&repository).unwrap();
        let mut index = repo.index().unwrap();
        for (path, content) in files {
            let full = repository.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, content).unwrap();
            index.add_path(Path::new(path)).unwrap();
        }
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let signature = Signature::now("user", "user@stet.invalid").unwrap();
        let commit = repo
            .commit(Some("HEAD"), &signature, &signature, "base", &tree, &[])
            .unwrap();
        for (path, content) in files {
            let full = workspace.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        Fixture {
            _dir: dir,
            repository,
            workspace,
            parent: CommitSha::parse(&commit.to_string()).unwrap(),
        }
    }

    fn write(&self, path: &str, content: &[u8]) {
        let full = self.workspace.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }

    fn import(&self, limits: ImportLimits, interrupted: &dyn Fn() -> bool) -> Result<Imported> {
        let message = std::sync::Arc::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap())
            .sanitize("agent result");
        import_until(
            &ImportRequest {
                repository: &self.repository,
                workspace: &self.workspace,
                parent: &self.parent,
                identity: &Identity {
                    name: "stet".into(),
                    email: "stet@stet.invalid".into(),
                },
                message: &message,
                limits,
            },
            interrupted,
        )
    }

    /// Every file under `.git/objects` with its size: what a refused import must not change.
    fn objects(&self) -> Vec<(PathBuf, u64)> {
        fn walk(dir: &Path, into: &mut Vec<(PathBuf, u64)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let metadata = entry.metadata().unwrap();
                if metadata.is_dir() {
                    walk(&entry.path(), into);
                } else {
                    into.push((entry.path(), metadata.len()));
                }
            }
        }
        let mut files = Vec::new();
        walk(&self.repository.join(".git").join("objects"), &mut files);
        files.sort();
        files
    }
}

/// Distinct, incompressible-looking content of `length` bytes.
fn content(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn an_import_refused_for_its_size_after_writing_blobs_leaves_the_store_as_it_was() {
    let fixture = Fixture::new(&[("README.md", b"hello\n")]);
    for file in 0..8 {
        fixture.write(&format!("big/{file}.bin"), &content(file, 64 * 1024));
    }
    let before = fixture.objects();
    let limits = ImportLimits {
        max_total_bytes: 5 * 64 * 1024,
        ..ImportLimits::default()
    };
    let error = fixture.import(limits, &|| false).unwrap_err();
    assert!(
        matches!(error, ImportError::TotalTooLarge { .. }),
        "{error}"
    );
    assert_eq!(
        fixture.objects(),
        before,
        "the refused import left objects behind"
    );

    // The same workspace under the default limits is imported, as one pack of the new objects.
    let imported = fixture.import(ImportLimits::default(), &|| false).unwrap();
    let Imported::Committed { commit, diff, .. } = imported else {
        panic!("{imported:?}");
    };
    assert_eq!(diff.files.len(), 8);
    let after = fixture.objects();
    let added: Vec<_> = after.iter().filter(|file| !before.contains(file)).collect();
    assert_eq!(added.len(), 2, "one pack and its index: {added:?}");
    assert!(
        added
            .iter()
            .all(|(path, _)| path.parent().unwrap().ends_with("objects/pack"))
    );
    let reopened = Repository::open(&fixture.repository).unwrap();
    let commit = reopened
        .find_commit(Oid::from_str(commit.as_str()).unwrap())
        .unwrap();
    let blob = commit
        .tree()
        .unwrap()
        .get_path(Path::new("big/3.bin"))
        .unwrap()
        .id();
    assert_eq!(
        reopened.find_blob(blob).unwrap().content(),
        content(3, 64 * 1024)
    );
}

#[test]
fn an_interrupted_import_writes_nothing_wherever_it_stops() {
    let fixture = Fixture::new(&[("README.md", b"hello\n"), ("src/lib.rs", b"fn a() {}\n")]);
    for file in 0..6 {
        fixture.write(&format!("src/new{file}.rs"), &content(file, 4096));
    }
    fixture.write("README.md", b"changed\n");
    let before = fixture.objects();
    let mut stops = 0;
    for after_questions in 0.. {
        let asked = std::cell::Cell::new(0);
        let interrupted = || {
            asked.set(asked.get() + 1);
            asked.get() > after_questions
        };
        match fixture.import(ImportLimits::default(), &interrupted) {
            Err(ImportError::Interrupted) => stops += 1,
            Ok(Imported::Committed { .. }) => break,
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fixture.objects(),
            before,
            "interrupted after {after_questions} questions"
        );
    }
    // Each of the nine entries was a place to stop, so was each of the seven files the diff reads and
    // each of the 17 lines it prints (file and hunk headers included), and so was the moment before
    // the pack.
    assert_eq!(stops, 34);
}

#[test]
fn an_unchanged_workspace_writes_nothing_and_shared_content_is_stored_once() {
    let fixture = Fixture::new(&[("a.txt", b"same\n")]);
    let before = fixture.objects();
    let unchanged = fixture.import(ImportLimits::default(), &|| false).unwrap();
    assert!(
        matches!(unchanged, Imported::Unchanged { .. }),
        "{unchanged:?}"
    );
    assert_eq!(fixture.objects(), before);

    let shared = content(9, 1000);
    fixture.write("one/x.bin", &shared);
    fixture.write("two/x.bin", &shared);
    fixture.write("three.txt", b"same\n");
    let imported = fixture.import(ImportLimits::default(), &|| false).unwrap();
    assert!(
        matches!(imported, Imported::Committed { .. }),
        "{imported:?}"
    );
    let pack = fixture
        .objects()
        .into_iter()
        .find(|(path, _)| path.extension().is_some_and(|ext| ext == "idx"))
        .unwrap();
    // The index names each new object once: one/ and two/ are the same tree.
    let index = std::fs::read(&pack.0).unwrap();
    let count = u32::from_be_bytes(index[8 + 255 * 4..8 + 256 * 4].try_into().unwrap());
    assert_eq!(
        count, 4,
        "the new blob, the shared subtree, the root tree and the commit"
    );
}

/// What an import of `fixture` with the default limits committed: the changed paths and the
/// warnings (a panic naming `unexpected` when it committed nothing).
fn committed_paths(fixture: &Fixture, unexpected: &str) -> (Vec<String>, Vec<ImportWarning>) {
    let imported = fixture.import(ImportLimits::default(), &|| false).unwrap();
    let Imported::Committed { diff, warnings, .. } = imported else {
        panic!("{unexpected}: {imported:?}");
    };
    let paths = diff.files.iter().map(|file| file.path.clone()).collect();
    (paths, warnings)
}

/// The attack (a hostile repository, with an agent adding any new file): the user's checkout holds a
/// `.gitignore` that is a link to a file outside the repository. The ignore rules decide what of the
/// agent's result is imported, so whatever the link leads to is read on the host as rules.
#[test]
fn a_gitignore_link_in_the_users_checkout_is_not_read_through() {
    let fixture = Fixture::new(&[("README.md", b"hello\n")]);
    let outside = tempfile::tempdir().unwrap();
    let marker = format!("host-only-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(outside.path().join("rules"), format!("{marker}*\n")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("rules"),
        fixture.repository.join(".gitignore"),
    )
    .unwrap();
    fixture.write(&format!("{marker}-result.txt"), b"the agent's work\n");

    let (paths, warnings) = committed_paths(
        &fixture,
        "the host file behind the link decided the result was ignored",
    );
    assert_eq!(paths, [format!("{marker}-result.txt")], "{warnings:?}");
    assert!(
        warnings.contains(&ImportWarning::IgnoreRulesUnread {
            path: ".gitignore".to_owned()
        }),
        "the person is told the ignore rules were not read: {warnings:?}"
    );
}

/// A directory of the user's checkout that is a link: its `.gitignore` would be read through it.
#[test]
fn a_linked_directory_of_the_users_checkout_is_not_read_through_for_ignore_rules() {
    let fixture = Fixture::new(&[("README.md", b"hello\n")]);
    let outside = tempfile::tempdir().unwrap();
    let marker = format!("host-only-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(outside.path().join(".gitignore"), format!("{marker}*\n")).unwrap();
    std::os::unix::fs::symlink(outside.path(), fixture.repository.join("docs")).unwrap();
    fixture.write(&format!("docs/{marker}-notes.txt"), b"the agent's work\n");

    let (paths, warnings) = committed_paths(
        &fixture,
        "the host file behind the link decided the result was ignored",
    );
    assert_eq!(paths, [format!("docs/{marker}-notes.txt")], "{warnings:?}");
    assert!(
        warnings.contains(&ImportWarning::IgnoreRulesUnread {
            path: "docs".to_owned()
        }),
        "{warnings:?}"
    );
}

/// The control: a regular `.gitignore` still decides what is imported.
#[test]
fn a_regular_gitignore_of_the_users_checkout_still_applies() {
    let fixture = Fixture::new(&[("README.md", b"hello\n"), (".gitignore", b"*.log\n")]);
    fixture.write("build.log", b"noise\n");
    fixture.write("kept.txt", b"the agent's work\n");
    let (paths, warnings) = committed_paths(&fixture, "nothing was committed");
    assert_eq!(paths, ["kept.txt"]);
    assert!(
        !warnings
            .iter()
            .any(|warning| matches!(warning, ImportWarning::IgnoreRulesUnread { .. })),
        "{warnings:?}"
    );
}

/// The same link, to a fifo no one writes: the import must not wait on it.
#[test]
fn a_gitignore_link_to_a_fifo_does_not_stall_the_import() {
    let fixture = Fixture::new(&[("README.md", b"hello\n")]);
    let outside = tempfile::tempdir().unwrap();
    let fifo = outside.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::os::unix::fs::symlink(&fifo, fixture.repository.join(".gitignore")).unwrap();
    fixture.write("new.txt", b"the agent's work\n");

    let (sender, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let imported = fixture.import(ImportLimits::default(), &|| false).is_ok();
        let _ = sender.send(imported);
        drop(outside);
    });
    answers
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the import waited on a fifo the user's checkout links .gitignore to");
}

/// The attack on the patch: invalid UTF-8 on very long and very short lines, one file past the
/// per-file text bounds, and more patch text than the review keeps. The patch stays within its
/// budget (the conversion included), each file left out is marked cut, and notes say what was cut.
#[test]
fn the_patch_is_built_within_its_budget_and_says_what_it_cut() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init_bare(dir.path()).unwrap();
    let tree = |entries: &[(&str, Vec<u8>)]| {
        let mut builder = repo.treebuilder(None).unwrap();
        for (name, content) in entries {
            let blob = repo.blob(content).unwrap();
            builder.insert(name, blob, 0o100_644).unwrap();
        }
        repo.find_tree(builder.write().unwrap()).unwrap()
    };
    // Lone lead bytes on one long line: three bytes each once converted.
    let long = [vec![0xc3u8; 900 * 1024], b"\n".to_vec()].concat();
    let short = b"\xff\n".repeat(16 * 1024);
    let wide = vec![b'w'; 2 * 1024 * 1024];
    let mut after = vec![("a-wide.txt".to_owned(), wide)];
    for file in 0..8 {
        after.push((format!("long{file}.txt"), long.clone()));
        after.push((format!("short{file}.txt"), short.clone()));
    }
    let after: Vec<(&str, Vec<u8>)> = after
        .iter()
        .map(|(name, content)| (name.as_str(), content.clone()))
        .collect();
    let diff = result_diff(&repo, &tree(&[]), &tree(&after), &|| false).unwrap();
    assert!(
        diff.patch.len() <= MAX_PATCH_BYTES + 1024,
        "{}",
        diff.patch.len()
    );
    assert!(
        diff.patch
            .contains("[stet: the content of a-wide.txt is not shown: ")
    );
    assert!(diff.patch.contains("[stet: the patch stops here"));
    let cut: Vec<&str> = diff
        .files
        .iter()
        .filter(|file| file.cut)
        .map(|file| file.path.as_str())
        .collect();
    assert!(cut.contains(&"a-wide.txt"), "{cut:?}");
    assert!(cut.len() > 1, "{cut:?}");
    assert!(diff.files.iter().any(|file| !file.cut), "{:?}", diff.files);
    let short = diff
        .files
        .iter()
        .find(|file| file.path == "short0.txt")
        .unwrap();
    assert_eq!(short.insertions, 16 * 1024, "counted even where not shown");
}
