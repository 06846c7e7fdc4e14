import { getEventListeners } from 'node:events';
import { PassThrough } from 'node:stream';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { MAX_TOOL_PAGES, forEachLine, openMcpSession } from '../../src/mcp/index.ts';
import type { McpErrorOrigin, McpSession, OpenMcpSessionOptions } from '../../src/mcp/index.ts';
import { createTestMcpServer } from '../helpers/mcp-test-tools.ts';

const client = { name: 'agentbus-test', version: '0.0.0' };
const source = { kind: 'stdio' as const, command: 'unused', args: [], env: {} };

/** The test MCP server on one end of an in-memory pair; what the client sends is recorded. */
async function inMemory(): Promise<{ transport: InMemoryTransport; sent: JSONRPCMessage[] }> {
  const [clientEnd, serverEnd] = InMemoryTransport.createLinkedPair();
  await createTestMcpServer(() => undefined).connect(serverEnd);
  const sent: JSONRPCMessage[] = [];
  const send = clientEnd.send.bind(clientEnd);
  clientEnd.send = (message, options) => {
    sent.push(message);
    return send(message, options);
  };
  return { transport: clientEnd, sent };
}

function open(transport: InMemoryTransport, options: Partial<OpenMcpSessionOptions> = {}): Promise<McpSession> {
  return openMcpSession(source, { client, transport, ...options });
}

const method = (message: JSONRPCMessage) => ('method' in message ? message.method : undefined);

describe('an MCP session', () => {
  it('leaves no abort listener on a long-lived signal, and its abort cancels no request answered before', async () => {
    const { transport, sent } = await inMemory();
    const stopping = new AbortController();
    const session = await open(transport, { signal: stopping.signal });
    try {
      for (let round = 0; round < 12; round += 1) {
        await session.listTools({ signal: stopping.signal });
        await session.ping({ signal: stopping.signal, timeoutMs: 5_000 });
      }
      expect(getEventListeners(stopping.signal, 'abort')).toHaveLength(0);
      stopping.abort();
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(sent.filter((message) => method(message) === 'notifications/cancelled')).toEqual([]);
    } finally {
      await session.close();
    }
  });

  it('still cancels a request whose signal aborts while it runs', async () => {
    const { transport, sent } = await inMemory();
    const session = await open(transport);
    try {
      const controller = new AbortController();
      const call = session.callTool('slow', { steps: 100, delayMs: 20 }, { signal: controller.signal, timeoutMs: 10_000 });
      setTimeout(() => controller.abort(new Error('cancelled by the test')), 50);
      await expect(call).rejects.toThrow(/cancelled by the test/);
      expect(sent.filter((message) => method(message) === 'notifications/cancelled')).toHaveLength(1);
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    } finally {
      await session.close();
    }
  });

  it('gives up a handshake the server does not answer by closing the connection, not by cancelling it', async () => {
    const [clientEnd, serverEnd] = InMemoryTransport.createLinkedPair();
    const received: JSONRPCMessage[] = [];
    serverEnd.onmessage = (message) => void received.push(message);
    await serverEnd.start();
    let serverClosed = false;
    serverEnd.onclose = () => (serverClosed = true);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stopping')), 50);
    await expect(open(clientEnd, { signal: controller.signal })).rejects.toThrow(/stopping/);
    expect(received.map(method)).toEqual(['initialize']);
    expect(serverClosed).toBe(true);
  });

  it('tells transport errors from protocol errors', async () => {
    const [clientEnd, serverEnd] = InMemoryTransport.createLinkedPair();
    await createTestMcpServer(() => undefined).connect(serverEnd);
    const errors: Array<[McpErrorOrigin, string]> = [];
    const session = await open(clientEnd, { onError: (error, origin) => errors.push([origin, error.message]) });
    try {
      // An answer to a request the client never sent (as a late answer to a cancelled one is): a protocol error.
      await serverEnd.send({ jsonrpc: '2.0', id: 999, result: {} });
      clientEnd.onerror?.(new Error('event stream lost'));
      expect(errors).toEqual([
        ['protocol', expect.stringMatching(/unknown message ID/)],
        ['transport', 'event stream lost'],
      ]);
    } finally {
      await session.close();
    }
  });

  it('reads every page of a tool list, and stops at a list that never ends', async () => {
    const listing = async (nextCursor: (page: number) => string | undefined) => {
      const server = new Server({ name: 'pages', version: '1.0.0' }, { capabilities: { tools: {} } });
      let pages = 0;
      server.setRequestHandler(ListToolsRequestSchema, () => {
        pages += 1;
        const cursor = nextCursor(pages);
        return { tools: [{ name: `t${pages}`, inputSchema: { type: 'object' as const } }], ...(cursor === undefined ? {} : { nextCursor: cursor }) };
      });
      const [clientEnd, serverEnd] = InMemoryTransport.createLinkedPair();
      await server.connect(serverEnd);
      const session = await open(clientEnd);
      try {
        return await session.listTools({}).then((tools) => tools.map((tool) => tool.name));
      } finally {
        await session.close();
      }
    };
    expect(await listing((page) => (page < 3 ? `p${page}` : undefined))).toEqual(['t1', 't2', 't3']);
    await expect(listing(() => 'same')).rejects.toThrow('the MCP server\'s tool list does not end: it gave the cursor "same" again');
    await expect(listing((page) => `p${page}`)).rejects.toThrow(`the MCP server's tool list did not end after ${MAX_TOOL_PAGES} pages`);
  });

  it('hands a server\'s stderr on line by line, a line without end in pieces', async () => {
    const stream = new PassThrough();
    const lines: string[] = [];
    forEachLine(stream, (line) => lines.push(line), { maxLength: 8 });
    stream.write('first\nsec');
    stream.write('ond\r\nabcdefghijkl');
    stream.end('mn');
    await new Promise((resolve) => stream.once('end', resolve));
    expect(lines).toEqual(['first', 'second', 'abcdefgh', 'ijklmn']);
  });
});
