import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { Logger } from '../../src/logging.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import { createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import type { GateTool } from '../helpers/gate-tool.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

const codec = createCodec();
type TurnEnded = Extract<AgentEvent, { type: 'turn.ended' }>;
type ToolUse = Extract<AgentEvent, { type: 'tool.use' }>;
const endedCount = (count: number) => (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended').length >= count;
const hasType = (type: string) => (events: AgentEvent[]) => events.some((event) => event.type === type);

/** Log lines at warn or above, parsed, as pino writes them. */
/** Stores a message on a session's log subject with core NATS, as anyone may on a server without permissions; its sequence. */
async function storeOnLog(stack: TestStack, sessionId: string, body: Uint8Array): Promise<number> {
  const reply = await stack.client.request(`agentbus.default.sessions.${sessionId}.log`, body, { timeout: 5000 });
  const ack = codec.decode(reply.data) as { seq?: number };
  if (!ack.seq) throw new Error('the log stream did not store the message');
  return ack.seq;
}

function readLog(stack: TestStack, sessionId: string) {
  const log = createSessionLog({ nc: stack.client, js: jetstream(stack.client), subjects: createSubjects(), codec, stream: streamNames().log });
  return log.read('default', sessionId);
}

/** A stack whose first model call asks for `gate` (held until it opens), then answers 'done' and 'second answer'. */
function startGatedStack(gate: GateTool, logger: Logger): Promise<TestStack> {
  return startStack({
    script: { responses: [{ toolCalls: [{ name: 'gate', args: {} }] }, { text: 'done' }, { text: 'second answer' }] },
    extraTools: [gate.tool],
    logger,
  });
}

// A session is open, its turn held in a tool call, when a message lands on its log subject. The runtime's next
// append expects the sequence it knows and is refused: what happens then depends on what was stored.
describe('a message stored on the log subject of a session while its turn runs', () => {
  let stack: TestStack;
  const gate = createGateTool('gate');
  const warnings = captureLogs();
  beforeAll(async () => {
    stack = await startGatedStack(gate, warnings.logger);
  });
  afterAll(() => stack?.stop());

  it('that is not a valid event is stepped over: the turn yields with every event logged, and the junk is reported at warn', async () => {
    const watcher = collectEvents(stack.client, 'default', 'junk-mid-turn');
    expect((await requestJson(stack.client, 'agentbus.default.sessions.junk-mid-turn.prompt', { text: 'go' })).accepted).toBe(true);
    await watcher.until(hasType('tool.use'));
    const junk = [
      await storeOnLog(stack, 'junk-mid-turn', new TextEncoder().encode('just text')),
      await storeOnLog(stack, 'junk-mid-turn', codec.encode({ v: 1, id: 'junk', type: 'tool.result', tenant: 'default', sessionId: 'junk-mid-turn', ts: 1, data: 5 })),
    ];
    gate.open();
    const events = await watcher.until(endedCount(1));
    watcher.stop();

    const ended = events.find((event): event is TurnEnded => event.type === 'turn.ended')!;
    expect(ended.data).toMatchObject({ reason: 'yielded', text: 'done' });
    const { events: logged } = await readLog(stack, 'junk-mid-turn');
    expect(logged.map((event) => event.type)).toEqual(['session.created', 'user.message', 'turn.started', 'assistant.message', 'tool.use', 'tool.result', 'assistant.message', 'turn.ended']);
    expect(logged.find((event) => event.type === 'tool.result')).toMatchObject({ data: { output: 'released', isError: false } });
    expect(logged.find((event) => event.type === 'tool.result')!.seq).toBeGreaterThan(junk[1]!);

    const skipped = warnings.lines.filter((line) => line.msg === 'skipped an invalid message in a session log' && line.sessionId === 'junk-mid-turn');
    // Once when the writer looked past its refused append (reading the log back here logs to another logger).
    expect(skipped.map((line) => line.seq)).toEqual(junk);
    expect(warnings.lines.filter((line) => (line.level as number) >= 50)).toEqual([]);
  });
});

// What a second writer would write: a valid event of the same session. The runtime must not write past it, nor
// stall: the turn that cannot log its end is reported, the session is given up here and opened again from its
// log (its lease released active, so a node adopts it at once), and the turn resumes from what the log holds.
describe('a valid event of the session stored on its log subject by someone else while its turn runs', () => {
  let stack: TestStack;
  const gate = createGateTool('gate');
  const warnings = captureLogs();
  beforeAll(async () => {
    stack = await startGatedStack(gate, warnings.logger);
  });
  afterAll(() => stack?.stop());

  it('does not stall the turn: clients get an error event, the failure is logged at error, the turn ends and a later prompt is answered', async () => {
    const target = { tenant: 'default', sessionId: 'rival-mid-turn' };
    const watcher = collectEvents(stack.client, target.tenant, target.sessionId);
    const client = createAgentbusClient({ nc: stack.client });
    const seen: AgentEvent[] = [];
    const asked = client.ask(target, { text: 'go' }, { timeoutMs: 20_000, onEvent: ({ event }) => void seen.push(event) });

    const [use] = (await watcher.until(hasType('tool.use'))).filter((event): event is ToolUse => event.type === 'tool.use');
    const turnId = use!.turnId!;
    const rival = createEnvelopeFactory({ newId: () => 'rival-1', now: Date.now }).create(
      'tool.result',
      { ...target, turnId, step: 1 },
      { toolCallId: use!.data.toolCallId, name: 'gate', output: 'answered by another writer', isError: false, durationMs: 1 },
    );
    await storeOnLog(stack, target.sessionId, codec.encode(rival));
    gate.open();

    // `ask` ends with the turn: resumed from the log once this node gave the session up.
    const ended = await asked;
    expect(ended).toMatchObject({ turnId, reason: 'yielded', text: 'done' });
    const error = seen.find((event) => event.type === 'error');
    expect(error).toMatchObject({ turnId, data: { code: 'conflict' } });

    const failures = warnings.lines.filter((line) => line.level === 50);
    expect(failures).toEqual([expect.objectContaining({ msg: 'turn could not write its end to the log', tenant: 'default', sessionId: 'rival-mid-turn', turnId })]);
    expect(warnings.lines).toEqual(expect.arrayContaining([expect.objectContaining({ level: 40, msg: 'session given up on this node; it will be opened again from its log', sessionId: 'rival-mid-turn' })]));

    const second = await requestJson(stack.client, 'agentbus.default.sessions.rival-mid-turn.prompt', { text: 'again' });
    expect(second.accepted).toBe(true);
    const events = await watcher.until(endedCount(2), 15_000);
    watcher.stop();
    const endings = events.filter((event): event is TurnEnded => event.type === 'turn.ended').map((event) => [event.turnId, event.data.reason, event.data.text]);
    expect(endings).toEqual([
      [turnId, 'yielded', 'done'],
      [second.turnId, 'yielded', 'second answer'],
    ]);

    // The log holds the other writer's result in place of the runtime's, and nothing the runtime wrote past it
    // with a stale sequence; the tool ran once (the resumed turn found its call answered).
    const { events: logged } = await readLog(stack, 'rival-mid-turn');
    expect(logged.map((event) => event.type)).toEqual([
      'session.created',
      'user.message',
      'turn.started',
      'assistant.message',
      'tool.use',
      'tool.result',
      'assistant.message',
      'turn.ended',
      'user.message',
      'turn.started',
      'assistant.message',
      'turn.ended',
    ]);
    expect(logged[5]).toMatchObject({ id: 'rival-1', data: { output: 'answered by another writer' } });
    expect(gate.effects).toHaveLength(1);
  });

  it('refuses a prompt whose append meets such an event while the session is idle, and answers the next one', async () => {
    const target = { tenant: 'default', sessionId: 'rival-idle' };
    const watcher = collectEvents(stack.client, target.tenant, target.sessionId);
    expect((await requestJson(stack.client, 'agentbus.default.sessions.rival-idle.prompt', { text: 'one' })).accepted).toBe(true);
    await watcher.until(endedCount(1));
    const rival = createEnvelopeFactory({ newId: () => 'rival-2', now: Date.now }).create('session.created', target, { createdBy: 'another-node' });
    await storeOnLog(stack, target.sessionId, codec.encode(rival));

    const refused = await requestJson(stack.client, 'agentbus.default.sessions.rival-idle.prompt', { text: 'two' });
    expect(refused).toMatchObject({ accepted: false, error: { code: 'conflict', retryable: true } });
    await watcher.until((events) => events.some((event) => event.type === 'error'));
    const next = await requestJson(stack.client, 'agentbus.default.sessions.rival-idle.prompt', { text: 'three' });
    expect(next.accepted).toBe(true);
    const events = await watcher.until(endedCount(2));
    watcher.stop();
    expect(events.filter((event): event is TurnEnded => event.type === 'turn.ended').map((event) => event.data.reason)).toEqual(['yielded', 'yielded']);
    const { events: logged } = await readLog(stack, 'rival-idle');
    expect(logged.filter((event) => event.type === 'user.message').map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'three']);
  });
});
