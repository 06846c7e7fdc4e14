import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAgentbus } from '../helpers/agentbus-bin.ts';

// Quiet by default: the embedded stack's services log to .agentbus/logs/<service>.log, the terminal gets one human
// line per warning; `--verbose` shows every line there too.

let workdir: string;

/** Offline, and with a tools service that warns as it starts (no sandbox): a warning the user must see. */
function env(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, AGENTBUS_UNSAFE_NO_SANDBOX: '1' };
  for (const name of ['NATS_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OLLAMA_HOST', 'AGENTBUS_MODEL', 'AGENTBUS_CONFIG', 'AGENTBUS_SCRIPT', 'LOG_LEVEL']) delete env[name];
  return env;
}

const WARNING = 'AGENTBUS_UNSAFE_NO_SANDBOX=1: run_command runs commands WITHOUT a sandbox';

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-logs-'));
  await writeFile(join(workdir, 'README.md'), '# A project\n');
});

afterAll(async () => {
  await rm(workdir, { recursive: true, force: true });
});

describe('the service logs of ask', () => {
  it('go to .agentbus/logs/, said once; the terminal gets warnings as one human line and no JSON', async () => {
    const run = await runAgentbus(['ask', '--session', 'quiet', 'What is in this folder?'], { cwd: workdir, env: env() });
    expect(run.code).toBe(0);
    expect(run.stderr.split('service logs go to .agentbus/logs/ (--verbose shows them here)').length).toBe(2);
    expect(run.stderr).toContain(`agentbus: tools warn: ${WARNING}`);
    expect(run.stderr).not.toContain('"level"');
    expect(run.stderr).not.toContain('tools service started');
    expect(run.stdout).not.toContain('"level"');
    const tools = await readFile(join(workdir, '.agentbus', 'logs', 'tools.log'), 'utf8');
    const records = tools.trim().split('\n').map((line) => JSON.parse(line) as { level: number; msg: string });
    expect(records).toContainEqual(expect.objectContaining({ level: 40, msg: expect.stringContaining(WARNING) }));
    expect(records).toContainEqual(expect.objectContaining({ level: 30, msg: 'tools service started' }));
    for (const service of ['runtime', 'provider']) expect((await readFile(join(workdir, '.agentbus', 'logs', `${service}.log`), 'utf8')).length).toBeGreaterThan(0);
  }, 120_000);

  it('are shown on the terminal with --verbose, one readable line each, and still kept in the files', async () => {
    const before = (await readFile(join(workdir, '.agentbus', 'logs', 'tools.log'), 'utf8')).length;
    const run = await runAgentbus(['ask', '--verbose', '--session', 'loud', 'What is in this folder?'], { cwd: workdir, env: env() });
    expect(run.code).toBe(0);
    expect(run.stderr).toContain('agentbus: service logs here and in .agentbus/logs/');
    expect(run.stderr).toContain(`[tools] warn ${WARNING}`);
    expect(run.stderr).toMatch(/^\[tools\] info tools service started /m);
    expect(run.stderr).not.toMatch(/^\[\w+\] \{/m);
    expect((await readFile(join(workdir, '.agentbus', 'logs', 'tools.log'), 'utf8')).length).toBeGreaterThan(before);
  }, 120_000);
});
