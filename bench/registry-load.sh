#!/usr/bin/env bash
# Whole-process figures for the registry server (BENCHMARKS.md, "Registry server"):
#   1. POST /api/v1/registry/tools/get_current_time/execute under load from wrk (a
#      second process) on loopback, beside GET /healthz on the same server;
#   2. listing 10,000 registered tools: the first page, cold and under repetition.
#
# Usage: bench/registry-load.sh [--database-url URL] [SECONDS] [CONNECTIONS...]
#   (defaults: a fresh SQLite file; 15 s; 32 and 64 connections). With a `postgres://`
#   URL the server runs on a fresh schema of that database, dropped at the end.
# Needs wrk (Debian package `wrk`; installed here when missing and apt is available),
# python3, and psql for a PostgreSQL URL. Builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
DATABASE_URL=""
if [ "${1:-}" = "--database-url" ]; then
  DATABASE_URL="${2:?--database-url needs a URL}"
  shift 2
fi
SECONDS_PER_RUN="${1:-15}"
shift || true
CONNECTIONS=("${@:-32}")
[ "$#" -gt 0 ] || CONNECTIONS=(32 64)

if ! command -v wrk >/dev/null; then
  if command -v apt-get >/dev/null; then
    apt-get install -y wrk >/dev/null
  else
    echo "wrk is missing: install the \`wrk\` package" >&2
    exit 2
  fi
fi
cargo build --release -p toolshed >&2
BIN="$PWD/target/release/toolshed"

WORK="$(mktemp -d)"
SERVER_PID=""
SCHEMA=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  if [ -n "$SCHEMA" ]; then psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

case "$DATABASE_URL" in
  "") SERVER_DB="sqlite://$WORK/toolshed.db"; DB_LABEL="SQLite (a fresh file)" ;;
  postgres://*|postgresql://*)
    command -v psql >/dev/null || { echo "psql is needed for a PostgreSQL URL" >&2; exit 2; }
    SCHEMA="toolshed_bench_$$"
    psql -q "$DATABASE_URL" -c "CREATE SCHEMA $SCHEMA" >/dev/null
    case "$DATABASE_URL" in *\?*) SEP="&" ;; *) SEP="?" ;; esac
    SERVER_DB="${DATABASE_URL}${SEP}options=-csearch_path%3D${SCHEMA}"
    DB_LABEL="PostgreSQL (schema $SCHEMA)" ;;
  *) echo "--database-url takes a postgres:// URL (the default is a fresh SQLite file)" >&2; exit 2 ;;
esac

cd "$WORK"
TOOLSHED_RUN_QUOTA="${TOOLSHED_RUN_QUOTA:-off}" TOOLSHED_ADMIN_PASSWORD=bench-password TOOLSHED_LOG=warn \
  "$BIN" serve --addr 127.0.0.1:0 --database-url "$SERVER_DB" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 200); do
  if grep -q "listening on" "$WORK/serve.out" 2>/dev/null; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$WORK/serve.err" >&2; exit 3; fi
  sleep 0.05
done
URL="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$WORK/serve.out" | head -1)"
[ -n "$URL" ] || { echo "the server did not start" >&2; cat "$WORK/serve.err" >&2; exit 3; }
TOKEN="$(curl -sf -X POST "$URL/api/v1/auth/login" -H 'content-type: application/json' \
  -d '{"username":"admin","password":"bench-password"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])')"
export TOKEN

cat >"$WORK/execute.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
cat >"$WORK/get.lua" <<'LUA'
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA

# One warm-up, so the first requests do not pay for the prepared tool and the pools.
curl -sf -X POST "$URL/api/v1/registry/tools/get_current_time/execute" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"args":{}}' >/dev/null

summary() { # label, wrk output file
  python3 - "$1" "$2" <<'PY'
import re, sys
label, path = sys.argv[1], sys.argv[2]
text = open(path).read()
def pct(p):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M)
    if not m: return "?"
    v, u = float(m.group(1)), m.group(2)
    return "%.2f ms" % (v / 1000 if u == "us" else v * 1000 if u == "s" else v)
rps = re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)
total = re.search(r"(\d+) requests in", text).group(1)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = re.search(r"Socket errors: (.*)", text)
print(f"| {label} | {float(rps):,.0f} | {pct(50)} | {pct(99)} | {total} | {non2xx.group(1) if non2xx else 0} | {errors.group(1) if errors else 'none'} |")
PY
}

echo "# registry server on $DB_LABEL, $(nproc) cores, wrk -t1 -d${SECONDS_PER_RUN}s on loopback (-cN: N connections)"
echo
echo "| request | req/s | p50 | p99 | requests | non-2xx | socket errors |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
for c in "${CONNECTIONS[@]}"; do
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/get.lua" "$URL/healthz" >"$WORK/health.txt"
  summary "-c$c GET /healthz (two database reads)" "$WORK/health.txt"
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/execute.lua" \
    "$URL/api/v1/registry/tools/get_current_time/execute" >"$WORK/execute.txt"
  summary "-c$c POST …/get_current_time/execute (a durable run each)" "$WORK/execute.txt"
done

RUNS="$(curl -sf "$URL/api/v1/runs?agent_id=registry&limit=1" -H "authorization: Bearer $TOKEN" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]))')"
[ "$RUNS" = 1 ] || { echo "no run was recorded" >&2; exit 1; }

# 10,000 tools, registered over the API by 16 concurrent clients.
python3 - "$URL" "$TOKEN" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, token = sys.argv[1], sys.argv[2]
def register(i):
    body = json.dumps({"name": f"tool-{i:05d}", "description": f"bench tool {i}",
                       "endpoint": "builtin:get_current_time", "source": "bench"}).encode()
    req = urllib.request.Request(url + "/api/v1/registry/tools", data=body, method="POST",
                                 headers={"authorization": "Bearer " + token, "content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 201
with ThreadPoolExecutor(16) as pool:
    list(pool.map(register, range(10_000)))
PY
COLD="$(curl -s -o "$WORK/page.json" -w '%{time_total}' "$URL/api/v1/registry/tools?page=1&per_page=20" -H "authorization: Bearer $TOKEN")"
TOTAL="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["meta"]["total"])' "$WORK/page.json")"
[ "$TOTAL" -ge 10000 ] || { echo "expected 10,000 tools, the listing says $TOTAL" >&2; exit 1; }
wrk -t1 -c1 -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/get.lua" "$URL/api/v1/registry/tools?page=1&per_page=20" >"$WORK/list.txt"
summary "GET /api/v1/registry/tools first page of $TOTAL (1 connection)" "$WORK/list.txt"
wrk -t1 -c1 -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/get.lua" "$URL/api/v1/registry/tools?page=400&per_page=20&source=bench" >"$WORK/list400.txt"
summary "GET … page 400 of the source=bench filter (1 connection)" "$WORK/list400.txt"
echo
python3 -c "import sys; print(f'first page, first request after registering: {float(sys.argv[1])*1000:.2f} ms (curl time_total)')" "$COLD"
