import { describe, expect, it } from 'vitest';
import { rendezvousOwner } from '../../services/runtime/node/rendezvous.ts';

describe('rendezvousOwner', () => {
  const nodes = ['node-a', 'node-b', 'node-c', 'node-d'];
  const keys = Array.from({ length: 4000 }, (_, index) => `tenant.session-${index}`);

  it('picks the same node whatever the order of the list', () => {
    const reversed = [...nodes].reverse();
    for (const key of keys.slice(0, 500)) expect(rendezvousOwner(key, reversed)).toBe(rendezvousOwner(key, nodes));
  });

  it('spreads keys over the nodes about evenly', () => {
    const counts = new Map<string, number>();
    for (const key of keys) counts.set(rendezvousOwner(key, nodes)!, (counts.get(rendezvousOwner(key, nodes)!) ?? 0) + 1);
    expect(counts.size).toBe(nodes.length);
    for (const count of counts.values()) expect(count).toBeGreaterThan(keys.length / nodes.length * 0.8);
  });

  it('moves only the keys of a node that leaves, and moves a fifth of them to a fifth node that joins', () => {
    const without = nodes.filter((node) => node !== 'node-c');
    let moved = 0;
    for (const key of keys) {
      const before = rendezvousOwner(key, nodes);
      const after = rendezvousOwner(key, without);
      if (before !== 'node-c') expect(after).toBe(before);
      const joined = rendezvousOwner(key, [...nodes, 'node-e']);
      if (joined !== before) {
        expect(joined).toBe('node-e');
        moved += 1;
      }
    }
    expect(moved).toBeGreaterThan(keys.length / 5 * 0.8);
    expect(moved).toBeLessThan(keys.length / 5 * 1.2);
  });

  it('has no owner for an empty fleet', () => {
    expect(rendezvousOwner('t.s', [])).toBeUndefined();
  });
});
