//! The salvage on real repositories: a workspace's work kept at `refs/stet/<dispatch>` marked
//! incomplete and recorded; a workspace the import refuses refused with its message, nothing kept;
//! a result collected before the crash recorded from its ref.

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    repository: PathBuf,
    workspace: PathBuf,
    state: PathBuf,
    plan: SalvagePlan,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let repository = dir.path().join("repo");
    let repo = git2::Repository::init(&repository).unwrap();
    std::fs::write(repository.join("notes.txt"), "one\ntwo\n").unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("notes.txt")).unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let signature = git2::Signature::now("t", "t@example.invalid").unwrap();
    let base = repo
        .commit(Some("HEAD"), &signature, &signature, "base", &tree, &[])
        .unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "one\ntwo\n").unwrap();
    let identity = Identity {
        name: "stet agent".to_owned(),
        email: "agent@stet.invalid".to_owned(),
    };
    let plan = SalvagePlan::new(
        &repository,
        &CommitSha::parse(&base.to_string()).unwrap(),
        "Tidy the notes",
        &identity,
        ImportLimits {
            max_file_bytes: 1000,
            ..ImportLimits::default()
        },
        &ProtectedPaths::default(),
    );
    Fixture {
        repository,
        workspace,
        state: dir.path().join("state"),
        plan,
        _dir: dir,
    }
}

fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

#[test]
fn the_workspaces_work_is_kept_at_its_ref_marked_incomplete_and_recorded() {
    let f = fixture();
    std::fs::write(f.workspace.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let dispatch = DispatchId::new();
    let Outcome::Kept(kept) =
        salvage(&f.plan, dispatch, &f.workspace, &f.state, &sanitizer()).unwrap()
    else {
        panic!("nothing kept");
    };
    assert_eq!((kept.files, kept.insertions, kept.deletions), (1, 1, 0));
    let repo = git2::Repository::open(&f.repository).unwrap();
    let at = repo
        .refname_to_id(&format!("refs/stet/{dispatch}"))
        .unwrap();
    assert_eq!(at.to_string(), kept.commit.as_str());
    let commit = repo.find_commit(at).unwrap();
    let message = commit.message().unwrap();
    assert!(
        message.starts_with("Tidy the notes\n\nIncomplete: salvaged"),
        "{message}"
    );
    assert_eq!(
        commit.parent_id(0).unwrap().to_string(),
        f.plan.parent.as_str()
    );
    assert!(kept.patch.contains("+three"), "{}", kept.patch);
    assert_eq!(salvaged(&f.state), vec![*kept]);
}

#[test]
fn an_unchanged_workspace_keeps_nothing() {
    let f = fixture();
    let dispatch = DispatchId::new();
    let outcome = salvage(&f.plan, dispatch, &f.workspace, &f.state, &sanitizer()).unwrap();
    assert_eq!(outcome, Outcome::Unchanged);
    assert!(salvaged(&f.state).is_empty());
}

#[test]
fn a_workspace_the_import_refuses_is_refused_with_its_message_and_nothing_is_kept() {
    let f = fixture();
    std::fs::write(f.workspace.join("big.bin"), vec![b'x'; 2000]).unwrap();
    std::os::unix::fs::symlink("../../outside", f.workspace.join("out")).unwrap();
    let dispatch = DispatchId::new();
    let error = salvage(&f.plan, dispatch, &f.workspace, &f.state, &sanitizer()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the import refused the workspace: \"big.bin\" in the workspace is 2000 bytes; files larger than 1000 bytes are not imported"
    );
    let repo = git2::Repository::open(&f.repository).unwrap();
    assert!(
        repo.refname_to_id(&format!("refs/stet/{dispatch}"))
            .is_err()
    );
    assert!(!f.state.exists(), "no record, no state written");
}

#[test]
fn a_result_collected_before_the_crash_is_recorded_from_its_ref() {
    let f = fixture();
    let dispatch = DispatchId::new();
    assert_eq!(
        kept_before(&f.plan, dispatch, &f.state, &sanitizer()).unwrap(),
        None,
        "no ref: nothing to record"
    );
    std::fs::write(f.workspace.join("notes.txt"), "one\n").unwrap();
    let request = ImportRequest {
        repository: &f.repository,
        workspace: &f.workspace,
        parent: &f.plan.parent,
        identity: &Identity {
            name: "a".to_owned(),
            email: "a@stet.invalid".to_owned(),
        },
        message: &sanitizer().sanitize("collected"),
        limits: ImportLimits::default(),
    };
    let Imported::Committed { commit, .. } = import(&request).unwrap() else {
        panic!("unchanged");
    };
    keep(&f.repository, &result_ref(dispatch), &commit).unwrap();
    let Some(Outcome::Kept(kept)) = kept_before(&f.plan, dispatch, &f.state, &sanitizer()).unwrap()
    else {
        panic!("not recorded");
    };
    assert_eq!(kept.commit, commit);
    assert_eq!((kept.files, kept.insertions, kept.deletions), (1, 0, 1));
    assert!(kept.patch.contains("-two"), "{}", kept.patch);
    assert_eq!(salvaged(&f.state).len(), 1);
}
