import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { offlineEnv, runAgentbus } from '../helpers/agentbus-bin.ts';

// The turn's life through the real binary and its embedded stack (nats-server, runtime, provider and tools as
// processes): `turn.started` first with the turn's model, budgets and deadline, and the last answer at maxSteps.

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-ask-turn-'));
  await writeFile(join(workdir, 'README.md'), '# A folder about otters\n');
  await writeFile(
    join(workdir, 'script.json'),
    JSON.stringify({
      responses: [
        { text: 'Looking first.', toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
        // At --max-steps 1 this is the last answer, asked for without tools; the call it names anyway is not made.
        { text: 'From what I saw: a folder about otters.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] },
      ],
    }),
  );
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

describe('ask and the life of its turn, on real processes', () => {
  it('logs turn.started first, and answers once more without tools at maxSteps: budget_exceeded, with that text', async () => {
    const run = await runAgentbus(['ask', '--json', '--max-steps', '1', '--max-cost', '2', '--timeout', '90', 'What is in this folder?'], {
      cwd: workdir,
      env: { ...offlineEnv(), AGENTBUS_SCRIPT: join(workdir, 'script.json') },
      timeoutMs: 120_000,
    });
    // Exits 1: the turn did not yield, it ran out of steps.
    expect(run.code).toBe(1);
    const events = run.stdout.trim().split('\n').map((line) => JSON.parse(line) as AgentEvent);
    const logged = events.filter((event) => !['state', 'progress', 'assistant.delta', 'retry', 'tool.progress'].includes(event.type));
    const prompt = logged.find((event) => event.type === 'user.message')!;
    const ofTurn = logged.filter((event) => event.turnId === prompt.turnId).map((event) => event.type);
    expect(ofTurn.slice(0, 2)).toEqual(['user.message', 'turn.started']);
    const started = logged.find((event): event is Extract<AgentEvent, { type: 'turn.started' }> => event.type === 'turn.started')!;
    expect(started.data).toMatchObject({ model: 'scripted:default', maxSteps: 1, maxCost: 2 });
    // --timeout 90 is the turn's deadline, from the prompt's acceptance.
    expect(started.data.deadline).toBeGreaterThan(prompt.ts + 89_000);
    expect(started.data.deadline).toBeLessThanOrEqual(prompt.ts + 90_000);

    const messages = logged.filter((event): event is Extract<AgentEvent, { type: 'assistant.message' }> => event.type === 'assistant.message');
    expect(messages.map((event) => [event.step, event.data.toolCalls.length, event.data.finalAnswer ?? false])).toEqual([
      [1, 1, false],
      [1, 0, true],
    ]);
    expect(logged.filter((event) => event.type === 'tool.use').map((event) => (event as Extract<AgentEvent, { type: 'tool.use' }>).data.name)).toEqual(['list_dir']);
    expect(logged.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'budget_exceeded', text: 'From what I saw: a folder about otters.', steps: 1 } });
  }, 150_000);
});
