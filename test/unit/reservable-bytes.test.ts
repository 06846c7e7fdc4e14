import { describe, expect, it } from 'vitest';
import { withReservableBytes } from '../../src/bus/reservable-bytes.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

const MiB = 1024 * 1024;
/** A server that can reserve `room` bytes: refuses more as nats-server does. */
const serverWith = (room: number) => {
  const tried: number[] = [];
  const attempt = async (maxBytes: number) => {
    tried.push(maxBytes);
    if (maxBytes > room) throw new Error('insufficient storage resources available');
  };
  return { tried, attempt };
};

describe('a max_bytes the server can reserve', () => {
  it('halves a default until it fits, and says so at warn', async () => {
    const logs = captureLogs();
    const server = serverWith(1024 * MiB);
    const used = await withReservableBytes({ wanted: 10 * 1024 * MiB, explicit: false, variable: 'AGENTBUS_LOG_MAX_BYTES', what: 'the log', logger: logs.logger }, server.attempt);
    expect(used).toBe(640 * MiB);
    expect(server.tried).toEqual([10_240, 5_120, 2_560, 1_280, 640].map((size) => size * MiB));
    expect(logs.lines).toEqual([expect.objectContaining({ maxBytes: 640 * MiB, msg: expect.stringContaining('set AGENTBUS_LOG_MAX_BYTES') })]);
  });

  it('refuses a figure the operator set, naming the variable', async () => {
    const server = serverWith(1024 * MiB);
    await expect(withReservableBytes({ wanted: 5 * 1024 * MiB, explicit: true, variable: 'AGENTBUS_LOG_MAX_BYTES', what: 'the log', fallback: -1 }, server.attempt)).rejects.toThrow(
      /cannot reserve 5368709120 bytes for the log \(AGENTBUS_LOG_MAX_BYTES\): lower AGENTBUS_LOG_MAX_BYTES/,
    );
    expect(server.tried).toEqual([5 * 1024 * MiB]);
  });

  it('keeps an existing stream at its present limit when nothing down to what it holds fits', async () => {
    const server = serverWith(100 * MiB);
    // The stream holds 300 MiB and had no limit: halving to 160 MiB would delete events, so it stays unlimited.
    const used = await withReservableBytes({ wanted: 10 * 1024 * MiB, explicit: false, variable: 'V', what: 'the log', floor: 300 * MiB, fallback: -1 }, server.attempt);
    expect(used).toBe(-1);
    expect(server.tried.at(-1)).toBe(-1);
    expect(Math.min(...server.tried.filter((size) => size > 0))).toBeGreaterThanOrEqual(300 * MiB);
  });

  it('passes on any other error at once', async () => {
    let calls = 0;
    const failing = async () => {
      calls++;
      throw new Error('stream name already in use');
    };
    await expect(withReservableBytes({ wanted: 10 * 1024 * MiB, explicit: false, variable: 'V', what: 'the log' }, failing)).rejects.toThrow('already in use');
    expect(calls).toBe(1);
  });
});
