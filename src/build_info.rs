//! What `stet --version` says of the build: the commit it was built from and the build's profile.
//! `build.rs` computes them (this file is its module too), so a binary says where it came from; a
//! source tree without `.git` (a tarball) says "unknown commit" unless `STET_BUILD_COMMIT` names one.

use std::path::Path;
use std::process::Command;

/// The variable a build from a tree without `.git` (a release tarball) may name its commit in.
pub(crate) const COMMIT_VARIABLE: &str = "STET_BUILD_COMMIT";

/// What a build says when it cannot tell its commit.
pub(crate) const UNKNOWN_COMMIT: &str = "unknown commit";

/// The commit of the source tree at `root`: `named` when given (and not empty), else the short
/// hash git gives for `root`'s own `.git` (never a repository above it, which a tarball may be
/// unpacked in), else [`UNKNOWN_COMMIT`].
pub(crate) fn commit(root: &Path, named: Option<String>) -> String {
    if let Some(named) = named.filter(|named| !named.trim().is_empty()) {
        return format!("commit {}", named.trim());
    }
    if !root.join(".git").exists() {
        return UNKNOWN_COMMIT.to_owned();
    }
    Command::new("git")
        .arg("--git-dir")
        .arg(root.join(".git"))
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|hash| hash.trim().to_owned())
        .filter(|hash| !hash.is_empty())
        .map_or_else(
            || UNKNOWN_COMMIT.to_owned(),
            |hash| format!("commit {hash}"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_without_git_says_unknown_commit_unless_one_is_named() {
        let tarball = tempfile::tempdir().unwrap();
        assert_eq!(commit(tarball.path(), None), "unknown commit");
        assert_eq!(
            commit(tarball.path(), Some(" ".to_owned())),
            "unknown commit"
        );
        assert_eq!(
            commit(tarball.path(), Some("0123456789ab".to_owned())),
            "commit 0123456789ab",
            "what {COMMIT_VARIABLE} names is the commit"
        );
    }

    #[test]
    fn a_checkout_names_its_head() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let said = commit(root, None);
        if root.join(".git").exists() {
            let hash = said.strip_prefix("commit ").unwrap();
            assert_eq!(hash.len(), 12, "{said}");
            assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{said}");
        } else {
            assert_eq!(said, UNKNOWN_COMMIT);
        }
    }
}
