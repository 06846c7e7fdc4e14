import { describe, expect, it } from 'vitest';
import { needsApproval, nextBatch } from '../../machines/tool-batch.ts';
import { closeTranscript } from '../../machines/transcript.ts';
import { privileged, read, unknownTool, write } from '../helpers/turn-fakes.ts';

const ids = (calls: readonly { id: string }[]) => calls.map((call) => call.id);

describe('nextBatch', () => {
  it('is empty when nothing is pending', () => {
    expect(nextBatch([])).toEqual([]);
  });

  it('takes every pending call when all are read_only', () => {
    expect(ids(nextBatch([read('a'), read('b'), read('c')]))).toEqual(['a', 'b', 'c']);
  });

  it('takes the leading read_only calls and stops at the first side_effecting one', () => {
    expect(ids(nextBatch([read('a'), read('b'), write('c'), read('d')]))).toEqual(['a', 'b']);
  });

  it('takes a side_effecting call alone even when read_only calls follow it', () => {
    expect(ids(nextBatch([write('a'), read('b'), read('c')]))).toEqual(['a']);
  });

  it('takes one side_effecting call at a time when several follow each other', () => {
    expect(ids(nextBatch([write('a'), write('b')]))).toEqual(['a']);
  });

  it('takes a privileged call alone', () => {
    expect(ids(nextBatch([privileged('a'), read('b')]))).toEqual(['a']);
  });

  it('stops a read_only batch before a privileged call', () => {
    expect(ids(nextBatch([read('a'), privileged('b')]))).toEqual(['a']);
  });

  it('lets a call to an unknown tool join a read_only batch, since it fails without effects', () => {
    expect(ids(nextBatch([unknownTool('a'), read('b'), unknownTool('c'), write('d')]))).toEqual(['a', 'b', 'c']);
  });

  it('keeps the order of the calls and does not change the pending list', () => {
    const pending = [read('b'), read('a'), write('c')];
    const before = [...pending];

    expect(ids(nextBatch(pending))).toEqual(['b', 'a']);
    expect(pending).toEqual(before);
  });
});

describe('needsApproval', () => {
  it('is false when nothing is pending', () => {
    expect(needsApproval([], {})).toBe(false);
  });

  it('is true when the next call is privileged and nobody has decided on it', () => {
    expect(needsApproval([privileged('p'), read('r')], {})).toBe(true);
  });

  it('is false once the next privileged call has an approval', () => {
    expect(needsApproval([privileged('p')], { p: { approved: true } })).toBe(false);
  });

  it('is false once the next privileged call has a denial, which executeTools then answers', () => {
    expect(needsApproval([privileged('p')], { p: { approved: false, reason: 'no' } })).toBe(false);
  });

  it('is false while a privileged call waits behind other calls', () => {
    expect(needsApproval([read('r'), privileged('p')], {})).toBe(false);
  });

  it('is false for side_effecting and unknown calls', () => {
    expect(needsApproval([write('w')], {})).toBe(false);
    expect(needsApproval([unknownTool('u')], {})).toBe(false);
  });

  it('looks at the decision of the next call only, not of another one', () => {
    expect(needsApproval([privileged('p2')], { p1: { approved: true } })).toBe(true);
  });
});

describe('closeTranscript', () => {
  it('returns every asked call without a result, in the order asked', () => {
    const asked = [read('a'), write('b'), privileged('c')];

    expect(closeTranscript(asked, new Set(['b']))).toEqual([
      { toolCallId: 'a', name: 'read_a' },
      { toolCallId: 'c', name: 'admin_c' },
    ]);
  });

  it('returns nothing when every asked call has a result', () => {
    expect(closeTranscript([read('a'), read('b')], new Set(['a', 'b']))).toEqual([]);
  });

  it('returns nothing when no call was asked, whatever was answered', () => {
    expect(closeTranscript([], new Set(['stray']))).toEqual([]);
  });
});
