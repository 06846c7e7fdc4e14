import { describe, expect, it } from 'vitest';
import { pacedDispatch } from '../../src/bus/paced-dispatch.ts';

/** A `later` that runs nothing until the test turns the loop. */
function manualLoop() {
  const queued: Array<() => void> = [];
  return {
    later: (run: () => void) => void queued.push(run),
    /** Runs what was scheduled before this turn (what it schedules waits for the next). */
    turn: () => {
      const now = queued.splice(0);
      for (const run of now) run();
      return now.length;
    },
    get pending() {
      return queued.length;
    },
  };
}

describe('pacedDispatch', () => {
  it('handles up to perTurn items at once, the rest one batch per later turn, in order', () => {
    const loop = manualLoop();
    const seen: number[] = [];
    const dispatch = pacedDispatch((item: number) => seen.push(item), { perTurn: 3, later: loop.later });
    for (let i = 0; i < 10; i++) dispatch(i);
    expect(seen).toEqual([0, 1, 2]);
    loop.turn();
    expect(seen).toEqual([0, 1, 2, 3, 4, 5]);
    // Something arriving while items wait goes behind them, not ahead.
    dispatch(10);
    expect(seen).toEqual([0, 1, 2, 3, 4, 5]);
    loop.turn();
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    loop.turn();
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(loop.turn()).toBe(0);
  });

  it('handles items at once again after a turn emptied the queue', () => {
    const loop = manualLoop();
    const seen: number[] = [];
    const dispatch = pacedDispatch((item: number) => seen.push(item), { perTurn: 2, later: loop.later });
    dispatch(1);
    dispatch(2);
    dispatch(3);
    expect(seen).toEqual([1, 2]);
    loop.turn();
    expect(seen).toEqual([1, 2, 3]);
    expect(loop.pending).toBe(0);
    dispatch(4);
    dispatch(5);
    dispatch(6);
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    loop.turn();
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('goes on with the next items in a later turn when a handler throws', () => {
    const loop = manualLoop();
    const seen: number[] = [];
    const dispatch = pacedDispatch(
      (item: number) => {
        if (item === 2) throw new Error('boom');
        seen.push(item);
      },
      { perTurn: 1, later: loop.later },
    );
    dispatch(1);
    dispatch(2);
    dispatch(3);
    expect(() => loop.turn()).toThrow('boom');
    loop.turn();
    expect(seen).toEqual([1, 3]);
  });

  it('yields to timers on a real event loop between batches', async () => {
    const seen: number[] = [];
    const dispatch = pacedDispatch((item: number) => seen.push(item), { perTurn: 10 });
    for (let i = 0; i < 100; i++) dispatch(i);
    expect(seen.length).toBe(10);
    // One turn of the loop: the batch scheduled before this immediate ran, the next waits for the next turn.
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen.length).toBe(20);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => i));
  });

  it('hands out the waiting items asked for at once, in order, and keeps the others in theirs', () => {
    const loop = manualLoop();
    const seen: number[] = [];
    const dispatch = pacedDispatch((item: number) => seen.push(item), { perTurn: 2, later: loop.later });
    for (let i = 0; i < 8; i++) dispatch(i);
    expect(seen).toEqual([0, 1]);
    expect(dispatch.waiting).toBe(6);
    dispatch.handleWaiting((item) => item % 3 === 0);
    expect(seen).toEqual([0, 1, 3, 6]);
    expect(dispatch.waiting).toBe(4);
    // Taken items neither come again nor count against a turn's share.
    loop.turn();
    expect(seen).toEqual([0, 1, 3, 6, 2, 4]);
    loop.turn();
    expect(seen).toEqual([0, 1, 3, 6, 2, 4, 5, 7]);
    expect(dispatch.waiting).toBe(0);
    dispatch.handleWaiting(() => true);
    expect(seen).toHaveLength(8);
  });

  it('handles the next item at once when handleWaiting emptied the queue', () => {
    const loop = manualLoop();
    const seen: number[] = [];
    const dispatch = pacedDispatch((item: number) => seen.push(item), { perTurn: 1, later: loop.later });
    dispatch(1);
    dispatch(2);
    dispatch.handleWaiting(() => true);
    loop.turn();
    dispatch(3);
    expect(seen).toEqual([1, 2, 3]);
  });
});
