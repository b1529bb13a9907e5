//! The review gate's protected-path matching (issue 27): the cost of matching one changed path
//! against every rule, for the compiled automaton and for the matcher before it (the engine's
//! `forge::protected::reference`, public through its `reference-matcher` feature), as the path
//! grows. Two rule sets: the built-in rules alone, and the built-in rules plus the costliest a
//! repository may add (`MAX_ADDED_RULES` patterns of the shape `**/*a?*a?…z7/**`,
//! `MAX_ADDED_CHARS` characters in all: the old matcher tried the glob against every name of the
//! path, for every rule), matched against paths of 16-character names that none of them matches,
//! 1 to 256 deep.
//!
//! `cargo bench --bench protected`; criterion reports time per path, and the throughput in
//! path bytes.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stet_engine::forge::protected::{
    MAX_ADDED_CHARS, MAX_ADDED_RULES, MAX_PATTERN_CHARS, ProtectedPaths, reference,
};

/// The costliest legal addition: as many patterns as allowed, as long as the size limit lets them
/// be, each `**/`, runs of `*a?` and a tail no name holds, then `/**`, so every name of a path is
/// tried against every rule's glob.
fn costly_patterns() -> Vec<String> {
    let each = (MAX_ADDED_CHARS / MAX_ADDED_RULES).min(MAX_PATTERN_CHARS);
    (0..MAX_ADDED_RULES)
        .map(|n| {
            let tail = format!("z{n:x}/**");
            let mut pattern = "**/".to_owned();
            while pattern.len() + 3 + tail.len() <= each {
                pattern.push_str("*a?");
            }
            pattern + &tail
        })
        .collect()
}

/// A path `depth` names deep, each 16 characters of `a`s and `b`s, ending in `.txt`.
fn path(depth: usize) -> String {
    let mut path: Vec<String> = (0..depth)
        .map(|level| {
            (0..16)
                .map(|i| if (level + i) % 3 == 0 { 'b' } else { 'a' })
                .collect()
        })
        .collect();
    if let Some(last) = path.last_mut() {
        last.push_str(".txt");
    }
    path.join("/")
}

fn bench(c: &mut Criterion) {
    let builtin = ProtectedPaths::default();
    let costly = ProtectedPaths::default()
        .extended(costly_patterns())
        .unwrap_or_else(|error| panic!("{error}"));
    for (name, rules) in [("built-in", &builtin), ("built-in+costly", &costly)] {
        let mut group = c.benchmark_group(format!("protected/{name}"));
        group.sample_size(10);
        for depth in [1, 4, 16, 64, 256] {
            let path = path(depth);
            assert_eq!(
                rules.matching(&path).map(|rule| rule.pattern().to_owned()),
                reference::matching(rules, &path).map(|rule| rule.pattern().to_owned()),
                "the two matchers disagree on {path}"
            );
            group.throughput(Throughput::Bytes(path.len() as u64));
            group.bench_with_input(BenchmarkId::new("compiled", depth), &path, |b, path| {
                b.iter(|| black_box(rules.matching(black_box(path))));
            });
            // The old matcher past 64 names under the costly rules takes seconds per path.
            if name == "built-in" || depth <= 64 {
                group.bench_with_input(BenchmarkId::new("reference", depth), &path, |b, path| {
                    b.iter(|| black_box(reference::matching(rules, black_box(path))));
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
