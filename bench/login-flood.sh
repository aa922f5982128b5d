#!/usr/bin/env bash
# Whole-process figure for the login limits (BENCHMARKS.md, "Login flood"): 500 bad
# logins sent at once to `toolshed serve`, and the server's resident memory before and
# after (VmRSS and its peak VmHWM from /proc), with the answers counted by status.
#
# Usage: bench/login-flood.sh [BINARY...]   (default: target/release/toolshed, built
# first). Give several binaries (e.g. an older build) to compare them in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then
  cargo build --release -p toolshed >&2
  set -- "$PWD/target/release/toolshed"
fi

flood() { # binary
  local bin="$1" work pid url
  work="$(mktemp -d)"
  # One connection per login from one address: lift the cap per address (an older
  # binary ignores the variable), so the figure is the login limits'.
  TOOLSHED_ADMIN_PASSWORD=flood-password TOOLSHED_LOG=warn TOOLSHED_MAX_CONNECTIONS_PER_ADDRESS=1024 \
    "$bin" serve --addr 127.0.0.1:0 --database-url "sqlite://$work/toolshed.db" \
    >"$work/serve.out" 2>"$work/serve.err" &
  pid=$!
  for _ in $(seq 1 200); do
    grep -q "listening on" "$work/serve.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/serve.err" >&2; exit 3; }
    sleep 0.05
  done
  url="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/serve.out" | head -1)"
  python3 - "$url" "$pid" "$bin" <<'PY'
import json, sys, threading, urllib.error, urllib.request
from collections import Counter
url, pid, binary = sys.argv[1], sys.argv[2], sys.argv[3]
def mem():
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            fields[k] = int(v.split()[0]) / 1024
    return fields
before = mem()
statuses = Counter()
retry_after = Counter()
gate = threading.Barrier(500)
def attempt(i):
    body = json.dumps({"username": "admin", "password": f"wrong-{i}"}).encode()
    req = urllib.request.Request(url + "/api/v1/auth/login", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    gate.wait()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            statuses[r.status] += 1
    except urllib.error.HTTPError as e:
        statuses[e.code] += 1
        retry_after[e.headers.get("Retry-After") is not None] += 1
    except Exception as e:  # a refused or reset connection counts too
        statuses[type(e).__name__] += 1
threads = [threading.Thread(target=attempt, args=(i,)) for i in range(500)]
for t in threads: t.start()
for t in threads: t.join()
after = mem()
print(f"| {binary} | {before['VmRSS']:.0f} MiB | {after['VmRSS']:.0f} MiB | {after['VmHWM']:.0f} MiB | "
      f"{dict(sorted(statuses.items(), key=str))} | {retry_after[True]} |")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}

echo "# 500 concurrent bad logins, $(nproc) cores"
echo
echo "| binary | RSS before | RSS after | peak RSS | answers by status | with Retry-After |"
echo "| --- | ---: | ---: | ---: | --- | ---: |"
for bin in "$@"; do flood "$bin"; done
