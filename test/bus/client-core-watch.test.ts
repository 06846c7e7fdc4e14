import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { EventReader, detectEventReader, openCoreWatch } from '../../src/client/index.ts';
import type { StreamedEvent } from '../../src/client/index.ts';
import { createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import type { SessionHistoryReply } from '../../src/protocol/index.ts';
import { AgentbusError } from '../../src/errors.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { freePort } from '../helpers/nats-server.ts';
import { createLogBuilder } from '../helpers/log-events.ts';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';

// The client SDK without JetStream (a tenant in an account of its own): how it finds out, and its watch by
// subscription, whose log resumes through memory's history.

const nats = useNatsServer();
const codec = createCodec();
const subjects = createSubjects('agentbus');

describe('detectEventReader', () => {
  it('finds JetStream where the account has it', async () => {
    expect(await detectEventReader(nats.nc, codec)).toBe(EventReader.jetstream);
  });

  it('finds none, at once, for a tenant in its own account of the shipped conf ("not enabled for account")', async () => {
    const shipped = await startShippedNats({ file: ShippedConf.accounts });
    const acme = await connect({ servers: shipped.url, user: 'acme', pass: shipped.passwords['acme']!, inboxPrefix: '_INBOX_acme' });
    try {
      const started = Date.now();
      expect(await detectEventReader(acme, codec, { timeoutMs: 5000 })).toBe(EventReader.core);
      expect(Date.now() - started).toBeLessThan(2000);
    } finally {
      await acme.close();
      await shipped.stop();
    }
  });

  it('finds none on a server without JetStream (no responders)', async () => {
    const port = await freePort();
    const server = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('nats-server did not start')), 10_000);
        let output = '';
        server.stderr.on('data', (chunk: Buffer) => {
          output += chunk.toString();
          if (output.includes('Server is ready')) (clearTimeout(timer), resolve());
        });
      });
      const nc = await connect({ servers: `nats://127.0.0.1:${port}` });
      try {
        expect(await detectEventReader(nc, codec, { timeoutMs: 5000 })).toBe(EventReader.core);
      } finally {
        await nc.close();
      }
    } finally {
      const exited = new Promise((resolve) => server.once('exit', resolve));
      server.kill('SIGTERM');
      await exited;
    }
  });
});

describe('openCoreWatch', () => {
  const log = createLogBuilder();
  const created = log.created();
  const prompt = log.prompt('turn-1', 'hello');
  const answer = log.answer('turn-1', 'hi');
  const ended = log.ended('turn-1');
  const delta = createEnvelopeFactory({ newId: () => 'delta-1', now: () => 1_700_000_000_000 }).create('assistant.delta', { tenant: 't', sessionId: 's', turnId: 'turn-1', step: 1 }, { text: 'hi' });
  // As the runtime appends it: without the `seq` that reading it back adds.
  const publishLog = ({ seq: _seq, ...event }: { seq?: number }) => nats.nc.publish('agentbus.t.sessions.s.log', codec.encode(event));

  it('resumes from the log through history first, then hands out what came meanwhile without repeating it, in order', async () => {
    const asked: number[] = [];
    // History holds the first events; while its first page is read, the answer, a delta and the end come by
    // subscription, the answer also on history's second page (it was appended before that page was read).
    const readHistory = async (_sessionId: string, afterSeq: number): Promise<SessionHistoryReply> => {
      asked.push(afterSeq);
      if (afterSeq !== 0) return { events: [answer] };
      publishLog(answer);
      nats.nc.publish('agentbus.t.sessions.s.live.assistant.delta', codec.encode(delta));
      publishLog(ended);
      // One connection publishes and subscribes: after the round trip, the three have arrived.
      await nats.nc.flush();
      return { events: [created, prompt], nextAfterSeq: prompt.seq };
    };
    const watch = await openCoreWatch({ nc: nats.nc, subjects, codec, readHistory }, { tenant: 't', sessionId: 's' }, { from: { log: 0 } });
    const seen: StreamedEvent[] = [];
    for await (const streamed of watch) {
      seen.push(streamed);
      if (streamed.event.type === 'turn.ended') break;
    }
    expect(asked).toEqual([0, prompt.seq]);
    expect(seen.map((streamed) => [streamed.stream, streamed.event.type, streamed.streamSeq])).toEqual([
      ['log', 'session.created', created.seq],
      ['log', 'user.message', prompt.seq],
      ['log', 'assistant.message', answer.seq],
      ['live', 'assistant.delta', 0],
      ['log', 'turn.ended', 0],
    ]);
  });

  it('watches only what comes next without `from`, and reports a message that is not an event to onInvalid', async () => {
    const skipped: string[] = [];
    const readHistory = () => Promise.reject(new Error('history is not read without from'));
    const watch = await openCoreWatch({ nc: nats.nc, subjects, codec, readHistory }, { tenant: 't', sessionId: '*' }, { onInvalid: (message) => skipped.push(message.subject) });
    nats.nc.publish('agentbus.t.sessions.s.log', codec.encode({ not: 'an event' }));
    publishLog(ended);
    const iterator = watch[Symbol.asyncIterator]();
    const next = await iterator.next();
    expect(next.value).toMatchObject({ stream: 'log', event: { type: 'turn.ended' } });
    expect(skipped).toEqual(['agentbus.t.sessions.s.log']);
    expect(await watch.drained()).toBe(true);
    await watch.close();
  });

  it('delivers an envelope published twice on the log once (a retried append, which only the stream dedupes)', async () => {
    const readHistory = () => Promise.reject(new Error('history is not read without from'));
    const watch = await openCoreWatch({ nc: nats.nc, subjects, codec, readHistory }, { tenant: 't', sessionId: 's' });
    publishLog(answer);
    publishLog(answer);
    publishLog(ended);
    const seen: string[] = [];
    for await (const streamed of watch) {
      seen.push(`${streamed.event.type}:${streamed.event.id}`);
      if (streamed.event.type === 'turn.ended') break;
    }
    expect(seen).toEqual([`assistant.message:${answer.id}`, `turn.ended:${ended.id}`]);
  });

  it('refuses to resume a whole tenant from the log (history is per session)', async () => {
    const readHistory = () => Promise.resolve({ events: [] });
    await expect(openCoreWatch({ nc: nats.nc, subjects, codec, readHistory }, { tenant: 't', sessionId: '*' }, { from: { log: 0 } })).rejects.toBeInstanceOf(AgentbusError);
  });
});
