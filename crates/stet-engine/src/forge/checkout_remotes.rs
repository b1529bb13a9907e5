//! Which forge repositories a checkout's briefs may target: the ones its own remotes point at.
//!
//! A brief's `target.repo` decides where the user's token reads the base from, pushes the agent's
//! branch and opens the pull request. A cloned repository ships its own briefs, so a brief naming
//! another repository of the user's would copy that repository's code into the agent's workspace
//! and push agent-written code there. The checkout's remotes live in its `.git/config`, which is
//! the user's (a clone never carries it): a brief may target a repository only when one of them
//! points at it on the forge's host. To dispatch against another repository, add it as a remote.

use std::path::Path;

use super::ForgeError;
use super::rest::is_name_part;
use crate::check::{Check, Status};

/// The `owner/name` repositories, on one host, that a checkout's remotes point at (lower-cased,
/// since the forge compares names without case).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckoutRemotes {
    repositories: Vec<String>,
}

impl CheckoutRemotes {
    /// The repositories the remotes of the checkout at `checkout` point at on `host` (none when it
    /// cannot be opened as a repository, or has no such remote).
    pub fn of_checkout(checkout: &Path, host: &str) -> CheckoutRemotes {
        CheckoutRemotes::from_urls(urls_of(checkout), host)
    }

    /// [`CheckoutRemotes::of_checkout`] for a forge whose repositories sit in nested groups
    /// (GitLab's `group/subgroup/project`, up to [`MAX_NAMESPACE_DEPTH`] parts).
    pub fn of_checkout_namespaced(checkout: &Path, host: &str) -> CheckoutRemotes {
        CheckoutRemotes::from_urls_namespaced(urls_of(checkout), host)
    }

    /// The `owner/name` repositories of `urls` on `host`.
    pub fn from_urls(urls: impl IntoIterator<Item = String>, host: &str) -> CheckoutRemotes {
        CheckoutRemotes::collect(urls, host, 2)
    }

    /// The repositories of `urls` on `host`, in nested groups of up to [`MAX_NAMESPACE_DEPTH`]
    /// parts.
    pub fn from_urls_namespaced(
        urls: impl IntoIterator<Item = String>,
        host: &str,
    ) -> CheckoutRemotes {
        CheckoutRemotes::collect(urls, host, MAX_NAMESPACE_DEPTH)
    }

    fn collect(
        urls: impl IntoIterator<Item = String>,
        host: &str,
        depth: usize,
    ) -> CheckoutRemotes {
        let mut repositories: Vec<String> = urls
            .into_iter()
            .filter_map(|url| repository_at(&url, host, depth))
            .collect();
        repositories.sort();
        repositories.dedup();
        CheckoutRemotes { repositories }
    }

    /// Whether a brief of this checkout may target `repo` (`owner/name`).
    pub fn allows(&self, repo: &str) -> bool {
        self.repositories
            .iter()
            .any(|own| own == &repo.to_ascii_lowercase())
    }

    /// The repositories, for an error that says which a brief may target.
    pub fn repositories(&self) -> &[String] {
        &self.repositories
    }

    /// Fails unless a brief of this checkout may target `repo` on `forge`.
    pub(crate) fn refuse_others(&self, forge: &'static str, repo: &str) -> Result<(), ForgeError> {
        if self.allows(repo) {
            return Ok(());
        }
        Err(ForgeError::NotThisCheckout {
            forge,
            repo: repo.to_owned(),
            remotes: match self.repositories.as_slice() {
                [] => "none".to_owned(),
                own => own.join(", "),
            },
        })
    }

    /// `stet doctor`'s word on them: a checkout with no remote on the forge can target nothing.
    pub(crate) fn diagnose(&self, forge: &str, git_url: &str) -> Option<Check> {
        self.repositories.is_empty().then(|| {
            Check::problem(
                "repository",
                Status::Warn,
                format!("{forge}: no remote of this checkout is on {git_url}, so a brief here can target no repository there"),
                &format!("add the repository as a remote: git remote add origin {git_url}/<owner>/<name>.git"),
            )
        })
    }
}

/// The most parts a namespaced repository path may have (GitLab nests groups 20 deep).
pub const MAX_NAMESPACE_DEPTH: usize = 21;

/// Every URL and push URL of the checkout's remotes.
fn urls_of(checkout: &Path) -> Vec<String> {
    let Ok(repository) = git2::Repository::open(checkout) else {
        return Vec::new();
    };
    let mut urls = Vec::new();
    if let Ok(names) = repository.remotes() {
        for name in names.iter().flatten().flatten() {
            let Ok(remote) = repository.find_remote(name) else {
                continue;
            };
            urls.extend(remote.url().ok().map(str::to_owned));
            urls.extend(remote.pushurl().ok().flatten().map(str::to_owned));
        }
    }
    urls
}

/// The `owner/name` (with a `depth` above 2, up to that many parts: `group/sub/name`; lower-cased)
/// a remote URL points at, when it is on `host`: `https://host/o/n`, `ssh://[user@]host[:port]/o/n`,
/// `[user@]host:o/n`, each with or without `.git`.
fn repository_at(url: &str, host: &str, depth: usize) -> Option<String> {
    let (authority, path) = if let Some((_, rest)) = url.split_once("://") {
        rest.split_once('/')?
    } else {
        // scp-like syntax: [user@]host:path
        let (authority, path) = url.split_once(':')?;
        if authority.contains('/') {
            return None;
        }
        (authority, path)
    };
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let remote_host = authority.split(':').next()?;
    if !remote_host.eq_ignore_ascii_case(host) {
        return None;
    }
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let parts: Vec<&str> = path.split('/').collect();
    ((2..=depth).contains(&parts.len()) && parts.iter().all(|part| is_name_part(part)))
        .then(|| parts.join("/").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_remote_spelling_on_the_host_names_its_repository() {
        let remotes = CheckoutRemotes::from_urls(
            [
                "https://github.com/Octo/App.git",
                "https://x-access-token@github.com/octo/tools/",
                "ssh://git@github.com:22/octo/ssh.git",
                "git@github.com:octo/scp",
                "https://gitlab.com/octo/elsewhere.git",
                "/srv/git/octo/local.git",
                "https://github.com/octo/too/deep",
            ]
            .map(str::to_owned),
            "github.com",
        );
        assert_eq!(
            remotes.repositories(),
            ["octo/app", "octo/scp", "octo/ssh", "octo/tools"]
        );
        assert!(remotes.allows("octo/app") && remotes.allows("OCTO/APP"));
        assert!(!remotes.allows("octo/elsewhere"));
        assert!(!remotes.allows("victim/app"));

        let nested = CheckoutRemotes::from_urls_namespaced(
            [
                "https://gitlab.example/Group/Sub/App.git",
                "git@gitlab.example:group/app",
                "https://gitlab.example/solo",
                "https://gitlab.example/a/../b",
            ]
            .map(str::to_owned),
            "gitlab.example",
        );
        assert_eq!(nested.repositories(), ["group/app", "group/sub/app"]);
    }

    #[test]
    fn a_checkout_lists_its_remotes_and_a_directory_that_is_none_lists_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let repository = git2::Repository::init(dir.path()).unwrap();
        repository
            .remote("origin", "https://github.com/hostile/project.git")
            .unwrap();
        repository
            .remote("upstream", "git@github.com:octo/app.git")
            .unwrap();
        let remotes = CheckoutRemotes::of_checkout(dir.path(), "github.com");
        assert_eq!(remotes.repositories(), ["hostile/project", "octo/app"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(
            CheckoutRemotes::of_checkout(empty.path(), "github.com")
                .repositories()
                .is_empty()
        );
    }
}
