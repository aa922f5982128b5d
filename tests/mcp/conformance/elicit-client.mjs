// An MCP client with the elicitation capability (the official TypeScript SDK), for
// crates/toolshed-server/tests/mcp.rs: it calls one tool on /mcp and answers an
// approval elicitation as told. Prints {"asked": <the elicitation's params or null>,
// "result": <the tools/call result>} on stdout.
// Usage: node elicit-client.mjs URL TOKEN TOOL ARGS_JSON approve|deny|dismiss
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, tool, args, answer] = process.argv.slice(2);
const client = new Client({ name: "elicit-test", version: "1" }, { capabilities: { elicitation: {} } });
let asked = null;
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked = req.params;
  if (answer === "dismiss") return { action: "cancel" };
  return { action: "accept", content: { approve: answer === "approve", reason: "decided at the test client" } };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
console.log(JSON.stringify({ asked, result }));
await client.close();
