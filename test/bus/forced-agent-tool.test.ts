import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { parseProfiles } from '../../services/runtime/agents/profiles.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// A prompt's forceTool naming an agent tool: accepted when the session may use it (a profile of its own tenant that
// the profile it runs as allows), the child session then answering the forced call; refused otherwise. One cursor per
// session: the child's only step and the caller's step 2 both read the script's only response.

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ text: 'all done' }] },
    profiles: parseProfiles({
      profiles: [
        { tenant: 'default', name: 'helper', description: 'Helps.', tools: ['read_file'] },
        { tenant: 'default', name: 'narrow', description: 'Reads only.', tools: ['read_file'] },
        { tenant: 'globex', name: 'spy', description: 'Another tenant\'s.' },
      ],
    }),
  });
});

afterAll(() => stack?.stop());

type Of<T extends AgentEvent['type']> = Extract<AgentEvent, { type: T }>;
const first = <T extends AgentEvent['type']>(events: readonly AgentEvent[], type: T) => events.find((event): event is Of<T> => event.type === type);

describe('a forced agent tool call', () => {
  it('is accepted for an agent__ tool of the session\'s tenant and runs the child, whose answer is the call\'s result', async () => {
    const watcher = collectEvents(stack.client, 'default', 'forced-agent-1');
    try {
      const accepted = await requestJson(stack.client, 'agentbus.default.sessions.forced-agent-1.prompt', { text: 'delegate', forceTool: { name: 'agent__helper', args: { task: 'say done' } } });
      expect(accepted).toMatchObject({ accepted: true });
      const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
      expect(first(events, 'assistant.message')).toMatchObject({ step: 1, data: { forced: true, toolCalls: [{ name: 'agent__helper', args: { task: 'say done' } }] } });
      expect(first(events, 'tool.use')).toMatchObject({ data: { name: 'agent__helper', tier: 'side_effecting', childSessionId: expect.stringMatching(/^sub-/) } });
      expect(first(events, 'tool.result')).toMatchObject({ data: { name: 'agent__helper', isError: false, output: 'all done' } });
      expect(first(events, 'turn.ended')).toMatchObject({ data: { reason: 'yielded', steps: 2 } });
    } finally {
      watcher.stop();
    }
  });

  it('is refused with invalid_arguments when the args do not match { task: string }', async () => {
    const refused = await requestJson(stack.client, 'agentbus.default.sessions.forced-agent-2.prompt', { text: 'delegate', forceTool: { name: 'agent__helper', args: { task: 3 } } });
    expect(refused).toMatchObject({ accepted: false, error: { code: 'invalid_arguments', message: expect.stringContaining('arguments do not match the schema of agent__helper: task:') } });
  });

  it.each([
    ['a profile of another tenant', 'agent__spy', undefined],
    ['a profile that does not exist', 'handoff__nobody', undefined],
    ['an agent tool the active profile does not allow', 'agent__helper', 'narrow'],
  ])('is refused with unknown_tool for %s', async (_what, name, profile) => {
    const refused = await requestJson(stack.client, 'agentbus.default.sessions.forced-agent-3.prompt', { text: 'delegate', forceTool: { name, args: { task: 'x' } }, ...(profile ? { profile } : {}) });
    expect(refused).toMatchObject({ accepted: false, error: { code: 'unknown_tool', message: expect.stringContaining(`this session may use no agent tool named "${name}"`) } });
  });
});
