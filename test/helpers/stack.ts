import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import type { Logger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent, PromptReply } from '../../src/protocol/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { ProviderAdapter, Script } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { AgentProfiles, Runtime, RuntimeConfig } from '../../services/runtime/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { startNatsServer } from './nats-server.ts';
import type { TestNatsServer } from './nats-server.ts';

/** The whole stack in one process, on a test nats-server, for integration tests. */
export interface TestStack {
  readonly server: TestNatsServer;
  /** A raw client connection, as an outside user would have. */
  readonly client: NatsConnection;
  readonly workspace: string;
  runtime: Runtime;
  startRuntime(config?: Partial<RuntimeConfig>): Promise<Runtime>;
  stop(): Promise<void>;
}

export const silentLogger = () => pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/** Starts nats-server, provider (scripted), tools (on a temp workspace) and runtime; `logger` is silent unless given. */
export async function startStack(options: {
  script: Script;
  runtime?: Partial<RuntimeConfig>;
  extraTools?: AnyToolDefinition[];
  logger?: Logger;
  /** Provider adapters in place of the default scripted one (e.g. a scripted adapter that names every call `call_0`). */
  adapters?: readonly ProviderAdapter[];
  /** Agent profiles of the runtime (agents calling agents). */
  profiles?: AgentProfiles;
}): Promise<TestStack> {
  const server = await startNatsServer();
  const workspace = await mkdtemp(join(tmpdir(), 'agentbus-ws-'));
  await writeFile(join(workspace, 'README.md'), '# Demo workspace\nHello from the workspace.\n');
  const logger = options.logger ?? silentLogger();
  const serviceConnection = await connect({ servers: server.url });
  const runtimeConnection = await connect({ servers: server.url });
  const client = await connect({ servers: server.url });
  const provider = await startProviderService({ nc: serviceConnection, logger, script: options.script, ...(options.adapters ? { adapters: options.adapters } : {}) });
  const tools = await startToolsService({ nc: serviceConnection, logger, workspace, perTenant: false, ...(options.extraTools ? { extraTools: options.extraTools } : {}) });
  let currentConnection = runtimeConnection;
  const stack: TestStack = {
    server,
    client,
    workspace,
    runtime: await startRuntimeService({ nc: runtimeConnection, logger, config: { leaseTtlMs: 3000, ...options.runtime }, ...(options.profiles ? { profiles: options.profiles } : {}) }),
    async startRuntime(config) {
      currentConnection = await connect({ servers: server.url });
      stack.runtime = await startRuntimeService({ nc: currentConnection, logger, config: { leaseTtlMs: 3000, ...options.runtime, ...config }, ...(options.profiles ? { profiles: options.profiles } : {}) });
      return stack.runtime;
    },
    async stop() {
      await stack.runtime.stop().catch(() => undefined);
      await tools.stop().catch(() => undefined);
      await provider.stop().catch(() => undefined);
      for (const connection of [client, serviceConnection, runtimeConnection, currentConnection]) await connection.close().catch(() => undefined);
      await server.stop();
      await rm(workspace, { recursive: true, force: true });
    },
  };
  return stack;
}

const codec = createCodec();

/** Sends a JSON prompt request the way `nats req` would, and decodes the reply. */
export async function requestJson(client: NatsConnection, subject: string, body: unknown, timeout = 5000): Promise<PromptReply & { ok?: boolean }> {
  const requestHeaders = headers();
  requestHeaders.set('Content-Type', 'application/json');
  const reply = await client.request(subject, JSON.stringify(body), { timeout, headers: requestHeaders });
  return codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply;
}

/** Sends raw bytes or text with an optional Content-Type and decodes the reply. */
export async function requestRaw(client: NatsConnection, subject: string, body: string | Uint8Array, contentType?: string, timeout = 5000): Promise<PromptReply> {
  const requestHeaders = headers();
  if (contentType) requestHeaders.set('Content-Type', contentType);
  const reply = await client.request(subject, body, { timeout, headers: requestHeaders });
  return codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply;
}

/** Sends a msgpack request and decodes the reply. */
export async function requestMsgpack(client: NatsConnection, subject: string, body: unknown, timeout = 5000): Promise<PromptReply & { ok?: boolean }> {
  const requestHeaders = headers();
  requestHeaders.set('Content-Type', 'application/msgpack');
  const reply = await client.request(subject, codec.encode(body), { timeout, headers: requestHeaders });
  return codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply;
}

/** Collects every event of a session (`agentbus.<t>.sessions.<sid>.>`, log and live) as an outside client sees them. */
export function collectEvents(client: NatsConnection, tenant: string, sessionId: string) {
  const events: AgentEvent[] = [];
  const waiters: Array<{ test: (events: AgentEvent[]) => boolean; resolve: () => void }> = [];
  const subscription = client.subscribe(`agentbus.${tenant}.sessions.${sessionId}.>`, {
    callback: (_error, message: Msg) => {
      if (!message.subject.includes('.log') && !message.subject.includes('.live.')) return;
      events.push(codec.decode(message.data, message.headers?.get('Content-Type')) as AgentEvent);
      for (const waiter of [...waiters]) {
        if (waiter.test(events)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve();
        }
      }
    },
  });
  return {
    events,
    async until(test: (events: AgentEvent[]) => boolean, timeoutMs = 10_000): Promise<AgentEvent[]> {
      if (test(events)) return events;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out; saw: ${events.map(describe).join(', ')}`)), timeoutMs);
        waiters.push({ test, resolve: () => (clearTimeout(timer), resolve()) });
      });
      return events;
    },
    turnsEnded: () => events.filter((event) => event.type === 'turn.ended').length,
    stop: () => subscription.unsubscribe(),
  };
}

/** A short label of an event, for failure messages. */
export function describe(event: AgentEvent): string {
  return event.type === 'state' ? `state:${event.data.machine}:${event.data.value}` : event.type;
}
