import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { PermissionViolationError } from '@nats-io/nats-core';
import { jetstream } from '@nats-io/jetstream';
import { createAgentbusClient } from '../../src/client/index.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { freePort } from '../helpers/nats-server.ts';
import { PassThrough } from 'node:stream';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { main } from '../../cli/main.ts';
import { configUsers } from '../helpers/shipped-nats.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, describe as describeEvent, requestJson } from '../helpers/stack.ts';

// docker-compose.yml, deploy/nats/nats-server.conf and the Dockerfile cannot be run here (no Docker
// engine), so this file runs what they say: the nats conf with its users and permissions (only the
// ports and the store dir rewritten), and each service's `command` with its `environment`, the way
// compose would resolve it. If a permission, a password, a path or a variable is wrong, a turn fails.

const root = fileURLToPath(new URL('../..', import.meta.url));
const codec = createCodec();
/**
 * The host environment compose would interpolate from: what an operator's `.env` holds, a fresh password for each
 * variable the compose file requires (`${VAR:?message}`), and nothing else, so every `${VAR:-default}` takes its default.
 */
const hostEnvironment: Record<string, string> = {};

interface ComposeService {
  image?: string;
  build?: string | { context?: string; dockerfile?: string };
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null> | string[];
  volumes?: string[];
  depends_on?: string[] | Record<string, unknown>;
  restart?: string;
  ports?: string[];
}
interface ComposeFile {
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

/** What compose says when a required variable (`${VAR:?message}`) is unset or empty: it starts nothing. */
class MissingVariableError extends Error {
  constructor(readonly variable: string, message: string) {
    super(`required variable ${variable} is missing a value: ${message}`);
  }
}

/**
 * Compose's interpolation, the forms this project uses: `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
 * `${VAR:?message}`, `${VAR?message}` and `$$`.
 */
function interpolate(text: string, env: Record<string, string>): string {
  return text.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)/g, (match, name?: string, operator?: string, argument?: string, bare?: string) => {
    if (match === '$$') return '$';
    if (bare !== undefined) return env[bare] ?? '';
    const value = env[name!];
    if (operator === ':-') return value === undefined || value === '' ? (argument ?? '') : value;
    if (operator === '-') return value === undefined ? (argument ?? '') : value;
    if ((operator === ':?' && (value === undefined || value === '')) || (operator === '?' && value === undefined)) throw new MissingVariableError(name!, argument ?? '');
    return value ?? '';
  });
}

/** Every variable the compose file requires (`${VAR:?…}`), each once. */
function requiredVariables(text: string): string[] {
  return [...new Set([...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*):?\?/g)].map((match) => match[1]!))];
}

/** A service's environment as the container sees it: interpolated; a key with no value passes the host's through, or is left out. */
function environmentOf(service: ComposeService): Record<string, string> {
  const entries: Array<[string, string | null]> = Array.isArray(service.environment)
    ? service.environment.map((line) => (line.includes('=') ? [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)] : [line, null]))
    : Object.entries(service.environment ?? {}).map(([key, value]) => [key, value === null ? null : String(value)]);
  const env: Record<string, string> = {};
  for (const [key, value] of entries) {
    if (value === null) {
      if (hostEnvironment[key] !== undefined) env[key] = hostEnvironment[key];
    } else env[key] = interpolate(value, hostEnvironment);
  }
  return env;
}

/** `./host/path:/container/path[:ro]` → { source, target }; a named volume has no `./`. */
function volumesOf(service: ComposeService): Array<{ source: string; target: string; bind: boolean }> {
  return (service.volumes ?? []).map((volume) => {
    const [source = '', target = ''] = volume.split(':');
    return { source, target, bind: source.startsWith('.') || source.startsWith('/') };
  });
}

function commandOf(service: ComposeService): string[] {
  if (!Array.isArray(service.command)) throw new Error('commands are written in exec form, a list');
  return service.command;
}

/** The nats-server of the compose file, from its own conf; ports and store dir rewritten for this test. */
async function startComposeNats(compose: ComposeFile) {
  const nats = compose.services['nats']!;
  const command = commandOf(nats);
  const confTarget = command[command.indexOf('-c') + 1];
  const mount = volumesOf(nats).find((volume) => volume.target === confTarget);
  if (!mount) throw new Error(`the nats conf ${confTarget} is not mounted from the repository`);
  const original = await readFile(resolve(root, mount.source), 'utf8');
  const port = await freePort();
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-compose-nats-'));
  const rewrites: Array<[RegExp, string]> = [
    [/^listen: .*$/m, `listen: "127.0.0.1:${port}"`],
    [/^http: .*$/m, `http: "127.0.0.1:${await freePort()}"`],
    [/^(\s*)store_dir: .*$/m, `$1store_dir: ${JSON.stringify(storeDir)}`],
  ];
  let conf = original;
  for (const [pattern, replacement] of rewrites) {
    expect(conf.match(new RegExp(pattern.source, 'gm')), `${pattern} in the nats conf`).toHaveLength(1);
    conf = conf.replace(pattern, replacement);
  }
  const listenPort = Number(/^listen: "[^"]*:(\d+)"$/m.exec(original)?.[1]);
  const confFile = join(storeDir, 'nats-server.conf');
  await writeFile(confFile, conf);
  // The passwords reach nats-server as compose gives them: the nats service's environment only.
  const child: ChildProcess = spawn('nats-server', ['-c', confFile], {
    env: { PATH: process.env.PATH ?? '', ...environmentOf(nats) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await new Promise<void>((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`nats-server did not start:\n${output}`)), 10_000);
    child.stderr?.on('data', () => {
      if (output.includes('Server is ready')) {
        clearTimeout(timer);
        resolvePromise();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited with ${code}:\n${output}`));
    });
  });
  return {
    port,
    listenPort,
    url: `nats://127.0.0.1:${port}`,
    output: () => output,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolveExit) => child.once('exit', resolveExit));
        child.kill('SIGTERM');
        await exited;
      }
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}

let compose: ComposeFile;
let nats: Awaited<ReturnType<typeof startComposeNats>>;
let workspace: string;
let client: NatsConnection;
const processes = new Map<string, ServiceProcess>();
const APP_SERVICES = ['runtime', 'provider', 'tools', 'memory', 'dashboard'] as const;
/** A subject the dashboard user is refused on purpose below; any other violation of a service fails the last test. */
const DASHBOARD_REFUSED = 'agentbus.default.sessions.dashboard-refused.prompt';

/** Variables compose passes through from the host; this process's own (a developer's API key) must not leak in. */
const passedThrough = new Map<string, string | undefined>();

/** The compose file's text, as read. */
let composeText: string;

beforeAll(async () => {
  composeText = await readFile(join(root, 'docker-compose.yml'), 'utf8');
  compose = parse(composeText, { merge: true }) as ComposeFile;
  // The operator's .env: a fresh password for each required variable, as docs/operations.md's line writes it.
  for (const variable of requiredVariables(composeText)) hostEnvironment[variable] = `${variable.toLowerCase()}-${Math.random().toString(36).slice(2, 12)}`;
  for (const service of Object.values(compose.services)) {
    const environment = service.environment ?? {};
    const keys = Array.isArray(environment) ? environment.filter((line) => !line.includes('=')) : Object.keys(environment).filter((key) => environment[key] === null);
    for (const key of keys) {
      if (!passedThrough.has(key)) passedThrough.set(key, process.env[key]);
      delete process.env[key];
    }
  }
  nats = await startComposeNats(compose);
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-compose-ws-'));
  // The compose tools service keeps a folder per tenant (AGENTBUS_WORKSPACE_PER_TENANT defaults to on): this is tenant default's.
  await mkdir(join(workspace, 'default'));
  await writeFile(join(workspace, 'default', 'README.md'), '# Compose workspace\nThe tools container sees this file.\n');
  for (const name of APP_SERVICES) {
    const service = compose.services[name]!;
    const [node, importFlag, loader, entry, ...rest] = commandOf(service);
    expect([node, importFlag, loader, rest.length]).toEqual(['node', '--import', 'tsx', 0]);
    const env = environmentOf(service);
    // The container reaches NATS by its service name on the conf's port; here that is the test server.
    const url = new URL(env['NATS_URL']!);
    expect(Object.keys(compose.services)).toContain(url.hostname);
    expect(Number(url.port)).toBe(nats.listenPort);
    env['NATS_URL'] = nats.url;
    // A container path that a volume provides becomes a temp dir.
    if (env['AGENTBUS_WORKSPACE'] !== undefined) {
      expect(volumesOf(service).map((volume) => volume.target)).toContain(env['AGENTBUS_WORKSPACE']);
      env['AGENTBUS_WORKSPACE'] = workspace;
    }
    // The dashboard's published port becomes any free one.
    if (env['AGENTBUS_DASHBOARD_PORT'] !== undefined) env['AGENTBUS_DASHBOARD_PORT'] = '0';
    // Memory writes its index snapshot within the test, with the permissions the conf gives it.
    // and embeds through the provider service (its memory user may ask the embed endpoint).
    if (name === 'memory') Object.assign(env, { AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS: '500', AGENTBUS_EMBED_PROVIDER: 'scripted' });
    processes.set(name, startServiceProcess(entry!, env));
  }
  await Promise.all([
    processes.get('runtime')!.waitFor('runtime started'),
    processes.get('provider')!.waitFor('provider service started'),
    processes.get('tools')!.waitFor('tools service started'),
    processes.get('dashboard')!.waitFor('dashboard started on'),
    processes.get('memory')!.waitFor('memory caught up with the log'),
  ]);
  // The client user may subscribe to its own inbox prefix only (so may every user): its replies come there.
  client = await connect({ servers: nats.url, user: 'client', pass: environmentOf(compose.services['nats']!)['CLIENT_PASSWORD']!, inboxPrefix: '_INBOX_client' });
}, 60_000);

afterAll(async () => {
  await client?.close().catch(() => undefined);
  await Promise.all([...processes.values()].map((process) => process.stop('SIGTERM')));
  await nats?.stop();
  if (workspace) await rm(workspace, { recursive: true, force: true });
  for (const [key, value] of passedThrough) if (value !== undefined) process.env[key] = value;
});

/** Runs an agentbus CLI command in this process, as a user would from the host; `out()`/`err()` read what it wrote so far. */
function runCli(argv: string[], env: NodeJS.ProcessEnv, signal: AbortSignal = new AbortController().signal) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const done = main(argv, { stdout, stderr, env, cwd: process.cwd(), stateDir: '/nonexistent/.agentbus', signal }).then((code) => ({ code, out, err }));
  return { done, out: () => out, err: () => err };
}

/** Resolves with the permission violation the server reports to `connection` for `subject`; rejects after 5 s without one. */
function permissionViolation(connection: NatsConnection, subject: string): Promise<PermissionViolationError> {
  return new Promise<PermissionViolationError>((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`no permission violation for ${subject}`)), 5000);
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'error' && status.error instanceof PermissionViolationError && status.error.subject === subject) {
          clearTimeout(timer);
          resolvePromise(status.error);
          return;
        }
      }
    })();
  });
}

describe('docker-compose.yml run as written, against deploy/nats/nats-server.conf', () => {
  it('answers a prompt from the client user: the scripted demo lists and reads the workspace, streams, and yields', async () => {
    const sessionId = `compose-${Date.now()}`;
    const events = collectEvents(client, 'default', sessionId);
    const reply = await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'What is in this folder?' });
    expect(reply).toMatchObject({ accepted: true, sessionId });
    const seen = await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const ended = seen.find((event) => event.type === 'turn.ended') as Extract<AgentEvent, { type: 'turn.ended' }>;
    expect(ended.data.reason, seen.map(describeEvent).join(', ')).toBe('yielded');

    // The script path is relative to the image's WORKDIR, which holds what the repository root holds.
    const scriptPath = environmentOf(compose.services['provider']!)['AGENTBUS_SCRIPT']!;
    const script = JSON.parse(await readFile(join(root, scriptPath), 'utf8')) as { responses: Array<{ text: string }> };
    const streamed = seen.filter((event) => event.type === 'assistant.delta').map((event) => (event.data as { text: string }).text).join('');
    expect(streamed).toContain(script.responses.at(-1)!.text);

    const results = seen.filter((event) => event.type === 'tool.result') as Array<Extract<AgentEvent, { type: 'tool.result' }>>;
    expect(results.map((result) => [result.data.name, result.data.isError])).toEqual([
      ['list_dir', false],
      ['read_file', false],
    ]);
    expect(results[1]!.data.output).toContain('The tools container sees this file.');
  });

  it('lets the client SDK (what agentbus ask runs on) ask as the client user, watching through JetStream', async () => {
    const sdk = createAgentbusClient({ nc: client });
    let deltas = 0;
    const ended = await sdk.ask({ tenant: 'default', sessionId: `compose-sdk-${Date.now()}` }, { text: 'hello' }, {
      onEvent: ({ event }) => {
        if (event.type === 'assistant.delta') deltas++;
      },
      timeoutMs: 20_000,
    });
    expect(ended.reason).toBe('yielded');
    expect(deltas).toBeGreaterThan(0);
  });

  it('lets the client read a session back from the live stream, as a reconnecting client resumes', async () => {
    const sessionId = `compose-resume-${Date.now()}`;
    const events = collectEvents(client, 'default', sessionId);
    await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'again' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const live = events.events.filter((event) => event.type === 'assistant.delta').length;
    const consumer = await jetstream(client).consumers.get('AGENTBUS_LIVE', {
      filter_subjects: `agentbus.default.sessions.${sessionId}.live.assistant.delta`,
    });
    const replayed: AgentEvent[] = [];
    const messages = await consumer.fetch({ max_messages: live, expires: 5000 });
    for await (const message of messages) replayed.push(codec.decode(message.data, message.headers?.get('Content-Type')) as AgentEvent);
    expect(replayed.length).toBe(live);
    expect(replayed.every((event) => event.type === 'assistant.delta' && event.sessionId === sessionId)).toBe(true);
  });

  it('lets the client search memory and list sessions as the client user; the memory user cannot write a log', async () => {
    const sessionId = `compose-memory-${Date.now()}`;
    const events = collectEvents(client, 'default', sessionId);
    await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'the password of the vault is not here, but the zeppelin is' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const memory = createMemoryClient({ nc: client, codec });
    await expect.poll(async () => (await memory.search('default', { query: 'zeppelin' })).hits.map((hit) => hit.sessionId), { timeout: 10_000 }).toContain(sessionId);
    expect((await memory.listSessions('default', { limit: 500 })).sessions.map((session) => session.sessionId)).toContain(sessionId);
    await processes.get('memory')!.waitFor('memory snapshot written', 10_000);
    await expect.poll(async () => (await memory.search('default', { query: 'zeppelin' })).mode, { timeout: 10_000 }).toBe('hybrid');
    const memoryUser = await connect({ servers: nats.url, name: 'deliberate-memory-intruder', user: 'memory', pass: environmentOf(compose.services['nats']!)['MEMORY_PASSWORD']! });
    try {
      const violation = new Promise<PermissionViolationError>((resolvePromise, reject) => {
        const timer = setTimeout(() => reject(new Error('no permission violation for the memory user')), 5000);
        void (async () => {
          for await (const status of memoryUser.status()) {
            if (status.type === 'error' && status.error instanceof PermissionViolationError) {
              clearTimeout(timer);
              resolvePromise(status.error);
              return;
            }
          }
        })();
      });
      memoryUser.publish(`agentbus.default.sessions.${sessionId}.log`, codec.encode({ forged: true }));
      await expect(violation).resolves.toMatchObject({ operation: 'publish' });
    } finally {
      await memoryUser.close();
    }
  });

  it('lets the client keep agent state through memory, and nobody touch the state bucket directly', async () => {
    const state = createAgentbusClient({ nc: client }).state('default');
    const { revision } = await state.save('compose/visits', { count: 1 });
    expect(await state.load('compose/visits')).toMatchObject({ found: true, value: { count: 1 }, revision });
    const natsEnv = environmentOf(compose.services['nats']!);
    const dashboardUser = await connect({ servers: nats.url, name: 'deliberate-dashboard-state', user: 'dashboard', pass: natsEnv['DASHBOARD_PASSWORD']! });
    try {
      const attempts: Array<[NatsConnection, string]> = [
        [dashboardUser, 'agentbus.default.state.save'],
        [client, '$KV.AGENTBUS_STATE.default.compose/visits'],
        [client, '$JS.API.DIRECT.GET.KV_AGENTBUS_STATE.$KV.AGENTBUS_STATE.default.compose/visits'],
      ];
      for (const [connection, subject] of attempts) {
        const violation = permissionViolation(connection, subject);
        connection.publish(subject, codec.encode({ key: 'compose/visits', value: 'forged' }));
        await expect(violation).resolves.toMatchObject({ operation: 'publish', subject });
      }
    } finally {
      await dashboardUser.close();
    }
    expect(await state.load('compose/visits')).toMatchObject({ value: { count: 1 } });
  });

  it('lets the operator user run agentbus memory rebuild, and nothing else', async () => {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    let out = '';
    stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const env = { NATS_USER: 'operator', NATS_PASSWORD: environmentOf(compose.services['nats']!)['OPERATOR_PASSWORD']! };
    const code = await main(['memory', 'rebuild', '--nats', nats.url, '--json'], { stdout, stderr, env, cwd: process.cwd(), stateDir: '/nonexistent/.agentbus', signal: new AbortController().signal });
    expect(code).toBe(0);
    expect(JSON.parse(out.trim())).toMatchObject({ entries: expect.any(Number), lastSeq: expect.any(Number) });
    await processes.get('memory')!.waitFor('memory index rebuilt from the log');
    const operator = await connect({ servers: nats.url, name: 'deliberate-operator-prompt', ...env, user: env.NATS_USER, pass: env.NATS_PASSWORD });
    try {
      const violation = new Promise<PermissionViolationError>((resolvePromise, reject) => {
        const timer = setTimeout(() => reject(new Error('no permission violation for the operator user')), 5000);
        void (async () => {
          for await (const status of operator.status()) {
            if (status.type === 'error' && status.error instanceof PermissionViolationError) {
              clearTimeout(timer);
              resolvePromise(status.error);
              return;
            }
          }
        })();
      });
      operator.publish('agentbus.default.sessions.operator-1.prompt', codec.encode({ text: 'hi' }));
      await expect(violation).resolves.toMatchObject({ operation: 'publish' });
    } finally {
      await operator.close();
    }
  });

  it('lets the client read a session\'s history and delete it; refuses the dashboard a delete, the client a purge or a tombstone, memory a purge', async () => {
    const sessionId = `compose-delete-${Date.now()}`;
    const events = collectEvents(client, 'default', sessionId);
    await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'the stowaway is a cormorant' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const sdk = createAgentbusClient({ nc: client });
    const history = await sdk.history({ tenant: 'default', sessionId }, { limit: 500 });
    expect(history.events.map((event) => event.type)).toContain('turn.ended');
    await expect.poll(async () => (await sdk.listSessions('default', { limit: 500 })).sessions.map((session) => session.sessionId), { timeout: 10_000 }).toContain(sessionId);

    // Wrong users first, while the session is there to be harmed.
    const natsEnv = environmentOf(compose.services['nats']!);
    const dashboardUser = await connect({ servers: nats.url, name: 'deliberate-dashboard-intruder', user: 'dashboard', pass: natsEnv['DASHBOARD_PASSWORD']! });
    const memoryUser = await connect({ servers: nats.url, name: 'deliberate-memory-intruder', user: 'memory', pass: natsEnv['MEMORY_PASSWORD']! });
    try {
      const attempts: Array<[NatsConnection, string]> = [
        [dashboardUser, `agentbus.default.sessions.${sessionId}.delete`],
        [client, '$JS.API.STREAM.PURGE.AGENTBUS_LOG'],
        [client, `$KV.AGENTBUS_TOMBSTONES.default.${sessionId}`],
        [memoryUser, '$JS.API.STREAM.PURGE.AGENTBUS_LOG'],
      ];
      for (const [connection, subject] of attempts) {
        const violation = permissionViolation(connection, subject);
        connection.publish(subject, codec.encode({ filter: `agentbus.default.sessions.${sessionId}.log` }));
        await expect(violation).resolves.toMatchObject({ operation: 'publish', subject });
      }
    } finally {
      await dashboardUser.close();
      await memoryUser.close();
    }
    expect((await sdk.history({ tenant: 'default', sessionId }, { limit: 500 })).events).toHaveLength(history.events.length);

    expect(await sdk.deleteSession({ tenant: 'default', sessionId })).toEqual({ purged: history.events.length, alreadyDeleted: false });
    await expect(sdk.history({ tenant: 'default', sessionId })).rejects.toMatchObject({ code: 'session_deleted' });
    await expect.poll(async () => (await sdk.listSessions('default', { limit: 500 })).sessions.map((session) => session.sessionId), { timeout: 10_000 }).not.toContain(sessionId);
    await expect(sdk.prompt({ tenant: 'default', sessionId }, { text: 'again?' })).rejects.toMatchObject({ code: 'session_deleted' });
  });

  it('refuses the client what is not its to do: calling a tool directly, writing a log, posing as a runtime node or forging its heartbeat', async () => {
    const refused = (subject: string) =>
      new Promise<PermissionViolationError>((resolvePromise, reject) => {
        const timer = setTimeout(() => reject(new Error(`no permission violation for ${subject}`)), 5000);
        void (async () => {
          for await (const status of client.status()) {
            if (status.type === 'error' && status.error instanceof PermissionViolationError && status.error.subject === subject) {
              clearTimeout(timer);
              resolvePromise(status.error);
              return;
            }
          }
        })();
      });
    // Nor read or overwrite memory's index snapshots, nor make every memory instance rebuild, nor forge a runtime
    // node's heartbeat (keeping a dead node's sessions from being taken over) or delete one (making a live node's taken).
    for (const subject of ['agentbus.tools.read_file.call', 'agentbus.default.sessions.intruder.log', '$JS.API.STREAM.INFO.OBJ_AGENTBUS_MEMORY', '$O.AGENTBUS_MEMORY.M.aW5kZXg=', 'agentbus.memory.rebuild', '$KV.AGENTBUS_NODES.some-node']) {
      const violation = refused(subject);
      client.publish(subject, codec.encode({ v: 1, callId: 'x', name: 'read_file', args: { path: 'README.md' } }));
      await expect(violation).resolves.toMatchObject({ operation: 'publish', subject });
    }
    // Nor may it pose as a runtime node on $SRV (only the runtime user subscribes there), or answer for memory.
    for (const subject of ['$SRV.PING.agentbus-runtime', 'agentbus.acme.sessions.list', 'agentbus.acme.memory.search']) {
      const impostor = refused(subject);
      client.subscribe(subject);
      await expect(impostor).resolves.toMatchObject({ operation: 'subscription', subject });
    }
    expect(client.isClosed()).toBe(false);
  });

  it('drains the runtime on SIGTERM, and a new runtime picks the session up from its log and leases', async () => {
    const sessionId = `compose-restart-${Date.now()}`;
    const first = collectEvents(client, 'default', sessionId);
    await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'first' });
    await first.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    first.stop();
    expect(await processes.get('runtime')!.stop('SIGTERM')).toBe(0);

    const runtime = compose.services['runtime']!;
    const env = { ...environmentOf(runtime), NATS_URL: nats.url };
    const restarted = startServiceProcess(commandOf(runtime)[3]!, env);
    processes.set('runtime', restarted);
    await restarted.waitFor('runtime started');
    const second = collectEvents(client, 'default', sessionId);
    const reply = await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'second' }, 15_000);
    expect(reply).toMatchObject({ accepted: true });
    const seen = await second.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    second.stop();
    const ended = seen.find((event) => event.type === 'turn.ended') as Extract<AgentEvent, { type: 'turn.ended' }>;
    expect(ended.data.reason, seen.map(describeEvent).join(', ')).toBe('yielded');
  });

  it('lets the dashboard read what it shows as the dashboard user: a session from the log, workers from $SRV, nodes from the leases', async () => {
    const sessionId = `compose-dashboard-${Date.now()}`;
    const events = collectEvents(client, 'default', sessionId);
    await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'show me' });
    await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
    events.stop();
    const url = /dashboard started on (http:\/\/[^\s"]+)/.exec(processes.get('dashboard')!.output())![1]!.replace('0.0.0.0', '127.0.0.1');
    const view = (await (await fetch(`${url}api/sessions/default/${sessionId}`)).json()) as { log: Array<{ type: string }>; path: Array<{ state: string }> };
    expect(view.log?.map((event) => event.type), JSON.stringify(view)).toContain('turn.ended');
    expect(view.path.at(-1)).toMatchObject({ state: 'Yielding' });
    const ndjson = await (await fetch(`${url}api/sessions/default/${sessionId}/log.ndjson`)).text();
    expect(ndjson.trim().split('\n')).toHaveLength(view.log.length);
    const list = (await (await fetch(`${url}api/sessions`)).json()) as { sessions: Array<{ sessionId: string }> };
    expect(list.sessions.map((entry) => entry.sessionId)).toContain(sessionId);
    await expect
      .poll(async () => {
        const workers = (await (await fetch(`${url}api/workers`)).json()) as { services: Array<{ name: string }>; nodes: Array<{ sessions: number }> };
        return { tools: workers.services.some((service) => service.name === 'agentbus-tools'), nodes: workers.nodes.length };
      }, { timeout: 10_000 })
      .toEqual({ tools: true, nodes: 1 });
  });

  it('lets a tenant in an account of its own ask, follow, list and show its sessions with the agentbus CLI (no JetStream there)', async () => {
    const env = { NATS_USER: 'acme', NATS_PASSWORD: environmentOf(compose.services['nats']!)['ACME_PASSWORD']! };
    const sessionId = `compose-acme-${Date.now()}`;
    const tailing = new AbortController();
    const tail = runCli(['tail', '--nats', nats.url, '--tenant', 'acme', '--session', sessionId, '--json'], env, tailing.signal);
    await expect.poll(() => tail.err(), { timeout: 10_000 }).toContain('following');
    const asked = await runCli(['ask', '--nats', nats.url, '--tenant', 'acme', '--session', sessionId, 'What is in this folder?'], env).done;
    expect(asked.code, asked.err).toBe(0);
    const script = JSON.parse(await readFile(join(root, environmentOf(compose.services['provider']!)['AGENTBUS_SCRIPT']!), 'utf8')) as { responses: Array<{ text: string }> };
    expect(asked.out).toContain(script.responses.at(-1)!.text);
    expect(asked.err).toContain(`session acme/${sessionId}`);
    // tail follows the same events by subscription: the log and live subjects its account imports.
    await expect.poll(() => tail.out(), { timeout: 10_000 }).toContain('"type":"turn.ended"');
    tailing.abort();
    expect((await tail.done).code).toBe(0);
    // show reads the session back through memory's history, the only way into the log from a tenant account.
    const shown = await runCli(['show', sessionId, '--nats', nats.url, '--tenant', 'acme'], env).done;
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toContain('user: What is in this folder?');
    expect(shown.out).toContain(`assistant: ${script.responses.at(-1)!.text}`);
    await expect.poll(async () => (await runCli(['sessions', '--nats', nats.url, '--tenant', 'acme', '--json'], env).done).out, { timeout: 10_000 }).toContain(sessionId);
    // globex, in its own account, has no such session: its tenant's memory does not know it.
    const globex = { NATS_USER: 'globex', NATS_PASSWORD: environmentOf(compose.services['nats']!)['GLOBEX_PASSWORD']! };
    const other = await runCli(['show', sessionId, '--nats', nats.url, '--tenant', 'globex'], globex).done;
    expect(other).toMatchObject({ code: 1, err: expect.stringContaining('does not exist') });
  });

  it('refuses the dashboard user what is not its to do: prompting a session', async () => {
    const natsEnv = environmentOf(compose.services['nats']!);
    const dashboardUser = await connect({ servers: nats.url, user: 'dashboard', pass: natsEnv['DASHBOARD_PASSWORD']! });
    try {
      const refused = new Promise<PermissionViolationError>((resolvePromise, reject) => {
        const timer = setTimeout(() => reject(new Error(`no permission violation for ${DASHBOARD_REFUSED}`)), 5000);
        void (async () => {
          for await (const status of dashboardUser.status()) {
            if (status.type === 'error' && status.error instanceof PermissionViolationError && status.error.subject === DASHBOARD_REFUSED) {
              clearTimeout(timer);
              resolvePromise(status.error);
              return;
            }
          }
        })();
      });
      dashboardUser.publish(DASHBOARD_REFUSED, codec.encode({ text: 'the dashboard only watches' }));
      await expect(refused).resolves.toMatchObject({ operation: 'publish', subject: DASHBOARD_REFUSED });
    } finally {
      await dashboardUser.close();
    }
  });

  it('gives the services every permission they use: the server refused only the client and the deliberate dashboard and memory intruders, above', async () => {
    const lines = () => nats.output().split('\n').filter((line) => /violation/i.test(line));
    // The server logs a refusal a moment after it answers the client with it.
    await expect.poll(() => lines().filter((line) => /"dashboard"/.test(line) && line.includes(DASHBOARD_REFUSED)).length, { timeout: 5000 }).toBe(1);
    const violations = lines();
    expect(violations.filter((line) => /"client"/.test(line)).length).toBeGreaterThan(0);
    const deliberate = (line: string) => line.includes(DASHBOARD_REFUSED) || line.includes('deliberate-memory-intruder') || line.includes('deliberate-dashboard-intruder') || line.includes('deliberate-dashboard-state') || line.includes('deliberate-operator-prompt');
    expect(violations.filter((line) => !/"client"/.test(line) && !deliberate(line))).toEqual([]);
  });
});

describe('the compose file and the Dockerfile agree with the code', () => {
  it('is closed by default: starts nothing until every password is set, and publishes no monitoring port and the rest on loopback only', async () => {
    // No `*-dev-password` fallback: without an .env, compose stops at the first password with a message.
    expect(composeText).not.toMatch(/dev-password/);
    expect(() => interpolate(composeText, {})).toThrow(MissingVariableError);
    expect(() => interpolate(composeText, {})).toThrow(/_PASSWORD is missing a value: set it in \.env or the shell, see Passwords in docs\/operations\.md/);
    for (const [, variable, operator] of composeText.matchAll(/\$\{([A-Z_]*PASSWORD)(:?[-?]?)/g)) expect(operator, variable).toBe(':?');
    // Every password the nats conf reads is one compose requires.
    const conf = await readFile(join(root, 'deploy/nats/nats-server.conf'), 'utf8');
    expect(new Set([...configUsers(conf).values()].map(({ variable }) => variable))).toEqual(new Set(requiredVariables(composeText)));
    for (const [name, service] of Object.entries(compose.services)) {
      for (const port of service.ports ?? []) {
        expect(port, name).toMatch(/^127\.0\.0\.1:\d+:\d+$/);
        expect(port.split(':').at(-1), `${name} publishes the unauthenticated monitoring port`).not.toBe('8222');
      }
    }
    // The dashboard, which shows every tenant's sessions, is on the host's loopback unless a token guards it.
    const dashboard = compose.services['dashboard']!;
    expect(dashboard.ports).toEqual(['127.0.0.1:4280:4280']);
  });

  it('builds every service from the Dockerfile, restarts it, and waits for nats', () => {
    for (const name of APP_SERVICES) {
      const service = compose.services[name]!;
      const context = typeof service.build === 'string' ? service.build : (service.build?.context ?? '.');
      expect(existsSync(join(root, context, 'Dockerfile'))).toBe(true);
      expect(service.restart).toBe('unless-stopped');
      expect(Array.isArray(service.depends_on) ? service.depends_on : Object.keys(service.depends_on ?? {})).toContain('nats');
    }
  });

  it('names a different NATS user for each service, each with the password the nats service gives it', () => {
    const natsEnv = environmentOf(compose.services['nats']!);
    const users = APP_SERVICES.map((name) => environmentOf(compose.services[name]!)['NATS_USER']);
    expect(new Set(users).size).toBe(APP_SERVICES.length);
    for (const name of APP_SERVICES) {
      const env = environmentOf(compose.services[name]!);
      expect(env['NATS_PASSWORD']).toBe(natsEnv[`${env['NATS_USER']!.toUpperCase()}_PASSWORD`]);
    }
  });

  it('keeps API keys out of every service but the provider', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      if (name === 'provider') continue;
      const keys = Array.isArray(service.environment) ? service.environment.map((line) => line.split('=')[0]!) : Object.keys(service.environment ?? {});
      expect(keys.filter((key) => /API_KEY/.test(key)), name).toEqual([]);
    }
  });

  it('copies into the image every file the service mains import, and installs every package they import', async () => {
    const dockerfile = await readFile(join(root, 'Dockerfile'), 'utf8');
    const copied = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \.\/(\S*)$/gm)].flatMap((match) =>
      match[1]!.split(/\s+/).filter((part) => !part.startsWith('--')),
    );
    expect(dockerfile).toMatch(/^RUN npm (ci|install) --omit=dev/m);
    const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const seen = new Set<string>();
    const packages = new Set<string>();
    const queue = APP_SERVICES.map((name) => join(root, commandOf(compose.services[name]!)[3]!));
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      const source = await readFile(file, 'utf8');
      for (const match of source.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'|import\(\s*'([^']+)'\s*\)/g)) {
        const specifier = match[1] ?? match[2]!;
        if (specifier.startsWith('.')) queue.push(resolve(dirname(file), specifier));
        else if (!specifier.startsWith('node:')) packages.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);
      }
    }
    const outside = [...seen].map((file) => relative(root, file)).filter((file) => !copied.some((path) => file === path || file.startsWith(`${path}/`)));
    expect(outside).toEqual([]);
    expect([...packages].filter((name) => !(name in pkg.dependencies))).toEqual([]);
    expect(pkg.dependencies).toHaveProperty('tsx');
  });
});
