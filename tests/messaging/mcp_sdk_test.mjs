// void-mcp driven by the official MCP TypeScript SDK over both transports the specification
// defines: stdio (StdioClientTransport spawns void-mcp) and Streamable HTTP
// (StreamableHTTPClientTransport against `void-mcp --http`). Each runs initialize, tools/list
// and every tool against a real sidecar (sidecar_fixture), and the HTTP run checks the
// transport's session rules with raw requests. Usage: node mcp_sdk_test.mjs VOID_MCP FIXTURE
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [voidMcp, fixturePath] = process.argv.slice(2);
const TOOL_NAMES = ["broadcast_observation", "read_peer_messages", "read_shared_context",
  "recommend_to_leader"];
let failures = 0;
let passes = 0;

function check(cond, what) {
  if (cond) {
    passes++;
  } else {
    failures++;
    console.error(`  FAIL ${what}`);
  }
}

function firstLine(child) {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once("line", (line) => resolve(line));
    child.once("exit", (code) => reject(new Error(`${child.spawnfile} exited (${code})`)));
  });
}

function control(socketPath, method, path) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path }, (res) => {
      let body = "";
      res.on("data", (chunk) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

function textOf(result) {
  return JSON.parse(result.content[0].text);
}

async function exerciseTools(client, who, label) {
  const listed = await client.listTools();
  check(JSON.stringify(listed.tools.map((t) => t.name).sort()) === JSON.stringify(TOOL_NAMES),
    `${label}: tools/list names the four tools`);
  for (const tool of listed.tools)
    check(tool.inputSchema && tool.inputSchema.type === "object", `${label}: ${tool.name} schema`);

  const context = await client.callTool({ name: "read_shared_context", arguments: {} });
  check(!context.isError && textOf(context).candidate_id === who, `${label}: context names ${who}`);

  const observed = await client.callTool({ name: "broadcast_observation",
    arguments: { summary_text: `${label} observation`, priority: "high" } });
  const intent = textOf(observed);
  check(!observed.isError && intent.kind === "signal" && intent.audience === "broadcast" &&
    intent.priority === "high" && intent.payload.summary_text === `${label} observation`,
    `${label}: broadcast_observation stamps a signal to broadcast`);

  const advice = await client.callTool({ name: "recommend_to_leader",
    arguments: { summary_text: `${label} advice`, disposition: "refine" } });
  const evaluation = textOf(advice);
  check(!advice.isError && evaluation.kind === "evaluation" && evaluation.audience === "leader" &&
    evaluation.payload.disposition === "refine", `${label}: recommend_to_leader (refine)`);

  const inbox = await client.callTool({ name: "read_peer_messages", arguments: { since: 0 } });
  check(!inbox.isError && Array.isArray(textOf(inbox).entries), `${label}: read_peer_messages`);
  return textOf(inbox);
}

async function main() {
  const fixture = spawn(fixturePath, [], { stdio: ["pipe", "pipe", "inherit"] });
  const ports = JSON.parse(await firstLine(fixture));
  let mcpHttp;
  try {
    // stdio, as alpha
    const stdioClient = new Client({ name: "voidbox-test", version: "1.0.0" });
    await stdioClient.connect(new StdioClientTransport({ command: voidMcp,
      args: ["--sidecar", `http://127.0.0.1:${ports.alpha}`], stderr: "inherit" }));
    check(stdioClient.getServerVersion()?.name === "void-mcp", "stdio: initialize names void-mcp");
    await exerciseTools(stdioClient, "alpha", "stdio");
    // a third intent is fine, a fourth in the same iteration is refused and says why
    const third = await stdioClient.callTool({ name: "broadcast_observation",
      arguments: { summary_text: "third" } });
    check(!third.isError, "stdio: the third intent of an iteration is accepted");
    const fourth = await stdioClient.callTool({ name: "broadcast_observation",
      arguments: { summary_text: "fourth" } });
    check(fourth.isError && textOf(fourth).code === "TOO_MANY_REQUESTS",
      "stdio: the fourth intent is a tool error carrying TOO_MANY_REQUESTS");
    const unknown = await stdioClient.callTool({ name: "no_such_tool", arguments: {} })
      .then(() => null, (err) => err);
    check(unknown && unknown.code === -32602, "stdio: an unknown tool is a -32602 error");
    await stdioClient.close();

    // the iteration ends: alpha's intents reach boss
    check((await control(ports.control, "POST", "/v1/advance")).status === 200, "advance");

    // Streamable HTTP, as boss
    mcpHttp = spawn(voidMcp, ["--http", "--port", "0", "--sidecar",
      `http://127.0.0.1:${ports.boss}`], { stdio: ["ignore", "pipe", "inherit"] });
    const port = Number((await firstLine(mcpHttp)).match(/listening on (\d+)/)[1]);
    const endpoint = new URL(`http://127.0.0.1:${port}/mcp`);
    const transport = new StreamableHTTPClientTransport(endpoint);
    const httpClient = new Client({ name: "voidbox-test", version: "1.0.0" });
    await httpClient.connect(transport);
    check(typeof transport.sessionId === "string" && transport.sessionId.length > 0,
      "http: initialize opened a session (Mcp-Session-Id)");
    const bossInbox = await exerciseTools(httpClient, "boss", "http");
    const texts = bossInbox.entries.map((e) => e.payload.summary_text).sort();
    check(JSON.stringify(texts) === JSON.stringify(["stdio advice", "stdio observation", "third"]),
      `http: boss's inbox holds alpha's three intents (${JSON.stringify(texts)})`);

    // the transport's rules, with raw requests
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 9, method: "ping" });
    const headers = { "Content-Type": "application/json",
      Accept: "application/json, text/event-stream" };
    let res = await fetch(endpoint, { method: "POST", headers, body: ping });
    check(res.status === 400, `http: a request without Mcp-Session-Id is 400 (${res.status})`);
    res = await fetch(endpoint, { method: "POST", body: ping,
      headers: { ...headers, "Mcp-Session-Id": "not-a-session" } });
    check(res.status === 404, `http: an unknown session is 404 (${res.status})`);
    res = await fetch(endpoint, { method: "GET", headers: { Accept: "text/event-stream" } });
    check(res.status === 405, `http: GET /mcp is 405 (${res.status})`);
    res = await fetch(endpoint, { method: "POST", body: ping, headers: { ...headers,
      "Mcp-Session-Id": transport.sessionId, Origin: "http://evil.example" } });
    check(res.status === 403, `http: a foreign Origin is 403 (${res.status})`);
    res = await fetch(endpoint, { method: "POST", headers: { ...headers,
      "Mcp-Session-Id": transport.sessionId },
      body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) });
    check(res.status === 202, `http: a notification is 202 (${res.status})`);
    await transport.terminateSession();
    res = await fetch(endpoint, { method: "POST", body: ping, headers: { ...headers,
      "Mcp-Session-Id": String(transport.sessionId ?? "") } });
    check(res.status === 400 || res.status === 404, `http: a terminated session is refused (${res.status})`);
    await httpClient.close();
  } finally {
    mcpHttp?.kill();
    fixture.stdin.end();
  }
  console.log(`${passes} passed, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

main().catch((err) => {
  console.error(`FAIL: ${err.stack || err}`);
  process.exit(1);
});
