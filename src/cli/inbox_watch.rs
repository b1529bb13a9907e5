//! The theater's inbox kept current: `.stet/briefs/` is watched (the `notify` crate: inotify on
//! Linux) and read again, within its budgets, after each change, so a brief added, edited or fixed
//! on disk shows up without a restart. Until the inbox directory exists its parents are watched, so
//! the first brief written into a fresh repository appears too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use stet_engine::inbox::{Inbox, InboxLimits};
use stet_tui::app::InboxRow;
use tokio::sync::mpsc;

/// How long the watch waits after a change for the rest of a burst (an editor's save is a few
/// events) before reading the inbox again.
const SETTLE: Duration = Duration::from_millis(150);

/// Why the inbox cannot be watched.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    #[error("watching the inbox {dir}: {source}")]
    Watch {
        dir: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// The watch; dropping it stops it.
pub(crate) struct InboxWatch {
    _watcher: Arc<Mutex<notify::RecommendedWatcher>>,
    _task: tokio::task::JoinHandle<()>,
}

/// Watches the inbox of the repository at `root` and sends it, read again within `limits`, on the
/// returned channel after every change.
pub(crate) fn watch(
    root: &Path,
    limits: InboxLimits,
) -> Result<(InboxWatch, mpsc::Receiver<Vec<InboxRow>>), WatchError> {
    let dir = Inbox::default_dir(root);
    let (changed, mut changes) = mpsc::channel::<()>(1);
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            // A full channel already says "changed": one reading covers both.
            let _ = changed.try_send(());
        }
    })
    .map_err(|source| WatchError::Watch {
        dir: dir.clone(),
        source,
    })?;
    let watcher = Arc::new(Mutex::new(watcher));
    let watched = watched_dirs(root, &dir);
    follow(&watcher, &watched);
    let (sender, reloads) = mpsc::channel(1);
    let task = {
        let watcher = Arc::clone(&watcher);
        tokio::spawn(async move {
            while changes.recv().await.is_some() {
                tokio::time::sleep(SETTLE).await;
                while changes.try_recv().is_ok() {}
                // The inbox directory (or its parent) may have appeared since the last change.
                follow(&watcher, &watched);
                let dir = dir.clone();
                let read =
                    tokio::task::spawn_blocking(move || Inbox::load_within(&dir, &limits)).await;
                match read {
                    Ok(Ok(inbox)) => {
                        let rows = inbox.entries().iter().map(InboxRow::from_entry).collect();
                        if sender.send(rows).await.is_err() {
                            return;
                        }
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "the inbox changed but cannot be read; keeping what is shown");
                    }
                    Err(error) => tracing::warn!(%error, "reading the inbox stopped"),
                }
            }
        })
    };
    Ok((
        InboxWatch {
            _watcher: watcher,
            _task: task,
        },
        reloads,
    ))
}

/// The inbox directory and its parents up to the repository's root: the nearest existing one
/// tells of the inbox's creation, the inbox itself of every brief.
fn watched_dirs(root: &Path, dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|ancestor| ancestor.starts_with(root))
        .map(Path::to_path_buf)
        .collect()
}

/// Watches each directory of `dirs` that exists (again: watching twice is harmless).
fn follow(watcher: &Mutex<notify::RecommendedWatcher>, dirs: &[PathBuf]) {
    let Ok(mut watcher) = watcher.lock() else {
        return;
    };
    for dir in dirs.iter().filter(|dir| dir.is_dir()) {
        if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::debug!(%error, dir = %dir.display(), "not watching");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use stet_engine::inbox::InboxLimits;

    use super::watch;

    const BRIEF: &str = "title = \"Add the tests\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n";

    /// How long a change may take to come back as a reading (a bound, not a wait: the test goes on
    /// as soon as the reading arrives).
    const PATIENCE: Duration = Duration::from_secs(20);

    #[tokio::test]
    async fn a_brief_written_into_a_fresh_repository_comes_back_as_a_reading() {
        let root = tempfile::tempdir().unwrap();
        let (_watch, mut reloads) = watch(root.path(), InboxLimits::default()).unwrap();
        let briefs = root.path().join(".stet").join("briefs");
        std::fs::create_dir_all(&briefs).unwrap();
        std::fs::write(briefs.join("add-tests.toml"), BRIEF).unwrap();
        let rows = loop {
            let rows = tokio::time::timeout(PATIENCE, reloads.recv())
                .await
                .expect("a reading within the bound")
                .expect("the watch runs");
            if !rows.is_empty() {
                break rows;
            }
        };
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].brief_id(), Some("add-tests"));

        // Broken on disk, then fixed: each comes back.
        std::fs::write(briefs.join("add-tests.toml"), "title = \"x\"\n[target\n").unwrap();
        let broken = loop {
            let rows = tokio::time::timeout(PATIENCE, reloads.recv())
                .await
                .unwrap()
                .unwrap();
            if rows.first().is_some_and(|row| row.brief_id().is_none()) {
                break rows;
            }
        };
        assert_eq!(broken.len(), 1);
        std::fs::write(briefs.join("add-tests.toml"), BRIEF).unwrap();
        loop {
            let rows = tokio::time::timeout(PATIENCE, reloads.recv())
                .await
                .unwrap()
                .unwrap();
            if rows.first().and_then(|row| row.brief_id()) == Some("add-tests") {
                break;
            }
        }
    }
}
