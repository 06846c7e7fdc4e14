import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';
import { ROOT } from '../helpers/service-process.ts';

// deploy/nats/nats-server.conf's accounts are the wall between tenants, not the permission lists inside them: with
// acme's permissions taken away (its user may then do anything its account allows), acme still sees only its own
// sessions' events, finds no JetStream, cannot answer a service, and cannot import another tenant's subjects.

const decoder = new TextDecoder();
const json = (message: Msg) => JSON.parse(decoder.decode(message.data)) as Record<string, unknown>;

describe("a tenant's account, with every permission of its user lifted (deploy/nats/nats-server.conf)", () => {
  let nats: ShippedNats;
  let runtime: NatsConnection;
  let client: NatsConnection;
  let acme: NatsConnection;

  beforeAll(async () => {
    const liftPermissions = (conf: string) => {
      const lifted = conf.replace(/^ACME_PERMISSIONS = \{\n[\s\S]*?\n\}\n/m, 'ACME_PERMISSIONS = { publish: ">", subscribe: ">" }\n');
      if (lifted === conf) throw new Error('no ACME_PERMISSIONS block in the conf');
      return lifted;
    };
    nats = await startShippedNats({ file: ShippedConf.accounts, edit: liftPermissions });
    expect(nats.accounts).toMatchObject({ acme: 'ACME', globex: 'GLOBEX', runtime: 'SERVICES', client: 'SERVICES' });
    runtime = await connect({ servers: nats.url, user: 'runtime', pass: nats.passwords['runtime']!, inboxPrefix: '_INBOX_runtime' });
    client = await connect({ servers: nats.url, user: 'client', pass: nats.passwords['client']!, inboxPrefix: '_INBOX_client' });
    acme = await connect({ servers: nats.url, user: 'acme', pass: nats.passwords['acme']! });
    // The log stream, as the runtime makes it, holding a session of each tenant.
    const jsm = await jetstreamManager(runtime);
    await jsm.streams.add({ name: 'AGENTBUS_LOG', subjects: ['agentbus.*.sessions.*.log'] });
    await runtime.request('agentbus.globex.sessions.g-1.log', 'globex event', { timeout: 5000 });
    await runtime.request('agentbus.acme.sessions.a-1.log', 'acme event', { timeout: 5000 });
  });

  afterAll(async () => {
    for (const connection of [runtime, client, acme]) await connection?.close().catch(() => undefined);
    await nats?.stop();
  });

  it('sees only its own sessions events on `>`, and none of the services traffic', async () => {
    const seen: string[] = [];
    const everything = acme.subscribe('>', { callback: (_error, message) => void seen.push(message.subject) });
    await acme.flush();
    for (const subject of ['agentbus.globex.sessions.g-1.log', 'agentbus.globex.sessions.g-1.live.assistant.delta', 'agentbus.acme.sessions.a-1.log', 'agentbus.acme.sessions.a-1.live.assistant.delta']) {
      runtime.publish(subject, 'event');
    }
    // The verbs are services, never streamed: a prompt of acme's own, sent by the client user, does not echo to acme.
    client.publish('agentbus.acme.sessions.a-1.prompt', 'hello');
    client.publish('agentbus.globex.sessions.g-1.prompt', 'hello');
    runtime.publish('agentbus.tools.read_file.call', 'call');
    runtime.publish('$KV.AGENTBUS_LEASES.globex.g-1', 'lease');
    await runtime.flush();
    const marker = 'agentbus.acme.sessions.marker.log';
    runtime.publish(marker, 'last');
    await expect.poll(() => seen, { timeout: 5000 }).toContain(marker);
    everything.unsubscribe();
    expect(seen).toEqual(['agentbus.acme.sessions.a-1.log', 'agentbus.acme.sessions.a-1.live.assistant.delta', marker]);
  });

  it('finds no JetStream: stream info, consumers by name and push consumers answer "not enabled for account", a direct get nothing', async () => {
    const requests: Array<[string, unknown]> = [
      ['$JS.API.INFO', {}],
      ['$JS.API.STREAM.INFO.AGENTBUS_LOG', { subjects_filter: 'agentbus.>' }],
      ['$JS.API.STREAM.NAMES', {}],
      ['$JS.API.CONSUMER.NAMES.AGENTBUS_LOG', {}],
      ['$JS.API.CONSUMER.INFO.AGENTBUS_LOG.any', {}],
      ['$JS.API.CONSUMER.DELETE.AGENTBUS_LOG.any', {}],
      ['$JS.API.CONSUMER.CREATE.AGENTBUS_LOG.push', { stream_name: 'AGENTBUS_LOG', config: { name: 'push', deliver_subject: 'spy.here', filter_subject: 'agentbus.globex.sessions.>' } }],
    ];
    for (const [subject, body] of requests) {
      const reply = json(await acme.request(subject, JSON.stringify(body), { timeout: 5000 }));
      expect(reply, subject).toMatchObject({ error: { err_code: 10039 } });
      expect(JSON.stringify(reply)).not.toContain('globex');
    }
    // Direct gets are served by a stream's own subscription, and no stream is in this account: no answer at all.
    await expect(acme.request('$JS.API.DIRECT.GET.AGENTBUS_LOG', JSON.stringify({ last_by_subj: 'agentbus.globex.sessions.g-1.log' }), { timeout: 1000 })).rejects.toThrow();
  });

  it('cannot answer a service: its subscriptions to the verbs and to memory hear nothing, and requests from the services account find no responder in it', async () => {
    const heard: string[] = [];
    for (const subject of ['agentbus.*.sessions.*.prompt', 'agentbus.*.sessions.*.history', 'agentbus.*.memory.search', 'agentbus.*.state.load', '$SRV.>']) {
      acme.subscribe(subject, { callback: (_error, message) => void heard.push(message.subject) });
    }
    await acme.flush();
    // The client user asks what acme's subscriptions would answer, the runtime the $SRV discovery.
    const asks: Array<[NatsConnection, string]> = [
      [client, 'agentbus.globex.sessions.g-1.prompt'],
      [client, 'agentbus.acme.sessions.a-1.history'],
      [client, 'agentbus.globex.memory.search'],
      [client, 'agentbus.acme.state.load'],
      [runtime, '$SRV.PING'],
    ];
    for (const [connection, subject] of asks) {
      await expect(connection.request(subject, '{}', { timeout: 2000 }), subject).rejects.toMatchObject({ message: expect.stringMatching(/no responders/i) });
    }
    expect(heard).toEqual([]);
  });

  it('cannot write into the services account: a log or live event it publishes reaches neither a subscriber there nor the stream', async () => {
    const jsm = await jetstreamManager(runtime);
    const before = (await jsm.streams.info('AGENTBUS_LOG')).state.messages;
    const heard: string[] = [];
    client.subscribe('agentbus.*.sessions.*.>', { callback: (error, message) => void heard.push(error ? String(error) : message.subject) });
    await client.flush();
    acme.publish('agentbus.acme.sessions.a-1.log', 'forged');
    acme.publish('agentbus.globex.sessions.g-1.log', 'forged');
    acme.publish('agentbus.acme.sessions.a-1.live.assistant.delta', 'forged');
    await acme.flush();
    await client.flush();
    expect(heard).toEqual([]);
    expect((await jsm.streams.info('AGENTBUS_LOG')).state.messages).toBe(before);
  });
});

describe('exports private to one tenant account (deploy/nats/nats-server.conf)', () => {
  const importInto = (account: 'GLOBEX', line: string) => (conf: string) => {
    const block = conf.indexOf(`  ${account} {`);
    const imports = conf.indexOf('imports = [', block);
    if (block < 0 || imports < 0) throw new Error(`no imports of ${account} in the conf`);
    const at = imports + 'imports = ['.length;
    return `${conf.slice(0, at)}\n      ${line}${conf.slice(at)}`;
  };

  it.each([
    ['a service import of acme’s prompts', '{ service: { account: SERVICES, subject: "agentbus.acme.sessions.*.prompt" } }', /service import not authorized/],
    ['a stream import of acme’s log', '{ stream: { account: SERVICES, subject: "agentbus.acme.sessions.*.log" } }', /stream import not authorized/],
    ['a stream import of every session', '{ stream: { account: SERVICES, subject: "agentbus.*.sessions.*.log" } }', /stream import not authorized/],
  ])('makes nats-server refuse to start when globex adds %s to its account', async (_what, line, refusal) => {
    await expect(startShippedNats({ file: ShippedConf.accounts, edit: importInto('GLOBEX', line) })).rejects.toThrow(refusal);
  });
});

describe('adding a tenant as docs/operations.md shows it', () => {
  let nats: ShippedNats;

  afterAll(async () => {
    await nats?.stop();
  });

  it('runs a new tenant through the blocks of "Adding a tenant", added to the shipped file as the page says', async () => {
    const page = await readFile(join(ROOT, 'docs/operations.md'), 'utf8');
    const section = page.slice(page.indexOf('## Adding a tenant'), page.indexOf('## TLS'));
    const [permissions, account, exports] = [...section.matchAll(/```\n([\s\S]*?)```/g)].map((match) => match[1]!.replace(/^ {3}/gm, ''));
    expect([permissions, account, exports].every(Boolean)).toBe(true);
    const add = (conf: string) => {
      const anchor = '# No anonymous connections';
      const exportsAt = conf.indexOf('    exports = [\n') + '    exports = [\n'.length;
      let edited = `${conf.slice(0, exportsAt)}${exports}${conf.slice(exportsAt)}`;
      edited = edited.replace(anchor, `${permissions}\n${anchor}`);
      const closing = edited.lastIndexOf('}');
      return `${edited.slice(0, closing)}\n${account}${edited.slice(closing)}`;
    };
    nats = await startShippedNats({ file: ShippedConf.accounts, edit: add });
    expect(nats.accounts['initech']).toBe('INITECH');
    const runtime = await connect({ servers: nats.url, user: 'runtime', pass: nats.passwords['runtime']!, inboxPrefix: '_INBOX_runtime' });
    const initech = await connect({ servers: nats.url, user: 'initech', pass: nats.passwords['initech']!, inboxPrefix: '_INBOX_initech' });
    try {
      // The runtime (in the services' account) answers initech's prompt and publishes its session's events.
      runtime.subscribe('agentbus.*.sessions.*.prompt', {
        callback: (_error, message) => {
          message.respond('accepted');
          runtime.publish('agentbus.initech.sessions.i-1.live.assistant.delta', 'delta');
          runtime.publish('agentbus.acme.sessions.a-1.live.assistant.delta', 'not for initech');
        },
      });
      await runtime.flush();
      const events: string[] = [];
      initech.subscribe('agentbus.initech.sessions.*.>', { callback: (_error, message) => void events.push(message.subject) });
      await initech.flush();
      expect(decoder.decode((await initech.request('agentbus.initech.sessions.i-1.prompt', 'hello', { timeout: 5000 })).data)).toBe('accepted');
      await expect.poll(() => events, { timeout: 5000 }).toContain('agentbus.initech.sessions.i-1.live.assistant.delta');
      expect(events).toEqual(['agentbus.initech.sessions.i-1.prompt', 'agentbus.initech.sessions.i-1.live.assistant.delta']);
      expect(json(await initech.request('$JS.API.INFO', '', { timeout: 5000 }))).toMatchObject({ error: { err_code: 10039 } });
    } finally {
      await initech.close();
      await runtime.close();
    }
  });
});
