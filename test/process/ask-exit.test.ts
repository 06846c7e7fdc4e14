import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENTBUS_BIN, offlineEnv } from '../helpers/agentbus-bin.ts';

// `agentbus ask` with no stack running starts an embedded one (nats-server, runtime, provider, tools) for the
// length of the command, and must be gone soon after its turn ends: issue #18's goal is 0.5 s (measured 0.19–0.2 s
// on an idle 2-core machine). The bound here has room for CI's parallel load; the measured value is printed.

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentbus-ask-exit-'));
  await writeFile(join(dir, 'script.json'), JSON.stringify({ responses: [{ text: 'done quickly' }] }));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('agentbus ask on its own embedded stack', () => {
  it('exits soon after its turn ends, having stopped the stack it started (it waits for each process)', async () => {
    const env = { ...offlineEnv(), AGENTBUS_SCRIPT: join(dir, 'script.json') };
    const child = spawn(process.execPath, [AGENTBUS_BIN, 'ask', '--json', 'hello'], { cwd: dir, env });
    let stdout = '';
    let stderr = '';
    let endedAt: number | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (endedAt === undefined && stdout.includes('"turn.ended"')) endedAt = performance.now();
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`ask did not exit within 60 s\n${stderr}`));
      }, 60_000);
      child.once('exit', (exitCode) => {
        clearTimeout(timer);
        resolve(exitCode);
      });
    });
    const exitedAt = performance.now();
    expect(code, stderr).toBe(0);
    expect(endedAt, stdout).toBeDefined();
    const afterEndMs = exitedAt - endedAt!;
    console.log(`agentbus ask exited ${afterEndMs.toFixed(0)} ms after its turn.ended line`);
    expect(afterEndMs).toBeLessThan(1_500);
  }, 90_000);
});
