import { describe, expect, it } from 'vitest';
import { SLOW_EMBEDDER_HOLD_MS, SLOW_EMBEDDER_PROBE_MS, createQueryEmbedGate } from '../../services/memory/query-embed-gate.ts';

describe('query embed gate', () => {
  it('lets one search at a time wait while no query embedding came in time yet', () => {
    const gate = createQueryEmbedGate();
    const probe = gate.admit(0, 200);
    expect(probe?.waitMs).toBe(200);
    // A burst meanwhile answers from full text at once.
    for (let at = 1; at < 100; at++) expect(gate.admit(at, 200)).toBeUndefined();
    probe!.done(250, false);
    // Too late: probes come one a second from then.
    gate.admit(300, 200)!.done(500, false);
    expect(gate.admit(600, 200)).toBeUndefined();
    expect(gate.admit(300 + SLOW_EMBEDDER_PROBE_MS, 200)).toBeDefined();
  });

  it('lets every search wait once a query embedding came in time, until one is late', () => {
    const gate = createQueryEmbedGate();
    gate.admit(0, 200)!.done(20, true);
    const waiting = [gate.admit(30, 200), gate.admit(31, 200), gate.admit(32, 200)];
    expect(waiting.every((leave) => leave?.waitMs === 200)).toBe(true);
    waiting[0]!.done(230, false);
    // From then on one probe at a time.
    expect(gate.admit(240, 200)).toBeDefined();
    expect(gate.admit(241, 200)).toBeUndefined();
  });

  it('probes whenever none is in flight once the hold after a late embedding is over', () => {
    const gate = createQueryEmbedGate();
    gate.admit(0, 200)!.done(200, false);
    gate.admit(300, 200)!.done(500, false);
    const later = 500 + SLOW_EMBEDDER_HOLD_MS;
    const probe = gate.admit(later, 200);
    expect(probe).toBeDefined();
    expect(gate.admit(later + 1, 200)).toBeUndefined();
    probe!.done(later + 10, true);
    expect(gate.admit(later + 11, 200)).toBeDefined();
  });

  it('gives no leave when the caller leaves no time to embed', () => {
    expect(createQueryEmbedGate().admit(0, 0)).toBeUndefined();
  });
});
