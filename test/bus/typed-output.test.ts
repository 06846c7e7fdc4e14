import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Subscription } from '@nats-io/nats-core';
import { jetstream } from '@nats-io/jetstream';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent, EventDataMap, GenerateRequest } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// Typed final output end to end: a real nats-server, the runtime, the scripted provider and the tools service in
// process. The scripted provider has no native structured output: its text is the answer, checked by the runtime.
// One script per stack, one cursor per session, so each case has a stack of its own.

const schema = {
  type: 'object',
  properties: { files: { type: 'integer', minimum: 0 }, summary: { type: 'string' } },
  required: ['files', 'summary'],
  additionalProperties: false,
};

type Of<T extends AgentEvent['type']> = Extract<AgentEvent, { type: T }>;
const ofType = <T extends AgentEvent['type']>(events: readonly AgentEvent[], type: T) => events.filter((event): event is Of<T> => event.type === type);

async function runTurn(stack: TestStack, sessionId: string, prompt: Record<string, unknown>): Promise<AgentEvent[]> {
  const watcher = collectEvents(stack.client, 'default', sessionId);
  try {
    expect(await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, prompt)).toMatchObject({ accepted: true });
    return await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
  } finally {
    watcher.stop();
  }
}

describe('a typed prompt whose first final answer does not match', () => {
  let stack: TestStack;
  // Every generate request on the bus, as the provider receives it.
  const generated: GenerateRequest[] = [];
  let generates: Subscription;
  beforeAll(async () => {
    stack = await startStack({
      script: {
        responses: [
          { text: 'Let me look.', toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
          { text: 'There is one file, README.md.' },
          { text: '{"files": 1, "summary": "one README"}' },
        ],
      },
    });
    const codec = createCodec();
    generates = stack.client.subscribe('agentbus.provider.*.generate', {
      callback: (error, message) => {
        if (!error) generated.push(codec.decode(message.data) as GenerateRequest);
      },
    });
    await stack.client.flush();
  });
  afterAll(() => {
    generates?.unsubscribe();
    return stack?.stop();
  });

  it('calls tools as usual, feeds the validation error back once, and delivers the parsed JSON as turn.ended.data.output', async () => {
    const events = await runTurn(stack, 'typed-1', { text: 'count the files', outputSchema: schema });
    expect(ofType(events, 'tool.result')).toMatchObject([{ data: { name: 'list_dir', isError: false } }]);
    const answers = ofType(events, 'assistant.message');
    expect(answers.map((event) => event.step)).toEqual([1, 2, 2]);
    expect(answers[1]!.data).toMatchObject({ text: 'There is one file, README.md.', toolCalls: [], outputError: expect.stringContaining('not JSON') });
    expect(answers[2]!.data.outputError).toBeUndefined();
    const feedback = ofType(events, 'user.message').filter((event) => event.data.outputRetry === true);
    expect(feedback).toHaveLength(1);
    expect(feedback[0]).toMatchObject({ step: 2, data: { steer: true, text: expect.stringContaining('did not match the required JSON Schema') } });
    const retry = ofType(events, 'retry');
    expect(retry).toEqual(expect.arrayContaining([expect.objectContaining({ data: expect.objectContaining({ error: expect.objectContaining({ code: 'output_invalid' }) }) })]));
    const ended = ofType(events, 'turn.ended')[0]!;
    expect(ended.data).toMatchObject({ reason: 'yielded', text: '{"files": 1, "summary": "one README"}', output: { files: 1, summary: 'one README' }, steps: 2 });
    // Each of the three provider calls carried the schema, the instruction and the tools; the retry carried the exchange.
    const calls = generated.filter((request) => request.sessionId === 'typed-1');
    expect(calls).toHaveLength(3);
    for (const call of calls) {
      expect(call.outputSchema).toEqual(schema);
      expect(call.tools.map((tool) => tool.name)).toContain('list_dir');
      expect(call.messages.some((message) => message.role === 'system' && message.content.includes('reply with only a JSON value that matches this JSON Schema'))).toBe(true);
    }
    expect(calls[2]!.messages.slice(-2)).toEqual([
      { role: 'assistant', content: 'There is one file, README.md.' },
      { role: 'user', content: expect.stringContaining('Your final answer did not match the required JSON Schema: the answer is not JSON') },
    ]);
  });

  it('logs the schema with the prompt and gives the model the instruction (a dry run shows the prepared request)', async () => {
    const watcher = collectEvents(stack.client, 'default', 'typed-dry');
    try {
      expect(await requestJson(stack.client, 'agentbus.default.sessions.typed-dry.prompt', { text: 'count', outputSchema: schema, dryRun: true })).toMatchObject({ accepted: true });
      const events = await watcher.until((seen) => seen.some((event) => event.type === 'request.prepared'));
      const prepared = ofType(events, 'request.prepared')[0]!;
      const system = JSON.stringify(prepared.data);
      expect(system).toContain('reply with only a JSON value that matches this JSON Schema');
      expect(system).toContain('\\"required\\":[\\"files\\",\\"summary\\"]');
    } finally {
      watcher.stop();
    }
  });
});

describe('a typed prompt whose answer never matches', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'not json at all' }, { text: '{"files": "three", "summary": "x"}' }, { text: '{"files": 3, "summary": "late"}' }] } });
  });
  afterAll(() => stack?.stop());

  it('is retried once only, then ends failed with output_invalid, its text kept and no output', async () => {
    const events = await runTurn(stack, 'typed-2', { text: 'count the files', outputSchema: schema });
    const answers = ofType(events, 'assistant.message');
    expect(answers).toHaveLength(2);
    expect(answers[1]!.data.outputError).toContain('/files must be integer');
    const ended = ofType(events, 'turn.ended')[0]!;
    expect(ended.data).toMatchObject({ reason: 'failed', text: '{"files": "three", "summary": "x"}', error: { code: 'output_invalid', retryable: false, message: expect.stringContaining('/files must be integer') } });
    expect(ended.data.output).toBeUndefined();
  });

  it('does not touch a prompt without a schema: plain text yields as before', async () => {
    const events = await runTurn(stack, 'untyped', { text: 'hello' });
    const ended = ofType(events, 'turn.ended')[0]!;
    expect(ended.data).toMatchObject({ reason: 'yielded', text: 'not json at all' });
    expect(ended.data.output).toBeUndefined();
    expect(ofType(events, 'assistant.message')[0]!.data.outputError).toBeUndefined();
  });

  it.each([
    ['a keyword of the wrong shape', { type: 'object', properties: { n: { type: 'integr' } } }, 'outputSchema is not a valid JSON Schema: outputSchema/properties/n/type'],
    ['a $ref that does not resolve', { type: 'object', properties: { n: { $ref: '#/$defs/missing' } } }, "can't resolve reference"],
    ['a root that is not an object schema', { type: 'array', items: { type: 'string' } }, '"type" is "object"'],
    ['an unknown $schema', { $schema: 'https://example.com/mine', type: 'object' }, 'unsupported $schema'],
    ['one over the size cap', { type: 'object', description: 'x'.repeat(40_000) }, 'at most 32768 characters'],
    ['a pattern that can backtrack catastrophically', { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } }, 'exponential time'],
  ])('is refused on ingress with invalid_input when its schema is %s', async (_what, outputSchema, message) => {
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.typed-bad.prompt', { text: 'hi', outputSchema });
    expect(reply).toMatchObject({ accepted: false, error: { code: 'invalid_input', message: expect.stringContaining(message) } });
  });
});

describe('a typed prompt whose mismatched answer spent its maxCost', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'not json at all', cost: 0.02 }, { text: '{"files": 3, "summary": "too late"}', cost: 0.02 }] } });
  });
  afterAll(() => stack?.stop());

  it('ends budget_exceeded without the retry: no correction logged, no second provider call', async () => {
    const events = await runTurn(stack, 'typed-cost', { text: 'count the files', outputSchema: schema, maxCost: 0.02 });
    expect(ofType(events, 'assistant.message')).toHaveLength(1);
    expect(ofType(events, 'user.message').filter((event) => event.data.outputRetry === true)).toHaveLength(0);
    const ended = ofType(events, 'turn.ended')[0]!;
    expect(ended.data).toMatchObject({ reason: 'budget_exceeded', text: 'not json at all', cost: 0.02 });
    expect(ended.data.output).toBeUndefined();
  });
});

describe('a typed turn found answered in the log of a node that died before its turn.ended', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'next turn done' }] } });
  });
  afterAll(() => stack?.stop());

  /** Writes what the dead node left: the typed prompt and its answer, no turn.ended. */
  async function logAnswered(sessionId: string, answerText: string): Promise<void> {
    let id = 0;
    const envelopes = createEnvelopeFactory({ newId: () => `${sessionId}-e${id++}`, now: Date.now });
    const codec = createCodec();
    const subjects = createSubjects();
    const usage = { inputTokens: 1, outputTokens: 1 };
    const events: Array<{ [T in keyof EventDataMap]: [T, EventDataMap[T]] }[keyof EventDataMap]> = [
      [LogEventType.sessionCreated, { createdBy: 'node-gone' }],
      [LogEventType.userMessage, { text: 'count', outputSchema: schema }],
      [LogEventType.assistantMessage, { text: answerText, toolCalls: [], usage, cost: 0, model: 'scripted:default', finishReason: 'stop' }],
    ];
    const js = jetstream(stack.client);
    for (const [type, data] of events) {
      const scope = type === LogEventType.sessionCreated ? { tenant: 'default', sessionId } : { tenant: 'default', sessionId, turnId: 't1', ...(type === LogEventType.assistantMessage ? { step: 1 } : {}) };
      const envelope = envelopes.create(type, scope, data as never);
      await js.publish(subjects.log('default', sessionId), codec.encode(envelope), { msgID: envelope.id });
    }
  }

  async function resume(sessionId: string): Promise<Of<'turn.ended'>> {
    const watcher = collectEvents(stack.client, 'default', sessionId);
    try {
      expect(await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'and then?' })).toMatchObject({ accepted: true });
      const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
      return ofType(events, 'turn.ended').find((event) => event.turnId === 't1')!;
    } finally {
      watcher.stop();
    }
  }

  it('is ended with its answer checked: the output when it matches', async () => {
    await logAnswered('typed-resume-ok', '{"files": 2, "summary": "two"}');
    expect((await resume('typed-resume-ok')).data).toMatchObject({ reason: 'yielded', output: { files: 2, summary: 'two' } });
  });

  it('is ended failed with output_invalid, its text kept, when it does not', async () => {
    await logAnswered('typed-resume-bad', 'two files');
    const ended = await resume('typed-resume-bad');
    expect(ended.data).toMatchObject({ reason: 'failed', text: 'two files', error: { code: 'output_invalid' } });
    expect(ended.data.output).toBeUndefined();
  });
});
