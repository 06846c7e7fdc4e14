import { describe, expect, it } from 'vitest';
import { createRecentIds } from '../../src/client/recent-ids.ts';

describe('createRecentIds', () => {
  it('tells a repeat from a new id, and forgets the oldest beyond its limit', () => {
    const recent = createRecentIds(2);
    expect(recent.repeat('a')).toBe(false);
    expect(recent.repeat('a')).toBe(true);
    expect(recent.repeat('b')).toBe(false);
    expect(recent.repeat('c')).toBe(false);
    // 'a' was the oldest of three: forgotten, so it counts as new (and now 'b' is forgotten).
    expect(recent.repeat('a')).toBe(false);
    expect(recent.repeat('c')).toBe(true);
    expect(recent.repeat('b')).toBe(false);
  });

  it('refuses a limit that is not a positive whole number', () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) expect(() => createRecentIds(bad)).toThrow(RangeError);
  });
});
