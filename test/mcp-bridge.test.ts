import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { McpBridgeEvent, McpSession } from '../src/mcp/index.ts';
import { createMcpBridge } from '../src/mcp/index.ts';
import type { AnyToolDefinition } from '../src/tool-sdk/index.ts';
import { runTool } from './helpers/run-tool.ts';

const silent = pino({ level: 'silent' });
const tool = (name: string): Tool => ({ name, inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } });

/** A session that answers every call with its own number, and ends when the test says so. */
function fakeSession(id: number, tools: Tool[]): McpSession & { end(): void } {
  let end!: () => void;
  const closed = new Promise<Error | undefined>((resolve) => (end = () => resolve(undefined)));
  return {
    server: { name: 'fake', version: '1.0.0' },
    pid: id,
    closed,
    end,
    listTools: async () => tools,
    callTool: async () => ({ content: [{ type: 'text', text: `session ${id}` }] }),
    ping: async () => undefined,
    close: async () => end(),
  };
}

/** A bridge over scripted opens: each entry is a session to hand out, or an error to fail the open with. */
function rig(opens: Array<McpSession | Error>) {
  const events: McpBridgeEvent[] = [];
  const log: string[] = [];
  let served: readonly AnyToolDefinition[] = [];
  let workers = 0;
  const bridge = createMcpBridge({
    source: { kind: 'stdio', command: 'fake', args: [], env: {} },
    logger: silent,
    restart: { initialDelayMs: 10, maxDelayMs: 40, stableAfterMs: 60_000 },
    timeoutOf: () => 1000,
    open: async () => {
      const next = opens.shift();
      if (!next) throw new Error('no more sessions');
      if (next instanceof Error) throw next;
      return next;
    },
    serve: async (tools) => {
      workers += 1;
      const worker = workers;
      served = tools;
      log.push(`start ${worker}: ${tools.map((definition) => definition.name).join(',')}`);
      return { stop: async () => void log.push(`stop ${worker}`) };
    },
    onEvent: (event) => events.push(event),
  });
  return { bridge, events, log, served: () => served };
}

async function until(test: () => boolean, timeoutMs = 2000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!test()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('the MCP bridge', () => {
  it('restarts a dead server with doubling backoff, fails calls meanwhile as unavailable, and keeps the worker when the list is the same', async () => {
    const first = fakeSession(1, [tool('a')]);
    const { bridge, events, log, served } = rig([first, new Error('spawn failed'), new Error('spawn failed'), fakeSession(2, [tool('a')])]);
    await bridge.start();
    expect(log).toEqual(['start 1: a']);
    expect(await runTool(served()[0]!, {})).toMatchObject({ ok: true, output: 'session 1' });

    first.end();
    await until(() => events.some((event) => event.type === 'down'));
    const down = await runTool(served()[0]!, {});
    expect(down).toMatchObject({ ok: false, error: { code: 'unavailable', retryable: true } });
    await until(() => events.some((event) => event.type === 'restarted'));
    expect(events.flatMap((event) => (event.type === 'down' ? [`${event.attempt}:${event.retryInMs}`] : []))).toEqual(['1:10', '2:20', '3:40']);
    expect(events.find((event) => event.type === 'restarted')).toMatchObject({ attempt: 3, pid: 2 });
    expect(await runTool(served()[0]!, {})).toMatchObject({ ok: true, output: 'session 2' });
    expect(log).toEqual(['start 1: a']);
    await bridge.stop();
    expect(log).toEqual(['start 1: a', 'stop 1']);
  });

  it('serves a changed list with a new worker, started before the old one stops', async () => {
    const first = fakeSession(1, [tool('a')]);
    const { bridge, log, events } = rig([first, fakeSession(2, [tool('a'), tool('b')])]);
    await bridge.start();
    first.end();
    await until(() => log.length === 3);
    expect(log).toEqual(['start 1: a', 'start 2: a,b', 'stop 1']);
    expect(events.filter((event) => event.type === 'serving').map((event) => event.type === 'serving' && event.first)).toEqual([true, false]);
    expect(bridge.tools.map((definition) => definition.name)).toEqual(['a', 'b']);
    await bridge.stop();
  });

  it('stops while waiting to restart without opening anything more', async () => {
    const first = fakeSession(1, [tool('a')]);
    const opens: Array<McpSession | Error> = [first];
    const { bridge, events } = rig(opens);
    await bridge.start();
    first.end();
    await until(() => events.some((event) => event.type === 'down'));
    await bridge.stop();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(events.filter((event) => event.type === 'down')).toHaveLength(1);
  });

  it('fails to start, serving nothing, when the first session cannot be opened', async () => {
    const { bridge, log } = rig([new Error('ENOENT')]);
    await expect(bridge.start()).rejects.toThrow('ENOENT');
    expect(log).toEqual([]);
  });
});
