//! The disposable repository without the base's largest blobs (DESIGN §5 row 23, issue 36): holding
//! each of them as well, beside the workspace's file, wrote it twice and doubled the time of a
//! materialization bound by the disk. A blob of [`LEFT_OUT_FROM`] bytes or more is written as the
//! workspace's file only, and the repository is a partial clone as git understands it: its packs
//! marked `.promisor`, `extensions.partialClone` naming a remote git cannot reach and may not try
//! (a path under `/dev/null`, every transport refused in the repository's configuration), so `git
//! fsck` takes the missing blobs as promised and a command that needs one fails with git's own
//! "could not fetch … from promisor remote", running nothing but git. Their index entries are
//! skip-worktree: before git writes a tree (`git commit`, `git stash`) it fetches the missing blob
//! of every index entry that is not, and that fetch can only fail. So git in the sandbox works on
//! every other file and does not report a change to a left-out one; stet's import, which walks the
//! files and never reads this repository, still takes such a change.

use std::collections::HashSet;
use std::path::Path;

use git2::{Config, Oid};

use super::{Context, Result, WorkspaceError};

/// Blobs of this many bytes or more are left out of the disposable repository. Files this large are
/// data (media, archives, models, dumps) rather than text one reviews through `git diff`, and GitHub
/// refuses files over 100 MiB; a smaller blob is copied as stored, a tenth of a second at most.
pub const LEFT_OUT_FROM: u64 = 64 << 20;

/// The promisor remote's name, which says who left the blobs out.
const REMOTE: &str = "stet-left-out";

/// Where the promisor remote points: under `/dev/null`, which is never a directory, so no path of
/// that name exists on the host or in the sandbox.
const REMOTE_URL: &str = "/dev/null/stet-left-out-the-largest-blobs";

/// The settings that make the repository a partial clone whose promisor nothing can reach. Every
/// transport is refused, and `file` (the URL's own) by name as well: a `protocol.file.allow` of the
/// user's global configuration would otherwise win over the general `protocol.allow`.
const SETTINGS: [(&str, &str); 7] = [
    ("core.repositoryformatversion", "1"),
    ("extensions.partialClone", REMOTE),
    ("remote.stet-left-out.url", REMOTE_URL),
    ("remote.stet-left-out.promisor", "true"),
    ("remote.stet-left-out.partialCloneFilter", "blob:limit=64m"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
];

/// Splits the base's blobs (id and size) into those the disposable repository holds and the ids of
/// those it leaves out.
pub(super) fn split(blobs: Vec<(Oid, u64)>) -> (Vec<(Oid, u64)>, HashSet<Oid>) {
    let (left_out, kept): (Vec<_>, Vec<_>) = blobs
        .into_iter()
        .partition(|(_, size)| *size >= LEFT_OUT_FROM);
    (kept, left_out.into_iter().map(|(id, _)| id).collect())
}

/// Makes the repository at `git_dir`, whose packs are all written, a partial clone: each pack marked
/// `.promisor`, and [`SETTINGS`] in its configuration file. libgit2 opens no repository with an
/// extension it does not know, so this comes after stet's last opening of it.
pub(super) fn promise(git_dir: &Path, context: &Context<'_>) -> Result<()> {
    let packs = git_dir.join("objects").join("pack");
    let io = |path: &Path, operation: &'static str| {
        let path = path.to_owned();
        move |source| WorkspaceError::Io {
            path,
            operation,
            source,
        }
    };
    let listing = std::fs::read_dir(&packs).map_err(io(&packs, "listing"))?;
    for entry in listing {
        let pack = entry.map_err(io(&packs, "listing"))?.path();
        if pack
            .extension()
            .is_some_and(|extension| extension == "pack")
        {
            let marker = pack.with_extension("promisor");
            std::fs::File::create_new(&marker).map_err(io(&marker, "creating"))?;
        }
    }
    let mut config = Config::open(&git_dir.join("config"))
        .map_err(context.git("opening the disposable repository's configuration"))?;
    for (name, value) in SETTINGS {
        config
            .set_str(name, value)
            .map_err(context.git("making the disposable repository a partial clone"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Output};

    use super::*;
    use stet_sanitize::branch::CommitSha;

    fn git(repository: &Path, args: &[&str]) -> Output {
        Command::new("git")
            .arg("-C")
            .arg(repository)
            .args(["-c", "user.name=t", "-c", "user.email=t@stet.invalid"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
    }

    fn git_ok(repository: &Path, args: &[&str]) -> String {
        let output = git(repository, args);
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn blobs_from_the_threshold_on_are_left_out_and_the_rest_kept() {
        let id = |byte: u8| Oid::from_bytes(&[byte; 20]).unwrap();
        let (kept, left_out) = split(vec![
            (id(1), 0),
            (id(2), LEFT_OUT_FROM - 1),
            (id(3), LEFT_OUT_FROM),
            (id(4), 3 << 30),
        ]);
        assert_eq!(kept, vec![(id(1), 0), (id(2), LEFT_OUT_FROM - 1)]);
        assert_eq!(left_out, HashSet::from([id(3), id(4)]));
    }

    #[test]
    fn the_configuration_names_the_remote_and_the_threshold() {
        let filter = SETTINGS
            .iter()
            .find(|(name, _)| name.ends_with("partialCloneFilter"))
            .unwrap()
            .1;
        assert_eq!(filter, format!("blob:limit={}m", LEFT_OUT_FROM >> 20));
        for (name, _) in SETTINGS {
            if let Some(remote) = name.strip_prefix("remote.") {
                assert!(remote.starts_with(&format!("{REMOTE}.")), "{name}");
            }
        }
    }

    /// A repository of one commit whose tree names a blob it does not hold, packed by git, then
    /// promised: git takes the blob as promised, and asking for it runs no transport, even when the
    /// user's global configuration allows the `file` one.
    #[test]
    fn a_promised_blob_is_missing_as_git_expects_and_fetching_it_reaches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::create_dir(&source).unwrap();
        git_ok(&source, &["init", "-q"]);
        std::fs::write(source.join("small.txt"), "small\n").unwrap();
        std::fs::write(source.join("large.bin"), "stands for a large blob\n").unwrap();
        git_ok(&source, &["add", "-A"]);
        git_ok(&source, &["commit", "-q", "-m", "base"]);
        let large = git_ok(&source, &["rev-parse", "HEAD:large.bin"]);
        let objects: String = git_ok(&source, &["rev-list", "--objects", "HEAD"])
            .lines()
            .map(|line| line.split(' ').next().unwrap())
            .filter(|id| *id != large)
            .map(|id| format!("{id}\n"))
            .collect();

        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        git_ok(&target, &["init", "-q", "--bare"]);
        let mut packing = Command::new("git")
            .arg("-C")
            .arg(&source)
            .args(["pack-objects", "-q"])
            .arg(target.join("objects/pack/pack"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut packing.stdin.take().unwrap(), objects.as_bytes()).unwrap();
        assert!(packing.wait().unwrap().success());
        let head = git_ok(&source, &["rev-parse", "HEAD"]);
        git_ok(&target, &["update-ref", "HEAD", &head]);
        let fsck = git(&target, &["fsck", "--no-dangling"]);
        assert!(
            !fsck.status.success(),
            "before the promise the missing blob is an error: {fsck:?}"
        );

        let context = Context {
            repository: &source,
            base: &CommitSha::parse(&head).unwrap(),
            destination: &target,
            stopped: &|| false,
        };
        promise(&target, &context).unwrap();

        let markers: Vec<_> = std::fs::read_dir(target.join("objects/pack"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "promisor"))
            .collect();
        assert_eq!(markers.len(), 1, "{markers:?}");
        assert!(markers[0].with_extension("pack").is_file());
        git_ok(&target, &["fsck", "--no-dangling"]);
        git_ok(&target, &["cat-file", "-e", "HEAD:small.txt"]);

        // A global configuration allowing every transport, as test suites often set.
        let global = dir.path().join("gitconfig");
        std::fs::write(
            &global,
            "[protocol]\n\tallow = always\n[protocol \"file\"]\n\tallow = always\n",
        )
        .unwrap();
        let asked = Command::new("git")
            .arg("-C")
            .arg(&target)
            .args(["cat-file", "-p", &large])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", &global)
            .env("GIT_TRACE", "1")
            .output()
            .unwrap();
        assert!(!asked.status.success(), "{asked:?}");
        let stderr = String::from_utf8_lossy(&asked.stderr);
        assert!(
            stderr.contains("transport 'file' not allowed")
                && stderr.contains("from promisor remote"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("upload-pack") && !stderr.contains("/bin/sh"),
            "no program but git ran: {stderr}"
        );
        assert!(!stderr.contains("corrupt"), "{stderr}");
    }
}
