import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import type { UIMessage } from 'ai';
import { PermissionViolationError } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectBus } from '../../src/bus/connect.ts';
import { createLogger } from '../../src/logging.ts';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';
import { startChatStack } from '../helpers/chat-stack.ts';
import type { ChatStack } from '../helpers/chat-stack.ts';

// The chat gateway's NATS user under both shipped configs: the gateway runs as `chat` beside the runtime, provider
// and memory as their own users and answers a useChat message; and what `chat` may not do is refused by the server.

const TOKEN = 'chat-permissions-token-0123456789';

describe.each([ShippedConf.accounts, ShippedConf.users])('the chat user under %s', (file) => {
  let nats: ShippedNats;
  let dir: string;
  let base: string;
  let stack: ChatStack;

  beforeAll(async () => {
    nats = await startShippedNats({ file });
    dir = await mkdtemp(join(tmpdir(), 'agentbus-chat-perms-'));
    const script = join(dir, 'script.json');
    await writeFile(script, JSON.stringify({ responses: [{ text: 'Hello from a guarded gateway.' }] }));
    const as = (user: string) => ({ NATS_URL: nats.url, NATS_USER: user, NATS_PASSWORD: nats.passwords[user]! });
    stack = await startChatStack({
      env: as,
      services: { runtime: { AGENTBUS_MODEL: 'scripted:default' }, provider: { AGENTBUS_SCRIPT: script }, memory: {} },
      token: TOKEN,
      tenant: 'acme',
    });
    base = stack.base;
  }, 90_000);

  afterAll(async () => {
    await stack?.stop();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('answers a useChat message and resumes nothing afterwards, with no permission refused', async () => {
    const transport = new DefaultChatTransport<UIMessage>({ api: `${base}/api/chat`, headers: { Authorization: `Bearer ${TOKEN}` } });
    const stream = await transport.sendMessages({ trigger: 'submit-message', chatId: 'guarded', messageId: undefined, messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'Hi' }] }], abortSignal: undefined });
    let last: UIMessage | undefined;
    for await (const message of readUIMessageStream({ stream })) last = message;
    expect(last?.parts.map((part) => (part.type === 'text' ? part.text : '')).join('')).toBe('Hello from a guarded gateway.');
    expect(await transport.reconnectToStream({ chatId: 'guarded' })).toBeNull();
    expect(nats.output()).not.toMatch(/Violation.*chat/);
  }, 30_000);

  it('lets the chat user answer questions of its own tenant\'s tools, and refuses whatever else it tries: steer, delete, events, memory, state, providers, tools, other inboxes, other tenants', async () => {
    const nc: NatsConnection = await connectBus({ servers: nats.url, name: 'chat-intruder', logger: createLogger({ name: 'chat', level: 'silent' }), user: 'chat', pass: nats.passwords['chat']!, inboxPrefix: '_INBOX_chat' });
    const violations: PermissionViolationError[] = [];
    void (async () => {
      for await (const status of nc.status()) if (status.type === 'error' && status.error instanceof PermissionViolationError) violations.push(status.error);
    })();
    try {
      const session = 'agentbus.acme.sessions.guarded';
      const publishes = [`${session}.steer`, `${session}.delete`, `${session}.log`, `${session}.live.assistant.delta`, 'agentbus.acme.memory.search', 'agentbus.acme.sessions.list', 'agentbus.acme.state.load', 'agentbus.provider.scripted.generate', 'agentbus.tools.read_file.call', '$KV.AGENTBUS_LEASES.acme.x', '$JS.API.STREAM.PURGE.AGENTBUS_LOG', '_INBOX_client.forged', '$SRV.PING'];
      // Nor anything of another tenant's: its verbs, nor a consumer of its sessions (the gateway serves acme only).
      const theirs = 'agentbus.globex.sessions.guarded';
      publishes.push(`${theirs}.prompt`, `${theirs}.cancel`, `${theirs}.approve`, `${theirs}.input`, `${theirs}.history`);
      for (const stream of ['AGENTBUS_LOG', 'AGENTBUS_LIVE']) {
        publishes.push(`$JS.API.CONSUMER.CREATE.${stream}.spy.${theirs}.log`, `$JS.API.CONSUMER.CREATE.${stream}.spy.agentbus.*.sessions.>`, `$JS.API.CONSUMER.CREATE.${stream}.spy`);
      }
      const subscribes = [`${session}.log`, 'agentbus.>', '_INBOX_client.>', '_INBOX.>', '$SRV.>'];
      for (const subject of publishes) nc.publish(subject, 'forged');
      // Its own tenant's answers to tools' questions go through (no refusal counted for them).
      nc.publish(`${session}.input`, 'forged');
      for (const subject of subscribes) nc.subscribe(subject);
      await nc.flush().catch(() => undefined);
      await expect.poll(() => violations.length, { timeout: 5_000 }).toBe(publishes.length + subscribes.length);
      expect(new Set(violations.map((violation) => violation.subject))).toEqual(new Set([...publishes, ...subscribes]));
    } finally {
      await nc.close();
    }
  }, 30_000);
});
