#!/usr/bin/env bash
# Compares `stet sanitize` with ripgrep on the same corpora and the same patterns (docs/benchmarks.md).
# Needs hyperfine and ripgrep (apt-get install hyperfine ripgrep).
set -euo pipefail
cd "$(dirname "$0")/../.."
corpus=${1:-target/bench-corpus}
cargo build --release --bin stet --example bench_corpus
[ -f "$corpus/clean.log" ] || ./target/release/examples/bench_corpus "$corpus" 200
patterns=benches/support/ripgrep-patterns.txt
for name in clean dense; do
  file="$corpus/$name.log"
  hyperfine -w 1 -r 8 \
    -n "stet sanitize ($name)" "./target/release/stet sanitize < $file > /dev/null" \
    -n "rg -c ($name, search only)" "rg -c -f $patterns $file > /dev/null; true" \
    -n "rg --passthru -r ($name, rewrite)" "rg --passthru -r '[REDACTED]' -f $patterns $file > /dev/null; true"
done
