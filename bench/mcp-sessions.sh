#!/usr/bin/env bash
# Whole-process figure for /mcp with a 2025-11-25 session per connection (BENCHMARKS.md,
# "The direct path in a session"): sixteen sessions, one per wrk thread (-t16 -c16),
# each calling the in-process built-in get_current_time as a durable run, beside REST
# execute of the same tool with the same wrk settings, on the same server in one run.
# bench/mcp-server.sh shares one session among all connections; this one does not.
#
# Usage: bench/mcp-sessions.sh [SECONDS]   (default 10). Needs wrk, curl, python3.
# TOOLSHED_BIN: an already built binary (else the release build is made first).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN="${1:-10}"
command -v wrk >/dev/null || { echo "wrk is missing: install the \`wrk\` package" >&2; exit 2; }
# shellcheck source=bench/lib/serve.sh
. bench/lib/serve.sh
serve_binary
W="$(mktemp -d)"
trap 'serve_stop; rm -rf "$W"' EXIT
serve_start "$BIN" "$W"
serve_login
SIDS=""
for _ in $(seq 1 16); do
  curl -sf -D "$W/h" -o /dev/null -X POST "$URL/mcp" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
  S="$(sed -n 's/^mcp-session-id: *\([^[:space:]]*\).*/\1/Ip' "$W/h" | head -1)"
  [ -n "$S" ] || { echo "no session id" >&2; exit 1; }
  curl -sf -o /dev/null -X POST "$URL/mcp" -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H "mcp-session-id: $S" -H 'mcp-protocol-version: 2025-11-25' \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  SIDS="$SIDS $S"
done
export SIDS
cat >"$W/rest.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
# Each wrk thread gets one session (setup runs once per thread, in order).
cat >"$W/mcp.lua" <<'LUA'
local sids = {}
for s in string.gmatch(os.getenv("SIDS"), "%S+") do table.insert(sids, s) end
local k = 0
setup = function(thread) k = k + 1; thread:set("sid", sids[k]) end
init = function() n = 0 end
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":{"name":"get_current_time","arguments":{}}}'
  return wrk.format("POST", nil, {["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream", ["Authorization"] = "Bearer " .. os.getenv("TOKEN"),
    ["Mcp-Session-Id"] = sid, ["Mcp-Protocol-Version"] = "2025-11-25"}, body)
end
LUA
# Warm-up, and a check that both calls really run.
curl -sf -o /dev/null -X POST "$URL/api/v1/registry/tools/get_current_time/execute" \
  -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"args":{}}' \
  || { echo "the warm-up REST call failed" >&2; exit 1; }
wrk -t16 -c16 -d"${SECONDS_PER_RUN}s" -s "$W/rest.lua" "$URL/api/v1/registry/tools/get_current_time/execute" >"$W/rest.txt"
wrk -t16 -c16 -d"${SECONDS_PER_RUN}s" -s "$W/mcp.lua" "$URL/mcp" >"$W/mcp.txt"
if grep -q "Non-2xx" "$W/mcp.txt" "$W/rest.txt"; then
  echo "some requests failed:" >&2; grep -H "Non-2xx" "$W/mcp.txt" "$W/rest.txt" >&2; exit 1
fi
python3 - "$W/rest.txt" "$W/mcp.txt" <<'PY'
import re, sys
rest, mcp = (float(re.search(r"Requests/sec:\s+([\d.]+)", open(p).read()).group(1)) for p in sys.argv[1:3])
print(f"-t16 -c16: REST execute {rest:,.0f} req/s; /mcp tools/call, a session per connection {mcp:,.0f} req/s; MCP/REST = {mcp / rest:.0%}")
PY
