import { describe, expect, it } from 'vitest';
import { createEventHub, createFleet, pathOf } from '../../services/dashboard/index.ts';
import type { EventSink } from '../../services/dashboard/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';

let counter = 0;
function event<T extends AgentEvent['type']>(type: T, data: Extract<AgentEvent, { type: T }>['data'], scope: Partial<AgentEvent> = {}): AgentEvent {
  counter += 1;
  return { v: 1, id: `e${counter}`, type, tenant: 'acme', sessionId: 's1', turnId: 't1', ts: 1000 + counter, data, ...scope } as AgentEvent;
}
const usage = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens });

/** A turn that calls one tool and yields, as the runtime publishes it (log and live). */
function toolTurn(scope: Partial<AgentEvent> = {}): AgentEvent[] {
  return [
    event('session.created', { createdBy: 'node-a' }, { ...scope, turnId: undefined }),
    event('user.message', { text: 'hi', maxSteps: 4 }, scope),
    event('state', { machine: 'turn', value: 'Preparing', event: 'xstate.init' }, scope),
    event('progress', { kind: 'provider_call', message: '[1/4] Calling scripted:default', step: 1, maxSteps: 4 }, { ...scope, step: 1 }),
    event('state', { machine: 'turn', value: 'Streaming', event: 'xstate.done.actor.prepare' }, scope),
    event('assistant.delta', { text: 'Let me ' }, scope),
    event('assistant.delta', { text: 'look.' }, scope),
    event('assistant.message', { text: 'Let me look.', toolCalls: [{ id: 'c1', name: 'read_file', args: { path: 'a' } }], usage: usage(100, 10), cost: 0.01, model: 'scripted:default', finishReason: 'tool_calls' }, { ...scope, step: 1 }),
    event('state', { machine: 'turn', value: 'ToolExecution', event: 'xstate.done.actor.stream' }, scope),
    event('tool.use', { toolCallId: 'c1', effectId: 'x', name: 'read_file', args: { path: 'a' }, tier: 'read_only' }, { ...scope, step: 1 }),
    event('tool.result', { toolCallId: 'c1', name: 'read_file', output: 'text', isError: false, durationMs: 3 }, { ...scope, step: 1 }),
    event('state', { machine: 'turn', value: 'Preparing', event: 'xstate.done.actor.executeTools' }, scope),
    event('state', { machine: 'turn', value: 'Streaming', event: 'xstate.done.actor.prepare' }, scope),
    event('assistant.message', { text: 'Done.', toolCalls: [], usage: usage(200, 20), cost: 0.02, model: 'scripted:default', finishReason: 'stop' }, { ...scope, step: 2 }),
    event('state', { machine: 'turn', value: 'Yielding', event: 'xstate.done.actor.stream' }, scope),
    event('turn.ended', { reason: 'yielded', text: 'Done.', usage: usage(300, 30), cost: 0.03, steps: 2 }, scope),
  ];
}

describe('the fleet model', () => {
  it('follows a turn from its prompt to its end: state, step of maxSteps, tokens, cost and node', () => {
    const fleet = createFleet({ now: () => 2000 });
    const events = toolTurn();
    const ended = events.findIndex((candidate) => candidate.type === 'turn.ended');
    for (const item of events.slice(0, ended)) fleet.apply(item);
    const [row] = fleet.snapshot().active;
    expect(row).toMatchObject({ tenant: 'acme', sessionId: 's1', turnId: 't1', node: 'node-a', state: 'Yielding', step: 2, maxSteps: 4, inputTokens: 300, outputTokens: 30, toolCalls: 1 });
    expect(row!.cost).toBeCloseTo(0.03);
    fleet.setNode('acme', 's1', 'node-b');
    expect(fleet.snapshot().active[0]!.node).toBe('node-b');
    fleet.apply(events[ended]!);
    const snapshot = fleet.snapshot();
    expect(snapshot.active).toEqual([]);
    expect(snapshot.recent[0]).toMatchObject({ turnId: 't1', reason: 'yielded', state: 'Yielding' });
  });

  it('does not change (nor bump its version) on text deltas', () => {
    const fleet = createFleet();
    fleet.apply(event('user.message', { text: 'hi' }));
    const version = fleet.version;
    expect(fleet.apply(event('assistant.delta', { text: 'x' }))).toBe(false);
    expect(fleet.version).toBe(version);
  });

  it('drops a turn silent for staleMs, with a new version so that open pages drop it too', () => {
    let clock = 2000;
    const fleet = createFleet({ now: () => clock, staleMs: 1000 });
    fleet.apply(event('user.message', { text: 'hi' }));
    expect(fleet.snapshot().active).toHaveLength(1);
    const version = fleet.version;
    clock += 60_000;
    expect(fleet.snapshot().active).toEqual([]);
    expect(fleet.version).toBeGreaterThan(version);
  });

  it('forgets a deleted session: its running and finished turns leave the view, with a new version, and its late events are ignored', () => {
    const fleet = createFleet({ now: () => 2000 });
    for (const item of toolTurn()) fleet.apply(item);
    for (const item of toolTurn({ turnId: 't2' }).slice(0, 4)) fleet.apply(item);
    for (const item of toolTurn({ sessionId: 's2', turnId: 't3' }).slice(0, 4)) fleet.apply(item);
    expect(fleet.snapshot().active.map((row) => row.turnId)).toEqual(['t3', 't2']);
    const version = fleet.version;
    expect(fleet.forget('acme', 's1')).toBe(true);
    expect(fleet.version).toBeGreaterThan(version);
    const snapshot = fleet.snapshot();
    expect(snapshot.active.map((row) => row.turnId)).toEqual(['t3']);
    expect(snapshot.recent).toEqual([]);
    // A straggler of the deleted session does not bring it back.
    expect(fleet.apply(event('state', { machine: 'turn', value: 'Streaming', event: 'late' }, { turnId: 't2' }))).toBe(false);
    expect(fleet.snapshot().active.map((row) => row.turnId)).toEqual(['t3']);
    expect(fleet.forget('acme', 's1')).toBe(false);
  });

  it('backfills a turn it joined mid-way from the log, counting each answer once', () => {
    const fleet = createFleet({ now: () => 2000 });
    const events = toolTurn({ turnId: 'late' });
    const firstAnswer = events.find((candidate) => candidate.type === 'assistant.message')!;
    // The dashboard starts after the prompt: it first hears the first answer, then the tool call.
    fleet.apply(firstAnswer);
    fleet.apply(events.find((candidate) => candidate.type === 'state' && candidate.data.value === 'ToolExecution')!);
    expect(fleet.needsBackfill('late')).toBe(true);
    const log = events.filter((candidate) => ['user.message', 'assistant.message', 'tool.use'].includes(candidate.type)).slice(0, 3);
    fleet.backfill('late', log);
    expect(fleet.needsBackfill('late')).toBe(false);
    const row = fleet.snapshot().active[0]!;
    expect(row).toMatchObject({ startedAt: events.find((candidate) => candidate.type === 'user.message')!.ts, maxSteps: 4, state: 'ToolExecution', inputTokens: 100, outputTokens: 10, toolCalls: 1 });
  });

  it('keeps the session facts of the most recent sessions only', () => {
    const fleet = createFleet({ sessionLimit: 2 });
    for (const sessionId of ['a', 'b', 'c']) fleet.apply(event('state', { machine: 'session', value: 'running', event: 'PROMPT' }, { sessionId, turnId: undefined }));
    expect(Object.keys(fleet.snapshot().sessions)).toEqual(['acme/b', 'acme/c']);
  });

  it('keeps a bounded list of recent turns, newest first', () => {
    const fleet = createFleet({ recentLimit: 3 });
    for (let index = 0; index < 5; index++) {
      fleet.apply(event('user.message', { text: 'hi' }, { turnId: `t${index}` }));
      fleet.apply(event('turn.ended', { reason: 'failed', error: { code: 'internal', message: 'boom', retryable: false }, usage: usage(0, 0), cost: 0, steps: 1 }, { turnId: `t${index}` }));
    }
    const recent = fleet.snapshot().recent;
    expect(recent.map((row) => row.turnId)).toEqual(['t4', 't3', 't2']);
    expect(recent[0]).toMatchObject({ state: 'Failed', error: 'internal: boom' });
  });
});

describe('the replay path', () => {
  it('uses the live state events of a turn while the live stream holds them', () => {
    const events = toolTurn();
    const log = events.filter((candidate) => !['state', 'progress', 'assistant.delta'].includes(candidate.type));
    const live = events.filter((candidate) => candidate.type === 'state');
    expect(pathOf(log, live).map((step) => [step.state, step.source])).toEqual([
      ['Preparing', 'live'], ['Streaming', 'live'], ['ToolExecution', 'live'], ['Preparing', 'live'], ['Streaming', 'live'], ['Yielding', 'live'],
    ]);
  });

  it('infers the path of a turn from its log alone once the live events are gone', () => {
    const log = toolTurn().filter((candidate) => !['state', 'progress', 'assistant.delta'].includes(candidate.type));
    expect(pathOf(log, []).map((step) => step.state)).toEqual(['Preparing', 'Streaming', 'ToolExecution', 'Preparing', 'Streaming', 'Yielding']);
    const cancelled = [
      event('user.message', { text: 'x' }, { turnId: 't9' }),
      event('turn.ended', { reason: 'cancelled', usage: usage(0, 0), cost: 0, steps: 1 }, { turnId: 't9' }),
    ];
    expect(pathOf([...log, ...cancelled], []).slice(-2).map((step) => [step.turnId, step.state])).toEqual([
      ['t9', 'Preparing'],
      ['t9', 'Cancelled'],
    ]);
  });
});

describe('the event hub', () => {
  function sink(): EventSink & { frames: Array<{ name: string; data: unknown }> } {
    const frames: Array<{ name: string; data: unknown }> = [];
    return {
      frames,
      write(chunk) {
        const match = /^event: (\S+)\ndata: (.*)\n\n$/s.exec(chunk);
        if (match) frames.push({ name: match[1]!, data: JSON.parse(match[2]!) });
        return true;
      },
    };
  }

  it('coalesces 100 sessions streaming at once: one message per flush, deltas merged, the fleet only when it changed', () => {
    let fleetVersion = 0;
    const hub = createEventHub({ fleet: () => ({ version: fleetVersion, value: { v: fleetVersion } }), workers: () => ({ version: 0, value: {} }) }, { flushMs: 60_000 });
    const following = sink();
    const overview = sink();
    hub.add(following, 'acme/s7');
    hub.add(overview);
    hub.flush();
    const before = following.frames.length + overview.frames.length;
    for (let round = 0; round < 50; round++) {
      for (let session = 0; session < 100; session++) hub.publish(event('assistant.delta', { text: `${round},` }, { sessionId: `s${session}`, turnId: `t${session}` }));
    }
    fleetVersion += 1;
    hub.flush();
    hub.stop();
    expect(hub.stats().events).toBe(5000);
    // 5000 deltas became: one fleet update for each browser and one session message for the one that follows s7.
    const written = [...following.frames, ...overview.frames].slice(0);
    expect(following.frames.length + overview.frames.length - before).toBe(3);
    const session = following.frames.find((frame) => frame.name === 'session')!.data as AgentEvent[];
    expect(session).toHaveLength(1);
    expect(session[0]).toMatchObject({ type: 'assistant.delta', sessionId: 's7', data: { text: Array.from({ length: 50 }, (_, round) => `${round},`).join('') } });
    expect(overview.frames.filter((frame) => frame.name === 'session')).toEqual([]);
    expect(written.filter((frame) => frame.name === 'fleet')).toHaveLength(4);
  });

  it('disconnects a browser that stopped reading, and keeps serving the others', () => {
    let version = 0;
    const hub = createEventHub({ fleet: () => ({ version, value: { filler: 'x'.repeat(1000) } }), workers: () => ({ version: 0, value: {} }) }, { flushMs: 60_000, maxBufferedBytes: 10_000 });
    let stalledBytes = 0;
    let ended = false;
    const stalled: EventSink = {
      write: (chunk) => ((stalledBytes += chunk.length), false),
      get writableLength() {
        return stalledBytes;
      },
      end: () => void (ended = true),
    };
    const reading = sink();
    hub.add(stalled, 'acme/s1');
    hub.add(reading, 'acme/s1');
    for (let round = 0; round < 20; round++) {
      version += 1;
      hub.flush();
    }
    hub.stop();
    expect(ended).toBe(true);
    expect(stalledBytes).toBeLessThan(20_000);
    expect(reading.frames.filter((frame) => frame.name === 'fleet')).toHaveLength(20);
  });

  it('keeps other events in order around merged deltas, and tells a flooded browser to reload', () => {
    const hub = createEventHub({ fleet: () => ({ version: 0, value: {} }), workers: () => ({ version: 0, value: {} }) }, { flushMs: 60_000, maxQueue: 5 });
    const browser = sink();
    hub.add(browser, 'acme/s1');
    const turn = toolTurn();
    for (const item of turn.slice(0, 9)) hub.publish(item);
    hub.flush();
    hub.stop();
    const names = browser.frames.map((frame) => frame.name);
    expect(names).toContain('reload');
    const last = browser.frames.filter((frame) => frame.name === 'session').at(-1)!.data as AgentEvent[];
    expect(last.map((item) => item.type)).toEqual(['assistant.delta', 'assistant.message', 'state']);
    expect(last[0]).toMatchObject({ data: { text: 'look.' } });
  });
});
