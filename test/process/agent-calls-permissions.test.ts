import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PermissionViolationError } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectCli } from '../../cli/connect.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

// Agents calling agents under both shipped NATS configs: the runtime (as `runtime`) prompts and follows a child
// session of acme's with no permission refused, and globex can neither use acme's profiles (the runtime refuses
// the name) nor reach acme's child session on the bus (the server refuses the subjects).

const PROFILES = { profiles: [{ tenant: 'acme', name: 'researcher', description: 'Finds facts.', model: 'scripted:researcher', tools: [] }] };
const SCRIPT = {
  responses: [{ text: 'default' }],
  models: {
    boss: [{ toolCalls: [{ name: 'agent__researcher', args: { task: 'Look it up.' } }] }, { text: 'Relayed.' }],
    researcher: [{ text: 'Found it under guard.' }],
  },
};

describe.each([ShippedConf.accounts, ShippedConf.users])('agent calls under %s', (file) => {
  let nats: ShippedNats;
  let dir: string;
  let acme: NatsConnection;
  let globex: NatsConnection;
  const processes: ServiceProcess[] = [];

  beforeAll(async () => {
    nats = await startShippedNats({ file });
    dir = await mkdtemp(join(tmpdir(), 'agentbus-agent-perms-'));
    const script = join(dir, 'script.json');
    await writeFile(script, JSON.stringify(SCRIPT));
    const as = (user: string) => ({ NATS_URL: nats.url, NATS_USER: user, NATS_PASSWORD: nats.passwords[user]! });
    processes.push(
      startServiceProcess('services/runtime/main.ts', { ...as('runtime'), AGENTBUS_MODEL: 'scripted:default', AGENTBUS_PROFILES: JSON.stringify(PROFILES) }),
      startServiceProcess('services/provider/main.ts', { ...as('provider'), AGENTBUS_SCRIPT: script }),
      // A tenant reads its log back through memory in the accounts layout (no JetStream of its own).
      startServiceProcess('services/memory/main.ts', { ...as('memory') }),
    );
    const [runtime, provider, memory] = processes as [ServiceProcess, ServiceProcess, ServiceProcess];
    await Promise.all([runtime.waitFor('runtime started', 60_000), provider.waitFor('provider service started', 60_000), memory.waitFor('memory service ready', 60_000)]);
    acme = await connectCli(nats.url, 'acme-app', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
    globex = await connectCli(nats.url, 'deliberate-globex', { NATS_USER: 'globex', NATS_PASSWORD: nats.passwords['globex']! });
  }, 90_000);

  afterAll(async () => {
    await acme?.close();
    await globex?.close();
    await Promise.all(processes.map((process) => process.stop('SIGTERM')));
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("runs acme's agent call as a child session of acme's, with no permission refused", async () => {
    const client = createAgentbusClient({ nc: acme });
    const ended = await client.ask({ tenant: 'acme', sessionId: 'guarded-boss' }, { text: 'Ask the researcher.', model: 'scripted:boss' }, { timeoutMs: 30_000 });
    expect(ended).toMatchObject({ reason: 'yielded', text: 'Relayed.' });
    const seen: AgentEvent[] = [];
    for await (const streamed of await client.watch({ tenant: 'acme', sessionId: 'guarded-boss' }, { from: { log: 0 } })) {
      if (streamed.stream === 'log') seen.push(streamed.event);
      if (streamed.event.type === 'turn.ended') break;
    }
    const result = seen.find((event) => event.type === 'tool.result');
    expect(result?.data).toMatchObject({ name: 'agent__researcher', output: 'Found it under guard.', isError: false, child: { sessionId: expect.stringMatching(/^sub-/) } });
    expect(nats.output()).not.toMatch(/Violation/);
  }, 60_000);

  it("refuses globex acme's profile and acme's child session: the name is unknown to globex, the subjects are refused", async () => {
    const client = createAgentbusClient({ nc: globex });
    await expect(client.ask({ tenant: 'globex', sessionId: 'g-1' }, { text: 'Use acme research.', profile: 'researcher' }, { timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'invalid_input' });
    const violations: PermissionViolationError[] = [];
    void (async () => {
      for await (const status of globex.status()) if (status.type === 'error' && status.error instanceof PermissionViolationError) violations.push(status.error);
    })();
    const child = 'agentbus.acme.sessions.sub-forged';
    const subjects = [`${child}.prompt`, `${child}.cancel`];
    for (const subject of subjects) globex.publish(subject, 'forged');
    await globex.flush().catch(() => undefined);
    await expect.poll(() => violations.length, { timeout: 5_000 }).toBe(subjects.length);
    expect(new Set(violations.map((violation) => violation.subject))).toEqual(new Set(subjects));
  }, 40_000);
});
