//! Sanitizer throughput (DESIGN §8): clean log text, and the same text with a secret every ~2 KB.
//! `cargo bench --bench sanitize`; corpus size with `STET_BENCH_MB` (default 200).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stet_sanitize::sanitize::{KnownValue, Redactor, TokenSanitizer};

#[path = "support/corpus.rs"]
mod corpus;

/// The chunk size `stet sanitize` reads with.
const CHUNK: usize = 1024 * 1024;

fn streamed(sanitizer: &Arc<TokenSanitizer>, input: &[u8], out: &mut Vec<u8>) -> usize {
    let mut redactor = Redactor::new(Arc::clone(sanitizer));
    let mut written = 0;
    for chunk in input.chunks(CHUNK) {
        redactor.push(chunk, out);
        written += out.len();
        out.clear();
    }
    redactor.finish(out);
    written + out.len()
}

fn bench(c: &mut Criterion) {
    let megabytes: usize = std::env::var("STET_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let size = megabytes * 1024 * 1024;
    let clean = corpus::generate(size, None, 1);
    let dense = corpus::generate(size, Some(2048), 2);
    let shapes_only = Arc::new(TokenSanitizer::new().unwrap_or_else(|e| panic!("{e}")));
    let known: Vec<KnownValue> = ["scoped-credential", "primary-token", "model-key"]
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let value = format!(
                "bench-known-value-{i}-{}",
                corpus::Rng::new(i as u64 + 7).next_u64()
            );
            KnownValue::new(label, &value).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let with_known =
        Arc::new(TokenSanitizer::with_known_values(known).unwrap_or_else(|e| panic!("{e}")));

    let mut group = c.benchmark_group("sanitize");
    group.sample_size(10);
    let mut out = Vec::with_capacity(CHUNK + 8192);
    for (name, input, sanitizer) in [
        ("clean", &clean, &shapes_only),
        ("clean+3 known values", &clean, &with_known),
        ("dense", &dense, &shapes_only),
    ] {
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(streamed(sanitizer, black_box(input), &mut out)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
