#!/usr/bin/env bash
# Does pruning stall writers? Execute latency under load while the server prunes a big
# journal (`toolshed serve --retain-runs`), against the same load without a prune.
#
#   1. seed: a server without retention takes `wrk` load on
#      POST /api/v1/registry/tools/get_current_time/execute until the journal holds
#      RUNS finished runs (one durable run per execute);
#   2. baseline: the same load for SECONDS on that server (p99 without a prune);
#   3. the server restarts with `--retain-runs 1s`: its first pass, at start-up, prunes
#      every seeded run in bounded batches while the same load runs for SECONDS
#      (p99 during the prune);
#   4. after the pass has ended: the same load again on that server (p99 after).
# The target (issue 10): p99 during the prune at most 2× the p99 without one.
#
# Usage: bench/prune-load.sh [--database-url URL] [RUNS] [SECONDS] [CONNECTIONS]
#   (defaults: a fresh SQLite file; 300000 runs; 10 s; 32 connections). The prune should
#   outlast the load window: the script says so when it did not (seed more runs).
# Needs wrk, python3 (and psql for a postgres:// URL). Builds the release binary first
# (TOOLSHED_BIN=PATH uses that binary instead, e.g. a debug build to check the script).
set -euo pipefail
cd "$(dirname "$0")/.."
DATABASE_URL=""
if [ "${1:-}" = "--database-url" ]; then
  DATABASE_URL="${2:?--database-url needs a URL}"
  shift 2
fi
RUNS="${1:-300000}"
SECONDS_PER_RUN="${2:-10}"
CONNECTIONS="${3:-32}"

if ! command -v wrk >/dev/null; then
  if command -v apt-get >/dev/null; then
    apt-get install -y wrk >/dev/null
  else
    echo "wrk is missing: install the \`wrk\` package" >&2
    exit 2
  fi
fi
if [ -n "${TOOLSHED_BIN:-}" ]; then
  BIN="$(realpath "$TOOLSHED_BIN")" # a quick check of the script with another build
else
  cargo build --release -p toolshed >&2
  BIN="$PWD/target/release/toolshed"
fi

WORK="$(mktemp -d)"
SERVER_PID=""
SCHEMA=""
cleanup() {
  stop_server
  if [ -n "$SCHEMA" ]; then psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=""
}
trap cleanup EXIT

case "$DATABASE_URL" in
  "") SERVER_DB="sqlite://$WORK/toolshed.db"; DB_LABEL="SQLite (a fresh file)" ;;
  postgres://*|postgresql://*)
    command -v psql >/dev/null || { echo "psql is needed for a PostgreSQL URL" >&2; exit 2; }
    SCHEMA="toolshed_prune_bench_$$"
    psql -q "$DATABASE_URL" -c "CREATE SCHEMA $SCHEMA" >/dev/null
    case "$DATABASE_URL" in *\?*) SEP="&" ;; *) SEP="?" ;; esac
    SERVER_DB="${DATABASE_URL}${SEP}options=-csearch_path%3D${SCHEMA}"
    DB_LABEL="PostgreSQL (schema $SCHEMA)" ;;
  *) echo "--database-url takes a postgres:// URL (the default is a fresh SQLite file)" >&2; exit 2 ;;
esac
cd "$WORK"

start_server() { # extra serve flags...
  : >"$WORK/serve.out"
  TOOLSHED_RUN_QUOTA="${TOOLSHED_RUN_QUOTA:-off}" TOOLSHED_ADMIN_PASSWORD=bench-password TOOLSHED_LOG="${TOOLSHED_LOG:-warn,toolshed_server::retention=info}" \
    "$BIN" serve --addr 127.0.0.1:0 --database-url "$SERVER_DB" "$@" >"$WORK/serve.out" 2>>"$WORK/serve.err" &
  SERVER_PID=$!
  for _ in $(seq 1 400); do
    if grep -q "listening on" "$WORK/serve.out" 2>/dev/null; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$WORK/serve.err" >&2; exit 3; fi
    sleep 0.05
  done
  URL="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$WORK/serve.out" | head -1)"
  [ -n "$URL" ] || { echo "the server did not start" >&2; cat "$WORK/serve.err" >&2; exit 3; }
  TOKEN="$(curl -sf -X POST "$URL/api/v1/auth/login" -H 'content-type: application/json' \
    -d '{"username":"admin","password":"bench-password"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])')"
  export TOKEN
}

cat >"$WORK/execute.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA

load() { # seconds, output file
  wrk -t1 -c"$CONNECTIONS" -d"$1s" --latency -s "$WORK/execute.lua" \
    "$URL/api/v1/registry/tools/get_current_time/execute" >"$2"
}

prunable() { # finished runs in the journal now
  "$BIN" runs prune --database-url "$SERVER_DB" --older-than 0s --dry-run --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"])'
}

summary() { # label, wrk output file
  python3 - "$1" "$2" <<'PY'
import re, sys
label, path = sys.argv[1], sys.argv[2]
text = open(path).read()
def pct(p):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M)
    if not m: return float("nan")
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"| {label} | {rps:,.0f} | {pct(50):.2f} ms | {pct(99):.2f} ms | {non2xx.group(1) if non2xx else 0} |")
PY
}

p99() { python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
v, u = float(m.group(1)), m.group(2)
print(v / 1000 if u == "us" else v * 1000 if u == "s" else v)
PY
}

# 1. Seed.
start_server --retain-runs off # the load without a prune
curl -sf -X POST "$URL/api/v1/registry/tools/get_current_time/execute" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"args":{}}' >/dev/null
SEEDED=0
while [ "$SEEDED" -lt "$RUNS" ]; do
  load 5 "$WORK/seed.txt"
  SEEDED="$(prunable)"
  echo "seeded $SEEDED of $RUNS runs" >&2
done

# 2. Without a prune.
load "$SECONDS_PER_RUN" "$WORK/base.txt"
stop_server
DB_BYTES_BEFORE=""
if [ -z "$DATABASE_URL" ]; then DB_BYTES_BEFORE="$(stat -c %s "$WORK/toolshed.db")"; fi
sleep 1.1 # every seeded run is now older than --retain-runs 1s

# 3. During the prune: it starts with the server, the load right after.
: >"$WORK/serve.err"
start_server --retain-runs 1s --prune-every 1h
LOAD_STARTED_MS="$(date +%s%3N)"
load "$SECONDS_PER_RUN" "$WORK/during.txt"
LOAD_ENDED_MS="$(date +%s%3N)"
for _ in $(seq 1 6000); do
  if grep -q "pruned finished runs" "$WORK/serve.err"; then break; fi
  sleep 0.1
done
PASS="$(grep -m1 "pruned finished runs" "$WORK/serve.err" || true)"
[ -n "$PASS" ] || { echo "the server's prune pass did not report within 10 minutes" >&2; cat "$WORK/serve.err" >&2; exit 1; }

# With TOOLSHED_LOG=…,toolshed_journal::retention=debug, each batch and vacuum step.
grep -E "pruned a batch|returned free pages" "$WORK/serve.err" >&2 || true

# 4. After it.
load "$SECONDS_PER_RUN" "$WORK/after.txt"
DB_BYTES_AFTER=""
if [ -z "$DATABASE_URL" ]; then DB_BYTES_AFTER="$(stat -c %s "$WORK/toolshed.db")"; fi
stop_server

echo "# execute under load while the server prunes, $DB_LABEL, $(nproc) cores, wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s"
echo
echo "| load | req/s | p50 | p99 | non-2xx |"
echo "| --- | ---: | ---: | ---: | ---: |"
summary "without a prune (seeded server)" "$WORK/base.txt"
summary "during the prune of $SEEDED+ runs" "$WORK/during.txt"
summary "after the prune (same server)" "$WORK/after.txt"
echo
echo "prune pass: $(echo "$PASS" | sed 's/.*pruned finished runs//')"
if [ -n "$DB_BYTES_BEFORE" ]; then
  echo "database file: $DB_BYTES_BEFORE bytes before, $DB_BYTES_AFTER after"
fi
python3 - "$(p99 "$WORK/base.txt")" "$(p99 "$WORK/after.txt")" "$(p99 "$WORK/during.txt")" \
  "$PASS" "$LOAD_STARTED_MS" "$LOAD_ENDED_MS" <<'PY'
import re, sys
base, after, during = (float(x) for x in sys.argv[1:4])
took = re.search(r"took_ms=([\d.]+)", sys.argv[4])
window = int(sys.argv[6]) - int(sys.argv[5])
usual = min(base, after)
print(f"p99 during the prune / usual p99 (the lower of without and after): {during:.2f} / {usual:.2f} ms = {during / usual:.2f}× (target ≤ 2×) {'✔' if during <= 2 * usual else '✘'}")
if took and float(took.group(1)) < window:
    print(f"note: the prune took {float(took.group(1)) / 1000:.1f} s of the {window / 1000:.1f} s load window: seed more runs to measure a whole window under pruning")
PY
