import { z } from 'zod';
import { ContentType } from '../protocol/index.ts';
import type { Codec } from '../protocol/index.ts';

/** JetStream's answer to a publish (its documented PubAck); a refusal carries `error` (and `seq` 0). */
const pubAckSchema = z.object({
  stream: z.string().optional(),
  seq: z.number().int().nonnegative().optional(),
  duplicate: z.boolean().optional(),
  error: z.object({ code: z.number(), err_code: z.number().optional(), description: z.string() }).optional(),
});

export type PubAck = z.infer<typeof pubAckSchema>;

const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const ZERO = 0x30;

/**
 * Reads the PubAcks of one stream. The common one, exactly `{"stream":"<stream>","seq":<n>}` as nats-server writes
 * it (2.9 with a space after the comma, `{"stream":"<stream>", "seq":<n>}`), is read from its bytes (a compare and a
 * few digits: every log append gets one); one with more in it (`duplicate`, a domain) is parsed and checked by hand,
 * and anything else (a refusal, a malformed answer) through the schema.
 *
 * @example
 * const readAck = pubAckReader(codec, 'AGENTBUS_LOG');
 * const { seq } = readAck(reply.data);
 */
export function pubAckReader(codec: Codec, stream: string): (data: Uint8Array) => PubAck {
  const encoder = new TextEncoder();
  const head = encoder.encode(`{"stream":${JSON.stringify(stream)},`);
  return (data) => {
    const seq = commonAckSeq(data, head);
    return seq === undefined ? decodePubAck(codec, data) : { stream, seq };
  };
}

/** `"seq":` */
const SEQ_KEY = new TextEncoder().encode('"seq":');
const SPACE = 0x20;

/** The sequence of an ack that is exactly `head`, one space or none, `"seq":`, digits and `}`; or undefined. */
function commonAckSeq(data: Uint8Array, head: Uint8Array): number | undefined {
  const end = data.length - 1;
  if (end <= head.length || data[end] !== CLOSE_BRACE || data[0] !== OPEN_BRACE) return undefined;
  for (let i = 1; i < head.length; i++) if (data[i] !== head[i]) return undefined;
  let at = data[head.length] === SPACE ? head.length + 1 : head.length;
  for (let i = 0; i < SEQ_KEY.length; i++, at++) if (data[at] !== SEQ_KEY[i]) return undefined;
  // 1 to 15 digits: always a safe integer.
  if (at >= end || end - at > 15) return undefined;
  let seq = 0;
  for (let i = at; i < end; i++) {
    const digit = data[i]! - ZERO;
    if (digit < 0 || digit > 9) return undefined;
    seq = seq * 10 + digit;
  }
  return seq;
}

/** Any other PubAck: the common fields checked by hand, anything else (a refusal) through the schema. */
function decodePubAck(codec: Codec, data: Uint8Array): PubAck {
  const value = codec.decode(data, ContentType.json);
  if (typeof value === 'object' && value !== null && !('error' in value)) {
    const { stream, seq, duplicate } = value as Record<string, unknown>;
    if (typeof stream === 'string' && Number.isSafeInteger(seq) && (seq as number) >= 0 && (duplicate === undefined || typeof duplicate === 'boolean')) {
      return duplicate === undefined ? { stream, seq: seq as number } : { stream, seq: seq as number, duplicate };
    }
  }
  return codec.validate(pubAckSchema, value);
}
