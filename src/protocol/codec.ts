import { Packr } from 'msgpackr';
import type { z } from 'zod';
import { InvalidInputError, PayloadTooLargeError } from '../errors.ts';

/** The content types a message may declare in its `Content-Type` header. */
export const ContentType = {
  msgpack: 'application/msgpack',
  json: 'application/json',
  text: 'text/plain',
} as const;
export type ContentType = (typeof ContentType)[keyof typeof ContentType];

/** What {@link contentTypeOf} reads of a message: nats.js' `Msg` fits. */
export interface MessageWithHeaders {
  readonly headers?: { get(key: string): string } | undefined;
}

/**
 * The `Content-Type` a message declares, or undefined when it declares none (nats.js answers an absent header
 * with ''): what {@link Codec.decode} takes.
 *
 * @example
 * const value = codec.decode(message.data, contentTypeOf(message));
 */
export function contentTypeOf(message: MessageWithHeaders): string | undefined {
  return message.headers?.get('Content-Type') || undefined;
}

/** Default size limit of an ingress payload. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** The one place where bytes become objects and objects become bytes. */
export interface Codec {
  /** msgpack bytes of a value. */
  encode(value: unknown): Uint8Array;
  /**
   * Decodes bytes. With a content type, that format; without one the body is sniffed: a msgpack map,
   * array or string header means msgpack, otherwise UTF-8 JSON, otherwise plain text.
   */
  decode(bytes: Uint8Array, contentType?: string): unknown;
  /** Decodes and validates with a zod schema; throws {@link InvalidInputError} with the first issue. */
  decodeAs<S extends z.ZodType>(schema: S, bytes: Uint8Array, contentType?: string): z.infer<S>;
  /** Validates an already decoded value. */
  validate<S extends z.ZodType>(schema: S, value: unknown, what?: string): z.infer<S>;
}

function isMsgpackHeader(byte: number): boolean {
  return (
    (byte >= 0x80 && byte <= 0xbf) || // fixmap, fixarray, fixstr
    (byte >= 0xd9 && byte <= 0xdf) || // str8/16/32, array16/32, map16/32
    byte === 0xc0 || byte === 0xc2 || byte === 0xc3 // nil, false, true
  );
}

/**
 * Creates the codec. `maxPayload` bounds every decoded payload.
 *
 * @example
 * const codec = createCodec();
 * const prompt = codec.decodeAs(promptSchema, message.data, contentTypeOf(message));
 */
export function createCodec(options: { maxPayload?: number } = {}): Codec {
  const maxPayload = options.maxPayload ?? DEFAULT_MAX_PAYLOAD;
  // useRecords: false keeps the bytes plain msgpack, readable from any language.
  const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false, int64AsType: 'number' });
  const textDecoder = new TextDecoder('utf-8', { fatal: true });

  function decodeMsgpack(bytes: Uint8Array): unknown {
    try {
      return packr.unpack(bytes);
    } catch (cause) {
      throw new InvalidInputError(`malformed msgpack: ${(cause as Error).message}`, { cause });
    }
  }

  function decodeText(bytes: Uint8Array): string {
    try {
      return textDecoder.decode(bytes);
    } catch (cause) {
      throw new InvalidInputError('body is neither msgpack nor UTF-8 text', { cause });
    }
  }

  function decodeJson(text: string): unknown {
    try {
      return JSON.parse(text);
    } catch (cause) {
      throw new InvalidInputError(`malformed JSON: ${(cause as Error).message}`, { cause });
    }
  }

  function decode(bytes: Uint8Array, contentType?: string): unknown {
    if (bytes.byteLength > maxPayload) throw new PayloadTooLargeError(bytes.byteLength, maxPayload);
    // What almost every message says, as this codec's peers write it: no parameters to split off.
    if (contentType === ContentType.msgpack) return decodeMsgpack(bytes);
    const type = contentType?.split(';')[0]?.trim().toLowerCase();
    if (type === ContentType.msgpack) return decodeMsgpack(bytes);
    if (type === ContentType.json) return decodeJson(decodeText(bytes));
    if (type === ContentType.text) return decodeText(bytes);
    if (type !== undefined && type !== '') throw new InvalidInputError(`unsupported Content-Type ${JSON.stringify(contentType)}`);
    if (bytes.byteLength === 0) return undefined;
    if (isMsgpackHeader(bytes[0]!)) return decodeMsgpack(bytes);
    const text = decodeText(bytes);
    const trimmed = text.trimStart();
    if (trimmed.startsWith('{') || trimmed.startsWith('[') || trimmed.startsWith('"')) return decodeJson(text);
    return text;
  }

  function validate<S extends z.ZodType>(schema: S, value: unknown, what = 'message'): z.infer<S> {
    const result = schema.safeParse(value);
    if (result.success) return result.data;
    const issue = result.error.issues[0];
    const path = issue && issue.path.length > 0 ? `${issue.path.join('.')}: ` : '';
    throw new InvalidInputError(`invalid ${what}: ${path}${issue?.message ?? 'does not match the schema'}`);
  }

  return {
    encode: (value) => packr.pack(value),
    decode,
    decodeAs: (schema, bytes, contentType) => validate(schema, decode(bytes, contentType)),
    validate,
  };
}
