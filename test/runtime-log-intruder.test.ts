import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { createSessionLog } from '../src/bus/session-log.ts';
import { createLogger } from '../src/logging.ts';
import { createCodec, createSubjects, streamNames } from '../src/protocol/index.ts';
import type { AgentEvent } from '../src/protocol/index.ts';
import { createGateTool } from './helpers/gate-tool.ts';
import { collectEvents, requestJson, startStack } from './helpers/stack.ts';
import type { TestStack } from './helpers/stack.ts';

const codec = createCodec();
type TurnEnded = Extract<AgentEvent, { type: 'turn.ended' }>;
type ToolUse = Extract<AgentEvent, { type: 'tool.use' }>;
const endedCount = (count: number) => (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended').length >= count;
const hasType = (type: string) => (events: AgentEvent[]) => events.some((event) => event.type === type);

/** Log lines at warn or above, parsed, as pino writes them. */
function captureWarnings() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ name: 'test', level: 'warn', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { logger, lines };
}

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

// A session is open, its turn held in a tool call, when a message lands on its log subject. The runtime's next
// append expects the sequence it knows and is refused: what happens then depends on what was stored.
describe('a message stored on the log subject of a session while its turn runs', () => {
  let stack: TestStack;
  const gate = createGateTool('gate');
  const warnings = captureWarnings();
  beforeAll(async () => {
    stack = await startStack({
      script: { responses: [{ toolCalls: [{ name: 'gate', args: {} }] }, { text: 'done' }, { text: 'second answer' }] },
      extraTools: [gate.tool],
      logger: warnings.logger,
    });
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
    expect(logged.map((event) => event.type)).toEqual(['session.created', 'user.message', 'assistant.message', 'tool.use', 'tool.result', 'assistant.message', 'turn.ended']);
    expect(logged.find((event) => event.type === 'tool.result')).toMatchObject({ data: { output: 'released', isError: false } });
    expect(logged.find((event) => event.type === 'tool.result')!.seq).toBeGreaterThan(junk[1]!);

    const skipped = warnings.lines.filter((line) => line.msg === 'skipped an invalid message in a session log' && line.sessionId === 'junk-mid-turn');
    // Once when the writer looked past its refused append (reading the log back here logs to another logger).
    expect(skipped.map((line) => line.seq)).toEqual(junk);
    expect(warnings.lines.filter((line) => (line.level as number) >= 50)).toEqual([]);
  });
});
