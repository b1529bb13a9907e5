//! Unit tests of `crate::dispatch::journal`, in a file of their own so the module reads as code.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn status_line(comm: &str, state: char, start_time: u64) -> Vec<u8> {
    // Fields 4..=21, then the start time (22), then a few more like the kernel writes.
    let middle: Vec<String> = (4..=21).map(|field| field.to_string()).collect();
    format!(
        "4242 ({comm}) {state} {} {start_time} 23 24 25\n",
        middle.join(" ")
    )
    .into_bytes()
}

#[test]
fn status_parsing_takes_the_fields_after_the_last_parenthesis() {
    for comm in ["stet", "a b", "x) S 1 2 (y", ")", "with\nnewline", "((("] {
        let parsed = ProcessStatus::parse(&status_line(comm, 'S', 987_654)).unwrap();
        assert_eq!(
            parsed,
            ProcessStatus {
                pid: 4242,
                state: b'S',
                start_time: 987_654
            },
            "comm {comm:?}"
        );
    }
}

#[test]
fn status_parsing_rejects_what_is_not_a_status_line() {
    let short = b"4242 (stet) S 1 2 3".to_vec();
    let no_parenthesis =
        b"4242 stet S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21".to_vec();
    let reversed = b"4242 )stet( S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20".to_vec();
    let mut long_state = status_line("stet", 'S', 5);
    long_state.splice(12..13, b"SS".iter().copied());
    for bytes in [short, no_parenthesis, reversed, long_state, b"".to_vec()] {
        assert_eq!(
            ProcessStatus::parse(&bytes),
            None,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn the_current_process_is_alive_and_a_recycled_pid_is_not() {
    let me = Owner::current().unwrap();
    assert_eq!(me.pid, std::process::id());
    assert!(me.is_alive());
    let recycled = Owner {
        start_time: me.start_time + 1,
        ..me
    };
    assert!(!recycled.is_alive());
    assert!(
        !Owner {
            pid: 0,
            start_time: 0
        }
        .is_alive()
    );
}

#[test]
fn record_names_round_trip_and_nothing_else_parses() {
    let dispatch = DispatchId::new();
    let owner = Owner {
        pid: 77,
        start_time: 123_456,
    };
    let name = record_name(dispatch, owner);
    assert_eq!(parse_record_name(&name), Some((dispatch, owner)));
    for odd in [
        format!("{dispatch}.+77-123456.jsonl"),
        format!("{dispatch}.077-123456.jsonl"),
        format!("{dispatch}.77-123456.json"),
        format!("{dispatch}.77.jsonl"),
        format!("{dispatch}.jsonl"),
        "stet-dispatch-nope.77-1.jsonl".to_owned(),
    ] {
        assert_eq!(parse_record_name(&odd), None, "{odd}");
    }
}

fn lines(dispatch: DispatchId, rest: &[&str]) -> Vec<u8> {
    let mut text = format!("{{\"v\":1,\"op\":\"begin\",\"dispatch\":\"{dispatch}\"}}\n");
    for line in rest {
        text.push_str(line);
    }
    text.into_bytes()
}

const INTEND_A: &str =
    "{\"v\":1,\"op\":\"intend\",\"resource\":{\"kind\":\"container\",\"name\":\"a\"}}\n";
const INTEND_B: &str =
    "{\"v\":1,\"op\":\"intend\",\"resource\":{\"kind\":\"container\",\"name\":\"b\"}}\n";
const RELEASE_A: &str =
    "{\"v\":1,\"op\":\"release\",\"resource\":{\"kind\":\"container\",\"name\":\"a\"}}\n";

/// This process's pid with another start time: the owner of a recycled pid, so a dead one.
fn recycled_pid_owner() -> Owner {
    let me = Owner::current().unwrap();
    Owner {
        start_time: me.start_time + 1,
        ..me
    }
}

fn container(name: &str) -> Resource {
    Resource::Container {
        name: name.to_owned(),
        engine: None,
    }
}

#[test]
fn replay_keeps_what_is_intended_and_not_released_in_order() {
    let dispatch = DispatchId::new();
    let bytes = lines(dispatch, &[INTEND_A, INTEND_B, RELEASE_A, INTEND_A]);
    let replayed = replay(Path::new("r.jsonl"), dispatch, &bytes).unwrap();
    assert_eq!(replayed.resources, vec![container("b"), container("a")]);
    assert_eq!(replayed.complete_len, bytes.len() as u64);
}

#[test]
fn replay_ignores_a_torn_final_line_and_says_where_it_starts() {
    let dispatch = DispatchId::new();
    let whole = lines(dispatch, &[INTEND_A]);
    for torn in [&INTEND_B[..10], &INTEND_B[..INTEND_B.len() - 1], "\0\0\0"] {
        let mut bytes = whole.clone();
        bytes.extend_from_slice(torn.as_bytes());
        let replayed = replay(Path::new("r.jsonl"), dispatch, &bytes).unwrap();
        assert_eq!(replayed.resources, vec![container("a")], "{torn:?}");
        assert_eq!(replayed.complete_len, whole.len() as u64);
    }
    let only_torn = replay(Path::new("r.jsonl"), dispatch, b"{\"v\":1,\"op\":\"beg").unwrap();
    assert_eq!(
        only_torn,
        Replay {
            resources: Vec::new(),
            salvage: None,
            complete_len: 0
        }
    );
}

#[test]
fn replay_reports_a_corrupt_complete_line_with_file_and_line() {
    let dispatch = DispatchId::new();
    for bad in [
        "{\"v\":1,\"op\":\"intend\",\"reso\n",
        "\n",
        "{\"v\":1,\"op\":\"explode\"}\n",
    ] {
        let bytes = lines(dispatch, &[INTEND_A, bad, INTEND_B]);
        let error = replay(Path::new("/j/r.jsonl"), dispatch, &bytes).unwrap_err();
        assert!(
            matches!(error, JournalError::CorruptLine { line: 3, .. }),
            "{bad:?}: {error:?}"
        );
        assert!(error.to_string().starts_with("/j/r.jsonl:3: "), "{error}");
    }
}

#[test]
fn replay_reports_an_unknown_schema_version() {
    let dispatch = DispatchId::new();
    let bytes = lines(dispatch, &["{\"v\":2,\"op\":\"teleport\"}\n"]);
    let error = replay(Path::new("/j/r.jsonl"), dispatch, &bytes).unwrap_err();
    assert!(
        matches!(
            error,
            JournalError::UnsupportedVersion {
                line: 2,
                found: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().starts_with("/j/r.jsonl:2: "), "{error}");
}

#[test]
fn replay_requires_one_begin_for_the_named_dispatch_first() {
    let dispatch = DispatchId::new();
    let other = lines(DispatchId::new(), &[]);
    let headless = INTEND_A.as_bytes().to_vec();
    let twice = lines(
        dispatch,
        &[&String::from_utf8(lines(dispatch, &[])).unwrap()],
    );
    for (bytes, line) in [(other, 1), (headless, 1), (twice, 2)] {
        let error = replay(Path::new("r.jsonl"), dispatch, &bytes).unwrap_err();
        assert!(
            matches!(error, JournalError::Inconsistent { line: found, .. } if found == line),
            "{error:?}"
        );
    }
}

#[test]
fn a_record_of_a_recycled_pid_is_an_orphan_and_adopt_takes_it_over() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(&dir.path().join("journal")).unwrap();
    let recycled = recycled_pid_owner();
    let dispatch = DispatchId::new();
    let mut old = journal.create(dispatch, recycled).unwrap();
    old.intend(container("a")).unwrap();
    drop(old);

    let orphans = journal.orphans().unwrap();
    assert!(orphans.problems.is_empty(), "{:?}", orphans.problems);
    assert_eq!(orphans.records.len(), 1);
    assert_eq!(orphans.records[0].owner, recycled);

    let mut adopted = journal.adopt(&orphans.records[0]).unwrap();
    assert_eq!(adopted.outstanding(), &[container("a")]);
    let records = journal.records().unwrap().records;
    let me = Owner::current().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].owner, me);
    assert_eq!(records[0].path, journal.dir.join(record_name(dispatch, me)));
    assert!(journal.orphans().unwrap().records.is_empty());

    adopted.released(&container("a")).unwrap();
    adopted.close().unwrap();
    assert_eq!(fs::read_dir(&journal.dir).unwrap().count(), 0);
}

#[test]
fn adopt_cuts_a_torn_final_line_so_new_lines_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dead = recycled_pid_owner();
    let dispatch = DispatchId::new();
    let mut old = journal.create(dispatch, dead).unwrap();
    old.intend(container("a")).unwrap();
    old.file.write_all(&INTEND_B.as_bytes()[..20]).unwrap();
    drop(old);

    let orphan = journal.orphans().unwrap().records.remove(0);
    let mut adopted = journal.adopt(&orphan).unwrap();
    adopted.intend(container("c")).unwrap();
    let scan = journal.records().unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(
        scan.records[0].resources,
        vec![container("a"), container("c")]
    );
}

#[test]
fn adopt_takes_the_resources_from_disk_not_from_a_stale_listing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dead = recycled_pid_owner();
    let mut old = journal.create(DispatchId::new(), dead).unwrap();
    old.intend(container("a")).unwrap();
    let stale = journal.orphans().unwrap().records.remove(0);
    old.intend(container("b")).unwrap();
    old.released(&container("a")).unwrap();
    drop(old);

    let adopted = journal.adopt(&stale).unwrap();
    assert_eq!(stale.resources, vec![container("a")]);
    assert_eq!(adopted.outstanding(), &[container("b")]);
}

#[test]
fn an_owner_that_died_inside_begin_leaves_a_record_adopt_can_use() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dead = recycled_pid_owner();
    for torn in ["", "{\"v\":1,\"op\":\"beg"] {
        let dispatch = DispatchId::new();
        fs::write(journal.dir.join(record_name(dispatch, dead)), torn).unwrap();
        let orphan = journal.orphans().unwrap().records.remove(0);
        assert_eq!((orphan.dispatch, orphan.owner), (dispatch, dead));
        assert!(orphan.resources.is_empty());

        let mut adopted = journal.adopt(&orphan).unwrap();
        adopted.intend(container("a")).unwrap();
        let scan = journal.records().unwrap();
        assert!(scan.problems.is_empty(), "{torn:?}: {:?}", scan.problems);
        assert_eq!(scan.records[0].resources, vec![container("a")]);
        adopted.released(&container("a")).unwrap();
        adopted.close().unwrap();
    }
}

#[test]
fn an_orphan_adopted_once_cannot_be_adopted_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dead = recycled_pid_owner();
    let dispatch = DispatchId::new();
    drop(journal.create(dispatch, dead).unwrap());
    let orphan = journal.orphans().unwrap().records.remove(0);
    let first = journal.adopt(&orphan).unwrap();
    let error = journal.adopt(&orphan).unwrap_err();
    assert!(
        matches!(error, JournalError::AlreadyJournaled { .. }),
        "{error:?}"
    );
    first.close().unwrap();
    let error = journal.adopt(&orphan).unwrap_err();
    assert!(matches!(error, JournalError::Vanished { .. }), "{error:?}");
}

#[test]
fn begin_refuses_a_dispatch_that_already_has_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let dispatch = DispatchId::new();
    let _live = journal.begin(dispatch).unwrap();
    let error = journal.begin(dispatch).unwrap_err();
    assert!(
        matches!(error, JournalError::AlreadyJournaled { .. }),
        "{error:?}"
    );

    let orphaned = DispatchId::new();
    drop(journal.create(orphaned, recycled_pid_owner()).unwrap());
    let error = journal.begin(orphaned).unwrap_err();
    assert!(
        matches!(error, JournalError::AlreadyJournaled { .. }),
        "{error:?}"
    );
}

#[test]
fn the_directory_is_private_and_records_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let journal_dir = dir.path().join("state").join("journal");
    let journal = Journal::open(&journal_dir).unwrap();
    let entry = journal.begin(DispatchId::new()).unwrap();
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&journal_dir), 0o700);
    assert_eq!(mode(&entry.path), 0o600);

    fs::set_permissions(&journal_dir, fs::Permissions::from_mode(0o755)).unwrap();
    Journal::open(&journal_dir).unwrap();
    assert_eq!(mode(&journal_dir), 0o700);
}

#[test]
fn repeated_intents_and_unknown_releases_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let mut entry = journal.begin(DispatchId::new()).unwrap();
    entry.intend(container("a")).unwrap();
    let before = fs::read(&entry.path).unwrap();
    entry.intend(container("a")).unwrap();
    entry.released(&container("never")).unwrap();
    assert_eq!(fs::read(&entry.path).unwrap(), before);
    assert_eq!(entry.outstanding(), &[container("a")]);
}

#[test]
fn a_poisoned_entry_refuses_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let mut entry = journal.begin(DispatchId::new()).unwrap();
    entry.poisoned = true;
    let error = entry.intend(container("a")).unwrap_err();
    assert!(matches!(error, JournalError::Poisoned { .. }), "{error:?}");
    assert!(entry.outstanding().is_empty());
}

#[test]
fn odd_names_are_problems_and_foreign_files_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    fs::write(dir.path().join("stray.jsonl"), "").unwrap();
    let kept = journal.begin(DispatchId::new()).unwrap();
    let scan = journal.records().unwrap();
    assert_eq!(scan.records.len(), 1);
    assert_eq!(scan.records[0].path, kept.path);
    assert_eq!(scan.problems.len(), 1);
    assert!(
        matches!(&scan.problems[0], JournalError::RecordName { path } if path.ends_with("stray.jsonl")),
        "{:?}",
        scan.problems
    );
}

#[test]
fn a_container_names_the_engine_it_lives_on_and_older_records_still_read() {
    let on_podman = Resource::Container {
        name: "stet-dispatch-1".to_owned(),
        engine: Some(crate::runtime::endpoint::EngineLocation {
            engine: "podman".to_owned(),
            host: "unix:///run/podman/podman.sock".to_owned(),
        }),
    };
    let line = serde_json::to_string(&on_podman).unwrap();
    assert_eq!(
        line,
        r#"{"kind":"container","name":"stet-dispatch-1","engine":{"engine":"podman","host":"unix:///run/podman/podman.sock"}}"#
    );
    assert_eq!(serde_json::from_str::<Resource>(&line).unwrap(), on_podman);
    let older: Resource =
        serde_json::from_str(r#"{"kind":"container","name":"stet-dispatch-1"}"#).unwrap();
    assert_eq!(older, container("stet-dispatch-1"));
    assert_eq!(
        serde_json::to_string(&older).unwrap(),
        r#"{"kind":"container","name":"stet-dispatch-1"}"#
    );
}
