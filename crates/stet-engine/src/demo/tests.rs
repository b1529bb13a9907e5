//! Unit tests of `crate::demo`, in a file of their own so the module reads as code.

use super::*;
use crate::brief::Brief;
use crate::config::{Config, ConfigFile, FileRole, ForgeConfig};

fn main_commit(path: &Path) -> git2::Oid {
    Repository::open(path)
        .unwrap()
        .refname_to_id("refs/heads/main")
        .unwrap()
}

#[test]
fn prepare_makes_the_repository_and_its_remote() {
    let root = tempfile::tempdir().unwrap();
    let setup = prepare(&root.path().join("demo")).unwrap();
    assert_eq!(setup.dir, root.path().join("demo"));
    assert_eq!(setup.repo, setup.dir.join("repo"));
    assert_eq!(setup.remote, setup.dir.join("remote.git"));
    assert!(setup.dir.join(MARKER).is_file());
    for (path, text) in PROGRAM {
        assert_eq!(
            std::fs::read_to_string(setup.repo.join(path)).unwrap(),
            *text
        );
    }

    let repository = Repository::open(&setup.repo).unwrap();
    assert!(!repository.is_bare());
    assert_eq!(repository.head().unwrap().shorthand().unwrap(), "main");
    assert!(repository.statuses(None).unwrap().is_empty());
    let commit = repository.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(commit.author().name().unwrap(), AUTHOR_NAME);
    assert_eq!(commit.author().email().unwrap(), AUTHOR_EMAIL);
    assert_eq!(commit.time().seconds(), COMMIT_TIME);
    let tree = commit.tree().unwrap();
    for path in ["src/main.rs", "stet.toml", ".stet/briefs/fix-greeting.toml"] {
        assert!(tree.get_path(Path::new(path)).is_ok(), "{path}");
    }
    assert_eq!(
        repository.find_remote("origin").unwrap().url().unwrap(),
        setup.remote.to_str().unwrap()
    );
    let upstream = repository
        .find_branch("main", git2::BranchType::Local)
        .unwrap()
        .upstream()
        .unwrap();
    assert_eq!(upstream.name().unwrap(), Some("origin/main"));

    let remote = Repository::open(&setup.remote).unwrap();
    assert!(remote.is_bare());
    assert_eq!(main_commit(&setup.remote), commit.id());
}

#[test]
fn the_briefs_parse_and_target_main() {
    let root = tempfile::tempdir().unwrap();
    let setup = prepare(root.path()).unwrap();
    let names: Vec<_> = setup
        .briefs
        .iter()
        .map(|path| path.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(names, ["fix-greeting.toml", "test-word-count.toml"]);
    for path in &setup.briefs {
        assert!(path.starts_with(setup.repo.join(".stet/briefs")));
        let brief = Brief::from_file(path).unwrap();
        assert_eq!(brief.target.base, BRANCH);
    }
}

#[test]
fn the_configuration_selects_the_local_forge_and_the_remote() {
    let root = tempfile::tempdir().unwrap();
    let setup = prepare(root.path()).unwrap();
    let file = setup.repo.join(REPOSITORY_FILE);
    let text = std::fs::read_to_string(&file).unwrap();
    let config =
        Config::from_files(&[ConfigFile::new(file, text, FileRole::TrustedRepository)]).unwrap();
    assert_eq!(
        config.forge,
        ForgeConfig::Local {
            remote: Some(setup.remote.clone())
        }
    );
}

#[test]
fn a_rerun_starts_afresh_and_keeps_other_files() {
    let root = tempfile::tempdir().unwrap();
    let first = prepare(root.path()).unwrap();
    let remote = Repository::open(&first.remote).unwrap();
    let head = remote.find_commit(main_commit(&first.remote)).unwrap();
    remote.branch("stet/fix-greeting", &head, false).unwrap();
    std::fs::write(first.repo.join("scratch.txt"), "left over").unwrap();
    std::fs::write(root.path().join("keep.txt"), "mine").unwrap();

    let second = prepare(root.path()).unwrap();
    assert_eq!(second, first);
    let remote = Repository::open(&second.remote).unwrap();
    assert!(
        remote
            .find_reference("refs/heads/stet/fix-greeting")
            .is_err()
    );
    assert!(!second.repo.join("scratch.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.path().join("keep.txt")).unwrap(),
        "mine"
    );
    assert_eq!(main_commit(&second.remote), main_commit(&second.repo));
}

#[test]
fn a_directory_stet_did_not_make_is_refused_and_left_alone() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("repo")).unwrap();
    std::fs::write(root.path().join("repo/precious.txt"), "data").unwrap();
    let error = prepare(root.path()).unwrap_err();
    assert!(
        matches!(error, DemoError::NotDemoDirectory { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&root.path().display().to_string())
    );
    assert!(root.path().join("repo/precious.txt").exists());
    assert!(!root.path().join(MARKER).exists());

    let file = root.path().join("file");
    std::fs::write(&file, "").unwrap();
    assert!(matches!(
        prepare(&file),
        Err(DemoError::NotADirectory { .. })
    ));
}

#[test]
fn an_empty_directory_is_used() {
    let root = tempfile::tempdir().unwrap();
    let setup = prepare(root.path()).unwrap();
    assert!(setup.repo.join("src/count.rs").is_file());
}
