#!/usr/bin/env bash
# Whole-process figures for a python: tool through the registry server (BENCHMARKS.md,
# "Warm pools"): POST /api/v1/registry/tools/{name}/execute under wrk on loopback,
# sequentially (1 connection) and at N connections, beside the in-process built-in
# get_current_time on the same server. Tools run sandboxed (the default); with
# --unsandboxed the server is started with `--unsandboxed`, for the side-by-side.
#
# Usage: bench/pool-load.sh [--unsandboxed] [SECONDS] [CONNECTIONS...]
#   (defaults: 10 s; 1 and 16 connections). Needs wrk (Debian `wrk`), python3 under
#   /usr/bin (the sandbox shows only /usr), curl. Builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVE_FLAGS=()
if [ "${1:-}" = "--unsandboxed" ]; then
  SERVE_FLAGS=(--unsandboxed)
  shift
fi
SECONDS_PER_RUN="${1:-10}"
shift || true
CONNECTIONS=("${@:-1}")
[ "$#" -gt 0 ] || CONNECTIONS=(1 16)
command -v wrk >/dev/null || { echo "wrk is missing: install the \`wrk\` package" >&2; exit 2; }
# TOOLSHED_BIN: an already built binary (e.g. another revision's, for a before/after).
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
serve_binary

WORK="$(mktemp -d)"
cleanup() {
  serve_stop
  rm -rf "$WORK"
}
trap cleanup EXIT

# The tool lives outside /tmp so it keeps its own path in the sandbox; any folder works.
TOOL_DIR="$(mktemp -d /var/tmp/toolshed-pool-bench.XXXXXX)"
trap 'cleanup; rm -rf "$TOOL_DIR"' EXIT
cat >"$TOOL_DIR/hello.py" <<'PY'
def hello(name: str = "world") -> dict:
    """Say hello."""
    return {"greeting": f"hello, {name}"}
PY
chmod -R a+rX "$TOOL_DIR"

serve_start "$BIN" "$WORK" --tool-root "$TOOL_DIR" "${SERVE_FLAGS[@]}"
serve_login
curl -sf -X POST "$URL/api/v1/registry/tools" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -d "{\"name\":\"hello\",\"description\":\"\",\"endpoint\":\"python:$TOOL_DIR/hello.py\"}" >/dev/null

cat >"$WORK/execute.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA

# Warm-up: the first call starts a worker; a failing call stops the bench here.
ANSWER="$(curl -sf -X POST "$URL/api/v1/registry/tools/hello/execute" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"args":{}}')"
echo "$ANSWER" | python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; assert d["output"]=={"greeting":"hello, world"}, d' \
  || { echo "the warm-up call failed: $ANSWER" >&2; exit 1; }

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
print(f"| {label} | {float(rps):,.0f} | {pct(50)} | {pct(99)} | {total} | {non2xx.group(1) if non2xx else 0} |")
PY
}

MODE="sandboxed"; [ "${#SERVE_FLAGS[@]}" -gt 0 ] && MODE="unsandboxed"
echo "# python: tool, $MODE, $(nproc) cores, wrk -t1 -d${SECONDS_PER_RUN}s on loopback"
echo
echo "| request | req/s | p50 | p99 | requests | non-2xx |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for c in "${CONNECTIONS[@]}"; do
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/execute.lua" \
    "$URL/api/v1/registry/tools/hello/execute" >"$WORK/py.txt"
  summary "-c$c POST …/hello/execute (python:, $MODE)" "$WORK/py.txt"
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/execute.lua" \
    "$URL/api/v1/registry/tools/get_current_time/execute" >"$WORK/builtin.txt"
  summary "-c$c POST …/get_current_time/execute (in-process)" "$WORK/builtin.txt"
done
