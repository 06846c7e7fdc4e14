import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { defineTool } from '../../src/tool-sdk/index.ts';

// A module of tools for `agentbus worker`, for the tests of workers that die mid-call. Each run appends
// `<pid> <tool> <effectId> <ms>` to CALLS_FILE as it starts, so a test knows which process runs a call and
// can count how often an effect ran; then it sleeps `ms` and answers with its process id.

function started(tool: string, effectId: string, ms: number): void {
  const file = process.env.CALLS_FILE;
  if (!file) throw new Error('CALLS_FILE is required');
  appendFileSync(file, `${process.pid} ${tool} ${effectId} ${ms}\n`);
}

export const lookup = defineTool({
  name: 'lookup',
  description: 'Looks something up (read-only); takes `ms`',
  parameters: z.object({ ms: z.number().int().min(0).max(60_000) }),
  tier: 'read_only',
  timeoutMs: 30_000,
  idempotent: true,
  async execute({ ms }, { effectId, signal }) {
    started('lookup', effectId, ms);
    await sleep(ms, undefined, { signal });
    return `lookup done by ${process.pid}`;
  },
});

export const write = defineTool({
  name: 'write',
  description: 'Writes something (a side effect, not idempotent); takes `ms`',
  parameters: z.object({ ms: z.number().int().min(0).max(60_000) }),
  tier: 'side_effecting',
  timeoutMs: 30_000,
  idempotent: false,
  async execute({ ms }, { effectId, signal }) {
    started('write', effectId, ms);
    await sleep(ms, undefined, { signal });
    return `write done by ${process.pid}`;
  },
});
