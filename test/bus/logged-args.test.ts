import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { z } from 'zod';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { AgentEvent, EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import { createHookWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { HookWorker } from '../../src/tool-sdk/index.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { ALPHABET, createRandom } from '../helpers/secret-corpus.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// What a tool call's arguments leave in the session log: the scrubber's view of them, while the tool gets the real
// ones; and what a turn resumed from such a log does with a call whose logged arguments were redacted.

const codec = createCodec();
const subjects = createSubjects();
const random = createRandom(2026);
const apiKey = `sk-live-${random.from(ALPHABET.base62, 40)}`;
const githubToken = `ghp_${random.from(ALPHABET.base62, 36)}`;
const curl = `curl -H 'Authorization: Bearer ${apiKey}' https://api.example.com/v1/charges`;
const doToken = `dop_v1_${random.from(ALPHABET.hex, 64)}`;

/** Arguments each tool was called with, by session. */
const received = new Map<string, unknown[]>();
const record = (sessionId: string, args: unknown) => received.set(sessionId, [...(received.get(sessionId) ?? []), args]);

const fetchUrl = defineTool({
  name: 'fetch_with_header',
  description: 'runs a read-only command',
  parameters: z.object({ cmd: z.string() }),
  tier: 'read_only',
  timeoutMs: 5000,
  idempotent: true,
  execute: (args, { sessionId }) => (record(sessionId, args), 'fetched'),
});

const deploy = defineTool({
  name: 'deploy',
  description: 'deploys with a token; needs a human yes',
  parameters: z.object({ target: z.string(), token: z.string() }),
  tier: 'privileged',
  timeoutMs: 5000,
  idempotent: false,
  execute: (args, { sessionId }) => (record(sessionId, args), 'deployed'),
});

let live: TestStack;
let resumed: TestStack;
let hookConnection: NatsConnection;
let hook: HookWorker;

beforeAll(async () => {
  const toolCalls = [
    { name: 'fetch_with_header', args: { cmd: curl } },
    { name: 'deploy', args: { target: 'prod', token: githubToken } },
  ];
  live = await startStack({
    script: { responses: [{ toolCalls }, { text: 'all done' }] },
    extraTools: [fetchUrl, deploy],
    runtime: { toolHooks: { before: ['inject'], after: [], timeoutMs: 5000, onError: 'block' } },
  });
  hookConnection = await connect({ servers: live.server.url });
  // A before-hook that adds a credential to the command of one session's calls: the worker needs it, the log must not have it.
  hook = createHookWorker({
    nc: hookConnection,
    subjects,
    codec,
    logger: silentLogger(),
    name: 'inject',
    version: '1.0.0',
    before: (request) =>
      request.sessionId === 'hook-injects' && request.name === 'fetch_with_header'
        ? { action: 'continue', args: { cmd: `curl -H 'X-Auth-Token: ${doToken}' https://api.digitalocean.com/v2/droplets` } }
        : { action: 'continue' },
  });
  await hook.start();
  resumed = await startStack({ script: { responses: [{ text: 'resumed turn done' }, { text: 'next turn done' }] }, extraTools: [fetchUrl] });
}, 60_000);

afterAll(async () => {
  await hook?.stop();
  await hookConnection?.close();
  await live?.stop();
  await resumed?.stop();
});

/** The session's events as stored in the log stream. */
async function storedLog(stack: TestStack, sessionId: string): Promise<LogEvent[]> {
  const log = createSessionLog({ nc: stack.client, js: jetstream(stack.client), subjects, codec, stream: streamNames().log });
  return (await log.read('default', sessionId)).events;
}

/** Runs the script's turn in a session of the live stack, approving its privileged call; the approval request as shown. */
async function runApproved(sessionId: string): Promise<Extract<AgentEvent, { type: 'approval.requested' }>> {
  const watcher = collectEvents(live.client, 'default', sessionId);
  expect(await requestJson(live.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'charge and deploy' })).toMatchObject({ accepted: true });
  const asked = await watcher.until((seen) => seen.some((event) => event.type === 'approval.requested'));
  const request = asked.find((event): event is Extract<AgentEvent, { type: 'approval.requested' }> => event.type === 'approval.requested')!;
  await requestJson(live.client, `agentbus.default.sessions.${sessionId}.approve`, { toolCallId: request.data.toolCallId, approved: true });
  await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
  watcher.stop();
  return request;
}

describe('a tool call whose arguments hold secrets', () => {
  it('is logged redacted in assistant.message, approval.requested and tool.use, while each tool gets the real arguments', async () => {
    const sessionId = 'secret-args';
    const request = await runApproved(sessionId);
    expect(request.data).toEqual({ toolCallId: expect.any(String), name: 'deploy', args: { target: 'prod', token: '[REDACTED:github]' }, argsRedacted: true, deadline: expect.any(Number), onTimeout: 'deny' });

    // The tools ran with what the model asked for.
    expect(received.get(sessionId)).toEqual(expect.arrayContaining([{ cmd: curl }, { target: 'prod', token: githubToken }]));

    const events = await storedLog(live, sessionId);
    const stored = JSON.stringify(events);
    expect(stored).not.toContain(apiKey);
    expect(stored).not.toContain(githubToken);
    const message = events.find((event) => event.type === LogEventType.assistantMessage && event.data.toolCalls.length > 0);
    expect(message?.data).toMatchObject({
      toolCalls: [
        { name: 'fetch_with_header', args: { cmd: "curl -H 'Authorization: Bearer [REDACTED:api-key]' https://api.example.com/v1/charges" } },
        { name: 'deploy', args: { target: 'prod', token: '[REDACTED:github]' } },
      ],
    });
    const callIds = message?.type === LogEventType.assistantMessage ? message.data.toolCalls.map((call) => call.id) : [];
    expect(message?.data).toMatchObject({ argsRedacted: callIds });
    const uses = events.filter((event) => event.type === LogEventType.toolUse);
    expect(uses.map((event) => event.data)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'fetch_with_header', args: { cmd: "curl -H 'Authorization: Bearer [REDACTED:api-key]' https://api.example.com/v1/charges" }, argsRedacted: true }),
        expect.objectContaining({ name: 'deploy', args: { target: 'prod', token: '[REDACTED:github]' }, argsRedacted: true }),
      ]),
    );
    expect(events.find((event) => event.type === LogEventType.approvalRequested)?.data).toMatchObject({ args: { token: '[REDACTED:github]' }, argsRedacted: true });
    expect(events.filter((event) => event.type === LogEventType.toolResult).map((event) => event.data)).toEqual(
      expect.arrayContaining([expect.objectContaining({ output: 'fetched', isError: false }), expect.objectContaining({ output: 'deployed', isError: false })]),
    );
    expect(events.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'yielded', text: 'all done' } });
  });

  it('is logged redacted when a before-hook put the secret in, the worker getting the rewritten arguments whole', async () => {
    const sessionId = 'hook-injects';
    await runApproved(sessionId);
    const injected = { cmd: `curl -H 'X-Auth-Token: ${doToken}' https://api.digitalocean.com/v2/droplets` };
    expect(received.get(sessionId)).toEqual(expect.arrayContaining([injected]));
    const events = await storedLog(live, sessionId);
    expect(JSON.stringify(events)).not.toContain(doToken.slice(7));
    expect(events.find((event) => event.type === LogEventType.toolUse && event.data.name === 'fetch_with_header')?.data).toMatchObject({
      args: { cmd: "curl -H 'X-Auth-Token: [REDACTED:digitalocean]' https://api.digitalocean.com/v2/droplets" },
      argsRewrittenBy: ['inject'],
      argsFinal: true,
      argsRedacted: true,
    });
  });
});

type Logged = { [T in keyof EventDataMap]: [T, EventDataMap[T]] }[keyof EventDataMap];

/** Writes a session's log as a node that died mid-turn left it, with `events` after the prompt. */
async function logDiedMidTurn(sessionId: string, events: readonly Logged[]): Promise<void> {
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `${sessionId}-e${id++}`, now: Date.now });
  const scope = { tenant: 'default', sessionId, turnId: 't1', step: 1 };
  const all: Logged[] = [[LogEventType.sessionCreated, { createdBy: 'node-gone' }], [LogEventType.userMessage, { text: 'fetch it' }], ...events];
  const js = jetstream(resumed.client);
  for (const [type, data] of all) {
    const envelope = envelopes.create(type, type === LogEventType.sessionCreated ? { tenant: 'default', sessionId } : scope, data as never);
    await js.publish(subjects.log('default', sessionId), codec.encode(envelope), { msgID: envelope.id });
  }
}

const usage = { inputTokens: 1, outputTokens: 1 };
const redactedArgs = { cmd: "curl -H 'Authorization: Bearer [REDACTED:api-key]' https://api.example.com" };
const asked = (args: unknown, argsRedacted?: string[]): Logged => [
  LogEventType.assistantMessage,
  { text: '', toolCalls: [{ id: 'c1', name: 'fetch_with_header', args }], usage, cost: 0, model: 'scripted:default', finishReason: 'tool_calls', ...(argsRedacted ? { argsRedacted } : {}) },
];
const used = (args: unknown, argsRedacted?: boolean): Logged => [
  LogEventType.toolUse,
  { toolCallId: 'c1', effectId: 'x:t1:c1', name: 'fetch_with_header', args, tier: 'read_only', argsFinal: true, ...(argsRedacted ? { argsRedacted } : {}) },
];

/** Sends a prompt to the session (which opens it and resumes its unfinished turn) and waits for both turns to end. */
async function resumeWithPrompt(sessionId: string): Promise<AgentEvent[]> {
  const watcher = collectEvents(resumed.client, 'default', sessionId);
  expect(await requestJson(resumed.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'and then?' })).toMatchObject({ accepted: true });
  const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
  watcher.stop();
  return events;
}

const notMadeAgain = {
  data: { toolCallId: 'c1', isError: true, error: { code: 'interrupted', message: expect.stringContaining('its arguments held a secret, which the log keeps only redacted') } },
};

describe('a turn resumed from the log of a node that died', () => {
  it('does not send again, with the markers, a read-only call that went out with redacted arguments: it ends interrupted', async () => {
    await logDiedMidTurn('redacted-sent', [asked(redactedArgs, ['c1']), used(redactedArgs, true)]);
    const events = await resumeWithPrompt('redacted-sent');
    expect(received.get('redacted-sent')).toBeUndefined();
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject(notMadeAgain);
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ turnId: 't1', data: { reason: 'yielded', text: 'resumed turn done' } });
  });

  it('does not make a call that never went out when the model\'s arguments were logged redacted', async () => {
    await logDiedMidTurn('redacted-asked', [asked(redactedArgs, ['c1'])]);
    const events = await resumeWithPrompt('redacted-asked');
    expect(received.get('redacted-asked')).toBeUndefined();
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject(notMadeAgain);
  });

  it('sends again a call whose arguments only look redacted (the model copied a marker) but were logged whole', async () => {
    await logDiedMidTurn('marker-copied', [asked(redactedArgs), used(redactedArgs)]);
    const events = await resumeWithPrompt('marker-copied');
    expect(received.get('marker-copied')).toEqual([redactedArgs]);
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({ data: { toolCallId: 'c1', isError: false, output: 'fetched' } });
  });

  it('sends again a call a hook rewrote to arguments without the secret, though the model\'s were redacted', async () => {
    const rewritten = { cmd: 'curl https://api.example.com' };
    await logDiedMidTurn('hook-rewrote', [asked(redactedArgs, ['c1']), used(rewritten)]);
    const events = await resumeWithPrompt('hook-rewrote');
    expect(received.get('hook-rewrote')).toEqual([rewritten]);
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({ data: { toolCallId: 'c1', isError: false, output: 'fetched' } });
  });
});
