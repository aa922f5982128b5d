# Shared by bench scripts: start `toolshed serve` on a fresh SQLite file and log in.
# Source it, then:
#   serve_binary                               sets BIN: $TOOLSHED_BIN (an already built
#                                              binary, e.g. another revision's), else the
#                                              release build, made first
#   serve_start BIN WORKDIR [SERVE FLAGS...]   sets SERVER_PID and URL (exits 3 when the
#                                              server does not come up)
#   serve_login                                sets and exports TOKEN (the admin's)
#   serve_stop                                 stops the server started last
# The admin password is `bench-password`; logs go to WORKDIR/serve.{out,err}.

serve_binary() {
  if [ -n "${TOOLSHED_BIN:-}" ]; then
    BIN="$TOOLSHED_BIN"
  else
    cargo build --release -p toolshed >&2
    BIN="$PWD/target/release/toolshed"
  fi
}

serve_start() {
  local bin="$1" work="$2"
  shift 2
  mkdir -p "$work"
  # Load benchmarks start more runs than a tenant's default quota (100000/1d) allows.
  TOOLSHED_RUN_QUOTA="${TOOLSHED_RUN_QUOTA:-off}" \
  TOOLSHED_ADMIN_PASSWORD=bench-password TOOLSHED_LOG=warn TOOLSHED_CACHE_DIR="$work/cache" \
    "$bin" serve --addr 127.0.0.1:0 --database-url "sqlite://$work/toolshed.db" "$@" \
    >"$work/serve.out" 2>"$work/serve.err" &
  SERVER_PID=$!
  for _ in $(seq 1 200); do
    if grep -q "listening on" "$work/serve.out" 2>/dev/null; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$work/serve.err" >&2; exit 3; fi
    sleep 0.05
  done
  URL="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/serve.out" | head -1)"
  [ -n "$URL" ] || { echo "the server did not start" >&2; cat "$work/serve.err" >&2; exit 3; }
}

serve_login() {
  TOKEN="$(curl -sf -X POST "$URL/api/v1/auth/login" -H 'content-type: application/json' \
    -d '{"username":"admin","password":"bench-password"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["token"])')"
  export TOKEN
}

serve_stop() {
  if [ -n "${SERVER_PID:-}" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
