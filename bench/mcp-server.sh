#!/usr/bin/env bash
# Whole-process figures for /mcp (BENCHMARKS.md, "MCP server"): tools/call of the
# in-process built-in get_current_time over Streamable HTTP, every call a durable run,
# under wrk from a second process, beside POST /api/v1/registry/tools/{id}/execute of
# the same tool on the same server in the same run. Target: MCP >= 70% of REST.
#
# Two kinds of MCP requests: sharing one 2025-11-25 session (an `initialize` first, then
# its Mcp-Session-Id on every tools/call), and 2026-07-28 requests with no session (the
# protocol metadata on each); a session's answer is an SSE stream of one message, a
# 2026-07-28 answer one JSON body, and each call is a durable run (its answer names the
# run).
#
# Usage: bench/mcp-server.sh [SECONDS] [CONNECTIONS...]   (defaults: 10 s; 1 and 16).
# Needs wrk (Debian `wrk`), curl, python3. Builds the release binary first
# (TOOLSHED_BIN: an already built one).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN="${1:-10}"
shift || true
CONNECTIONS=("${@:-1}")
[ "$#" -gt 0 ] || CONNECTIONS=(1 16)
command -v wrk >/dev/null || { echo "wrk is missing: install the \`wrk\` package" >&2; exit 2; }
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
serve_binary

WORK="$(mktemp -d)"
cleanup() {
  serve_stop
  rm -rf "$WORK"
}
trap cleanup EXIT

serve_start "$BIN" "$WORK"
serve_login

# One session for every MCP request.
curl -sf -D "$WORK/init.headers" -o "$WORK/init.body" -X POST "$URL/mcp" \
  -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
SESSION="$(sed -n 's/^mcp-session-id: *\([^[:space:]]*\).*/\1/Ip' "$WORK/init.headers" | head -1)"
[ -n "$SESSION" ] || { echo "no session: $(cat "$WORK/init.headers" "$WORK/init.body")" >&2; exit 1; }
export SESSION
curl -sf -o /dev/null -X POST "$URL/mcp" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -H 'accept: application/json, text/event-stream' -H "mcp-session-id: $SESSION" -H 'mcp-protocol-version: 2025-11-25' \
  -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'

CALL='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_current_time","arguments":{}}}'
# Warm-up, and a check that the call really runs: a failing call stops the bench here.
ANSWER="$(curl -sf -X POST "$URL/mcp" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -H 'accept: application/json, text/event-stream' -H "mcp-session-id: $SESSION" -H 'mcp-protocol-version: 2025-11-25' -d "$CALL")"
echo "$ANSWER" | python3 -c '
import json, sys
text = sys.stdin.read()
msgs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip()] or [json.loads(text)]
r = [m for m in msgs if m.get("id") == 1][0]["result"]
assert not r.get("isError") and r["_meta"]["toolshed/run_id"], r' \
  || { echo "the warm-up MCP call failed: $ANSWER" >&2; exit 1; }
CALL2026='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_current_time","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}'
ANSWER="$(curl -sf -X POST "$URL/mcp" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' \
  -H 'mcp-method: tools/call' -H 'mcp-name: get_current_time' -d "$CALL2026")"
echo "$ANSWER" | python3 -c '
import json, sys
text = sys.stdin.read()
msgs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip()] or [json.loads(text)]
r = [m for m in msgs if m.get("id") == 1][0]["result"]
assert not r.get("isError") and r["_meta"]["toolshed/run_id"], r' \
  || { echo "the warm-up 2026-07-28 MCP call failed: $ANSWER" >&2; exit 1; }
REST="$(curl -sf -X POST "$URL/api/v1/registry/tools/get_current_time/execute" -H "authorization: Bearer $TOKEN" \
  -H 'content-type: application/json' -d '{"args":{}}')" || { echo "the warm-up REST call failed" >&2; exit 1; }

cat >"$WORK/rest.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
cat >"$WORK/mcp.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
wrk.headers["Mcp-Session-Id"] = os.getenv("SESSION")
wrk.headers["Mcp-Protocol-Version"] = "2025-11-25"
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":{"name":"get_current_time","arguments":{}}}'
  return wrk.format(nil, nil, nil, body)
end
LUA

# The 2026-07-28 era: no session, the protocol metadata on each request (the way a
# stateless client or a load balancer without session affinity calls /mcp).
cat >"$WORK/mcp2026.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
wrk.headers["Mcp-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "get_current_time"
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":{"name":"get_current_time","arguments":{},' ..
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}'
  return wrk.format(nil, nil, nil, body)
end
LUA

summary() { # label, wrk output file; prints the table row, and req/s to fd 3
  python3 - "$1" "$2" <<'PY'
import re, sys
label, path = sys.argv[1], sys.argv[2]
text = open(path).read()
def pct(p):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M)
    if not m: return "?"
    v, u = float(m.group(1)), m.group(2)
    return "%.2f ms" % (v / 1000 if u == "us" else v * 1000 if u == "s" else v)
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
total = re.search(r"(\d+) requests in", text).group(1)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"| {label} | {rps:,.0f} | {pct(50)} | {pct(99)} | {total} | {non2xx.group(1) if non2xx else 0} |")
open(path + ".rps", "w").write(str(rps))
PY
}

echo "# tools/call vs REST execute of get_current_time (in-process), $(nproc) cores, wrk -t1 -d${SECONDS_PER_RUN}s on loopback"
echo
echo "| request | req/s | p50 | p99 | requests | non-2xx |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
RATIOS=()
for c in "${CONNECTIONS[@]}"; do
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/rest.lua" \
    "$URL/api/v1/registry/tools/get_current_time/execute" >"$WORK/rest-$c.txt"
  summary "-c$c POST …/get_current_time/execute (REST)" "$WORK/rest-$c.txt"
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/mcp.lua" "$URL/mcp" >"$WORK/mcp-$c.txt"
  summary "-c$c POST /mcp tools/call (MCP, one session)" "$WORK/mcp-$c.txt"
  wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/mcp2026.lua" "$URL/mcp" >"$WORK/mcp2026-$c.txt"
  summary "-c$c POST /mcp tools/call (MCP 2026-07-28, no session)" "$WORK/mcp2026-$c.txt"
  RATIOS+=("-c$c: MCP/REST = $(python3 -c "print(f'{$(cat "$WORK/mcp-$c.txt.rps")/$(cat "$WORK/rest-$c.txt.rps"):.0%}')") (one session), $(python3 -c "print(f'{$(cat "$WORK/mcp2026-$c.txt.rps")/$(cat "$WORK/rest-$c.txt.rps"):.0%}')") (2026-07-28, no session)")
done
echo
printf '%s\n' "${RATIOS[@]}"
