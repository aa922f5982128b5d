// A plain MCP client (the official TypeScript SDK, no capabilities declared), for
// crates/toolshed-server/tests/mcp.rs: in one 2025-11-25 session it calls TOOL with
// ARGS_JSON three times, then calls SLOW_TOOL and cancels it (the SDK sends
// `notifications/cancelled` when the call's signal aborts) once the server has it, then
// calls TOOL once more. Prints {"results": [<four tools/call results>], "cancelled":
// <the cancelled call's error message>} on stdout.
// Usage: node plain-client.mjs URL TOKEN TOOL ARGS_JSON SLOW_TOOL
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, tool, args, slow] = process.argv.slice(2);
const client = new Client({ name: "plain-test", version: "1" }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const results = [];
for (let i = 0; i < 3; i++) {
  results.push(await client.callTool({ name: tool, arguments: JSON.parse(args) }));
}
const abort = new AbortController();
const call = client.callTool({ name: slow, arguments: {} }, undefined, { signal: abort.signal });
// Aborted once the request has gone out; the server gets the cancellation after it.
setTimeout(() => abort.abort("stopped by the test"), 500);
let cancelled = null;
try {
  await call;
} catch (e) {
  cancelled = String(e && e.message ? e.message : e);
}
results.push(await client.callTool({ name: tool, arguments: JSON.parse(args) }));
console.log(JSON.stringify({ results, cancelled }));
await client.close();
