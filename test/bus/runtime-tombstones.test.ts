import { describe, expect, it, vi } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { createCodec, streamNames } from '../../src/protocol/index.ts';
import { createRuntimeTombstones } from '../../services/runtime/sessions/tombstones.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// The runtime reads a session's tombstone whenever it opens a session: as `kv.get` would (a put is a tombstone; a
// delete or purge marker, or nothing, is none), but without a nats.js request per read.

const nats = useNatsServer();
const codec = createCodec();

describe('the runtime tombstones', () => {
  it('read a tombstone as kv.get does, through a reply mux rather than a nats.js request', async () => {
    const bucket = streamNames().tombstones;
    const kv = await new Kvm(nats.nc).create(bucket, { history: 1 });
    const tombstones = createRuntimeTombstones({ kv, codec, nodeId: 'n1', now: () => 1, direct: { nc: nats.nc, bucket } });
    const requests = vi.spyOn(nats.nc, 'request');

    expect(await tombstones.isDeleted('acme', 'never')).toBe(false);
    expect(await tombstones.mark('acme', 'gone')).toBe(true);
    expect(await tombstones.isDeleted('acme', 'gone')).toBe(true);
    expect(await tombstones.mark('acme', 'gone')).toBe(false);
    await kv.put('acme.undone', codec.encode({ deletedAt: 1, node: 'n1' }));
    await kv.delete('acme.undone');
    expect(await tombstones.isDeleted('acme', 'undone')).toBe(false);
    await kv.put('acme.purged', codec.encode({ deletedAt: 1, node: 'n1' }));
    await kv.purge('acme.purged');
    expect(await tombstones.isDeleted('acme', 'purged')).toBe(false);
    // Reads only: mark's create and the test's own puts go through kv.
    requests.mockClear();
    await Promise.all([tombstones.isDeleted('acme', 'gone'), tombstones.isDeleted('acme', 'never')]);
    expect(requests).not.toHaveBeenCalled();
  });

  it('read a bucket without direct gets with kv.get', async () => {
    const bucket = 'agentbus_tombstones_nodirect';
    const kv = await new Kvm(nats.nc).create(bucket, { history: 1, allow_direct: false });
    const tombstones = createRuntimeTombstones({ kv, codec, nodeId: 'n1', now: () => 1, direct: { nc: nats.nc, bucket, timeoutMs: 2_000 } });
    expect(await tombstones.mark('acme', 'gone')).toBe(true);
    expect(await tombstones.isDeleted('acme', 'gone')).toBe(true);
    expect(await tombstones.isDeleted('acme', 'never')).toBe(false);
  });
});
