import { Match, MsgHdrsImpl } from '@nats-io/nats-core';
import type { Msg } from '@nats-io/nats-core';

/** Header blocks longer than this are decoded per message as nats.js does (they are rarely repeated). */
const MAX_SHARED_BYTES = 256;

/**
 * Decoded headers that one or more received messages share: read-only, since every message whose header block was
 * the same bytes gets this object. `get` and `has` of an exact key are one map lookup (nats.js' list every key
 * into a new array first).
 */
class SharedHeaders extends MsgHdrsImpl {
  static from(decoded: MsgHdrsImpl): SharedHeaders {
    const shared = new SharedHeaders(decoded.code, decoded.description);
    for (const [key, values] of decoded) shared.headers.set(key, values);
    return shared;
  }

  override get(key: string, match: Match = Match.Exact): string {
    if (match !== Match.Exact) return super.get(key, match as 'exact');
    return this.headers.get(key)?.[0] ?? '';
  }

  override has(key: string, match: Match = Match.Exact): boolean {
    if (match !== Match.Exact) return super.has(key, match);
    return this.headers.has(key);
  }

  override set(): void {
    throw new TypeError('the headers of a received message are shared with others like it and read-only');
  }

  override append(): void {
    throw new TypeError('the headers of a received message are shared with others like it and read-only');
  }

  override delete(): void {
    throw new TypeError('the headers of a received message are shared with others like it and read-only');
  }
}

/** The fields of nats.js' `MsgImpl` (not public API) that {@link createHeaderSharing} reads and sets. */
interface RawMessage {
  _msg?: { hdr?: unknown };
  _rdata?: unknown;
  _headers?: unknown;
}

function sameBytes(kept: Uint8Array, data: Uint8Array, length: number): boolean {
  if (kept.length !== length) return false;
  for (let index = 0; index < length; index++) if (kept[index] !== data[index]) return false;
  return true;
}

/**
 * Gives received messages whose header block is byte for byte one seen lately the headers decoded then, instead of
 * each decoding its own when read (nats.js builds a string, splits it and fills a map per message: a runtime reads
 * the `Content-Type` of every stream chunk and reply, almost all of them with the same few bytes). Keeps the last
 * `slots` distinct blocks. The headers handed out are read-only (`set`, `append` and `delete` throw): use it only
 * where received messages are read. A message not shaped as nats.js' (after an upgrade that changed its internals),
 * one without headers or with its headers already read, is left alone.
 *
 * @example
 * const share = createHeaderSharing();
 * nc.subscribe(subject, { callback: (_error, message) => { share(message); handle(message); } });
 */
export function createHeaderSharing(options: { slots?: number } = {}): (message: Msg) => void {
  const slots = options.slots ?? 8;
  const kept: { bytes: Uint8Array; headers: SharedHeaders }[] = [];
  let next = 0;
  return (message) => {
    const raw = message as unknown as RawMessage;
    if (!('_headers' in raw) || raw._headers !== undefined) return;
    const length = raw._msg?.hdr;
    const data = raw._rdata;
    if (typeof length !== 'number' || length <= 0 || length > MAX_SHARED_BYTES || !(data instanceof Uint8Array) || data.length < length) return;
    for (const entry of kept) {
      if (sameBytes(entry.bytes, data, length)) {
        raw._headers = entry.headers;
        return;
      }
    }
    const bytes = data.slice(0, length);
    let headers: SharedHeaders;
    try {
      headers = SharedHeaders.from(MsgHdrsImpl.decode(bytes));
    } catch {
      // A block nats.js cannot read (a malformed key) fails where it is read, as it would without sharing.
      return;
    }
    raw._headers = headers;
    kept[next] = { bytes, headers };
    next = (next + 1) % slots;
  };
}
