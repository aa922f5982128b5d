#!/usr/bin/env bash
# Whole-process figures for the sandbox (BENCHMARKS.md, "Sandbox"), side by side in one
# run:
#   1. /bin/true: plain fork+exec, in the sandbox (toolshed-sandbox-exec, as Cargo
#      builds it and as a static binary, the build a deployment installs: see
#      ARCHITECTURE.md, "The supervisor binary"), and in bubblewrap with a comparable set
#      of namespaces and mounts;
#   2. Python hello: unsandboxed and in the sandbox;
#   3. the same two in one long-lived supervisor (examples/starts.rs), as a server runs
#      them: the supervisor's own start-up is then paid once, not per run; each run
#      starting its own sandbox, then taking one started ahead (back to back, and with
#      a pause after each pair).
# Each comparison is run by hyperfine (medians, one command after the other) and, when
# farm-bench is installed, again as alternating pairs (A B A B …) for the ratio.
#
# Usage: bench/sandbox.sh [RUNS]   (default 300 for hyperfine; farm-bench takes 100)
# Needs root (the sandbox maps pool uids and creates cgroups), hyperfine and bubblewrap
# (Debian packages `hyperfine`, `bubblewrap`; installed here when missing and apt is
# available), python3. Builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-300}"

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; then
    :
  else
    echo "missing ${need[*]}: install the Debian packages ${need[*]}" >&2
    exit 2
  fi
fi
[ "$(id -u)" = 0 ] || { echo "run as root: the sandbox maps pool uids and creates cgroups" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
WORKDIR_BIN="$WORK/bin"
mkdir -p "$WORKDIR_BIN"

# The binary alone, as a deployment builds it: built with the example, it would get
# the example's dev-dependency features too (tokio's multi-thread runtime, which links
# libm), about 3 % more per start.
cargo build --release -p toolshed-sandbox --bin toolshed-sandbox-exec >&2
SANDBOX="$WORKDIR_BIN/toolshed-sandbox-exec"
cp target/release/toolshed-sandbox-exec "$SANDBOX"
# The static build: `crt-static` for this binary's own link only (`cargo rustc` passes
# the flag to the final crate; the dependencies and proc-macros build as usual).
cargo rustc --release -p toolshed-sandbox --bin toolshed-sandbox-exec -- -C target-feature=+crt-static >&2
STATIC="$WORKDIR_BIN/toolshed-sandbox-exec-static"
cp target/release/toolshed-sandbox-exec "$STATIC"
cargo build --release -p toolshed-sandbox --example starts >&2
STARTS="$PWD/target/release/examples/starts"
PY=/usr/bin/python3
# bubblewrap with what the sandbox sets up that bubblewrap can: new user, mount, pid,
# net, ipc, uts and cgroup namespaces, a non-root uid, no capabilities, read-only /usr
# and its links, a fresh /proc, a minimal /dev, size-limited tmpfs /tmp and working
# folder, an empty environment, death with the parent. (No cgroup limits, Landlock or
# seccomp: bubblewrap has none of its own.)
BWRAP="bwrap --unshare-all --die-with-parent --uid 1000 --gid 1000 --cap-drop ALL \
--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin \
--proc /proc --dev /dev --size 67108864 --tmpfs /tmp --size 67108864 --tmpfs /work --chdir /work --clearenv"


echo "== machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
"$SANDBOX" -- /bin/true || { echo "the sandbox cannot run here: see \`toolshed sandbox check\`" >&2; exit 3; }

summary() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
results = json.load(open(sys.argv[1]))["results"]
base = None
print(f"{'command':<34} {'p50':>10} {'mean':>10} {'min':>10} {'p90':>10}")
for r in results:
    t = sorted(r["times"])
    p50 = statistics.median(t) * 1000
    p90 = t[int(len(t) * 0.9)] * 1000
    name = r["command"]
    name = {"/bin/true": "fork+exec /bin/true"}.get(name, name)
    if name.startswith("bwrap"):
        name = "bubblewrap " + name.split()[-1]
    elif "toolshed-sandbox-exec-static" in name:
        name = "sandbox (static) " + " ".join(name.split()[2:])
    elif "toolshed-sandbox-exec" in name:
        name = "sandbox " + " ".join(name.split()[2:])
    print(f"{name[:34]:<34} {p50:7.2f} ms {r['mean']*1000:7.2f} ms {min(t)*1000:7.2f} ms {p90:7.2f} ms")
EOF
}

echo
echo "== /bin/true: fork+exec, sandbox, sandbox (static), bubblewrap (hyperfine, $RUNS runs each)"
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$WORK/true.json" \
  /bin/true "$SANDBOX -- /bin/true" "$STATIC -- /bin/true" "$BWRAP /bin/true" >/dev/null
summary "$WORK/true.json"

echo
echo "== Python hello: unsandboxed, sandbox, sandbox (static) (hyperfine, $RUNS runs each)"
hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$WORK/py.json" \
  "$PY -c \"print('hello')\"" "$SANDBOX -- $PY -c \"print('hello')\"" "$STATIC -- $PY -c \"print('hello')\"" >/dev/null
summary "$WORK/py.json"

echo
echo "== in one long-lived supervisor (as a server's dispatcher): Sandbox::run and a plain spawn taking turns"
echo "   every run starting its own sandbox (started_ahead 0), back to back:"
STARTS_AHEAD=0 "$STARTS" "$RUNS" /bin/true
STARTS_AHEAD=0 "$STARTS" 200 "$PY" -c "print('hello')"
echo "   with a sandbox started ahead (the default, 1), back to back (the next one is started"
echo "   while the plain spawn runs, so a start often finds none yet):"
STARTS_SPLIT=1 "$STARTS" "$RUNS" /bin/true
STARTS_SPLIT=1 "$STARTS" 200 "$PY" -c "print('hello')"
echo "   with a sandbox started ahead and a 20 ms pause after each pair (as an agent's calls come):"
STARTS_SPLIT=1 STARTS_GAP_MS=20 "$STARTS" "$RUNS" /bin/true
STARTS_SPLIT=1 STARTS_GAP_MS=20 "$STARTS" 200 "$PY" -c "print('hello')"

if command -v farm-bench >/dev/null; then
  echo
  echo "== paired: sandbox vs bubblewrap, /bin/true (farm-bench, 100 pairs)"
  farm-bench -n 100 --warmup 5 --vs "$BWRAP /bin/true" -- "$SANDBOX" -- /bin/true
  echo
  echo "== paired: sandbox (static) vs bubblewrap, /bin/true (farm-bench, 100 pairs)"
  farm-bench -n 100 --warmup 5 --vs "$BWRAP /bin/true" -- "$STATIC" -- /bin/true
  echo
  echo "== paired: sandboxed vs unsandboxed Python hello (farm-bench, 100 pairs)"
  farm-bench -n 100 --warmup 5 --vs "$PY -c \"print('hello')\"" -- "$SANDBOX" -- "$PY" -c "print('hello')"
  echo
  echo "== paired: sandboxed (static) vs unsandboxed Python hello (farm-bench, 100 pairs)"
  farm-bench -n 100 --warmup 5 --vs "$PY -c \"print('hello')\"" -- "$STATIC" -- "$PY" -c "print('hello')"
fi
