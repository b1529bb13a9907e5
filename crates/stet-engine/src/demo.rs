//! `stet demo`: the scratch repository, briefs and forge the demo dispatches against.
//!
//! The demo must work on any machine, offline and without an account, so everything it needs is
//! embedded in the binary: a tiny Rust program (`assets/demo/repo/`), its text checks for
//! `stet agent check`, and the demo briefs. [`prepare`] writes them into a fresh git repository on
//! branch `main` whose `stet.toml` selects the local forge, with a bare repository beside it as its
//! `origin` and the forge's remote. Both are recreated on every run, so a branch an earlier demo
//! pushed never collides with a new one; a directory is only ever cleared when `stet demo` made it.

use std::io;
use std::path::{Path, PathBuf};

use git2::{IndexAddOption, Repository, RepositoryInitOptions, Signature, Time};

use crate::config::REPOSITORY_FILE;

/// The file that marks a directory as made by [`prepare`], so a rerun may clear it.
pub const MARKER: &str = ".stet-demo";

/// The non-bare repository, under the demo directory.
pub const REPO_DIR: &str = "repo";

/// The bare repository that is the repository's `origin` and the local forge's remote.
pub const REMOTE_DIR: &str = "remote.git";

/// The branch the demo program is committed on, and the briefs' base.
pub const BRANCH: &str = "main";

/// Where the briefs go inside the repository.
const BRIEFS_DIR: &str = ".stet/briefs";

/// The identity and time of the demo program's commit, the same on every run.
const AUTHOR_NAME: &str = "stet demo";
const AUTHOR_EMAIL: &str = "demo@stet.invalid";
/// 2026-01-01T00:00:00Z.
const COMMIT_TIME: i64 = 1_767_225_600;

/// The demo program, by path inside the repository.
const PROGRAM: &[(&str, &str)] = &[
    (
        ".gitignore",
        include_str!("../../../assets/demo/repo/.gitignore"),
    ),
    (
        "Cargo.toml",
        include_str!("../../../assets/demo/repo/Cargo.toml"),
    ),
    (
        "README.md",
        include_str!("../../../assets/demo/repo/README.md"),
    ),
    (
        "src/main.rs",
        include_str!("../../../assets/demo/repo/src/main.rs"),
    ),
    (
        "src/count.rs",
        include_str!("../../../assets/demo/repo/src/count.rs"),
    ),
    (
        "checks/greeting.toml",
        include_str!("../../../assets/demo/repo/checks/greeting.toml"),
    ),
    (
        "checks/word-count.toml",
        include_str!("../../../assets/demo/repo/checks/word-count.toml"),
    ),
];

/// The demo briefs, by file name.
const BRIEFS: &[(&str, &str)] = &[
    (
        "fix-greeting.toml",
        include_str!("../../../assets/demo/briefs/fix-greeting.toml"),
    ),
    (
        "test-word-count.toml",
        include_str!("../../../assets/demo/briefs/test-word-count.toml"),
    ),
];

/// Why the demo's scratch repository could not be made.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum DemoError {
    #[error(
        "{}: not using this directory for the demo: it is not empty and `stet demo` did not make it (it has no {MARKER} file); choose an empty or new directory",
        dir.display()
    )]
    NotDemoDirectory { dir: PathBuf },
    #[error("{}: is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("{}: git cannot {operation}: {source}", path.display())]
    Git {
        path: PathBuf,
        operation: &'static str,
        source: git2::Error,
    },
    #[error("{}: the path is not UTF-8, so it cannot be written into {REPOSITORY_FILE}", path.display())]
    NotUtf8 { path: PathBuf },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, DemoError>;

/// What [`prepare`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSetup {
    /// The demo directory, absolute.
    pub dir: PathBuf,
    /// The repository the demo dispatches from.
    pub repo: PathBuf,
    /// The bare repository branches are pushed to.
    pub remote: PathBuf,
    /// The briefs inside `repo`, sorted.
    pub briefs: Vec<PathBuf>,
}

/// Creates (or recreates) the scratch repository under `dir`: `dir/repo` (a non-bare git repository on
/// branch `main` holding the demo program, committed with a fixed identity, its `.stet/briefs/*.toml`
/// copied from assets/demo/briefs, and a `stet.toml` selecting the local forge with `remote` =
/// `dir/remote.git`) and `dir/remote.git` (a bare repository holding `main`, the repo's `origin`).
///
/// A `dir` that exists and is not empty is only used when it holds the [`MARKER`] file an earlier
/// `prepare` wrote; then only `repo` and `remote.git` in it are removed and made again.
pub fn prepare(dir: &Path) -> Result<DemoSetup> {
    let dir = std::path::absolute(dir).map_err(io_error(dir, "find the absolute path"))?;
    claim(&dir)?;
    let repo = dir.join(REPO_DIR);
    let remote = dir.join(REMOTE_DIR);
    for old in [&repo, &remote] {
        remove(old)?;
    }
    let remote_repository = Repository::init_opts(
        &remote,
        RepositoryInitOptions::new()
            .bare(true)
            .initial_head(BRANCH)
            .mkdir(true),
    )
    .map_err(git_error(&remote, "create the bare repository"))?;
    drop(remote_repository);
    let repository = Repository::init_opts(
        &repo,
        RepositoryInitOptions::new()
            .initial_head(BRANCH)
            .mkdir(true),
    )
    .map_err(git_error(&repo, "create the repository"))?;
    let briefs = write_files(&repo, &remote)?;
    commit(&repository, &repo)?;
    publish(&repository, &repo, &remote)?;
    Ok(DemoSetup {
        dir,
        repo,
        remote,
        briefs,
    })
}

/// Makes sure `dir` is new, empty or an earlier demo's, and marks it as the demo's.
fn claim(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(metadata) if !metadata.is_dir() => {
            return Err(DemoError::NotADirectory {
                path: dir.to_owned(),
            });
        }
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(dir).map_err(io_error(dir, "list the directory"))?;
            let marked = std::fs::symlink_metadata(dir.join(MARKER))
                .is_ok_and(|metadata| metadata.is_file());
            if entries.next().is_some() && !marked {
                return Err(DemoError::NotDemoDirectory {
                    dir: dir.to_owned(),
                });
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io_error(dir, "create the directory"))?;
        }
        Err(error) => return Err(io_error(dir, "read the directory")(error)),
    }
    let marker = dir.join(MARKER);
    std::fs::write(
        &marker,
        "This directory was made by `stet demo`, which deletes and recreates `repo` and `remote.git` in it on every run.\n",
    )
    .map_err(io_error(&marker, "write the marker file"))
}

/// Removes `path` (a directory tree, a file or a link; links are not followed) if it exists.
fn remove(path: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => Err(error),
    };
    removed.map_err(io_error(path, "remove the previous demo's copy"))
}

/// Writes the program, the briefs and `stet.toml` into `repo`; returns the briefs' paths.
fn write_files(repo: &Path, remote: &Path) -> Result<Vec<PathBuf>> {
    let remote_text = remote.to_str().ok_or_else(|| DemoError::NotUtf8 {
        path: remote.to_owned(),
    })?;
    let config = format!(
        "# Written by `stet demo`: results of this scratch repository go to the local forge below,\n\
         # and `stet` run here dispatches the scripted demo agent.\n\
         [forge]\nkind = \"local\"\n\n[forge.local]\nremote = {}\n\n[harness]\nkind = \"script\"\n",
        toml::Value::String(remote_text.to_owned())
    );
    let mut briefs = Vec::new();
    let files = PROGRAM
        .iter()
        .map(|(path, text)| (PathBuf::from(path), *text))
        .chain(BRIEFS.iter().map(|(name, text)| {
            let path = Path::new(BRIEFS_DIR).join(name);
            briefs.push(repo.join(&path));
            (path, *text)
        }))
        .chain([(PathBuf::from(REPOSITORY_FILE), config.as_str())])
        .collect::<Vec<_>>();
    for (relative, text) in files {
        let path = repo.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent, "create the directory"))?;
        }
        std::fs::write(&path, text).map_err(io_error(&path, "write the file"))?;
    }
    briefs.sort();
    Ok(briefs)
}

/// Commits everything in the working tree on `main` as the demo's fixed identity.
fn commit(repository: &Repository, repo: &Path) -> Result<()> {
    let mut index = repository
        .index()
        .map_err(git_error(repo, "open the index"))?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(git_error(repo, "add the demo files"))?;
    index.write().map_err(git_error(repo, "write the index"))?;
    let tree_id = index
        .write_tree()
        .map_err(git_error(repo, "write the tree"))?;
    let tree = repository
        .find_tree(tree_id)
        .map_err(git_error(repo, "read the tree"))?;
    let signature = Signature::new(AUTHOR_NAME, AUTHOR_EMAIL, &Time::new(COMMIT_TIME, 0))
        .map_err(git_error(repo, "make the demo identity"))?;
    repository
        .commit(
            Some("HEAD"),
            &signature,
            &signature,
            "The demo program: a greeter and a word counter",
            &tree,
            &[],
        )
        .map_err(git_error(repo, "commit the demo program"))?;
    Ok(())
}

/// Adds `remote` as `origin`, pushes `main` there and makes it `main`'s upstream.
fn publish(repository: &Repository, repo: &Path, remote: &Path) -> Result<()> {
    let url = remote.to_str().ok_or_else(|| DemoError::NotUtf8 {
        path: remote.to_owned(),
    })?;
    let mut origin = repository
        .remote("origin", url)
        .map_err(git_error(repo, "add the remote `origin`"))?;
    let refspec = format!("refs/heads/{BRANCH}:refs/heads/{BRANCH}");
    origin
        .push(&[refspec.as_str()], None)
        .map_err(git_error(remote, "receive `main`"))?;
    let mut branch = repository
        .find_branch(BRANCH, git2::BranchType::Local)
        .map_err(git_error(repo, "find `main`"))?;
    branch
        .set_upstream(Some(&format!("origin/{BRANCH}")))
        .map_err(git_error(repo, "set `main`'s upstream"))?;
    Ok(())
}

fn io_error(path: &Path, action: &'static str) -> impl Fn(io::Error) -> DemoError + use<> {
    let path = path.to_owned();
    move |source| DemoError::Io {
        path: path.clone(),
        action,
        source,
    }
}

fn git_error(path: &Path, operation: &'static str) -> impl Fn(git2::Error) -> DemoError + use<> {
    let path = path.to_owned();
    move |source| DemoError::Git {
        path: path.clone(),
        operation,
        source,
    }
}

#[cfg(test)]
mod tests;
