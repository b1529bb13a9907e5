//! The bytes of the paths a result changes, counted before anything lists them: the diff, the review
//! gate's reading of the changes, its matching and the events each hold every changed path, so a
//! change of many long paths (legal under the count and size limits: a path may run to kilobytes)
//! would cost the host several times their bytes. The two trees are compared as git's diff would, a
//! subtree equal on both sides skipped by its id, holding no path but the one being looked at, and the
//! count stops at the limit (`import.max_path_bytes`).

use git2::{ObjectType, Repository, Tree, TreeEntry};

use super::{ImportError, Result};

/// Refuses with [`ImportError::PathsTooLong`] once the paths `imported` adds, changes or deletes
/// against `parent` add up to more than `limit` bytes; asks `interrupted` at each entry looked at.
pub(super) fn within(
    repository: &Repository,
    parent: &Tree<'_>,
    imported: &Tree<'_>,
    limit: u64,
    interrupted: &dyn Fn() -> bool,
) -> Result<()> {
    let mut count = Count {
        repository,
        limit,
        interrupted,
        bytes: 0,
    };
    count.trees(Some(parent), Some(imported), 0)
}

/// The running count of one comparison.
struct Count<'a> {
    repository: &'a Repository,
    limit: u64,
    interrupted: &'a dyn Fn() -> bool,
    bytes: u64,
}

impl<'a> Count<'a> {
    /// Compares two trees found at a path of `prefix` bytes (either may be absent: everything in the
    /// other is added or deleted).
    fn trees(
        &mut self,
        before: Option<&Tree<'_>>,
        after: Option<&Tree<'_>>,
        prefix: u64,
    ) -> Result<()> {
        if let Some(after) = after {
            for entry in after.iter() {
                self.asked()?;
                let earlier = before.and_then(|tree| tree.get_name_bytes(entry.name_bytes()));
                self.entries(earlier.as_ref(), Some(&entry), prefix)?;
            }
        }
        if let Some(before) = before {
            for entry in before.iter() {
                self.asked()?;
                let gone =
                    after.is_none_or(|tree| tree.get_name_bytes(entry.name_bytes()).is_none());
                if gone {
                    self.entries(Some(&entry), None, prefix)?;
                }
            }
        }
        Ok(())
    }

    /// One name on either side: nothing when both hold the same object in the same mode, else the
    /// paths the change names there (a file on one side and a directory on the other count both).
    fn entries(
        &mut self,
        before: Option<&TreeEntry<'_>>,
        after: Option<&TreeEntry<'_>>,
        prefix: u64,
    ) -> Result<()> {
        if let (Some(before), Some(after)) = (before, after)
            && before.id() == after.id()
            && before.filemode() == after.filemode()
        {
            return Ok(());
        }
        let Some(name) = after.or(before).map(TreeEntry::name_bytes) else {
            return Ok(());
        };
        let path = if prefix == 0 {
            length(name)
        } else {
            prefix.saturating_add(1).saturating_add(length(name))
        };
        let before_tree = self.subtree(before)?;
        let after_tree = self.subtree(after)?;
        let leaf_before = before.is_some() && before_tree.is_none();
        let leaf_after = after.is_some() && after_tree.is_none();
        if leaf_before || leaf_after {
            // A file, link or submodule added, changed, deleted or turned into a directory (or the
            // reverse): one path, whatever happens on the other side.
            self.add(path)?;
        }
        if before_tree.is_some() || after_tree.is_some() {
            self.trees(before_tree.as_ref(), after_tree.as_ref(), path)?;
        }
        Ok(())
    }

    /// The tree an entry names, if it names one.
    fn subtree(&self, entry: Option<&TreeEntry<'_>>) -> Result<Option<Tree<'a>>> {
        let Some(entry) = entry.filter(|entry| entry.kind() == Some(ObjectType::Tree)) else {
            return Ok(None);
        };
        self.repository
            .find_tree(entry.id())
            .map(Some)
            .map_err(|error| ImportError::Git {
                repository: self.repository.path().to_owned(),
                operation: "reading a tree to count the change's paths",
                detail: error.message().to_owned(),
            })
    }

    fn add(&mut self, path: u64) -> Result<()> {
        self.bytes = self.bytes.saturating_add(path);
        if self.bytes > self.limit {
            return Err(ImportError::PathsTooLong {
                figure: self.bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }

    fn asked(&self) -> Result<()> {
        if (self.interrupted)() {
            return Err(ImportError::Interrupted);
        }
        Ok(())
    }
}

fn length(name: &[u8]) -> u64 {
    u64::try_from(name.len()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
