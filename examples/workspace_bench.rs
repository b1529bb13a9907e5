//! Measures workspace provisioning and the trusted import (docs/benchmarks.md) on a generated
//! repository of 50,000 files of about 1 KB in 320 directories, built once with the git CLI and cached:
//!
//! * `workspace_bench repo <cache>` builds the repository (if missing) and prints its path and HEAD;
//! * `workspace_bench materialize <cache> <destination> [uid]` materializes HEAD into `destination`
//!   (created empty if missing), handing it to `uid` (default: the invoking user);
//! * `workspace_bench edit <workspace> <n>` appends a line to `n` files spread over the workspace;
//! * `workspace_bench import <cache> <workspace>` imports the workspace against HEAD;
//! * `workspace_bench large <cache>` and `workspace_bench many <cache>` build (once) a repository of
//!   one 1 GiB file and one of 100,000 files of about 1 KB, and print its path;
//! * `workspace_bench checkout <repository> <destination>` materializes the HEAD of any repository
//!   within the default `[base]` limits, as a dispatch does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use stet_engine::git::import::{Identity, ImportLimits, ImportRequest, Imported, import};
use stet_engine::git::workspace::{BaseLimits, materialize, materialize_within};
use stet_engine::runtime::SandboxUser;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::TokenSanitizer;

const TOP_DIRECTORIES: usize = 20;
const SUBDIRECTORIES: usize = 16;
const FILES: usize = 50_000;

const WORDS: [&str; 16] = [
    "fn",
    "let",
    "match",
    "workspace",
    "commit",
    "tree",
    "blob",
    "index",
    "return",
    "Some",
    "None",
    "struct",
    "impl",
    "self",
    "error",
    "value",
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["repo", cache] => {
            let (repository, head) = ensure_repository(Path::new(cache))?;
            println!("{} {head}", repository.display());
        }
        ["materialize", cache, destination, rest @ ..] => {
            let (repository, head) = ensure_repository(Path::new(cache))?;
            let owner = match rest {
                [uid] => {
                    let uid = uid.parse()?;
                    SandboxUser { uid, gid: uid }
                }
                _ => SandboxUser::for_invoker(u32::MAX)?,
            };
            let destination = Path::new(destination);
            if !destination.exists() {
                std::fs::create_dir(destination)
                    .with_context(|| format!("creating {}", destination.display()))?;
            }
            let started = Instant::now();
            let done = materialize(&repository, &head, destination, owner)?;
            eprintln!(
                "materialized {} files, {} bytes in {:?}",
                done.files,
                done.bytes,
                started.elapsed()
            );
        }
        ["large", cache] => println!("{}", large_repository(Path::new(cache))?.display()),
        ["many", cache] => println!("{}", many_repository(Path::new(cache))?.display()),
        ["checkout", repository, destination] => {
            let repository = Path::new(repository);
            let head = Command::new("git")
                .arg("-C")
                .arg(repository)
                .args(["rev-parse", "HEAD"])
                .output()?;
            let head = CommitSha::parse(String::from_utf8(head.stdout)?.trim())?;
            let destination = Path::new(destination);
            if !destination.exists() {
                std::fs::create_dir(destination)?;
            }
            let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self")?);
            let owner = SandboxUser { uid: me, gid: me };
            let done = materialize_within(
                repository,
                &head,
                destination,
                owner,
                &BaseLimits::default(),
            )?;
            eprintln!("materialized {} files, {} bytes", done.files, done.bytes);
        }
        ["edit", workspace, count] => edit(Path::new(workspace), count.parse()?)?,
        ["import", cache, workspace] => {
            let (repository, head) = ensure_repository(Path::new(cache))?;
            let message = Arc::new(TokenSanitizer::new()?).sanitize("bench import");
            let identity = Identity {
                name: "stet bench".into(),
                email: "bench@stet.invalid".into(),
            };
            let started = Instant::now();
            let imported = import(&ImportRequest {
                repository: &repository,
                workspace: Path::new(workspace),
                parent: &head,
                identity: &identity,
                message: &message,
                limits: ImportLimits::default(),
            })?;
            let elapsed = started.elapsed();
            match imported {
                Imported::Committed { commit, diff, .. } => eprintln!(
                    "committed {commit}: {} files, +{} -{} in {elapsed:?}",
                    diff.files.len(),
                    diff.insertions,
                    diff.deletions
                ),
                Imported::Unchanged { .. } => eprintln!("unchanged in {elapsed:?}"),
            }
        }
        _ => bail!(
            "usage: workspace_bench repo <cache> | materialize <cache> <destination> [uid] | edit <workspace> <n> | import <cache> <workspace> | large <cache> | many <cache> | checkout <repository> <destination>"
        ),
    }
    Ok(())
}

/// The cached repository and its HEAD, built on first use: one commit with every file, then one that
/// changes a few, packed the way a clone would be.
fn ensure_repository(cache: &Path) -> anyhow::Result<(PathBuf, CommitSha)> {
    let repository = cache.join("repo");
    if !repository.join(".git").join("stet-bench-complete").exists() {
        if repository.exists() {
            std::fs::remove_dir_all(&repository)?;
        }
        std::fs::create_dir_all(&repository)?;
        git(&repository, &["init", "-q", "-b", "main"])?;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for file in 0..FILES {
            let path = file_path(&repository, file);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, text(&mut state, 1024))?;
        }
        git(&repository, &["add", "-A"])?;
        git(&repository, &["commit", "-q", "-m", "generated files"])?;
        for file in (0..FILES).step_by(997) {
            let path = file_path(&repository, file);
            let mut content = std::fs::read(&path)?;
            content.extend_from_slice(text(&mut state, 64).as_bytes());
            std::fs::write(&path, content)?;
        }
        git(
            &repository,
            &["commit", "-q", "-a", "-m", "a second commit"],
        )?;
        git(&repository, &["gc", "-q"])?;
        std::fs::write(repository.join(".git").join("stet-bench-complete"), "")?;
    }
    let head = Command::new("git")
        .args(["-C"])
        .arg(&repository)
        .args(["rev-parse", "HEAD"])
        .output()?;
    let head = String::from_utf8(head.stdout)?;
    Ok((repository, CommitSha::parse(head.trim())?))
}

/// A repository of one commit holding one file of 1 GiB that does not compress, built once.
fn large_repository(cache: &Path) -> anyhow::Result<PathBuf> {
    let repository = cache.join("large");
    if !repository.join(".git").join("stet-bench-complete").exists() {
        fresh(&repository)?;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut file =
            std::io::BufWriter::new(std::fs::File::create(repository.join("large.bin"))?);
        for _ in 0..(1_u64 << 30) / 8 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            std::io::Write::write_all(&mut file, &state.to_le_bytes())?;
        }
        std::io::Write::flush(&mut file)?;
        drop(file);
        std::fs::write(repository.join("README.md"), "one large file\n")?;
        commit_all(&repository)?;
    }
    Ok(repository)
}

/// A repository of one commit holding 100,000 files of about 1 KB in 1,000 directories, built once.
fn many_repository(cache: &Path) -> anyhow::Result<PathBuf> {
    let repository = cache.join("many");
    if !repository.join(".git").join("stet-bench-complete").exists() {
        fresh(&repository)?;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for file in 0..100_000 {
            let directory = repository
                .join(format!("module{:02}", file % 1000 / 100))
                .join(format!("part{:02}", file % 100));
            std::fs::create_dir_all(&directory)?;
            std::fs::write(
                directory.join(format!("file{file:06}.rs")),
                text(&mut state, 1024),
            )?;
        }
        commit_all(&repository)?;
    }
    Ok(repository)
}

fn fresh(repository: &Path) -> anyhow::Result<()> {
    if repository.exists() {
        std::fs::remove_dir_all(repository)?;
    }
    std::fs::create_dir_all(repository)?;
    git(repository, &["init", "-q", "-b", "main"])
}

/// Commits everything, packs it the way a clone would be, and marks the repository complete.
fn commit_all(repository: &Path) -> anyhow::Result<()> {
    git(repository, &["add", "-A"])?;
    git(repository, &["commit", "-q", "-m", "generated files"])?;
    git(repository, &["gc", "-q"])?;
    std::fs::write(repository.join(".git").join("stet-bench-complete"), "")?;
    Ok(())
}

fn file_path(root: &Path, file: usize) -> PathBuf {
    let directory = file % (TOP_DIRECTORIES * SUBDIRECTORIES);
    root.join(format!("module{:02}", directory / SUBDIRECTORIES))
        .join(format!("part{:02}", directory % SUBDIRECTORIES))
        .join(format!("file{file:05}.rs"))
}

/// About `length` bytes of code-like lines from a xorshift generator.
fn text(state: &mut u64, length: usize) -> String {
    let mut out = String::with_capacity(length + 16);
    while out.len() < length {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let word = WORDS[(*state % WORDS.len() as u64) as usize];
        out.push_str(word);
        out.push(if state.is_multiple_of(7) { '\n' } else { ' ' });
        if state.is_multiple_of(5) {
            out.push_str(&(*state % 10_000).to_string());
            out.push(' ');
        }
    }
    out.push('\n');
    out
}

fn edit(workspace: &Path, count: usize) -> anyhow::Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    for file in (0..FILES).step_by(FILES / count).take(count) {
        let path = file_path(workspace, file);
        let mut content = std::fs::read(&path)?;
        content.extend_from_slice(format!("edited {stamp}\n").as_bytes());
        std::fs::write(&path, content)?;
    }
    Ok(())
}

fn git(repository: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("git")
        .arg("-C")
        .arg(repository)
        .args([
            "-c",
            "user.name=stet bench",
            "-c",
            "user.email=bench@stet.invalid",
            "-c",
            "gc.auto=0",
        ])
        .args(args)
        .status()?;
    if !status.success() {
        bail!("git {args:?} failed in {}", repository.display());
    }
    Ok(())
}
