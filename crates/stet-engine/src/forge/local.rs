//! `LocalForge`: the forge that needs no account, so `stet demo` and first runs work offline. The
//! "remote" is a git repository on disk (by default the user's own); a push writes the branch there
//! through git2 like any other push, and a pull request is a review record under `<state>/reviews/`
//! that the inbox and `stet` can show and that a later dispatch can update.
//!
//! Records of every remote share one directory and one sequence of numbers, so `stet reviews N` names
//! one record. Each belongs to the remote it was opened on, identified by the canonical path of that
//! repository's common git directory (the same for every spelling of its path, every symbolic link
//! to it and every worktree of it): a brief of another remote can neither read, update nor close it,
//! whatever `repo` label and `pr` number it gives. Records written before the identity was kept have
//! none; it is worked out from their `remote` when they are read, and written into them the next time
//! they change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::brief::Target;
use crate::check::{Check, Status};
use crate::forge::{
    Forge, ForgeError, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed, ResolvedHead,
    Result, check_unmoved, push_checked,
};
use crate::git::push::PushError;
use stet_sanitize::branch::{CommitSha, validate_ref_format};

const FORGE: &str = "local";

/// Where review records live, under the state directory.
pub const REVIEWS_DIR: &str = "reviews";

/// The largest review record read: the pull request's body is agent text (bounded where it is
/// made), and a record grown past this on disk is refused naming its file, never read whole.
pub const MAX_REVIEW_RECORD_BYTES: u64 = 8 * 1024 * 1024;

/// A pull request of the local forge, as stored in `<state>/reviews/<number>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// The pull request's number; the records of every remote share one sequence.
    pub number: u64,
    /// The brief's `target.repo`: a label here, the remote is `remote`.
    pub repo: String,
    /// The local repository the branch was pushed to.
    pub remote: PathBuf,
    /// The remote's identity: the canonical path of its common git directory, as it was when the
    /// record was opened. Absent from records written before stet kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_git_dir: Option<PathBuf>,
    /// The pull request's title.
    pub title: String,
    /// The pull request's description.
    pub body: String,
    /// The branch it asks to merge into.
    pub base: String,
    /// The branch it asks to merge.
    pub head: String,
    /// Whether it is still open.
    pub state: ReviewState,
    /// When it was opened.
    pub created: DateTime<Utc>,
    /// When it last changed.
    pub updated: DateTime<Utc>,
}

/// Whether a local pull request is still open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewState {
    /// It awaits a decision.
    Open,
    /// It was closed.
    Closed,
}

impl ReviewState {
    /// The state as `stet reviews` prints it (`open`, `closed`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewState::Open => "open",
            ReviewState::Closed => "closed",
        }
    }
}

/// The local forge: one repository on disk as the remote, review records as pull requests.
#[derive(Debug, Clone)]
pub struct LocalForge {
    remote: PathBuf,
    reviews: PathBuf,
}

impl LocalForge {
    /// `remote`: the repository branches are pushed to; `state_dir`: where `reviews/` lives.
    pub fn new(remote: PathBuf, state_dir: &Path) -> LocalForge {
        LocalForge {
            remote,
            reviews: state_dir.join(REVIEWS_DIR),
        }
    }

    /// Every review record, by number.
    pub fn reviews(&self) -> Result<Vec<ReviewRecord>> {
        read_reviews(&self.reviews)
    }

    /// Closes every open review of this forge's remote (e.g. when that repository was made anew, as
    /// `stet demo` does); returns their numbers. A remote that does not exist has none.
    pub fn close_open_reviews(&self) -> Result<Vec<u64>> {
        let Ok(identity) = remote_git_dir(&self.remote) else {
            return Ok(Vec::new());
        };
        let mut closed = Vec::new();
        each_review(&self.reviews, |mut record| {
            if record.state == ReviewState::Open && belongs_to(&record, &identity) {
                record.state = ReviewState::Closed;
                record.remote_git_dir = Some(identity.clone());
                record.updated = Utc::now();
                self.replace_record(&record)?;
                closed.push(record.number);
            }
            Ok(())
        })?;
        Ok(closed)
    }

    fn record_path(&self, number: u64) -> PathBuf {
        self.reviews.join(format!("{number}.json"))
    }

    /// Review `number` of this forge's remote under `target.repo`; a record of another remote is not
    /// found, exactly as one that does not exist.
    fn record(&self, target: &Target, number: u64) -> Result<ReviewRecord> {
        let not_found = || ForgeError::PullRequestNotFound {
            forge: FORGE,
            repo: target.repo.clone(),
            number,
        };
        let path = self.record_path(number);
        if !path.exists() {
            return Err(not_found());
        }
        let identity = remote_git_dir(&self.remote)?;
        let mut record = read_record(&path)?;
        if record.repo != target.repo || !belongs_to(&record, &identity) {
            return Err(not_found());
        }
        record.remote_git_dir = Some(identity);
        Ok(record)
    }

    /// The record of review `number`, refusing one that is closed.
    fn open_record(&self, target: &Target, number: u64) -> Result<ReviewRecord> {
        let record = self.record(target, number)?;
        if record.state != ReviewState::Open {
            return Err(ForgeError::PullRequestClosed {
                forge: FORGE,
                repo: target.repo.clone(),
                number,
                state: record.state.as_str().to_owned(),
            });
        }
        Ok(record)
    }

    /// Writes a new record under the first free number from `record.number` on. Creating the file by
    /// hard link fails when the number is taken, so two dispatches opening at once never share one.
    fn create_record(&self, mut record: ReviewRecord) -> Result<ReviewRecord> {
        crate::private_files::create_dir_all(&self.reviews)
            .map_err(|error| store_error(&error.path, error.source))?;
        let staged = self
            .reviews
            .join(format!(".new-{}.json.tmp", uuid::Uuid::new_v4().simple()));
        let mut number = record.number;
        let created = loop {
            record.number = number;
            write_json(&staged, &record)?;
            match std::fs::hard_link(&staged, self.record_path(number)) {
                Ok(()) => break Ok(record),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => number += 1,
                Err(error) => break Err(store_error(&self.record_path(number), error)),
            }
        };
        let _ = std::fs::remove_file(&staged);
        created
    }

    fn replace_record(&self, record: &ReviewRecord) -> Result<()> {
        let path = self.record_path(record.number);
        let staged = self.reviews.join(format!(
            ".update-{}.json.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        write_json(&staged, record)?;
        std::fs::rename(&staged, &path).map_err(|e| store_error(&path, e))
    }

    fn branch_sha(&self, branch: &str) -> Result<Option<CommitSha>> {
        let repository = open_remote(&self.remote)?;
        let found = match repository.find_reference(&format!("refs/heads/{branch}")) {
            Ok(reference) => reference,
            Err(error) if error.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(error) => return Err(git_error(&self.remote, &error)),
        };
        let commit = found
            .peel_to_commit()
            .map_err(|error| git_error(&self.remote, &error))?;
        CommitSha::parse(&commit.id().to_string())
            .map(Some)
            .map_err(|error| ForgeError::Protocol {
                forge: FORGE,
                detail: error.to_string(),
            })
    }

    fn url(&self, record: &ReviewRecord) -> String {
        self.record_path(record.number).display().to_string()
    }
}

#[async_trait]
impl Forge for LocalForge {
    fn name(&self) -> &'static str {
        FORGE
    }

    async fn diagnose(&self) -> Vec<Check> {
        let remote = self.remote.display();
        vec![match git2::Repository::open(&self.remote) {
            Ok(_) => Check::ok(
                "forge",
                format!("local: results are pushed to the repository {remote}, needing no account"),
            ),
            Err(error) => Check::problem(
                "forge",
                Status::Fail,
                format!(
                    "local: {remote} is not a git repository: {}",
                    error.message()
                ),
                "run stet inside the repository, or set [forge.local] remote to one",
            ),
        }]
    }

    async fn preflight(&self, target: &Target) -> Result<Preflight> {
        let base_sha = self
            .branch_sha(&target.base)?
            .ok_or_else(|| ForgeError::BaseNotFound {
                forge: FORGE,
                repo: self.remote.display().to_string(),
                base: target.base.clone(),
            })?;
        if target.pr.is_none()
            && let Some(branch) = &target.branch
            && self.branch_sha(branch)?.is_some()
        {
            return Err(ForgeError::BranchExists {
                forge: FORGE,
                repo: self.remote.display().to_string(),
                branch: branch.clone(),
            });
        }
        let head = match target.pr {
            None => None,
            Some(number) => {
                let record = self.open_record(target, number)?;
                let sha = self
                    .branch_sha(&record.head)?
                    .ok_or_else(|| ForgeError::NotFound {
                        forge: FORGE,
                        what: format!("the head branch {:?} of review #{number}", record.head),
                        detail: format!("it is gone from {}", self.remote.display()),
                    })?;
                Some(ResolvedHead {
                    number,
                    branch: record.head,
                    sha,
                })
            }
        };
        Ok(Preflight {
            base_sha,
            head,
            push_url: self.remote.display().to_string(),
        })
    }

    async fn push_branch(&self, push: PushBranch<'_>) -> Result<Pushed> {
        let remote = open_remote(&self.remote)?;
        if remote.is_bare() {
            drop(remote);
            return push_checked(FORGE, push).await;
        }
        // libgit2 cannot push into a repository with a working tree (the default remote is the user's
        // own checkout), so the branch is written there directly, with the same checks as a push.
        let refs = branch_refs(&remote, &self.remote)?;
        check_unmoved(FORGE, &push, &refs)?;
        let previous = refs.get(&format!("refs/heads/{}", push.branch)).cloned();
        write_branch(&remote, &self.remote, &push, previous.as_ref())?;
        tracing::info!(forge = FORGE, branch = push.branch, commit = %push.commit, previous = ?previous, "branch written");
        Ok(Pushed {
            branch: push.branch.to_owned(),
            commit: push.commit.clone(),
            previous,
        })
    }

    async fn open_pull_request(
        &self,
        target: &Target,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let identity = remote_git_dir(&self.remote)?;
        let (mut last, mut duplicate) = (0, None);
        each_review(&self.reviews, |record| {
            last = last.max(record.number);
            if duplicate.is_none()
                && record.state == ReviewState::Open
                && record.head == draft.head
                && record.base == draft.base
                && belongs_to(&record, &identity)
            {
                duplicate = Some(record.number);
            }
            Ok(())
        })?;
        if let Some(existing) = duplicate {
            return Err(ForgeError::PullRequestExists {
                forge: FORGE,
                repo: target.repo.clone(),
                head: draft.head.clone(),
                base: draft.base.clone(),
                detail: format!("review #{existing} is open for it"),
            });
        }
        let now = Utc::now();
        let record = self.create_record(ReviewRecord {
            number: last + 1,
            repo: target.repo.clone(),
            remote: self.remote.clone(),
            remote_git_dir: Some(identity),
            title: draft.title.as_str().to_owned(),
            body: draft.body.as_str().to_owned(),
            base: draft.base.clone(),
            head: draft.head.clone(),
            state: ReviewState::Open,
            created: now,
            updated: now,
        })?;
        Ok(PullRequest {
            number: record.number,
            url: self.url(&record),
            opened: true,
        })
    }

    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let mut record = self.open_record(target, number)?;
        record.title = draft.title.as_str().to_owned();
        record.body = draft.body.as_str().to_owned();
        record.updated = Utc::now();
        self.replace_record(&record)?;
        Ok(PullRequest {
            number,
            url: self.url(&record),
            opened: false,
        })
    }
}

/// The review records in `dir` (`<state>/reviews`), by number. A record that cannot be read is an
/// error naming it, never silently skipped; a missing directory means no reviews yet.
pub fn read_reviews(dir: &Path) -> Result<Vec<ReviewRecord>> {
    let mut records = Vec::new();
    each_review(dir, |record| {
        records.push(record);
        Ok(())
    })?;
    Ok(records)
}

/// Hands each review record in `dir` to `each`, one at a time (at most
/// [`MAX_REVIEW_RECORD_BYTES`] held at once), in the order of their numbers; a record that cannot be
/// read is an error naming it.
pub fn each_review(dir: &Path, mut each: impl FnMut(ReviewRecord) -> Result<()>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(store_error(dir, error)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| store_error(dir, e))?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            paths.push(path);
        }
    }
    // `<number>.json`: by number, any other name after them.
    paths.sort_by_cached_key(|path| {
        let number = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .and_then(|stem| stem.parse::<u64>().ok());
        (number.unwrap_or(u64::MAX), path.clone())
    });
    for path in paths {
        each(read_record(&path)?)?;
    }
    Ok(())
}

/// The identity of the repository at `remote`: the canonical path of its common git directory.
pub fn remote_git_dir(remote: &Path) -> Result<PathBuf> {
    let repository = open_remote(remote)?;
    std::fs::canonicalize(repository.commondir()).map_err(|error| store_error(remote, error))
}

/// Whether `record` was opened on the remote whose identity is `identity`. A record without one is
/// identified by its `remote` as it resolves now; one whose remote is gone belongs to no remote.
fn belongs_to(record: &ReviewRecord, identity: &Path) -> bool {
    match &record.remote_git_dir {
        Some(recorded) => recorded == identity,
        None => remote_git_dir(&record.remote).is_ok_and(|resolved| resolved == identity),
    }
}

fn open_remote(remote: &Path) -> Result<git2::Repository> {
    git2::Repository::open(remote).map_err(|error| ForgeError::RepositoryNotFound {
        forge: FORGE,
        repo: format!("{} ({})", remote.display(), error.message()),
    })
}

/// Every branch of `repository`: full ref name → commit.
fn branch_refs(repository: &git2::Repository, path: &Path) -> Result<BTreeMap<String, CommitSha>> {
    let mut refs = BTreeMap::new();
    let branches = repository
        .references_glob("refs/heads/*")
        .map_err(|error| git_error(path, &error))?;
    for reference in branches {
        let reference = reference.map_err(|error| git_error(path, &error))?;
        if let (Ok(name), Ok(commit)) = (reference.name(), reference.peel_to_commit())
            && let Ok(sha) = CommitSha::parse(&commit.id().to_string())
        {
            refs.insert(name.to_owned(), sha);
        }
    }
    Ok(refs)
}

/// Copies the commit's objects into the remote when it lacks them, then creates the branch or moves
/// it forward: never the branch checked out there, never backwards, and only from the value just read
/// (a concurrent change makes the update fail rather than be overwritten).
fn write_branch(
    remote: &git2::Repository,
    remote_path: &Path,
    push: &PushBranch<'_>,
    previous: Option<&CommitSha>,
) -> Result<()> {
    let fail = |error: git2::Error| git_error(remote_path, &error);
    let name = format!("refs/heads/{}", push.branch);
    validate_ref_format(push.branch).map_err(|error| ForgeError::Protocol {
        forge: FORGE,
        detail: format!("branch {:?}: {error}", push.branch),
    })?;
    if remote
        .head()
        .ok()
        .and_then(|head| head.name().ok().map(str::to_owned))
        == Some(name.clone())
    {
        return Err(ForgeError::Store {
            forge: FORGE,
            path: remote_path.to_owned(),
            detail: format!(
                "branch {:?} is checked out there; stet never moves the branch a person is working on",
                push.branch
            ),
        });
    }
    let commit = git2::Oid::from_str(push.commit.as_str()).map_err(fail)?;
    if remote.find_commit(commit).is_err() {
        copy_objects(push.repository, remote, commit).map_err(fail)?;
    }
    let message = format!("stet: push {}", push.commit);
    match previous {
        None => remote.reference(&name, commit, false, &message).map(drop),
        Some(old) => {
            let old = git2::Oid::from_str(old.as_str()).map_err(fail)?;
            if old != commit && !remote.graph_descendant_of(commit, old).map_err(fail)? {
                return Err(ForgeError::from(PushError::NonFastForward {
                    url: remote_path.display().to_string(),
                    branch: push.branch.to_owned(),
                    repository: push.repository.to_owned(),
                    detail: format!("{old} is not an ancestor of {commit}"),
                }));
            }
            remote
                .reference_matching(&name, commit, true, old, &message)
                .map(drop)
        }
    }
    .map_err(fail)
}

/// Packs the commit and its tree from `source` into `remote`'s object store; its parents are already
/// there (they are the remote's base or pull-request head).
fn copy_objects(
    source: &Path,
    remote: &git2::Repository,
    commit: git2::Oid,
) -> std::result::Result<(), git2::Error> {
    use std::io::Write as _;
    let source = git2::Repository::open(source)?;
    let mut builder = source.packbuilder()?;
    builder.insert_commit(commit)?;
    let odb = remote.odb()?;
    let mut writer = odb.packwriter()?;
    let mut written = Ok(());
    builder.foreach(|chunk| {
        written = writer.write_all(chunk);
        written.is_ok()
    })?;
    written.map_err(|error| git2::Error::from_str(&error.to_string()))?;
    writer.commit()?;
    Ok(())
}

/// Review record `path`, read within [`MAX_REVIEW_RECORD_BYTES`].
pub fn read_record(path: &Path) -> Result<ReviewRecord> {
    let file = std::fs::File::open(path).map_err(|e| store_error(path, e))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_REVIEW_RECORD_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| store_error(path, e))?;
    if bytes.len() as u64 > MAX_REVIEW_RECORD_BYTES {
        return Err(ForgeError::Store {
            forge: FORGE,
            path: path.to_owned(),
            detail: format!(
                "the review record is larger than {MAX_REVIEW_RECORD_BYTES} bytes; it was not read"
            ),
        });
    }
    serde_json::from_slice(&bytes).map_err(|error| ForgeError::Store {
        forge: FORGE,
        path: path.to_owned(),
        detail: format!("not a review record: {error}"),
    })
}

fn write_json(path: &Path, record: &ReviewRecord) -> Result<()> {
    let text = serde_json::to_string_pretty(record).map_err(|error| ForgeError::Store {
        forge: FORGE,
        path: path.to_owned(),
        detail: error.to_string(),
    })?;
    crate::private_files::write(path, (text + "\n").as_bytes()).map_err(|e| store_error(path, e))
}

fn store_error(path: &Path, error: std::io::Error) -> ForgeError {
    ForgeError::Store {
        forge: FORGE,
        path: path.to_owned(),
        detail: error.to_string(),
    }
}

fn git_error(remote: &Path, error: &git2::Error) -> ForgeError {
    ForgeError::Store {
        forge: FORGE,
        path: remote.to_owned(),
        detail: error.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository(path: &Path) -> git2::Repository {
        let repository = git2::Repository::init(path).unwrap();
        let signature = git2::Signature::now("user", "user@stet.invalid").unwrap();
        let tree = repository
            .find_tree(repository.index().unwrap().write_tree().unwrap())
            .unwrap();
        repository
            .commit(Some("HEAD"), &signature, &signature, "base", &tree, &[])
            .unwrap();
        drop(tree);
        repository
    }

    fn record(remote: &Path, remote_git_dir: Option<PathBuf>) -> ReviewRecord {
        let now = Utc::now();
        ReviewRecord {
            number: 1,
            repo: "test/notes".into(),
            remote: remote.to_owned(),
            remote_git_dir,
            title: "t".into(),
            body: "b".into(),
            base: "main".into(),
            head: "stet/x".into(),
            state: ReviewState::Open,
            created: now,
            updated: now,
        }
    }

    #[test]
    fn every_spelling_link_and_worktree_of_a_repository_is_one_remote() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app");
        let repo = repository(&app);
        std::os::unix::fs::symlink(&app, dir.path().join("link")).unwrap();
        repo.worktree("side", &dir.path().join("side"), None)
            .unwrap();
        let identity = remote_git_dir(&app).unwrap();
        assert_eq!(identity, std::fs::canonicalize(app.join(".git")).unwrap());
        for spelling in [
            app.join("."),
            app.join("../app/"),
            app.join(".git"),
            dir.path().join("link"),
            dir.path().join("side"),
        ] {
            assert_eq!(
                remote_git_dir(&spelling).unwrap(),
                identity,
                "{}",
                spelling.display()
            );
        }
        let other = dir.path().join("other");
        repository(&other);
        assert_ne!(remote_git_dir(&other).unwrap(), identity);
        assert!(remote_git_dir(&dir.path().join("gone")).is_err());
    }

    #[test]
    fn a_record_belongs_to_the_remote_it_names_and_an_old_one_to_where_its_path_leads() {
        let dir = tempfile::tempdir().unwrap();
        let (app, other) = (dir.path().join("app"), dir.path().join("other"));
        repository(&app);
        repository(&other);
        let (app_id, other_id) = (
            remote_git_dir(&app).unwrap(),
            remote_git_dir(&other).unwrap(),
        );
        // The identity recorded wins over the path, which may lead elsewhere by now.
        let kept = record(&other, Some(app_id.clone()));
        assert!(belongs_to(&kept, &app_id) && !belongs_to(&kept, &other_id));
        // A record written before the identity was kept: its path decides.
        let old = record(&app.join("."), None);
        assert!(belongs_to(&old, &app_id) && !belongs_to(&old, &other_id));
        let orphan = record(&dir.path().join("gone"), None);
        assert!(!belongs_to(&orphan, &app_id));
    }

    #[test]
    fn a_record_written_by_the_previous_version_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.json");
        std::fs::write(
            &path,
            r#"{"number":1,"repo":"test/notes","remote":"/nowhere","title":"t","body":"b","base":"main","head":"stet/x","state":"open","created":"2025-01-01T00:00:00Z","updated":"2025-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        let record = read_record(&path).unwrap();
        assert_eq!((record.number, &record.remote_git_dir), (1, &None));
        let written = serde_json::to_value(&record).unwrap();
        assert!(written.get("remote_git_dir").is_none(), "{written}");
    }

    #[tokio::test]
    async fn a_brief_of_another_remote_finds_no_review_under_the_same_label_and_number() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (app, other) = (dir.path().join("app"), dir.path().join("other"));
        repository(&app);
        repository(&other);
        let first = LocalForge::new(app.clone(), &state);
        let created = first
            .create_record(record(&app, Some(remote_git_dir(&app).unwrap())))
            .unwrap();
        assert_eq!(created.number, 1);
        let target = Target {
            repo: "test/notes".into(),
            base: "main".into(),
            branch: None,
            pr: Some(1),
        };
        let second = LocalForge::new(other, &state);
        assert!(matches!(
            second.record(&target, 1),
            Err(ForgeError::PullRequestNotFound { number: 1, .. })
        ));
        assert_eq!(first.record(&target, 1).unwrap().title, "t");
        let through_a_link = dir.path().join("link");
        std::os::unix::fs::symlink(&app, &through_a_link).unwrap();
        let same = LocalForge::new(through_a_link, &state);
        assert_eq!(same.record(&target, 1).unwrap().number, 1);
    }
}
