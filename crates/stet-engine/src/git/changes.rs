//! What a result changes, read back from the two trees in the user's repository for the review gate
//! (DESIGN §5 row 19): each changed path's entry before and after (its mode, a link's target), the
//! content it adds (the added lines with their line numbers, every file read as text, so a binary
//! file's bytes are seen too), what it removes, and every symbolic link of the result's tree, so that
//! a path reached through a link can be resolved. Only trusted objects are read: the import wrote
//! them, and git never runs on the workspace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use git2::{DiffOptions, FileMode, Oid, Repository, RepositoryOpenFlags};

use super::text_budget;
use stet_sanitize::branch::CommitSha;

/// Why the changes could not be read.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ChangesError {
    #[error("{operation} in {}: {detail}", repository.display())]
    Git {
        repository: PathBuf,
        operation: &'static str,
        detail: String,
    },
    #[error("reading the result's changes was interrupted")]
    Interrupted,
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ChangesError>;

/// What a tree entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A regular file with the executable bit.
    Executable,
    /// A symbolic link.
    Link,
    /// A submodule: a commit of another repository.
    Submodule,
    /// A directory (a tree).
    Directory,
}

impl EntryKind {
    fn of(mode: FileMode) -> EntryKind {
        match mode {
            FileMode::BlobExecutable => EntryKind::Executable,
            FileMode::Link => EntryKind::Link,
            FileMode::Commit => EntryKind::Submodule,
            FileMode::Tree => EntryKind::Directory,
            FileMode::Blob | FileMode::BlobGroupWritable | FileMode::Unreadable => EntryKind::File,
        }
    }
}

/// One side of a changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What the entry is.
    pub kind: EntryKind,
    /// What a link points at (its blob), exactly as stored.
    pub link_target: Option<Vec<u8>>,
}

/// The lines a file gains, joined by `\n`, and where each begins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddedText {
    /// The added lines, without their `\n`s, joined by `\n`.
    pub text: Vec<u8>,
    /// `(offset in text, line number in the new file)`, one per added line, in order.
    pub lines: Vec<(usize, usize)>,
}

impl AddedText {
    fn push(&mut self, number: usize, content: &[u8]) {
        if !self.lines.is_empty() {
            self.text.push(b'\n');
        }
        self.lines.push((self.text.len(), number));
        let content = content.strip_suffix(b"\n").unwrap_or(content);
        self.text.extend_from_slice(content);
    }

    /// The line number (in the new file) of the byte at `offset`.
    pub fn line_at(&self, offset: usize) -> Option<usize> {
        let index = self.lines.partition_point(|(start, _)| *start <= offset);
        index
            .checked_sub(1)
            .and_then(|index| self.lines.get(index))
            .map(|(_, number)| *number)
    }
}

/// One changed path, with both sides and what it adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathChange {
    /// Repository-relative; a name that is not UTF-8 is shown with replacement characters.
    pub path: String,
    /// The path in the base; `None` when the change adds it.
    pub before: Option<Entry>,
    /// The path in the result; `None` when the change deletes it.
    pub after: Option<Entry>,
    /// The lines the new content gains.
    pub added: AddedText,
    /// The new content holds a NUL byte (git would call it binary).
    pub binary: bool,
    /// Why the content was not read (past a bound of [`text_budget`]): the gate cannot vouch for
    /// it, so it holds the path.
    pub unread: Option<String>,
}

/// Everything the review gate reads about a result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultChanges {
    /// Every changed path.
    pub changes: Vec<PathChange>,
    /// Every removed line of the whole diff, joined by `\n`: what the base already held.
    pub removed: Vec<u8>,
    /// Every symbolic link of the result's tree: its path and its target, within
    /// [`MAX_LINK_BYTES`].
    pub links: Vec<(String, Vec<u8>)>,
    /// The result's links add up to more than [`MAX_LINK_BYTES`]: `links` does not hold them all.
    pub links_cut: bool,
}

/// The most added text read for the secret scan over a whole result; a file that does not fit is
/// left unread (and held).
pub const MAX_SCANNED_BYTES: usize = 2 * 1024 * 1024;

/// The most removed text kept to recognize what the base already held; past it, a value is taken
/// as new (the scan reports more, never less).
pub const MAX_REMOVED_BYTES: usize = 2 * 1024 * 1024;

/// The most bytes of the result's links (their paths and targets) kept for the gate to resolve
/// paths through; past it the gate holds every changed path, since it cannot tell what a link
/// leads to.
pub const MAX_LINK_BYTES: usize = 4 * 1024 * 1024;

/// Reads what `commit` changes against `parent` in `repository`, within [`MAX_SCANNED_BYTES`] of
/// added text, [`MAX_REMOVED_BYTES`] of removed text and the per-file bounds of [`text_budget`].
pub fn read_changes(
    repository: &Path,
    parent: &CommitSha,
    commit: &CommitSha,
) -> Result<ResultChanges> {
    read_changes_until(repository, parent, commit, &|| false)
}

/// [`read_changes`], ending with [`ChangesError::Interrupted`] once `interrupted` says so (asked at
/// each changed path, each hunk and each entry of the result's tree).
pub fn read_changes_until(
    repository: &Path,
    parent: &CommitSha,
    commit: &CommitSha,
    interrupted: &dyn Fn() -> bool,
) -> Result<ResultChanges> {
    let git = |operation: &'static str| {
        move |error: git2::Error| ChangesError::Git {
            repository: repository.to_owned(),
            operation,
            detail: error.message().to_owned(),
        }
    };
    let repo = Repository::open_ext(
        repository,
        RepositoryOpenFlags::NO_SEARCH,
        std::iter::empty::<&std::ffi::OsStr>(),
    )
    .map_err(git("opening the repository"))?;
    let tree_of = |sha: &CommitSha| {
        Oid::from_str(sha.as_str())
            .and_then(|oid| repo.find_commit(oid))
            .and_then(|commit| commit.tree())
            .map_err(git("reading a commit's tree"))
    };
    let (old_tree, new_tree) = (tree_of(parent)?, tree_of(commit)?);
    let mut options = DiffOptions::new();
    // Every file as text (a binary file's bytes are scanned too), no context lines.
    // No size past which a file would be skipped as binary: the import already bounds every file.
    options.force_text(true).context_lines(0).max_size(i64::MAX);
    let diff = repo
        .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), Some(&mut options))
        .map_err(git("comparing the trees"))?;

    let mut result = ResultChanges::default();
    let mut positions: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut scanned = 0;
    for index in 0..diff.deltas().len() {
        if interrupted() {
            return Err(ChangesError::Interrupted);
        }
        let Some(delta) = diff.get_delta(index) else {
            continue;
        };
        let path = delta
            .new_file()
            .path_bytes()
            .or_else(|| delta.old_file().path_bytes())
            .unwrap_or_default()
            .to_vec();
        let side = |file: git2::DiffFile<'_>| -> Result<Option<Entry>> {
            if !file.exists() {
                return Ok(None);
            }
            let kind = EntryKind::of(file.mode());
            let link_target = match kind {
                EntryKind::Link => Some(
                    repo.find_blob(file.id())
                        .map_err(git("reading a link"))?
                        .content()
                        .to_vec(),
                ),
                _ => None,
            };
            Ok(Some(Entry { kind, link_target }))
        };
        let (before, after) = (side(delta.old_file())?, side(delta.new_file())?);
        let sized = |file| text_budget::side_too_large(&repo, &file).map_err(git("reading a file"));
        let unread = sized(delta.new_file())?;
        // A base too large to compare with: all of the new content counts as added.
        let whole = unread.is_none() && sized(delta.old_file())?.is_some();
        let binary = match after.as_ref().map(|entry| entry.kind) {
            _ if unread.is_some() => false,
            Some(EntryKind::File | EntryKind::Executable) => repo
                .find_blob(delta.new_file().id())
                .map_err(git("reading a file"))?
                .content()
                .contains(&0),
            _ => false,
        };
        let at = match positions.get(&path) {
            // A file that became a link (or the reverse) is a deletion and an addition of one path.
            Some(at) => *at,
            None => {
                positions.insert(path.clone(), result.changes.len());
                result.changes.push(PathChange {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    before: None,
                    after: None,
                    added: AddedText::default(),
                    binary: false,
                    unread: None,
                });
                result.changes.len() - 1
            }
        };
        let change = &mut result.changes[at];
        change.before = change.before.take().or(before);
        change.after = change.after.take().or(after);
        change.binary |= binary;
        if let Some(reason) = unread {
            change.unread = Some(reason);
            change.added = AddedText::default();
            continue;
        }
        if whole {
            if matches!(
                change.after.as_ref().map(|entry| entry.kind),
                Some(EntryKind::File | EntryKind::Executable)
            ) {
                let blob = repo
                    .find_blob(delta.new_file().id())
                    .map_err(git("reading a file"))?;
                for (number, content) in blob
                    .content()
                    .split_inclusive(|byte| *byte == b'\n')
                    .enumerate()
                {
                    take_added(change, &mut scanned, number + 1, content);
                }
            }
            continue;
        }

        let patch = git2::Patch::from_diff(&diff, index).map_err(git("reading a patch"))?;
        let Some(patch) = patch else {
            continue;
        };
        for hunk in 0..patch.num_hunks() {
            if interrupted() {
                return Err(ChangesError::Interrupted);
            }
            let lines = patch
                .num_lines_in_hunk(hunk)
                .map_err(git("reading a hunk"))?;
            for line in 0..lines {
                let line = patch
                    .line_in_hunk(hunk, line)
                    .map_err(git("reading a line"))?;
                match (line.origin(), line.new_lineno()) {
                    ('+', Some(number)) => take_added(
                        change,
                        &mut scanned,
                        usize::try_from(number).unwrap_or(usize::MAX),
                        line.content(),
                    ),
                    ('-', _) if result.removed.len() + line.content().len() < MAX_REMOVED_BYTES => {
                        if !result.removed.is_empty() {
                            result.removed.push(b'\n');
                        }
                        result.removed.extend_from_slice(line.content());
                    }
                    _ => {}
                }
            }
        }
    }

    // Walked by hand, in pre-order, with paths as bytes: git2's `Tree::walk` gives each directory's
    // path as `&str` and aborts the walk at a directory whose name is not UTF-8 (a latin-1 base, or
    // an agent's `\xff` directory, failed every dispatch at review).
    let mut link_bytes = 0;
    let mut stack = vec![(Vec::new(), new_tree, 0usize)];
    while let Some((root, tree, index)) = stack.last_mut() {
        if interrupted() {
            return Err(ChangesError::Interrupted);
        }
        let Some(entry) = tree.get(*index) else {
            stack.pop();
            continue;
        };
        *index += 1;
        let mode = entry.filemode();
        let wanted = mode == i32::from(FileMode::Tree)
            || (mode == i32::from(FileMode::Link) && !result.links_cut);
        if !wanted {
            continue;
        }
        // Only a directory or a link needs its path: a file's is never built.
        let id = entry.id();
        let mut path = root.clone();
        path.extend_from_slice(entry.name_bytes());
        drop(entry);
        if mode == i32::from(FileMode::Tree) {
            let subtree = repo
                .find_tree(id)
                .map_err(git("walking the result's tree"))?;
            path.push(b'/');
            stack.push((path, subtree, 0));
        } else if mode == i32::from(FileMode::Link) && !result.links_cut {
            let blob = repo.find_blob(id).map_err(git("reading a link"))?;
            let size = path.len() + blob.content().len();
            if link_bytes + size > MAX_LINK_BYTES {
                result.links_cut = true;
                result.links = Vec::new();
                continue;
            }
            link_bytes += size;
            result.links.push((
                String::from_utf8_lossy(&path).into_owned(),
                blob.content().to_vec(),
            ));
        }
    }
    Ok(result)
}

/// Adds line `number` to what `change` adds, unless the result's added text would pass
/// [`MAX_SCANNED_BYTES`] (`scanned` so far): then none of the file's is kept and it is left unread.
fn take_added(change: &mut PathChange, scanned: &mut usize, number: usize, content: &[u8]) {
    if change.unread.is_some() {
        return;
    }
    if *scanned + content.len() + 1 > MAX_SCANNED_BYTES {
        *scanned -= change.added.text.len().min(*scanned);
        change.added = AddedText::default();
        change.unread = Some(format!(
            "the secret scan reads at most {MAX_SCANNED_BYTES} bytes of added text in a result"
        ));
        return;
    }
    *scanned += content.len() + 1;
    change.added.push(number, content);
}

/// Repositories built from lists of entries, for the tests of the review gate.
#[cfg(test)]
pub(crate) mod trees {
    use super::*;

    /// One tree entry: its path, mode and content (a link's content is its target).
    pub(crate) type Spec<'a> = (&'a str, FileMode, &'a [u8]);

    /// A tree built from `entries`, nested directories included.
    fn tree(repo: &Repository, entries: &[Spec<'_>]) -> Oid {
        fn build(repo: &Repository, entries: &[(Vec<&str>, FileMode, &[u8])]) -> Oid {
            let mut builder = repo.treebuilder(None).unwrap();
            let mut directories: Vec<&str> = Vec::new();
            for (parts, mode, content) in entries {
                if parts.len() == 1 {
                    let blob = repo.blob(content).unwrap();
                    builder.insert(parts[0], blob, i32::from(*mode)).unwrap();
                } else if !directories.contains(&parts[0]) {
                    directories.push(parts[0]);
                }
            }
            for directory in directories {
                let inner: Vec<(Vec<&str>, FileMode, &[u8])> = entries
                    .iter()
                    .filter(|(parts, _, _)| parts.len() > 1 && parts[0] == directory)
                    .map(|(parts, mode, content)| (parts[1..].to_vec(), *mode, *content))
                    .collect();
                let id = build(repo, &inner);
                builder
                    .insert(directory, id, i32::from(FileMode::Tree))
                    .unwrap();
            }
            builder.write().unwrap()
        }
        let split: Vec<(Vec<&str>, FileMode, &[u8])> = entries
            .iter()
            .map(|(path, mode, content)| (path.split('/').collect(), *mode, *content))
            .collect();
        build(repo, &split)
    }

    fn commit(repo: &Repository, tree: Oid, parents: &[&git2::Commit<'_>]) -> CommitSha {
        let signature = git2::Signature::now("t", "t@example.invalid").unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let id = repo
            .commit(None, &signature, &signature, "m", &tree, parents)
            .unwrap();
        CommitSha::parse(&id.to_string()).unwrap()
    }

    /// What a commit of `after` on top of a commit of `before` changes, read by [`read_changes`].
    pub(crate) fn changes(before: &[Spec<'_>], after: &[Spec<'_>]) -> ResultChanges {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        commit_and_read(&repo, dir.path(), before, after)
    }

    /// [`changes`] in a repository with a working tree whose attributes mark everything binary.
    pub(crate) fn changes_under_binary_attributes(
        before: &[Spec<'_>],
        after: &[Spec<'_>],
    ) -> ResultChanges {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join(".gitattributes"), "* binary -diff -text\n").unwrap();
        commit_and_read(&repo, dir.path(), before, after)
    }

    fn commit_and_read(
        repo: &Repository,
        path: &Path,
        before: &[Spec<'_>],
        after: &[Spec<'_>],
    ) -> ResultChanges {
        let parent = commit(repo, tree(repo, before), &[]);
        let parent_commit = repo
            .find_commit(Oid::from_str(parent.as_str()).unwrap())
            .unwrap();
        let result = commit(repo, tree(repo, after), &[&parent_commit]);
        read_changes(path, &parent, &result).unwrap()
    }

    /// [`changes`], read by [`read_changes_until`] with `interrupted`.
    pub(crate) fn changes_until(
        before: &[Spec<'_>],
        after: &[Spec<'_>],
        interrupted: &dyn Fn() -> bool,
    ) -> Result<ResultChanges> {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let parent = commit(&repo, tree(&repo, before), &[]);
        let parent_commit = repo
            .find_commit(Oid::from_str(parent.as_str()).unwrap())
            .unwrap();
        let result = commit(&repo, tree(&repo, after), &[&parent_commit]);
        read_changes_until(dir.path(), &parent, &result, interrupted)
    }
}

#[cfg(test)]
mod tests {
    use super::trees::changes;
    use super::*;

    fn change<'c>(changes: &'c ResultChanges, path: &str) -> &'c PathChange {
        changes
            .changes
            .iter()
            .find(|change| change.path == path)
            .unwrap_or_else(|| panic!("{path} not among {changes:#?}"))
    }

    const FILE: FileMode = FileMode::Blob;
    const EXEC: FileMode = FileMode::BlobExecutable;
    const LINK: FileMode = FileMode::Link;

    #[test]
    fn modes_and_link_targets_of_both_sides_are_read() {
        let read = changes(
            &[
                ("bin/old", FILE, b"echo\n"),
                ("ci", LINK, b"docs"),
                ("swap", FILE, b"x\n"),
                ("same", EXEC, b"run\n"),
            ],
            &[
                ("bin/old", EXEC, b"echo\n"),
                ("bin/new", EXEC, b"run\n"),
                ("ci", LINK, b".github"),
                ("docs/x", LINK, b"../.github/workflows/ci.yml"),
                ("swap", LINK, b"/etc/passwd"),
                ("same", EXEC, b"run\n"),
            ],
        );
        let entry = |kind, target: Option<&[u8]>| Entry {
            kind,
            link_target: target.map(<[u8]>::to_vec),
        };
        let old = change(&read, "bin/old");
        assert_eq!(old.before, Some(entry(EntryKind::File, None)));
        assert_eq!(old.after, Some(entry(EntryKind::Executable, None)));
        assert_eq!(change(&read, "bin/new").before, None);
        let ci = change(&read, "ci");
        assert_eq!(ci.before, Some(entry(EntryKind::Link, Some(b"docs"))));
        assert_eq!(ci.after, Some(entry(EntryKind::Link, Some(b".github"))));
        let swap = change(&read, "swap");
        assert_eq!(swap.before, Some(entry(EntryKind::File, None)));
        assert_eq!(
            swap.after,
            Some(entry(EntryKind::Link, Some(b"/etc/passwd")))
        );
        assert!(read.changes.iter().all(|change| change.path != "same"));
        let mut links = read.links.clone();
        links.sort();
        assert_eq!(
            links,
            vec![
                ("ci".to_owned(), b".github".to_vec()),
                ("docs/x".to_owned(), b"../.github/workflows/ci.yml".to_vec()),
                ("swap".to_owned(), b"/etc/passwd".to_vec()),
            ]
        );
    }

    /// The attack: files past the per-file text bounds (bytes, lines) and added text past the
    /// result's scan budget. Each such file is left unread, named with why, never diffed or held in
    /// memory; a base too large to compare with makes all of the new content count as added.
    #[test]
    fn files_past_the_text_bounds_are_left_unread_and_the_added_text_stays_within_its_budget() {
        use crate::git::text_budget::{MAX_DIFF_FILE_BYTES, MAX_DIFF_FILE_LINES};
        let wide = vec![b'x'; usize::try_from(MAX_DIFF_FILE_BYTES).unwrap() + 1];
        let lines = "a\n".repeat(MAX_DIFF_FILE_LINES + 1);
        let chunk = vec![b'y'; 900 * 1024];
        let read = changes(
            &[("old.txt", FILE, &wide)],
            &[
                ("old.txt", FILE, b"small\n"),
                ("wide.bin", FILE, &wide),
                ("lines.txt", FILE, lines.as_bytes()),
                ("c1", FILE, &chunk),
                ("c2", FILE, &chunk),
                ("c3", FILE, &chunk),
            ],
        );
        for unread in ["wide.bin", "lines.txt", "c3"] {
            let change = change(&read, unread);
            assert!(change.unread.is_some(), "{unread}");
            assert!(change.added.text.is_empty(), "{unread}");
        }
        assert!(
            change(&read, "wide.bin")
                .unread
                .as_deref()
                .unwrap()
                .contains("bytes")
        );
        assert!(
            change(&read, "lines.txt")
                .unread
                .as_deref()
                .unwrap()
                .contains("lines")
        );
        assert!(
            change(&read, "c3")
                .unread
                .as_deref()
                .unwrap()
                .contains("secret scan")
        );
        assert_eq!(change(&read, "c1").unread, None);
        assert_eq!(change(&read, "old.txt").added.text, b"small");
        let added: usize = read
            .changes
            .iter()
            .map(|change| change.added.text.len())
            .sum();
        assert!(added <= MAX_SCANNED_BYTES, "{added}");
        assert!(read.removed.len() <= MAX_REMOVED_BYTES);
    }

    #[test]
    fn the_users_attributes_never_hide_a_file_from_the_gate() {
        let read = super::trees::changes_under_binary_attributes(
            &[("a.txt", FILE, b"one\n")],
            &[("a.txt", FILE, b"one\ntwo\n")],
        );
        assert_eq!(change(&read, "a.txt").added.text, b"two");
    }

    #[test]
    fn only_added_lines_are_added_text_with_their_new_line_numbers() {
        let read = changes(
            &[
                ("a.txt", FILE, b"one\ntwo\nthree\n"),
                ("gone.txt", FILE, b"bye\n"),
            ],
            &[
                ("a.txt", FILE, b"one\nTWO\nthree\nfour\n"),
                ("blob.bin", FILE, b"\x00\x01key\nmore\x00"),
            ],
        );
        let a = change(&read, "a.txt");
        assert_eq!(a.added.text, b"TWO\nfour");
        assert_eq!(a.added.lines, vec![(0, 2), (4, 4)]);
        assert_eq!(a.added.line_at(0), Some(2));
        assert_eq!(a.added.line_at(5), Some(4));
        assert!(!a.binary);
        let blob = change(&read, "blob.bin");
        assert!(blob.binary);
        assert_eq!(blob.added.text, b"\x00\x01key\nmore\x00");
        assert_eq!(change(&read, "gone.txt").after, None);
        let removed = String::from_utf8(read.removed.clone()).unwrap();
        assert!(
            removed.contains("two") && removed.contains("bye"),
            "{removed}"
        );
        assert!(!removed.contains("one"));
    }

    #[test]
    fn an_interrupted_reading_ends_without_changes_wherever_it_stops() {
        let before: &[super::trees::Spec<'_>] = &[("a.txt", FILE, b"one\n")];
        let after: &[super::trees::Spec<'_>] = &[
            ("a.txt", FILE, b"one\ntwo\n"),
            ("b/c.txt", FILE, b"three\n"),
            ("d", LINK, b"b"),
        ];
        let whole = changes(before, after);
        let mut stops = 0;
        for after_questions in 0.. {
            let asked = std::cell::Cell::new(0);
            let interrupted = || {
                asked.set(asked.get() + 1);
                asked.get() > after_questions
            };
            match super::trees::changes_until(before, after, &interrupted) {
                Err(ChangesError::Interrupted) => stops += 1,
                Ok(read) => {
                    assert_eq!(read, whole);
                    break;
                }
                Err(other) => panic!("{other}"),
            }
        }
        // Each of the three changed paths and their hunks, each entry of the result's tree (four),
        // and the end of the walk.
        assert!(stops >= 3 + 4, "{stops}");
    }

    /// The red team's find: a directory whose name is not UTF-8 (a latin-1 base, an agent's `\xff`)
    /// made git2's tree walk abort, so every dispatch of such a repository failed at review.
    #[test]
    fn a_directory_named_in_bytes_that_are_not_utf8_is_walked() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let signature = git2::Signature::now("t", "t@example.invalid").unwrap();
        let commit_of = |readme: &[u8], parents: &[&git2::Commit<'_>]| {
            let mut inner = repo.treebuilder(None).unwrap();
            let target = repo.blob(b"../README").unwrap();
            inner.insert("l", target, i32::from(LINK)).unwrap();
            let inner = inner.write().unwrap();
            let mut top = repo.treebuilder(None).unwrap();
            top.insert("README", repo.blob(readme).unwrap(), i32::from(FILE))
                .unwrap();
            top.insert(
                std::ffi::OsStr::from_bytes(b"d\xff"),
                inner,
                i32::from(FileMode::Tree),
            )
            .unwrap();
            let tree = repo.find_tree(top.write().unwrap()).unwrap();
            repo.commit(None, &signature, &signature, "m", &tree, parents)
                .unwrap()
        };
        let parent = commit_of(b"one\n", &[]);
        let parent_commit = repo.find_commit(parent).unwrap();
        let result = commit_of(b"one\ntwo\n", &[&parent_commit]);
        let read = read_changes(
            dir.path(),
            &CommitSha::parse(&parent.to_string()).unwrap(),
            &CommitSha::parse(&result.to_string()).unwrap(),
        )
        .unwrap();
        assert_eq!(change(&read, "README").added.lines.len(), 1, "{read:#?}");
        assert_eq!(
            read.links,
            vec![("d\u{fffd}/l".to_owned(), b"../README".to_vec())],
            "the link under the directory is read, its path shown lossily"
        );
    }
}
