import { describe, expect, it } from 'vitest';
import { LogEventType, ZERO_USAGE, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { activeProfileName, agentToolOf, agentTools, childBudget, childSessionId, turnBudget, CHILD_DEADLINE_MARGIN_MS } from '../../services/runtime/agents/agent-tools.ts';
import { resultOfChild } from '../../services/runtime/agents/agent-calls.ts';
import { withProfile } from '../../services/runtime/agents/profile-prompt.ts';
import { parseProfiles, profilesFromEnv } from '../../services/runtime/agents/profiles.ts';

const profiles = parseProfiles({
  profiles: [
    { tenant: 'acme', name: 'researcher', description: 'Finds facts.', model: 'scripted:researcher', tools: ['read_file'], maxSteps: 5, maxCost: 1, deadlineMs: 60_000 },
    { tenant: 'acme', name: 'writer', description: 'Writes.', handoff: true, callable: false },
    { tenant: 'globex', name: 'researcher', description: 'Globex research.' },
  ],
});

let id = 0;
const envelopes = createEnvelopeFactory({ newId: () => `e${++id}`, now: () => 1000 });
const at = { tenant: 'acme', sessionId: 's1', turnId: 't1', step: 1 };
const logged = (event: ReturnType<typeof envelopes.create>, seq: number): LogEvent => ({ ...event, seq }) as LogEvent;

describe('agent profiles', () => {
  it('are looked up per tenant only: a tenant never sees another tenant\'s profile of the same name', () => {
    expect(profiles.get('acme', 'researcher')?.description).toBe('Finds facts.');
    expect(profiles.get('globex', 'researcher')?.description).toBe('Globex research.');
    expect(profiles.get('initech', 'researcher')).toBeUndefined();
    expect(profiles.list('acme').map((profile) => profile.name)).toEqual(['researcher', 'writer']);
  });

  it('refuses a config with a bad field or a name listed twice in one tenant, naming the problem', () => {
    expect(() => parseProfiles({ profiles: [{ tenant: 'acme', name: 'x y', description: 'd' }] })).toThrow(/profiles\.0\.name/);
    expect(() => parseProfiles({ profiles: [{ tenant: 'acme', name: 'a', description: 'd' }, { tenant: 'acme', name: 'a', description: 'e' }] })).toThrow(/acme\/a is listed twice/);
    expect(() => parseProfiles({ profiles: [{ tenant: 'acme', name: 'a', description: 'd', model: 'gpt' }] })).toThrow(/model/);
    expect(() => profilesFromEnv({ AGENTBUS_PROFILES: '{not json' }, () => '')).toThrow(/not JSON/);
    expect(profilesFromEnv({}, () => '')).toBeUndefined();
    expect(profilesFromEnv({ AGENTBUS_PROFILES: 'profiles.json' }, () => JSON.stringify({ profiles: [] }))?.list('acme')).toEqual([]);
  });

  it('offer agent__ and handoff__ tools of the tenant, never the active profile itself, filtered by its allow-list', () => {
    expect(agentTools(profiles, 'acme', undefined).map((tool) => tool.name)).toEqual(['agent__researcher', 'handoff__researcher', 'handoff__writer']);
    expect(agentTools(profiles, 'acme', profiles.get('acme', 'writer')).map((tool) => tool.name)).toEqual(['agent__researcher', 'handoff__researcher']);
    // The researcher's allow-list names only read_file: no agent tool at all.
    expect(agentTools(profiles, 'acme', profiles.get('acme', 'researcher'))).toEqual([]);
    expect(agentTools(profiles, 'globex', undefined).map((tool) => tool.name)).toEqual(['agent__researcher', 'handoff__researcher']);
    const [call] = agentTools(profiles, 'acme', undefined);
    expect(call).toMatchObject({ tier: 'side_effecting', timeoutMs: 60_000, parameters: { required: ['task'] } });
    expect(agentToolOf('agent__researcher')).toEqual({ kind: 'agent', profile: 'researcher' });
    expect(agentToolOf('handoff__writer')).toEqual({ kind: 'handoff', profile: 'writer' });
    expect(agentToolOf('read_file')).toBeUndefined();
  });

  it("fill a prompt's model and budgets from its profile where it names none, and refuse another tenant's profile", () => {
    expect(withProfile({ text: 'go', profile: 'researcher' }, profiles, 'acme')).toEqual({ text: 'go', profile: 'researcher', model: 'scripted:researcher', maxSteps: 5, maxCost: 1, deadlineMs: 60_000 });
    expect(withProfile({ text: 'go', profile: 'researcher', maxSteps: 2, model: 'scripted:other' }, profiles, 'acme')).toMatchObject({ maxSteps: 2, model: 'scripted:other' });
    expect(() => withProfile({ text: 'go', profile: 'writer' }, profiles, 'globex')).toThrow(/no agent profile "writer" in tenant globex/);
    expect(() => withProfile({ text: 'go', profile: 'writer' }, undefined, 'acme')).toThrow(/no agent profile/);
    expect(withProfile({ text: 'go' }, undefined, 'acme')).toEqual({ text: 'go' });
  });

  it("run a turn as its prompt's profile, then as each handoff's, in log order", () => {
    const events = [
      logged(envelopes.create(LogEventType.userMessage, at, { text: 'hi', profile: 'writer' }), 1),
      logged(envelopes.create(LogEventType.userMessage, at, { text: 'steer', steer: true }), 2),
      logged(envelopes.create(LogEventType.turnHandoff, at, { toolCallId: 'c1', to: 'researcher', from: 'writer' }), 3),
    ];
    expect(activeProfileName(events.slice(0, 2))).toBe('writer');
    expect(activeProfileName(events)).toBe('researcher');
    expect(activeProfileName([])).toBeUndefined();
  });
});

describe('child budgets', () => {
  const researcher = profiles.get('acme', 'researcher')!;
  const events = [
    logged(envelopes.create(LogEventType.turnStarted, at, { model: 'scripted:boss', maxSteps: 4, maxCost: 0.5, deadline: 100_000, finalAnswer: true }), 1),
    logged(envelopes.create(LogEventType.assistantMessage, at, { text: '', toolCalls: [], usage: ZERO_USAGE, cost: 0.2, model: 'scripted:boss', finishReason: 'tool_calls' }), 2),
    logged(envelopes.create(LogEventType.toolResult, at, { toolCallId: 'c0', name: 'agent__x', output: 'y', isError: false, durationMs: 1, cost: 0.1 }), 3),
  ];

  it("count what the caller spent, its child calls included, and cap each of the profile's budgets by what is left", () => {
    const parent = turnBudget(events, 2);
    expect(parent).toEqual({ maxSteps: 4, step: 2, maxCost: 0.5, cost: expect.closeTo(0.3, 10) as number, deadline: 100_000 });
    const budget = childBudget(researcher, parent, 50_000, 8, 600_000)!;
    expect(budget.maxSteps).toBe(3);
    expect(budget.maxCost).toBeCloseTo(0.2, 10);
    expect(budget.deadlineMs).toBe(50_000 - CHILD_DEADLINE_MARGIN_MS);
    // The profile's own budgets hold when they are the smaller ones.
    expect(childBudget(researcher, { maxSteps: 100, step: 1, cost: 0 }, 0, 8, 600_000)).toEqual({ maxSteps: 5, maxCost: 1, deadlineMs: 60_000 });
  });

  it('give nothing when the caller has no cost or time left', () => {
    expect(childBudget(researcher, { maxSteps: 4, step: 1, maxCost: 0.3, cost: 0.3 }, 0, 8, 600_000)).toBeNull();
    expect(childBudget(researcher, { maxSteps: 4, step: 1, cost: 0, deadline: 1_000 }, 1_000, 8, 600_000)).toBeNull();
  });

  it('derive the child session from the stable effectId: the same call finds the same child', () => {
    expect(childSessionId('s1:t1:1:call_0')).toBe(childSessionId('s1:t1:1:call_0'));
    expect(childSessionId('s1:t1:1:call_0')).not.toBe(childSessionId('s1:t1:2:call_0'));
    expect(childSessionId('s1:t1:1:call_0')).toMatch(/^sub-[A-Za-z0-9_-]{32}$/);
  });

  it("turn the child's end into the tool's result: its text when it yielded, an error naming why otherwise", () => {
    const yielded = logged(envelopes.create(LogEventType.turnEnded, { ...at, turnId: 'ct' }, { reason: 'yielded', text: '42', usage: ZERO_USAGE, cost: 0.1, steps: 1 }), 9);
    expect(resultOfChild(yielded as Extract<LogEvent, { type: 'turn.ended' }>, 'sub-a')).toEqual({ output: '42', child: { sessionId: 'sub-a', turnId: 'ct' }, usage: ZERO_USAGE, cost: 0.1 });
    const over = logged(envelopes.create(LogEventType.turnEnded, { ...at, turnId: 'ct' }, { reason: 'budget_exceeded', text: 'partial', usage: ZERO_USAGE, cost: 0.3, steps: 2 }), 9);
    expect(resultOfChild(over as Extract<LogEvent, { type: 'turn.ended' }>, 'sub-a')).toMatchObject({ output: "budget_exceeded: the agent's turn ended budget_exceeded; its last text: partial", error: { code: 'budget_exceeded' }, cost: 0.3 });
  });
});
