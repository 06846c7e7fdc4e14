import { describe, expect, it } from 'vitest';
import { createCallRegistry } from '../../src/tool-sdk/call-registry.ts';

// The calls a worker holds, and the cancels it remembers, each with its owner (tenant and session).

const a = { tenant: 'acme', sessionId: 's-a' };
const b = { tenant: 'globex', sessionId: 's-b' };
const stop = () => new Error('cancelled');

describe('the call registry of a worker', () => {
  it('holds two owners\' calls of one id apart: a cancel naming one aborts only its call, and closing one keeps the other', () => {
    const registry = createCallRegistry();
    const first = registry.open('slow', 'call_0', a)!;
    const second = registry.open('slow', 'call_0', b)!;
    expect(registry.size).toBe(2);
    expect(registry.cancel('slow', 'call_0', stop(), a)).toBe(true);
    expect([first.signal.aborted, second.signal.aborted]).toEqual([true, false]);
    registry.close('slow', 'call_0', first);
    expect(registry.size).toBe(1);
    expect(registry.cancel('slow', 'call_0', stop(), { tenant: 'acme' })).toBe(false);
    expect(second.signal.aborted).toBe(false);
    registry.close('slow', 'call_0', second);
    expect(registry.size).toBe(0);
  });

  it('remembers a cancel for a call it does not hold for that owner only, and once', () => {
    const registry = createCallRegistry();
    expect(registry.cancel('slow', 'call_0', stop(), a)).toBe(false);
    expect(registry.open('slow', 'call_0', b)).toBeDefined();
    expect(registry.open('other_tool', 'call_0', a)).toBeDefined();
    expect(registry.open('slow', 'call_0', a)).toBeUndefined();
    expect(registry.open('slow', 'call_0', a)).toBeDefined();
  });

  it('takes a cancel that names no owner (an older runtime\'s) for every call of the id', () => {
    const registry = createCallRegistry();
    const first = registry.open('slow', 'call_0', a)!;
    const second = registry.open('slow', 'call_0', b)!;
    expect(registry.cancel('slow', 'call_0', stop())).toBe(true);
    expect([first.signal.aborted, second.signal.aborted]).toEqual([true, true]);
    expect(registry.cancel('slow', 'call_9', stop())).toBe(false);
    expect(registry.open('slow', 'call_9', b)).toBeUndefined();
  });

  it('forgets the oldest remembered cancels past its limit', () => {
    const registry = createCallRegistry({ rememberCancelled: 2 });
    for (const id of ['c1', 'c2', 'c3']) registry.cancel('slow', id, stop(), a);
    expect(registry.open('slow', 'c1', a)).toBeDefined();
    expect(registry.open('slow', 'c2', a)).toBeUndefined();
    expect(registry.open('slow', 'c3', a)).toBeUndefined();
  });
});
