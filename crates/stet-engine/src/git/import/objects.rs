//! The writing of the import's objects: each blob hashed before it is written and written only
//! when the repository lacks it, every object the import wrote noted, and at the end those the
//! user's store lacks sent there as one pack, so that the import is all or nothing.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use git2::{ObjectType, OdbLookupFlags, Oid};

use super::walk::{Previous, Walk};
use super::{ImportError, Result};
use crate::git::pack::PackWriter;
use crate::untrusted_tree;

impl Walk<'_, '_> {
    /// Notes an object the import wrote, if the repository's own store lacks it.
    pub(super) fn created(&mut self, id: Oid, kind: ObjectType) {
        if !self.seen.contains(&id) && !self.store.exists_ext(id, OdbLookupFlags::NO_REFRESH) {
            self.seen.insert(id);
            self.created.push((id, kind));
        }
    }

    /// Writes the objects the import created into the repository's store, as one pack.
    pub(super) fn store_created(&self) -> Result<()> {
        if self.created.is_empty() {
            return Ok(());
        }
        let directory = self.repository.commondir().join("objects").join("pack");
        let store_error = |operation: &'static str| {
            let path = directory.clone();
            move |source| ImportError::Store {
                path,
                operation,
                source,
            }
        };
        let mut pack = PackWriter::create(&directory, self.created.len())
            .map_err(store_error("writing the result's objects into"))?;
        for (id, kind) in &self.created {
            let object = self
                .odb
                .read(*id)
                .map_err(self.git("reading a new object back"))?;
            pack.add(*id, *kind, object.data())
                .map_err(store_error("writing the result's objects into"))?;
        }
        pack.finish()
            .map_err(store_error("writing the result's objects into"))
    }

    /// The blob id of an opened file, hashed by libgit2 as it reads (never held whole), through the
    /// descriptor that was opened without following links.
    pub(super) fn hashed(&self, opened: &untrusted_tree::RegularFile, path: &[u8]) -> Result<Oid> {
        let through = PathBuf::from(format!("/proc/self/fd/{}", opened.raw_fd()));
        Oid::hash_file(ObjectType::Blob, &through).map_err(|error| ImportError::Io {
            path: self.request.workspace.join(OsStr::from_bytes(path)),
            operation: "hashing",
            source: std::io::Error::other(error.message().to_owned()),
        })
    }

    /// Hashes first and writes only content the repository does not hold yet (checking the parent's
    /// entry at this path first, then the whole store).
    pub(super) fn blob(&mut self, content: &[u8], previous: Option<Previous>) -> Result<Oid> {
        let id = Oid::hash_object(ObjectType::Blob, content).map_err(self.git("hashing a file"))?;
        if previous.is_some_and(|entry| entry.id == id)
            || self.seen.contains(&id)
            || self.store.exists_ext(id, OdbLookupFlags::NO_REFRESH)
        {
            return Ok(id);
        }
        let written = self
            .odb
            .write(ObjectType::Blob, content)
            .map_err(self.git("writing a blob"))?;
        self.created(written, ObjectType::Blob);
        Ok(written)
    }
}
