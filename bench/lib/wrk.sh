# Shared by bench scripts that drive an execute route with wrk. Source it, then:
#   wrk_execute_script FILE   writes the Lua script that POSTs {"args": {}} with
#                             $TOKEN as the bearer
#   wrk_row WRK_OUTPUT        prints "req/s p50_ms" (fails on any non-2xx answer)

wrk_execute_script() {
  cat >"$1" <<'LUA'
wrk.method = "POST"
wrk.body = '{"args": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
LUA
}

wrk_row() {
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^\s*50%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
v, u = float(m.group(1)), m.group(2)
p50 = v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
assert not non2xx, f"non-2xx answers: {non2xx.group(1)}"
print(f"{rps:.0f} {p50:.3f}")
PY
}
