//! Where OpenHands keeps the run's usage: its `base_state.json` files, found by a bounded walk that
//! follows no link, and their usage statistics added up.

use std::collections::HashSet;
use std::ffi::CStr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::FileType;
use rustix::io::Errno;
use serde::Deserialize;

use crate::untrusted_tree::{self, Entry, FileError, Listing, RegularFile};
use stet_protocol::event::Usage;
use stet_sanitize::sanitize::TokenSanitizer;

use super::{
    MAX_RENDERING_BYTES, MAX_SEARCH_DEPTH, MAX_SEARCH_ENTRIES, MAX_STATE_BYTES, MAX_STATES_BYTES,
    OpenHandsError, Result, bounded_text,
};

/// The file in which OpenHands persists a conversation's state, its usage statistics included.
const BASE_STATE: &CStr = c"base_state.json";

/// The final usage OpenHands recorded for the run, from the `base_state.json` files under `outputs`
/// (its conversations live in `<persistence dir>/<conversation id>/base_state.json`).
///
/// The search goes at most six directories deep, lists at most 50 000 entries, reads at most
/// [`MAX_STATES_BYTES`] of state files in all (however many links lead to one), follows no symbolic
/// link and reads only regular files. A conversation's directory is not searched further: the
/// sub-agent conversations OpenHands keeps inside it (`subagents/<id>/`) are already counted in the
/// parent's statistics, as `task:<id>` or `delegate:<id>` entries. Within a file, every entry of
/// `stats.usage_to_metrics` is added up (the agent's model, the condenser's, the sub-agents'), as
/// OpenHands' own combined metrics do; separate conversations found side by side are added up too.
/// `input_tokens` are the prompt tokens (cache reads included, as the providers count them),
/// `cached_tokens` the cache reads; `cost_usd` and `total_cost_usd` are both the whole run's cost.
///
/// `Ok(None)` when no state file is found or none records any usage.
pub fn final_usage(outputs: &Path, sanitizer: &Arc<TokenSanitizer>) -> Result<Option<Usage>> {
    let root = match untrusted_tree::open_root(outputs) {
        Ok(root) => root,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(read_error(outputs, errno)),
    };
    let mut search = StateSearch {
        root: outputs,
        listed: 0,
        read: 0,
        found: Vec::new(),
    };
    search.directory(root, outputs, 0)?;
    let mut totals = Totals::default();
    for (path, bytes) in &search.found {
        totals.add(path, bytes)?;
    }
    Ok(totals.into_usage(sanitizer))
}

fn read_error(path: &Path, errno: Errno) -> OpenHandsError {
    OpenHandsError::Read {
        path: path.to_owned(),
        source: errno.into(),
    }
}

/// A walk for `base_state.json` files, each directory opened relative to its parent without
/// following links.
struct StateSearch<'a> {
    root: &'a Path,
    listed: usize,
    /// The bytes of state files read so far, at most [`MAX_STATES_BYTES`].
    read: u64,
    /// Each state file found, with its contents.
    found: Vec<(PathBuf, Vec<u8>)>,
}

impl StateSearch<'_> {
    fn directory(&mut self, directory: OwnedFd, path: &Path, depth: usize) -> Result<()> {
        let mut listing = Listing::new(directory).map_err(|errno| read_error(path, errno))?;
        let mut entries = Vec::new();
        for entry in listing.by_ref() {
            let entry = entry.map_err(|errno| read_error(path, errno))?;
            self.listed += 1;
            if self.listed > MAX_SEARCH_ENTRIES {
                return Err(OpenHandsError::TooManyEntries {
                    root: self.root.to_owned(),
                    limit: MAX_SEARCH_ENTRIES,
                });
            }
            entries.push(entry);
        }
        let dirfd = listing.fd().map_err(|errno| read_error(path, errno))?;
        let mut subdirectories = Vec::new();
        for Entry { name, file_type } in entries {
            let child = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let file_type = untrusted_tree::entry_type(dirfd, &name, file_type)
                .map_err(|errno| read_error(&child, errno))?;
            match file_type {
                FileType::RegularFile if name.as_c_str() == BASE_STATE => {
                    let bytes = self.read_state(dirfd, &child)?;
                    self.found.push((child, bytes));
                    return Ok(());
                }
                FileType::Directory => subdirectories.push((name, child)),
                _ => {}
            }
        }
        if depth >= MAX_SEARCH_DEPTH {
            return Ok(());
        }
        subdirectories.sort();
        for (name, child) in subdirectories {
            let opened = untrusted_tree::open_directory(dirfd, &name)
                .map_err(|errno| read_error(&child, errno))?;
            self.directory(opened, &child, depth + 1)?;
        }
        Ok(())
    }

    /// Reads a state file through a descriptor opened without following links and checked to be a
    /// regular file of bounded size, within what is left of [`MAX_STATES_BYTES`].
    fn read_state(&mut self, dirfd: BorrowedFd<'_>, path: &Path) -> Result<Vec<u8>> {
        let left = MAX_STATES_BYTES.saturating_sub(self.read);
        let limit = left.min(MAX_STATE_BYTES);
        let bytes = untrusted_tree::open_file(dirfd, BASE_STATE, limit)
            .and_then(RegularFile::read)
            .map_err(|error| match error {
                FileError::Open(errno) | FileError::Stat(errno) => read_error(path, errno),
                FileError::NotRegular => OpenHandsError::Malformed {
                    path: path.to_owned(),
                    problem: "it is not a regular file".to_owned(),
                },
                FileError::TooLarge { .. } if limit < MAX_STATE_BYTES => {
                    OpenHandsError::StatesTooLarge {
                        root: self.root.to_owned(),
                        limit: MAX_STATES_BYTES,
                    }
                }
                FileError::TooLarge { size, limit } => OpenHandsError::TooLarge {
                    path: path.to_owned(),
                    size,
                    limit,
                },
                FileError::Read(source) => OpenHandsError::Read {
                    path: path.to_owned(),
                    source,
                },
            })?;
        self.read += u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        Ok(bytes)
    }
}

/// The part of `base_state.json` this module reads; every other field is passed over unread.
#[derive(Debug, Deserialize)]
struct BaseState {
    #[serde(default)]
    stats: Option<Stats>,
}

#[derive(Debug, Deserialize)]
struct Stats {
    #[serde(default)]
    usage_to_metrics: Option<Totals>,
}

#[derive(Debug, Deserialize)]
struct Metrics {
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    accumulated_cost: Option<f64>,
    #[serde(default)]
    accumulated_token_usage: Option<TokenUsage>,
}

#[derive(Debug, Default, Deserialize)]
struct TokenUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    cache_read_tokens: u64,
}

/// Usage added up over every metrics entry of every state file, as each entry is read: no entry is
/// kept, so a file naming millions of usages costs no more memory than one naming a few, and the
/// models are kept only as far as they are shown ([`MAX_RENDERING_BYTES`]).
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) entries: usize,
    /// The models named, in the order first named, as far as they are shown.
    models: Vec<String>,
    /// The same models, to look one up in constant time.
    pub(super) named: HashSet<String>,
    /// The bytes of the models kept.
    pub(super) model_bytes: usize,
    pub(super) input: u64,
    output: u64,
    cached: u64,
    cost: f64,
    /// The first usage whose cost is not a non-negative number.
    bad_cost: Option<String>,
}

/// `stats.usage_to_metrics` read entry by entry into [`Totals`].
impl<'de> Deserialize<'de> for Totals {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Totals, D::Error> {
        struct Fold;
        impl<'de> serde::de::Visitor<'de> for Fold {
            type Value = Totals;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a map of usage ids to metrics")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Totals, A::Error> {
                let mut totals = Totals::default();
                while let Some((usage_id, metrics)) = map.next_entry::<String, Metrics>()? {
                    totals.entry(usage_id, metrics);
                }
                Ok(totals)
            }
        }
        deserializer.deserialize_map(Fold)
    }
}

impl Totals {
    fn entry(&mut self, usage_id: String, metrics: Metrics) {
        let cost = metrics.accumulated_cost.unwrap_or(0.0);
        if !cost.is_finite() || cost < 0.0 {
            self.bad_cost.get_or_insert(usage_id);
            return;
        }
        let tokens = metrics.accumulated_token_usage.unwrap_or_default();
        self.entries += 1;
        self.input = self.input.saturating_add(tokens.prompt_tokens);
        self.output = self.output.saturating_add(tokens.completion_tokens);
        self.cached = self.cached.saturating_add(tokens.cache_read_tokens);
        self.cost += cost;
        // "default" is the SDK's name for metrics with no model, such as a sub-agent's combined ones.
        if let Some(model) = metrics.model_name {
            self.name(model);
        }
    }

    fn name(&mut self, model: String) {
        if model.is_empty()
            || model == "default"
            || self.model_bytes > MAX_RENDERING_BYTES
            || self.named.contains(&model)
        {
            return;
        }
        self.model_bytes += model.len() + 2;
        self.named.insert(model.clone());
        self.models.push(model);
    }

    pub(super) fn add(&mut self, path: &Path, bytes: &[u8]) -> Result<()> {
        let malformed = |problem: String| OpenHandsError::Malformed {
            path: path.to_owned(),
            problem,
        };
        // The problem names the place, not serde's message: that one can quote the file's contents.
        let state: BaseState = serde_json::from_slice(bytes).map_err(|error| {
            let what = match error.classify() {
                serde_json::error::Category::Io => "it could not be read",
                serde_json::error::Category::Syntax => "it is not valid JSON",
                serde_json::error::Category::Eof => "it ends early",
                serde_json::error::Category::Data => "a usage field has the wrong type or value",
            };
            malformed(format!(
                "{what} (line {}, column {})",
                error.line(),
                error.column()
            ))
        })?;
        let file = state
            .stats
            .and_then(|stats| stats.usage_to_metrics)
            .unwrap_or_default();
        if let Some(usage_id) = file.bad_cost {
            return Err(malformed(format!(
                "the accumulated cost of usage {usage_id:?} is not a non-negative number"
            )));
        }
        self.entries += file.entries;
        self.input = self.input.saturating_add(file.input);
        self.output = self.output.saturating_add(file.output);
        self.cached = self.cached.saturating_add(file.cached);
        self.cost += file.cost;
        for model in file.models {
            self.name(model);
        }
        Ok(())
    }

    fn into_usage(self, sanitizer: &Arc<TokenSanitizer>) -> Option<Usage> {
        if self.entries == 0 {
            return None;
        }
        let model = if self.models.is_empty() {
            "unknown".to_owned()
        } else {
            self.models.join(", ")
        };
        Some(Usage {
            model: bounded_text(sanitizer, &model, MAX_RENDERING_BYTES),
            input_tokens: self.input,
            output_tokens: self.output,
            cached_tokens: self.cached,
            cost_usd: Some(self.cost),
            total_cost_usd: self.cost,
            latency_ms: None,
        })
    }
}
