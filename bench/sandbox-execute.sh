#!/usr/bin/env bash
# The seed's Python hello through `POST /api/v1/tools/sandbox/execute` (BENCHMARKS.md,
# "Sandboxes started ahead"), whole process: `toolshed serve` on a fresh SQLite file,
# calls one after the other from a keep-alive HTTP client on loopback, timed per call.
# Side by side in one run: a server starting every run's sandbox itself
# (`--sandbox-started-ahead 0`) and one whose next sandbox waits, started ahead (the
# default, 1). Each is measured twice: with a pause after each call (PAUSE_MS, as an
# agent's calls come, between model turns) and back to back. For scale, plain
# `python3 -c` of the same code, unsandboxed, in the same run.
#
# Usage: bench/sandbox-execute.sh [CALLS] [PAUSE_MS]   (defaults 300 and 20)
# Needs root (the sandbox), python3 under /usr/bin, curl. Builds the release binary first
# (TOOLSHED_BIN=… runs an already built one).
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS="${1:-300}"
PAUSE_MS="${2:-20}"
[ "$(id -u)" = 0 ] || { echo "run as root: the sandbox maps pool uids and creates cgroups" >&2; exit 2; }
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
serve_binary
WORK="$(mktemp -d)"
trap 'serve_stop; rm -rf "$WORK"' EXIT

cat >"$WORK/client.py" <<'PY'
import http.client, json, statistics, sys, time, urllib.parse
url, token, calls, pause_ms, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
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
    if pause_ms:
        time.sleep(pause_ms / 1000)
times.sort()
print(f"| {label} | {statistics.median(times):.2f} ms | {times[int(len(times) * 0.9)]:.2f} ms | {times[int(len(times) * 0.99)]:.2f} ms |")
PY

echo "# Python hello, POST /api/v1/tools/sandbox/execute: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r), $CALLS calls per row"
echo
echo "| calls | p50 | p90 | p99 |"
echo "| --- | ---: | ---: | ---: |"
for ahead in 0 1; do
  serve_start "$BIN" "$WORK/ahead-$ahead" --sandbox-started-ahead "$ahead"
  serve_login
  for pause in "$PAUSE_MS" 0; do
    python3 "$WORK/client.py" "$URL" "$TOKEN" "$CALLS" "$pause" \
      "started ahead: $ahead, pause ${pause} ms"
  done
  serve_stop
done
cat >"$WORK/hello.py" <<'PY'
def run(input):
    return {"hello": input["name"]}
import json; print(json.dumps(run({"name": "world"})))
PY
hyperfine -N --warmup 10 --runs "$CALLS" --export-json "$WORK/plain.json" "/usr/bin/python3 $WORK/hello.py" >/dev/null
python3 - "$WORK/plain.json" <<'PY'
import json, statistics, sys
t = sorted(json.load(open(sys.argv[1]))["results"][0]["times"])
ms = [x * 1000 for x in t]
print(f"| plain python3 of the same code, unsandboxed, no server | {statistics.median(ms):.2f} ms | {ms[int(len(ms) * 0.9)]:.2f} ms | {ms[int(len(ms) * 0.99)]:.2f} ms |")
PY
