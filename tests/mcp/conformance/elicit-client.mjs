// An MCP client with the elicitation and sampling capabilities (the official TypeScript
// SDK), for crates/toolshed-server/tests/mcp.rs: it calls one tool on /mcp and answers
// what it is asked as told: an approval (approve|deny|dismiss), or a tool's own form
// (form:JSON, accepted with that content). A sampling request is answered with the text
// "sampled at the client". Prints {"asked": <the last elicitation's params or null>,
// "sampled": <the last sampling request's params or null>, "result": <the tools/call
// result>} on stdout.
// Usage: node elicit-client.mjs URL TOKEN TOOL ARGS_JSON approve|deny|dismiss|form:JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, tool, args, answer] = process.argv.slice(2);
const client = new Client({ name: "elicit-test", version: "1" }, { capabilities: { elicitation: {}, sampling: {} } });
let asked = null;
let sampled = null;
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked = req.params;
  if (answer === "dismiss") return { action: "cancel" };
  if (answer.startsWith("form:")) return { action: "accept", content: JSON.parse(answer.slice(5)) };
  return { action: "accept", content: { approve: answer === "approve", reason: "decided at the test client" } };
});
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  sampled = req.params;
  return { role: "assistant", content: { type: "text", text: "sampled at the client" }, model: "test-model" };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
console.log(JSON.stringify({ asked, sampled, result }));
await client.close();
