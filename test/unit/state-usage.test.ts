import { describe, expect, it } from 'vitest';
import { createStateUsageBook } from '../../services/memory/state-usage.ts';
import { createMemoryRateLimit } from '../../services/memory/rate-limit.ts';

describe('the book of state bytes per tenant', () => {
  it('counts each key at its latest revision: an overwrite replaces, a late or repeated note changes nothing', () => {
    const book = createStateUsageBook();
    book.stored('acme.a', 100, 1);
    book.stored('acme.b.c', 50, 2);
    book.stored('globex.a', 7, 3);
    book.stored('acme.a', 30, 4);
    book.stored('acme.a', 100, 1); // the first save, heard again late
    book.stored('acme.a', 30, 4);
    expect(book.bytes('acme')).toBe(80);
    expect(book.sizeOf('acme.a')).toBe(30);
    expect(book.bytes('globex')).toBe(7);
  });

  it('frees a deleted key at once, and a put older than the delete cannot bring it back', () => {
    const book = createStateUsageBook();
    book.stored('acme.a', 100, 5);
    book.deleted('acme.a'); // this instance's delete, its revision not known yet
    expect(book.bytes('acme')).toBe(0);
    book.stored('acme.a', 100, 5); // the watch hears the put it had already been told of
    expect(book.bytes('acme')).toBe(0);
    book.deleted('acme.a', 6); // the watch hears the delete marker
    book.stored('acme.a', 40, 7); // and a later save
    expect(book.bytes('acme')).toBe(40);
    book.deleted('acme.a', 6); // a delete older than that save changes nothing
    expect(book.bytes('acme')).toBe(40);
  });
});

describe('memory request rate per tenant', () => {
  it('lets a tenant send its burst, then refuses it with a retryable rate_limited, and no other tenant', () => {
    let now = 0;
    const limit = createMemoryRateLimit({ perSecond: 2, burst: 3 }, () => now);
    for (let index = 0; index < 3; index++) limit.admit('acme');
    expect(() => limit.admit('acme')).toThrow(expect.objectContaining({ code: 'rate_limited', retryable: true, message: expect.stringContaining('AGENTBUS_MEMORY_TENANT_RATE') }));
    limit.admit('globex');
    now += 500;
    limit.admit('acme');
  });

  it('has no limit at 0 per second', () => {
    const limit = createMemoryRateLimit({ perSecond: 0, burst: 0 }, () => 0);
    for (let index = 0; index < 10_000; index++) limit.admit('acme');
  });
});
