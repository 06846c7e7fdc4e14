// The test MCP server over stdio, as `agentbus mcp -- node --import tsx test/helpers/mcp-stdio-server.ts` starts it.
// Each record is appended as a JSON line to the file MCP_TEST_RECORD names.
// MCP_TEST_STDERR, when set, is written to stderr at start, as servers log there.
import { appendFileSync } from 'node:fs';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { createTestMcpServer } from './mcp-test-tools.ts';
import type { McpTestRecord } from './mcp-test-tools.ts';

const file = process.env.MCP_TEST_RECORD;
const record = (entry: McpTestRecord) => {
  if (file) appendFileSync(file, `${JSON.stringify(entry)}\n`);
};
if (process.env.MCP_TEST_STDERR) process.stderr.write(`${process.env.MCP_TEST_STDERR}\n`);
const server = createTestMcpServer(record);
await server.connect(new StdioServerTransport());
record({ event: 'started', pid: process.pid });
