import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './nats-server.ts';
import { ROOT } from './service-process.ts';

/** The two NATS configs that ship: one account per tenant (the default), and every user in one account. */
export const ShippedConf = {
  /** `deploy/nats/nats-server.conf`: the services' account, and one account per tenant importing its own subjects. */
  accounts: 'deploy/nats/nats-server.conf',
  /** `deploy/nats/nats-server.users.conf`: every user in one account, tenants reading JetStream themselves. */
  users: 'deploy/nats/nats-server.users.conf',
} as const;
export type ShippedConf = (typeof ShippedConf)[keyof typeof ShippedConf];

/** A shipped NATS config, started for a test: its users and permissions as written. */
export interface ShippedNats {
  readonly url: string;
  readonly port: number;
  /** The config file it runs (relative to the project root). */
  readonly file: ShippedConf;
  /** Every user of the config (in `authorization.users` or an account's `users`), with the password this server was given for it. */
  readonly passwords: Readonly<Record<string, string>>;
  /** The account of each user that is in an `accounts` block (none in a single-account config). */
  readonly accounts: Readonly<Record<string, string>>;
  /** The server's log so far (refusals are logged as `Publish Violation` / `Subscription Violation`). */
  output(): string;
  stop(): Promise<void>;
}

/** `{ user: acme, password: $ACME_PASSWORD, … }` entries of the config: user → password variable. */
export function passwordVariables(conf: string): Map<string, string> {
  return new Map([...configUsers(conf)].map(([user, { variable }]) => [user, variable]));
}

/**
 * Every `{ user: …, password: $VARIABLE, … }` entry of a config, with the account it is in: the block directly inside
 * `accounts { … }` that holds it (`ACME`), or none for `authorization.users`. Comments are skipped; blocks are
 * followed by their braces, so a user entry is placed by where it stands, not by its line.
 */
export function configUsers(conf: string): Map<string, { variable: string; account?: string }> {
  const users = new Map<string, { variable: string; account?: string }>();
  const text = conf.replace(/#.*$/gm, (comment) => ' '.repeat(comment.length));
  const blocks: string[] = [];
  const entry = /\{\s*user:\s*([A-Za-z0-9_-]+),\s*password:\s*\$([A-Z0-9_]+)/y;
  let inString = false;
  for (let index = 0; index < text.length; index += 1) {
    const char = text[index];
    if (char === '"') inString = !inString;
    if (inString) continue;
    if (char === '{') {
      entry.lastIndex = index;
      const user = entry.exec(text);
      if (user) {
        const parent = blocks.at(-1);
        const account = blocks.at(-2) === 'accounts' && parent ? parent : undefined;
        const inUsersList = blocks.length === 0 || blocks.includes('authorization') || account !== undefined;
        if (inUsersList) users.set(user[1]!, { variable: user[2]!, ...(account ? { account } : {}) });
      }
      blocks.push(/([A-Za-z_][A-Za-z0-9_]*)\s*(?:=|:)?\s*$/.exec(text.slice(Math.max(0, index - 80), index))?.[1] ?? '');
    } else if (char === '}') blocks.pop();
  }
  return users;
}

/**
 * Starts `nats-server` with a shipped config (`deploy/nats/nats-server.conf` unless `file` names the other), only its
 * ports and store dir rewritten (and `extraConfig` appended: a `tls {}` block; `edit` may change the text first, for a
 * test of a config the server must refuse), each user's password variable set in the server's environment to a
 * fresh password, as docker compose sets them.
 */
export async function startShippedNats(options: { extraConfig?: string; file?: ShippedConf; edit?: (conf: string) => string } = {}): Promise<ShippedNats> {
  const file = options.file ?? ShippedConf.accounts;
  const shipped = await readFile(join(ROOT, file), 'utf8');
  const original = options.edit ? options.edit(shipped) : shipped;
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-shipped-nats-'));
  const port = await freePort();
  let conf = original;
  const rewrites: Array<[RegExp, string]> = [
    [/^listen: .*$/m, `listen: "127.0.0.1:${port}"`],
    [/^http: .*$/m, `http: "127.0.0.1:${await freePort()}"`],
    [/^(\s*)store_dir: .*$/m, `$1store_dir: ${JSON.stringify(storeDir)}`],
  ];
  for (const [pattern, replacement] of rewrites) {
    if (conf.match(new RegExp(pattern.source, 'gm'))?.length !== 1) throw new Error(`${pattern} is not in ${file} exactly once`);
    conf = conf.replace(pattern, replacement);
  }
  if (options.extraConfig) conf += `\n${options.extraConfig}\n`;
  const confFile = join(storeDir, 'nats-server.conf');
  await writeFile(confFile, conf);
  const users = configUsers(original);
  if (users.size === 0) throw new Error(`no users found in ${file}`);
  const passwords: Record<string, string> = {};
  const accounts: Record<string, string> = {};
  const env: Record<string, string> = { PATH: process.env.PATH ?? '' };
  for (const [user, { variable, account }] of users) {
    passwords[user] = `${user}-test-${Math.random().toString(36).slice(2, 10)}`;
    env[variable] = passwords[user];
    if (account) accounts[user] = account;
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
    file,
    passwords,
    accounts,
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
