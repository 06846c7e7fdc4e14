import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import { LOOP_DELAY_PROBE_FLAGS, createLoopDelayProbe } from '../helpers/loop-delay-probe.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

// The tools service as its own process (services/tools/main.ts) on a real nats-server, sent calls built to hold
// its event loop: a glob that backtracked for minutes when globs were regular expressions, a case-insensitive
// literal over a 1 MiB line, a regular expression that backtracks without end. Beside
// them a list_dir must answer promptly, and the service's event loop (measured in it by a preloaded
// monitorEventLoopDelay, test/helpers/loop-delay-probe.mjs) must never be held 100 ms.

const nats = useNatsServer();
const codec = createCodec();
const prefix = 'hostile';
const subjects = createSubjects(prefix);
const tenant = 'acme';
/** `**\/**?**?…#`: 24 `**?` that each may take any run, and a `#` no path ends with. */
const HOSTILE_GLOB = `**/${'**?'.repeat(24)}#`;
let workspace: string;
let tools: ServiceProcess | undefined;
let sequence = 0;

beforeAll(async () => {
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-hostile-'));
  // The same files at the root and in the tenant's directory, whichever the service works in.
  for (const root of [workspace, join(workspace, tenant)]) {
    const deep = join(root, 'a-directory-with-a-long-name', 'and-another-one-below-it');
    await mkdir(deep, { recursive: true });
    await writeFile(join(deep, 'a-file-whose-path-is-long-enough.txt'), 'needle\n');
    await writeFile(join(root, 'one-long-line.txt'), `${'a'.repeat(1024 * 1024 - 2)}\n`);
    await writeFile(join(root, 'redos.txt'), `${'a'.repeat(40)}!\n`);
  }
  tools = startServiceProcess('services/tools/main.ts', {
    NATS_URL: nats.server.url,
    AGENTBUS_PREFIX: prefix,
    AGENTBUS_WORKSPACE: workspace,
    AGENTBUS_WORKSPACE_PER_TENANT: '0',
    AGENTBUS_UNSAFE_NO_SANDBOX: '1',
  }, LOOP_DELAY_PROBE_FLAGS);
  await tools.waitFor('tools service started', 30_000);
}, 40_000);

afterAll(async () => {
  // SIGKILL: a service whose loop is held (as before the fix) would not drain on SIGTERM.
  await tools?.stop('SIGKILL');
  await rm(workspace, { recursive: true, force: true });
});

function request(name: string, args: unknown, deadlineMs: number): ToolCallRequest {
  sequence += 1;
  return { v: 1, callId: `hostile-${sequence}`, effectId: `effect-${sequence}`, name, args, tenant, sessionId: 's1', turnId: 't1', deadline: Date.now() + deadlineMs };
}

/** A call as the runtime sends it, due in `deadlineMs`; rejected when no answer comes 2 s past that. */
async function call(name: string, args: unknown, deadlineMs: number): Promise<{ reply: ToolCallReply; ms: number }> {
  const began = performance.now();
  const message = await nats.nc.request(subjects.toolCall(name), codec.encode(request(name, args, deadlineMs)), { timeout: deadlineMs + 2_000 });
  return { reply: codec.decode(message.data) as ToolCallReply, ms: performance.now() - began };
}

/** One round of the calls built to hold the loop, with a list_dir beside them; how long it and the glob took. */
async function hostileRound(): Promise<{ listDirMs: number; globMs: number }> {
  const hostile = Promise.all([
    call('search_text', { pattern: 'needle', glob: HOSTILE_GLOB }, 20_000),
    call('search_text', { pattern: `${'A'.repeat(199)}B`, caseSensitive: false, path: 'one-long-line.txt' }, 20_000),
    call('search_text', { pattern: '^(a|aa)+$', regex: true, path: 'redos.txt' }, 1_500),
  ]);
  // Awaited below; a round that fails first (list_dir unanswered) must not leave them unhandled.
  hostile.catch(() => undefined);
  // Sent beside them, once they reached the service.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const beside = await call('list_dir', { path: '.' }, 1_000);
  expect(beside.reply.ok).toBe(true);

  const [glob, literal, redos] = await hostile;
  // The glob matches no path (none ends with #), quickly; before, it ran on the loop for minutes per path.
  expect(glob).toMatchObject({ reply: { ok: true, output: { matches: [], filesSearched: 0 } } });
  expect(glob!.ms).toBeLessThan(2_000);
  // The long literal finds nothing; it may take its time, in a thread.
  expect(literal).toMatchObject({ reply: { ok: true, output: { matches: [] } } });
  // The expression that backtracks without end is ended at the call's deadline (1.5 s, under its 5 s budget).
  expect(redos).toMatchObject({ reply: { ok: false, error: { code: 'timeout' } } });
  return { listDirMs: Math.round(beside.ms), globMs: Math.round(glob!.ms) };
}

describe('a call built to hold the tools service', () => {
  it('answers list_dir at once while it runs, and the service event loop is never held 100 ms', async () => {
    // Warm up: the first calls load and compile what later ones run.
    expect((await call('list_dir', { path: '.' }, 10_000)).reply.ok).toBe(true);
    expect((await call('search_text', { pattern: 'needle', path: 'a-directory-with-a-long-name' }, 10_000)).reply.ok).toBe(true);

    const probe = createLoopDelayProbe(tools!);
    // Up to five rounds: on a loaded machine the OS may not run the process for 100 ms (any process, any
    // time, and the searches' own threads compete for the cores); a loop held by a call is held in every
    // round. Before the fix the first round never answered.
    const rounds: Array<{ listDirMs: number; globMs: number; loopMaxMs: number }> = [];
    while (rounds.length < 5 && !rounds.some((round) => round.loopMaxMs < 100)) {
      await probe.window();
      const took = await hostileRound();
      rounds.push({ ...took, loopMaxMs: await probe.window() });
    }
    console.info(`hostile calls beside list_dir, per round: ${JSON.stringify(rounds)}`);
    expect(Math.min(...rounds.map((round) => round.listDirMs))).toBeLessThan(1_000);
    expect(Math.min(...rounds.map((round) => round.loopMaxMs))).toBeLessThan(100);
  }, 90_000);
});
