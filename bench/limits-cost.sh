#!/usr/bin/env bash
# What the trust limits cost (BENCHMARKS.md, "Registry server" and "Sandbox"), whole
# process, two builds side by side in one run, taking turns (A B A B …):
#   1. POST /api/v1/registry/tools/get_current_time/execute (the in-process built-in)
#      under wrk at 32 connections on loopback: req/s and p50;
#   2. the seed's Python hello through POST /api/v1/tools/sandbox/execute, back to back
#      from one keep-alive client: p50.
# Each server runs on a fresh SQLite file, with the run quota off for both (the load
# starts more runs than a tenant's default quota; the older build ignores the variable).
#
# Usage: bench/limits-cost.sh BEFORE_BIN AFTER_BIN [ROUNDS] [SECONDS] [CALLS]
#   (defaults 3 rounds, 8 s of wrk, 200 sandboxed calls per turn)
# Needs root (the sandbox), wrk, python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE="${1:?the build before (a toolshed binary)}"
AFTER="${2:?the build after (a toolshed binary)}"
ROUNDS="${3:-3}"
SECONDS_PER_RUN="${4:-8}"
CALLS="${5:-200}"
[ "$(id -u)" = 0 ] || { echo "run as root: the sandbox maps pool uids and creates cgroups" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
# shellcheck source=bench/lib/wrk.sh
. bench/lib/wrk.sh
WORK="$(mktemp -d)"
trap 'serve_stop; rm -rf "$WORK"' EXIT

wrk_execute_script "$WORK/execute.lua"
cat >"$WORK/sandbox.py" <<'PY'
import http.client, json, statistics, sys, time, urllib.parse
url, token, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
u = urllib.parse.urlparse(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
body = json.dumps({"code": "def run(input):\n    return {\"hello\": input[\"name\"]}\n",
                   "input_json": {"name": "world"}})
headers = {"content-type": "application/json", "authorization": "Bearer " + token}
times = []
for i in range(calls + 10):
    t = time.perf_counter()
    conn.request("POST", "/api/v1/tools/sandbox/execute", body, headers)
    answer = conn.getresponse().read()
    elapsed = (time.perf_counter() - t) * 1000
    data = json.loads(answer)["data"]
    assert data["exit_code"] == 0 and json.loads(data["output"]) == {"hello": "world"}, answer
    if i >= 10:
        times.append(elapsed)
print(f"{statistics.median(times):.3f}")
PY

echo "# limits cost: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds"
echo "# before: $BEFORE"
echo "# after:  $AFTER"
: >"$WORK/rows"
for round in $(seq 1 "$ROUNDS"); do
  for which in before after; do
    bin="$BEFORE"; [ "$which" = after ] && bin="$AFTER"
    serve_start "$bin" "$WORK/$which-$round"
    serve_login
    curl -sf -X POST "$URL/api/v1/registry/tools/get_current_time/execute" -H "authorization: Bearer $TOKEN" \
      -H 'content-type: application/json' -d '{"args":{}}' >/dev/null
    wrk -t1 -c32 -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/execute.lua" \
      "$URL/api/v1/registry/tools/get_current_time/execute" >"$WORK/wrk.txt"
    read -r rps p50 < <(wrk_row "$WORK/wrk.txt")
    sandbox_p50="$(python3 "$WORK/sandbox.py" "$URL" "$TOKEN" "$CALLS")"
    serve_stop
    echo "$round $which $rps $p50 $sandbox_p50" | tee -a "$WORK/rows"
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
for name, col, unit in [("-c32 in-process execute, req/s", 2, ""), ("-c32 in-process execute, p50", 3, " ms"),
                        ("sandbox execute (Python hello), p50", 4, " ms")]:
    b, a = med("before", col), med("after", col)
    print(f"| {name} | {b:,.2f}{unit} | {a:,.2f}{unit} | {a / b:.3f} |")
PY
