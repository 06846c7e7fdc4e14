import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './nats-server.ts';
import { ROOT } from './service-process.ts';

/** The shipped NATS config, started for a test: its users and permissions as written. */
export interface ShippedNats {
  readonly url: string;
  readonly port: number;
  /** Every user of the config's `authorization.users`, with the password this server was given for it. */
  readonly passwords: Readonly<Record<string, string>>;
  /** The server's log so far (refusals are logged as `Publish Violation` / `Subscription Violation`). */
  output(): string;
  stop(): Promise<void>;
}

/** `{ user: acme, password: $ACME_PASSWORD, … }` entries of the config: user → password variable. */
export function passwordVariables(conf: string): Map<string, string> {
  const users = new Map<string, string>();
  for (const match of conf.matchAll(/\{\s*user:\s*([A-Za-z0-9_-]+),\s*password:\s*\$([A-Z0-9_]+)/g)) users.set(match[1]!, match[2]!);
  return users;
}

/**
 * Starts `nats-server` with `deploy/nats/nats-server.conf` as shipped, only its ports and store dir rewritten (and
 * `extraConfig` appended: a `tls {}` block), each user's password variable set in the server's environment to a
 * fresh password, as docker compose sets them. `file`: another shipped config, relative to the repository root.
 */
export async function startShippedNats(options: { extraConfig?: string; file?: string } = {}): Promise<ShippedNats> {
  const original = await readFile(join(ROOT, options.file ?? 'deploy/nats/nats-server.conf'), 'utf8');
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-shipped-nats-'));
  const port = await freePort();
  let conf = original;
  const rewrites: Array<[RegExp, string]> = [
    [/^listen: .*$/m, `listen: "127.0.0.1:${port}"`],
    [/^http: .*$/m, `http: "127.0.0.1:${await freePort()}"`],
    [/^(\s*)store_dir: .*$/m, `$1store_dir: ${JSON.stringify(storeDir)}`],
  ];
  for (const [pattern, replacement] of rewrites) {
    if (conf.match(new RegExp(pattern.source, 'gm'))?.length !== 1) throw new Error(`${pattern} is not in the shipped nats conf exactly once`);
    conf = conf.replace(pattern, replacement);
  }
  if (options.extraConfig) conf += `\n${options.extraConfig}\n`;
  const confFile = join(storeDir, 'nats-server.conf');
  await writeFile(confFile, conf);
  const variables = passwordVariables(original);
  if (variables.size === 0) throw new Error('no users found in the shipped nats conf');
  const passwords: Record<string, string> = {};
  const env: Record<string, string> = { PATH: process.env.PATH ?? '' };
  for (const [user, variable] of variables) {
    passwords[user] = `${user}-test-${Math.random().toString(36).slice(2, 10)}`;
    env[variable] = passwords[user];
  }
  const child: ChildProcess = spawn('nats-server', ['-c', confFile], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nats-server did not start:\n${output}`)), 10_000);
      child.stderr?.on('data', () => {
        if (!output.includes('Server is ready')) return;
        clearTimeout(timer);
        resolve();
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`nats-server exited with ${code}:\n${output}`));
      });
    });
  } catch (error) {
    child.kill('SIGKILL');
    await rm(storeDir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    passwords,
    output: () => output,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
