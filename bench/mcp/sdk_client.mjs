// The client benchmark's baseline (bench/mcp-client.sh): the official TypeScript SDK
// client calling server-everything's `echo` over stdio, after the handshake and a
// warm-up, timed one by one. Prints one JSON line: p50, p99 and mean in microseconds.
//
// Usage: node bench/mcp/sdk_client.mjs N NODE SERVER_JS
import { Client } from "../../tests/mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js";
import { StdioClientTransport } from "../../tests/mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js";

const [n, node, server] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const WARMUP = 200;
const client = new Client({ name: "bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: node, args: [server, "stdio"], stderr: "ignore" }));
const times = [];
for (let i = 0; i < WARMUP + n; i++) {
  const t = process.hrtime.bigint();
  await client.callTool({ name: "echo", arguments: { message: "hello" } });
  const took = Number(process.hrtime.bigint() - t) / 1000;
  if (i >= WARMUP) times.push(took);
}
await client.close();
times.sort((a, b) => a - b);
const at = (q) => times[Math.round((times.length - 1) * q)];
const mean = times.reduce((a, b) => a + b, 0) / times.length;
console.log(JSON.stringify({ mode: "sdk", n: times.length, p50_us: at(0.5), p99_us: at(0.99), mean_us: mean }));
