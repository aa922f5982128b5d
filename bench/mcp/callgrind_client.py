"""The client of bench/mcp-callgrind.sh: the requests of bench/mcp-server.sh, one at a
time over one keep-alive connection, in phases (`rest`, `session`, `stateless`); before
each phase's measured requests the server's callgrind counters are zeroed, after them
dumped under the phase's name (PID 0: no callgrind, just the requests).

Usage: callgrind_client.py URL PID REQUESTS WARMUP [PHASE...]"""
import http.client, json, subprocess, sys, time, urllib.parse

url, pid, n, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
phases = sys.argv[5:] or ["rest", "session", "stateless"]
u = urllib.parse.urlparse(url)

def conn():
    return http.client.HTTPConnection(u.hostname, u.port, timeout=600)

c = conn()
def post(path, body, headers):
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    return r.status, r.getheaders(), data

st, _, data = post("/api/v1/auth/login", json.dumps({"username": "admin", "password": "bench-password"}),
                   {"content-type": "application/json"})
assert st == 200, (st, data)
token = json.loads(data)["data"]["token"]
auth = {"authorization": "Bearer " + token}
mcp_h = dict(auth, **{"content-type": "application/json", "accept": "application/json, text/event-stream"})

st, hdrs, data = post("/mcp", json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}), mcp_h)
assert st == 200, (st, data)
session = dict((k.lower(), v) for k, v in hdrs)["mcp-session-id"]
sess_h = dict(mcp_h, **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"})
st, _, data = post("/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), sess_h)
assert st == 202, (st, data)
s26_h = dict(mcp_h, **{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "get_current_time"})
meta26 = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
          "io.modelcontextprotocol/clientCapabilities": {}}

def check_mcp(data):
    text = data.decode()
    msgs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip()] or [json.loads(text)]
    r = [m for m in msgs if m.get("id") is not None][0]["result"]
    assert not r.get("isError") and r["_meta"]["toolshed/run_id"], r

def rest(i):
    st, _, data = post("/api/v1/registry/tools/get_current_time/execute", '{"args": {}}',
                       dict(auth, **{"content-type": "application/json"}))
    assert st == 200, (st, data)

def sess(i):
    body = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_current_time","arguments":{}}}' % i
    st, _, data = post("/mcp", body, sess_h)
    assert st == 200, (st, data)
    if i % 100 == 0: check_mcp(data)

def stateless(i):
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": "get_current_time", "arguments": {}, "_meta": meta26}})
    st, _, data = post("/mcp", body, s26_h)
    assert st == 200, (st, data)
    if i % 100 == 0: check_mcp(data)

def ctl(*args):
    subprocess.run(["callgrind_control", *args, pid], check=True, stdout=subprocess.DEVNULL)

fns = {"rest": rest, "session": sess, "stateless": stateless}
for ph in phases:
    f = fns[ph]
    for i in range(1, warm + 1): f(i)
    time.sleep(1)
    if pid != "0": ctl("-z")
    t = time.time()
    for i in range(1, n + 1): f(i)
    dt = time.time() - t
    time.sleep(1)
    if pid != "0": ctl("-d", ph)
    print(f"{ph}: {n} requests in {dt:.1f}s", flush=True)
