//! The base measured from object headers before any blob is read (DESIGN §5 rows 16 and 23). A
//! branch that `git clone` fetched but never checked out can hold zero-filled blobs of GiB that
//! compress to a MiB, or a few trees naming each other into a million paths: the walk reads the
//! trees (each only once, and only after its header says it is small) and the headers of the blobs,
//! counts every path as a checkout would write it (a subtree named ten times counts ten times, and
//! the bytes of the paths as well as their number), and refuses past the limits with the base, the
//! figure, the limit and the setting named.

use std::collections::HashMap;

use git2::{ObjectType, Odb, Oid, Repository};

use super::{BaseLimits, Context, Result, WorkspaceError};
use crate::human::shown_bytes;

/// The largest tree object read: a directory of some 300,000 entries. A bigger one is refused from
/// its header, never read.
pub(super) const MAX_TREE_BYTES: usize = 16 << 20;

/// The largest commit object read (its message included).
pub(super) const MAX_COMMIT_BYTES: usize = 1 << 20;

/// The longest target a symbolic link can have on Linux (`PATH_MAX` less its NUL).
const MAX_LINK_BYTES: u64 = 4095;

/// What a base would put on disk, counted per path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Figures {
    /// Entries written: files, links, submodules (empty directories) and directories.
    pub entries: u64,
    /// The sizes of the files and link targets, summed.
    pub bytes: u64,
    /// The lengths of the entries' paths below the tree measured (relative to it), summed.
    pub path_bytes: u64,
    /// How many directory levels a tree holds below itself.
    height: usize,
}

impl Figures {
    fn plus(self, other: Figures) -> Figures {
        Figures {
            entries: self.entries.saturating_add(other.entries),
            bytes: self.bytes.saturating_add(other.bytes),
            path_bytes: self.path_bytes.saturating_add(other.path_bytes),
            height: self.height,
        }
    }
}

/// A base within its limits: its figures, and the trees and blobs (with their sizes) it reaches,
/// each once.
pub(super) struct Surveyed {
    pub figures: Figures,
    pub trees: Vec<Oid>,
    pub blobs: Vec<(Oid, u64)>,
}

/// One walk of one base tree.
struct Survey<'a> {
    repository: &'a Repository,
    odb: Odb<'a>,
    limits: &'a BaseLimits,
    context: &'a Context<'a>,
    /// Each tree measured so far: a tree named again is not read again.
    trees: HashMap<Oid, Figures>,
    /// Each blob's size, from its header.
    blobs: HashMap<Oid, u64>,
}

/// The figures of `tree` (the base commit's root tree), or the refusal of the first limit it passes.
pub(super) fn survey(
    repository: &Repository,
    tree: Oid,
    limits: &BaseLimits,
    context: &Context<'_>,
) -> Result<Surveyed> {
    let odb = repository
        .odb()
        .map_err(context.git("opening the repository's object store"))?;
    let mut survey = Survey {
        repository,
        odb,
        limits,
        context,
        trees: HashMap::new(),
        blobs: HashMap::new(),
    };
    let figures = survey.tree(tree, &mut Vec::new(), 0)?;
    Ok(Surveyed {
        figures,
        trees: survey.trees.into_keys().collect(),
        blobs: survey.blobs.into_iter().collect(),
    })
}

/// An object's size from its header, refused unless it is of the `wanted` kind.
pub(super) fn header(
    odb: &Odb<'_>,
    id: Oid,
    wanted: ObjectType,
    context: &Context<'_>,
) -> Result<u64> {
    let (size, kind) = odb
        .read_header(id)
        .map_err(context.git("reading an object header of the base"))?;
    if kind != wanted {
        return Err(WorkspaceError::Malformed {
            commit: context.base.clone(),
            detail: format!("{id} is a {kind}, named as a {wanted}"),
        });
    }
    Ok(size as u64)
}

impl Survey<'_> {
    /// The figures of the tree `id` at `path`, `depth` directories below the root.
    fn tree(&mut self, id: Oid, path: &mut Vec<u8>, depth: usize) -> Result<Figures> {
        if let Some(known) = self.trees.get(&id).copied() {
            if depth.saturating_add(known.height) > self.limits.max_depth {
                return Err(self.refused(
                    format!(
                        "a path more than {} directories deep (under {})",
                        self.limits.max_depth,
                        shown(path)
                    ),
                    self.limits.max_depth.to_string(),
                    "base.max_depth",
                ));
            }
            return Ok(known);
        }
        let size = header(&self.odb, id, ObjectType::Tree, self.context)?;
        if size > MAX_TREE_BYTES as u64 {
            return Err(WorkspaceError::Malformed {
                commit: self.context.base.clone(),
                detail: format!(
                    "the directory {} is a tree object of {}, more than the {} stet reads",
                    shown(path),
                    shown_bytes(size),
                    shown_bytes(MAX_TREE_BYTES as u64)
                ),
            });
        }
        let tree = self
            .repository
            .find_tree(id)
            .map_err(self.context.git("reading a tree of the base"))?;
        let mut figures = Figures::default();
        for entry in tree.iter() {
            self.context.stop_point()?;
            let length = path.len();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.name_bytes());
            let name_checked = check_name(entry.name_bytes(), path, self.context);
            let counted = name_checked.and_then(|()| self.entry(&entry, path, depth));
            path.truncate(length);
            let counted = counted?;
            figures.height = figures.height.max(counted.height);
            figures = figures.plus(counted);
            self.check(&figures, path)?;
        }
        self.trees.insert(id, figures);
        Ok(figures)
    }

    /// What one entry of a tree adds: itself, and for a directory everything under it.
    fn entry(
        &mut self,
        entry: &git2::TreeEntry<'_>,
        path: &mut Vec<u8>,
        depth: usize,
    ) -> Result<Figures> {
        let name = u64::try_from(entry.name_bytes().len()).unwrap_or(u64::MAX);
        let one = Figures {
            entries: 1,
            path_bytes: name,
            ..Figures::default()
        };
        match entry.kind() {
            Some(ObjectType::Tree) => {
                if depth >= self.limits.max_depth {
                    return Err(self.refused(
                        format!(
                            "{} at {} directories deep",
                            shown(path),
                            depth.saturating_add(1)
                        ),
                        self.limits.max_depth.to_string(),
                        "base.max_depth",
                    ));
                }
                let below = self.tree(entry.id(), path, depth + 1)?;
                // Each path below is this directory's name and a `/` longer than below it.
                let below = Figures {
                    path_bytes: below
                        .entries
                        .saturating_mul(name.saturating_add(1))
                        .saturating_add(below.path_bytes),
                    ..below
                };
                Ok(Figures {
                    height: below.height + 1,
                    ..one.plus(below)
                })
            }
            Some(ObjectType::Blob) => {
                let size = self.blob(entry.id())?;
                if size > self.limits.max_file_bytes {
                    return Err(self.refused(
                        format!("{} of {}", shown(path), exact(size)),
                        exact(self.limits.max_file_bytes),
                        "base.max_file_bytes",
                    ));
                }
                if entry.filemode() == i32::from(git2::FileMode::Link) && size > MAX_LINK_BYTES {
                    return Err(WorkspaceError::Malformed {
                        commit: self.context.base.clone(),
                        detail: format!(
                            "the symbolic link {} has a target of {size} bytes; Linux takes at most {MAX_LINK_BYTES}",
                            shown(path)
                        ),
                    });
                }
                Ok(Figures { bytes: size, ..one })
            }
            // A submodule: an empty directory, and no object of this repository.
            Some(ObjectType::Commit) => Ok(one),
            _ => Err(WorkspaceError::Malformed {
                commit: self.context.base.clone(),
                detail: format!(
                    "{} has the mode {:o}, which no checkout writes",
                    shown(path),
                    entry.filemode()
                ),
            }),
        }
    }

    fn blob(&mut self, id: Oid) -> Result<u64> {
        if let Some(size) = self.blobs.get(&id) {
            return Ok(*size);
        }
        let size = header(&self.odb, id, ObjectType::Blob, self.context)?;
        self.blobs.insert(id, size);
        Ok(size)
    }

    /// Refuses a tree whose figures alone pass a limit: the whole base holds at least as much.
    fn check(&self, figures: &Figures, path: &[u8]) -> Result<()> {
        let under = if path.is_empty() {
            String::new()
        } else {
            format!(" under {}", shown(parent(path)))
        };
        if figures.entries > self.limits.max_files {
            return Err(self.refused(
                format!("at least {} files and directories{under}", figures.entries),
                self.limits.max_files.to_string(),
                "base.max_files",
            ));
        }
        if figures.bytes > self.limits.max_total_bytes {
            return Err(self.refused(
                format!("at least {} of files{under}", exact(figures.bytes)),
                exact(self.limits.max_total_bytes),
                "base.max_total_bytes",
            ));
        }
        // The paths as the checkout writes them: `path` (this directory's) and a `/` before each.
        let directory = u64::try_from(path.len()).unwrap_or(u64::MAX);
        let prefix = if directory == 0 { 0 } else { directory + 1 };
        let path_bytes = figures
            .entries
            .saturating_mul(prefix)
            .saturating_add(figures.path_bytes);
        if path_bytes > self.limits.max_path_bytes {
            return Err(self.refused(
                format!("paths of at least {}{under}", exact(path_bytes)),
                exact(self.limits.max_path_bytes),
                "base.max_path_bytes",
            ));
        }
        Ok(())
    }

    fn refused(&self, figure: String, limit: String, setting: &'static str) -> WorkspaceError {
        WorkspaceError::OverLimit {
            commit: self.context.base.clone(),
            figure,
            limit,
            setting,
        }
    }
}

/// Refuses a name no checkout may write: empty, `.`, `..`, holding a `/`, or one git would read as
/// `.git` on any file system.
fn check_name(name: &[u8], path: &[u8], context: &Context<'_>) -> Result<()> {
    let unsafe_name = name.is_empty()
        || name == b"."
        || name == b".."
        || name.contains(&b'/')
        || crate::git::import::names_git_directory(name);
    if unsafe_name {
        return Err(WorkspaceError::Malformed {
            commit: context.base.clone(),
            detail: format!(
                "it names the path {}, which no checkout writes",
                shown(path)
            ),
        });
    }
    let too_long = if name.len() > MAX_NAME_BYTES {
        Some(format!(
            "a name of {} bytes (starting {}) under {}, longer than a file system takes ({MAX_NAME_BYTES})",
            name.len(),
            shown(&name[..SHOWN_PATH_START]),
            shown(parent(path))
        ))
    } else if path.len() > MAX_PATH_BYTES {
        Some(format!(
            "a path of {} bytes (starting {}), longer than Linux takes ({MAX_PATH_BYTES})",
            path.len(),
            shown(&path[..SHOWN_PATH_START])
        ))
    } else {
        None
    };
    match too_long {
        Some(detail) => Err(WorkspaceError::Malformed {
            commit: context.base.clone(),
            detail: format!("it holds {detail}, which no checkout writes"),
        }),
        None => Ok(()),
    }
}

/// The longest name of a file or directory Linux's file systems take (`NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// The longest path Linux takes (`PATH_MAX` less its NUL), here relative to the workspace.
const MAX_PATH_BYTES: usize = 4095;

/// How much of an over-long name or path a message shows.
const SHOWN_PATH_START: usize = 80;

/// A size in bytes, and as people read it from 1 KiB on.
fn exact(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{bytes} bytes ({})", shown_bytes(bytes))
    }
}

/// The directory holding `path`.
fn parent(path: &[u8]) -> &[u8] {
    match memchr::memrchr(b'/', path) {
        Some(end) => &path[..end],
        None => b"",
    }
}

/// A path for a message: quoted, lossy, `/` for the root.
fn shown(path: &[u8]) -> String {
    if path.is_empty() {
        return "the root directory".to_owned();
    }
    format!("{:?}", String::from_utf8_lossy(path))
}
