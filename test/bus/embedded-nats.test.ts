import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findBus } from '../../cli/bus-target.ts';
import { connectCli } from '../../cli/connect.ts';
import { startEmbeddedNats } from '../../cli/embedded-nats.ts';
import type { EmbeddedNats } from '../../cli/embedded-nats.ts';
import { readStackFile, writeStackFile } from '../../cli/state-dir.ts';
import type { CliContext } from '../../cli/context.ts';

// The nats-server `agentbus up` and `agentbus ask` start on loopback: any local user can reach its port, and whoever
// is on the bus can call `run_command`. It lets in only the holder of its token, which sits in `.agentbus/`.

let root: string;
let stateDir: string;
let nats: EmbeddedNats;

const mode = async (path: string) => (await stat(path)).mode & 0o777;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'agentbus-embedded-'));
  stateDir = join(root, '.agentbus');
  // As an older agentbus left it: readable by everyone.
  await mkdir(stateDir, { mode: 0o755 });
  await chmod(stateDir, 0o755);
  nats = await startEmbeddedNats({ stateDir });
}, 30_000);

afterAll(async () => {
  await nats?.stop();
  await rm(root, { recursive: true, force: true });
});

/** A CLI context in `root`, with `env` as its environment. */
function context(env: NodeJS.ProcessEnv = {}): CliContext {
  return { stdout: process.stdout, stderr: process.stderr, env, cwd: root, stateDir, signal: new AbortController().signal };
}

describe('the embedded nats-server', () => {
  it('refuses a connection without its token, or with another one, and lets in one with it', async () => {
    await expect(connect({ servers: nats.url, timeout: 3000, reconnect: false })).rejects.toThrow(/Authorization Violation/i);
    await expect(connect({ servers: nats.url, timeout: 3000, reconnect: false, token: 'not-the-token' })).rejects.toThrow(/Authorization Violation/i);
    const nc = await connect({ servers: nats.url, timeout: 3000, token: nats.token });
    await nc.flush();
    await nc.close();
  });

  it('gets a new random token each start', async () => {
    const other = await startEmbeddedNats({ stateDir: join(root, 'other') });
    try {
      expect(other.token).not.toBe(nats.token);
      expect(nats.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      await expect(connect({ servers: other.url, timeout: 3000, reconnect: false, token: nats.token })).rejects.toThrow(/Authorization Violation/i);
    } finally {
      await other.stop();
    }
  });

  it('keeps its token out of its command line, in a config file only its owner may read, in a folder only its owner may enter', async () => {
    const processes = spawnSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
    expect(processes.stdout).toContain('nats-server');
    expect(processes.stdout).not.toContain(nats.token);
    const config = join(stateDir, 'nats', 'server.conf');
    expect(await readFile(config, 'utf8')).toContain(nats.token);
    expect(await mode(config)).toBe(0o600);
    expect(await mode(stateDir)).toBe(0o700);
  });
});

describe('the stack file agentbus up writes', () => {
  it('is readable by its owner alone and gives the commands that attach the token in their environment', async () => {
    await writeStackFile(stateDir, { url: nats.url, pid: process.pid, startedAt: new Date().toISOString(), token: nats.token });
    expect(await mode(join(stateDir, 'stack.json'))).toBe(0o600);
    expect(await readStackFile(stateDir)).toMatchObject({ url: nats.url, token: nats.token });

    // Credentials meant for another server are not offered to this one.
    const target = await findBus(context({ NATS_USER: 'acme', NATS_PASSWORD: 'elsewhere' }), undefined);
    expect(target).toMatchObject({ kind: 'url', url: nats.url, source: 'agentbus up', env: { NATS_TOKEN: nats.token, NATS_USER: '', NATS_PASSWORD: '' } });
    if (target.kind !== 'url') return;
    const nc = await connectCli(target.url, 'agentbus-test', target.env);
    await nc.flush();
    await nc.close();
    await expect(connectCli(target.url, 'agentbus-test', {})).rejects.toThrow(/Authorization Violation/i);
  });

  it('leaves a bus given by --nats or NATS_URL to the caller\'s own credentials', async () => {
    const env = { NATS_URL: 'nats://127.0.0.1:1', NATS_USER: 'acme', NATS_PASSWORD: 'pw' };
    expect(await findBus(context(env), undefined)).toEqual({ kind: 'url', url: env.NATS_URL, source: 'NATS_URL', env });
    expect(await findBus(context(env), 'nats://127.0.0.1:2')).toEqual({ kind: 'url', url: 'nats://127.0.0.1:2', source: '--nats', env });
  });
});
