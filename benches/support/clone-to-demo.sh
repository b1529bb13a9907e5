#!/usr/bin/env bash
# Clone to first demo, as a newcomer meets it (docs/benchmarks.md): a fresh clone of COMMIT (default
# HEAD) into a scratch directory, the README's build with cargo's timings, then one headless demo
# dispatch. Crates already in ~/.cargo count as downloaded; pass --debug for a debug build.
#
#   benches/support/clone-to-demo.sh [--debug] [COMMIT]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
profile=release
if [ "${1:-}" = "--debug" ]; then
  profile=debug
  shift
fi
commit=${1:-HEAD}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/stet-clone-to-demo.XXXXXX")
git clone -q "$repo" "$scratch/stet"
cd "$scratch/stet"
git checkout -q "$commit"
flags=(--locked --timings)
[ "$profile" = release ] && flags+=(--release)
started=$(date +%s.%N)
cargo build "${flags[@]}" >"$scratch/build.log" 2>&1
built=$(date +%s.%N)
XDG_STATE_HOME="$scratch/state" "target/$profile/stet" demo --headless --pace 0 >"$scratch/demo.jsonl" 2>"$scratch/demo.err"
finished=$(date +%s.%N)
grep -q '"kind":"finished","outcome":"done"' "$scratch/demo.jsonl"
printf 'commit %s, %s: build %.0f s, demo %.1f s\n' "$(git rev-parse --short HEAD)" "$profile" \
  "$(echo "$built - $started" | bc)" "$(echo "$finished - $built" | bc)"
ls -l target/"$profile"/stet target/"$profile"/stet-sandbox 2>/dev/null || ls -l target/"$profile"/stet
echo "timings: $scratch/stet/target/cargo-timings/cargo-timing.html"
