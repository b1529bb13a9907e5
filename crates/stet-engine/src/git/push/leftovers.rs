//! A fetch that is stopped or fails leaves nothing in the user's repository: the temporary packs git
//! and libgit2 write while objects arrive (`tmp_pack_*`, `tmp_idx_*`, `pack_git2_*`) and a `.keep`
//! that a killed fetch never got to remove are deleted, and so is a whole pack a fetch wrote and then
//! found wanting; what was there before is never touched.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The names in a pack directory before a fetch began.
pub(super) struct PackLeftovers {
    directory: PathBuf,
    before: HashSet<OsString>,
}

impl PackLeftovers {
    /// Notes what `objects/pack` under `objects` holds now.
    pub(super) fn before(objects: &Path) -> PackLeftovers {
        let directory = objects.join("pack");
        let before = names(&directory).collect();
        PackLeftovers { directory, before }
    }

    /// Removes each temporary pack or `.keep` that appeared since [`PackLeftovers::before`]. Best
    /// effort: the fetch's own error is what the caller reports.
    pub(super) fn remove(&self) {
        for name in names(&self.directory) {
            if !self.before.contains(&name) && is_transient(name.as_bytes()) {
                let _ = std::fs::remove_file(self.directory.join(&name));
            }
        }
    }

    /// Removes the pack `name` (hex, as `index-pack` names it) that a fetch wrote and then found
    /// wanting: its `.pack`, `.idx`, `.rev` and any `.keep`, `.promisor` or `.bitmap` beside it.
    pub(super) fn remove_pack(&self, name: &str) {
        if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return;
        }
        for extension in ["keep", "promisor", "bitmap", "rev", "idx", "pack"] {
            let _ = std::fs::remove_file(self.directory.join(format!("pack-{name}.{extension}")));
        }
    }
}

/// A file a fetch writes only while it runs.
fn is_transient(name: &[u8]) -> bool {
    name.starts_with(b"tmp_") || name.starts_with(b"pack_git2_") || name.ends_with(b".keep")
}

fn names(directory: &Path) -> impl Iterator<Item = OsString> {
    std::fs::read_dir(directory)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|entry| entry.file_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_fetch_left_is_removed() {
        let objects = tempfile::tempdir().unwrap();
        let pack = objects.path().join("pack");
        std::fs::create_dir(&pack).unwrap();
        for kept in ["pack-1.pack", "pack-1.idx", "pack-1.keep", "tmp_pack_old"] {
            std::fs::write(pack.join(kept), b"before").unwrap();
        }
        let leftovers = PackLeftovers::before(objects.path());
        for left in [
            "tmp_pack_Ab12",
            "tmp_idx_Cd34",
            "pack_git2_f00",
            "pack-2.keep",
        ] {
            std::fs::write(pack.join(left), b"").unwrap();
        }
        std::fs::write(pack.join("pack-2.pack"), b"complete").unwrap();

        leftovers.remove();

        let mut after: Vec<String> = names(&pack)
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        after.sort();
        assert_eq!(
            after,
            [
                "pack-1.idx",
                "pack-1.keep",
                "pack-1.pack",
                "pack-2.pack",
                "tmp_pack_old"
            ]
        );
    }

    #[test]
    fn a_pack_found_wanting_goes_whole_and_nothing_else_does() {
        let objects = tempfile::tempdir().unwrap();
        let pack = objects.path().join("pack");
        std::fs::create_dir(&pack).unwrap();
        for name in [
            "pack-ab12.pack",
            "pack-ab12.idx",
            "pack-ab12.rev",
            "pack-cd34.pack",
        ] {
            std::fs::write(pack.join(name), b"x").unwrap();
        }
        let leftovers = PackLeftovers::before(objects.path());
        leftovers.remove_pack("../ab12");
        leftovers.remove_pack("ab12");
        let left: Vec<String> = names(&pack)
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["pack-cd34.pack"]);
    }
}
