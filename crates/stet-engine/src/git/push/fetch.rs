//! Fetching a base commit the user's repository lacks (a base preflight resolved at the forge),
//! under the same rules as the push and the listing, and stopped when the dispatch is: a forge that
//! stalls cannot hold a cancelled dispatch for the pace bounds' minutes, and a local remote is
//! fetched by a git process that is killed at the stop ([`super::local_fetch`]). Nothing of a fetch
//! that is stopped or fails stays in the user's repository.

use std::path::Path;

use git2::{AutotagOption, FetchOptions, ProxyOptions, RemoteRedirect};
use tokio_util::sync::CancellationToken;

use super::leftovers::PackLeftovers;
use super::local_fetch::LocalFetch;
use super::{Exchange, PushError, Result, Route, check_url, find_commit, open_repository};
use crate::credential::ScopedCredential;
use crate::git::origin_guard::{Origin, TransferBounds};
use stet_sanitize::branch::{CommitSha, validate_ref_format};

/// Makes sure the user's repository holds `commit` (a base preflight resolved at the forge): when it
/// does not, fetches `refs/heads/<branch>` from `url` with the scoped credential. The fetch writes no
/// ref and no `FETCH_HEAD` (the objects stay until the import's commit references them), follows no
/// redirect and fetches no tags. Fails when the branch no longer leads to `commit`. Blocking.
pub fn fetch_commit(
    repository: &Path,
    url: &str,
    branch: &str,
    commit: &CommitSha,
    credential: Option<&ScopedCredential>,
) -> Result<()> {
    fetch_commit_within(
        repository,
        url,
        branch,
        commit,
        credential,
        TransferBounds::default(),
    )
}

/// [`fetch_commit`] with the given bounds on how slowly each exchange with the remote may move.
pub fn fetch_commit_within(
    repository: &Path,
    url: &str,
    branch: &str,
    commit: &CommitSha,
    credential: Option<&ScopedCredential>,
    bounds: TransferBounds,
) -> Result<()> {
    let never = CancellationToken::new();
    fetch_commit_until(repository, url, branch, commit, credential, bounds, &never)
}

/// [`fetch_commit_within`], ended with [`PushError::Stopped`] once `stop` is cancelled: the origin
/// guard closes its connections at once (libgit2 may be waiting on a forge that sends nothing), the
/// transfer's progress asks the stop as objects arrive, and a local remote's git process is killed.
pub fn fetch_commit_until(
    repository: &Path,
    url: &str,
    branch: &str,
    commit: &CommitSha,
    credential: Option<&ScopedCredential>,
    bounds: TransferBounds,
    stop: &CancellationToken,
) -> Result<()> {
    check_url(url)?;
    validate_ref_format(branch).map_err(|source| PushError::InvalidBranch {
        branch: branch.to_owned(),
        source,
    })?;
    let opened = open_repository(repository)?;
    if find_commit(&opened, commit, repository).is_ok() {
        return Ok(());
    }
    let stopped = || PushError::Stopped {
        url: url.to_owned(),
    };
    if stop.is_cancelled() {
        return Err(stopped());
    }
    let route = Route::until(url, bounds, Some(stop.clone()))?;
    if Origin::of(url).is_none() {
        // A local path needs no credential; libgit2 still reads the repository's configuration, to
        // refuse a URL it would rewrite.
        drop(route.remote(&opened)?);
        LocalFetch {
            opened: &opened,
            repository,
            url,
            branch,
            commit,
        }
        .run(stop)?;
        return moved_on(&opened, url, branch, commit, repository);
    }
    let leftovers = PackLeftovers::before(&opened.commondir().join("objects"));
    let exchange = Exchange::new(credential, &route);
    let mut remote = route.remote(&opened)?;
    let mut callbacks = exchange.callbacks();
    callbacks.transfer_progress(|_| !stop.is_cancelled());
    let mut options = FetchOptions::new();
    options
        .remote_callbacks(callbacks)
        .proxy_options(ProxyOptions::new())
        .follow_redirects(RemoteRedirect::None)
        .download_tags(AutotagOption::None);
    let refspec = format!("refs/heads/{branch}");
    // `download` brings the objects only: unlike `fetch` it updates no ref and writes no FETCH_HEAD.
    let downloaded = remote.download(&[refspec.as_str()], Some(&mut options));
    if stop.is_cancelled() {
        leftovers.remove();
        return Err(stopped());
    }
    downloaded.map_err(|err| {
        leftovers.remove();
        route
            .refusal(&exchange, &err)
            .unwrap_or_else(|| PushError::FetchFailed {
                url: url.to_owned(),
                branch: branch.to_owned(),
                repository: repository.to_owned(),
                detail: route.detail(&err),
            })
    })?;
    moved_on(&opened, url, branch, commit, repository)
}

/// Fails when the fetched branch does not hold `commit`: it moved since preflight.
fn moved_on(
    opened: &git2::Repository,
    url: &str,
    branch: &str,
    commit: &CommitSha,
    repository: &Path,
) -> Result<()> {
    find_commit(opened, commit, repository).map_err(|_| PushError::FetchFailed {
        url: url.to_owned(),
        branch: branch.to_owned(),
        repository: repository.to_owned(),
        detail: format!("the branch no longer leads to {commit}: it moved since preflight"),
    })
}
