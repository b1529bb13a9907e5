//! Builds the offline sandbox image from the `stet-sandbox` executable, because the engine may have no
//! registry.
//!
//! The image is `FROM scratch` in spirit: the executable at `/usr/local/bin/stet` (the sandbox side
//! only: the scripted agent, the container's main process and the probe, see the stet-sandbox crate), the shared libraries
//! `ldd` names (the dynamic loader at its exact path), a two-line `/etc/passwd` and `/etc/group`, and the
//! empty directories a sandbox mounts over. It goes into the engine as a hand-made `docker save` archive
//! through `POST /images/load`: that way stet writes the image configuration itself (user, labels,
//! working directory), and the same binary gives byte-identical archives and so the same image ID on every
//! machine. The image is tagged `stet-sandbox:<12 hex of the binary's sha256>` and labelled with the full
//! hash, so building twice from the same binary finds the first image instead of loading a second one.
//! How an engine finds, tags or loads it is the runtime's (`RuntimeSetup::offline_image`; for Docker
//! `runtime/docker/offline_image.rs`); this module names no engine's API.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Repository part of the sandbox image's tag.
pub const REPOSITORY: &str = "stet-sandbox";

/// Label holding the full sha256 (hex) of the stet executable inside the image.
pub const BINARY_SHA256_LABEL: &str = "dev.stet.binary-sha256";

/// Where the executable lives inside the image.
pub const BINARY_PATH: &str = "/usr/local/bin/stet";

/// The file name of the executable the image carries; it is installed beside `stet` (a build puts
/// both in one `target/<profile>/`, `cargo install --path .` both in one `bin/`).
pub const SANDBOX_EXECUTABLE: &str = "stet-sandbox";

/// The sandbox user and group the image runs as unless told otherwise.
pub const SANDBOX_UID: u32 = 65532;
/// See [`SANDBOX_UID`].
pub const SANDBOX_GID: u32 = 65532;

/// How many hex digits of the binary's hash go into the tag.
const TAG_HEX_LEN: usize = 12;

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
    stet:x:65532:65532::/home/stet:/usr/local/bin/stet\n";
const GROUP: &str = "root:x:0:\nstet:x:65532:\n";

/// Errors of building and loading the sandbox image.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ImageError {
    #[error("finding the running stet executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error(
        "{} is not there: the sandbox image is built from the stet-sandbox executable beside {}; build or install both executables (`cargo build` builds both, `cargo install --path .` installs both)",
        .beside.display(),
        .running.display()
    )]
    NoSandboxExecutable { running: PathBuf, beside: PathBuf },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{binary} is {what}, not an executable for the engine's platform (linux/{engine_arch}): give --binary the stet-sandbox executable built for it (`cargo build` puts it beside stet)"
    )]
    NotAnExecutable {
        binary: PathBuf,
        what: String,
        engine_arch: String,
    },
    #[error("running `ldd {binary}`: {source}")]
    LddSpawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`ldd {binary}` failed ({status}): {stderr}")]
    LddFailed {
        binary: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error(
        "{binary} needs the shared library {library}, which ldd reports as not found; \
         install it or build a static stet"
    )]
    LibraryNotFound { binary: PathBuf, library: String },
    #[error("`ldd {binary}` printed a line stet does not understand: {line:?}")]
    UnexpectedLddLine { binary: PathBuf, line: String },
    #[error("rootfs for {binary}: {path} is needed both as a file and as a directory")]
    PathConflict { binary: PathBuf, path: String },
    #[error("writing the tar entry {path}: {source}")]
    Tar {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding the image configuration for {tag}: {source}")]
    Config {
        tag: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{engine}: {action} {image}: {source}")]
    Engine {
        engine: &'static str,
        action: &'static str,
        image: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{engine} loaded {tag} but reports no ID for it")]
    NoImageId { engine: &'static str, tag: String },
    #[error("building the rootfs of {binary} stopped: {source}")]
    Join {
        binary: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ImageError>;

/// A sandbox image present in the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxImage {
    /// The immutable reference stet runs by: `sha256:<64 hex>`.
    pub id: String,
    /// `stet-sandbox:<first 12 hex of binary_sha256>`.
    pub tag: String,
    /// Full sha256 (hex) of the stet executable inside.
    pub binary_sha256: String,
}

/// Where the `stet-sandbox` beside the executable `running` is, whether or not it is there.
pub fn sandbox_executable_beside(running: &Path) -> PathBuf {
    running.with_file_name(SANDBOX_EXECUTABLE)
}

/// The `stet-sandbox` beside the running executable, which must be there: what the offline image
/// carries.
pub fn sandbox_executable() -> Result<PathBuf> {
    let running = std::env::current_exe().map_err(ImageError::CurrentExe)?;
    let beside = sandbox_executable_beside(&running);
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(ImageError::NoSandboxExecutable { running, beside })
    }
}

/// The tag an image built from a binary with this hash carries.
pub fn tag_for(binary_sha256: &str) -> String {
    let short = binary_sha256.get(..TAG_HEX_LEN).unwrap_or(binary_sha256);
    format!("{REPOSITORY}:{short}")
}

/// The contents of the stet-sandbox executable `binary` and their sha256 (hex), read on a worker
/// thread: what names the offline image (its label and tag) before any engine is asked.
pub async fn read_binary(binary: &Path) -> Result<(Vec<u8>, String)> {
    let path = binary.to_path_buf();
    let contents = tokio::task::spawn_blocking(move || read(&path))
        .await
        .map_err(|source| ImageError::Join {
            binary: binary.to_path_buf(),
            source,
        })??;
    let binary_sha256 = hex(&Sha256::digest(&contents));
    Ok((contents, binary_sha256))
}

/// The `docker save` archive of the offline image of `binary` (whose `contents` and hash
/// [`read_binary`] gave), tagged `tag`, assembled on a worker thread: what an engine loads when it
/// has no image labelled with the hash yet.
pub async fn archive(
    binary: &Path,
    contents: Vec<u8>,
    binary_sha256: &str,
    tag: &str,
) -> Result<Vec<u8>> {
    let path = binary.to_path_buf();
    let archive_tag = tag.to_owned();
    let archive_sha = binary_sha256.to_owned();
    tokio::task::spawn_blocking(move || {
        let layer = rootfs_tar_with(&path, contents)?;
        docker_save_archive(&layer, &archive_sha, &archive_tag)
    })
    .await
    .map_err(|source| ImageError::Join {
        binary: binary.to_path_buf(),
        source,
    })?
}

/// The sandbox image's filesystem as a deterministic tar: sorted entries, mtime 0, owner root (except the
/// sandbox user's home), the executable at [`BINARY_PATH`] and every library `ldd` names at its path.
pub fn rootfs_tar(binary: &Path) -> Result<Vec<u8>> {
    let contents = read(binary)?;
    rootfs_tar_with(binary, contents)
}

fn rootfs_tar_with(binary: &Path, contents: Vec<u8>) -> Result<Vec<u8>> {
    let mut tree = Tree::new(binary);
    for (dir, mode) in [
        ("etc", 0o755),
        ("proc", 0o555),
        ("dev", 0o755),
        ("tmp", 0o1777),
        ("home", 0o755),
        ("workspace", 0o755),
        ("outputs", 0o755),
    ] {
        tree.dir(dir, mode, 0, 0)?;
    }
    tree.dir("home/stet", 0o755, SANDBOX_UID, SANDBOX_GID)?;
    tree.file("etc/passwd", PASSWD.as_bytes().to_vec(), 0o644)?;
    tree.file("etc/group", GROUP.as_bytes().to_vec(), 0o644)?;
    tree.file(relative(BINARY_PATH), contents, 0o755)?;
    for library in linked_libraries(binary)? {
        let bytes = read(&library)?;
        let inside = library.to_string_lossy();
        tree.file(relative(&inside), bytes, 0o755)?;
    }
    tree.into_tar()
}

fn relative(absolute: &str) -> &str {
    absolute.trim_start_matches('/')
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| ImageError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The shared libraries (the loader included) `ldd` reports for `binary`; none for a static binary.
fn linked_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let output =
        Command::new("ldd")
            .arg(binary)
            .output()
            .map_err(|source| ImageError::LddSpawn {
                binary: binary.to_path_buf(),
                source,
            })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("not a dynamic executable")
            || stdout.contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        return Err(ImageError::LddFailed {
            binary: binary.to_path_buf(),
            status: output.status,
            stderr: stderr.trim().to_owned(),
        });
    }
    parse_ldd(binary, &stdout)
}

/// Parses `ldd` output: `name => /path (0x…)`, `/path (0x…)` (the loader), `name (0x…)` (the vDSO,
/// which the kernel provides), `statically linked`, and `name => not found` (refused).
pub fn parse_ldd(binary: &Path, output: &str) -> Result<Vec<PathBuf>> {
    let unexpected = |line: &str| ImageError::UnexpectedLddLine {
        binary: binary.to_path_buf(),
        line: line.to_owned(),
    };
    let mut libraries = Vec::new();
    for line in output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
    {
        if line == "statically linked" {
            continue;
        }
        let (name, rest) = match line.split_once("=>") {
            Some((name, rest)) => (name.trim(), rest.trim()),
            None => ("", line),
        };
        if rest == "not found" || rest.starts_with("not found ") {
            return Err(ImageError::LibraryNotFound {
                binary: binary.to_path_buf(),
                library: name.to_owned(),
            });
        }
        let path = rest
            .rsplit_once(" (0x")
            .map_or(rest, |(path, _)| path)
            .trim();
        if !path.starts_with('/') {
            if name.is_empty() && !path.contains(char::is_whitespace) && !path.contains('/') {
                continue; // the vDSO: no file behind it
            }
            return Err(unexpected(line));
        }
        let path = PathBuf::from(path);
        if !path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        {
            return Err(unexpected(line));
        }
        if !libraries.contains(&path) {
            libraries.push(path);
        }
    }
    Ok(libraries)
}

enum Node {
    Dir { mode: u32, uid: u32, gid: u32 },
    File { mode: u32, data: Vec<u8> },
}

/// The rootfs being assembled, keyed by relative path so the tar comes out sorted.
struct Tree<'b> {
    binary: &'b Path,
    nodes: BTreeMap<String, Node>,
}

impl<'b> Tree<'b> {
    fn new(binary: &'b Path) -> Self {
        Self {
            binary,
            nodes: BTreeMap::new(),
        }
    }

    fn conflict(&self, path: &str) -> ImageError {
        ImageError::PathConflict {
            binary: self.binary.to_path_buf(),
            path: format!("/{path}"),
        }
    }

    fn dir(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> Result<()> {
        self.parents(path)?;
        match self.nodes.get(path) {
            Some(Node::File { .. }) => Err(self.conflict(path)),
            _ => {
                self.nodes
                    .insert(path.to_owned(), Node::Dir { mode, uid, gid });
                Ok(())
            }
        }
    }

    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<()> {
        self.parents(path)?;
        if matches!(self.nodes.get(path), Some(Node::Dir { .. })) {
            return Err(self.conflict(path));
        }
        self.nodes
            .insert(path.to_owned(), Node::File { mode, data });
        Ok(())
    }

    /// Adds missing parent directories (0755, root) of `path`.
    fn parents(&mut self, path: &str) -> Result<()> {
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            let parent = &path[..end + slash];
            match self.nodes.get(parent) {
                Some(Node::File { .. }) => return Err(self.conflict(parent)),
                Some(Node::Dir { .. }) => {}
                None => {
                    self.nodes.insert(
                        parent.to_owned(),
                        Node::Dir {
                            mode: 0o755,
                            uid: 0,
                            gid: 0,
                        },
                    );
                }
            }
            end += slash + 1;
        }
        Ok(())
    }

    fn into_tar(self) -> Result<Vec<u8>> {
        let mut entries = TarWriter::new();
        for (path, node) in self.nodes {
            match node {
                Node::Dir { mode, uid, gid } => entries.dir(&path, mode, uid, gid)?,
                Node::File { mode, data } => entries.file(&path, &data, mode)?,
            }
        }
        entries.finish()
    }
}

/// Writes tar entries with everything that varies between machines fixed: mtime 0, numeric owners.
struct TarWriter {
    builder: tar::Builder<Vec<u8>>,
}

impl TarWriter {
    fn new() -> Self {
        Self {
            builder: tar::Builder::new(Vec::new()),
        }
    }

    fn header(kind: tar::EntryType, mode: u32, uid: u32, gid: u32, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(u64::from(uid));
        header.set_gid(u64::from(gid));
        header.set_mtime(0);
        header.set_size(size);
        header
    }

    fn dir(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> Result<()> {
        let mut header = Self::header(tar::EntryType::Directory, mode, uid, gid, 0);
        let name = format!("{path}/");
        self.builder
            .append_data(&mut header, &name, std::io::empty())
            .map_err(|source| ImageError::Tar { path: name, source })
    }

    fn file(&mut self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let size = u64::try_from(data.len()).unwrap_or(u64::MAX);
        let mut header = Self::header(tar::EntryType::Regular, mode, 0, 0, size);
        self.builder
            .append_data(&mut header, path, data)
            .map_err(|source| ImageError::Tar {
                path: path.to_owned(),
                source,
            })
    }

    fn finish(self) -> Result<Vec<u8>> {
        self.builder.into_inner().map_err(|source| ImageError::Tar {
            path: "<end of archive>".to_owned(),
            source,
        })
    }
}

/// A `docker save` archive (manifest.json + config + one layer) holding `layer`, tagged `tag`.
fn docker_save_archive(layer: &[u8], binary_sha256: &str, tag: &str) -> Result<Vec<u8>> {
    let layer_hex = hex(&Sha256::digest(layer));
    let config =
        serde_json::to_vec(&image_config(&layer_hex, binary_sha256)).map_err(|source| {
            ImageError::Config {
                tag: tag.to_owned(),
                source,
            }
        })?;
    let config_name = format!("{}.json", hex(&Sha256::digest(&config)));
    let layer_name = format!("{layer_hex}/layer.tar");
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_name,
        "RepoTags": [tag],
        "Layers": [layer_name],
    }]))
    .map_err(|source| ImageError::Config {
        tag: tag.to_owned(),
        source,
    })?;
    let mut archive = TarWriter::new();
    archive.file(&config_name, &config, 0o644)?;
    archive.dir(&layer_hex, 0o755, 0, 0)?;
    archive.file(&layer_name, layer, 0o644)?;
    archive.file("manifest.json", &manifest, 0o644)?;
    archive.finish()
}

/// The image configuration (Docker image spec v1.2). Fixed creation time so it hashes the same everywhere.
fn image_config(layer_hex: &str, binary_sha256: &str) -> serde_json::Value {
    const EPOCH: &str = "1970-01-01T00:00:00Z";
    serde_json::json!({
        "architecture": docker_architecture(),
        "os": "linux",
        "created": EPOCH,
        "config": {
            "User": format!("{SANDBOX_UID}:{SANDBOX_GID}"),
            "Env": ["PATH=/usr/local/bin", "HOME=/home/stet"],
            "Cmd": [BINARY_PATH, "--help"],
            "WorkingDir": "/workspace",
            "Labels": { BINARY_SHA256_LABEL: binary_sha256 },
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_hex}")] },
        "history": [{ "created": EPOCH, "created_by": "stet image build-local" }],
    })
}

/// Refuses `contents` (the file `binary`) unless it is a 64-bit ELF executable (or position-
/// independent one) for `engine_arch`, the architecture the engine reports in Docker's words
/// (`amd64`, `arm64`; `x86_64` and `aarch64` are read as those): a text file, a script or an
/// executable for another machine would make an image whose every sandbox fails to start.
pub fn check_executable(binary: &Path, contents: &[u8], engine_arch: &str) -> Result<()> {
    let engine_arch = docker_name(engine_arch);
    let refuse = |what: String| {
        Err(ImageError::NotAnExecutable {
            binary: binary.to_owned(),
            what,
            engine_arch: engine_arch.to_owned(),
        })
    };
    let Some(header) = contents.get(..20) else {
        return refuse(format!("{} bytes long", contents.len()));
    };
    if !header.starts_with(b"\x7fELF") {
        return refuse(if header.starts_with(b"#!") {
            "a script".to_owned()
        } else if std::str::from_utf8(contents).is_ok() {
            "a text file".to_owned()
        } else {
            "not an ELF executable".to_owned()
        });
    }
    let half = |at: usize| match header[5] {
        2 => u16::from_be_bytes([header[at], header[at + 1]]),
        _ => u16::from_le_bytes([header[at], header[at + 1]]),
    };
    // e_type: 2 an executable, 3 a position-independent one (or a shared library).
    if !matches!(half(16), 2 | 3) {
        return refuse("an ELF file that is not an executable".to_owned());
    }
    let machine = match half(18) {
        0x3e => "amd64",
        0xb7 => "arm64",
        0x03 => "386",
        0x28 => "arm",
        0xf3 => "riscv64",
        0x15 => "ppc64le",
        0x16 => "s390x",
        _ => "an unknown machine",
    };
    let bits = match header[4] {
        1 => 32,
        _ => 64,
    };
    let expected_bits = if matches!(engine_arch, "386" | "arm") {
        32
    } else {
        64
    };
    if machine != engine_arch || bits != expected_bits {
        return refuse(format!("an ELF executable for {machine} ({bits}-bit)"));
    }
    Ok(())
}

/// Docker's name for an architecture the kernel's way (`uname -m`) or Docker's.
fn docker_name(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" | "i386" | "i686" => "386",
        other => other,
    }
}

/// Docker's name for the architecture stet was built for.
fn docker_architecture() -> &'static str {
    docker_name(std::env::consts::ARCH)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests;
