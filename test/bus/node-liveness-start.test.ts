import { afterEach, describe, expect, it } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { createCodec } from '../../src/protocol/index.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import type { NodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { captureLogs } from '../helpers/captured-logs.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// A runtime node that starts after another stopped (each `agentbus ask` in a folder runs one, one after the other)
// finds the stopped node's deleted key as the last entry of the bucket: that is history, not a node dying now.

const nats = useNatsServer();
const codec = createCodec();
const TTL_MS = 400;
const running: NodeLiveness[] = [];
const FOUND_DEAD = 'runtime node found dead; its sessions are free to take';

afterEach(async () => {
  for (const liveness of running.splice(0)) await liveness.stop();
});

async function start(nodeId: string, bucket: string, logger = silentLogger()): Promise<NodeLiveness> {
  const kv = await new Kvm(nats.nc).create(bucket, { history: 1 });
  const liveness = await startNodeLiveness({ kv, codec, nodeId, ttlMs: TTL_MS, logger });
  running.push(liveness);
  return liveness;
}

describe('a runtime node starting after another stopped', () => {
  it('does not report the node that stopped before it started as found dead', async () => {
    const first = await start('before-a', 'NODES_START_1');
    first.markReady(true);
    await first.stop();
    running.splice(running.indexOf(first), 1);
    const dead: string[] = [];
    const { logger, lines } = captureLogs('warn');
    const next = await start('before-b', 'NODES_START_1', logger);
    next.onDead((node) => dead.push(node));
    await new Promise((resolve) => setTimeout(resolve, 2 * TTL_MS));
    expect(dead).toEqual([]);
    expect(lines.filter((line) => line.msg === FOUND_DEAD)).toEqual([]);
  });

  it('still finds a node that stops while it watches dead at once', async () => {
    const peer = await start('while-a', 'NODES_START_2');
    const dead: string[] = [];
    const { logger, lines } = captureLogs('warn');
    const watcher = await start('while-b', 'NODES_START_2', logger);
    watcher.onDead((node) => dead.push(node));
    await peer.stop();
    running.splice(running.indexOf(peer), 1);
    await expect.poll(() => dead, { timeout: 3_000 }).toEqual(['while-a']);
    expect(lines.filter((line) => line.msg === FOUND_DEAD).map((line) => [line.peer, line.why])).toEqual([['while-a', 'it stopped']]);
  });
});
