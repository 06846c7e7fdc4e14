import type { Codec } from './codec.ts';
import { approveSchema, cancelSchema, inputAnswerSchema, promptSchema, steerSchema } from './schemas.ts';
import { deleteSessionSchema, forkSessionSchema } from './sessions-data.ts';
import type { ForkRequest } from './sessions-data.ts';
import type { Approve, Cancel, InputAnswer, Prompt, Steer } from './schemas.ts';

/** Decodes a prompt body: an object, or a bare JSON string / plain text taken as `{ text }`. */
export function decodePrompt(codec: Codec, bytes: Uint8Array, contentType?: string): Prompt {
  const value = codec.decode(bytes, contentType);
  return codec.validate(promptSchema, typeof value === 'string' ? { text: value } : value, 'prompt');
}

/** Decodes a steer body: an object or a bare string. */
export function decodeSteer(codec: Codec, bytes: Uint8Array, contentType?: string): Steer {
  const value = codec.decode(bytes, contentType);
  return codec.validate(steerSchema, typeof value === 'string' ? { text: value } : value, 'steer');
}

/** Decodes a cancel body; an empty body or a bare string (the reason) is accepted. */
export function decodeCancel(codec: Codec, bytes: Uint8Array, contentType?: string): Cancel {
  const value = codec.decode(bytes, contentType);
  if (value === undefined || value === null || value === '') return {};
  return codec.validate(cancelSchema, typeof value === 'string' ? { reason: value } : value, 'cancel');
}

/** Decodes an approval decision. */
export function decodeApprove(codec: Codec, bytes: Uint8Array, contentType?: string): Approve {
  return codec.validate(approveSchema, codec.decode(bytes, contentType), 'approval');
}

/** Decodes an answer to a tool's question. */
export function decodeInput(codec: Codec, bytes: Uint8Array, contentType?: string): InputAnswer {
  return codec.validate(inputAnswerSchema, codec.decode(bytes, contentType), 'input');
}

/** Decodes a delete body: empty, or `{}`. */
export function decodeDelete(codec: Codec, bytes: Uint8Array, contentType?: string): Record<string, never> {
  if (bytes.byteLength === 0) return {};
  const value = codec.decode(bytes, contentType);
  if (value === undefined || value === null || value === '') return {};
  return codec.validate(deleteSessionSchema, value, 'delete') as Record<string, never>;
}

/** Decodes a fork body: empty, `{}`, or `{ atSeq?, sessionId? }`. */
export function decodeFork(codec: Codec, bytes: Uint8Array, contentType?: string): ForkRequest {
  if (bytes.byteLength === 0) return {};
  const value = codec.decode(bytes, contentType);
  if (value === undefined || value === null || value === '') return {};
  return codec.validate(forkSessionSchema, value, 'fork');
}
