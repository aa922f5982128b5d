#!/usr/bin/env bash
# A keyed durable call's cost in machine instructions (BENCHMARKS.md, "Durable runs"),
# counted by valgrind's callgrind: instructions, not seconds, so the figure is the
# same on a loaded machine and on a disk whose fsync is fast or slow.
#
# Runs crates/toolshed-runtime/examples/keyed_count.rs (keyed calls of a one-line tool
# through the durable runtime on a SQLite journal: the `keyed_ratio` bench's call) for
# 200 and for 1,200 calls; the difference over 1,000 is the cost of one call, start-up
# excluded. Every thread counts: the journal's writer and the crumb writer too.
#
# Usage: bench/keyed-instructions.sh   (needs valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 2; }
cargo build -q --release -p toolshed-runtime --example keyed_count >&2
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/keyed_count "$1" 2>&1 |
    sed -n 's/.*Collected : //p'
}
a=$(count 200)
b=$(count 1200)
echo "instructions per keyed durable call: $(( (b - a) / 1000 ))"
