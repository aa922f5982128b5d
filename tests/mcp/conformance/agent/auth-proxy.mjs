// The conformance suite cannot send a bearer token; this proxy adds one and forwards
// everything else unchanged (Host and Origin included, so the suite's DNS-rebinding
// checks reach the server). Usage: node auth-proxy.mjs UPSTREAM_PORT TOKEN; it prints
// its own port on stdout.
import http from "node:http";

const [upstreamPort, token] = process.argv.slice(2);
const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const up = http.request(
    { host: "127.0.0.1", port: Number(upstreamPort), method: req.method, path: req.url, headers },
    (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    },
  );
  up.on("error", () => {
    res.writeHead(502);
    res.end();
  });
  req.pipe(up);
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
