#!/usr/bin/env bash
# The call pipeline's cost per call in machine instructions (BENCHMARKS.md, "Structure"),
# this tree side by side with a baseline commit, counted by valgrind's callgrind:
# instructions, not seconds, so the figure is the same on a loaded machine.
#
# Each tree runs crates/toolshed-core/examples/pipeline_count.rs (the criterion bench's
# `overhead/full_pipeline` call: validation, a hook per chain level, crumbs to a sink,
# output validation) for 1,000 and for 11,000 calls; the difference over 10,000 is the
# cost of one call, start-up excluded.
#
# Usage: bench/pipeline-instructions.sh [BASE_COMMIT]   (default 94c635a, the tree
# before the structure issue). Needs valgrind. The baseline is checked out in a
# temporary worktree (and removed); the example is copied into it when it lacks one.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-94c635a}"
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 2; }

WORK="$(mktemp -d)"
cleanup() { git worktree remove --force "$WORK/base" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
git worktree add --detach -q "$WORK/base" "$BASE"
mkdir -p "$WORK/base/crates/toolshed-core/examples"
[ -f "$WORK/base/crates/toolshed-core/examples/pipeline_count.rs" ] ||
  cp crates/toolshed-core/examples/pipeline_count.rs "$WORK/base/crates/toolshed-core/examples/"

per_call() { # TREE -> instructions per call
  local tree="$1" a b
  (cd "$tree" && cargo build -q --release -p toolshed-core --example pipeline_count >&2)
  a=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$tree/target/release/examples/pipeline_count" 1000 2>&1 | sed -n 's/.*Collected : //p')
  b=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$tree/target/release/examples/pipeline_count" 11000 2>&1 | sed -n 's/.*Collected : //p')
  echo $(( (b - a) / 10000 ))
}
# The baseline builds in its own target folder (a copy would be stale anyway).
base=$(per_call "$WORK/base")
here=$(per_call "$PWD")
printf 'instructions per pipeline call: base %s = %s, this tree = %s, ratio %s\n' \
  "$BASE" "$base" "$here" "$(python3 -c "print(round($here / $base, 3))")"
