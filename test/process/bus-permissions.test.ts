import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PermissionViolationError } from '@nats-io/nats-core';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { busOptionsFromEnv, connectBus } from '../../src/bus/connect.ts';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { connectCli } from '../../cli/connect.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import { discoverServices } from '../../src/bus/service-registry.ts';
import type { AgentbusClient } from '../../src/client/index.ts';
import { createLogger } from '../../src/logging.ts';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent, ToolCallReply } from '../../src/protocol/index.ts';
import { createHookWorker, createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { HookWorker, ToolWorker } from '../../src/tool-sdk/index.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import { chunkOf, isTerminator, promptStream } from '../helpers/agent-protocol-caller.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';
import { Role, TaskState } from '@a2a-js/sdk';
import type { Task } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import type { ShippedNats } from '../helpers/shipped-nats.ts';

// Both shipped NATS configs, each as written, with the real runtime, provider and memory processes, a tool worker
// logged in as `tools` and a tool hook logged in as `hooks`: each tenant reaches its own sessions and nothing else,
// nobody reads a reply but its own, and only the runtime asks hooks and only `hooks` answers for them.
// deploy/nats/nats-server.conf puts each tenant in an account of its own (no JetStream there: the SDK reads events
// by subscription and memory's history); deploy/nats/nats-server.users.conf keeps every user in one account, where
// tenants read JetStream through consumers filtered to their sessions. The Synadia Agent Protocol host runs as
// `agents`, and a caller of the protocol as `agents-caller`, prompts acme's agent through it. acme's A2A server runs as
// `a2a` (in acme's account, in the accounts layout), and the A2A SDK's client prompts acme's agent through it.

const codec = createCodec();
const USERS = ['runtime', 'provider', 'tools', 'hooks', 'memory', 'dashboard', 'client', 'operator', 'agents', 'agents-caller', 'acme', 'globex', 'a2a'] as const;
type User = (typeof USERS)[number];
/** Each user's reply inbox: `_INBOX_<user>`, but the protocol's callers make theirs under `_INBOX.agents`, as its SDKs do. */
const inbox = (user: User) => (user === 'agents-caller' ? '_INBOX.agents' : `_INBOX_${user}`);
/** The agent the agents host exposes in this test: acme's, bound to one session. */
const AGENT_PROMPT = 'agents.prompt.agentbus.acme.desk';
/**
 * What the refusal test asks to be refused, by layout: the same list for both, and in the accounts layout also every
 * JetStream request of a tenant (its account has none).
 */
const EXPECTED_REFUSALS = {
  accounts: { refusals: 576, publish: 278, subscribe: 298, byTenants: 212, inboxSubscriptions: 170, consumerCreates: 36 },
  users: { refusals: 548, publish: 250, subscribe: 298, byTenants: 184, inboxSubscriptions: 170, consumerCreates: 28 },
} as const;
/** Refused on purpose by the other tests: the SDK acting for another tenant, and stream info in the accounts layout. */
const EXPECTED_SDK_REFUSALS = { accounts: 6, users: 3 } as const;
const STATE_KEY = 'sealed/note';
const SCRIPT = {
  responses: [
    { text: 'Let me write that down.', toolCalls: [{ name: 'remember', args: { key: STATE_KEY, note: 'for acme only' } }] },
    { text: 'Noted, under seal: only acme can read it back.', chunkSize: 6 },
  ],
};

/**
 * A tool whose work is a round trip through its tenant's state: `context.state` asks memory, answered in
 * `_INBOX_tools`. Side-effecting, so its worker records its outcome in the result ledger.
 */
const remember = defineTool({
  name: 'remember',
  description: 'Writes a note into the tenant state and reads it back',
  parameters: z.object({ key: z.string(), note: z.string() }),
  tier: SafetyTier.sideEffecting,
  timeoutMs: 10_000,
  idempotent: true,
  async execute({ key, note }, { state, tenant }) {
    const { revision } = await state.save(key, { note, by: tenant });
    const loaded = await state.load(key);
    return JSON.stringify({ revision, loaded: loaded.found ? loaded.value : null });
  },
});

describe.each([
  { layout: 'accounts', file: ShippedConf.accounts },
  { layout: 'users', file: ShippedConf.users },
] as const)('tenants sealed on the bus ($file as shipped)', ({ layout, file }) => {
  let nats: ShippedNats;
  let scriptDir: string;
  const processes: ServiceProcess[] = [];
  let toolsConnection: NatsConnection;
  let toolWorker: ToolWorker;
  let hooksConnection: NatsConnection;
  let hookWorker: HookWorker;
  /** The phases and tools the `audit` hook was asked about, by session. */
  const audited: string[] = [];
  /** acme and globex as an app logs in: through the CLI's connect, which takes the inbox prefix from NATS_USER. */
  let acme: NatsConnection;
  let globex: NatsConnection;
  let acmeClient: AgentbusClient;
  /** acme's A2A server, logged in as `a2a`. */
  let a2aUrl: string;
  /** A session of each tenant that has run a turn. */
  let acmeSession: string;
  const globexSession = `g-${Date.now()}`;
  /** Refusals asked for on purpose, by connections named `deliberate-…`; the server must log these and no other. */
  let refusedOnPurpose = 0;

  beforeAll(async () => {
    nats = await startShippedNats({ file });
    scriptDir = await mkdtemp(join(tmpdir(), 'agentbus-permissions-'));
    const script = join(scriptDir, 'script.json');
    await writeFile(script, JSON.stringify(SCRIPT));
    const as = (user: User) => ({ NATS_URL: nats.url, NATS_USER: user, NATS_PASSWORD: nats.passwords[user]!, AGENTBUS_MODEL: 'scripted:default' });
    // With fleet-wide limits set, so that every turn of the test reads and writes the limits bucket as the runtime user.
    const limits = { AGENTBUS_RATE_LIMITS: 'scripted:*=1000rpm,10000000tpm', AGENTBUS_SPEND_LIMITS: '*=100/day,1000/month' };
    const runtime = startServiceProcess('services/runtime/main.ts', { ...as('runtime'), ...limits, AGENTBUS_TOOL_HOOKS: 'before:audit,after:audit' });
    const provider = startServiceProcess('services/provider/main.ts', { ...as('provider'), AGENTBUS_SCRIPT: script });
    const memory = startServiceProcess('services/memory/main.ts', { ...as('memory'), AGENTBUS_EMBED_PROVIDER: 'scripted' });
    processes.push(runtime, provider, memory);
    // A worker of the tool SDK, connected as services/tools/main.ts connects.
    const logger = createLogger({ name: 'permissions-tools', level: 'warn' });
    toolsConnection = await connectBus({
      servers: nats.url,
      name: 'agentbus-tools-remember',
      logger,
      ...busOptionsFromEnv({ NATS_USER: 'tools', NATS_PASSWORD: nats.passwords['tools']! }, ServiceInboxPrefix.tools),
    });
    toolWorker = createToolWorker({ nc: toolsConnection, subjects: createSubjects('agentbus'), codec, logger, tools: [remember], version: '1.0.0' });
    await toolWorker.start();
    // A tool hook of the SDK, connected as a hook process connects: every call of the runtime passes through it.
    hooksConnection = await connectBus({
      servers: nats.url,
      name: 'agentbus-hook-audit',
      logger,
      ...busOptionsFromEnv({ NATS_USER: 'hooks', NATS_PASSWORD: nats.passwords['hooks']! }, ServiceInboxPrefix.hooks),
    });
    hookWorker = createHookWorker({
      nc: hooksConnection,
      subjects: createSubjects('agentbus'),
      codec,
      logger,
      name: 'audit',
      version: '1.0.0',
      before: (call) => (audited.push(`before ${call.tenant}/${call.sessionId} ${call.name}`), { action: 'continue' }),
      after: (call) => (audited.push(`after ${call.tenant}/${call.sessionId} ${call.name} isError=${call.isError}`), { action: 'continue' }),
    });
    await hookWorker.start();
    // Three services compiling at once on a loaded machine: the runtime took 16 s to start at load 25 (20 s is the default wait).
    await Promise.all([runtime.waitFor('runtime started', 60_000), provider.waitFor('provider service started', 60_000), memory.waitFor('memory caught up with the log', 60_000)]);
    // The Synadia Agent Protocol host, once the others run (one process fewer starting at once on a loaded machine).
    const agents = startServiceProcess('services/agents/main.ts', {
      ...as('agents'),
      AGENTBUS_AGENTS: JSON.stringify({ heartbeatIntervalS: 1, agents: [{ owner: 'acme', name: 'desk', tenant: 'acme', session: `desk-${Date.now()}` }] }),
    });
    const a2a = startServiceProcess('services/a2a/main.ts', { ...as('a2a'), AGENTBUS_A2A_TENANT: 'acme', AGENTBUS_A2A_PORT: '0' });
    processes.push(agents, a2a);
    await Promise.all([agents.waitFor('agents service started', 30_000), a2a.waitFor('A2A server started on', 30_000)]);
    a2aUrl = /A2A server started on (http:\/\/[^\s"]+)/.exec(a2a.output())![1]!;
    acme = await connectCli(nats.url, 'acme-app', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
    globex = await connectCli(nats.url, 'globex-app', { NATS_USER: 'globex', NATS_PASSWORD: nats.passwords['globex']! });
    acmeClient = createAgentbusClient({ nc: acme });
  }, 75_000);

  afterAll(async () => {
    await acme?.close().catch(() => undefined);
    await globex?.close().catch(() => undefined);
    await toolWorker?.stop().catch(() => undefined);
    await toolsConnection?.close().catch(() => undefined);
    await hookWorker?.stop().catch(() => undefined);
    await hooksConnection?.close().catch(() => undefined);
    await Promise.all(processes.map((process) => process.stop('SIGTERM')));
    await nats?.stop();
    if (scriptDir) await rm(scriptDir, { recursive: true, force: true });
  });

  /** A repeat of a logged tool call, made as a resumed turn makes it: from a connection of the runtime user. */
  async function repeatAsRuntime(use: Extract<AgentEvent, { type: 'tool.use' }>, sessionId: string): Promise<ToolCallReply> {
    const logger = createLogger({ name: 'runtime-repeat', level: 'silent' });
    const asRuntime = await connectBus({
      servers: nats.url,
      name: 'runtime-repeat',
      logger,
      ...busOptionsFromEnv({ NATS_USER: 'runtime', NATS_PASSWORD: nats.passwords['runtime']! }, ServiceInboxPrefix.runtime),
    });
    try {
      const tools = createToolClient({ nc: asRuntime, subjects: createSubjects('agentbus'), codec, logger });
      const request = { v: 1 as const, callId: `repeat-${sessionId}`, effectId: use.data.effectId, name: use.data.name, args: use.data.args, tenant: 'acme', sessionId, turnId: use.turnId!, deadline: Date.now() + 10_000 };
      return await tools.call(request, { timeoutMs: 10_000, attempt: 2 });
    } finally {
      await asRuntime.close();
    }
  }

  /** Every permission violation the server reports to a connection, as it comes. */
  function recordViolations(connection: NatsConnection): PermissionViolationError[] {
    const seen: PermissionViolationError[] = [];
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'error' && status.error instanceof PermissionViolationError) seen.push(status.error);
      }
    })();
    return seen;
  }

    it('lets acme prompt its session through the runtime and get its answer streamed back; its tool keeps state through memory', async () => {
      acmeSession = `a-${Date.now()}`;
      const events: AgentEvent[] = [];
      const ended = await acmeClient.ask({ tenant: 'acme', sessionId: acmeSession }, { text: 'Remember this for me.' }, {
        onEvent: ({ event }) => events.push(event),
        timeoutMs: 20_000,
        readyTimeoutMs: 10_000,
      });
      expect(ended.reason, events.map((event) => event.type).join(', ')).toBe('yielded');
      const streamed = events.filter((event) => event.type === 'assistant.delta').map((event) => (event.data as { text: string }).text);
      expect(streamed.length).toBeGreaterThan(1);
      expect(streamed.join('')).toContain(SCRIPT.responses[1]!.text);
      // The tool's context.state asked memory twice, and both answers reached the worker in _INBOX_tools.
      const result = events.find((event): event is Extract<AgentEvent, { type: 'tool.result' }> => event.type === 'tool.result');
      expect(result?.data).toMatchObject({ name: 'remember', isError: false });
      expect(JSON.parse(result!.data.output)).toMatchObject({ revision: expect.any(Number), loaded: { note: 'for acme only', by: 'acme' } });
      // What the tool saved is acme's: acme reads it back, globex under the same key finds nothing.
      expect(await acmeClient.state('acme').load(STATE_KEY)).toMatchObject({ found: true, value: { note: 'for acme only', by: 'acme' } });
      expect(await createAgentbusClient({ nc: globex }).state('globex').load(STATE_KEY)).toMatchObject({ found: false });

      // The worker recorded the outcome in the result ledger: a repeat of the call, as a resumed turn makes it
      // from the runtime's connection, is answered from the record (the worker's direct get) without running.
      const use = events.find((event): event is Extract<AgentEvent, { type: 'tool.use' }> => event.type === 'tool.use');
      const repeat = await repeatAsRuntime(use!, acmeSession);
      expect(repeat).toMatchObject({ ok: true, output: result!.data.output });
      // Not run again: the state entry kept the revision the one run wrote.
      const { revision } = JSON.parse(result!.data.output) as { revision: number };
      expect(await acmeClient.state('acme').load(STATE_KEY)).toMatchObject({ revision });
      // The call went through the tool hook, logged in as `hooks`, before and after: the runtime asked, the hook answered.
      expect(audited).toEqual([`before acme/${acmeSession} remember`, `after acme/${acmeSession} remember isError=false`]);
      // acme may answer a tool's question in its own session: the runtime hears `input` and answers acme's inbox
      // (no turn runs now, so the answer is refused as data, not by the server).
      const answered = await acmeClient.input({ tenant: 'acme', sessionId: acmeSession }, { toolCallId: 'none', answer: 'main' }, { timeoutMs: 10_000 });
      expect(answered).toMatchObject({ ok: false, error: { code: 'not_found' } });
    });

    it('lets a tool worker discover every service, as agentbus mcp does to warn of a tool served twice, and each answers it', async () => {
      const instances = await discoverServices(toolsConnection, undefined, { timeoutMs: 2000, codec, logger: createLogger({ name: 'discover', level: 'silent' }) });
      expect(new Set(instances.map((instance) => instance.name))).toEqual(new Set(['agentbus-runtime', 'agentbus-provider', 'agentbus-memory', 'agentbus-memory-tools', 'agentbus-tools', 'agentbus-hooks', 'agents']));
    });

    it('lets a caller of the Synadia Agent Protocol find acme\'s agent, prompt it and read the answer streamed back through the agents host', async () => {
      const caller = await connectBus({
        servers: nats.url,
        name: 'agents-caller-app',
        logger: createLogger({ name: 'agents-caller', level: 'silent' }),
        user: 'agents-caller',
        pass: nats.passwords['agents-caller']!,
        inboxPrefix: inbox('agents-caller'),
      });
      try {
        const [info] = await discoverServices(caller, 'agents', { timeoutMs: 2000, codec });
        expect(info?.metadata).toMatchObject({ agent: 'agentbus', owner: 'acme', protocol_version: '0.3' });
        expect(info?.endpoints.map((endpoint) => endpoint.subject)).toEqual([AGENT_PROMPT, 'agents.status.agentbus.acme.desk']);
        const messages = await promptStream(caller, AGENT_PROMPT, 'Remember this for me.');
        expect(messages[0]?.text).toBe('{"type":"status","data":"ack"}');
        expect(isTerminator(messages.at(-1)!)).toBe(true);
        const answer = messages.slice(1, -1).map(chunkOf).filter((chunk) => chunk.type === 'response').map((chunk) => chunk.data).join('');
        expect(answer).toContain(SCRIPT.responses[1]!.text);
        // Its heartbeats (one a second here) and its status, both naming the instance that registered.
        const heartbeats = caller.subscribe('agents.hb.*.*.*', { max: 1 });
        const beat = await Promise.race([
          (async () => {
            for await (const message of heartbeats) return codec.decode(message.data, 'application/json');
            return undefined;
          })(),
          new Promise((resolve) => setTimeout(() => resolve('no heartbeat within 5 s'), 5000)),
        ]);
        expect(beat).toMatchObject({ agent: 'agentbus', owner: 'acme', instance_id: info?.id });
        const status = await caller.request('agents.status.agentbus.acme.desk', '', { timeout: 2000 });
        expect(codec.decode(status.data, 'application/json')).toMatchObject({ agent: 'agentbus', owner: 'acme', instance_id: info?.id });
        // §7 queries: the caller answers on a reply subject under the host's `_INBOX_agents.query.`, which the host's
        // user hears; the host sends the decision as `approve` (for agents whose approvals are the caller's).
        const host = await connectBus({ servers: nats.url, name: 'agents-query-check', logger: createLogger({ name: 'agents', level: 'silent' }), user: 'agents', pass: nats.passwords['agents']!, inboxPrefix: inbox('agents') });
        try {
          const queryReply = host.subscribe('_INBOX_agents.query.permission-check', { max: 1 });
          await host.flush();
          caller.publish('_INBOX_agents.query.permission-check', 'yes');
          const heard = await Promise.race([
            (async () => {
              for await (const message of queryReply) return new TextDecoder().decode(message.data);
              return undefined;
            })(),
            new Promise((resolve) => setTimeout(() => resolve('no reply within 5 s'), 5000)),
          ]);
          expect(heard).toBe('yes');
          const decision = await createAgentbusClient({ nc: host }).approve({ tenant: 'acme', sessionId: 'desk-nothing-awaited' }, { toolCallId: 'none', approved: false }, { timeoutMs: 10_000 });
          expect(decision.ok).toBe(false);
        } finally {
          await host.close();
        }
      } finally {
        await caller.close();
      }
    });

    it("lets an A2A caller prompt acme's agent through the A2A server and read the task back from the session log", async () => {
      const a2a = await new ClientFactory().createFromUrl(a2aUrl);
      const message = { messageId: `a2a-${Date.now()}`, contextId: '', taskId: '', role: Role.ROLE_USER, parts: [{ content: { $case: 'text' as const, value: 'Remember this for me.' }, metadata: undefined, filename: '', mediaType: 'text/plain' }], metadata: undefined, extensions: [], referenceTaskIds: [] };
      const task = (await a2a.sendMessage({ tenant: '', message, configuration: undefined, metadata: undefined })) as Task;
      expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      const answer = task.artifacts[0]?.parts[0]?.content;
      expect(answer?.$case === 'text' ? answer.value : '').toBe(SCRIPT.responses[1]!.text);
      // Read back through memory's history and sessions list, answered in the a2a user's inbox.
      expect(await a2a.getTask({ tenant: '', id: task.id, historyLength: undefined })).toMatchObject({ id: task.id, status: { state: TaskState.TASK_STATE_COMPLETED } });
      const listed = await a2a.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined });
      expect(listed.tasks.map((listedTask) => listedTask.id)).toEqual([task.id]);
      await expect.poll(async () => (await a2a.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined })).tasks.map((listedTask) => listedTask.id), { timeout: 10_000 }).toContain(task.id);
    });

    it('lets acme delete a session; the tool outcomes recorded for it are purged with its log', async () => {
      const sessionId = `a-del-${Date.now()}`;
      const events: AgentEvent[] = [];
      const ended = await acmeClient.ask({ tenant: 'acme', sessionId }, { text: 'Remember this for me.' }, { onEvent: ({ event }) => events.push(event), timeoutMs: 20_000 });
      expect(ended.reason).toBe('yielded');
      const use = events.find((event): event is Extract<AgentEvent, { type: 'tool.use' }> => event.type === 'tool.use');
      const result = events.find((event): event is Extract<AgentEvent, { type: 'tool.result' }> => event.type === 'tool.result');
      const { revision } = JSON.parse(result!.data.output) as { revision: number };
      expect(await acmeClient.deleteSession({ tenant: 'acme', sessionId })).toMatchObject({ alreadyDeleted: false });
      // No record left (the runtime purged `$KV.AGENTBUS_LEDGER.acme.<session>.>`): the idempotent tool runs again.
      const repeat = await repeatAsRuntime(use!, sessionId);
      expect(repeat.ok).toBe(true);
      expect((JSON.parse((repeat as { output: string }).output) as { revision: number }).revision).toBeGreaterThan(revision);
    });

    it("lets acme fork its own session and prompt the fork, which reads the parent's history; globex's fork of it is refused below", async () => {
      const forked = await acmeClient.forkSession({ tenant: 'acme', sessionId: acmeSession }, {}, { timeoutMs: 10_000 });
      // Memory pages a fork's history log by log: the inherited part first, then the fork's own.
      const inherited = await acmeClient.history({ tenant: 'acme', sessionId: forked.sessionId }, { limit: 500 });
      expect(inherited.events.some((event) => event.sessionId === acmeSession && event.type === 'user.message')).toBe(true);
      const own = await acmeClient.history({ tenant: 'acme', sessionId: forked.sessionId }, { limit: 500, afterSeq: inherited.nextAfterSeq! });
      expect(own.events.map((event) => event.type)).toEqual(['session.created', 'session.forked']);
      const ended = await acmeClient.ask({ tenant: 'acme', sessionId: forked.sessionId }, { text: 'Remember this for me.' }, { timeoutMs: 20_000 });
      expect(ended.reason).toBe('yielded');
    });

    it('lets acme read its history, resume its events from the log, list and search its sessions', async () => {
      const history = await acmeClient.history({ tenant: 'acme', sessionId: acmeSession }, { limit: 500 });
      expect(history.events.map((event) => event.type)).toEqual(expect.arrayContaining(['user.message', 'tool.use', 'tool.result', 'turn.ended']));
      // A client that restarts resumes from the log: an ordered consumer filtered to this session, from its start.
      const watch = await acmeClient.watch({ tenant: 'acme', sessionId: acmeSession }, { from: { log: 0 } });
      const replayed: string[] = [];
      for await (const streamed of watch) {
        if (streamed.stream === 'log') replayed.push(streamed.event.type);
        if (streamed.event.type === 'turn.ended') break;
      }
      expect(replayed).toEqual(history.events.map((event) => event.type));
      await expect
        .poll(async () => (await acmeClient.listSessions('acme', { limit: 500 })).sessions.map((session) => session.sessionId), { timeout: 10_000 })
        .toContain(acmeSession);
      const memory = createMemoryClient({ nc: acme, codec });
      await expect.poll(async () => (await memory.search('acme', { query: 'remember' })).hits.map((hit) => hit.sessionId), { timeout: 10_000 }).toContain(acmeSession);
      // globex runs a turn of its own, so that there is something of globex's to be refused below.
      const globexEnded = await createAgentbusClient({ nc: globex }).ask({ tenant: 'globex', sessionId: globexSession }, { text: 'globex only' }, { timeoutMs: 20_000 });
      expect(globexEnded.reason).toBe('yielded');
    });

    it('refuses every forbidden publish, subscribe and consumer, each with a permission violation', async () => {
      const connections = new Map<User, { nc: NatsConnection; violations: PermissionViolationError[] }>();
      for (const user of USERS) {
        const nc = await connectBus({
          servers: nats.url,
          name: `deliberate-${user}`,
          logger: createLogger({ name: 'deliberate', level: 'silent' }),
          user,
          pass: nats.passwords[user]!,
          inboxPrefix: inbox(user),
        });
        connections.set(user, { nc, violations: recordViolations(nc) });
      }
      const attempts: Array<{ user: User; operation: 'publish' | 'subscription'; subject: string }> = [];
      const publish = (user: User, ...subjects: string[]) => subjects.forEach((subject) => attempts.push({ user, operation: 'publish', subject }));
      const subscribe = (user: User, ...subjects: string[]) => subjects.forEach((subject) => attempts.push({ user, operation: 'subscription', subject }));

      // Nobody reads nats.js' default inbox, or anyone's inbox but its own; nobody writes into an inbox unasked
      // (the provider and the tools may answer only a reply subject a request handed them).
      for (const user of USERS) {
        subscribe(user, '_INBOX.>', ...USERS.filter((other) => other !== user).map((other) => `${inbox(other)}.>`));
        publish(user, '_INBOX.forged');
      }
      publish('provider', '_INBOX_runtime.forged.chunk', '_INBOX_acme.forged');
      publish('tools', '_INBOX_runtime.forged.result', '_INBOX_acme.forged');
      publish('hooks', '_INBOX_runtime.forged.decision', '_INBOX_acme.forged');
      publish('client', '_INBOX_acme.forged');

      // Only the runtime asks a tool hook, and only `hooks` answers for one; a hook reaches nothing else.
      for (const user of USERS) {
        if (user !== 'hooks') subscribe(user, 'agentbus.hooks.audit.before', 'agentbus.hooks.audit.after');
        if (user !== 'hooks' && user !== 'runtime') publish(user, 'agentbus.hooks.audit.before', 'agentbus.hooks.audit.after');
      }
      // Only runtime nodes pass a session message on to its holder, and only they hear what is passed on: anyone else
      // could forge a message into a session with a reply subject of their choice, or read other tenants' prompts.
      for (const user of USERS) {
        if (user !== 'runtime') {
          publish(user, 'agentbus.runtime.some-node.forward');
          subscribe(user, 'agentbus.runtime.some-node.forward');
        }
      }
      // A tool or hook named `sessions` has subjects that a grant of `agentbus.*.sessions.>` would take in: those who
      // follow sessions hold `agentbus.*.sessions.*.>` only, so none of them hears (or answers) its calls.
      for (const user of ['client', 'dashboard', 'acme', 'globex'] as const) {
        const tenant = user === 'acme' || user === 'globex' ? user : '*';
        subscribe(user, 'agentbus.hooks.sessions.before', 'agentbus.hooks.sessions.after', 'agentbus.tools.sessions.call', 'agentbus.tools.sessions.cancel', `agentbus.${tenant}.sessions.>`);
      }
      publish('hooks', 'agentbus.hooks.audit.before', 'agentbus.tools.remember.call', 'agentbus.provider.scripted.generate', `agentbus.acme.sessions.${acmeSession}.prompt`);
      publish('hooks', `agentbus.acme.sessions.${acmeSession}.log`, 'agentbus.acme.state.load', '$JS.API.INFO', '$SRV.INFO');
      subscribe('hooks', 'agentbus.hooks.>', 'agentbus.tools.>', 'agentbus.*.sessions.>', 'agentbus.provider.>', '$JS.>');

      // A tenant reaches nothing of another tenant's: session verbs, history, sessions list, memory, state, events.
      const tenantRefusals = (tenant: 'acme' | 'globex', other: 'acme' | 'globex', otherSession: string) => {
        const session = `agentbus.${other}.sessions.${otherSession}`;
        publish(tenant, ...['prompt', 'cancel', 'steer', 'approve', 'input', 'delete', 'fork', 'history'].map((verb) => `${session}.${verb}`));
        publish(tenant, `agentbus.${other}.sessions.list`, `agentbus.${other}.memory.search`);
        publish(tenant, ...['save', 'load', 'delete'].map((verb) => `agentbus.${other}.state.${verb}`));
        subscribe(tenant, `agentbus.${other}.sessions.>`, `${session}.live.>`, `${session}.log`, 'agentbus.*.sessions.>', 'agentbus.>', '>');
        // Nor its JetStream consumers: only a create whose subject filters to its own sessions is let through.
        for (const stream of ['AGENTBUS_LOG', 'AGENTBUS_LIVE']) {
          publish(tenant, `$JS.API.CONSUMER.CREATE.${stream}.spy.agentbus.${other}.sessions.>`, `$JS.API.CONSUMER.CREATE.${stream}.spy.${session}.log`);
          publish(tenant, `$JS.API.CONSUMER.CREATE.${stream}.spy.agentbus.*.sessions.>`, `$JS.API.CONSUMER.CREATE.${stream}.spy.>`);
          publish(tenant, `$JS.API.CONSUMER.CREATE.${stream}`, `$JS.API.CONSUMER.CREATE.${stream}.spy`, `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.spy`);
          publish(tenant, `$JS.API.CONSUMER.LIST.${stream}`, `$JS.API.CONSUMER.NAMES.${stream}`);
          publish(tenant, `$JS.API.DIRECT.GET.${stream}`, `$JS.API.DIRECT.GET.${stream}.${session}.log`, `$JS.API.STREAM.MSG.GET.${stream}`);
        }
      };
      tenantRefusals('acme', 'globex', globexSession);
      tenantRefusals('globex', 'acme', acmeSession);
      // In an account of its own, a tenant has no JetStream at all: not the streams' info (whose subjects filter would
      // list every session), not even a consumer of its own sessions, nor a consumer's info, next messages, acks or
      // deletion by name, nor a push consumer delivering anywhere.
      if (layout === 'accounts') {
        for (const tenant of ['acme', 'globex'] as const) {
          for (const stream of ['AGENTBUS_LOG', 'AGENTBUS_LIVE']) {
            publish(tenant, `$JS.API.STREAM.INFO.${stream}`, `$JS.API.CONSUMER.CREATE.${stream}.mine.agentbus.${tenant}.sessions.>`, `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.push`);
            publish(tenant, `$JS.API.CONSUMER.INFO.${stream}.mine`, `$JS.API.CONSUMER.DELETE.${stream}.mine`, `$JS.API.CONSUMER.MSG.NEXT.${stream}.mine`, `$JS.ACK.${stream}.mine.1.1.1.1.0`);
          }
        }
      }

      // Only the agents host serves an agent or beats its heart; nobody else reaches `agents.>` but its callers.
      for (const user of USERS) {
        if (user !== 'agents') {
          subscribe(user, AGENT_PROMPT, 'agents.status.agentbus.acme.desk');
          publish(user, 'agents.hb.agentbus.acme.desk');
        }
        if (user !== 'agents-caller' && user !== 'agents') publish(user, AGENT_PROMPT);
      }
      // The agents host prompts sessions as a client does, and approves for agents whose approvals are the caller's
      // (asked with a §7 query), and nothing more: no cancel, steer or delete, no events written, no memory, state,
      // tools, providers or JetStream, and it cannot hear the runtime's session verbs.
      const desk = 'agentbus.acme.sessions.desk';
      publish('agents', `${desk}.cancel`, `${desk}.steer`, `${desk}.delete`, `${desk}.fork`, `${desk}.history`, `${desk}.log`, `${desk}.live.assistant.delta`);
      publish('agents', 'agentbus.acme.memory.search', 'agentbus.acme.state.load', 'agentbus.tools.remember.call', 'agentbus.provider.scripted.generate');
      publish('agents', '$JS.API.INFO', '$JS.API.STREAM.INFO.AGENTBUS_LOG', '$SRV.INFO', 'agents.status.agentbus.acme.desk');
      subscribe('agents', 'agentbus.*.sessions.*.prompt', `${desk}.approve`, 'agentbus.>', 'agents.hb.>', 'agents.>', '$JS.>');
      // It serves acme's agents only: globex's sessions are neither prompted, approved nor followed by it.
      const globexDesk = `agentbus.globex.sessions.${globexSession}`;
      publish('agents', `${globexDesk}.prompt`, `${globexDesk}.approve`);
      subscribe('agents', `${globexDesk}.log`, 'agentbus.globex.sessions.*.live.>');
      // A caller reaches agents only: it cannot serve as one, read another's replies, or touch agentbus subjects.
      publish('agents-caller', `${desk}.prompt`, '$SRV.PING', '$SRV.INFO.agentbus-runtime', '$JS.API.INFO', '_INBOX.agents.forged');
      subscribe('agents-caller', 'agents.>', 'agentbus.>', '$SRV.>', `${desk}.log`);
      // It answers the host's queries under `_INBOX_agents.query.` and writes into no other inbox of the host's.
      publish('agents-caller', '_INBOX_agents.forged', '_INBOX_agents.queryx.forged');
      subscribe('agents-caller', '_INBOX_agents.query.>');

      // acme's A2A server prompts, cancels and reads back acme's sessions and nothing more: no steer, approval or
      // delete, no events written, no memory search or state, nothing of globex's, no tools, providers or JetStream,
      // and it cannot answer for the runtime or memory.
      const own = `agentbus.acme.sessions.${acmeSession}`;
      const theirs = `agentbus.globex.sessions.${globexSession}`;
      publish('a2a', `${own}.steer`, `${own}.approve`, `${own}.delete`, `${own}.fork`, `${own}.log`, `${own}.live.assistant.delta`);
      publish('a2a', 'agentbus.acme.memory.search', 'agentbus.acme.state.load', 'agentbus.acme.state.save');
      publish('a2a', `${theirs}.prompt`, `${theirs}.cancel`, `${theirs}.history`, 'agentbus.globex.sessions.list');
      publish('a2a', 'agentbus.tools.remember.call', 'agentbus.provider.scripted.generate');
      publish('a2a', '$JS.API.INFO', '$JS.API.STREAM.INFO.AGENTBUS_LOG', '$SRV.INFO', `$KV.AGENTBUS_STATE.acme.${STATE_KEY}`);
      subscribe('a2a', `${own}.prompt`, `${own}.history`, 'agentbus.acme.sessions.list', 'agentbus.acme.sessions.>');
      subscribe('a2a', `${theirs}.log`, 'agentbus.globex.sessions.*.live.>', 'agentbus.>', '$JS.>');

      // Nor may a tenant write events itself, answer for memory, call providers or tools, or touch the streams and buckets.
      publish('acme', `${own}.log`, `${own}.live.assistant.delta`, `agentbus.globex.sessions.${globexSession}.log`);
      subscribe('acme', 'agentbus.acme.sessions.list', `${own}.history`, `${own}.delete`, `${own}.fork`, 'agentbus.acme.memory.search', 'agentbus.acme.state.save');
      publish('acme', 'agentbus.provider.scripted.generate', 'agentbus.provider.scripted.embed', 'agentbus.provider.scripted.cancel');
      publish('acme', 'agentbus.tools.remember.call', 'agentbus.tools.remember.cancel', 'agentbus.tools.read_file.call', 'agentbus.memory.rebuild');
      subscribe('acme', 'agentbus.provider.>', 'agentbus.tools.>', '$SRV.>', '$JS.>', '$KV.>');
      publish('acme', '$SRV.PING', '$SRV.INFO.agentbus-tools', '$JS.API.STREAM.PURGE.AGENTBUS_LOG', '$JS.API.STREAM.DELETE.AGENTBUS_LOG');
      publish('acme', '$JS.API.STREAM.CREATE.AGENTBUS_LOG', '$JS.API.STREAM.UPDATE.AGENTBUS_LOG', `$KV.AGENTBUS_STATE.acme.${STATE_KEY}`, '$KV.AGENTBUS_LEASES.acme.x');
      publish('acme', '$JS.API.DIRECT.GET.KV_AGENTBUS_STATE', `$JS.API.DIRECT.GET.KV_AGENTBUS_STATE.$KV.AGENTBUS_STATE.globex.${STATE_KEY}`);
      // The result ledger is the tool workers' alone: no tenant, and no other service, reads or forges an outcome.
      publish('acme', '$KV.AGENTBUS_LEDGER.acme.forged', '$JS.API.DIRECT.GET.KV_AGENTBUS_LEDGER.$KV.AGENTBUS_LEDGER.globex.x', '$JS.API.STREAM.PURGE.KV_AGENTBUS_LEDGER');
      for (const user of ['provider', 'memory', 'dashboard', 'client', 'operator', 'hooks'] as const) publish(user, '$KV.AGENTBUS_LEDGER.acme.forged');
      publish('runtime', '$KV.AGENTBUS_LEDGER.acme.forged', '$JS.API.DIRECT.GET.KV_AGENTBUS_LEDGER.$KV.AGENTBUS_LEDGER.acme.x');
      // The limits bucket is the runtime's alone: no tenant reads another's spend or writes its own down, and no other
      // service forges a rate count or a spend.
      publish('acme', '$KV.AGENTBUS_LIMITS.spend.acme.day', '$JS.API.DIRECT.GET.KV_AGENTBUS_LIMITS', '$JS.API.DIRECT.GET.KV_AGENTBUS_LIMITS.$KV.AGENTBUS_LIMITS.spend.globex.day');
      publish('acme', '$JS.API.STREAM.MSG.GET.KV_AGENTBUS_LIMITS', '$JS.API.STREAM.PURGE.KV_AGENTBUS_LIMITS');
      for (const user of ['provider', 'tools', 'memory', 'dashboard', 'client', 'operator', 'hooks', 'agents'] as const) publish(user, '$KV.AGENTBUS_LIMITS.spend.acme.day');
      // Purging the leases stream (release markers done with) is the runtime's alone: no tenant, nor the dashboard that
      // watches the leases, may wipe a lease.
      for (const user of ['acme', 'dashboard', 'memory', 'tools'] as const) publish(user, '$JS.API.STREAM.PURGE.KV_AGENTBUS_LEASES');

      const subscriptions: Array<{ attempt: (typeof attempts)[number]; subscription: Subscription }> = [];
      for (const attempt of attempts) {
        const { nc } = connections.get(attempt.user)!;
        if (attempt.operation === 'publish') nc.publish(attempt.subject, codec.encode({ text: 'forged', filter: 'agentbus.>' }));
        else subscriptions.push({ attempt, subscription: nc.subscribe(attempt.subject) });
      }
      const key = (operation: string, subject: string) => `${operation} ${subject}`;
      const expected = (user: User) => attempts.filter((attempt) => attempt.user === user).map((attempt) => key(attempt.operation, attempt.subject)).sort();
      const seen = (user: User) => connections.get(user)!.violations.map((violation) => key(violation.operation, violation.subject)).sort();
      try {
        await expect.poll(() => USERS.reduce((count, user) => count + seen(user).length, 0), { timeout: 10_000 }).toBeGreaterThanOrEqual(attempts.length);
        // Exactly the refusals asked for, each once, on the connection that tried.
        for (const user of USERS) expect(seen(user), user).toEqual(expected(user));
        // A refused subscription is closed by nats.js with the violation: nothing ever arrives on it.
        for (const { attempt, subscription } of subscriptions) {
          const closed = await subscription.closed;
          expect(closed, attempt.subject).toBeInstanceOf(PermissionViolationError);
          expect(closed).toMatchObject({ operation: 'subscription', subject: attempt.subject });
        }
        const count = (operation: string, users: readonly User[] = USERS) => attempts.filter((attempt) => attempt.operation === operation && users.includes(attempt.user)).length;
        const summary = {
          refusals: attempts.length,
          publish: count('publish'),
          subscribe: count('subscription'),
          byTenants: count('publish', ['acme', 'globex']) + count('subscription', ['acme', 'globex']),
          inboxSubscriptions: attempts.filter((attempt) => attempt.operation === 'subscription' && attempt.subject.startsWith('_INBOX')).length,
          consumerCreates: attempts.filter((attempt) => attempt.subject.includes('.CONSUMER.') && attempt.subject.includes('CREATE')).length,
        };
        console.log(`bus permissions: ${JSON.stringify(summary)}`);
        expect(summary).toEqual(EXPECTED_REFUSALS[layout]);
        refusedOnPurpose += attempts.length;
      } finally {
        await Promise.all([...connections.values()].map(({ nc }) => nc.close()));
      }
    });

    it("refuses what the SDK would do for another tenant: watching or resuming globex's session as acme", async () => {
      const intruder = await connectCli(nats.url, 'deliberate-acme-sdk', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
      const violations = recordViolations(intruder);
      try {
        const sdk = createAgentbusClient({ nc: intruder });
        // With JetStream, nats.js rejects the consumer's create request with a RequestError caused by the violation;
        // without (its own account), the watch's subscriptions are refused and it throws `denied`, caused by the violation.
        expect(await sdk.eventReader()).toBe(layout === 'accounts' ? 'core' : 'jetstream');
        const refused = { cause: expect.any(PermissionViolationError) };
        await expect(sdk.watch({ tenant: 'globex', sessionId: globexSession }, { from: { log: 0 } })).rejects.toMatchObject(refused);
        await expect(sdk.watch({ tenant: 'globex', sessionId: '*' })).rejects.toMatchObject(refused);
        await expect(sdk.history({ tenant: 'globex', sessionId: globexSession }, {}, { timeoutMs: 2000 })).rejects.toThrow();
        const watched = (session: string) =>
          layout === 'accounts'
            ? [`agentbus.globex.sessions.${session}.log`, `agentbus.globex.sessions.${session}.live.>`]
            : [expect.stringMatching(new RegExp(`^\\$JS\\.API\\.CONSUMER\\.CREATE\\.AGENTBUS_LOG\\.[A-Za-z0-9_]+\\.agentbus\\.globex\\.sessions\\.${session.replace('*', '\\*')}\\.log$`))];
        expect(violations.map((violation) => violation.subject)).toEqual([...watched(globexSession), ...watched('*'), `agentbus.globex.sessions.${globexSession}.history`]);
        refusedOnPurpose += violations.length;
      } finally {
        await intruder.close();
      }
    });

    it("refuses a tenant the streams' info, which would list another tenant's sessions", async () => {
      const intruder = await connectCli(nats.url, 'deliberate-acme-stream-info', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
      const violations = recordViolations(intruder);
      try {
        const request = intruder.request('$JS.API.STREAM.INFO.AGENTBUS_LOG', JSON.stringify({ subjects_filter: 'agentbus.*.sessions.*.log' }), { timeout: 5000 });
        if (layout === 'accounts') {
          await expect(request).rejects.toMatchObject({ cause: expect.any(PermissionViolationError) });
          expect(violations.map((violation) => violation.subject)).toEqual(['$JS.API.STREAM.INFO.AGENTBUS_LOG']);
          refusedOnPurpose += violations.length;
        } else {
          // The gap of one shared account (docs/operations.md): stream info is not per tenant, and names globex's sessions.
          const info = JSON.parse(new TextDecoder().decode((await request).data)) as { state: { subjects?: Record<string, number> } };
          expect(Object.keys(info.state.subjects ?? {})).toContain(`agentbus.globex.sessions.${globexSession}.log`);
          expect(violations).toEqual([]);
        }
      } finally {
        await intruder.close();
      }
    });

    it.runIf(layout === 'users')("refuses a consumer whose subject names acme's sessions but whose filter is globex's (JetStream checks they agree)", async () => {
      const intruder = await connectCli(nats.url, 'deliberate-acme-mismatch', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
      const violations = recordViolations(intruder);
      try {
        const subject = `$JS.API.CONSUMER.CREATE.AGENTBUS_LOG.spy.agentbus.acme.sessions.${acmeSession}.log`;
        const body = { stream_name: 'AGENTBUS_LOG', config: { name: 'spy', filter_subject: `agentbus.globex.sessions.${globexSession}.log`, ack_policy: 'none', deliver_policy: 'all' } };
        const reply = await intruder.request(subject, JSON.stringify(body), { timeout: 5000 });
        expect(JSON.parse(new TextDecoder().decode(reply.data))).toMatchObject({ error: { err_code: 10131 } });
        // The same request filtered to acme's own session is served: the grant is what decides.
        const allowed = { ...body, config: { ...body.config, filter_subject: `agentbus.acme.sessions.${acmeSession}.log` } };
        const created = JSON.parse(new TextDecoder().decode((await intruder.request(subject, JSON.stringify(allowed), { timeout: 5000 })).data)) as { name?: string; error?: unknown };
        expect(created).toMatchObject({ name: 'spy' });
        expect(created.error).toBeUndefined();
        await intruder.request('$JS.API.CONSUMER.DELETE.AGENTBUS_LOG.spy', '', { timeout: 5000 });
        expect(violations).toEqual([]);
      } finally {
        await intruder.close();
      }
    });

    it('caused no refusal but the deliberate ones: the services, the tool worker, the tool hook and the tenants’ apps had every permission they used', async () => {
      const lines = () => nats.output().split('\n').filter((line) => /Violation/.test(line));
      // The server logs a refusal a moment after it sends it.
      expect(refusedOnPurpose).toBe(EXPECTED_REFUSALS[layout].refusals + EXPECTED_SDK_REFUSALS[layout]);
      await expect.poll(() => lines().length, { timeout: 5000 }).toBeGreaterThanOrEqual(refusedOnPurpose);
      expect(lines().filter((line) => !line.includes('deliberate-'))).toEqual([]);
      expect(lines()).toHaveLength(refusedOnPurpose);
    });

});
