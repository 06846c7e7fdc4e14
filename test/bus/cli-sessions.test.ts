import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMemoryService } from '../../services/memory/index.ts';
import type { MemoryService } from '../../services/memory/index.ts';
import { main } from '../../cli/main.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import { silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

let stack: TestStack;
let memoryConnection: NatsConnection;
let memory: MemoryService;
let stateDir: string;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in this process, as the binary would, against the test stack (`NATS_URL`) unless `env` says otherwise. */
async function agentbus(args: string[], env: NodeJS.ProcessEnv = { NATS_URL: stack.server.url }): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const sink = (append: (text: string) => void) =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        append(chunk.toString());
        done();
      },
    });
  const code = await main(args, {
    stdout: sink((text) => (stdout += text)),
    stderr: sink((text) => (stderr += text)),
    env,
    cwd: stateDir,
    stateDir,
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ text: 'Let me look.', toolCalls: [{ name: 'list_dir', args: { path: '.' } }] }, { text: 'There is a README.' }] },
  });
  memoryConnection = await connect({ servers: stack.server.url });
  memory = await startMemoryService({ nc: memoryConnection, logger: silentLogger() });
  await memory.caughtUp;
  stateDir = await mkdtemp(join(tmpdir(), 'agentbus-cli-sessions-'));
  const sdk = createAgentbusClient({ nc: stack.client });
  for (const sessionId of ['cli-a', 'cli-b', 'cli-c']) {
    expect((await sdk.ask({ tenant: 'cli', sessionId }, { text: `what is here, ${sessionId}?` }, { timeoutMs: 20_000 })).reason).toBe('yielded');
  }
  // Memory follows the log: wait until it has indexed all three.
  for (let waited = 0; (await sdk.listSessions('cli')).sessions.length < 3; waited += 50) {
    if (waited > 10_000) throw new Error('memory did not list the three sessions');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}, 60_000);

afterAll(async () => {
  await memory?.stop().catch(() => undefined);
  await memoryConnection?.close().catch(() => undefined);
  await stack?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

describe('agentbus sessions, show and rm', () => {
  it('name themselves in the help', async () => {
    const help = await agentbus(['help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('agentbus sessions [--nats URL] [--tenant T] [--limit N] [--json]');
    expect(help.stdout).toContain('agentbus show <session> [--nats URL] [--tenant T] [--json]');
    expect(help.stdout).toContain('agentbus rm <session> [--nats URL] [--tenant T] [--yes]');
  });

  it('exit 2 with usage on bad flags and arguments, and when no stack runs here', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['sessions', '--limit', '0'], /--limit must be a positive whole number/],
      [['sessions', '--bogus'], /Unknown option '--bogus'/],
      [['sessions', '--tenant', 'no such'], /--tenant must match/],
      [['show'], /show needs exactly one session id, got 0/],
      [['show', 'a', 'b'], /show needs exactly one session id, got 2/],
      [['show', 'bad$id'], /the session id must match/],
      [['rm', 'cli-a'], /pass --yes/],
      [['rm', '--yes'], /rm needs exactly one session id/],
    ];
    for (const [args, message] of cases) {
      const run = await agentbus(args);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(message);
      expect(run.stderr).toContain('run `agentbus help` for usage');
    }
    const nowhere = await agentbus(['sessions'], {});
    expect(nowhere.code).toBe(2);
    expect(nowhere.stderr).toContain('no agentbus stack runs here');
  });

  it('sessions lists a tenant\'s sessions oldest first, as a table or JSON lines, up to --limit', async () => {
    const table = await agentbus(['sessions', '--tenant', 'cli']);
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^SESSION\s+CREATED\s+LAST ACTIVITY\s+TURNS\s+COST\s+LAST ANSWER$/);
    expect(lines.slice(1).map((line) => line.split(/\s+/)[0])).toEqual(['cli-a', 'cli-b', 'cli-c']);
    expect(lines[1]).toMatch(/^cli-a\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+1\s+\$0\.000000\s+There is a README\.$/);
    expect(table.stderr).toContain('3 session(s) of tenant cli');

    const limited = await agentbus(['sessions', '--tenant', 'cli', '--limit', '2', '--json']);
    expect(limited.code).toBe(0);
    const json = limited.stdout.trim().split('\n').map((line) => JSON.parse(line) as { sessionId: string; turns: number });
    expect(json.map((session) => [session.sessionId, session.turns])).toEqual([
      ['cli-a', 1],
      ['cli-b', 1],
    ]);
    expect((await agentbus(['sessions', '--tenant', 'nobody-here'])).stdout.trim().split('\n')).toHaveLength(1);
  });

  it('show prints the conversation in order: user, assistant, tool calls and results, the end of each turn', async () => {
    const run = await agentbus(['show', 'cli-a', '--tenant', 'cli']);
    expect(run.code).toBe(0);
    expect(run.stdout.trim().split('\n')).toEqual([
      'user: what is here, cli-a?',
      'assistant: Let me look.',
      '  → list_dir {"path":"."}',
      expect.stringMatching(/^ {2}← list_dir: .*README\.md/),
      'assistant: There is a README.',
      '— turn yielded after 2 step(s), $0.000000',
    ]);
    const json = await agentbus(['show', 'cli-a', '--tenant', 'cli', '--json']);
    const events = json.stdout.trim().split('\n').map((line) => JSON.parse(line) as { type: string; seq: number });
    expect(events.map((event) => event.type)).toEqual(['session.created', 'user.message', 'turn.started', 'assistant.message', 'tool.use', 'tool.result', 'assistant.message', 'turn.ended']);
    expect(events.every((event, index) => index === 0 || event.seq > events[index - 1]!.seq)).toBe(true);
    const missing = await agentbus(['show', 'never-was', '--tenant', 'cli']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('session cli/never-was does not exist');
  });

  it('rm --yes deletes a session: show and sessions no longer have it, and a second rm says it was already deleted', async () => {
    const removed = await agentbus(['rm', 'cli-b', '--tenant', 'cli', '--yes']);
    expect(removed.code).toBe(0);
    expect(removed.stdout).toBe('deleted session cli/cli-b (8 logged message(s))\n');
    const shown = await agentbus(['show', 'cli-b', '--tenant', 'cli']);
    expect(shown.code).toBe(1);
    expect(shown.stderr).toContain('session cli/cli-b was deleted');
    await expect.poll(async () => (await agentbus(['sessions', '--tenant', 'cli', '--json'])).stdout, { timeout: 10_000 }).not.toContain('cli-b');
    const again = await agentbus(['rm', 'cli-b', '--tenant', 'cli', '-y']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('session cli/cli-b was already deleted');
    const unknown = await agentbus(['rm', 'never-was', '--tenant', 'cli', '--yes']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('session cli/never-was does not exist');
  });
});
