//! Workspace provisioning and the trusted import against real repositories (DESIGN §5 row 10).
//!
//! A materialized workspace is a clean checkout of the base that real `git` accepts without re-reading a
//! file, handed to the sandbox user, and the user's repository stays exactly as it was. An import turns
//! what the agent left into exactly the expected commit, while every attack an agent can stage in its
//! workspace (a redirected `.git` with an fsmonitor, hooks, a hooks path, filter drivers, links out of the
//! workspace, nested `.git` directories, fifos) stays inert: each trap is first shown to fire when real
//! git runs on the workspace, then shown not to fire during the import.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use git2::{Oid, Repository};
use stet_engine::git::import::{
    ChangedFile, Identity, ImportError, ImportLimits, ImportRequest, ImportWarning, Imported,
    ResultDiff, import,
};
use stet_engine::git::workspace::{LEFT_OUT_FROM, WorkspaceError, materialize};
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_protocol::event::ChangeKind;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::TokenSanitizer;

use super::support::git;

const BLOB: i32 = 0o100644;
const EXECUTABLE: i32 = 0o100755;
const LINK: i32 = 0o120000;
const GITLINK: i32 = 0o160000;

/// Every non-directory entry of a tree (or of a workspace on disk): path bytes → (mode, content), where
/// a link's content is its target and a submodule's is its commit id.
type TreeSet = BTreeMap<Vec<u8>, (i32, Vec<u8>)>;

const LIB_RS: &str = "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n";

/// A user's repository with two commits (the base has a parent) and the sandbox user a dispatch would
/// hand the workspace to.
struct Fixture {
    root: tempfile::TempDir,
    repo: PathBuf,
    base: CommitSha,
    owner: SandboxUser,
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("user-repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        write(&repo, "README.md", "# app\n\nhello\n");
        write(&repo, "src/lib.rs", "pub fn one() -> u32 {\n    1\n}\n");
        write(&repo, "src/old.rs", "// the agent removes this file\n");
        write(&repo, "scripts/run.sh", "#!/bin/sh\necho run\n");
        set_mode(&repo.join("scripts/run.sh"), 0o755);
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        symlink("../README.md", repo.join("docs/readme-link")).unwrap();
        write(&repo, ".gitignore", "*.log\ntarget/\n");
        write(&repo, "data/empty", "");
        // Larger than one stored deflate block (64 KiB), and not text.
        let large: Vec<u8> = (0..200_000_u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(repo.join("data/large.bin"), large).unwrap();
        write(
            &repo,
            "kept.log",
            "tracked although the ignore rules match it\n",
        );
        git(&repo, &["add", "-A"]);
        git(&repo, &["add", "-f", "kept.log"]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        write(&repo, "src/lib.rs", LIB_RS);
        git(&repo, &["commit", "-q", "-a", "-m", "second"]);
        let base = CommitSha::parse(&git(&repo, &["rev-parse", "HEAD"])).unwrap();
        Fixture {
            root,
            repo,
            base,
            owner: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
        }
    }

    /// An empty directory, as the sandbox creates it.
    fn empty_directory(&self) -> PathBuf {
        let path = self
            .root
            .path()
            .join(format!("workspace-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&path).unwrap();
        path
    }

    fn workspace(&self) -> PathBuf {
        let workspace = self.empty_directory();
        materialize(&self.repo, &self.base, &workspace, self.owner).unwrap();
        workspace
    }

    fn import(&self, workspace: &Path) -> Imported {
        self.import_with(workspace, ImportLimits::default())
            .unwrap()
    }

    fn import_with(&self, workspace: &Path, limits: ImportLimits) -> Result<Imported, ImportError> {
        import_into(&self.repo, workspace, &self.base, limits)
    }

    fn base_set(&self) -> TreeSet {
        tree_set(&self.repo, self.base.as_str())
    }
}

fn import_into(
    repo: &Path,
    workspace: &Path,
    parent: &CommitSha,
    limits: ImportLimits,
) -> Result<Imported, ImportError> {
    let message = Arc::new(TokenSanitizer::new().unwrap()).sanitize("Agent result\n\nDetails.");
    import(&ImportRequest {
        repository: repo,
        workspace,
        parent,
        identity: &identity(),
        message: &message,
        limits,
    })
}

fn identity() -> Identity {
    Identity {
        name: "stet".into(),
        email: "stet@example.invalid".into(),
    }
}

fn write(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn committed(imported: Imported) -> (CommitSha, ResultDiff, Vec<ImportWarning>) {
    match imported {
        Imported::Committed {
            commit,
            diff,
            warnings,
        } => (commit, diff, warnings),
        Imported::Unchanged { warnings } => {
            panic!("expected a commit, the import was unchanged (warnings: {warnings:?})")
        }
    }
}

/// Real git on the workspace, as the agent would run it (the workspace belongs to another user).
fn workspace_git(workspace: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(workspace)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
        .output()
        .unwrap()
}

fn workspace_git_ok(workspace: &Path, args: &[&str]) -> String {
    let output = workspace_git(workspace, args);
    assert!(
        output.status.success(),
        "git {args:?} in the workspace: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// `git status` is clean, and every index entry carries the stat data of its file as it is now (owner
/// and change time included), which is what lets git trust an entry without reading the file.
fn assert_status_clean_from_stat_data(workspace: &Path) {
    let index = git2::Index::open(&workspace.join(".git/index")).unwrap();
    let mut checked = 0;
    for entry in index.iter() {
        if entry.mode == GITLINK as u32 {
            continue;
        }
        let path = workspace.join(OsStr::from_bytes(&entry.path));
        let metadata = path.symlink_metadata().unwrap();
        let recorded = (
            (entry.mtime.seconds(), entry.mtime.nanoseconds()),
            (entry.ctime.seconds(), entry.ctime.nanoseconds()),
            entry.ino,
            (entry.uid, entry.gid),
            entry.file_size,
        );
        let actual = (
            (metadata.mtime() as i32, metadata.mtime_nsec() as u32),
            (metadata.ctime() as i32, metadata.ctime_nsec() as u32),
            metadata.ino() as u32,
            (metadata.uid(), metadata.gid()),
            metadata.size() as u32,
        );
        assert_eq!(recorded, actual, "stat data of {}", path.display());
        checked += 1;
    }
    assert!(checked > 5, "{checked} entries");
    // Checked after the stat data: a status that found them stale would have rewritten the index.
    assert_eq!(workspace_git_ok(workspace, &["status", "--porcelain"]), "");
}

fn tree_set(repo: &Path, commit: &str) -> TreeSet {
    let repo = Repository::open(repo).unwrap();
    let tree = repo
        .find_commit(Oid::from_str(commit).unwrap())
        .unwrap()
        .tree()
        .unwrap();
    let mut set = TreeSet::new();
    collect_tree(&repo, &tree, b"", &mut set);
    set
}

fn collect_tree(repo: &Repository, tree: &git2::Tree<'_>, prefix: &[u8], set: &mut TreeSet) {
    for entry in tree.iter() {
        let path = join(prefix, entry.name_bytes());
        match entry.filemode() {
            0o040000 => collect_tree(repo, &repo.find_tree(entry.id()).unwrap(), &path, set),
            GITLINK => {
                set.insert(path, (GITLINK, entry.id().to_string().into_bytes()));
            }
            mode => {
                let blob = repo.find_blob(entry.id()).unwrap();
                set.insert(path, (mode, blob.content().to_vec()));
            }
        }
    }
}

/// The files of a workspace on disk, read with the standard library (links not followed), without the
/// top-level `.git`.
fn disk_set(workspace: &Path) -> TreeSet {
    fn visit(directory: &Path, prefix: &[u8], set: &mut TreeSet) {
        for entry in std::fs::read_dir(directory).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if prefix.is_empty() && name == ".git" {
                continue;
            }
            let path = join(prefix, name.as_bytes());
            let metadata = entry.path().symlink_metadata().unwrap();
            if metadata.is_dir() {
                visit(&entry.path(), &path, set);
            } else if metadata.file_type().is_symlink() {
                let target = std::fs::read_link(entry.path()).unwrap();
                set.insert(path, (LINK, target.as_os_str().as_bytes().to_vec()));
            } else {
                let mode = if metadata.mode() & 0o100 == 0 {
                    BLOB
                } else {
                    EXECUTABLE
                };
                set.insert(path, (mode, std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    let mut set = TreeSet::new();
    visit(workspace, b"", &mut set);
    set
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

fn with(mut set: TreeSet, path: &str, mode: i32, content: &str) -> TreeSet {
    set.insert(
        path.as_bytes().to_vec(),
        (mode, content.as_bytes().to_vec()),
    );
    set
}

/// Every object in the repository's object store (loose and packed) whose content holds `needle`.
fn objects_containing(repo: &Path, needle: &[u8]) -> Vec<Oid> {
    let repo = Repository::open(repo).unwrap();
    let odb = repo.odb().unwrap();
    let mut found = Vec::new();
    odb.foreach(|oid| {
        let object = odb.read(*oid).unwrap();
        if memchr::memmem::find(object.data(), needle).is_some() {
            found.push(*oid);
        }
        true
    })
    .unwrap();
    found
}

fn refs_and_head(repo: &Path) -> (String, String) {
    (
        git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]),
        git(repo, &["rev-parse", "HEAD"]),
    )
}

fn random_text() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

// ---------------------------------------------------------------------------------------------------
// Provisioning

#[test]
fn a_materialized_workspace_is_a_clean_checkout_of_the_base() {
    let fixture = Fixture::new();
    let workspace = fixture.empty_directory();
    let done = materialize(&fixture.repo, &fixture.base, &workspace, fixture.owner).unwrap();

    let base = fixture.base_set();
    assert_eq!(disk_set(&workspace), base, "the files are the base tree's");
    assert_eq!(done.files, base.len() as u64);
    assert_eq!(
        done.bytes,
        base.values()
            .map(|(_, content)| content.len() as u64)
            .sum::<u64>()
    );

    assert_status_clean_from_stat_data(&workspace);
    workspace_git_ok(&workspace, &["diff", "--exit-code"]);
    workspace_git_ok(&workspace, &["diff", "--exit-code", "HEAD"]);
    assert_eq!(
        workspace_git_ok(&workspace, &["rev-parse", "HEAD"]),
        fixture.base.as_str()
    );
    assert!(
        !workspace_git(&workspace, &["symbolic-ref", "-q", "HEAD"])
            .status
            .success(),
        "HEAD is detached"
    );
    assert_eq!(
        workspace_git_ok(&workspace, &["rev-parse", "HEAD^{tree}"]),
        git(
            &fixture.repo,
            &["rev-parse", &format!("{}^{{tree}}", fixture.base)]
        )
    );

    // Only the base commit travels: its parent is a shallow boundary, not a missing object.
    assert_eq!(
        workspace_git_ok(&workspace, &["rev-list", "--count", "HEAD"]),
        "1"
    );
    let parent = git(&fixture.repo, &["rev-parse", "HEAD^"]);
    assert!(
        !workspace_git(&workspace, &["cat-file", "-e", &parent])
            .status
            .success(),
        "the parent commit is not copied"
    );
    workspace_git_ok(&workspace, &["fsck", "--no-progress"]);

    // The agent's own git works: it can edit, diff and commit.
    write(&workspace, "README.md", "# app\n\nhello, agent\n");
    assert!(workspace_git_ok(&workspace, &["diff"]).contains("+hello, agent"));
    workspace_git_ok(&workspace, &["commit", "-q", "-am", "agent"]);
}

/// The files and sizes of a repository's `objects/pack` directory.
fn pack_files(objects: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(objects.join("pack"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.metadata().unwrap().len(),
            )
        })
        .collect()
}

/// A file of `workspace::LEFT_OUT_FROM` bytes is written into the workspace but its blob stays out of
/// the disposable repository, which git takes as a partial clone: status clean, fsck clean, the
/// other files diffed and committed by the agent's git, asking for the left-out blob a refused fetch
/// (never "corrupt"), and a change to the large file still imported. The user's repository is
/// neither changed nor made a promisor.
#[test]
fn the_largest_blobs_stay_out_of_the_disposable_repository_and_git_still_works() {
    let fixture = Fixture::new();
    // Bytes that do not compress, so a copy in a pack would show in its size.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut large = Vec::with_capacity(LEFT_OUT_FROM as usize);
    while (large.len() as u64) < LEFT_OUT_FROM {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        large.extend_from_slice(&state.to_le_bytes());
    }
    large.truncate(LEFT_OUT_FROM as usize);
    std::fs::create_dir_all(fixture.repo.join("assets")).unwrap();
    std::fs::write(fixture.repo.join("assets/video.bin"), &large).unwrap();
    git(&fixture.repo, &["add", "assets/video.bin"]);
    git(&fixture.repo, &["commit", "-q", "-m", "an asset"]);
    let base = CommitSha::parse(&git(&fixture.repo, &["rev-parse", "HEAD"])).unwrap();
    let left_out = git(&fixture.repo, &["rev-parse", "HEAD:assets/video.bin"]);
    let user_objects = fixture.repo.join(".git/objects");
    let user_before = (
        refs_and_head(&fixture.repo),
        std::fs::read(fixture.repo.join(".git/config")).unwrap(),
        pack_files(&user_objects),
    );

    let workspace = fixture.empty_directory();
    let done = materialize(&fixture.repo, &base, &workspace, fixture.owner).unwrap();
    assert_eq!(disk_set(&workspace), tree_set(&fixture.repo, base.as_str()));
    assert!(done.bytes > LEFT_OUT_FROM);

    let asked = workspace_git(&workspace, &["cat-file", "-e", &left_out]);
    let refusal = String::from_utf8_lossy(&asked.stderr);
    assert!(
        !asked.status.success(),
        "the large blob is not in the workspace's .git"
    );
    assert!(
        refusal.contains("promisor remote") && !refusal.contains("corrupt"),
        "git's own message for a promised object: {refusal}"
    );
    let blobs = git(&fixture.repo, &["ls-tree", "-r", "--object-only", "HEAD"]);
    let mut kept = 0;
    for blob in blobs.lines().filter(|blob| *blob != left_out) {
        workspace_git_ok(&workspace, &["cat-file", "-e", blob]);
        kept += 1;
    }
    assert!(kept > 5, "{kept} blobs");
    let packs = pack_files(&workspace.join(".git/objects"));
    let packed: u64 = packs.values().sum();
    assert!(
        packed < 1 << 20,
        "{packed} bytes of packs for {} of files: {packs:?}",
        done.bytes
    );
    for name in packs.keys().filter(|name| name.ends_with(".pack")) {
        let marker = name.replace(".pack", ".promisor");
        assert!(
            packs.contains_key(&marker),
            "{marker} beside {name}: {packs:?}"
        );
    }

    // Real git takes it as a partial clone: clean, consistent, the large file outside its checkout.
    assert_eq!(workspace_git_ok(&workspace, &["status", "--porcelain"]), "");
    let fsck = workspace_git(&workspace, &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success() && fsck.stdout.is_empty() && fsck.stderr.is_empty(),
        "{fsck:?}"
    );
    assert_eq!(
        workspace_git_ok(&workspace, &["ls-files", "-t", "assets/video.bin"]),
        "S assets/video.bin"
    );

    // The agent's git works on the other files: diff, commit, and a commit in the large file's
    // directory too.
    write(&workspace, "README.md", "# app\n\nhello, agent\n");
    write(&workspace, "assets/notes.txt", "next to the video\n");
    assert!(workspace_git_ok(&workspace, &["diff"]).contains("+hello, agent"));
    workspace_git_ok(&workspace, &["add", "-A"]);
    workspace_git_ok(&workspace, &["commit", "-q", "-m", "agent"]);
    assert_eq!(workspace_git_ok(&workspace, &["status", "--porcelain"]), "");
    assert_eq!(
        workspace_git_ok(&workspace, &["rev-parse", "HEAD:assets/video.bin"]),
        left_out,
        "the commit keeps the left-out blob as it was"
    );

    assert_eq!(
        (
            refs_and_head(&fixture.repo),
            std::fs::read(fixture.repo.join(".git/config")).unwrap(),
            pack_files(&user_objects),
        ),
        user_before,
        "the user's refs, configuration and packs are as they were (no .promisor among them)"
    );
    assert!(
        !git(&fixture.repo, &["config", "--local", "--list"]).contains("promisor"),
        "the user's repository is no promisor"
    );

    // A change to the large file is the import's to see, and it sees it.
    large[1000] ^= 1;
    std::fs::write(workspace.join("assets/video.bin"), &large).unwrap();
    let (commit, diff, _) =
        committed(import_into(&fixture.repo, &workspace, &base, ImportLimits::default()).unwrap());
    let paths: Vec<&str> = diff.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(paths, ["README.md", "assets/notes.txt", "assets/video.bin"]);
    assert_eq!(
        git(
            &fixture.repo,
            &["cat-file", "-s", &format!("{commit}:assets/video.bin")]
        ),
        LEFT_OUT_FROM.to_string()
    );
}

#[test]
fn every_entry_of_a_workspace_belongs_to_the_sandbox_user() {
    let fixture = Fixture::new();
    let running_as_root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    if running_as_root {
        assert_eq!(fixture.owner.uid, DEFAULT_SANDBOX_UID, "root hands over");
    }
    let workspace = fixture.workspace();

    let mut checked = 0;
    let mut pending = vec![workspace.clone()];
    while let Some(path) = pending.pop() {
        let metadata = path.symlink_metadata().unwrap();
        assert_eq!(
            (metadata.uid(), metadata.gid()),
            (fixture.owner.uid, fixture.owner.gid),
            "{} belongs to the sandbox user",
            path.display()
        );
        checked += 1;
        if metadata.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    assert!(checked > 20, "the walk saw the files and .git ({checked})");
    for inside_git in ["", "index", "HEAD", "shallow", "objects/pack"] {
        let metadata = workspace
            .join(".git")
            .join(inside_git)
            .symlink_metadata()
            .unwrap();
        assert_eq!(metadata.uid(), fixture.owner.uid, ".git/{inside_git}");
    }
    // The stat data in the index is the handed-over files' (owner, change time).
    assert_status_clean_from_stat_data(&workspace);
}

#[test]
fn materializing_leaves_a_dirty_user_checkout_exactly_as_it_was() {
    let fixture = Fixture::new();
    write(&fixture.repo, "README.md", "# app\n\nuncommitted edit\n");
    write(&fixture.repo, "src/lib.rs", "staged edit\n");
    git(&fixture.repo, &["add", "src/lib.rs"]);
    write(&fixture.repo, "untracked.txt", "not added\n");
    std::fs::remove_file(fixture.repo.join("src/old.rs")).unwrap();

    let snapshot = |repo: &Path| {
        (
            git(repo, &["status", "--porcelain=v2", "--untracked-files=all"]),
            std::fs::read(repo.join(".git/index")).unwrap(),
            std::fs::read(repo.join(".git/config")).unwrap(),
            refs_and_head(repo),
            disk_set(repo),
        )
    };
    let before = snapshot(&fixture.repo);
    let workspace = fixture.workspace();
    assert_eq!(snapshot(&fixture.repo), before);
    assert_eq!(
        disk_set(&workspace),
        fixture.base_set(),
        "the workspace holds the base commit, not the user's working tree"
    );
}

#[test]
fn a_base_missing_from_the_object_store_is_a_clear_error() {
    let fixture = Fixture::new();
    let destination = fixture.empty_directory();
    let absent = CommitSha::parse(&random_text()[..40]).unwrap();
    let error = materialize(&fixture.repo, &absent, &destination, fixture.owner).unwrap_err();
    assert!(
        matches!(&error, WorkspaceError::BaseMissing { commit, repository }
            if *commit == absent && *repository == fixture.repo),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(absent.as_str()), "{message}");
    assert!(
        message.contains(&fixture.repo.display().to_string()),
        "{message}"
    );
    assert!(message.contains("fetch"), "{message}");
    assert_eq!(
        std::fs::read_dir(&destination).unwrap().count(),
        0,
        "nothing was written"
    );
}

#[test]
fn a_base_that_is_not_a_commit_is_refused() {
    let fixture = Fixture::new();
    let blob = git(
        &fixture.repo,
        &["rev-parse", &format!("{}:README.md", fixture.base)],
    );
    let blob = CommitSha::parse(&blob).unwrap();
    let error = materialize(
        &fixture.repo,
        &blob,
        &fixture.empty_directory(),
        fixture.owner,
    )
    .unwrap_err();
    assert!(
        matches!(&error, WorkspaceError::BaseNotCommit { kind, .. } if kind == "blob"),
        "{error:?}"
    );
}

#[test]
fn a_destination_that_is_not_empty_is_refused() {
    let fixture = Fixture::new();
    let destination = fixture.empty_directory();
    write(&destination, "already-here.txt", "keep me\n");
    let error = materialize(&fixture.repo, &fixture.base, &destination, fixture.owner).unwrap_err();
    assert!(
        matches!(&error, WorkspaceError::DestinationNotEmpty { destination: named } if *named == destination),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&destination.display().to_string())
    );
    assert_eq!(
        std::fs::read_to_string(destination.join("already-here.txt")).unwrap(),
        "keep me\n"
    );
    assert!(!destination.join(".git").exists());
}

#[test]
fn a_destination_owned_by_someone_else_is_refused_before_anything_is_written() {
    let fixture = Fixture::new();
    let destination = fixture.empty_directory();
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        // Only root can give a directory away; as anyone else there is nothing to refuse.
        return;
    }
    std::os::unix::fs::chown(
        &destination,
        Some(DEFAULT_SANDBOX_UID),
        Some(DEFAULT_SANDBOX_UID),
    )
    .unwrap();
    let error = materialize(&fixture.repo, &fixture.base, &destination, fixture.owner).unwrap_err();
    assert!(
        matches!(&error, WorkspaceError::DestinationNotOwned { uid, .. } if *uid == DEFAULT_SANDBOX_UID),
        "{error:?}"
    );
    assert_eq!(std::fs::read_dir(&destination).unwrap().count(), 0);
}

/// A base with a submodule: the fixture's first commit stands in for the submodule's commit.
fn fixture_with_submodule() -> (Fixture, String) {
    let mut fixture = Fixture::new();
    let pinned = git(&fixture.repo, &["rev-parse", "HEAD^"]);
    git(
        &fixture.repo,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{pinned},vendor/lib"),
        ],
    );
    git(&fixture.repo, &["commit", "-q", "-m", "a submodule"]);
    fixture.base = CommitSha::parse(&git(&fixture.repo, &["rev-parse", "HEAD"])).unwrap();
    (fixture, pinned)
}

#[test]
fn a_submodule_becomes_an_empty_directory_and_stays_as_it_was() {
    let (fixture, pinned) = fixture_with_submodule();
    let workspace = fixture.workspace();
    let submodule = workspace.join("vendor/lib");
    assert!(submodule.is_dir());
    assert_eq!(std::fs::read_dir(&submodule).unwrap().count(), 0);
    assert_eq!(workspace_git_ok(&workspace, &["status", "--porcelain"]), "");
    assert!(matches!(
        fixture.import(&workspace),
        Imported::Unchanged { warnings } if warnings.is_empty()
    ));

    write(
        &workspace,
        "vendor/lib/planted.txt",
        "not the submodule's\n",
    );
    write(&workspace, "README.md", "changed\n");
    let (commit, _, warnings) = committed(fixture.import(&workspace));
    assert_eq!(
        warnings,
        [ImportWarning::SubmoduleKept {
            path: "vendor/lib".into()
        }]
    );
    let set = tree_set(&fixture.repo, commit.as_str());
    assert_eq!(
        set[b"vendor/lib".as_slice()],
        (GITLINK, pinned.into_bytes())
    );
    assert_eq!(
        set,
        with(fixture.base_set(), "README.md", BLOB, "changed\n")
    );
}

// ---------------------------------------------------------------------------------------------------
// Import

#[test]
fn an_untouched_workspace_imports_as_unchanged() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    assert_eq!(
        fixture.import(&workspace),
        Imported::Unchanged { warnings: vec![] }
    );
    // Rewriting a file with the same bytes and leaving an empty directory change nothing either.
    write(&workspace, "README.md", "# app\n\nhello\n");
    std::fs::create_dir_all(workspace.join("empty/nested")).unwrap();
    assert_eq!(
        fixture.import(&workspace),
        Imported::Unchanged { warnings: vec![] }
    );
}

#[test]
fn edits_additions_deletions_modes_and_links_become_exactly_one_commit() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    let refs_before = refs_and_head(&fixture.repo);

    write(
        &workspace,
        "src/lib.rs",
        "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    22\n}\n\npub fn three() {}\n",
    );
    write(&workspace, "src/new/mod.rs", "mod added;\n");
    std::fs::remove_file(workspace.join("src/old.rs")).unwrap();
    set_mode(&workspace.join("scripts/run.sh"), 0o644);
    write(&workspace, "scripts/new.sh", "#!/bin/sh\n");
    set_mode(&workspace.join("scripts/new.sh"), 0o700);
    std::fs::remove_file(workspace.join("docs/readme-link")).unwrap();
    symlink("../src/lib.rs", workspace.join("docs/readme-link")).unwrap();

    let (commit, diff, warnings) = committed(fixture.import(&workspace));
    assert_eq!(warnings, []);

    let mut expected = fixture.base_set();
    expected.remove(b"src/old.rs".as_slice());
    let expected = with(
        expected,
        "src/lib.rs",
        BLOB,
        "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    22\n}\n\npub fn three() {}\n",
    );
    let expected = with(expected, "src/new/mod.rs", BLOB, "mod added;\n");
    let expected = with(expected, "scripts/run.sh", BLOB, "#!/bin/sh\necho run\n");
    let expected = with(expected, "scripts/new.sh", EXECUTABLE, "#!/bin/sh\n");
    let expected = with(expected, "docs/readme-link", LINK, "../src/lib.rs");
    assert_eq!(tree_set(&fixture.repo, commit.as_str()), expected);

    let repo = Repository::open(&fixture.repo).unwrap();
    let made = repo
        .find_commit(Oid::from_str(commit.as_str()).unwrap())
        .unwrap();
    assert_eq!(
        made.parent_ids()
            .map(|id| id.to_string())
            .collect::<Vec<_>>(),
        [fixture.base.as_str()]
    );
    assert_eq!(made.message_bytes(), b"Agent result\n\nDetails.");
    for signature in [made.author(), made.committer()] {
        assert_eq!(signature.name_bytes(), b"stet");
        assert_eq!(signature.email_bytes(), b"stet@example.invalid");
    }
    assert_eq!(refs_and_head(&fixture.repo), refs_before, "no ref moved");

    let changes: Vec<(&str, ChangeKind)> = diff
        .files
        .iter()
        .map(|file| (file.path.as_str(), file.change))
        .collect();
    assert_eq!(
        changes,
        [
            ("docs/readme-link", ChangeKind::Modified),
            ("scripts/new.sh", ChangeKind::Added),
            ("scripts/run.sh", ChangeKind::Modified),
            ("src/lib.rs", ChangeKind::Modified),
            ("src/new/mod.rs", ChangeKind::Added),
            ("src/old.rs", ChangeKind::Deleted),
        ]
    );
    let lib = diff
        .files
        .iter()
        .find(|file| file.path == "src/lib.rs")
        .unwrap();
    assert_eq!((lib.insertions, lib.deletions), (3, 1));
    assert_eq!(diff.insertions, 1 + 1 + 3 + 1);
    assert_eq!(diff.deletions, 1 + 1 + 1);
    assert!(diff.patch.contains("-    2\n+    22\n"), "{}", diff.patch);
    assert!(
        diff.patch.contains("old mode 100755\nnew mode 100644"),
        "{}",
        diff.patch
    );
    assert!(
        diff.patch.contains("deleted file mode 100644"),
        "{}",
        diff.patch
    );
}

#[test]
fn only_new_content_is_written_to_the_object_store() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    // (loose objects, objects in packs, packs)
    let counts = |repo: &Path| {
        let report = git(repo, &["count-objects", "-v"]);
        let field = |name: &str| {
            report
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .unwrap()
                .parse::<u32>()
                .unwrap()
        };
        (field("count: "), field("in-pack: "), field("packs: "))
    };
    let (loose, in_pack, packs) = counts(&fixture.repo);
    write(&workspace, "src/lib.rs", "pub fn changed() {}\n");
    let (commit, _, _) = committed(fixture.import(&workspace));
    assert_eq!(
        counts(&fixture.repo),
        (loose, in_pack + 4, packs + 1),
        "one pack of one blob, the trees of src/ and of the root, and the commit"
    );
    git(&fixture.repo, &["fsck", "--no-dangling"]);
    assert_eq!(
        git(&fixture.repo, &["cat-file", "-t", commit.as_str()]),
        "commit"
    );
}

#[test]
fn a_file_replaced_by_a_link_is_a_type_change() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    std::fs::remove_file(workspace.join("README.md")).unwrap();
    symlink("docs/index.md", workspace.join("README.md")).unwrap();
    let (commit, diff, _) = committed(fixture.import(&workspace));
    assert_eq!(
        diff.files,
        [ChangedFile {
            path: "README.md".into(),
            change: ChangeKind::TypeChanged,
            insertions: 1,
            deletions: 3,
            binary: false,
            cut: false,
        }]
    );
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        with(fixture.base_set(), "README.md", LINK, "docs/index.md")
    );
}

#[test]
fn the_diff_counts_lines_and_flags_binary_files() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    std::fs::write(workspace.join("image.bin"), [0_u8, 159, 146, 150, 0, 1, 2]).unwrap();
    write(&workspace, "README.md", "# app\n\nhello\nworld\nagain\n");
    let (_, diff, _) = committed(fixture.import(&workspace));
    let image = diff
        .files
        .iter()
        .find(|file| file.path == "image.bin")
        .unwrap();
    assert!(image.binary);
    assert_eq!(
        (image.change, image.insertions, image.deletions),
        (ChangeKind::Added, 0, 0)
    );
    let readme = diff
        .files
        .iter()
        .find(|file| file.path == "README.md")
        .unwrap();
    assert!(!readme.binary);
    assert_eq!((readme.insertions, readme.deletions), (2, 0));
    assert_eq!((diff.insertions, diff.deletions), (2, 0));
    assert!(diff.patch.contains("Binary files"), "{}", diff.patch);
}

#[test]
fn limits_stop_the_import_with_errors_naming_path_and_limit() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    write(&workspace, "assets/big.dat", &"x".repeat(5000));
    for index in 0..4 {
        write(&workspace, &format!("assets/new{index}.txt"), "new\n");
    }

    let too_many = ImportLimits {
        max_files: 5,
        ..ImportLimits::default()
    };
    let error = fixture.import_with(&workspace, too_many).unwrap_err();
    assert!(
        matches!(error, ImportError::TooManyFiles { limit: 5 }),
        "{error:?}"
    );
    assert!(error.to_string().contains('5'));

    let too_large = ImportLimits {
        max_file_bytes: 4096,
        ..ImportLimits::default()
    };
    let error = fixture.import_with(&workspace, too_large).unwrap_err();
    assert!(
        matches!(&error, ImportError::FileTooLarge { path, size: 5000, limit: 4096 } if path == "assets/big.dat"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("assets/big.dat") && message.contains("4096"),
        "{message}"
    );

    let too_much = ImportLimits {
        max_total_bytes: 4096,
        ..ImportLimits::default()
    };
    let error = fixture.import_with(&workspace, too_much).unwrap_err();
    assert!(
        matches!(error, ImportError::TotalTooLarge { limit: 4096 }),
        "{error:?}"
    );
    assert!(error.to_string().contains("4096"));

    assert!(matches!(
        fixture.import_with(&workspace, ImportLimits::default()),
        Ok(Imported::Committed { .. })
    ));
}

/// The import's limits bound the agent's change, never the base: the fixture's 200,000-byte
/// `data/large.bin` is carried over under limits far below it (hashed as a stream, never read into
/// the import), while a change of the same size to it, or a new file as large, is refused.
#[test]
fn files_carried_over_from_the_base_do_not_count_against_the_import_limits() {
    let fixture = Fixture::new();
    let tight = ImportLimits {
        max_files: 3,
        max_file_bytes: 4096,
        max_total_bytes: 8192,
        ..ImportLimits::default()
    };
    let workspace = fixture.workspace();
    write(
        &workspace,
        "src/lib.rs",
        "pub fn one() -> u32 {\n    1\n}\n",
    );
    let (commit, diff, _) = committed(fixture.import_with(&workspace, tight).unwrap());
    let paths: Vec<&str> = diff.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(paths, ["src/lib.rs"]);
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()).get(&b"data/large.bin"[..]),
        fixture.base_set().get(&b"data/large.bin"[..]),
        "the large file is carried over as it was"
    );

    // The same size, other bytes: a change, and past the limit.
    let mut changed = std::fs::read(workspace.join("data/large.bin")).unwrap();
    changed[100_000] ^= 1;
    std::fs::write(workspace.join("data/large.bin"), &changed).unwrap();
    let error = fixture.import_with(&workspace, tight).unwrap_err();
    assert!(
        matches!(&error, ImportError::FileTooLarge { path, size: 200_000, limit: 4096 } if path == "data/large.bin"),
        "{error:?}"
    );
    // Back as it was, and a new file as large beside it: the new one counts.
    changed[100_000] ^= 1;
    std::fs::write(workspace.join("data/large.bin"), &changed).unwrap();
    std::fs::write(workspace.join("data/copy.bin"), &changed).unwrap();
    let error = fixture.import_with(&workspace, tight).unwrap_err();
    assert!(
        matches!(&error, ImportError::FileTooLarge { path, .. } if path == "data/copy.bin"),
        "{error:?}"
    );
}

#[test]
fn a_deleted_workspace_is_reported_as_missing() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    std::fs::remove_dir_all(&workspace).unwrap();
    let error = fixture
        .import_with(&workspace, ImportLimits::default())
        .unwrap_err();
    assert!(
        matches!(&error, ImportError::WorkspaceMissing { path } if *path == workspace),
        "{error:?}"
    );
}

#[test]
fn a_workspace_replaced_by_a_link_is_refused() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    let elsewhere = fixture.root.path().join("elsewhere");
    std::fs::rename(&workspace, &elsewhere).unwrap();
    symlink(&elsewhere, &workspace).unwrap();
    let error = fixture
        .import_with(&workspace, ImportLimits::default())
        .unwrap_err();
    assert!(
        matches!(error, ImportError::WorkspaceNotDirectory { .. }),
        "{error:?}"
    );
}

#[test]
fn a_parent_missing_from_the_object_store_is_reported() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    let absent = CommitSha::parse(&random_text()[..40]).unwrap();
    let error =
        import_into(&fixture.repo, &workspace, &absent, ImportLimits::default()).unwrap_err();
    assert!(
        matches!(&error, ImportError::ParentMissing { commit, repository }
            if *commit == absent && *repository == fixture.repo),
        "{error:?}"
    );
    assert!(error.to_string().contains(absent.as_str()));
}

#[test]
fn new_ignored_paths_are_left_out_with_one_warning_but_tracked_ones_stay() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    for index in 0..50 {
        write(
            &workspace,
            &format!("target/debug/artifact{index}.o"),
            "object\n",
        );
    }
    write(&workspace, "src/debug.log", "noise\n");
    write(
        &workspace,
        "kept.log",
        "tracked, and changed by the agent\n",
    );
    write(&workspace, "src/kept.rs", "// new and not ignored\n");

    let limits = ImportLimits {
        max_files: 30,
        ..ImportLimits::default()
    };
    let (commit, _, warnings) = committed(fixture.import_with(&workspace, limits).unwrap());
    assert_eq!(
        warnings,
        [ImportWarning::IgnoredPathsSkipped {
            count: 2,
            examples: vec!["src/debug.log".into(), "target/".into()],
        }],
        "an ignored directory is skipped whole, without walking it (the entry limit is 30)"
    );
    assert!(warnings[0].to_string().contains("2 new path"));
    let expected = with(
        fixture.base_set(),
        "kept.log",
        BLOB,
        "tracked, and changed by the agent\n",
    );
    let expected = with(expected, "src/kept.rs", BLOB, "// new and not ignored\n");
    assert_eq!(tree_set(&fixture.repo, commit.as_str()), expected);
}

#[test]
fn file_names_that_are_not_utf8_keep_their_bytes() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    let name = b"caf\xe9.txt";
    std::fs::write(workspace.join(OsStr::from_bytes(name)), "latin-1 name\n").unwrap();
    let (commit, diff, warnings) = committed(fixture.import(&workspace));
    assert_eq!(warnings, []);
    let set = tree_set(&fixture.repo, commit.as_str());
    assert_eq!(set[name.as_slice()], (BLOB, b"latin-1 name\n".to_vec()));
    assert_eq!(diff.files.len(), 1);
    assert_eq!(diff.files[0].path, "caf\u{fffd}.txt");
    assert_eq!(diff.files[0].change, ChangeKind::Added);
    // Real git reads the name back byte for byte.
    let listed = Command::new("git")
        .arg("-C")
        .arg(&fixture.repo)
        .args(["ls-tree", "-z", "--name-only", commit.as_str()])
        .output()
        .unwrap();
    assert!(
        listed
            .stdout
            .split(|byte| *byte == 0)
            .any(|entry| entry == name)
    );
}

#[test]
fn a_bare_repository_materializes_and_imports_without_ignore_rules() {
    let fixture = Fixture::new();
    let bare = fixture.root.path().join("bare.git");
    git(
        fixture.root.path(),
        &[
            "clone",
            "-q",
            "--bare",
            fixture.repo.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let workspace = fixture.empty_directory();
    materialize(&bare, &fixture.base, &workspace, fixture.owner).unwrap();
    assert_eq!(disk_set(&workspace), fixture.base_set());
    write(
        &workspace,
        "notes.log",
        "a bare repository has no working tree to ignore from\n",
    );
    let (commit, _, warnings) =
        committed(import_into(&bare, &workspace, &fixture.base, ImportLimits::default()).unwrap());
    assert_eq!(warnings, []);
    assert_eq!(
        tree_set(&bare, commit.as_str()),
        with(
            fixture.base_set(),
            "notes.log",
            BLOB,
            "a bare repository has no working tree to ignore from\n"
        )
    );
}

// ---------------------------------------------------------------------------------------------------
// Attacks staged by the agent

/// A trap an agent plants: a command that creates a marker file, and a host secret it would like read.
struct Trap {
    dir: tempfile::TempDir,
    marker: PathBuf,
    secret: String,
    secret_file: PathBuf,
}

impl Trap {
    fn new() -> Trap {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("command-ran");
        let secret = random_text();
        let secret_file = dir.path().join("host-secret.txt");
        std::fs::write(&secret_file, &secret).unwrap();
        Trap {
            dir,
            marker,
            secret,
            secret_file,
        }
    }

    /// A shell command that leaves the marker.
    fn command(&self) -> String {
        format!("touch '{}'", self.marker.display())
    }

    /// As `core.fsmonitor`: git appends arguments, which the comment swallows.
    fn monitor(&self) -> String {
        format!("{} #", self.command())
    }

    fn script(&self) -> String {
        format!("#!/bin/sh\n{}\n", self.command())
    }

    /// Proves the trap is live: running real git on the workspace sets it off.
    fn assert_armed(&self, output: Output) {
        assert!(
            self.marker.exists(),
            "the staged command runs under real git (stderr: {})",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::remove_file(&self.marker).unwrap();
    }

    fn assert_inert(&self, repo: &Path) {
        assert!(
            !self.marker.exists(),
            "a command planted in the workspace ran"
        );
        assert_eq!(
            objects_containing(repo, self.secret.as_bytes()),
            [],
            "a host secret was read into the object store"
        );
    }
}

fn plant_hook(path: &Path, script: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, script).unwrap();
    set_mode(path, 0o755);
}

/// Every attack test also makes one honest change, so there is a commit to check exactly.
const HONEST: &str = "# app\n\nhonest change\n";

fn expected_after_honest_change(fixture: &Fixture) -> TreeSet {
    with(fixture.base_set(), "README.md", BLOB, HONEST)
}

#[test]
fn a_gitdir_file_with_an_fsmonitor_runs_nothing() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    // The agent moves its repository under an ignored directory and points `.git` at it.
    std::fs::create_dir(workspace.join("target")).unwrap();
    std::fs::rename(workspace.join(".git"), workspace.join("target/evil.git")).unwrap();
    std::fs::write(workspace.join(".git"), "gitdir: target/evil.git\n").unwrap();
    workspace_git_ok(
        &workspace,
        &[
            "config",
            "--file",
            "target/evil.git/config",
            "core.fsmonitor",
            &trap.monitor(),
        ],
    );
    trap.assert_armed(workspace_git(&workspace, &["status", "--porcelain"]));

    let (commit, _, warnings) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected_after_honest_change(&fixture)
    );
    assert_eq!(
        warnings,
        [ImportWarning::IgnoredPathsSkipped {
            count: 1,
            examples: vec!["target/".into()]
        }]
    );
}

#[test]
fn a_gitdir_file_is_never_followed_even_when_its_directory_is_imported() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    // The agent's repository, moved where it is imported as plain files, with `.git` pointing at it.
    std::fs::rename(workspace.join(".git"), workspace.join("redirect")).unwrap();
    std::fs::write(workspace.join(".git"), "gitdir: redirect\n").unwrap();
    workspace_git_ok(
        &workspace,
        &[
            "config",
            "--file",
            "redirect/config",
            "core.fsmonitor",
            &trap.monitor(),
        ],
    );
    trap.assert_armed(workspace_git(&workspace, &["status", "--porcelain"]));

    let (commit, _, warnings) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    assert_eq!(warnings, []);
    let mut expected = expected_after_honest_change(&fixture);
    let redirected: TreeSet = disk_set(&workspace)
        .into_iter()
        .filter(|(path, _)| path.starts_with(b"redirect/"))
        .collect();
    assert!(redirected.contains_key(b"redirect/config".as_slice()));
    assert!(redirected.contains_key(b"redirect/index".as_slice()));
    expected.extend(redirected);
    assert_eq!(tree_set(&fixture.repo, commit.as_str()), expected);
}

#[test]
fn hooks_in_the_workspace_git_directory_never_run() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    for hook in [
        "pre-commit",
        "post-commit",
        "reference-transaction",
        "post-checkout",
        "post-index-change",
        "pre-auto-gc",
    ] {
        plant_hook(&workspace.join(".git/hooks").join(hook), &trap.script());
    }
    trap.assert_armed(workspace_git(
        &workspace,
        &["commit", "-q", "--allow-empty", "-m", "arming"],
    ));

    let (commit, _, warnings) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    assert_eq!(warnings, []);
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected_after_honest_change(&fixture)
    );
}

#[test]
fn a_hooks_path_in_the_workspace_config_is_never_used() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    let hooks = trap.dir.path().join("hooks");
    for hook in ["pre-commit", "post-commit", "reference-transaction"] {
        plant_hook(&hooks.join(hook), &trap.script());
    }
    workspace_git_ok(
        &workspace,
        &[
            "config",
            "--file",
            ".git/config",
            "core.hooksPath",
            hooks.to_str().unwrap(),
        ],
    );
    trap.assert_armed(workspace_git(
        &workspace,
        &["commit", "-q", "--allow-empty", "-m", "arming"],
    ));

    let (commit, _, _) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected_after_honest_change(&fixture)
    );
}

#[test]
fn a_filter_driver_in_attributes_and_config_never_runs() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    write(&workspace, ".gitattributes", "* filter=evil\n");
    for (key, command) in [
        (
            "filter.evil.clean",
            format!("{}; tr a-z A-Z", trap.command()),
        ),
        ("filter.evil.smudge", format!("{}; cat", trap.command())),
    ] {
        workspace_git_ok(
            &workspace,
            &["config", "--file", ".git/config", key, &command],
        );
    }
    trap.assert_armed(workspace_git(&workspace, &["add", "README.md"]));

    let (commit, _, _) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    let expected = with(
        expected_after_honest_change(&fixture),
        ".gitattributes",
        BLOB,
        "* filter=evil\n",
    );
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected,
        "the attributes file is ordinary content and the bytes are the file's own, unfiltered"
    );
}

#[test]
fn links_to_host_files_are_stored_as_links_and_never_read() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    symlink("/etc/passwd", workspace.join("passwd")).unwrap();
    symlink(&trap.secret_file, workspace.join("src/secret")).unwrap();
    symlink(trap.dir.path(), workspace.join("host-dir")).unwrap();
    symlink("../../../../../../../etc", workspace.join("docs/up")).unwrap();

    let (commit, _, warnings) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    assert_eq!(warnings, []);
    let expected = with(
        expected_after_honest_change(&fixture),
        "passwd",
        LINK,
        "/etc/passwd",
    );
    let expected = with(
        expected,
        "src/secret",
        LINK,
        trap.secret_file.to_str().unwrap(),
    );
    let expected = with(
        expected,
        "host-dir",
        LINK,
        trap.dir.path().to_str().unwrap(),
    );
    let expected = with(expected, "docs/up", LINK, "../../../../../../../etc");
    assert_eq!(tree_set(&fixture.repo, commit.as_str()), expected);
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let first_line = passwd.split(|byte| *byte == b'\n').next().unwrap();
    assert_eq!(objects_containing(&fixture.repo, first_line), []);
}

#[test]
fn nested_and_look_alike_git_directories_are_left_out_with_warnings() {
    let fixture = Fixture::new();
    let trap = Trap::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    write(&workspace, "sub/keep.txt", "kept\n");
    write(
        &workspace,
        "sub/.git/config",
        &format!("[core]\n\tfsmonitor = {}\n", trap.command()),
    );
    plant_hook(
        &workspace.join("sub/.git/hooks/post-checkout"),
        &trap.script(),
    );
    write(&workspace, "other/.GIT/HEAD", "ref: refs/heads/main\n");
    write(&workspace, ".Git/config", "[core]\n");
    write(&workspace, "file/.git", "gitdir: ../sub/.git\n");
    write(&workspace, "ntfs/.git. . ", "dots and spaces NTFS drops\n");
    write(&workspace, "ntfs/GIT~1/config", "NTFS short name\n");
    write(
        &workspace,
        "hfs/.g\u{200c}it/config",
        "HFS+ ignores the joiner\n",
    );
    write(
        &workspace,
        "fine/.github/workflow.yml",
        "a .github directory is fine\n",
    );
    write(&workspace, "fine/.gitkeep", "");

    let (commit, _, warnings) = committed(fixture.import(&workspace));
    trap.assert_inert(&fixture.repo);
    let mut skipped: Vec<String> = warnings
        .iter()
        .map(|warning| match warning {
            ImportWarning::GitDirectorySkipped { path } => path.clone(),
            other => panic!("unexpected warning {other}"),
        })
        .collect();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            ".Git",
            "file/.git",
            "hfs/.g\u{200c}it",
            "ntfs/.git. . ",
            "ntfs/GIT~1",
            "other/.GIT",
            "sub/.git"
        ]
    );
    let expected = with(
        expected_after_honest_change(&fixture),
        "sub/keep.txt",
        BLOB,
        "kept\n",
    );
    let expected = with(
        expected,
        "fine/.github/workflow.yml",
        BLOB,
        "a .github directory is fine\n",
    );
    let expected = with(expected, "fine/.gitkeep", BLOB, "");
    assert_eq!(tree_set(&fixture.repo, commit.as_str()), expected);
    assert!(warnings[0].to_string().contains(".git"));
}

#[test]
fn a_symlinked_gitmodules_is_left_out() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    symlink("/etc/passwd", workspace.join(".gitmodules")).unwrap();
    let (commit, _, warnings) = committed(fixture.import(&workspace));
    assert_eq!(
        warnings,
        [ImportWarning::GitmodulesLinkSkipped {
            path: ".gitmodules".into()
        }]
    );
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected_after_honest_change(&fixture)
    );
}

/// An agent that leaves many special files makes one warning each only up to
/// `MAX_PATH_WARNINGS`; the rest are counted in one warning, so the warnings (events, run record,
/// theater) stay bounded whatever the count.
#[test]
fn warnings_about_many_paths_are_listed_up_to_their_bound_and_the_rest_counted() {
    use stet_engine::git::import::MAX_PATH_WARNINGS;
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    let extra = 57;
    let pipes = workspace.join("pipes");
    std::fs::create_dir(&pipes).unwrap();
    for pipe in 0..MAX_PATH_WARNINGS + extra {
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            pipes.join(format!("p{pipe:04}")),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
    }
    let imported = import_into(
        &fixture.repo,
        &workspace,
        &fixture.base,
        ImportLimits::default(),
    )
    .unwrap();
    let (_, _, warnings) = committed(imported);
    assert_eq!(warnings.len(), MAX_PATH_WARNINGS + 1, "{warnings:?}");
    assert!(warnings[..MAX_PATH_WARNINGS].iter().all(|warning| matches!(
        warning,
        ImportWarning::SpecialFileSkipped { kind: "fifo", .. }
    )));
    assert_eq!(
        warnings[MAX_PATH_WARNINGS],
        ImportWarning::PathWarningsNotListed { count: extra }
    );
    assert!(
        warnings[MAX_PATH_WARNINGS]
            .to_string()
            .contains(&format!("{extra} more"))
    );
}

#[test]
fn fifos_and_sockets_are_skipped_without_blocking() {
    let fixture = Fixture::new();
    let workspace = fixture.workspace();
    write(&workspace, "README.md", HONEST);
    let made = Command::new("mkfifo")
        .arg(workspace.join("src/pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let _listener = std::os::unix::net::UnixListener::bind(workspace.join("socket")).unwrap();

    // A fifo opened for reading would wait for a writer forever: run the import where a hang fails
    // the test instead of stalling it.
    let (sender, receiver) = std::sync::mpsc::channel();
    let repo = fixture.repo.clone();
    let base = fixture.base.clone();
    let walked = workspace.clone();
    std::thread::spawn(move || {
        let _ = sender.send(import_into(&repo, &walked, &base, ImportLimits::default()));
    });
    let imported = receiver
        .recv_timeout(Duration::from_secs(120))
        .expect("the import returns although a fifo is in the workspace")
        .unwrap();
    let (commit, _, warnings) = committed(imported);
    assert_eq!(
        warnings,
        [
            ImportWarning::SpecialFileSkipped {
                path: "socket".into(),
                kind: "socket"
            },
            ImportWarning::SpecialFileSkipped {
                path: "src/pipe".into(),
                kind: "fifo"
            },
        ]
    );
    assert!(warnings[1].to_string().contains("fifo"));
    assert_eq!(
        tree_set(&fixture.repo, commit.as_str()),
        expected_after_honest_change(&fixture)
    );
}
