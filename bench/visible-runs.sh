#!/usr/bin/env bash
# What recording a call before it executes costs (BENCHMARKS.md, "Registry server"), whole
# process, two builds side by side in one run, taking turns (A B A B …): the in-process
# built-in get_current_time under wrk at 32 connections on loopback, registered twice:
#   1. as the stdlib has it (`effects: none`: one journal write when it ends);
#   2. as `clock-with-effects`, the same built-in declared `effects: sandbox` (a run in
#      the journal before it executes, then its result: the path every call with
#      effects takes since calls are visible while they run).
# Each server runs on a fresh SQLite file, with the run quota off.
#
# Usage: bench/visible-runs.sh BEFORE_BIN AFTER_BIN [ROUNDS] [SECONDS]
#   (defaults 3 rounds, 8 s of wrk per measurement)
# Needs wrk, python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE="${1:?the build before (a toolshed binary)}"
AFTER="${2:?the build after (a toolshed binary)}"
ROUNDS="${3:-3}"
SECONDS_PER_RUN="${4:-8}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
# shellcheck source=bench/lib/wrk.sh
. bench/lib/wrk.sh
WORK="$(mktemp -d)"
trap 'serve_stop; rm -rf "$WORK"' EXIT

wrk_execute_script "$WORK/execute.lua"
measure() { # tool -> "req/s p50"
  curl -sf -X POST "$URL/api/v1/registry/tools/$1/execute" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' -d '{"args":{}}' >/dev/null
  wrk -t1 -c32 -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/execute.lua" \
    "$URL/api/v1/registry/tools/$1/execute" >"$WORK/wrk.txt"
  wrk_row "$WORK/wrk.txt"
}

echo "# visible runs: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds"
echo "# before: $BEFORE"
echo "# after:  $AFTER"
: >"$WORK/rows"
for round in $(seq 1 "$ROUNDS"); do
  for which in before after; do
    bin="$BEFORE"; [ "$which" = after ] && bin="$AFTER"
    serve_start "$bin" "$WORK/$which-$round"
    serve_login
    curl -sf -X POST "$URL/api/v1/registry/tools" -H "authorization: Bearer $TOKEN" \
      -H 'content-type: application/json' \
      -d '{"name":"clock-with-effects","description":"The time, declared with effects.","endpoint":"builtin:get_current_time","effects":"sandbox"}' >/dev/null
    read -r none_rps none_p50 < <(measure get_current_time)
    read -r fx_rps fx_p50 < <(measure clock-with-effects)
    serve_stop
    echo "$round $which $none_rps $none_p50 $fx_rps $fx_p50" | tee -a "$WORK/rows"
  done
done
python3 - "$WORK/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(which, col):
    return statistics.median(float(r[col]) for r in rows if r[1] == which)
print()
print("| measurement | before | after | after / before |")
print("| --- | ---: | ---: | ---: |")
for name, col, unit in [("-c32 execute, effects: none, req/s", 2, ""), ("-c32 execute, effects: none, p50", 3, " ms"),
                        ("-c32 execute, effects: sandbox, req/s", 4, ""), ("-c32 execute, effects: sandbox, p50", 5, " ms")]:
    b, a = med("before", col), med("after", col)
    print(f"| {name} | {b:,.2f}{unit} | {a:,.2f}{unit} | {a / b:.3f} |")
PY
