import { describe, expect, it } from 'vitest';
import { ToolError } from '../../src/errors.ts';
import { classifyMcpTool, createArgumentChecks, createMcpCall, mcpResultOutput, mcpServerEnvironment, mcpSourceSecrets, mcpToolDefinitions, progressUpdate, toolCollisions } from '../../src/mcp/index.ts';
import type { McpSession } from '../../src/mcp/index.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { pino } from 'pino';
import { runTool } from '../helpers/run-tool.ts';

/** A session whose calls fail at the transport after `failAfterMs`, and whose ping answers after 100 ms (or fails with `pingFails`), rejecting when its signal aborts. */
function failingSession(options: { failAfterMs?: number; pingFails?: boolean } = {}): McpSession & { calls: Array<{ timeoutMs: number }> } {
  const calls: Array<{ timeoutMs: number }> = [];
  return {
    server: undefined,
    pid: undefined,
    closed: new Promise(() => undefined),
    calls,
    listTools: async () => [],
    callTool: async (_name, _args, { timeoutMs }) => {
      calls.push({ timeoutMs });
      await new Promise((resolve) => setTimeout(resolve, options.failAfterMs ?? 0));
      throw new TypeError('fetch failed');
    },
    ping: ({ signal }) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => (options.pingFails ? reject(new Error('no answer')) : resolve()), 100);
        signal?.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
      }),
    close: async () => undefined,
  };
}

/** The one tool `t` calling through {@link createMcpCall} on `session`, with the sessions reported broken. */
function callThrough(session: McpSession, timeoutMs = 10_000) {
  const broken: McpSession[] = [];
  const call = createMcpCall({ label: 'test', session: () => session, downReason: () => 'down', onBroken: (which) => broken.push(which) });
  const { tools } = mcpToolDefinitions([{ name: 't', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } }], { call, tierOf: () => undefined, timeoutOf: () => timeoutMs });
  return { tool: tools[0]!, broken };
}

describe('MCP tools as agentbus tools', () => {
  it('takes the tier from the annotations, with the MCP defaults, unless overridden', () => {
    expect(classifyMcpTool(undefined)).toEqual({ tier: SafetyTier.privileged, idempotent: false });
    expect(classifyMcpTool({ readOnlyHint: true })).toEqual({ tier: SafetyTier.readOnly, idempotent: true });
    expect(classifyMcpTool({ readOnlyHint: true, destructiveHint: true })).toEqual({ tier: SafetyTier.readOnly, idempotent: true });
    expect(classifyMcpTool({ destructiveHint: true, idempotentHint: true })).toEqual({ tier: SafetyTier.privileged, idempotent: true });
    expect(classifyMcpTool({ destructiveHint: false })).toEqual({ tier: SafetyTier.sideEffecting, idempotent: false });
    expect(classifyMcpTool({ destructiveHint: false, idempotentHint: true })).toEqual({ tier: SafetyTier.sideEffecting, idempotent: true });
    expect(classifyMcpTool({ readOnlyHint: true }, SafetyTier.privileged)).toEqual({ tier: SafetyTier.privileged, idempotent: true });
  });

  it('serves tools under their own names, skipping names that are no bus token and task-only tools', () => {
    const inputSchema = { type: 'object' as const, properties: {} };
    const { tools, skipped } = mcpToolDefinitions(
      [
        { name: 'search', description: 'Searches', inputSchema, annotations: { readOnlyHint: true } },
        { name: 'files.delete', inputSchema },
        { name: 'long_job', inputSchema, execution: { taskSupport: 'required' } },
        { name: 'titled', title: 'A title', inputSchema },
      ],
      { call: async () => 'x', tierOf: (name) => (name === 'titled' ? SafetyTier.sideEffecting : undefined), timeoutOf: () => 1234 },
    );
    expect(tools.map((tool) => [tool.name, tool.tier, tool.timeoutMs, tool.description])).toEqual([
      ['search', 'read_only', 1234, 'Searches'],
      ['titled', 'side_effecting', 1234, 'A title'],
    ]);
    expect(skipped.map((tool) => tool.name)).toEqual(['files.delete', 'long_job']);
    expect(skipped[0]!.reason).toMatch(/not a bus subject token/);
  });

  it('serves tools under a prefix, calling the server by their own names', async () => {
    const called: string[] = [];
    const inputSchema = { type: 'object' as const };
    const { tools, skipped } = mcpToolDefinitions([{ name: 'read_file', inputSchema }, { name: 'x'.repeat(62), inputSchema }], {
      call: async (name) => void called.push(name),
      tierOf: (name) => (name === 'read_file' ? SafetyTier.readOnly : undefined),
      timeoutOf: (name) => (name === 'read_file' ? 1234 : 1),
      prefix: 'fs_',
    });
    expect(tools.map((tool) => [tool.name, tool.tier, tool.timeoutMs])).toEqual([['fs_read_file', 'read_only', 1234]]);
    expect(await runTool(tools[0]!, {})).toMatchObject({ ok: true });
    expect(called).toEqual(['read_file']);
    expect(skipped).toEqual([{ name: 'x'.repeat(62), reason: 'its name after the prefix "fs_" is not a bus subject token ([A-Za-z0-9_-]{1,64})' }]);
  });

  it('finds the tools that a service of another name serves on the same subject', () => {
    const service = (name: string, tools: string[]) => ({
      type: 'io.nats.micro.v1.info_response' as const,
      name,
      id: `${name}-1`,
      version: '1.0.0',
      description: '',
      metadata: {},
      endpoints: tools.map((tool) => ({ name: tool, subject: `agentbus.tools.${tool}.call`, queue_group: `agentbus.tools.${tool}`, metadata: {} })),
    });
    const ours = ['read_file', 'write_file', 'search'].map((name) => ({ name, subject: `agentbus.tools.${name}.call` }));
    const services = [service('filesystem', ['read_file', 'write_file', 'search']), service('agentbus-tools', ['read_file', 'write_file', 'list_dir']), service('other-mcp', ['read_file'])];
    expect(toolCollisions(services, { serviceName: 'filesystem', tools: ours })).toEqual([
      { tool: 'read_file', service: 'agentbus-tools' },
      { tool: 'read_file', service: 'other-mcp' },
      { tool: 'write_file', service: 'agentbus-tools' },
    ]);
    expect(toolCollisions([services[0]!, services[0]!], { serviceName: 'filesystem', tools: ours })).toEqual([]);
  });

  it('turns a result into output: text joined, other parts summarised, structured content first, isError thrown', () => {
    expect(mcpResultOutput({ content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }, 't')).toBe('a\nb');
    expect(mcpResultOutput({ content: [{ type: 'image', data: 'aGVsbG8=', mimeType: 'image/png' }] }, 't')).toBe('[image: image/png, 5 bytes, not shown]');
    expect(mcpResultOutput({ content: [{ type: 'resource', resource: { uri: 'file:///a.txt', text: 'hi' } }] }, 't')).toBe('[resource file:///a.txt]\nhi');
    expect(mcpResultOutput({ content: [{ type: 'resource_link', name: 'a', uri: 'file:///a' }] }, 't')).toBe('[resource link: a file:///a]');
    expect(mcpResultOutput({ content: [{ type: 'text', text: '{"n":1}' }], structuredContent: { n: 1 } }, 't')).toEqual({ n: 1 });
    expect(mcpResultOutput({ content: [{ type: 'text', text: 'x'.repeat(20) }] }, 't', 10)).toBe(`${'x'.repeat(10)}\n[truncated: 10 more characters not shown]`);
    expect(mcpResultOutput({ toolResult: { legacy: true } }, 't')).toEqual({ legacy: true });
    expect(() => mcpResultOutput({ content: [{ type: 'text', text: 'no such file' }], isError: true }, 't')).toThrow(ToolError);
    expect(() => mcpResultOutput({ content: [], isError: true }, 't')).toThrow(/the MCP tool t failed/);
  });

  it('checks arguments with ajv, in words about the arguments, and leaves a schema ajv cannot compile to the server', () => {
    const checks = createArgumentChecks(pino({ level: 'silent' }));
    const schema = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties: { a: { type: 'number' } }, required: ['a', 'b'] };
    const check = checks('add', schema)!;
    expect(check({ a: 1, b: 2 })).toEqual({ valid: true });
    expect(check({ a: 'x' })).toEqual({ valid: false, errorMessage: "arguments must have required property 'b', a must be number" });
    expect(checks('broken', { type: 'object', properties: { a: { $ref: '#/nowhere' } } })).toBeUndefined();
  });

  it('checks each tool against its own schema when the schemas of two tools share an $id', () => {
    const checks = createArgumentChecks(pino({ level: 'silent' }));
    const first = checks('first', { $id: 'https://example.com/args.json', type: 'object', required: ['a'] })!;
    const second = checks('second', { $id: 'https://example.com/args.json', type: 'object', required: ['b'] })!;
    expect(second({ b: 1 })).toEqual({ valid: true });
    expect(second({ a: 1 })).toEqual({ valid: false, errorMessage: "arguments must have required property 'b'" });
    expect(first({ a: 1 })).toEqual({ valid: true });
    const nested = (type: string) => ({ type: 'object', properties: { x: { $id: 'https://example.com/x.json', type } } });
    expect(checks('third', nested('number'))!({ x: 1 })).toEqual({ valid: true });
    expect(checks('fourth', nested('string'))?.({ x: 1 })).toMatchObject({ valid: false });
  });

  it('does not take a server for dead when a call is cancelled or times out while the server is pinged', async () => {
    const cancelled = callThrough(failingSession());
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('the caller cancelled')), 30);
    expect(await runTool(cancelled.tool, {}, { signal: controller.signal })).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    const timedOut = callThrough(failingSession({ failAfterMs: 10 }), 30);
    expect(await runTool(timedOut.tool, {})).toMatchObject({ ok: false, error: { code: 'timeout' } });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect([cancelled.broken, timedOut.broken]).toEqual([[], []]);

    const gone = callThrough(failingSession({ pingFails: true }));
    expect(await runTool(gone.tool, {})).toMatchObject({ ok: false, error: { code: 'unavailable', retryable: true } });
    expect(gone.broken).toHaveLength(1);
  });

  it('never gives the SDK a request timeout longer than a timer can wait', async () => {
    const session = failingSession();
    const { tool } = callThrough(session, 2 ** 31);
    await runTool(tool, {});
    expect(session.calls).toEqual([{ timeoutMs: 2_147_483_647 }]);
  });

  it('reports progress with the server\'s message, or a count when it sent none', () => {
    expect(progressUpdate('slow', { progress: 2, total: 5, message: 'copying' })).toEqual({ message: 'copying', progress: 2, total: 5 });
    expect(progressUpdate('slow', { progress: 2, total: 5 })).toEqual({ message: 'slow: 2 of 5', progress: 2, total: 5 });
    expect(progressUpdate('slow', { progress: 7 })).toEqual({ message: 'slow: 7', progress: 7 });
  });

  it('gives a stdio server only PATH, HOME, LANG and the variables --env names', () => {
    const env = { PATH: '/bin', HOME: '/home/u', LANG: 'C.UTF-8', GITHUB_TOKEN: 'g', OPENAI_API_KEY: 'k', NATS_PASSWORD: 'p', NATS_URL: 'u', AGENTBUS_PREFIX: 'x' };
    expect(mcpServerEnvironment(env)).toEqual({ PATH: '/bin', HOME: '/home/u', LANG: 'C.UTF-8' });
    expect(mcpServerEnvironment(env, ['GITHUB_TOKEN', 'UNSET_ONE'])).toEqual({ PATH: '/bin', HOME: '/home/u', LANG: 'C.UTF-8', GITHUB_TOKEN: 'g' });
  });

  it('knows the secrets of an HTTP source: credential header values, their tokens, a Basic password, the URL\'s password and secret query values', () => {
    const basic = Buffer.from('user:basic-password').toString('base64');
    const url = new URL('https://me:url-password@mcp.example/mcp?api_key=query-key-123&page=2');
    const headers = { Authorization: 'Bearer sk-token-123', Accept: 'application/json', 'X-Api-Key': 'plain-key-456', 'Proxy-Authorization': `Basic ${basic}` };
    expect(mcpSourceSecrets({ kind: 'http', url, headers })).toEqual([
      'Bearer sk-token-123',
      'sk-token-123',
      'plain-key-456',
      `Basic ${basic}`,
      basic,
      'basic-password',
      'url-password',
      'query-key-123',
    ]);
    expect(mcpSourceSecrets({ kind: 'stdio', command: 'node', args: ['--token', 'x'], env: {} })).toEqual([]);
    // A raw `%` in the password is no valid percent-encoding: taken as it is, not a crash.
    expect(mcpSourceSecrets({ kind: 'http', url: new URL('https://me:pa%zzss@mcp.example/mcp'), headers: {} })).toEqual(['pa%zzss']);
    expect(mcpSourceSecrets({ kind: 'http', url: new URL('https://me:p%40ss@mcp.example/mcp'), headers: {} })).toEqual(['p%40ss', 'p@ss']);
  });
});
