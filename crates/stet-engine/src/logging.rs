//! Log files under the state directory, every record passed through the sanitizer first.
//!
//! The logger never writes to the terminal (the TUI owns it); records go to a daily file in
//! `$XDG_STATE_HOME/stet/logs/` through `tracing-appender`'s background writer. Each formatted record
//! is redacted whole before it is queued, with the values the [`SanitizerHandle`] knows at that moment.
//! The directory is mode 0700 and every file 0600, whatever the umask ([`crate::private_files`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use stet_sanitize::sanitize::SanitizerHandle;

/// The environment variable that sets the log filter (`info` when unset), e.g. `STET_LOG=debug`.
pub const LOG_FILTER_ENV: &str = "STET_LOG";

/// How many daily log files are kept.
const KEPT_LOG_FILES: usize = 14;

/// A day's log file is `stet.<YYYY-MM-DD>.log`.
const LOG_PREFIX: &str = "stet.";
const LOG_SUFFIX: &str = ".log";

/// Why stet's log could not be set up.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum LoggingError {
    #[error("cannot create the log directory {}: {}", .0.path.display(), .0.source)]
    CreateDir(crate::private_files::PrivateDirError),
    #[error("cannot open a log file in {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid {LOG_FILTER_ENV} filter {filter:?}: {source}")]
    Filter {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("a global logger is already installed: {0}")]
    AlreadyInstalled(#[from] tracing::subscriber::SetGlobalDefaultError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, LoggingError>;

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
    crate::private_files::create_dir_all(dir).map_err(LoggingError::CreateDir)?;
    let appender = DailyLog::open(dir).map_err(|source| LoggingError::Open {
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

/// The day's log file, opened (mode 0600) when the first record of a day arrives; files beyond the
/// newest [`KEPT_LOG_FILES`] are removed then.
struct DailyLog {
    dir: PathBuf,
    day: NaiveDate,
    file: File,
}

impl DailyLog {
    fn open(dir: &Path) -> std::io::Result<DailyLog> {
        let day = chrono::Utc::now().date_naive();
        let file = open_day(dir, day)?;
        prune(dir);
        Ok(DailyLog {
            dir: dir.to_owned(),
            day,
            file,
        })
    }
}

impl Write for DailyLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let today = chrono::Utc::now().date_naive();
        if today != self.day {
            self.file = open_day(&self.dir, today)?;
            self.day = today;
            prune(&self.dir);
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

fn open_day(dir: &Path, day: NaiveDate) -> std::io::Result<File> {
    let path = dir.join(format!(
        "{LOG_PREFIX}{}{LOG_SUFFIX}",
        day.format("%Y-%m-%d")
    ));
    let file = crate::private_files::options()
        .create(true)
        .append(true)
        .open(path)?;
    crate::private_files::seal(&file)?;
    Ok(file)
}

/// Removes the oldest daily files past [`KEPT_LOG_FILES`] (their names sort by date). A file that
/// cannot be removed stays; logging goes on.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut days: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(LOG_PREFIX) && name.ends_with(LOG_SUFFIX))
        })
        .collect();
    days.sort();
    let surplus = days.len().saturating_sub(KEPT_LOG_FILES);
    for old in &days[..surplus] {
        let _ = std::fs::remove_file(old);
    }
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
    use super::*;
    use crate::credential::random_token;
    use stet_sanitize::sanitize::{KnownValue, TokenSanitizer};

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
