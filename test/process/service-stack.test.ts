import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { startServiceStack } from '../../cli/service-stack.ts';
import type { ServiceName } from '../../cli/service-stack.ts';

const nats = useNatsServer();

/** Pids of a service from its log lines: pino writes the pid on every line. */
function pidsOf(lines: string[]): Set<number> {
  const pids = new Set<number>();
  for (const line of lines) {
    const match = /"pid":(\d+)/.exec(line);
    if (match) pids.add(Number(match[1]));
  }
  return pids;
}

describe('agentbus up supervision', () => {
  it('starts a service that exits on its own again, and gives it up when it keeps exiting', async () => {
    const lines: string[] = [];
    const restarts: Array<[ServiceName, number | null]> = [];
    const stack = await startServiceStack({
      services: ['tools'],
      env: { NATS_URL: nats.server.url, LOG_LEVEL: 'info' },
      onLog: (_, line) => lines.push(line),
      onRestart: (service, code) => restarts.push([service, code]),
      restart: { maxRestarts: 2, windowMs: 60_000, backoffMs: 100 },
    });
    try {
      const kill = async () => {
        // The service's log lines and its ready signal come by different pipes: wait for a line with its pid.
        await expect.poll(() => pidsOf(lines).size, { timeout: 10_000 }).toBeGreaterThan(0);
        const [pid] = [...pidsOf(lines)].slice(-1);
        process.kill(pid!, 'SIGKILL');
      };
      await kill();
      await expect.poll(() => pidsOf(lines).size, { timeout: 20_000 }).toBe(2);
      expect(restarts).toEqual([['tools', null]]);
      await kill();
      await expect.poll(() => pidsOf(lines).size, { timeout: 20_000 }).toBe(3);
      // A third exit within the window: the stack gives the service up and says which.
      await kill();
      await expect(stack.exited).resolves.toEqual({ service: 'tools', code: null });
      expect(restarts).toHaveLength(2);
    } finally {
      await stack.stop();
    }
  }, 60_000);

  it('stops its services when agentbus up itself dies, even by SIGKILL: no orphans', async () => {
    const parent = spawn(
      process.execPath,
      ['--import', 'tsx', '-e', `import('./cli/service-stack.ts').then((m) => m.startServiceStack({ services: ['tools'], env: { NATS_URL: '${nats.server.url}' }, onLog: (_, line) => console.log(line) }))`],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const lines: string[] = [];
    parent.stdout.on('data', (chunk: Buffer) => lines.push(...chunk.toString().split('\n')));
    await expect.poll(() => pidsOf(lines).size, { timeout: 20_000 }).toBe(1);
    const [child] = [...pidsOf(lines)];
    parent.kill('SIGKILL');
    const alive = () => {
      try {
        process.kill(child!, 0);
        return true;
      } catch {
        return false;
      }
    };
    await expect.poll(alive, { timeout: 15_000 }).toBe(false);
  }, 60_000);
});
