#!/usr/bin/env bash
# Instructions per request of /mcp tools/call against REST execute (BENCHMARKS.md, "MCP",
# "Server"): the release server under callgrind (counts instructions, so the figures
# hold on a loaded machine, unlike bench/mcp-server.sh), the same get_current_time
# requests as bench/mcp-server.sh sent one at a time over a keep-alive connection, the
# counters zeroed before and dumped after each phase: REST execute, tools/call in one
# 2025-11-25 session, 2026-07-28 tools/call without a session, and REST again (the
# journal grows during the run, which costs every later request a little: the two REST
# phases bound that drift).
#
# Usage: bench/mcp-callgrind.sh [REQUESTS] [WARMUP]   (defaults: 2000 and 200 per phase).
# Needs valgrind and python3; TOOLSHED_BIN as in bench/mcp-server.sh. Keeps the
# profiles in OUT (default: a temporary folder, printed) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-2000}"
WARM="${2:-200}"
command -v valgrind >/dev/null || { echo "valgrind is missing: install the \`valgrind\` package" >&2; exit 2; }
if [ -n "${TOOLSHED_BIN:-}" ]; then
  BIN="$TOOLSHED_BIN"
else
  cargo build --release -p toolshed >&2
  BIN="$PWD/target/release/toolshed"
fi
CLIENT="$PWD/bench/mcp/callgrind_client.py"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cd "$WORK"
TOOLSHED_RUN_QUOTA="${TOOLSHED_RUN_QUOTA:-off}" TOOLSHED_ADMIN_PASSWORD=bench-password TOOLSHED_LOG=warn TOOLSHED_CACHE_DIR="$WORK/cache" \
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/callgrind.out.%p" \
  "$BIN" serve --addr 127.0.0.1:0 --database-url "sqlite://$WORK/toolshed.db" \
  >"$WORK/serve.out" 2>"$OUT/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 1200); do
  if grep -q "listening on" "$WORK/serve.out" 2>/dev/null; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$OUT/serve.err" >&2; exit 3; fi
  sleep 0.5
done
URL="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$WORK/serve.out" | head -1)"
[ -n "$URL" ] || { echo "the server did not start" >&2; cat "$OUT/serve.err" >&2; exit 3; }
callgrind_control -i on "$SERVER_PID" >/dev/null
python3 "$CLIENT" "$URL" "$SERVER_PID" "$N" "$WARM" rest session stateless rest
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""

echo
echo "| phase | instructions per request |"
echo "| --- | ---: |"
for f in "$OUT"/callgrind.out.*.[0-9]*; do
  phase="$(sed -n 's/^desc: Trigger: dump //p' "$f")"
  total="$(sed -n 's/^summary: //p' "$f")"
  echo "| $phase | $(python3 -c "print(f'{$total / $N:,.0f}')") |"
done
echo
echo "profiles in $OUT (callgrind_annotate --inclusive=yes FILE)"
