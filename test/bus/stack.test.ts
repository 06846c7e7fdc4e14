import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, requestMsgpack, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

let stack: TestStack;

// Fake credentials a tool reads in a session's second turn: one secretlint finds, one the fast pass finds.
const SHOPIFY_TOKEN = 'shpat_0123456789abcdef0123456789abcdef';
const DB_PASSWORD = 'n0t-a-real-Passw0rd';
const TOKEN_IN_PATH = 'ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hI6';

const turnStates = (events: AgentEvent[]) =>
  events.flatMap((event) => (event.type === 'state' && event.data.machine === 'turn' ? [event.data.value] : []));

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [
        { text: 'Let me read it.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] },
        // Paced, so the deltas arrive apart (deltas that arrive together are joined into one).
        { text: 'The workspace says hello.', chunkSize: 5, delayMs: 5 },
        // A session's second turn: a file with secrets, and a failing read whose error names one.
        {
          toolCalls: [
            { name: 'read_file', args: { path: 'config/settings.yaml' } },
            { name: 'read_file', args: { path: `${TOKEN_IN_PATH}.txt` } },
          ],
        },
        { text: 'Read the settings.' },
      ],
    },
  });
  await mkdir(join(stack.workspace, 'config'));
  await writeFile(
    join(stack.workspace, 'config', 'settings.yaml'),
    `shop:\n  token: ${SHOPIFY_TOKEN}\ndatabase:\n  url: postgres://app:${DB_PASSWORD}@db:5432/app\nlog_level: info\n`,
  );
});

afterAll(async () => {
  await stack?.stop();
});

describe('a prompt through the whole stack', () => {
  it('answers a JSON prompt request with accepted and streams the turn in order', async () => {
    const watcher = collectEvents(stack.client, 'default', 'json-1');
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.json-1.prompt', { text: 'What does the README say?' });
    expect(reply).toMatchObject({ accepted: true, sessionId: 'json-1' });
    expect(typeof reply.turnId).toBe('string');
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    const types = events.map((event) => event.type);
    expect(types.indexOf('user.message')).toBeGreaterThanOrEqual(0);
    expect(types.indexOf('user.message')).toBeLessThan(types.indexOf('tool.use'));
    expect(types.indexOf('tool.use')).toBeLessThan(types.indexOf('tool.result'));
    expect(types.filter((type) => type === 'assistant.delta').length).toBeGreaterThan(2);
    expect(turnStates(events)).toEqual(['Preparing', 'Streaming', 'ToolExecution', 'Preparing', 'Streaming', 'Yielding']);
    const result = events.find((event) => event.type === 'tool.result');
    expect(result?.type === 'tool.result' && result.data).toMatchObject({ isError: false, name: 'read_file' });
    expect(result?.type === 'tool.result' && result.data.output).toContain('Hello from the workspace');
    const ended = events.find((event) => event.type === 'turn.ended');
    expect(ended?.type === 'turn.ended' && ended.data).toMatchObject({ reason: 'yielded', text: 'The workspace says hello.' });
    const progress = events.find((event) => event.type === 'progress' && event.data.kind === 'tool_execution');
    expect(progress?.type === 'progress' && progress.data.message).toBe('[1/8] Executing tools: read_file');
    watcher.stop();
  });

  it('scrubs what a tool read, and a tool error, before the result is logged or shown to the model', async () => {
    const watcher = collectEvents(stack.client, 'default', 'scrub-1');
    await requestJson(stack.client, 'agentbus.default.sessions.scrub-1.prompt', { text: 'What does the README say?' });
    await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    await requestJson(stack.client, 'agentbus.default.sessions.scrub-1.prompt', { text: 'And the settings?' });
    const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length >= 2);
    watcher.stop();
    const results = events.flatMap((event) => (event.type === 'tool.result' ? [event.data] : []));
    const settings = results.find((result) => !result.isError && result.output.includes('log_level'));
    expect(settings?.output).toBe('shop:\n  token: [REDACTED:shopify]\ndatabase:\n  url: [REDACTED:database-connection-string]\nlog_level: info');
    const failed = results.find((result) => result.isError);
    expect(failed?.output).toBe('not_found: no file "[REDACTED:github].txt" in the workspace');
    expect(failed?.error?.message).toBe('no file "[REDACTED:github].txt" in the workspace');
    // The model's own words (its tool call's arguments) are logged as it wrote them; what the tools gave back is not.
    for (const secret of [SHOPIFY_TOKEN, DB_PASSWORD, TOKEN_IN_PATH]) expect(JSON.stringify(results)).not.toContain(secret);
  });

  it('answers a msgpack prompt the same way', async () => {
    const watcher = collectEvents(stack.client, 'default', 'mp-1');
    const reply = await requestMsgpack(stack.client, 'agentbus.default.sessions.mp-1.prompt', { text: 'hello there' });
    expect(reply).toMatchObject({ accepted: true, sessionId: 'mp-1' });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded' } });
    watcher.stop();
  });

  it('marks a new session active once, in the claim, before its prompt is logged', async () => {
    // The lease bucket's writes and the session's log, in the order the server delivered them.
    const codec = createCodec();
    const seen: string[] = [];
    const leases = stack.client.subscribe('$KV.AGENTBUS_LEASES.default.lease-1', {
      callback: (_error, message) => {
        const value = message.data.length > 0 ? (codec.decode(message.data) as { active?: boolean }) : undefined;
        seen.push(`lease active=${value?.active}`);
      },
    });
    const log = stack.client.subscribe('agentbus.default.sessions.lease-1.log', {
      callback: (_error, message) => void seen.push((codec.decode(message.data, message.headers?.get('Content-Type')) as AgentEvent).type),
    });
    const watcher = collectEvents(stack.client, 'default', 'lease-1');
    expect(await requestJson(stack.client, 'agentbus.default.sessions.lease-1.prompt', { text: 'hello' })).toMatchObject({ accepted: true });
    await watcher.until((events) => events.some((event) => event.type === 'turn.ended'));
    watcher.stop();
    leases.unsubscribe();
    log.unsubscribe();
    expect(seen.slice(0, seen.indexOf('user.message') + 1)).toEqual(['lease active=true', 'session.created', 'user.message']);
  });

  it('creates a new session once when two prompts reach it together, and runs both', async () => {
    const watcher = collectEvents(stack.client, 'default', 'twice-1');
    const replies = await Promise.all([
      requestJson(stack.client, 'agentbus.default.sessions.twice-1.prompt', { text: 'first' }),
      requestJson(stack.client, 'agentbus.default.sessions.twice-1.prompt', { text: 'second' }),
    ]);
    expect(replies.map((reply) => reply.accepted)).toEqual([true, true]);
    const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length >= 2);
    watcher.stop();
    expect(events.filter((event) => event.type === 'session.created')).toHaveLength(1);
    expect(events.filter((event) => event.type === 'user.message').map((event) => event.type === 'user.message' && event.data.text).sort()).toEqual(['first', 'second']);
  });
});
