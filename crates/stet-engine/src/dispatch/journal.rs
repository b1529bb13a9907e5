//! The journal exists so that a crash — even SIGKILL, at any instant — leaks nothing past the next
//! launch: every resource a dispatch creates is written down and fsync'd before it exists, and crossed
//! off only after it is gone (DESIGN §5 row 14, ADR-0018 "Guaranteed-cleanup pattern").
//!
//! # On disk
//!
//! `<state>/journal/` (0700) holds one append-only JSON Lines file (0600) per live record, named
//! `<dispatch-id>.<pid>-<start time>.jsonl`: the name says which dispatch the record belongs to and
//! which process owns it. Every line carries the schema version `v` and one operation:
//!
//! ```text
//! {"v":1,"op":"begin","dispatch":"stet-dispatch-<uuid>"}
//! {"v":1,"op":"intend","resource":{"kind":"container","name":"stet-dispatch-<uuid>"}}
//! {"v":1,"op":"release","resource":{"kind":"container","name":"stet-dispatch-<uuid>"}}
//! {"v":1,"op":"salvage","salvage":{"repository":"…","parent":"<sha>",…}}
//! ```
//!
//! `salvage`, written as the agent starts, is what the sweep needs to salvage its work after a crash
//! ([`crate::dispatch::salvage`]).
//!
//! The state of a record is the replay of its lines. Each line is written with one `write` and
//! fsync'd before the call returns, so a crash can only ever leave an incomplete *final* line, which
//! replay ignores (the intent it carried never returned, so its resource was never created). Any
//! other unreadable line, or a version this build does not know, is reported naming the file and
//! line. A new record's name is fsync'd into the directory before [`Journal::begin`] returns (a crash
//! before its first line is whole leaves a record with no resources, still named for its owner); a
//! closed record's file is removed and the removal fsync'd.
//!
//! # Ownership
//!
//! A record is owned by the process named in its file name, identified by pid *and* start time
//! (`/proc/<pid>/stat` field 22), so a recycled pid is a different process. Only the owner writes
//! its records. A record whose owner is dead is an orphan; [`Journal::adopt`] takes it over by
//! renaming the file to the adopter's name. `rename` is atomic and a dead owner never recreates its
//! file, so when two processes race to adopt the same orphan exactly one rename succeeds; a live
//! owner's records are never renamed, so two stet processes never take each other's dispatches.
//! This needs Linux `/proc` from the same PID namespace for every process sharing the journal.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::credential::CredentialId;
use crate::dispatch::salvage::SalvagePlan;
use stet_protocol::event::DispatchId;

/// The schema version in every journal line's `v` field. Bumped on any incompatible change.
pub const JOURNAL_SCHEMA_VERSION: u32 = 1;

const RECORD_EXTENSION: &str = "jsonl";

/// Why a journal operation failed. Every variant names the file or directory involved.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum JournalError {
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{}: not a process status line this stet can read ({problem})", .path.display())]
    ProcessStatus { path: PathBuf, problem: String },

    #[error("{}: not a journal record name (expected <dispatch-id>.<pid>-<start time>.jsonl)", .path.display())]
    RecordName { path: PathBuf },

    #[error("{}:{line}: unreadable journal line: {source}", .path.display())]
    CorruptLine {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "{}:{line}: journal schema version {found} is not supported (this stet reads version {JOURNAL_SCHEMA_VERSION})",
        .path.display()
    )]
    UnsupportedVersion {
        path: PathBuf,
        line: usize,
        found: u32,
    },

    #[error("{}:{line}: {problem}", .path.display())]
    Inconsistent {
        path: PathBuf,
        line: usize,
        problem: String,
    },

    #[error("cannot encode a journal line for {}: {source}", .path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{dispatch} is already journaled in {}", .path.display())]
    AlreadyJournaled { dispatch: DispatchId, path: PathBuf },

    #[error("{}: refusing to adopt, its owner ({owner}) is still alive", .path.display())]
    OwnerAlive { path: PathBuf, owner: Owner },

    #[error("{}: belongs to uid {owner}, not to this account (uid {uid}): not acted on", .path.display())]
    Foreign { path: PathBuf, owner: u32, uid: u32 },

    #[error("{}: gone before it could be adopted (another process adopted or closed it)", .path.display())]
    Vanished { path: PathBuf },

    #[error("{}: cannot close, still outstanding: {}", .path.display(), list(.resources))]
    Outstanding {
        path: PathBuf,
        resources: Vec<Resource>,
    },

    #[error(
        "{}: an earlier write failed, so this handle writes nothing more; the record is left for the sweep after this process exits",
        .path.display()
    )]
    Poisoned { path: PathBuf },
}

/// Result of journal operations.
pub type Result<T> = std::result::Result<T, JournalError>;

fn list(resources: &[Resource]) -> String {
    resources
        .iter()
        .map(Resource::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a dispatch can own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resource {
    /// `stet-dispatch-<uuid>`, also labelled `dev.stet.dispatch=<id>`.
    Container {
        /// The container's name.
        name: String,
        /// The engine it lives on (absent in records of older versions: the configured one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        engine: Option<crate::runtime::endpoint::EngineLocation>,
    },
    /// The dispatch's workspace directory.
    Workspace {
        /// Its path.
        path: PathBuf,
    },
    /// The dispatch's outputs directory.
    Outputs {
        /// Its path.
        path: PathBuf,
    },
    /// The model gateway's socket directory, in the account's runtime directory
    /// ([`crate::dispatch::socket_dir`]).
    SocketDir {
        /// Its path.
        path: PathBuf,
    },
    /// A scoped credential minted for the dispatch's push.
    Credential {
        /// The name of the provider that minted it and can revoke it.
        provider: String,
        /// The provider's id for it.
        id: CredentialId,
    },
}

impl Resource {
    /// What kind of resource this is, in words (`workspace`, `outputs directory`, ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Resource::Container { .. } => "container",
            Resource::Workspace { .. } => "workspace",
            Resource::Outputs { .. } => "outputs directory",
            Resource::SocketDir { .. } => "gateway socket directory",
            Resource::Credential { .. } => "credential",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Container { name, .. } => write!(f, "container {name}"),
            Resource::Workspace { path } => write!(f, "workspace {}", path.display()),
            Resource::Outputs { path } => write!(f, "outputs directory {}", path.display()),
            Resource::SocketDir { path } => {
                write!(f, "gateway socket directory {}", path.display())
            }
            Resource::Credential { provider, id } => write!(f, "{provider} credential {id}"),
        }
    }
}

/// Who wrote a record: enough to tell whether that process is still alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// The writing process's id.
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22: clock ticks from boot to the process's start.
    pub start_time: u64,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} started at tick {}",
            self.pid, self.start_time
        )
    }
}

impl Owner {
    /// This process.
    pub fn current() -> Result<Owner> {
        let pid = std::process::id();
        let path = process_status_path(pid);
        let bytes = fs::read(&path).map_err(|source| JournalError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        let status = ProcessStatus::parse(&bytes).ok_or_else(|| JournalError::ProcessStatus {
            path: path.clone(),
            problem: "no pid, state or start time".to_owned(),
        })?;
        if status.pid != pid {
            return Err(JournalError::ProcessStatus {
                path,
                problem: format!(
                    "it describes process {} instead of this one ({pid}); /proc belongs to another PID namespace",
                    status.pid
                ),
            });
        }
        Ok(Owner {
            pid,
            start_time: status.start_time,
        })
    }

    /// Whether this exact process (pid *and* start time) is still running. A pid now used by a
    /// process with another start time, or a zombie, is dead. When `/proc` cannot be read for another
    /// reason than the process being gone, the owner is reported alive: a record is only ever taken
    /// over when its owner is proven dead.
    pub fn is_alive(&self) -> bool {
        match fs::read(process_status_path(self.pid)) {
            Err(error) => error.kind() != io::ErrorKind::NotFound,
            Ok(bytes) => ProcessStatus::parse(&bytes).is_none_or(|status| {
                status.start_time == self.start_time && !matches!(status.state, b'Z' | b'X' | b'x')
            }),
        }
    }
}

fn process_status_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/stat"))
}

/// The fields of `/proc/<pid>/stat` the journal needs.
#[derive(Debug, PartialEq)]
struct ProcessStatus {
    pid: u32,
    state: u8,
    start_time: u64,
}

impl ProcessStatus {
    /// `pid (comm) state ppid … starttime …`. `comm` may hold spaces and parentheses, so the fixed
    /// fields are the ones after the *last* `)`.
    fn parse(bytes: &[u8]) -> Option<ProcessStatus> {
        let open = bytes.iter().position(|byte| *byte == b'(')?;
        let close = bytes.iter().rposition(|byte| *byte == b')')?;
        if close < open {
            return None;
        }
        let pid = std::str::from_utf8(&bytes[..open])
            .ok()?
            .trim_end()
            .parse()
            .ok()?;
        let mut fields = std::str::from_utf8(&bytes[close + 1..])
            .ok()?
            .split_ascii_whitespace();
        let state = match fields.next()?.as_bytes() {
            [state] => *state,
            _ => return None,
        };
        // Fields 4 to 21 come between the state (field 3) and the start time (field 22).
        let start_time = fields.nth(18)?.parse().ok()?;
        Some(ProcessStatus {
            pid,
            state,
            start_time,
        })
    }
}

/// One record as found on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The dispatch the record is about.
    pub dispatch: DispatchId,
    /// The process that wrote it.
    pub owner: Owner,
    /// Intended and not yet released, in creation order.
    pub resources: Vec<Resource>,
    /// What salvaging its work needs, once its agent started.
    pub salvage: Option<SalvagePlan>,
    /// The record's file.
    pub path: PathBuf,
}

/// What a look through the journal found: the readable records, sorted by dispatch id, and a problem
/// for each record file that could not be read (corrupt line, unknown schema version, odd name). A
/// problem never hides the other records; its file stays on disk for a person to look at.
#[derive(Debug, Default)]
pub struct Scan {
    /// The records that could be read, sorted by dispatch id.
    pub records: Vec<Record>,
    /// One problem for each record file that could not be read.
    pub problems: Vec<JournalError>,
}

/// One line of a record file.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    v: u32,
    #[serde(flatten)]
    operation: Operation,
}

/// Read first, so a line from a newer schema is reported as such rather than as corrupt.
#[derive(Deserialize)]
struct Version {
    v: u32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Operation {
    Begin {
        dispatch: DispatchId,
    },
    Intend {
        resource: Resource,
    },
    Release {
        resource: Resource,
    },
    /// The agent is about to run: what the sweep needs to salvage its work after a crash.
    Salvage {
        salvage: SalvagePlan,
    },
}

/// A record's state after replaying its complete lines.
#[derive(Debug, PartialEq)]
struct Replay {
    resources: Vec<Resource>,
    salvage: Option<SalvagePlan>,
    /// Bytes up to and including the last newline; anything after it is a torn write.
    complete_len: u64,
}

fn replay(path: &Path, dispatch: DispatchId, bytes: &[u8]) -> Result<Replay> {
    let complete = match bytes.iter().rposition(|byte| *byte == b'\n') {
        Some(last_newline) => &bytes[..last_newline],
        None => {
            return Ok(Replay {
                resources: Vec::new(),
                salvage: None,
                complete_len: 0,
            });
        }
    };
    let mut resources: Vec<Resource> = Vec::new();
    let mut salvage = None;
    for (index, text) in complete.split(|byte| *byte == b'\n').enumerate() {
        let line = index + 1;
        let corrupt = |source| JournalError::CorruptLine {
            path: path.to_owned(),
            line,
            source,
        };
        let version: Version = serde_json::from_slice(text).map_err(corrupt)?;
        if version.v != JOURNAL_SCHEMA_VERSION {
            return Err(JournalError::UnsupportedVersion {
                path: path.to_owned(),
                line,
                found: version.v,
            });
        }
        let parsed: Line = serde_json::from_slice(text).map_err(corrupt)?;
        let inconsistent = |problem: String| JournalError::Inconsistent {
            path: path.to_owned(),
            line,
            problem,
        };
        match (line, parsed.operation) {
            (1, Operation::Begin { dispatch: named }) if named == dispatch => {}
            (1, Operation::Begin { dispatch: named }) => {
                return Err(inconsistent(format!(
                    "the record begins {named}, but its file name says {dispatch}"
                )));
            }
            (1, _) => return Err(inconsistent("the first line is not `begin`".to_owned())),
            (_, Operation::Begin { .. }) => {
                return Err(inconsistent("`begin` after the first line".to_owned()));
            }
            (_, Operation::Intend { resource }) => {
                if !resources.contains(&resource) {
                    resources.push(resource);
                }
            }
            (_, Operation::Release { resource }) => resources.retain(|held| *held != resource),
            (_, Operation::Salvage { salvage: plan }) => salvage = Some(plan),
        }
    }
    Ok(Replay {
        resources,
        salvage,
        complete_len: complete.len() as u64 + 1,
    })
}

/// `<dispatch-id>.<pid>-<start time>.jsonl`, or `None` for any other name.
fn parse_record_name(name: &str) -> Option<(DispatchId, Owner)> {
    let stem = name.strip_suffix(RECORD_EXTENSION)?.strip_suffix('.')?;
    let (dispatch, owner) = stem.rsplit_once('.')?;
    let (pid, start_time) = owner.split_once('-')?;
    let dispatch: DispatchId = dispatch.parse().ok()?;
    let owner = Owner {
        pid: pid.parse().ok()?,
        start_time: start_time.parse().ok()?,
    };
    // Only the exact spelling `record_name` writes, so `+7` or `07` cannot alias a record.
    (record_name(dispatch, owner) == name).then_some((dispatch, owner))
}

fn record_name(dispatch: DispatchId, owner: Owner) -> String {
    format!(
        "{dispatch}.{}-{}.{RECORD_EXTENSION}",
        owner.pid, owner.start_time
    )
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JournalError {
    let path = path.to_owned();
    move |source| JournalError::Io {
        action,
        path,
        source,
    }
}

/// Like [`io_error`], but a missing file means another process adopted or closed the record first.
fn vanished_or(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JournalError {
    let path = path.to_owned();
    move |source| {
        if source.kind() == io::ErrorKind::NotFound {
            JournalError::Vanished { path }
        } else {
            JournalError::Io {
                action,
                path,
                source,
            }
        }
    }
}

/// Makes a directory's entries (a created, renamed or removed file) durable.
fn sync_directory(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(io_error("sync the directory", dir))
}

/// The journal directory, `<state>/journal`.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
    owner: Owner,
}

impl Journal {
    /// Opens the journal in `dir`, creating it (0700) if needed; an existing directory is narrowed to
    /// 0700 too.
    pub fn open(dir: &Path) -> Result<Journal> {
        let owner = Owner::current()?;
        crate::private_files::create_dir_all(dir).map_err(|error| JournalError::Io {
            action: "create the journal directory",
            path: error.path,
            source: error.source,
        })?;
        if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            sync_directory(parent)?;
        }
        Ok(Journal {
            dir: dir.to_owned(),
            owner,
        })
    }

    /// Starts a new record for `dispatch`, owned by this process. The record is on disk (fsync'd,
    /// directory included) when this returns. Refuses a dispatch that already has a record.
    pub fn begin(&self, dispatch: DispatchId) -> Result<JournalEntry> {
        let prefix = format!("{dispatch}.");
        let listing = fs::read_dir(&self.dir).map_err(io_error("list", &self.dir))?;
        for entry in listing {
            let entry = entry.map_err(io_error("list", &self.dir))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                return Err(JournalError::AlreadyJournaled {
                    dispatch,
                    path: entry.path(),
                });
            }
        }
        self.create(dispatch, self.owner)
    }

    fn create(&self, dispatch: DispatchId, owner: Owner) -> Result<JournalEntry> {
        let path = self.dir.join(record_name(dispatch, owner));
        let file = match crate::private_files::options()
            .append(true)
            .create_new(true)
            .open(&path)
        {
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                return Err(JournalError::AlreadyJournaled { dispatch, path });
            }
            opened => opened.map_err(io_error("create", &path))?,
        };
        crate::private_files::seal(&file)
            .map_err(io_error("restrict the permissions of", &path))?;
        let mut entry = JournalEntry {
            dispatch,
            path,
            file,
            outstanding: Vec::new(),
            salvage: None,
            poisoned: false,
        };
        entry.append(Operation::Begin { dispatch })?;
        sync_directory(&self.dir)?;
        Ok(entry)
    }

    /// Every record on disk, sorted by dispatch id; unreadable ones are in [`Scan::problems`].
    /// Files that are not `*.jsonl` are not the journal's and are left alone; a record closed while
    /// the directory is read is simply absent.
    pub fn records(&self) -> Result<Scan> {
        let mut scan = Scan::default();
        let listing = fs::read_dir(&self.dir).map_err(io_error("list", &self.dir))?;
        for entry in listing {
            let path = entry.map_err(io_error("list", &self.dir))?.path();
            if path
                .extension()
                .is_none_or(|extension| extension != RECORD_EXTENSION)
            {
                continue;
            }
            let named = path
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(parse_record_name);
            let Some((dispatch, owner)) = named else {
                scan.problems.push(JournalError::RecordName { path });
                continue;
            };
            match fs::read(&path) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(source) => scan.problems.push(JournalError::Io {
                    action: "read",
                    path,
                    source,
                }),
                Ok(bytes) => match replay(&path, dispatch, &bytes) {
                    Ok(replayed) => scan.records.push(Record {
                        dispatch,
                        owner,
                        resources: replayed.resources,
                        salvage: replayed.salvage,
                        path,
                    }),
                    Err(problem) => scan.problems.push(problem),
                },
            }
        }
        scan.records
            .sort_by(|left, right| (left.dispatch, &left.path).cmp(&(right.dispatch, &right.path)));
        Ok(scan)
    }

    /// The records whose owner is not alive, plus every problem [`Journal::records`] found.
    pub fn orphans(&self) -> Result<Scan> {
        let mut scan = self.records()?;
        scan.records.retain(|record| !record.owner.is_alive());
        Ok(scan)
    }

    /// Takes over an orphan so this process can clean up what it lists. Refuses when the owner is
    /// alive ([`JournalError::OwnerAlive`]), when another process adopted or closed it first
    /// ([`JournalError::Vanished`]), and when this process already holds a record for the dispatch
    /// ([`JournalError::AlreadyJournaled`]). The outstanding resources are read from disk, not taken
    /// from `record`, which may be stale; a torn final line is cut off so the record stays readable.
    pub fn adopt(&self, record: &Record) -> Result<JournalEntry> {
        let from = self.dir.join(record_name(record.dispatch, record.owner));
        if record.owner.is_alive() {
            return Err(JournalError::OwnerAlive {
                path: from,
                owner: record.owner,
            });
        }
        let to = self.dir.join(record_name(record.dispatch, self.owner));
        if to.exists() {
            return Err(JournalError::AlreadyJournaled {
                dispatch: record.dispatch,
                path: to,
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&from)
            .map_err(vanished_or("open", &from))?;
        let file_owner = std::os::unix::fs::MetadataExt::uid(
            &file
                .metadata()
                .map_err(io_error("read the owner of", &from))?,
        );
        let me = rustix::process::geteuid().as_raw();
        if file_owner != me {
            // Only this account writes its journal: a record of another's is not acted on.
            return Err(JournalError::Foreign {
                path: from,
                owner: file_owner,
                uid: me,
            });
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(io_error("read", &from))?;
        let replayed = replay(&from, record.dispatch, &bytes)?;
        // The dead owner never writes again and only one rename of `from` can succeed, so what was
        // just read is the record this process now owns.
        fs::rename(&from, &to).map_err(vanished_or("rename", &from))?;
        sync_directory(&self.dir)?;
        if replayed.complete_len < bytes.len() as u64 {
            file.set_len(replayed.complete_len)
                .and_then(|()| file.sync_data())
                .map_err(io_error("cut the torn final line of", &to))?;
        }
        let mut entry = JournalEntry {
            dispatch: record.dispatch,
            path: to,
            file,
            outstanding: replayed.resources,
            salvage: replayed.salvage,
            poisoned: false,
        };
        if replayed.complete_len == 0 {
            // The owner died inside `begin`, before its first line was whole.
            entry.append(Operation::Begin {
                dispatch: record.dispatch,
            })?;
        }
        Ok(entry)
    }
}

/// The exclusive handle on one record, held by its owner. Dropping it leaves the record on disk
/// (that is what a crash does too); [`JournalEntry::close`] removes it once nothing is outstanding.
#[derive(Debug)]
pub struct JournalEntry {
    dispatch: DispatchId,
    path: PathBuf,
    file: File,
    outstanding: Vec<Resource>,
    salvage: Option<SalvagePlan>,
    /// Set while a line is being written and left set if writing or syncing it failed: the file may
    /// end in a partial line, and appending after it would corrupt the record.
    poisoned: bool,
}

impl JournalEntry {
    /// The dispatch this record is about.
    pub fn dispatch(&self) -> DispatchId {
        self.dispatch
    }

    /// Records the intent to create `resource`; durable when this returns, so create it only after.
    /// Intending a resource that is already outstanding changes nothing.
    pub fn intend(&mut self, resource: Resource) -> Result<()> {
        if self.outstanding.contains(&resource) {
            return Ok(());
        }
        self.append(Operation::Intend {
            resource: resource.clone(),
        })?;
        self.outstanding.push(resource);
        Ok(())
    }

    /// Records that `resource` is gone; call it after removing the resource. Releasing something
    /// that is not outstanding changes nothing.
    pub fn released(&mut self, resource: &Resource) -> Result<()> {
        if !self.outstanding.contains(resource) {
            return Ok(());
        }
        self.append(Operation::Release {
            resource: resource.clone(),
        })?;
        self.outstanding.retain(|held| held != resource);
        Ok(())
    }

    /// Intended and not yet released, in creation order.
    pub fn outstanding(&self) -> &[Resource] {
        &self.outstanding
    }

    /// Records what salvaging the agent's work needs; durable when this returns.
    pub fn plan_salvage(&mut self, plan: SalvagePlan) -> Result<()> {
        self.append(Operation::Salvage {
            salvage: plan.clone(),
        })?;
        self.salvage = Some(plan);
        Ok(())
    }

    /// What salvaging the agent's work needs, once its agent started.
    pub fn salvage_plan(&self) -> Option<&SalvagePlan> {
        self.salvage.as_ref()
    }

    /// Removes the record. Refuses, naming what is left, while resources are outstanding; the
    /// record then stays on disk and becomes an orphan when this process exits.
    pub fn close(self) -> Result<()> {
        if !self.outstanding.is_empty() {
            return Err(JournalError::Outstanding {
                path: self.path,
                resources: self.outstanding,
            });
        }
        fs::remove_file(&self.path).map_err(io_error("remove", &self.path))?;
        match self.path.parent() {
            Some(dir) => sync_directory(dir),
            None => Ok(()),
        }
    }

    fn append(&mut self, operation: Operation) -> Result<()> {
        if self.poisoned {
            return Err(JournalError::Poisoned {
                path: self.path.clone(),
            });
        }
        let line = Line {
            v: JOURNAL_SCHEMA_VERSION,
            operation,
        };
        let mut bytes = serde_json::to_vec(&line).map_err(|source| JournalError::Encode {
            path: self.path.clone(),
            source,
        })?;
        bytes.push(b'\n');
        self.poisoned = true;
        self.file
            .write_all(&bytes)
            .map_err(io_error("append to", &self.path))?;
        self.file
            .sync_data()
            .map_err(io_error("sync", &self.path))?;
        self.poisoned = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
