import { describe, expect, it } from 'vitest';
import { Role, TaskState } from '@a2a-js/sdk';
import type { Message, SendMessageRequest } from '@a2a-js/sdk';
import type { AgentbusClient } from '../../src/client/index.ts';
import { AgentbusError } from '../../src/errors.ts';
import type { LogEvent, SessionHistoryReply, SessionsListReply } from '../../src/protocol/index.ts';
import { readA2aConfig } from '../../services/a2a/config.ts';
import { readMessageInput } from '../../services/a2a/message-input.ts';
import { createTaskReader } from '../../services/a2a/task-reader.ts';
import { parseTaskId, stateOf, taskIdOf, taskOf, turnsOf } from '../../services/a2a/turn-task.ts';

// How turns become A2A tasks, read from log events alone (services/a2a/turn-task.ts), and how ListTasks pages them
// (task-reader.ts) over a client that answers history and sessions list from fixed logs.

let seq = 0;
function event<T extends LogEvent['type']>(sessionId: string, turnId: string | undefined, type: T, data: unknown, ts: number): LogEvent {
  seq += 1;
  return { v: 1, id: `e${seq}`, type, tenant: 'acme', sessionId, ...(turnId ? { turnId } : {}), ts, data, seq } as unknown as LogEvent;
}
const usage = { inputTokens: 1, outputTokens: 1 };
const ended = (sessionId: string, turnId: string, reason: string, ts: number, extra: object = {}) => event(sessionId, turnId, 'turn.ended', { reason, usage, cost: 0, steps: 1, ...extra }, ts);

/** A session of three turns: one answered, one cancelled, one still running. */
function sessionLog(sessionId: string, base: number): LogEvent[] {
  return [
    event(sessionId, undefined, 'session.created', { createdBy: 'node' }, base),
    event(sessionId, 'T1', 'user.message', { text: 'first', metadata: { a2a: { messageId: 'm-1' } } }, base + 1),
    event(sessionId, 'T1', 'turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: false }, base + 2),
    ended(sessionId, 'T1', 'yielded', base + 3, { text: 'the answer' }),
    event(sessionId, 'T2', 'user.message', { text: 'second' }, base + 4),
    event(sessionId, 'T2', 'turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: false }, base + 5),
    ended(sessionId, 'T2', 'cancelled', base + 6, { error: { code: 'cancelled', message: 'stopped by a client', retryable: false } }),
    event(sessionId, 'T3', 'user.message', { text: 'third' }, base + 7),
    event(sessionId, 'T3', 'turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: false }, base + 8),
  ];
}

describe('turns as tasks', () => {
  const turns = turnsOf(sessionLog('s-1', 1000));

  it('finds each turn of a session by its prompt, and maps how it ended to a task state', () => {
    expect(turns.map((turn) => [turn.turnId, stateOf(turn)])).toEqual([
      ['T1', TaskState.TASK_STATE_COMPLETED],
      ['T2', TaskState.TASK_STATE_CANCELED],
      ['T3', TaskState.TASK_STATE_WORKING],
    ]);
    const queued = turnsOf([event('s-1', 'T9', 'user.message', { text: 'waits' }, 1)]);
    expect(stateOf(queued[0]!)).toBe(TaskState.TASK_STATE_SUBMITTED);
    for (const reason of ['failed', 'timeout', 'deadline_exceeded', 'budget_exceeded']) {
      const [turn] = turnsOf([event('s', 'T', 'user.message', { text: 'x' }, 1), ended('s', 'T', reason, 2)]);
      expect(stateOf(turn!), reason).toBe(TaskState.TASK_STATE_FAILED);
    }
  });

  it('shows a completed turn with its answer as artifact and status message, the caller\'s message id in the history', () => {
    const task = taskOf(turns[0]!);
    expect(task.id).toBe('s-1.T1');
    expect(task.contextId).toBe('s-1');
    expect(task.status?.timestamp).toBe(new Date(1003).toISOString());
    expect(task.artifacts.map((artifact) => [artifact.artifactId, artifact.parts[0]?.content])).toEqual([['answer', { $case: 'text', value: 'the answer' }]]);
    expect(task.history.map((message) => [message.role, message.messageId, message.parts[0]?.content?.value])).toEqual([
      [Role.ROLE_USER, 'm-1', 'first'],
      [Role.ROLE_AGENT, expect.any(String), 'the answer'],
    ]);
    expect(task.metadata).toEqual({ agentbus: { sessionId: 's-1', turnId: 'T1', reason: 'yielded', steps: 1, cost: 0, usage } });
    // historyLength keeps the newest; 0 keeps none; artifacts only when asked.
    expect(taskOf(turns[0]!, { historyLength: 1 }).history.map((message) => message.role)).toEqual([Role.ROLE_AGENT]);
    expect(taskOf(turns[0]!, { historyLength: 0 }).history).toEqual([]);
    expect(taskOf(turns[0]!, { includeArtifacts: false }).artifacts).toEqual([]);
  });

  it('tells a cancelled turn by the error\'s message, and a running one without a closing message', () => {
    expect(taskOf(turns[1]!).status?.message?.parts[0]?.content).toEqual({ $case: 'text', value: 'stopped by a client' });
    expect(taskOf(turns[1]!).artifacts).toEqual([]);
    expect(taskOf(turns[2]!).status?.message).toBeUndefined();
    expect(taskOf(turns[2]!).history).toHaveLength(1);
  });

  it('puts a typed turn\'s output into the answer artifact as a data part, beside its text', () => {
    const typed = (extra: object) => turnsOf([event('s', 'T', 'user.message', { text: 'count' }, 1), ended('s', 'T', 'yielded', 2, extra)])[0]!;
    const parts = taskOf(typed({ text: '{"n":2}', output: { n: 2 } })).artifacts[0]!.parts;
    expect(parts.map((part) => [part.content, part.mediaType])).toEqual([
      [{ $case: 'text', value: '{"n":2}' }, 'text/plain'],
      [{ $case: 'data', value: { n: 2 } }, 'application/json'],
    ]);
    // A falsy output is an output; a turn that did not yield shows no artifact even with one.
    expect(taskOf(typed({ output: false })).artifacts[0]!.parts.map((part) => part.content)).toEqual([{ $case: 'data', value: false }]);
    const over = turnsOf([event('s', 'T', 'user.message', { text: 'count' }, 1), ended('s', 'T', 'budget_exceeded', 2, { text: '{}', output: {} })])[0]!;
    expect(taskOf(over).artifacts).toEqual([]);
  });

  it('is INPUT_REQUIRED while the turn waits for an approval or an answer, with what it asks as the status message', () => {
    const log = [
      event('s', 'T', 'user.message', { text: 'release' }, 1),
      event('s', 'T', 'turn.started', { model: 'scripted:default', maxSteps: 8, deadline: 0, finalAnswer: false }, 2),
      event('s', 'T', 'approval.requested', { toolCallId: 'c1', name: 'deploy', args: {}, deadline: 9, onTimeout: 'deny' }, 3),
      event('s', 'T', 'approval.decided', { toolCallId: 'c1', approved: true }, 4),
      event('s', 'T', 'tool.use', { toolCallId: 'c2', effectId: 'x', name: 'pick', args: {}, tier: 'side_effecting' }, 5),
      event('s', 'T', 'tool.input_requested', { toolCallId: 'c2', name: 'pick', requestId: 'c2:1', question: 'Which branch?', deadline: 9 }, 6),
      event('s', 'T', 'tool.input_answered', { toolCallId: 'c2', requestId: 'c2:1', answer: 'main' }, 7),
      event('s', 'T', 'tool.input_requested', { toolCallId: 'c2', name: 'pick', requestId: 'c2:2', question: 'Notes?', deadline: 9 }, 8),
      event('s', 'T', 'tool.result', { toolCallId: 'c2', name: 'pick', output: '', isError: true, error: { code: 'timeout', message: 'no answer' }, durationMs: 1 }, 9),
    ];
    const at = (count: number) => turnsOf(log.slice(0, count))[0]!;
    expect([2, 3, 4, 5, 6, 7, 8, 9].map((count) => stateOf(at(count)))).toEqual([
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_INPUT_REQUIRED,
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_INPUT_REQUIRED,
      TaskState.TASK_STATE_WORKING,
      TaskState.TASK_STATE_INPUT_REQUIRED,
      TaskState.TASK_STATE_WORKING,
    ]);
    expect(taskOf(at(3)).status?.message?.parts[0]?.content?.value).toContain('deploy');
    const asking = taskOf(at(6));
    expect(asking.status?.message).toMatchObject({ role: Role.ROLE_AGENT, messageId: log[5]!.id, parts: [{ content: { $case: 'text', value: 'Which branch?' } }] });
    expect(asking.history.map((message) => message.role)).toEqual([Role.ROLE_USER, Role.ROLE_AGENT]);
    expect(taskOf(at(9)).status?.message).toBeUndefined();
  });

  it('names a task by session and turn, and reads only ids of that shape back', () => {
    expect(parseTaskId(taskIdOf('a2a-1', 'NUID123'))).toEqual({ sessionId: 'a2a-1', turnId: 'NUID123' });
    for (const bad of ['', 'no-dot', 'a.b.c', '.x', 'x.', 'bad session.t', `${'s'.repeat(65)}.t`]) expect(parseTaskId(bad), bad).toBeUndefined();
  });
});

describe('a message as a prompt', () => {
  const message = (overrides: Partial<Message>): SendMessageRequest => ({
    tenant: '',
    message: { messageId: 'm', contextId: '', taskId: '', role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [], referenceTaskIds: [], ...overrides },
    configuration: undefined,
    metadata: undefined,
  });
  const text = (value: string) => ({ content: { $case: 'text' as const, value }, metadata: undefined, filename: '', mediaType: '' });

  it('joins text and data parts, keeps the context as the session, and makes one for a message without', () => {
    const data = { content: { $case: 'data' as const, value: { a: 1 } }, metadata: undefined, filename: '', mediaType: '' };
    expect(readMessageInput(message({ contextId: 'ctx-1', parts: [text('hello'), data] }), () => 'new')).toEqual({ sessionId: 'ctx-1', text: 'hello\n{"a":1}', messageId: 'm' });
    expect(readMessageInput(message({ parts: [text('hi')] }), () => 'a2a-new').sessionId).toBe('a2a-new');
  });

  it('refuses a message agentbus cannot take, each with its A2A error', () => {
    const refused = (request: SendMessageRequest) => {
      try {
        readMessageInput(request, () => 'new');
      } catch (error) {
        return (error as Error).name;
      }
      return 'accepted';
    };
    expect(refused(message({ parts: [text('  ')] }))).toBe('RequestMalformedError');
    expect(refused(message({ role: Role.ROLE_AGENT, parts: [text('hi')] }))).toBe('RequestMalformedError');
    expect(refused(message({ contextId: 'has space', parts: [text('hi')] }))).toBe('RequestMalformedError');
    expect(refused(message({ parts: [{ content: { $case: 'url', value: 'https://x' }, metadata: undefined, filename: 'f', mediaType: 'image/png' }] }))).toBe('ContentTypeNotSupportedError');
    expect(refused({ tenant: '', message: undefined, configuration: undefined, metadata: undefined })).toBe('RequestMalformedError');
  });
});

describe('ListTasks over the session logs', () => {
  const logs = new Map<string, LogEvent[]>([
    ['old', sessionLog('old', 1000)],
    ['new', sessionLog('new', 5000)],
  ]);
  const reads: string[] = [];
  const fake = {
    async history(target: { sessionId: string }, query: { afterSeq?: number; limit?: number } = {}): Promise<SessionHistoryReply> {
      reads.push(target.sessionId);
      const log = logs.get(target.sessionId);
      if (!log) throw new AgentbusError('not_found', 'no such session');
      // Two events a page: the reader must follow nextAfterSeq.
      const rest = log.filter((logged) => (logged.seq ?? 0) > (query.afterSeq ?? 0));
      const page = rest.slice(0, 2);
      return { events: page, ...(rest.length > 2 ? { nextAfterSeq: page.at(-1)!.seq! } : {}) };
    },
    async listSessions(): Promise<SessionsListReply> {
      return {
        sessions: [...logs].map(([sessionId, log]) => ({ sessionId, createdAt: log[0]!.ts, lastActivityAt: log.at(-1)!.ts, turns: 2, cost: 0, lastSeq: log.at(-1)!.seq! })),
      };
    },
  };
  const reader = createTaskReader({ client: fake as unknown as AgentbusClient, tenant: 'acme' });

  it('lists every task of the tenant newest first, in pages that join up', async () => {
    const all = await reader.list({});
    expect(all.tasks.map((task) => task.id)).toEqual(['new.T3', 'new.T2', 'new.T1', 'old.T3', 'old.T2', 'old.T1']);
    expect(all).toMatchObject({ nextPageToken: '', pageSize: 50, totalSize: 6 });
    expect(all.tasks.every((task) => task.artifacts.length === 0)).toBe(true);
    const pages: string[] = [];
    let token = '';
    do {
      const page = await reader.list({ pageSize: 4, pageToken: token });
      pages.push(...page.tasks.map((task) => task.id));
      token = page.nextPageToken;
    } while (token);
    expect(pages).toEqual(all.tasks.map((task) => task.id));
  });

  it('reads a listed session\'s log again only once its lastSeq moved, within a bound on the turns it keeps', async () => {
    const cached = createTaskReader({ client: fake as unknown as AgentbusClient, tenant: 'acme' });
    await cached.list({});
    reads.length = 0;
    await cached.list({ pageSize: 2 });
    await cached.list({});
    expect(reads).toEqual([]);
    // One session moves on: only it is read again, and its new turn is listed.
    const moved = [...logs.get('old')!];
    const last = moved.at(-1)!;
    logs.set('old', [...moved, { ...last, id: 'old-later', seq: last.seq! + 1, ts: 9000, turnId: 'T9', type: 'user.message', data: { text: 'later' } } as LogEvent]);
    try {
      const after = await cached.list({});
      expect(new Set(reads)).toEqual(new Set(['old']));
      expect(after.tasks[0]!.id).toBe('old.T9');
    } finally {
      logs.set('old', moved);
    }
    // Keeping at most 3 turns: the two sessions' 6 do not fit together, so each list reads what was dropped.
    const small = createTaskReader({ client: fake as unknown as AgentbusClient, tenant: 'acme', maxCachedTurns: 3 });
    await small.list({});
    reads.length = 0;
    const again = await small.list({});
    expect(again.tasks).toHaveLength(6);
    expect(reads.length).toBeGreaterThan(0);
  });

  it('filters by context, state and time, and refuses a page size or token it cannot use', async () => {
    expect((await reader.list({ contextId: 'old', status: TaskState.TASK_STATE_COMPLETED, includeArtifacts: true })).tasks.map((task) => [task.id, task.artifacts.length])).toEqual([['old.T1', 1]]);
    expect((await reader.list({ statusTimestampAfter: new Date(5004).toISOString() })).tasks.map((task) => task.id)).toEqual(['new.T3', 'new.T2']);
    expect((await reader.list({ contextId: 'missing' })).tasks).toEqual([]);
    await expect(reader.list({ pageSize: 0 })).rejects.toMatchObject({ name: 'RequestMalformedError' });
    await expect(reader.list({ pageSize: 101 })).rejects.toMatchObject({ name: 'RequestMalformedError' });
    await expect(reader.list({ pageToken: 'not-ours' })).rejects.toMatchObject({ name: 'RequestMalformedError' });
  });
});

describe('the A2A server\'s settings', () => {
  it('serves tenant default on 127.0.0.1:4281 without a token unless told otherwise', () => {
    expect(readA2aConfig({})).toMatchObject({ host: '127.0.0.1', port: 4281, tenant: 'default', name: 'agentbus', turnTimeoutMs: 600_000 });
    expect(readA2aConfig({}).token).toBeUndefined();
    expect(readA2aConfig({ AGENTBUS_A2A_PORT: '0', AGENTBUS_A2A_TENANT: 'acme', AGENTBUS_A2A_TOKEN: 'long-enough', AGENTBUS_A2A_MODEL: 'openai:gpt-5.4-mini', AGENTBUS_A2A_MAX_STEPS: '4' })).toMatchObject({
      port: 0,
      tenant: 'acme',
      token: 'long-enough',
      model: 'openai:gpt-5.4-mini',
      maxSteps: 4,
    });
  });

  it.each([
    ['AGENTBUS_A2A_PORT', '70000'],
    ['AGENTBUS_A2A_TOKEN', 'short'],
    ['AGENTBUS_A2A_TENANT', 'two words'],
    ['AGENTBUS_A2A_MODEL', 'no-provider'],
    ['AGENTBUS_A2A_MAX_STEPS', '0'],
    ['AGENTBUS_A2A_TURN_TIMEOUT_MS', String(25 * 60 * 60_000)],
    ['AGENTBUS_A2A_URL', 'not a url'],
  ])('refuses %s=%s, naming it', (name, value) => {
    expect(() => readA2aConfig({ [name]: value })).toThrow(name);
  });
});
