// The npm reference client (@modelcontextprotocol/sdk's Client over streamable HTTP) against
// an MCP server: initialize, tools/list, the given tool calls (the client checks each
// structuredContent against the tool's outputSchema), an unknown tool, the resource templates
// and one resource. Prints one JSON document on stdout.
//
//   node mcp_npm_client.mjs <sdk package dir> <url> <calls JSON> <resource uri>
//
// calls: {label: [tool, arguments]}; the answers come back under the same labels.
import { pathToFileURL } from "node:url";

const [sdkDir, url, callsJson, resourceUri] = process.argv.slice(2);
const load = (path) => import(pathToFileURL(`${sdkDir}/dist/esm/${path}`).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const client = new Client({ name: "alivemcp-test-npm-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const out = {
  protocolVersion: transport.protocolVersion,
  server: client.getServerVersion(),
  instructions: client.getInstructions() ?? null,
  tools: [],
  calls: {},
  errors: {},
};
const { tools } = await client.listTools();
out.tools = tools.map((t) => ({ name: t.name, hasOutputSchema: Boolean(t.outputSchema) }));
for (const [label, [name, args]] of Object.entries(JSON.parse(callsJson))) {
  try {
    const result = await client.callTool({ name, arguments: args });
    out.calls[label] = {
      isError: result.isError ?? false,
      structuredContent: result.structuredContent ?? null,
      text: result.content?.[0]?.text ?? null,
    };
  } catch (err) {
    out.calls[label] = { thrown: { code: err.code ?? null, message: String(err.message) } };
  }
}
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  out.errors.unknownTool = null;
} catch (err) {
  out.errors.unknownTool = { code: err.code ?? null, message: String(err.message) };
}
const templates = await client.listResourceTemplates();
out.templates = templates.resourceTemplates.map((t) => t.uriTemplate);
const read = await client.readResource({ uri: resourceUri });
out.resource = read.contents[0];
await client.close();
console.log(JSON.stringify(out));
