//! The imported commit against its parent, for the review and the run record: each changed file
//! with its line counts, and the patch text within the budgets of `text_budget`.

use std::collections::HashMap;

use git2::{Delta, Repository, Tree};

use super::{ChangedFile, ResultDiff, lossy};
use crate::git::text_budget::{self, BoundedText, MAX_PATCH_BYTES};
use stet_protocol::event::ChangeKind;

/// Per-file stats and the patch text of the imported tree against the parent's, the text within
/// [`MAX_PATCH_BYTES`] and each file diffed only within the bounds of [`text_budget`]; a file left
/// out of the text, wholly or partly, is marked `cut` and a note in the patch says so. Ends early
/// (with libgit2's "user" error) once `interrupted` says so, asked at every file and every line.
pub(super) fn result_diff(
    repository: &Repository,
    parent: &Tree<'_>,
    imported: &Tree<'_>,
    interrupted: &dyn Fn() -> bool,
) -> std::result::Result<ResultDiff, git2::Error> {
    // Without typechange detection a file that became a link (or the reverse) is a deletion and an
    // addition of the same path, which is how git shows it: both contents appear in the patch.
    let diff = repository.diff_tree_to_tree(Some(parent), Some(imported), None)?;
    let mut files: Vec<ChangedFile> = Vec::new();
    let mut positions: HashMap<Vec<u8>, usize> = HashMap::new();
    for delta in diff.deltas() {
        let change = match delta.status() {
            Delta::Added => ChangeKind::Added,
            Delta::Deleted => ChangeKind::Deleted,
            _ => ChangeKind::Modified,
        };
        let path = delta_path(&delta).to_vec();
        if let Some(file) = positions
            .get(&path)
            .and_then(|position| files.get_mut(*position))
        {
            file.change = ChangeKind::TypeChanged;
            continue;
        }
        positions.insert(path.clone(), files.len());
        files.push(ChangedFile {
            path: lossy(&path),
            change,
            insertions: 0,
            deletions: 0,
            binary: false,
            cut: false,
        });
    }
    let mut patch = BoundedText::new(MAX_PATCH_BYTES);
    for index in 0..diff.deltas().len() {
        if interrupted() {
            return Err(git2::Error::from_str("interrupted"));
        }
        let Some(delta) = diff.get_delta(index) else {
            continue;
        };
        let Some(file) = positions
            .get(delta_path(&delta))
            .and_then(|position| files.get_mut(*position))
        else {
            continue;
        };
        if let Some(reason) = text_budget::too_large(repository, &delta)? {
            file.cut = true;
            let shown = format!(
                "diff --git a/{0} b/{0}\n[stet: the content of {0} is not shown: {reason}]\n",
                file.path
            );
            patch.push(shown.as_bytes());
            continue;
        }
        let Some(mut one) = git2::Patch::from_diff(&diff, index)? else {
            continue;
        };
        let mut whole = true;
        one.print(&mut |delta, _hunk, line| {
            if interrupted() {
                return false;
            }
            let origin = line.origin();
            file.binary |= delta.flags().is_binary();
            match origin {
                '+' => file.insertions += 1,
                '-' => file.deletions += 1,
                _ => {}
            }
            if matches!(origin, '+' | '-' | ' ') {
                whole &= patch.push(&[origin as u8]);
            }
            whole &= patch.push(line.content());
            true
        })?;
        file.cut |= !whole;
    }
    let cut = files.iter().filter(|file| file.cut).count();
    if patch.is_cut() {
        patch.note(&format!(
            "\n[stet: the patch stops here, at {MAX_PATCH_BYTES} bytes; {cut} file(s) are not shown whole, the commit holds all of it]\n"
        ));
    }
    let insertions = files.iter().map(|file| file.insertions).sum();
    let deletions = files.iter().map(|file| file.deletions).sum();
    Ok(ResultDiff {
        files,
        insertions,
        deletions,
        patch: patch.into_string(),
    })
}

fn delta_path<'d>(delta: &git2::DiffDelta<'d>) -> &'d [u8] {
    delta
        .new_file()
        .path_bytes()
        .or_else(|| delta.old_file().path_bytes())
        .unwrap_or_default()
}
