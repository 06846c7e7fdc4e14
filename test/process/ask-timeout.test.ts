import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENTBUS_BIN, offlineEnv, runAgentbus } from '../helpers/agentbus-bin.ts';

let workdir: string;
let up: ChildProcess | undefined;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-ask-timeout-'));
  // One character a second: the answer would take about 20 s.
  await writeFile(join(workdir, 'slow.json'), JSON.stringify({ responses: [{ text: 'a slow answer, one by one', chunkSize: 1, delayMs: 1000 }] }));
});

afterAll(async () => {
  if (up && up.exitCode === null) {
    const exited = new Promise((resolve) => up!.once('exit', resolve));
    up.kill('SIGINT');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
    if (up.exitCode === null) up.kill('SIGKILL');
  }
  await rm(workdir, { recursive: true, force: true });
});

describe('agentbus ask --timeout', () => {
  it('sends the timeout as the turn deadline and ends the turn it gives up on, within seconds, not when the answer would be done', async () => {
    up = spawn(process.execPath, [AGENTBUS_BIN, 'up', '--services', 'runtime,provider,tools,memory', '--script', 'slow.json'], { cwd: workdir, env: offlineEnv() });
    let upOutput = '';
    up.stderr?.on('data', (chunk: Buffer) => (upOutput += chunk.toString()));
    await expect.poll(() => upOutput, { timeout: 60_000, interval: 200 }).toContain('agentbus is up');

    const startedAt = Date.now();
    const asked = await runAgentbus(['ask', '--session', 'slow-1', '--timeout', '2', 'hello'], { cwd: workdir, env: offlineEnv(), timeoutMs: 30_000 });
    expect(asked.code).toBe(1);
    expect(Date.now() - startedAt).toBeLessThan(12_000);

    let events: Array<{ type: string; ts: number; data: { reason?: string; deadlineMs?: number } }> = [];
    await expect
      .poll(
        async () => {
          const shown = await runAgentbus(['show', 'slow-1', '--json'], { cwd: workdir, env: offlineEnv(), timeoutMs: 20_000 });
          events = shown.stdout.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as (typeof events)[number]);
          return events.some((event) => event.type === 'turn.ended');
        },
        { timeout: 20_000, interval: 500 },
      )
      .toBe(true);
    const prompt = events.find((event) => event.type === 'user.message')!;
    const end = events.find((event) => event.type === 'turn.ended')!;
    expect(prompt.data.deadlineMs).toBe(2000);
    expect(['deadline_exceeded', 'cancelled']).toContain(end.data.reason);
    // Ended about when ask gave up: the 25-character answer was cut, not played out.
    expect(end.ts - prompt.ts).toBeLessThan(6000);
    expect(events.some((event) => event.type === 'assistant.message')).toBe(false);
  }, 120_000);
});
