//! Measures, from inside a sandbox, what the sandbox really allows, so tests check hardening by effect.
//!
//! `stet probe` runs in the `FROM scratch` sandbox image where there is no shell and no other tool: it
//! reads its own identity and capabilities from `/proc`, tries to write where an agent would try to, lists
//! its mounts, looks for a Docker socket, and on request tries the network, forks, allocates memory and
//! scans the process table for a secret. It prints one JSON object; the caller decides what is acceptable.
//! It never connects anywhere it was not told to on the command line.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;

/// How long one `--connect` attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Granularity of `--allocate-mb`: one chunk per MiB.
const MIB: usize = 1024 * 1024;

/// Every this many bytes one byte is written, so each page is touched whatever the page size.
const TOUCH_STRIDE: usize = 4096;

/// Progress of `--allocate-mb` is printed to stderr every this many MiB.
const ALLOCATE_PROGRESS_MB: u64 = 16;

/// Where the Docker socket is found when someone mounts it.
const DOCKER_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];

/// The sandbox user's home when `$HOME` is not set.
const DEFAULT_HOME: &str = "/home/stet";

/// The probe's errors.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ProbeError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no `{field}:` line")]
    MissingField { path: PathBuf, field: String },
    #[error("{path}: field `{field}` has an unexpected value {value:?}")]
    BadField {
        path: PathBuf,
        field: String,
        value: String,
    },
    #[error("{path}: line {line} is not `source target fstype options dump pass`: {text:?}")]
    BadMountLine {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("writing the probe report: {0}")]
    Write(#[source] std::io::Error),
    #[error("encoding the probe report as JSON: {0}")]
    Encode(#[source] serde_json::Error),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ProbeError>;

/// What to try besides the passive checks; all of it comes from the command line, which clap parses
/// straight into this (the field's help is the option's).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProbeRequest {
    /// Addresses to try a TCP connection to, each at most [`CONNECT_TIMEOUT`].
    #[arg(
        long,
        value_name = "IP:PORT",
        help = "Try a TCP connection to this IP:PORT (2 s timeout). Repeatable."
    )]
    pub connect: Vec<SocketAddr>,
    /// Start up to this many child processes and report how many started.
    #[arg(
        long,
        value_name = "N",
        help = "Start up to N child processes, hold them all, and report how many started."
    )]
    pub fork_up_to: Option<u32>,
    /// Allocate and touch this many MiB.
    #[arg(
        long,
        value_name = "N",
        help = "Allocate and write N MiB, printing progress to standard error."
    )]
    pub allocate_mb: Option<u64>,
    /// Write this many MiB into `/workspace`, in files of `fill_piece_mb` each.
    #[arg(
        long,
        value_name = "N",
        help = "Write N MiB into /workspace (files of --fill-piece-mb each), flushed as it goes."
    )]
    pub fill_mb: Option<u64>,
    /// The size of each file `fill_mb` writes (a piece as large as the fill is one file).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        help = "The size of each file --fill-mb writes."
    )]
    pub fill_piece_mb: u64,
    /// Names of environment variables whose values are searched for in every process's command line.
    #[arg(
        long = "find-env-in-cmdlines",
        value_name = "NAME",
        help = "Report which processes carry the value of the environment variable NAME in their \
            command line (the value is read from the environment, never passed as an argument). \
            Repeatable."
    )]
    pub find_env_in_cmdlines: Vec<String>,
    /// Report the probe's whole environment (to show what a sandbox's process is given).
    #[arg(long, help = "Report the probe's whole environment.")]
    pub environment: bool,
}

/// The one JSON object `stet probe` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// `CapEff` as the kernel prints it (hex).
    pub cap_eff: String,
    /// `CapBnd` as the kernel prints it (hex): what could ever be regained.
    pub cap_bnd: String,
    /// Inheritable, permitted, effective, bounding and ambient sets are all empty.
    pub caps_all_dropped: bool,
    /// `NoNewPrivs` is set.
    pub no_new_privs: bool,
    /// A file could be created in `/`.
    pub root_writable: bool,
    /// A file could be created in `/tmp`.
    pub tmp_writable: bool,
    /// A file could be created in `$HOME` (or `/home/stet`).
    pub home_writable: bool,
    /// A file could be created in `/workspace`.
    pub workspace_writable: bool,
    /// `/proc/self/mounts`, unescaped.
    pub mounts: Vec<Mount>,
    /// `/var/run/docker.sock` or `/run/docker.sock` exists.
    pub docker_socket_present: bool,
    /// One entry per `--connect`.
    pub connect: Vec<ConnectOutcome>,
    /// Present with `--fork-up-to`.
    pub forks: Option<ForkOutcome>,
    /// Present with `--allocate-mb` when the process survived.
    pub allocate: Option<AllocateOutcome>,
    /// Present with `--fill-mb` when the process survived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<FillOutcome>,
    /// One entry per `--find-env-in-cmdlines`.
    pub cmdlines_containing: Vec<CmdlineMatches>,
    /// `NAME=value` for every variable, sorted; present with `--environment`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Vec<String>>,
}

/// One line of `/proc/self/mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// What is mounted (a device, `tmpfs`, `overlay`, …).
    pub source: String,
    /// Where it is mounted.
    pub target: String,
    /// The file system's type.
    pub fstype: String,
    /// The mount options, comma-separated (`ro`, `nosuid`, …).
    pub options: String,
}

/// One `--connect` attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectOutcome {
    /// The address tried.
    pub address: String,
    /// Whether the connection was made.
    pub ok: bool,
    /// Why not, when it was not.
    pub error: Option<String>,
}

/// How many children `--fork-up-to` could start, and why it stopped early if it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForkOutcome {
    /// How many children started.
    pub started: u32,
    /// Why the next one could not, when fewer than asked started.
    pub error: Option<String>,
}

/// How much `--allocate-mb` allocated and touched, and why it stopped early if it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllocateOutcome {
    /// How many MiB were allocated and written.
    pub allocated_mb: u64,
    /// Why the next could not be, when fewer than asked were.
    pub error: Option<String>,
}

/// How much `--fill-mb` wrote into `/workspace`, and why it stopped early if it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FillOutcome {
    /// How many MiB reached the disk.
    pub written_mb: u64,
    /// How many files they went into.
    pub files: u64,
    /// Why writing stopped, when it stopped short.
    pub error: Option<String>,
}

/// Which processes carry the value of one environment variable in their command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CmdlineMatches {
    /// The variable's name (never its value).
    pub name: String,
    /// Our own environment holds a non-empty value for it.
    pub env_has_value: bool,
    /// Pids whose `/proc/<pid>/cmdline` contains the value.
    pub pids: Vec<u32>,
}

/// Identity and privilege fields of `/proc/self/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// Effective uid (second column of `Uid:`).
    pub uid: u32,
    /// Effective gid (second column of `Gid:`).
    pub gid: u32,
    /// The inheritable capability set, in hex (`CapInh:`).
    pub cap_inh: String,
    /// The permitted set (`CapPrm:`).
    pub cap_prm: String,
    /// The effective set (`CapEff:`).
    pub cap_eff: String,
    /// The bounding set (`CapBnd:`).
    pub cap_bnd: String,
    /// Absent on kernels before 4.3, which have no ambient set.
    pub cap_amb: Option<String>,
    /// Whether `NoNewPrivs:` is set: no exec can gain privileges.
    pub no_new_privs: bool,
}

impl ProcStatus {
    /// True when no capability set holds anything.
    pub fn caps_all_dropped(&self) -> Result<bool> {
        let mut sets = vec![
            ("CapInh", &self.cap_inh),
            ("CapPrm", &self.cap_prm),
            ("CapEff", &self.cap_eff),
            ("CapBnd", &self.cap_bnd),
        ];
        if let Some(amb) = &self.cap_amb {
            sets.push(("CapAmb", amb));
        }
        for (field, value) in sets {
            if parse_cap_hex(field, value)? != 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Runs the probe and returns its report. With `--allocate-mb` past the memory limit the process is
/// expected to be killed here (exit 137 for the caller).
pub fn run(request: &ProbeRequest) -> Result<ProbeReport> {
    let status_path = Path::new("/proc/self/status");
    let status = parse_status(&read_text(status_path)?, status_path)?;
    let mounts_path = Path::new("/proc/self/mounts");
    let mounts = parse_mounts(&read_text(mounts_path)?, mounts_path)?;
    let home = std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_HOME), PathBuf::from);
    let allocate = request
        .allocate_mb
        .map(|mb| allocate_and_touch(mb, &mut std::io::stderr()));
    let fill = request
        .fill_mb
        .map(|mb| fill(Path::new("/workspace"), mb, request.fill_piece_mb.max(1)));
    Ok(ProbeReport {
        uid: status.uid,
        gid: status.gid,
        caps_all_dropped: status.caps_all_dropped()?,
        cap_eff: status.cap_eff,
        cap_bnd: status.cap_bnd,
        no_new_privs: status.no_new_privs,
        root_writable: can_create_file_in(Path::new("/")),
        tmp_writable: can_create_file_in(Path::new("/tmp")),
        home_writable: can_create_file_in(&home),
        workspace_writable: can_create_file_in(Path::new("/workspace")),
        mounts,
        docker_socket_present: DOCKER_SOCKETS
            .iter()
            .any(|path| fs::symlink_metadata(path).is_ok()),
        connect: request
            .connect
            .iter()
            .map(|addr| try_connect(*addr))
            .collect(),
        forks: request.fork_up_to.map(fork_up_to),
        allocate,
        fill,
        cmdlines_containing: request
            .find_env_in_cmdlines
            .iter()
            .map(|name| find_env_in_cmdlines(name, Path::new("/proc")))
            .collect(),
        environment: request.environment.then(|| {
            let mut variables: Vec<String> = std::env::vars_os()
                .map(|(name, value)| {
                    format!("{}={}", name.to_string_lossy(), value.to_string_lossy())
                })
                .collect();
            variables.sort();
            variables
        }),
    })
}

/// Writes the report as one JSON line.
pub fn write_report(report: &ProbeReport, out: &mut impl Write) -> Result<()> {
    let mut line = serde_json::to_vec(report).map_err(ProbeError::Encode)?;
    line.push(b'\n');
    out.write_all(&line).map_err(ProbeError::Write)?;
    out.flush().map_err(ProbeError::Write)
}

/// The `--emit-line-mb` mode: one line of `megabytes` MiB of bytes that are not UTF-8.
pub fn emit_line(megabytes: usize, output: &mut impl Write) -> Result<()> {
    let block: Vec<u8> = (0..1024 * 1024).map(|i| 0x80 | (i % 0x7f) as u8).collect();
    for _ in 0..megabytes {
        output.write_all(&block).map_err(ProbeError::Write)?;
    }
    output.write_all(b"\n").map_err(ProbeError::Write)?;
    output.flush().map_err(ProbeError::Write)
}

/// The `--hold` mode of the children started by `--fork-up-to`: block until standard input closes.
pub fn hold(input: &mut impl Read) -> Result<()> {
    let mut sink = [0u8; 512];
    loop {
        match input.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(ProbeError::Read {
                    path: PathBuf::from("<stdin>"),
                    source,
                });
            }
        }
    }
}

fn read_text(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| ProbeError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses the fields stet cares about from the text of `/proc/<pid>/status`.
pub fn parse_status(text: &str, path: &Path) -> Result<ProcStatus> {
    let field = |name: &str| -> Result<&str> {
        status_field(text, name).ok_or_else(|| ProbeError::MissingField {
            path: path.to_path_buf(),
            field: name.to_owned(),
        })
    };
    let bad = |name: &str, value: &str| ProbeError::BadField {
        path: path.to_path_buf(),
        field: name.to_owned(),
        value: value.to_owned(),
    };
    let effective_id = |name: &str| -> Result<u32> {
        let value = field(name)?;
        value
            .split_whitespace()
            .nth(1)
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| bad(name, value))
    };
    let cap = |name: &str| -> Result<String> {
        let value = field(name)?;
        parse_cap_hex(name, value).map_err(|_| bad(name, value))?;
        Ok(value.to_owned())
    };
    let no_new_privs = match status_field(text, "NoNewPrivs") {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => return Err(bad("NoNewPrivs", other)),
    };
    let cap_amb = match status_field(text, "CapAmb") {
        None => None,
        Some(_) => Some(cap("CapAmb")?),
    };
    Ok(ProcStatus {
        uid: effective_id("Uid")?,
        gid: effective_id("Gid")?,
        cap_inh: cap("CapInh")?,
        cap_prm: cap("CapPrm")?,
        cap_eff: cap("CapEff")?,
        cap_bnd: cap("CapBnd")?,
        cap_amb,
        no_new_privs,
    })
}

/// The trimmed value of the `name:` line of a `/proc/<pid>/status` text.
fn status_field<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// Parses a capability mask as the kernel prints it (16 hex digits, no prefix).
pub fn parse_cap_hex(field: &str, value: &str) -> Result<u64> {
    let bad = || ProbeError::BadField {
        path: PathBuf::from("/proc/self/status"),
        field: field.to_owned(),
        value: value.to_owned(),
    };
    if value.is_empty() || value.len() > 16 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(value, 16).map_err(|_| bad())
}

/// Parses the text of `/proc/<pid>/mounts`, undoing the kernel's octal escapes (`\040` for a space).
pub fn parse_mounts(text: &str, path: &Path) -> Result<Vec<Mount>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [source, target, fstype, options, ..] => Ok(Mount {
                    source: unescape_mount_field(source),
                    target: unescape_mount_field(target),
                    fstype: unescape_mount_field(fstype),
                    options: unescape_mount_field(options),
                }),
                _ => Err(ProbeError::BadMountLine {
                    path: path.to_path_buf(),
                    line: index + 1,
                    text: line.to_owned(),
                }),
            }
        })
        .collect()
}

/// Turns every `\ooo` (three octal digits) into its byte; anything else is kept as it is.
pub fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match escape {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                match u8::try_from(value) {
                    Ok(byte) => out.push(byte),
                    Err(_) => out.extend_from_slice(&bytes[i..i + 4]),
                }
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Tries to create (and then removes) a fresh file in `dir`.
fn can_create_file_in(dir: &Path) -> bool {
    let path = dir.join(format!(".stet-probe-{}", std::process::id()));
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(_) => {
            // The answer is already known; a file left behind in a disposable sandbox harms no one.
            let _ = fs::remove_file(&path);
            true
        }
        Err(_) => false,
    }
}

fn try_connect(address: SocketAddr) -> ConnectOutcome {
    match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
        Ok(_) => ConnectOutcome {
            address: address.to_string(),
            ok: true,
            error: None,
        },
        Err(err) => ConnectOutcome {
            address: address.to_string(),
            ok: false,
            error: Some(err.to_string()),
        },
    }
}

/// Starts up to `limit` `probe --hold` children, keeping them all alive while counting, then closes
/// their standard input and reaps every one of them.
fn fork_up_to(limit: u32) -> ForkOutcome {
    let mut children: Vec<Child> = Vec::new();
    let mut error = None;
    for _ in 0..limit {
        let spawned = Command::new("/proc/self/exe")
            .args(["probe", "--hold"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => children.push(child),
            Err(err) => {
                error = Some(err.to_string());
                break;
            }
        }
    }
    let started = u32::try_from(children.len()).unwrap_or(u32::MAX);
    for child in &mut children {
        drop(child.stdin.take());
    }
    for child in &mut children {
        if let Err(err) = child.wait() {
            error.get_or_insert_with(|| format!("reaping child {}: {err}", child.id()));
        }
    }
    ForkOutcome { started, error }
}

/// Allocates `mb` MiB one MiB at a time and writes every page, so the memory is really used; progress
/// goes to `progress` as it happens, so a caller whose probe is killed still sees how far it got.
/// Writes `mb` MiB into `dir` as files `stet-fill-<n>` of `piece_mb` MiB each, flushed to disk as
/// it goes; stops at the first error. A write past the sandbox's file-size limit kills the process
/// (SIGXFSZ): that is the answer.
fn fill(dir: &Path, mb: u64, piece_mb: u64) -> FillOutcome {
    let chunk = vec![0x5au8; MIB];
    let mut outcome = FillOutcome {
        written_mb: 0,
        files: 0,
        error: None,
    };
    while outcome.written_mb < mb {
        let path = dir.join(format!("stet-fill-{}", outcome.files));
        let mut file = match fs::File::create(&path) {
            Ok(file) => file,
            Err(error) => {
                outcome.error = Some(format!("{}: {error}", path.display()));
                return outcome;
            }
        };
        outcome.files += 1;
        for _ in 0..piece_mb.min(mb - outcome.written_mb) {
            if let Err(error) = file.write_all(&chunk).and_then(|()| file.sync_data()) {
                outcome.error = Some(format!("{}: {error}", path.display()));
                return outcome;
            }
            outcome.written_mb += 1;
        }
    }
    outcome
}

fn allocate_and_touch(mb: u64, progress: &mut impl Write) -> AllocateOutcome {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut allocated_mb = 0;
    let mut error = None;
    while allocated_mb < mb {
        let mut chunk: Vec<u8> = Vec::new();
        if let Err(err) = chunk.try_reserve_exact(MIB) {
            error = Some(format!("allocating MiB number {}: {err}", allocated_mb + 1));
            break;
        }
        chunk.resize(MIB, 0);
        for byte in chunk.iter_mut().step_by(TOUCH_STRIDE) {
            *byte = 0xa5;
        }
        chunks.push(std::hint::black_box(chunk));
        allocated_mb += 1;
        if allocated_mb % ALLOCATE_PROGRESS_MB == 0 || allocated_mb == mb {
            // Progress is advisory; a closed stderr must not change the measurement.
            let _ = writeln!(
                progress,
                "stet probe: allocated and touched {allocated_mb} MiB"
            );
        }
    }
    std::hint::black_box(&chunks);
    AllocateOutcome {
        allocated_mb,
        error,
    }
}

/// Reads the value of the environment variable `name` and lists the processes under `proc_root` whose
/// command line contains it. An unset or empty variable matches nothing.
pub fn find_env_in_cmdlines(name: &str, proc_root: &Path) -> CmdlineMatches {
    let value = std::env::var_os(name).filter(|value| !value.is_empty());
    let pids = value
        .as_deref()
        .map(|value| pids_with_cmdline_containing(proc_root, value))
        .unwrap_or_default();
    CmdlineMatches {
        name: name.to_owned(),
        env_has_value: value.is_some(),
        pids,
    }
}

fn pids_with_cmdline_containing(proc_root: &Path, value: &OsStr) -> Vec<u32> {
    let needle = value.as_bytes();
    let Ok(entries) = fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A process may exit between listing and reading; it then matches nothing.
            fs::read(proc_root.join(pid.to_string()).join("cmdline"))
                .is_ok_and(|cmdline| contains(&cmdline, needle))
        })
        .collect();
    pids.sort_unstable();
    pids
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

#[cfg(test)]
mod tests;
