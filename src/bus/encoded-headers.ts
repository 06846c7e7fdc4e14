import { MsgHdrsImpl } from '@nats-io/nats-core';
import type { Match } from '@nats-io/nats-core';

/**
 * Message headers that keep their encoding until they change. nats.js encodes a message's headers at every
 * publish (a string built and UTF-8 encoded each time); a headers object that a service sends with many messages
 * (the runtime's live events, a provider's stream chunks, a worker's replies) is encoded once here. Changing it
 * (`set`, `append`, `delete`) drops the encoding kept.
 *
 * @example
 * const headers = new EncodedOnceHeaders();
 * headers.set('Content-Type', 'application/msgpack');
 * nc.publish(subject, payload, { headers }); // encoded at the first publish, reused at the next
 */
export class EncodedOnceHeaders extends MsgHdrsImpl {
  private encoded: Uint8Array | undefined;

  override encode(): Uint8Array {
    return (this.encoded ??= super.encode());
  }

  override append(key: string, value: string, match?: Match): void {
    this.encoded = undefined;
    super.append(key, value, match);
  }

  override delete(key: string, match?: Match): void {
    this.encoded = undefined;
    super.delete(key, match);
  }
}

const LINE_BREAK = /[\r\n]/;

/**
 * Headers made of keys already in canonical form and values known to be one line each (ids, numbers, a content
 * type), set without nats.js' per-call key and value checks (a lookup of every key already set, a canonical form
 * of the key, a pattern test of the value): what a log append sends with every event. A value with a line
 * break in it goes through the checked `set`, which refuses it as nats.js does.
 */
export function presetHeaders(entries: readonly (readonly [key: string, value: string])[]): EncodedOnceHeaders {
  const headers = new EncodedOnceHeaders();
  for (const [key, value] of entries) {
    if (LINE_BREAK.test(value) || headers.headers.has(key)) headers.set(key, value);
    else headers.headers.set(key, [value.trim()]);
  }
  return headers;
}
