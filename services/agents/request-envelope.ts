import { z } from 'zod';
import { AgentbusError, InvalidInputError, PayloadTooLargeError } from '../../src/errors.ts';
import { ContentType, MAX_ATTACHMENT_CHARS, MAX_PROMPT_ATTACHMENTS, MAX_PROMPT_CHARS } from '../../src/protocol/index.ts';
import type { Codec, TraceContext } from '../../src/protocol/index.ts';

/** One attachment of a request envelope (§5.2): a file name and its bytes as standard, padded base64. */
export interface Attachment {
  readonly filename: string;
  readonly content: string;
}

/** An attachment as agentbus passes it to the model: a text file's name and its UTF-8 content. */
export interface TextFile {
  readonly name: string;
  readonly content: string;
}

/** A decoded prompt request (§5): its prompt, its attachments as text files, and the top-level fields this host does not know. */
export interface PromptRequest {
  readonly prompt: string;
  readonly attachments: readonly TextFile[];
  /** Unknown top-level fields, kept to be relayed (§5.6). */
  readonly extra: Readonly<Record<string, unknown>>;
  /** The caller's W3C trace context (the request's `traceparent`/`tracestate` headers), handed on to the prompt. */
  readonly trace?: TraceContext;
}

/** What the `prompt` endpoint declares (§2.1) and enforces. */
export interface PromptLimits {
  readonly maxPayloadBytes: number;
  readonly attachmentsOk: boolean;
}

// §5.2: standard alphabet, padded, no whitespace, no URL-safe characters.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

const attachmentSchema = z.object({
  filename: z.string().min(1, 'an attachment needs a filename'),
  content: z.string().regex(BASE64, 'attachment content must be standard padded base64 without whitespace'),
});

const envelopeSchema = z.looseObject({
  prompt: z.string({ error: 'the envelope needs a "prompt" string' }).refine((value) => value.trim() !== '', 'the prompt is empty'),
  attachments: z.array(attachmentSchema).optional(),
});

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The attachments as the text files an agentbus prompt carries, checked here against the prompt's limits (§5.4: the
 * agent enforces its own): at most {@link MAX_PROMPT_ATTACHMENTS}, each UTF-8 text of at most
 * {@link MAX_ATTACHMENT_CHARS} characters, a name of at most 256, and prompt and files together at most
 * {@link MAX_PROMPT_CHARS}. The protocol carries no MIME type: bytes that are not UTF-8 are refused, not guessed at.
 */
function textFiles(prompt: string, attachments: readonly Attachment[]): TextFile[] {
  if (attachments.length > MAX_PROMPT_ATTACHMENTS) {
    throw new BadPromptRequestError(`${attachments.length} attachments: this agent takes at most ${MAX_PROMPT_ATTACHMENTS}`);
  }
  let total = prompt.length;
  const files = attachments.map(({ filename, content }) => {
    if (filename.length > 256) throw new BadPromptRequestError(`attachment filename ${JSON.stringify(filename.slice(0, 40))}… is longer than 256 characters`);
    let text: string;
    try {
      text = utf8.decode(Buffer.from(content, 'base64'));
    } catch {
      throw new BadPromptRequestError(`attachment ${JSON.stringify(filename)} is not UTF-8 text: this agent reads text files only`);
    }
    if (text.length > MAX_ATTACHMENT_CHARS) {
      throw new BadPromptRequestError(`attachment ${JSON.stringify(filename)} has ${text.length} characters, over ${MAX_ATTACHMENT_CHARS}`);
    }
    total += filename.length + text.length;
    return { name: filename, content: text };
  });
  if (total > MAX_PROMPT_CHARS) throw new BadPromptRequestError(`the prompt and its attachments have ${total} characters, over ${MAX_PROMPT_CHARS}`);
  return files;
}

const LEADING_WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/** A request this host refuses with status 400: what was wrong with it, as a snake_case error and a message. */
export class BadPromptRequestError extends AgentbusError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('bad_request', message, options);
    this.name = 'BadPromptRequestError';
  }
}

/**
 * Decodes a `prompt` request by §5.3: zero bytes is refused; after leading whitespace a `{` means the JSON envelope
 * (`{"prompt", "attachments"?}`, unknown fields kept), anything else is the prompt as plain UTF-8 text. Refuses
 * (with {@link BadPromptRequestError}) a payload over `maxPayloadBytes`, malformed JSON, a missing or empty prompt,
 * bad base64, attachments that are not UTF-8 text or pass the prompt's limits, and any attachment when `attachmentsOk`
 * is false. Attachments come back decoded, as text files. Pure.
 *
 * @example
 * decodePromptRequest(codec, new TextEncoder().encode('hi'), limits); // { prompt: 'hi', attachments: [], extra: {} }
 */
export function decodePromptRequest(codec: Codec, bytes: Uint8Array, limits: PromptLimits): PromptRequest {
  if (bytes.length === 0) throw new BadPromptRequestError('a zero-byte request is not a prompt');
  if (bytes.length > limits.maxPayloadBytes) {
    throw new BadPromptRequestError(`the request is ${bytes.length} bytes, over max_payload (${limits.maxPayloadBytes} bytes)`);
  }
  let start = 0;
  while (start < bytes.length && LEADING_WHITESPACE.has(bytes[start]!)) start += 1;
  try {
    if (bytes[start] !== 0x7b) {
      const prompt = codec.decode(bytes, ContentType.text) as string;
      if (prompt.trim() === '') throw new BadPromptRequestError('the prompt is empty');
      return { prompt, attachments: [], extra: {} };
    }
    const { prompt, attachments = [], ...extra } = codec.decodeAs(envelopeSchema, bytes, ContentType.json);
    if (attachments.length > 0 && !limits.attachmentsOk) {
      throw new BadPromptRequestError('this agent takes no attachments (attachments_ok is "false")');
    }
    return { prompt, attachments: textFiles(prompt, attachments), extra };
  } catch (error) {
    if (error instanceof BadPromptRequestError) throw error;
    if (error instanceof InvalidInputError || error instanceof PayloadTooLargeError) throw new BadPromptRequestError(error.message, { cause: error });
    throw error;
  }
}
