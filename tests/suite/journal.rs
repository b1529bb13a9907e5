//! The journal against real processes and real files: what one process intends is on disk for
//! another, a record outlives a SIGKILL of its owner and is then cleaned up by adoption, a live
//! process's records are never orphans, and damaged files are tolerated or reported.
//!
//! The "other process" is this test binary run again on one test (`--exact`), told by
//! [`CHILD_DIR_ENV`] to act as a dispatch that journals two resources, says so on stdout and then
//! blocks on stdin until it is killed or its stdin is closed.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Barrier;

use stet_engine::credential::CredentialId;
use stet_engine::dispatch::journal::{Journal, JournalError, Owner, Record, Resource};
use stet_protocol::event::DispatchId;

const CHILD_DIR_ENV: &str = "STET_JOURNAL_TEST_CHILD_DIR";
const CHILD_DISPATCH_ENV: &str = "STET_JOURNAL_TEST_CHILD_DISPATCH";
const READY: &str = "journal-test-child-ready";

fn container(dispatch: DispatchId) -> Resource {
    Resource::Container {
        name: dispatch.to_string(),
        engine: None,
    }
}

fn workspace(dir: &Path, dispatch: DispatchId) -> Resource {
    Resource::Workspace {
        path: dir.join("workspaces").join(dispatch.to_string()),
    }
}

/// In the re-run child: journals a dispatch with two resources like provisioning would, reports
/// ready, then waits for stdin to close. It never closes the record. Returns whether this process
/// is that child.
fn act_as_child_if_asked() -> bool {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return false;
    };
    let dir = PathBuf::from(dir);
    let dispatch: DispatchId = std::env::var(CHILD_DISPATCH_ENV).unwrap().parse().unwrap();
    let journal = Journal::open(&dir).unwrap();
    let mut entry = journal.begin(dispatch).unwrap();
    entry.intend(container(dispatch)).unwrap();
    entry.intend(workspace(&dir, dispatch)).unwrap();
    println!("{READY}");
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
    true
}

/// A child dispatch process; killed and reaped if a test fails while it runs.
struct ChildDispatch {
    child: Child,
    /// Held open so the child's later test-harness output never meets a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl ChildDispatch {
    /// Runs this binary again on `test` (a function in this module) as a child dispatch, and
    /// returns once its record and both intents are on disk.
    fn start(test: &str, dir: &Path, dispatch: DispatchId) -> ChildDispatch {
        let (_crate_name, module) = module_path!().split_once("::").unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &format!("{module}::{test}"), "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_DIR_ENV, dir)
            .env(CHILD_DISPATCH_ENV, dispatch.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut seen = Vec::new();
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap() > 0 {
            // libtest prints `test <name> ... ` without a newline before running the test.
            if line.trim_end().ends_with(READY) {
                return ChildDispatch {
                    child,
                    _stdout: stdout,
                };
            }
            seen.push(std::mem::take(&mut line));
        }
        let status = child.wait().unwrap();
        panic!("the child dispatch ended ({status}) before it was ready; it printed {seen:?}");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ChildDispatch {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn records_of(journal: &Journal, dispatch: DispatchId) -> Vec<Record> {
    let scan = journal.records().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    scan.records
        .into_iter()
        .filter(|record| record.dispatch == dispatch)
        .collect()
}

fn orphans(journal: &Journal) -> Vec<Record> {
    let scan = journal.orphans().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    scan.records
}

#[test]
fn an_intent_is_on_disk_before_intend_returns() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = writer.begin(dispatch).unwrap();
    assert_eq!(entry.dispatch(), dispatch);

    let reader = Journal::open(dir.path()).unwrap();
    let records = records_of(&reader, dispatch);
    assert_eq!(records.len(), 1);
    assert!(records[0].resources.is_empty());
    assert_eq!(records[0].owner, Owner::current().unwrap());

    let credential = Resource::Credential {
        provider: "local".to_owned(),
        id: CredentialId::new("cred-1".to_owned()),
    };
    entry.intend(container(dispatch)).unwrap();
    entry.intend(credential.clone()).unwrap();
    let records = records_of(&reader, dispatch);
    assert_eq!(records[0].resources, vec![container(dispatch), credential]);

    let text = fs::read_to_string(&records[0].path).unwrap();
    assert!(text.ends_with("\"id\":\"cred-1\"}}\n"), "{text}");
}

#[test]
fn released_resources_disappear_and_close_removes_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = journal.begin(dispatch).unwrap();
    let outputs = Resource::Outputs {
        path: dir.path().join("outputs"),
    };
    entry.intend(container(dispatch)).unwrap();
    entry.intend(workspace(dir.path(), dispatch)).unwrap();
    entry.intend(outputs.clone()).unwrap();

    entry.released(&workspace(dir.path(), dispatch)).unwrap();
    assert_eq!(entry.outstanding(), &[container(dispatch), outputs.clone()]);
    let records = records_of(&journal, dispatch);
    assert_eq!(
        records[0].resources,
        vec![container(dispatch), outputs.clone()]
    );

    entry.released(&container(dispatch)).unwrap();
    entry.released(&outputs).unwrap();
    let path = records_of(&journal, dispatch)[0].path.clone();
    entry.close().unwrap();
    assert!(!path.exists());
    assert!(records_of(&journal, dispatch).is_empty());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn close_refuses_while_resources_remain_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = journal.begin(dispatch).unwrap();
    entry.intend(container(dispatch)).unwrap();
    entry.intend(workspace(dir.path(), dispatch)).unwrap();
    entry.released(&workspace(dir.path(), dispatch)).unwrap();

    let error = entry.close().unwrap_err();
    assert!(
        matches!(&error, JournalError::Outstanding { resources, .. } if *resources == [container(dispatch)]),
        "{error:?}"
    );
    let message = error.to_string();
    let records = records_of(&journal, dispatch);
    assert!(
        message.contains(&records[0].path.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&format!("container {dispatch}")),
        "{message}"
    );
    assert!(!message.contains("workspace"), "{message}");
    assert_eq!(records[0].resources, vec![container(dispatch)]);
}

#[test]
fn this_processes_records_are_not_orphans_and_cannot_be_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = journal.begin(dispatch).unwrap();
    entry.intend(container(dispatch)).unwrap();

    assert!(orphans(&journal).is_empty());
    let record = records_of(&journal, dispatch).remove(0);
    let error = journal.adopt(&record).unwrap_err();
    assert!(
        matches!(&error, JournalError::OwnerAlive { owner, .. } if *owner == Owner::current().unwrap()),
        "{error:?}"
    );
}

#[test]
fn a_recycled_pid_is_a_dead_owner() {
    let me = Owner::current().unwrap();
    assert!(me.is_alive());
    for start_time in [me.start_time + 1, me.start_time - 1] {
        let recycled = Owner {
            pid: me.pid,
            start_time,
        };
        assert!(!recycled.is_alive(), "{recycled}");
    }
}

#[test]
fn a_record_left_by_a_process_that_exited_is_an_orphan() {
    if act_as_child_if_asked() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut child = ChildDispatch::start(
        "a_record_left_by_a_process_that_exited_is_an_orphan",
        dir.path(),
        dispatch,
    );

    // While the other process lives, its dispatch is not ours to take.
    let live = records_of(&journal, dispatch).remove(0);
    assert_eq!(live.owner.pid, child.pid());
    assert!(live.owner.is_alive());
    assert!(orphans(&journal).is_empty());
    let error = journal.adopt(&live).unwrap_err();
    assert!(
        matches!(error, JournalError::OwnerAlive { .. }),
        "{error:?}"
    );

    drop(child.child.stdin.take());
    let status = child.child.wait().unwrap();
    assert!(status.success(), "{status}");

    assert!(!live.owner.is_alive());
    let found = orphans(&journal);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].dispatch, dispatch);
    assert_eq!(found[0].owner, live.owner);
    assert_eq!(
        found[0].resources,
        vec![container(dispatch), workspace(dir.path(), dispatch)]
    );
}

#[test]
fn sigkill_mid_dispatch_leaves_an_orphan_that_adoption_cleans_up() {
    if act_as_child_if_asked() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let mine = DispatchId::new();
    let mut my_entry = journal.begin(mine).unwrap();
    my_entry.intend(container(mine)).unwrap();

    let dispatch = DispatchId::new();
    let mut child = ChildDispatch::start(
        "sigkill_mid_dispatch_leaves_an_orphan_that_adoption_cleans_up",
        dir.path(),
        dispatch,
    );
    assert!(orphans(&journal).is_empty());
    child.child.kill().unwrap();
    let status = child.child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{status}");

    let found = orphans(&journal);
    assert_eq!(found.len(), 1, "{found:?}");
    let orphan = &found[0];
    assert_eq!(orphan.dispatch, dispatch);
    assert_eq!(orphan.owner.pid, child.pid());
    assert_eq!(
        orphan.resources,
        vec![container(dispatch), workspace(dir.path(), dispatch)]
    );

    let mut adopted = journal.adopt(orphan).unwrap();
    assert_eq!(adopted.dispatch(), dispatch);
    assert_eq!(adopted.outstanding(), orphan.resources.as_slice());
    assert!(orphans(&journal).is_empty());
    let error = journal.adopt(orphan).unwrap_err();
    assert!(
        matches!(error, JournalError::AlreadyJournaled { dispatch: held, .. } if held == dispatch),
        "{error:?}"
    );

    for resource in orphan.resources.clone() {
        adopted.released(&resource).unwrap();
    }
    adopted.close().unwrap();
    assert!(records_of(&journal, dispatch).is_empty());

    // The sweep touched nothing of this process's own dispatch.
    let mine_now = records_of(&journal, mine);
    assert_eq!(mine_now.len(), 1);
    assert_eq!(mine_now[0].resources, vec![container(mine)]);
    my_entry.released(&container(mine)).unwrap();
    my_entry.close().unwrap();
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_torn_final_line_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let mut entry = journal.begin(dispatch).unwrap();
    entry.intend(container(dispatch)).unwrap();
    let path = records_of(&journal, dispatch)[0].path.clone();

    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"v\":1,\"op\":\"intend\",\"resource\":{\"kind\":\"work")
        .unwrap();

    let records = records_of(&journal, dispatch);
    assert_eq!(records[0].resources, vec![container(dispatch)]);
}

#[test]
fn a_corrupt_middle_line_is_reported_with_file_and_line_and_hides_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let healthy = DispatchId::new();
    let mut healthy_entry = journal.begin(healthy).unwrap();
    healthy_entry.intend(container(healthy)).unwrap();

    let damaged = DispatchId::new();
    let mut damaged_entry = journal.begin(damaged).unwrap();
    damaged_entry.intend(container(damaged)).unwrap();
    damaged_entry
        .intend(workspace(dir.path(), damaged))
        .unwrap();
    let path = records_of(&journal, damaged)[0].path.clone();
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"v\":1,\"op\":\"intend\",\"resource\":{\"ki";
    fs::write(&path, lines.join("\n") + "\n").unwrap();

    let scan = journal.records().unwrap();
    let dispatches: Vec<DispatchId> = scan.records.iter().map(|record| record.dispatch).collect();
    assert_eq!(dispatches, vec![healthy]);
    assert_eq!(scan.records[0].resources, vec![container(healthy)]);
    assert_eq!(scan.problems.len(), 1, "{:?}", scan.problems);
    assert!(
        matches!(&scan.problems[0], JournalError::CorruptLine { path: named, line: 2, .. } if *named == path),
        "{:?}",
        scan.problems
    );
    let message = scan.problems[0].to_string();
    assert!(
        message.starts_with(&format!("{}:2: ", path.display())),
        "{message}"
    );
    assert_eq!(journal.orphans().unwrap().problems.len(), 1);
}

#[test]
fn an_unknown_schema_version_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let _entry = journal.begin(dispatch).unwrap();
    let path = records_of(&journal, dispatch)[0].path.clone();
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"v\":99,\"op\":\"intend\",\"resource\":{\"kind\":\"hologram\"}}\n")
        .unwrap();

    let scan = journal.records().unwrap();
    assert!(scan.records.is_empty(), "{:?}", scan.records);
    assert!(
        matches!(
            &scan.problems[..],
            [JournalError::UnsupportedVersion {
                line: 2,
                found: 99,
                ..
            }]
        ),
        "{:?}",
        scan.problems
    );
}

#[test]
fn concurrent_entries_for_different_dispatches_do_not_interfere() {
    const WRITERS: usize = 8;
    const ROUNDS: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let start = Barrier::new(WRITERS);
    let dispatches: Vec<DispatchId> = (0..WRITERS).map(|_| DispatchId::new()).collect();

    let entries: Vec<_> = std::thread::scope(|scope| {
        let writers: Vec<_> = dispatches
            .iter()
            .map(|&dispatch| {
                let (start, dir) = (&start, dir.path());
                scope.spawn(move || {
                    let journal = Journal::open(dir).unwrap();
                    let mut entry = journal.begin(dispatch).unwrap();
                    start.wait();
                    for round in 0..ROUNDS {
                        let outputs = Resource::Outputs {
                            path: dir.join(format!("{dispatch}-{round}")),
                        };
                        entry.intend(outputs.clone()).unwrap();
                        if round % 2 == 0 {
                            entry.released(&outputs).unwrap();
                        }
                    }
                    entry
                })
            })
            .collect();
        writers
            .into_iter()
            .map(|writer| writer.join().unwrap())
            .collect()
    });

    let journal = Journal::open(dir.path()).unwrap();
    let scan = journal.records().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let found: BTreeSet<DispatchId> = scan.records.iter().map(|record| record.dispatch).collect();
    assert_eq!(found, dispatches.iter().copied().collect());
    let mut sorted = dispatches.clone();
    sorted.sort();
    assert_eq!(
        scan.records
            .iter()
            .map(|record| record.dispatch)
            .collect::<Vec<_>>(),
        sorted
    );
    for record in &scan.records {
        let expected: Vec<Resource> = (1..ROUNDS)
            .step_by(2)
            .map(|round| Resource::Outputs {
                path: dir.path().join(format!("{}-{round}", record.dispatch)),
            })
            .collect();
        assert_eq!(record.resources, expected, "{}", record.dispatch);
    }

    for mut entry in entries {
        for resource in entry.outstanding().to_vec() {
            entry.released(&resource).unwrap();
        }
        entry.close().unwrap();
    }
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_sweep_accounts_for_a_journaled_container_that_is_already_gone() {
    if act_as_child_if_asked() {
        return;
    }
    super::headless::docker_ready();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let dispatch = DispatchId::new();
    let mut child = ChildDispatch::start(
        "the_sweep_accounts_for_a_journaled_container_that_is_already_gone",
        dir.path(),
        dispatch,
    );
    child.child.kill().unwrap();
    child.child.wait().unwrap();

    // The child journaled a container it never created: Docker has nothing by that name.
    let journal = std::sync::Arc::new(Journal::open(dir.path()).unwrap());
    let report = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let runtime = std::sync::Arc::new(
            stet_engine::runtime::docker::DockerRuntime::connect()
                .await
                .unwrap(),
        );
        stet_engine::dispatch::service::DispatchService::new(
            runtime,
            journal.clone(),
            state.path(),
            Vec::new(),
        )
        .sweep_orphans()
        .await
        .unwrap()
    });
    assert_eq!(
        report.containers_already_gone,
        vec![dispatch.to_string()],
        "{report}"
    );
    assert!(report.containers_removed.is_empty(), "{report}");
    assert!(
        report
            .to_string()
            .contains(&format!("container {dispatch} was already gone\n")),
        "{report}"
    );
}
