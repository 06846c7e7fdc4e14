import { describe, expect, it } from 'vitest';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { LogEventType, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import { createSessionWriter } from '../../services/runtime/sessions/session-writer.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';

// The session writer scrubs tool-call arguments on their way to the log (asynchronously: the full pass), without
// changing the order events were asked for in, nor the data its caller holds.

/** A log in memory that stores whatever comes, in order. */
function memoryLog() {
  const stored: LogEvent[] = [];
  const log: SessionLog = {
    append: async (event) => (stored.push(event), stored.length),
    async appendGroup(events, _expectedSeq, onStored) {
      for (const event of events) onStored(events.indexOf(event), stored.push(event), event);
    },
    read: async () => ({ events: [...stored], lastSeq: stored.length, more: false }),
    lastSeq: async () => stored.length,
  };
  return { log, stored };
}

/** The real scrubber, its value pass held up until `release` is called. */
function heldScrubber() {
  const real = createScrubber();
  let release = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const scrubber: Pick<Scrubber, 'scrubValue'> = { scrubValue: async (value) => (await held, real.scrubValue(value)) };
  return { scrubber, release };
}

const token = 'ghp_0123456789abcdefABCDEF0123456789abcd';
const usage = { inputTokens: 1, outputTokens: 1 };

describe('the session writer with a scrubber', () => {
  it('keeps appends in the order asked for while arguments are being scrubbed, and logs them scrubbed', async () => {
    const { log, stored } = memoryLog();
    const { scrubber, release } = heldScrubber();
    let id = 0;
    const transcript = createTranscript();
    const writer = createSessionWriter({ tenant: 't', sessionId: 's', log, envelopes: createEnvelopeFactory({ newId: () => `e${++id}`, now: () => 1 }), transcript, scrubber });
    const args = { cmd: `git push https://x:${token}@github.com/acme/app.git` };
    const scope = { turnId: 'turn-1', step: 1 };
    const message = writer.append(LogEventType.assistantMessage, scope, { text: '', toolCalls: [{ id: 'c1', name: 'run_command', args }], usage, cost: 0, model: 'scripted:default', finishReason: 'tool_calls' });
    const use = writer.append(LogEventType.toolUse, scope, { toolCallId: 'c1', effectId: 's:turn-1:c1', name: 'run_command', args, tier: 'privileged', argsFinal: true });
    const result = writer.append(LogEventType.toolResult, scope, { toolCallId: 'c1', name: 'run_command', output: 'pushed', isError: false, durationMs: 3 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(stored).toEqual([]);
    release();
    await Promise.all([message, use, result]);

    expect(stored.map((event) => event.type)).toEqual(['assistant.message', 'tool.use', 'tool.result']);
    expect(JSON.stringify(stored)).not.toContain(token);
    expect(stored[0]?.data).toMatchObject({ toolCalls: [{ id: 'c1', args: { cmd: expect.stringContaining('[REDACTED:') } }], argsRedacted: ['c1'] });
    expect(stored[1]?.data).toMatchObject({ args: { cmd: expect.stringContaining('[REDACTED:') }, argsRedacted: true });
    // The transcript holds what the log holds; the caller's arguments are left whole.
    expect(transcript.events.map((event) => event.data)).toEqual(stored.map((event) => event.data));
    expect(args.cmd).toContain(token);
  });

  it('logs arguments without a secret as they are, with no argsRedacted', async () => {
    const { log, stored } = memoryLog();
    const writer = createSessionWriter({ tenant: 't', sessionId: 's', log, envelopes: createEnvelopeFactory({ newId: () => 'e1', now: () => 1 }), transcript: createTranscript(), scrubber: createScrubber() });
    const data = { toolCallId: 'c1', effectId: 's:t:c1', name: 'read_file', args: { path: 'README.md' }, tier: 'read_only' as const, argsFinal: true };
    await writer.append(LogEventType.toolUse, { turnId: 't', step: 1 }, data);
    expect(stored[0]?.data).toEqual(data);
  });

  it('scrubs a call\'s arguments once for its assistant.message and its tool.use, and a rewritten copy again', async () => {
    const { log, stored } = memoryLog();
    const real = createScrubber();
    const seen: unknown[] = [];
    const scrubber: Pick<Scrubber, 'scrubValue'> = { scrubValue: (value) => (seen.push(value), real.scrubValue(value)) };
    const writer = createSessionWriter({ tenant: 't', sessionId: 's', log, envelopes: createEnvelopeFactory({ newId: () => 'e1', now: () => 1 }), transcript: createTranscript(), scrubber });
    const args = { cmd: `curl -H "Authorization: token ${token}"` };
    const rewritten = { cmd: `curl -H "Authorization: token ${token}" -v` };
    const scope = { turnId: 't', step: 1 };
    await writer.append(LogEventType.assistantMessage, scope, { text: '', toolCalls: [{ id: 'c1', name: 'run_command', args }], usage, cost: 0, model: 'scripted:default', finishReason: 'tool_calls' });
    await writer.append(LogEventType.toolUse, scope, { toolCallId: 'c1', effectId: 's:t:c1', name: 'run_command', args, tier: 'privileged', argsFinal: true });
    await writer.append(LogEventType.toolUse, scope, { toolCallId: 'c1', effectId: 's:t:c1', name: 'run_command', args: rewritten, tier: 'privileged', argsFinal: true });
    expect(seen).toEqual([args, rewritten]);
    expect(JSON.stringify(stored)).not.toContain(token);
    expect(stored.slice(1).map((event) => event.data)).toMatchObject([{ argsRedacted: true }, { argsRedacted: true }]);
  });
});
