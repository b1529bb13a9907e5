#!/usr/bin/env bash
# Times the trusted import of two builds of examples/workspace_bench, runs interleaved, on the cached
# 50,000-file repository (docs/benchmarks.md). Before each run the repository's object store is put
# back from a copy taken first (the old one is moved aside, not deleted: see "Deleting" there), so
# every run imports into the same store.
#
#   benches/support/import-compare.sh OLD NEW CACHE WORKSPACE unchanged|edit20|all RUNS
#
# `unchanged` imports WORKSPACE as it is; `edit20` edits 20 files before each pair of runs; `all`
# edits all 50,000 once (every blob is new). Prints one line per run: which build, the import's time.
set -euo pipefail
old=$1 new=$2 cache=$3 workspace=$4 case=$5 runs=$6
repo=$cache/repo scratch=$cache/import-compare
mkdir -p "$scratch/aside"
[ -d "$scratch/objects" ] || cp -a "$repo/.git/objects" "$scratch/objects"
restore() {
  mv "$repo/.git/objects" "$scratch/aside/$(date +%s%N)"
  cp -a "$scratch/objects" "$repo/.git/objects"
  sync
}
once() {
  restore
  "$1" import "$cache" "$workspace" 2>&1 | sed -E 's/.* in ([0-9.]+)(m?s)$/\1 \2/'
}
[ "$case" = all ] && "$new" edit "$workspace" 50000
for _ in $(seq "$runs"); do
  [ "$case" = edit20 ] && "$new" edit "$workspace" 20
  echo "old $(once "$old")"
  echo "new $(once "$new")"
done
