import { describe, expect, it } from 'vitest';
import { LogEventType, ZERO_USAGE, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../../services/runtime/index.ts';
import type { AgentCallRequest, AgentCaller } from '../../services/runtime/agents/agent-calls.ts';
import { spentSoFar } from '../../services/runtime/agents/agent-calls.ts';
import { parseProfiles } from '../../services/runtime/agents/profiles.ts';
import { MAX_AGENT_DEPTH, runAgentTool } from '../../services/runtime/agents/run-agent-tool.ts';
import { cancelOpenAgentCalls } from '../../services/runtime/agents/step-profile.ts';
import type { SessionServices } from '../../services/runtime/turn/session-services.ts';

// runAgentTool with in-process fakes that record what they are asked: a caller that answers at once, a writer that
// keeps what is appended, a transcript of given events.

const profiles = parseProfiles({
  profiles: [
    { tenant: 'acme', name: 'researcher', description: 'Finds facts.', maxCost: 1 },
    { tenant: 'globex', name: 'spy', description: 'Globex only.' },
  ],
});
let id = 0;
const envelopes = createEnvelopeFactory({ newId: () => `e${++id}`, now: () => 1_000 });
const at = { tenant: 'acme', sessionId: 'boss', turnId: 't1', step: 1 };

function fakes(events: readonly LogEvent[]) {
  const calls: AgentCallRequest[] = [];
  const cancelled: string[] = [];
  const appended: Array<{ type: string; data: unknown }> = [];
  const caller: AgentCaller = {
    call: async (request) => {
      calls.push(request);
      return { output: 'child answer', child: { sessionId: 'sub-x', turnId: 'ct' }, usage: ZERO_USAGE, cost: 0.1 };
    },
    cancel: (_tenant, effectId) => void cancelled.push(effectId),
    spent: async () => undefined,
  };
  const services = {
    tenant: 'acme',
    sessionId: 'boss',
    agents: { profiles, caller },
    transcript: {
      events,
      turnEvents: (turnId: string) => events.filter((event) => event.turnId === turnId),
      openCalls: (turnId: string) => events.filter((event) => event.turnId === turnId && event.type === LogEventType.toolUse).map((event) => ({ id: (event.data as { toolCallId: string }).toolCallId, name: (event.data as { name: string }).name, args: {} })),
    },
    writer: { append: async (type: string, _scope: unknown, data: unknown) => void appended.push({ type, data }) },
    config: DEFAULT_RUNTIME_CONFIG,
    now: () => 10_000,
  } as unknown as SessionServices;
  return { services, calls, appended, cancelled };
}

const started = (maxCost?: number) =>
  ({ ...envelopes.create(LogEventType.turnStarted, at, { model: 'scripted:boss', maxSteps: 8, ...(maxCost === undefined ? {} : { maxCost }), deadline: 900_000, finalAnswer: true }), seq: 2 }) as LogEvent;
const created = (depth?: number) =>
  ({ ...envelopes.create(LogEventType.sessionCreated, { tenant: 'acme', sessionId: 'boss' }, { createdBy: 'n', ...(depth === undefined ? {} : { parent: { sessionId: 'up', turnId: 'u', toolCallId: 'c', effectId: 'e', depth } }) }), seq: 1 }) as LogEvent;
const call = { turnId: 't1', step: 1, toolCallId: 'call_0', effectId: 'boss:t1:1:call_0', args: { task: 'look' } };
const signal = new AbortController().signal;

describe('runAgentTool', () => {
  it('starts a child of depth 1 from a top-level session, with the caller named, and answers with the child', async () => {
    const { services, calls } = fakes([created(), started()]);
    const result = await runAgentTool(services, call, { kind: 'agent', profile: 'researcher' }, signal);
    expect(result).toMatchObject({ output: 'child answer', child: { sessionId: 'sub-x' }, cost: 0.1 });
    expect(calls[0]).toMatchObject({ tenant: 'acme', task: 'look', parent: { sessionId: 'boss', turnId: 't1', toolCallId: 'call_0', effectId: 'boss:t1:1:call_0', depth: 1 } });
  });

  it(`refuses a call that would nest deeper than ${MAX_AGENT_DEPTH} sessions, starting nothing`, async () => {
    const deep = fakes([created(MAX_AGENT_DEPTH), started()]);
    await expect(runAgentTool(deep.services, call, { kind: 'agent', profile: 'researcher' }, signal)).resolves.toMatchObject({ error: { code: 'budget_exceeded' } });
    expect(deep.calls).toEqual([]);
    const below = fakes([created(MAX_AGENT_DEPTH - 1), started()]);
    await runAgentTool(below.services, call, { kind: 'agent', profile: 'researcher' }, signal);
    expect(below.calls[0]?.parent.depth).toBe(MAX_AGENT_DEPTH);
  });

  it("refuses another tenant's profile, a missing task, and a caller with no cost left, starting nothing", async () => {
    const { services, calls } = fakes([created(), started(0.5), { ...envelopes.create(LogEventType.assistantMessage, at, { text: '', toolCalls: [], usage: ZERO_USAGE, cost: 0.5, model: 'scripted:boss', finishReason: 'tool_calls' }), seq: 3 } as LogEvent]);
    await expect(runAgentTool(services, call, { kind: 'agent', profile: 'spy' }, signal)).resolves.toMatchObject({ error: { code: 'unknown_tool' } });
    await expect(runAgentTool(services, { ...call, args: {} }, { kind: 'agent', profile: 'researcher' }, signal)).resolves.toMatchObject({ error: { code: 'invalid_arguments' } });
    await expect(runAgentTool(services, call, { kind: 'agent', profile: 'researcher' }, signal)).resolves.toMatchObject({ error: { code: 'budget_exceeded' } });
    expect(calls).toEqual([]);
  });

  it('logs a handoff as turn.handoff naming the profile it moves to', async () => {
    const { services, appended, calls } = fakes([created(), started()]);
    const result = await runAgentTool(services, { ...call, args: {} }, { kind: 'handoff', profile: 'researcher' }, signal);
    expect(result.error).toBeUndefined();
    expect(appended).toEqual([{ type: 'turn.handoff', data: { toolCallId: 'call_0', to: 'researcher' } }]);
    expect(calls).toEqual([]);
  });
});

describe('cancelOpenAgentCalls', () => {
  it("cancels the child of each agent call the ending turn leaves open, by its effectId, and nothing else", () => {
    const use = (toolCallId: string, name: string, effectId: string) => ({ ...envelopes.create(LogEventType.toolUse, at, { toolCallId, effectId, name, args: {}, tier: 'side_effecting' }), seq: 5 }) as LogEvent;
    const { services, cancelled } = fakes([created(), started(), use('c1', 'agent__researcher', 'eff-1'), use('c2', 'read_file', 'eff-2')]);
    cancelOpenAgentCalls(services, 't1', 'the calling turn ended cancelled');
    expect(cancelled).toEqual(['eff-1']);
    const none = fakes([created(), started()]);
    cancelOpenAgentCalls(none.services, 't1', 'x');
    expect(none.cancelled).toEqual([]);
  });
});

describe('spentSoFar', () => {
  it('sums a child turn\'s provider, summary and nested agent calls from its log, and nothing of other turns', () => {
    const turn = { tenant: 'acme', sessionId: 'sub-x', turnId: 'ct', step: 1 };
    const events = [
      { ...envelopes.create(LogEventType.assistantMessage, turn, { text: '', toolCalls: [], usage: { inputTokens: 10, outputTokens: 2 }, cost: 0.1, model: 'scripted:a', finishReason: 'tool_calls' }), seq: 3 },
      { ...envelopes.create(LogEventType.summaryCreated, turn, { text: 's', throughSeq: 2, tokens: 5, usage: { inputTokens: 5, outputTokens: 1 }, cost: 0.02 }), seq: 4 },
      { ...envelopes.create(LogEventType.toolResult, turn, { toolCallId: 'c', name: 'agent__b', output: 'x', isError: false, durationMs: 1, usage: { inputTokens: 1, outputTokens: 1 }, cost: 0.03 }), seq: 5 },
      { ...envelopes.create(LogEventType.assistantMessage, { ...turn, turnId: 'other' }, { text: '', toolCalls: [], usage: { inputTokens: 99, outputTokens: 99 }, cost: 9, model: 'scripted:a', finishReason: 'stop' }), seq: 6 },
    ] as LogEvent[];
    const spent = spentSoFar(events, 'ct');
    expect(spent.usage).toEqual({ inputTokens: 16, outputTokens: 4 });
    expect(spent.cost).toBeCloseTo(0.15);
  });
});
