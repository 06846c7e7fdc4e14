import { spawn } from 'node:child_process';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { AGENTBUS_BIN } from '../helpers/agentbus-bin.ts';
import { ROOT } from '../helpers/service-process.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// Tool workers as real `agentbus worker` processes, three of them, serving one session: a busy step spreads
// over all three, and a worker SIGKILLed mid-call costs that call a few seconds, not its timeout. A read-only
// call is made again on another worker; a side-effecting one ends `interrupted` and is not run twice.

const BUSY_LOOKUPS = 24;
const BUSY_WRITES = 3;
const SCRIPT = {
  responses: [
    {
      toolCalls: [
        ...Array.from({ length: BUSY_LOOKUPS }, () => ({ name: 'lookup', args: { ms: 100 } })),
        ...Array.from({ length: BUSY_WRITES }, () => ({ name: 'write', args: { ms: 50 } })),
      ],
    },
    { toolCalls: [{ name: 'lookup', args: { ms: 2500 } }] },
    { toolCalls: [{ name: 'write', args: { ms: 8000 } }] },
    { text: 'done despite the crashes' },
  ],
};
const TENANT = 'acme';
const SESSION = 'busy-1';

let stack: TestStack;
let folder: string;
let callsFile: string;
const workers = new Map<number, ChildProcessWithoutNullStreams>();

interface CallLine {
  readonly pid: number;
  readonly tool: string;
  readonly effectId: string;
  readonly ms: number;
}

async function calls(): Promise<CallLine[]> {
  const text = await readFile(callsFile, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [pid, tool, effectId, ms] = line.split(' ');
      return { pid: Number(pid), tool: tool!, effectId: effectId!, ms: Number(ms) };
    });
}

/** Starts `agentbus worker test/helpers/liveness-tools.ts` and waits for its "serving" line. */
async function startWorker(): Promise<void> {
  const child = spawn(process.execPath, [AGENTBUS_BIN, 'worker', 'test/helpers/liveness-tools.ts', '--nats', stack.server.url], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', CALLS_FILE: callsFile, LOG_LEVEL: 'warn' },
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "serving" line within 20 s:\n${output}`)), 20_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('serving')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`worker exited with ${code}:\n${output}`)));
  });
  workers.set(child.pid!, child);
}

function kill(pid: number): void {
  workers.get(pid)?.kill('SIGKILL');
  workers.delete(pid);
}

beforeAll(async () => {
  folder = await mkdtemp(join(tmpdir(), 'agentbus-worker-failover-'));
  callsFile = join(folder, 'calls.txt');
  await writeFile(callsFile, '');
  stack = await startStack({ script: SCRIPT });
  await Promise.all([startWorker(), startWorker(), startWorker()]);
}, 60_000);

afterAll(async () => {
  for (const child of workers.values()) child.kill('SIGKILL');
  await stack?.stop();
  if (folder) await rm(folder, { recursive: true, force: true });
});

const results = (events: readonly AgentEvent[]) => events.filter((event): event is Extract<AgentEvent, { type: 'tool.result' }> => event.type === 'tool.result');

describe('three tool workers serving one session', () => {
  it('spread a busy step over all three workers, every call answered once', async () => {
    const events = collectEvents(stack.client, TENANT, SESSION);
    // One step only, and no last answer at maxSteps: the next prompt of this session goes on with the rest of the script.
    expect(await requestJson(stack.client, `agentbus.${TENANT}.sessions.${SESSION}.prompt`, { text: 'busy', maxSteps: 1, finalAnswer: false })).toMatchObject({ accepted: true });
    const seen = await events.until((all) => all.some((event) => event.type === 'turn.ended'), 30_000);
    events.stop();
    expect(results(seen)).toHaveLength(BUSY_LOOKUPS + BUSY_WRITES);
    expect(results(seen).filter((result) => result.data.isError)).toEqual([]);
    const ran = await calls();
    expect(ran).toHaveLength(BUSY_LOOKUPS + BUSY_WRITES);
    expect(new Set(ran.map((call) => call.effectId)).size).toBe(BUSY_LOOKUPS + BUSY_WRITES);
    // Random queue-group delivery of 27 calls leaves a worker out with odds of about 3·(2/3)^27 (< 1e-4).
    expect(new Set(ran.map((call) => call.pid))).toEqual(new Set(workers.keys()));
  }, 40_000);

  it('ends a call whose worker is SIGKILLed within 5 s: a read-only one runs again elsewhere, a side-effecting one ends interrupted', async () => {
    const events = collectEvents(stack.client, TENANT, SESSION);
    expect(await requestJson(stack.client, `agentbus.${TENANT}.sessions.${SESSION}.prompt`, { text: 'go on' })).toMatchObject({ accepted: true });

    // The read-only lookup: kill the worker running it; it is made again on another worker.
    const slowLookup = async () => (await calls()).filter((call) => call.tool === 'lookup' && call.ms === 2500);
    await expect.poll(async () => (await slowLookup()).length, { timeout: 15_000, interval: 50 }).toBe(1);
    const [lookup] = await slowLookup();
    kill(lookup!.pid);
    const lookupKilled = Date.now();
    await expect.poll(async () => (await slowLookup()).length, { timeout: 8_000, interval: 50 }).toBe(2);
    const rerunAfter = Date.now() - lookupKilled;
    const [, rerun] = await slowLookup();
    expect(rerun).toMatchObject({ effectId: lookup!.effectId });
    expect(rerun!.pid).not.toBe(lookup!.pid);

    // The side-effecting write: kill the worker running it; it ends interrupted and is not run again.
    const slowWrite = async () => (await calls()).filter((call) => call.tool === 'write' && call.ms === 8000);
    await expect.poll(async () => (await slowWrite()).length, { timeout: 15_000, interval: 50 }).toBe(1);
    const [write] = await slowWrite();
    kill(write!.pid);
    const writeKilled = Date.now();
    const interrupted = await events.until((all) => results(all).some((result) => result.data.name === 'write'), 10_000);
    const endedAfter = Date.now() - writeKilled;
    const seen = await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    console.log(`worker SIGKILLed mid-call: read-only call made again after ${rerunAfter} ms; side-effecting call ended after ${endedAfter} ms`);
    expect(rerunAfter).toBeLessThan(5_000);
    expect(endedAfter).toBeLessThan(5_000);

    expect(results(interrupted).find((result) => result.data.name === 'write')).toMatchObject({ data: { isError: true, error: { code: 'interrupted' } } });
    expect(results(seen).find((result) => result.data.name === 'lookup')).toMatchObject({ data: { isError: false, output: `lookup done by ${rerun!.pid}` } });
    expect(await slowWrite()).toHaveLength(1);
    expect(seen.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'done despite the crashes' } });
  }, 60_000);
});
