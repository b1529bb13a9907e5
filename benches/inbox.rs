//! What listing an inbox costs (issue 36, DESIGN §8): `Inbox::load_within` under the default
//! limits over a typical inbox (1,000 briefs of 1 KB), one at its byte limit (1,000 briefs of
//! 16 KiB) and the hostile inbox (3,000 briefs of about 1 MB, refused before any is read),
//! with the peak RSS (VmHWM) of each listing printed before criterion's groups.
//! `cargo bench --bench inbox`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::Criterion;
use stet_engine::inbox::{Inbox, InboxLimits};

/// One inbox to list: its name in the report, how many briefs, how large each.
struct Case {
    name: &'static str,
    briefs: usize,
    bytes: usize,
}

const CASES: [Case; 3] = [
    Case {
        name: "1000 briefs of 1 KB",
        briefs: 1000,
        bytes: 1000,
    },
    Case {
        name: "1000 briefs of 16 KiB (at the limits)",
        briefs: 1000,
        bytes: 16 * 1024 - 16,
    },
    Case {
        name: "3000 briefs of 1 MB (refused)",
        briefs: 3000,
        bytes: 1_000_000,
    },
];

/// A brief of about `bytes` bytes that the parser accepts.
fn brief_of_about(bytes: usize) -> String {
    let head = "title = \"A brief\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"";
    format!("{head}{}\"\n", "x".repeat(bytes - head.len() - 2))
}

/// An inbox of `case.briefs` hard links to one brief file (the disk holds one copy; each link is a
/// regular file of the brief's size to whoever lists the inbox).
fn inbox(root: &Path, case: &Case) -> PathBuf {
    let dir = root.join(case.name.replace(' ', "-"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let source = root.join(format!("{}.source", case.briefs * case.bytes));
    std::fs::write(&source, brief_of_about(case.bytes)).unwrap_or_else(|e| panic!("{e}"));
    for index in 0..case.briefs {
        std::fs::hard_link(&source, dir.join(format!("b{index:04}.toml")))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    dir
}

/// Lists `dir` once; how many briefs it read, or 0 when it was refused.
fn list(dir: &Path) -> usize {
    Inbox::load_within(dir, &InboxLimits::default()).map_or(0, |inbox| inbox.entries().len())
}

/// This process's peak resident memory in KiB (VmHWM), reset to the present first by writing 5 to
/// `/proc/self/clear_refs`.
fn peak_kib_of(work: impl FnOnce() -> usize) -> (usize, u64) {
    std::fs::write("/proc/self/clear_refs", "5").unwrap_or_else(|e| panic!("{e}"));
    let listed = work();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_else(|e| panic!("{e}"));
    let peak = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/self/status"));
    (listed, peak)
}

fn main() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dirs: Vec<(&Case, PathBuf)> = CASES
        .iter()
        .map(|case| (case, inbox(root.path(), case)))
        .collect();
    for (case, dir) in &dirs {
        let (listed, peak) = peak_kib_of(|| list(dir));
        println!(
            "inbox, {}: {listed} briefs listed, peak RSS {:.1} MiB",
            case.name,
            peak as f64 / 1024.0
        );
    }
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("inbox listing");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for (case, dir) in &dirs {
        group.bench_function(case.name, |b| b.iter(|| black_box(list(dir))));
    }
    group.finish();
    c.final_summary();
}
