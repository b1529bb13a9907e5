//! The commands that read standard input and write standard output: `stet sanitize`, `stet
//! transcript` and `stet check-branch`.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use stet_sanitize::branch::BranchValidator;
use stet_sanitize::sanitize::{KnownValue, Redactor, SanitizerHandle, TokenSanitizer};

use super::args::HarnessName;
use super::session::install_logging;

/// How much `stet sanitize` reads at a time.
pub(crate) const SANITIZE_CHUNK: usize = 128 * 1024;

pub(crate) fn check_branch(name: &str, base: Option<&str>) -> ExitCode {
    match BranchValidator::default().validate(name, base) {
        Ok(()) => {
            println!("{name}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("stet: invalid branch name {name:?}: {err}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn sanitize(known_value_env: &[String], stats: bool) -> anyhow::Result<ExitCode> {
    let mut known = Vec::new();
    for name in known_value_env {
        let value = std::env::var(name).with_context(|| {
            format!("--known-value-env {name}: the environment variable {name} is not set")
        })?;
        let label = format!("env-{}", name.to_ascii_lowercase().replace('_', "-"));
        let label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(40)
            .collect();
        known.push(
            KnownValue::new(&label, &value).with_context(|| format!("--known-value-env {name}"))?,
        );
    }
    let handle = SanitizerHandle::new(TokenSanitizer::with_known_values(known)?);
    let _log_guard = install_logging(&handle);
    let sanitizer: Arc<TokenSanitizer> = handle.current();

    // Unbuffered handles: the redactor already works in large chunks.
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let mut redactor = Redactor::new(sanitizer);
    let mut chunk = vec![0u8; SANITIZE_CHUNK];
    let mut out = Vec::with_capacity(SANITIZE_CHUNK + 4096);
    let mut read_bytes: u64 = 0;
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err).context("reading standard input"),
        };
        read_bytes += n as u64;
        redactor.push(&chunk[..n], &mut out);
        if !write_or_stop(&mut output, &out)? {
            return Ok(ExitCode::SUCCESS);
        }
        out.clear();
    }
    redactor.finish(&mut out);
    if !write_or_stop(&mut output, &out)? {
        return Ok(ExitCode::SUCCESS);
    }
    tracing::info!(
        bytes = read_bytes,
        masked = redactor.masked(),
        "stet sanitize finished"
    );
    if stats {
        eprintln!(
            "stet sanitize: {read_bytes} bytes read, {} secrets masked",
            redactor.masked()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes`; returns `false` when the reader went away (a closed pipe is not an error for a filter).
pub(crate) fn write_or_stop(output: &mut std::fs::File, bytes: &[u8]) -> anyhow::Result<bool> {
    match output.write_all(bytes) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(err).context("writing standard output"),
    }
}

pub(crate) fn transcript(
    path: &std::path::Path,
    harness: HarnessName,
    outputs: Option<&std::path::Path>,
    brief: String,
) -> anyhow::Result<ExitCode> {
    use stet_engine::harness::replay::{ReplayError, ReplayLabels, replay};
    let sanitizer = Arc::new(TokenSanitizer::new()?);
    let labels = ReplayLabels {
        dispatch: stet_protocol::event::DispatchId::new(),
        brief,
    };
    let (mut parser, usage) = stet_engine::harness::replay_reader(harness.0, &sanitizer, outputs)?;
    let mut stdout = std::io::stdout().lock();
    let replayed = if path == std::path::Path::new("-") {
        replay(
            std::io::stdin().lock(),
            &mut stdout,
            parser.as_mut(),
            usage,
            &labels,
            &sanitizer,
        )
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the capture {}", path.display()))?;
        replay(
            file,
            &mut stdout,
            parser.as_mut(),
            usage,
            &labels,
            &sanitizer,
        )
    };
    match replayed {
        Ok(outcome) => Ok(ExitCode::from(outcome.exit_code().unwrap_or(1))),
        // The reader went away (`| head`): like any filter, stop quietly.
        Err(ReplayError::Write(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => Err(error.into()),
    }
}
