//! `LocalForge`: the forge that needs no account, so `stet demo` and first runs work offline. The
//! "remote" is a git repository on disk (by default the user's own); a push writes the branch there
//! through git2 like any other push, and a pull request is a review record under `<state>/reviews/`
//! that the inbox and `stet` can show and that a later dispatch can update.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::brief::Target;
use crate::dispatch::branch::{CommitSha, validate_ref_format};
use crate::forge::{
    Forge, ForgeError, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed, ResolvedHead,
    Result, check_unmoved, push_checked,
};
use crate::git::push::PushError;

const FORGE: &str = "local";

/// Where review records live, under the state directory.
pub const REVIEWS_DIR: &str = "reviews";

/// A pull request of the local forge, as stored in `<state>/reviews/<number>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    pub number: u64,
    /// The brief's `target.repo`: a label here, the remote is `remote`.
    pub repo: String,
    pub remote: PathBuf,
    pub title: String,
    pub body: String,
    pub base: String,
    pub head: String,
    pub state: ReviewState,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewState {
    Open,
    Closed,
}

impl ReviewState {
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
    /// `stet demo` does); returns their numbers.
    pub fn close_open_reviews(&self) -> Result<Vec<u64>> {
        let mut closed = Vec::new();
        for mut record in self.reviews()? {
            if record.state == ReviewState::Open && record.remote == self.remote {
                record.state = ReviewState::Closed;
                record.updated = Utc::now();
                self.replace_record(&record)?;
                closed.push(record.number);
            }
        }
        Ok(closed)
    }

    fn record_path(&self, number: u64) -> PathBuf {
        self.reviews.join(format!("{number}.json"))
    }

    fn record(&self, target: &Target, number: u64) -> Result<ReviewRecord> {
        let path = self.record_path(number);
        if !path.exists() {
            return Err(ForgeError::PullRequestNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
                number,
            });
        }
        let record = read_record(&path)?;
        if record.repo != target.repo {
            return Err(ForgeError::PullRequestNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
                number,
            });
        }
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
        let existing = self.reviews()?;
        let duplicate = existing.iter().find(|record| {
            record.state == ReviewState::Open
                && record.remote == self.remote
                && record.head == draft.head
                && record.base == draft.base
        });
        if let Some(existing) = duplicate {
            return Err(ForgeError::PullRequestExists {
                forge: FORGE,
                repo: target.repo.clone(),
                head: draft.head.clone(),
                base: draft.base.clone(),
                detail: format!("review #{} is open for it", existing.number),
            });
        }
        let now = Utc::now();
        let record = self.create_record(ReviewRecord {
            number: existing.last().map_or(1, |last| last.number + 1),
            repo: target.repo.clone(),
            remote: self.remote.clone(),
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
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(store_error(dir, error)),
    };
    let mut records = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| store_error(dir, e))?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            records.push(read_record(&path)?);
        }
    }
    records.sort_by_key(|record| record.number);
    Ok(records)
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

fn read_record(path: &Path) -> Result<ReviewRecord> {
    let text = std::fs::read_to_string(path).map_err(|e| store_error(path, e))?;
    serde_json::from_str(&text).map_err(|error| ForgeError::Store {
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
