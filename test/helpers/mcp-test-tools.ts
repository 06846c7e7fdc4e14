import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

/** What the test MCP server saw, for the test to check: its start, each call, each cancellation. */
export type McpTestRecord =
  | { readonly event: 'started'; readonly pid: number }
  | { readonly event: 'call'; readonly tool: string; readonly args: unknown; readonly pid: number }
  | { readonly event: 'cancelled'; readonly tool: string; readonly reason: string };

/**
 * An MCP server for the tests, built with the SDK's `McpServer`: read-only `add`, `echo` and `slow` (which reports
 * progress and records its cancellation), a `remove` that says it is destructive, a `note` that is neither, a `fail`
 * that answers `isError`, a `grow` that adds the tool `late` (the server then sends `tools/list_changed`), and a
 * `bad.name` that is no bus token.
 */
export function createTestMcpServer(record: (entry: McpTestRecord) => void): McpServer {
  const server = new McpServer({ name: 'agentbus-test-mcp', version: '1.0.0' });
  const called = (tool: string, args: unknown) => record({ event: 'call', tool, args, pid: process.pid });

  server.registerTool(
    'add',
    { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() }, annotations: { readOnlyHint: true } },
    ({ a, b }) => {
      called('add', { a, b });
      return { content: [{ type: 'text', text: String(a + b) }] };
    },
  );
  server.registerTool(
    'echo',
    {
      description: 'Returns its text, with the server process id as structured content',
      inputSchema: { text: z.string() },
      outputSchema: { text: z.string(), pid: z.number() },
      annotations: { readOnlyHint: true },
    },
    ({ text }) => {
      called('echo', { text });
      return { content: [{ type: 'text', text }], structuredContent: { text, pid: process.pid } };
    },
  );
  server.registerTool(
    'slow',
    {
      description: 'Counts to steps, one step every delayMs, reporting progress; records a cancellation',
      inputSchema: { steps: z.number().int().min(1), delayMs: z.number().int().min(1).optional() },
      annotations: { readOnlyHint: true },
    },
    async ({ steps, delayMs = 200 }, extra) => {
      called('slow', { steps, delayMs });
      const token = extra._meta?.progressToken;
      for (let step = 1; step <= steps; step += 1) {
        const aborted = await new Promise<boolean>((resolve) => {
          if (extra.signal.aborted) return resolve(true);
          const timer = setTimeout(() => resolve(false), delayMs);
          extra.signal.addEventListener('abort', () => (clearTimeout(timer), resolve(true)), { once: true });
        });
        if (aborted) {
          record({ event: 'cancelled', tool: 'slow', reason: String(extra.signal.reason) });
          throw new Error('cancelled');
        }
        if (token !== undefined) {
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: step, total: steps, message: `step ${step} of ${steps}` } });
        }
      }
      return { content: [{ type: 'text', text: `counted to ${steps}` }] };
    },
  );
  server.registerTool(
    'remove',
    { description: 'Pretends to delete a file', inputSchema: { path: z.string() }, annotations: { destructiveHint: true } },
    ({ path }) => {
      called('remove', { path });
      return { content: [{ type: 'text', text: `removed ${path}` }] };
    },
  );
  server.registerTool(
    'note',
    { description: 'Pretends to save a note', inputSchema: { text: z.string() }, annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true } },
    ({ text }) => {
      called('note', { text });
      return { content: [{ type: 'text', text: 'saved' }, { type: 'image', data: 'aGVsbG8=', mimeType: 'image/png' }] };
    },
  );
  server.registerTool('fail', { description: 'Always fails', annotations: { readOnlyHint: true } }, () => {
    called('fail', {});
    return { content: [{ type: 'text', text: 'it failed on purpose' }], isError: true };
  });
  server.registerTool('grow', { description: 'Adds the tool late' }, () => {
    called('grow', {});
    server.registerTool('late', { description: 'Came later', annotations: { readOnlyHint: true } }, () => ({ content: [{ type: 'text', text: 'late but here' }] }));
    return { content: [{ type: 'text', text: 'grown' }] };
  });
  server.registerTool('bad.name', { description: 'A name with a dot' }, () => ({ content: [{ type: 'text', text: 'unreachable' }] }));
  return server;
}
