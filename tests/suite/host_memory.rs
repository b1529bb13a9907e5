//! stet's own memory at collect time, from the outside (issue 27 part 2, DESIGN §5 row 23): a result
//! of legal size whose bytes are chosen badly (invalid UTF-8, very long lines, many short lines,
//! many small hunks, many files, a file past the review's text bounds) must cost the host tens of
//! MiB, not a multiple of the result. The built stet runs a real headless dispatch under
//! `/usr/bin/time`, and its peak RSS is compared with the same dispatch of a trivial result.

use std::path::Path;
use std::process::Command;

use stet_engine::git::text_budget::MAX_PATCH_BYTES;
use stet_protocol::event::{EventKind, MAX_LISTED};

use super::headless::{Finished, Project, docker_ready, run, scenario};
use super::support::git;

/// The bytes of hostile content the base holds for the result to delete: invalid UTF-8 on two-byte
/// lines, and long lines of lone lead bytes (each becomes a three-byte U+FFFD when converted).
const HOSTILE_BYTES: usize = 48 * 1024 * 1024;

/// The figure docs/security.md states: stet's peak above the same dispatch of a trivial result.
const PEAK_ABOVE_TRIVIAL_BYTES: u64 = 40 * 1024 * 1024;

/// Files the result deletes at once.
const MANY_FILES: usize = 30_000;

/// Lines of the file the result edits every other line of (within the per-file text bounds).
const HUNK_LINES: usize = 30_000;

/// `command` run under `/usr/bin/time`, with stet's peak RSS in bytes.
fn measured(command: Command) -> (Finished, u64) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M", "-o"])
        .arg(report.path())
        .arg(command.get_program())
        .args(command.get_args());
    if let Some(dir) = command.get_current_dir() {
        timed.current_dir(dir);
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => timed.env(key, value),
            None => timed.env_remove(key),
        };
    }
    timed.stdin(std::process::Stdio::null());
    let finished = run(timed);
    let report = std::fs::read_to_string(report.path()).unwrap();
    let kib: u64 = report
        .lines()
        .last()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in {report:?}"));
    (finished, kib * 1024)
}

/// The base's hostile files: `big.bin` ([`HOSTILE_BYTES`]), `many/` ([`MANY_FILES`] files),
/// `hunks.txt` ([`HUNK_LINES`] lines) and `wide.txt` (past the per-file text bound).
fn plant_base(repo: &Path) {
    let mut big = Vec::with_capacity(HOSTILE_BYTES);
    while big.len() < HOSTILE_BYTES {
        if big.len() % (8 * 1024 * 1024) == 0 {
            big.extend(std::iter::repeat_n(0xc3u8, 1024 * 1024));
            big.push(b'\n');
        } else {
            big.extend_from_slice(b"\xff\n");
        }
    }
    std::fs::write(repo.join("big.bin"), &big).unwrap();
    drop(big);
    std::fs::create_dir(repo.join("many")).unwrap();
    for file in 0..MANY_FILES {
        std::fs::write(repo.join("many").join(format!("{file:05}.txt")), "x\n").unwrap();
    }
    std::fs::write(repo.join("hunks.txt"), "a\n".repeat(HUNK_LINES)).unwrap();
    std::fs::write(repo.join("wide.txt"), "wide line\n".repeat(200_000)).unwrap();
    git(repo, &["add", "--all"]);
    git(repo, &["commit", "--quiet", "-m", "Hostile base"]);
    git(repo, &["push", "--quiet", "origin", "main"]);
}

/// The files the `collected` event lists, each with whether it was cut, and how many it counted
/// without listing.
fn collected_files(finished: &Finished) -> (Vec<(String, bool)>, usize) {
    finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Collected {
                files,
                files_not_listed,
                ..
            } => Some((
                files
                    .iter()
                    .map(|file| (file.path.as_str().to_owned(), file.cut))
                    .collect(),
                *files_not_listed,
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no collected event: {}", finished.stderr))
}

fn held_paths(finished: &Finished) -> Vec<(String, String)> {
    finished
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Collected { gate, .. } => Some(
                gate.held
                    .iter()
                    .map(|held| (held.path.as_str().to_owned(), held.rule.as_str().to_owned()))
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

/// The attack: the result deletes 48 MiB of invalid UTF-8 on short and very long lines and 30,000
/// files, edits every other line of a 30,000-line file and appends to a file past the per-file
/// bound. stet's peak stays within [`PEAK_ABOVE_TRIVIAL_BYTES`] of the same dispatch writing one
/// small file; the patch the run record keeps is cut at its budget with a note; the files left out
/// are marked cut; the file past the bound is held, not silently passed by the secret scan.
#[test]
fn a_hostile_result_costs_stet_tens_of_mib_not_a_multiple_of_itself() {
    docker_ready();
    let every_other: String = (0..HUNK_LINES)
        .map(|line| if line % 2 == 0 { "b\n" } else { "a\n" })
        .collect();
    let hostile = scenario(&[
        "remove = \"big.bin\"",
        "remove = \"many\"",
        &format!(
            "write = {{ path = \"hunks.txt\", content = {} }}",
            toml::Value::String(every_other)
        ),
        "append = { path = \"wide.txt\", content = \"one more\\n\" }",
        "finish = \"Tidied.\"",
    ]);
    let project = Project::new(&hostile);
    plant_base(&project.repo);

    let (finished, hostile_peak) = measured(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let dispatch = finished.dispatch();

    project.set_scenario(&scenario(&[
        "write = { path = \"notes/one.md\", content = \"one\\n\" }",
        "finish = \"Wrote one note.\"",
    ]));
    let (trivial, trivial_peak) = measured(project.headless(&[]));
    assert_eq!(trivial.code(), Some(0), "{trivial:#?}");

    eprintln!(
        "stet's peak RSS: hostile result {} KiB, trivial result {} KiB",
        hostile_peak / 1024,
        trivial_peak / 1024
    );
    assert!(
        hostile_peak <= trivial_peak + PEAK_ABOVE_TRIVIAL_BYTES,
        "stet's peak RSS for the hostile result is {hostile_peak} bytes, {} above the trivial result's {trivial_peak} (the bound is {PEAK_ABOVE_TRIVIAL_BYTES})",
        hostile_peak.saturating_sub(trivial_peak)
    );

    let patch = project
        .home
        .state()
        .join("runs")
        .join(dispatch.to_string())
        .join("diff.patch");
    let patch = std::fs::read(&patch).unwrap();
    assert!(
        patch.len() <= MAX_PATCH_BYTES + 8192,
        "the record's patch is {} bytes",
        patch.len()
    );
    let patch = String::from_utf8(patch).expect("the record's patch is UTF-8");
    assert!(
        patch.contains("[stet: the content of big.bin is not shown"),
        "{}",
        &patch[..patch.len().min(2000)]
    );
    assert!(
        patch.contains("[stet: the patch stops here"),
        "the cut is marked"
    );

    let (files, not_listed) = collected_files(&finished);
    assert_eq!(
        files.len(),
        MAX_LISTED,
        "the event lists its first {MAX_LISTED} files"
    );
    assert_eq!(files.len() + not_listed, MANY_FILES + 3);
    let cut = |path: &str| {
        files
            .iter()
            .find(|(name, _)| name == path)
            .unwrap_or_else(|| panic!("{path} not among the collected files"))
            .1
    };
    assert!(cut("big.bin"), "{:?}", &files[..3]);
    // The files past the patch's budget are marked cut; most are past the event's list, so the
    // patch's closing note counts them.
    let not_whole: usize = patch
        .split("; ")
        .find_map(|part| {
            part.strip_suffix(" file(s) are not shown whole, the commit holds all of it]\n")
        })
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count of the files not shown whole"));
    assert!(
        not_whole > 2,
        "the files past the patch's budget are marked cut: {not_whole}"
    );

    let held = held_paths(&finished);
    assert!(
        held.iter()
            .any(|(path, rule)| path == "wide.txt" && rule.contains("not scanned for secrets")),
        "{held:?}"
    );
    assert!(
        !held.iter().any(|(path, _)| path == "big.bin"),
        "a deleted file is not pushed, so it needs no scan: {held:?}"
    );
}
