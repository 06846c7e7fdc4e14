import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LOG_ROTATE_BYTES, humanLogLine, openServiceLogs, userNotice } from '../../cli/service-logs.ts';

const line = (record: Record<string, unknown>) => JSON.stringify({ time: 1, pid: 2, hostname: 'h', name: 'runtime', ...record });

describe('service log lines as a user reads them', () => {
  it('shows warnings and errors as one line with the error message, and nothing below warn', () => {
    expect(userNotice(line({ level: 40, msg: 'runtime node found dead; its sessions are free to take', node: 'n1' }))).toBe(
      'warn: runtime node found dead; its sessions are free to take',
    );
    expect(userNotice(line({ level: 50, msg: 'adapter failed', err: { type: 'Error', message: 'socket hang up\n  at x', stack: 'Error: …' } }))).toBe(
      'error: adapter failed: socket hang up at x',
    );
    expect(userNotice(line({ level: 30, msg: 'tools service started' }))).toBeUndefined();
    expect(userNotice('Error: Cannot find module x')).toBeUndefined();
    expect(userNotice('{not json')).toBeUndefined();
    expect(userNotice('[1,2]')).toBeUndefined();
  });

  it('turns a pino line into level, message and fields for --verbose; other lines pass through', () => {
    expect(humanLogLine(line({ level: 30, msg: 'started', port: 3 }))).toBe('info started {"port":3}');
    expect(humanLogLine('plain text')).toBe('plain text');
  });
});

describe('openServiceLogs', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agentbus-logs-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes every line to the service file, and to the terminal only warnings (quiet) or everything (verbose)', async () => {
    const logsDir = join(dir, 'logs');
    const quiet: string[] = [];
    const logs = openServiceLogs({ dir: logsDir, services: ['runtime', 'tools'], verbose: false, write: (text) => quiet.push(text) });
    // Each started service has its file at once, its owner's alone.
    expect((await stat(join(logsDir, 'tools.log'))).mode & 0o777).toBe(0o600);
    logs.onLog('runtime', line({ level: 30, msg: 'runtime started' }));
    logs.onLog('runtime', line({ level: 40, msg: 'lease lost' }));
    logs.onLog('runtime', 'a stack trace line');
    await logs.close();
    expect(quiet).toEqual(['agentbus: runtime warn: lease lost']);
    const file = await readFile(join(logsDir, 'runtime.log'), 'utf8');
    expect(file.split('\n').filter((text) => text !== '')).toEqual([line({ level: 30, msg: 'runtime started' }), line({ level: 40, msg: 'lease lost' }), 'a stack trace line']);

    const loud: string[] = [];
    const again = openServiceLogs({ dir: logsDir, services: ['runtime'], verbose: true, write: (text) => loud.push(text) });
    again.onLog('runtime', line({ level: 30, msg: 'runtime started' }));
    await again.close();
    expect(loud).toEqual(['[runtime] info runtime started']);
    // Appended to, not replaced.
    expect((await readFile(join(logsDir, 'runtime.log'), 'utf8')).split('runtime started').length).toBe(3);
  });

  it('moves a file past the size limit aside at the next start', async () => {
    const logsDir = join(dir, 'logs');
    openServiceLogs({ dir: logsDir, services: [], verbose: false, write: () => undefined });
    await writeFile(join(logsDir, 'runtime.log'), 'x'.repeat(LOG_ROTATE_BYTES + 1));
    const logs = openServiceLogs({ dir: logsDir, services: ['runtime'], verbose: false, write: () => undefined });
    logs.onLog('runtime', 'fresh');
    await logs.close();
    expect(await readFile(join(logsDir, 'runtime.log'), 'utf8')).toBe('fresh\n');
    expect((await stat(join(logsDir, 'runtime.log.1'))).size).toBe(LOG_ROTATE_BYTES + 1);
  });
});
