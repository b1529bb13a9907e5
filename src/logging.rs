//! Log files under the state directory, every record passed through the sanitizer first.
//!
//! The logger never writes to the terminal (the TUI owns it); records go to a daily file in
//! `$XDG_STATE_HOME/stet/logs/` through `tracing-appender`'s background writer. Each formatted record
//! is redacted whole before it is queued, with the values the [`SanitizerHandle`] knows at that moment.

use std::io::Write;
use std::path::{Path, PathBuf};

use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};
use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::dispatch::sanitize::SanitizerHandle;

/// The environment variable that sets the log filter (`info` when unset), e.g. `STET_LOG=debug`.
pub const LOG_FILTER_ENV: &str = "STET_LOG";

/// How many daily log files are kept.
const KEPT_LOG_FILES: usize = 14;

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("neither XDG_STATE_HOME nor HOME is set, so stet has no state directory")]
    NoStateDir,
    #[error("cannot create the log directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open a log file in {path}: {source}")]
    Open {
        path: PathBuf,
        source: tracing_appender::rolling::InitError,
    },
    #[error("invalid {LOG_FILTER_ENV} filter {filter:?}: {source}")]
    Filter {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("a global logger is already installed: {0}")]
    AlreadyInstalled(#[from] tracing::subscriber::SetGlobalDefaultError),
}

pub type Result<T> = std::result::Result<T, LoggingError>;

/// `$XDG_STATE_HOME/stet`, or `~/.local/state/stet`: runs, journal and logs live here.
pub fn state_dir() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|home| PathBuf::from(home).join(".local").join("state"))
            .ok_or(LoggingError::NoStateDir)?,
    };
    Ok(base.join("stet"))
}

/// Keeps the background log writer alive; dropping it flushes what is queued.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _worker: WorkerGuard,
}

/// Installs the process-wide logger writing into `dir`. Call once, early, and keep the guard.
pub fn install(dir: &Path, sanitizer: SanitizerHandle) -> Result<LogGuard> {
    let (subscriber, guard) = subscriber(dir, sanitizer)?;
    tracing::subscriber::set_global_default(subscriber)?;
    Ok(guard)
}

/// The logger as a subscriber, for [`install`] or for a scoped `with_default` in tests.
pub fn subscriber(
    dir: &Path,
    sanitizer: SanitizerHandle,
) -> Result<(impl tracing::Subscriber + Send + Sync + 'static, LogGuard)> {
    std::fs::create_dir_all(dir).map_err(|source| LoggingError::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let appender = RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix("stet")
        .filename_suffix("log")
        .max_log_files(KEPT_LOG_FILES)
        .build(dir)
        .map_err(|source| LoggingError::Open {
            path: dir.to_owned(),
            source,
        })?;
    let (writer, worker) = tracing_appender::non_blocking(appender);
    let filter_text = std::env::var(LOG_FILTER_ENV).unwrap_or_else(|_| "info".to_owned());
    let filter = EnvFilter::try_new(&filter_text).map_err(|source| LoggingError::Filter {
        filter: filter_text.clone(),
        source,
    })?;
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(SanitizingMakeWriter { writer, sanitizer })
        .finish();
    Ok((subscriber, LogGuard { _worker: worker }))
}

/// Hands `tracing` one [`SanitizingRecord`] per log record.
struct SanitizingMakeWriter {
    writer: NonBlocking,
    sanitizer: SanitizerHandle,
}

impl<'a> MakeWriter<'a> for SanitizingMakeWriter {
    type Writer = SanitizingRecord;

    fn make_writer(&'a self) -> SanitizingRecord {
        SanitizingRecord {
            record: Vec::new(),
            writer: self.writer.clone(),
            sanitizer: self.sanitizer.clone(),
        }
    }
}

/// Collects one formatted record; redacts and queues it when `tracing` drops the writer.
struct SanitizingRecord {
    record: Vec<u8>,
    writer: NonBlocking,
    sanitizer: SanitizerHandle,
}

impl Write for SanitizingRecord {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.record.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SanitizingRecord {
    fn drop(&mut self) {
        if self.record.is_empty() {
            return;
        }
        let redacted = self.sanitizer.current().redact(&self.record);
        // The logger has nowhere to report its own failure without touching the terminal.
        let _ = self.writer.write_all(&redacted);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::dispatch::credential::random_token;
    use crate::dispatch::sanitize::{KnownValue, TokenSanitizer};

    #[test]
    fn records_are_redacted_before_they_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let handle = SanitizerHandle::new(TokenSanitizer::new().unwrap());
        let shaped = format!("ghp_{}", random_token(36).unwrap());
        let known = format!("model-{}", random_token(30).unwrap());
        let (subscriber, guard) = subscriber(dir.path(), handle.clone()).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(token = %shaped, "pushing with a shaped token");
            handle
                .register(KnownValue::new("model-key", &known).unwrap())
                .unwrap();
            tracing::warn!("upstream refused key {known}");
        });
        drop(guard);
        let mut text = String::new();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
        assert!(text.contains("pushing with a shaped token"), "{text}");
        assert!(text.contains("[REDACTED:github-token]"), "{text}");
        assert!(
            text.contains("upstream refused key [REDACTED:model-key]"),
            "{text}"
        );
        assert!(!text.contains(&shaped) && !text.contains(&known), "{text}");
        assert!(!text.contains('\x1b'), "no colour codes in files");
    }
}
