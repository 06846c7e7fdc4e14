import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { McpBridgeEvent, McpBridgeOptions, McpSession } from '../../src/mcp/index.ts';
import { createMcpBridge } from '../../src/mcp/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { runTool } from '../helpers/run-tool.ts';

const silent = pino({ level: 'silent' });
const tool = (name: string): Tool => ({ name, inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } });

/**
 * A session that answers every call with its own number, and ends when the test says so. Given several lists, each
 * listing takes the next one (the last one stays).
 */
function fakeSession(id: number, ...lists: Tool[][]): McpSession & { end(): void; pings: number } {
  let end!: () => void;
  const closed = new Promise<Error | undefined>((resolve) => (end = () => resolve(undefined)));
  const session = {
    server: { name: 'fake', version: '1.0.0' },
    pid: id,
    closed,
    end,
    pings: 0,
    listTools: async () => (lists.length > 1 ? lists.shift()! : lists[0]!),
    callTool: async () => ({ content: [{ type: 'text' as const, text: `session ${id}` }] }),
    ping: async () => void (session.pings += 1),
    close: async () => end(),
  };
  return session;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function wait(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

interface RigOptions {
  /** Every tool's timeout; default 1000 ms. */
  readonly timeoutMs?: number;
  /** Workers whose running calls take their whole grace to stop (as a worker's stop does), not 0 ms. */
  readonly busyWorkers?: boolean;
  readonly source?: McpBridgeOptions['source'];
}

/** A bridge over scripted opens: each entry is a session to hand out, or an error to fail the open with. */
function rig(opens: Array<McpSession | Error>, options: RigOptions = {}) {
  const events: McpBridgeEvent[] = [];
  const log: string[] = [];
  const opened: Array<Parameters<McpBridgeOptions['open']>[0]> = [];
  let served: readonly AnyToolDefinition[] = [];
  let workers = 0;
  const bridge = createMcpBridge({
    source: options.source ?? { kind: 'stdio', command: 'fake', args: [], env: {} },
    logger: silent,
    restart: { initialDelayMs: 10, maxDelayMs: 40, stableAfterMs: 60_000 },
    timeoutOf: () => options.timeoutMs ?? 1000,
    open: async (callbacks) => {
      opened.push(callbacks);
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
      return {
        stop: async ({ graceMs, signal } = {}) => {
          log.push(`stop ${worker}${graceMs === undefined ? '' : ` grace ${graceMs}`}`);
          if (!options.busyWorkers) return;
          await wait(graceMs ?? 5000, signal);
          log.push(`stopped ${worker}`);
        },
      };
    },
    onEvent: (event) => events.push(event),
  });
  /** Says the newest session's tool list changed, as its server's notification would. */
  const changed = () => opened.at(-1)!.onToolsChanged();
  return { bridge, events, log, served: () => served, opened, changed };
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
    expect(log).toEqual(['start 1: a', 'stop 1 grace 5000']);
  });

  it('serves a changed list with a new worker, started before the old one stops', async () => {
    const first = fakeSession(1, [tool('a')]);
    const { bridge, log, events } = rig([first, fakeSession(2, [tool('a'), tool('b')])]);
    await bridge.start();
    first.end();
    await until(() => log.length === 3);
    expect(log).toEqual(['start 1: a', 'start 2: a,b', 'stop 1 grace 1000']);
    expect(events.filter((event) => event.type === 'serving').map((event) => event.type === 'serving' && event.first)).toEqual([true, false]);
    expect(bridge.tools.map((definition) => definition.name)).toEqual(['a', 'b']);
    await bridge.stop();
  });

  it('lets a worker replaced by a changed list finish its calls for the longest timeout of its tools', async () => {
    const { bridge, log, changed } = rig([fakeSession(1, [tool('a')], [tool('a'), tool('b')])], { timeoutMs: 1500 });
    await bridge.start();
    changed();
    await until(() => log.length === 3);
    expect(log).toEqual(['start 1: a', 'start 2: a,b', 'stop 1 grace 1500']);
    await bridge.stop();
  });

  it('stops within its own grace, the served worker at once, while a replaced worker still has calls running', async () => {
    const { bridge, log, changed } = rig([fakeSession(1, [tool('a')], [tool('a'), tool('b')])], { timeoutMs: 60_000, busyWorkers: true });
    await bridge.start();
    changed();
    await until(() => log.includes('stop 1 grace 60000'));
    const started = Date.now();
    const stopping = bridge.stop({ graceMs: 100 });
    await until(() => log.includes('stop 2 grace 100'), 50);
    await stopping;
    expect(Date.now() - started).toBeLessThan(1000);
    expect(log).toEqual(['start 1: a', 'start 2: a,b', 'stop 1 grace 60000', 'stop 2 grace 100', expect.stringMatching(/^stopped [12]$/), expect.stringMatching(/^stopped [12]$/)]);
  });

  it('serves the list of a restarted server while a replaced worker still has calls running', async () => {
    const first = fakeSession(1, [tool('a')], [tool('a'), tool('b')]);
    const { bridge, log, changed } = rig([first, fakeSession(2, [tool('a'), tool('b'), tool('c')])], { timeoutMs: 60_000, busyWorkers: true });
    await bridge.start();
    changed();
    await until(() => log.includes('stop 1 grace 60000'));
    first.end();
    await until(() => log.includes('start 3: a,b,c'));
    expect(log).toEqual(['start 1: a', 'start 2: a,b', 'stop 1 grace 60000', 'start 3: a,b,c', 'stop 2 grace 60000']);
    await bridge.stop({ graceMs: 10 });
  });

  it('pings an HTTP server after a transport error, not after a protocol error', async () => {
    const session = fakeSession(1, [tool('a')]);
    const { bridge, opened } = rig([session], { source: { kind: 'http', url: new URL('http://127.0.0.1:1/mcp'), headers: {} } });
    await bridge.start();
    opened[0]!.onError(new Error('Received a response for an unknown message ID'), 'protocol');
    await wait(700);
    expect(session.pings).toBe(0);
    opened[0]!.onError(new Error('SSE stream disconnected'), 'transport');
    await until(() => session.pings === 1);
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
