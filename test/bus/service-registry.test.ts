import { describe, expect, it } from 'vitest';
import { createServiceRegistration, discoverServices } from '../../src/bus/service-registry.ts';
import type { ServiceRegistration } from '../../src/bus/service-registry.ts';
import { ServiceResponseType } from '../../src/bus/service-info.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();

const decoder = new TextDecoder();
const json = (data: Uint8Array): Record<string, unknown> => JSON.parse(decoder.decode(data)) as Record<string, unknown>;

function register(name: string, id: string): ServiceRegistration {
  return createServiceRegistration(
    nats.nc,
    {
      name,
      version: '1.2.3',
      description: 'adds numbers',
      metadata: { owner: 'test' },
      endpoints: [{ name: 'add', subject: `${name}.add`, queueGroup: `${name}-q`, metadata: { tier: 'read_only' } }],
    },
    { newId: () => id },
  );
}

describe('service registration', () => {
  it('answers PING on all services, by name and by name and id', async () => {
    const registration = register('pinged', 'ID1');
    await nats.nc.flush();
    for (const subject of ['$SRV.PING', '$SRV.PING.pinged', '$SRV.PING.pinged.ID1']) {
      const reply = json((await nats.nc.request(subject, new Uint8Array(), { timeout: 1000 })).data);
      expect(reply).toEqual({ type: ServiceResponseType.ping, name: 'pinged', id: 'ID1', version: '1.2.3', metadata: { owner: 'test' } });
    }
    await registration.stop();
  });

  it('answers INFO with its endpoints, queue groups and metadata', async () => {
    const registration = register('informed', 'ID2');
    await nats.nc.flush();
    const reply = json((await nats.nc.request('$SRV.INFO.informed.ID2', new Uint8Array(), { timeout: 1000 })).data);
    expect(reply).toEqual({
      type: ServiceResponseType.info,
      name: 'informed',
      id: 'ID2',
      version: '1.2.3',
      description: 'adds numbers',
      metadata: { owner: 'test' },
      endpoints: [{ name: 'add', subject: 'informed.add', queue_group: 'informed-q', metadata: { tier: 'read_only' } }],
    });
    await registration.stop();
  });

  it('answers STATS with the requests and errors the host recorded', async () => {
    const registration = register('counted', 'ID3');
    registration.record('add', { durationMs: 2 });
    registration.record('add', { durationMs: 4, error: 'boom' });
    registration.record('nope', { durationMs: 1 });
    await nats.nc.flush();
    const reply = json((await nats.nc.request('$SRV.STATS.counted', new Uint8Array(), { timeout: 1000 })).data);
    expect(reply).toMatchObject({
      type: ServiceResponseType.stats,
      name: 'counted',
      id: 'ID3',
      endpoints: [
        {
          name: 'add',
          subject: 'counted.add',
          queue_group: 'counted-q',
          num_requests: 2,
          num_errors: 1,
          last_error: 'boom',
          processing_time: 6_000_000,
          average_processing_time: 3_000_000,
        },
      ],
    });
    expect(Number.isNaN(Date.parse(String(reply['started'])))).toBe(false);
    await registration.stop();
  });

  it('refuses a service name with a dot and a version that is not semver', () => {
    expect(() => createServiceRegistration(nats.nc, { name: 'a.b', version: '1.0.0', endpoints: [] })).toThrow(/service name/);
    expect(() => createServiceRegistration(nats.nc, { name: 'ab', version: 'one', endpoints: [] })).toThrow(/semver/);
  });
});

describe('discoverServices', () => {
  it('returns the info of every live instance of a service', async () => {
    const first = register('found', 'A');
    const second = register('found', 'B');
    await nats.nc.flush();
    const instances = await discoverServices(nats.nc, 'found', { timeoutMs: 1000 });
    expect(instances.map((instance) => instance.id).sort()).toEqual(['A', 'B']);
    expect(instances[0]?.endpoints[0]?.queue_group).toBe('found-q');
    await Promise.all([first.stop(), second.stop()]);
  });

  it('returns an empty list at once when no instance serves the name', async () => {
    const started = Date.now();
    expect(await discoverServices(nats.nc, 'absent', { timeoutMs: 2000 })).toEqual([]);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('no longer finds an instance after it stopped', async () => {
    const registration = register('leaving', 'L');
    await nats.nc.flush();
    expect(await discoverServices(nats.nc, 'leaving', { timeoutMs: 1000 })).toHaveLength(1);
    await registration.stop();
    expect(await discoverServices(nats.nc, 'leaving', { timeoutMs: 1000 })).toEqual([]);
  });

  it('waits the whole time with the timer strategy and finds every service without a name', async () => {
    const registration = register('timed', 'T');
    await nats.nc.flush();
    const started = Date.now();
    const instances = await discoverServices(nats.nc, undefined, { timeoutMs: 300, strategy: 'timer' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(instances.some((instance) => instance.name === 'timed')).toBe(true);
    await registration.stop();
  });

  it('rejects with the abort reason when already aborted', async () => {
    await expect(discoverServices(nats.nc, 'found', { timeoutMs: 1000, signal: AbortSignal.abort(new Error('gone')) })).rejects.toThrow('gone');
  });

  it('rejects with the abort reason when aborted while waiting', async () => {
    const registration = register('slow', 'S');
    await nats.nc.flush();
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stop waiting')), 50);
    await expect(
      discoverServices(nats.nc, 'slow', { timeoutMs: 2000, strategy: 'timer', signal: controller.signal }),
    ).rejects.toThrow('stop waiting');
    await registration.stop();
  });
});
