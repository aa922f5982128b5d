#!/usr/bin/env bash
# The MCP client benchmark (BENCHMARKS.md, "MCP client"): a `tools/call` round trip over
# stdio to server-everything's `echo`, after the handshake, in one run:
#   - ours: toolshed's client (crates/toolshed-mcp/examples/mcp_bench_client.rs, release);
#   - sdk:  the official TypeScript SDK client (bench/mcp/sdk_client.mjs), same server;
#   - raw:  the same JSON-RPC line written on the child's stdin and the answer read back,
#           the floor; our overhead is ours minus raw (p50).
# Targets: ours p50 <= sdk p50, and our overhead <= 0.3 ms. The sandbox is not used (the
# developer opt-in `unsandboxed`): this measures the client, not the sandbox.
#
# Usage: bench/mcp-client.sh [N]   (default 2000 calls each, after 200 warm-up calls).
# Needs `npm ci --prefix tests/mcp`.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-2000}"
modules=tests/mcp/node_modules
[ -d "$modules/@modelcontextprotocol/server-everything" ] || {
  echo "run \`npm ci --prefix tests/mcp\` first" >&2
  exit 2
}
node="$(command -v node)"
server="$PWD/$modules/@modelcontextprotocol/server-everything/dist/index.js"
cargo build --release -p toolshed-mcp --example mcp_bench_client >&2
bin=target/release/examples/mcp_bench_client

raw="$("$bin" raw "$n" "$node" "$server")"
ours="$("$bin" client "$n" "$node" "$server")"
sdk="$("$node" bench/mcp/sdk_client.mjs "$n" "$node" "$server")"

python3 - "$raw" "$ours" "$sdk" "$node" <<'PY'
import json, sys
raw, ours, sdk = (json.loads(a) for a in sys.argv[1:4])
print(f"MCP client: tools/call echo over stdio, server-everything on {sys.argv[4]}, {ours['n']} calls each")
for name, r in (("raw pipe", raw), ("toolshed", ours), ("TS SDK", sdk)):
    print(f"  {name:9} p50 {r['p50_us'] / 1000:7.3f} ms   p99 {r['p99_us'] / 1000:7.3f} ms   mean {r['mean_us'] / 1000:7.3f} ms")
ratio = ours["p50_us"] / sdk["p50_us"]
overhead = (ours["p50_us"] - raw["p50_us"]) / 1000
print(f"  toolshed / SDK p50: {ratio:.2f}  (target <= 1.00: {'met' if ratio <= 1 else 'MISSED'})")
print(f"  toolshed overhead over the raw pipe, p50: {overhead:.3f} ms  (target <= 0.300: {'met' if overhead <= 0.3 else 'MISSED'})")
PY
