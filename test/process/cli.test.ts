import { spawn, spawnSync } from 'node:child_process';
import { access, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAsk } from '../../cli/ask.ts';
import { parseServices } from '../../cli/up.ts';
import { UsageError } from '../../cli/context.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { AGENTBUS_BIN, offlineEnv, runAgentbus } from '../helpers/agentbus-bin.ts';
import type { AgentbusRun } from '../helpers/agentbus-bin.ts';


/** Runs the real `agentbus` binary, offline unless `env` says otherwise. */
function agentbus(args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<AgentbusRun> {
  return runAgentbus(args, { cwd: options.cwd, env: { ...offlineEnv(), ...options.env }, ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}) });
}

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-cli-'));
  await writeFile(join(workdir, 'README.md'), '# A project\n');
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

describe('agentbus flags', () => {
  it('parses ask flags and refuses bad ones with a clear message', () => {
    expect(parseAsk(['--tenant', 'acme', '--session', 's1', '--model', 'scripted:default', '--max-steps', '3', 'hi', 'there'])).toMatchObject({
      tenant: 'acme',
      sessionId: 's1',
      prompt: { text: 'hi there', model: 'scripted:default', maxSteps: 3 },
    });
    expect(() => parseAsk([])).toThrow(UsageError);
    expect(() => parseAsk(['--session', 'bad id', 'x'])).toThrow(/--session must match/);
    expect(() => parseAsk(['--model', 'gpt', 'x'])).toThrow(/<provider>:<model>/);
    expect(() => parseAsk(['--max-steps', '0', 'x'])).toThrow(/positive whole number/);
    expect(() => parseAsk(['--wat', 'x'])).toThrow(/Unknown option/);
  });

  it('parses --services, naming what is available when a name is wrong', () => {
    expect(parseServices(undefined)).toEqual(expect.arrayContaining(['runtime', 'provider', 'tools', 'memory', 'dashboard']));
    expect(parseServices('memory')).toEqual(['memory']);
    expect(parseServices('tools,runtime,tools')).toEqual(['tools', 'runtime']);
    expect(() => parseServices('runtime,nope')).toThrow(/unknown service "nope"; available: runtime, provider, tools/);
    expect(parseServices('dashboard')).toEqual(['dashboard']);
  });

  it('exits 2 with usage on an unknown flag, without starting anything', async () => {
    const run = await agentbus(['ask', '--bogus', 'x'], { cwd: workdir });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("Unknown option '--bogus'");
    await expect(access(join(workdir, '.agentbus'))).rejects.toThrow();
  });

  it('says exactly how to install nats-server when it is missing', async () => {
    const run = await agentbus(['ask', 'hello'], { cwd: workdir, env: { PATH: '/nonexistent' } });
    expect(run.code).toBe(3);
    expect(run.stderr).toContain('apt-get install nats-server');
    expect(run.stderr).toContain('brew install nats-server');
    expect(run.stderr).toContain('docker run');
  });
});

describe('agentbus up, ask and tail', () => {
  it('ask runs the embedded stack for one command and streams the demo answer', async () => {
    const run = await agentbus(['ask', 'What is in this folder?'], { cwd: workdir });
    expect(run.code).toBe(0);
    // Every streamed word reaches stdout, the last one included.
    const demo = JSON.parse(await readFile(fileURLToPath(new URL('../../examples/demo-script.json', import.meta.url)), 'utf8')) as { responses: Array<{ text: string }> };
    expect(run.stdout.trim().endsWith(demo.responses.at(-1)!.text.trim())).toBe(true);
    expect(run.stderr).toContain('[1/8] Executing tools: list_dir');
    expect(run.stderr).toContain('tool.result: read_file ok');
    expect(run.stderr.split('using the offline scripted provider').length).toBe(2);
  });

  it("ask's demo reads only the start of a long README, so no summary takes the scripted answer", async () => {
    // 3,000 lines: read whole (up to read_file's 100,000 characters) it would be past the scripted model's window,
    // and the summary call would take the demo's last response, leaving the answer empty.
    const folder = await mkdtemp(join(tmpdir(), 'agentbus-cli-long-readme-'));
    try {
      const lines = Array.from({ length: 3_000 }, (_, index) => `Line ${index}: otters ${(index * 7919).toString(36)} hold hands while they sleep.`);
      await writeFile(join(folder, 'README.md'), `${lines.join('\n')}\n`);
      const run = await agentbus(['ask', 'What is in this folder?'], { cwd: folder });
      expect(run.code).toBe(0);
      const demo = JSON.parse(await readFile(fileURLToPath(new URL('../../examples/demo-script.json', import.meta.url)), 'utf8')) as { responses: Array<{ text: string }> };
      expect(run.stdout.trim().endsWith(demo.responses.at(-1)!.text.trim())).toBe(true);
      expect(run.stderr).not.toContain('Summarizing');
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  });

  it('ask and tail use the stack that up runs from the same folder', async () => {
    let outsider: NatsConnection | undefined;
    const up = spawn(process.execPath, [AGENTBUS_BIN, 'up'], { cwd: workdir, env: offlineEnv() });
    let upOutput = '';
    up.stderr.on('data', (chunk: Buffer) => (upOutput += chunk.toString()));
    try {
      await expect.poll(() => upOutput, { timeout: 30_000 }).toContain('agentbus is up');
      expect(upOutput).toMatch(/dashboard: http:\/\/127\.0\.0\.1:\d+\//);
      // The dashboard shows every session, and other users of the machine reach its loopback port: it asks for the
      // token that up made and printed in its URL.
      const dashboardUrl = /dashboard: (http:\/\/127\.0\.0\.1:\d+\/)\?token=([A-Za-z0-9_-]{43})/.exec(upOutput);
      expect(dashboardUrl).not.toBeNull();
      expect((await fetch(dashboardUrl![1]!)).status).toBe(401);
      expect((await fetch(`${dashboardUrl![1]}?token=${dashboardUrl![2]}`)).status).toBe(200);
      const tail = spawn(process.execPath, [AGENTBUS_BIN, 'tail', '--session', 'cli-1'], { cwd: workdir, env: offlineEnv() });
      let tailOutput = '';
      let tailErrors = '';
      tail.stdout.on('data', (chunk: Buffer) => (tailOutput += chunk.toString()));
      tail.stderr.on('data', (chunk: Buffer) => {
        tailOutput += chunk.toString();
        tailErrors += chunk.toString();
      });
      await expect.poll(() => tailOutput, { timeout: 15_000 }).toContain('following');

      // The stack's bus lets in only the holder of its token, which up keeps in .agentbus/ for its owner alone.
      const stackFile = join(workdir, '.agentbus', 'stack.json');
      const { url, token } = JSON.parse(await readFile(stackFile, 'utf8')) as { url: string; token: string };
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect((await stat(stackFile)).mode & 0o777).toBe(0o600);
      expect((await stat(join(workdir, '.agentbus'))).mode & 0o777).toBe(0o700);
      await expect(connect({ servers: url, timeout: 3000, reconnect: false })).rejects.toThrow(/Authorization Violation/i);
      // Not on any command line (every service and the server got it through the environment or a file), nor logged.
      expect(spawnSync('ps', ['-eo', 'args'], { encoding: 'utf8' }).stdout).not.toContain(token);
      expect(upOutput).not.toContain(token);

      // An outside publisher on the stack's bus (it holds the token), putting junk on the session's subjects.
      outsider = await connect({ servers: url, token });
      const codec = createCodec();
      const malformed = new Uint8Array([0x82, 0xa1, 0x76]);
      const envelope = { v: 1, id: 'junk', tenant: 'default', sessionId: 'cli-1', ts: Date.now() };
      const live = (type: string) => `agentbus.default.sessions.cli-1.live.${type}`;

      const asking = agentbus(['ask', '--session', 'cli-1', 'first'], { cwd: workdir });
      await expect.poll(() => tailOutput, { timeout: 15_000 }).toContain('default/cli-1 user.message');
      outsider.publish(live('assistant.delta'), malformed);
      outsider.publish(live('assistant.delta'), codec.encode({ ...envelope, type: 'assistant.delta', data: 5 }));
      outsider.publish(live('turn.ended'), codec.encode({ ...envelope, type: 'turn.ended', data: { reason: 'failed', usage: { inputTokens: 0, outputTokens: 0 }, cost: 0, steps: 1 } }));
      outsider.publish(live('state'), codec.encode({ ...envelope, type: 'state', sessionId: 'someone-else', data: { machine: 'turn', value: 'Failed', event: 'x' } }));
      await outsider.flush();
      const first = await asking;
      // Had ask taken the junk (if it came before the turn ended): the live turn.ended would exit 1, the delta print "undefined".
      expect(first.code).toBe(0);
      expect(first.stdout).not.toContain('undefined');
      expect(first.stderr).not.toContain('embedded one');
      // The script played out in this session: the scripted provider now echoes.
      const second = await agentbus(['ask', '--session', 'cli-1', '--json', 'echo me'], { cwd: workdir });
      expect(second.code).toBe(0);
      const events = second.stdout.trim().split('\n').map((line) => JSON.parse(line) as { type: string; data: { text?: string; reason?: string } });
      expect(events.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'yielded', text: 'echo me' } });

      await expect.poll(() => tailOutput.match(/default\/cli-1 turn\.ended +yielded/g)?.length ?? 0, { timeout: 10_000 }).toBe(2);
      expect(tailOutput).toContain('default/cli-1 user.message');

      // Stored in the session's log, so only once its turns are over (the runtime's next append would expect the
      // sequence before them); a turn.ended whose data is a number once made tail's formatter throw.
      const log = 'agentbus.default.sessions.cli-1.log';
      outsider.publish(log, malformed);
      outsider.publish(log, codec.encode({ ...envelope, type: 'turn.ended', data: 5 }));
      outsider.publish(log, codec.encode({ ...envelope, type: 'session.created', sessionId: 'someone-else', data: { createdBy: 'me' } }));
      await outsider.flush();
      const skipped = () => tailErrors.split('\n').filter((line) => line.startsWith('skipped a message on '));
      await expect.poll(() => skipped().length, { timeout: 10_000 }).toBe(7);
      expect(skipped()).toEqual([
        expect.stringMatching(/^skipped a message on agentbus\.default\.sessions\.cli-1\.live\.assistant\.delta: malformed msgpack/),
        'skipped a message on agentbus.default.sessions.cli-1.live.assistant.delta: invalid live event: data: Invalid input: expected object, received number',
        expect.stringMatching(/^skipped a message on agentbus\.default\.sessions\.cli-1\.live\.turn\.ended: invalid live event: type: Invalid discriminator value/),
        'skipped a message on agentbus.default.sessions.cli-1.live.state: invalid live event: an event of default/someone-else on a subject of default/cli-1',
        expect.stringMatching(/^skipped a message on agentbus\.default\.sessions\.cli-1\.log: malformed msgpack/),
        'skipped a message on agentbus.default.sessions.cli-1.log: invalid log event: data: Invalid input: expected object, received number',
        'skipped a message on agentbus.default.sessions.cli-1.log: invalid log event: an event of default/someone-else on a subject of default/cli-1',
      ]);
      // None of it reached stdout as an event, and tail is still running.
      expect(tailOutput).not.toContain('someone-else state');
      expect(tailOutput).not.toMatch(/turn\.ended +failed/);
      expect(`${tailOutput}${first.stdout}${first.stderr}${second.stderr}${upOutput}`).not.toContain(token);
      expect(tail.exitCode).toBeNull();
      tail.kill('SIGINT');
    } finally {
      await outsider?.close().catch(() => undefined);
      const exited = new Promise((resolve) => up.once('exit', resolve));
      up.kill('SIGINT');
      expect(await exited).toBe(0);
    }
    await expect(access(join(workdir, '.agentbus', 'stack.json'))).rejects.toThrow();
    // up starts five services, each its own process, and this test waits for all of them twice over.
  }, 90_000);
});
