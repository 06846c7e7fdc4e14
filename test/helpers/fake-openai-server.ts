import { startFakeSseServer } from './fake-sse-server.ts';
import type { FakeReply, FakeSseServer } from './fake-sse-server.ts';

export type { FakeReply, FakeSseServer, RecordedRequest } from './fake-sse-server.ts';

/** A fake Chat Completions server; `baseURL` is what the OpenAI client takes (`…/v1`). */
export interface FakeOpenAIServer extends FakeSseServer {
  readonly baseURL: string;
}

/**
 * What the Chat Completions API refuses of a `response_format` (structured output), with its 400: a `json_schema`
 * format needs `json_schema.name` (letters, digits, `_`, `-`; at most 64) and an object `schema`, and `strict: true`
 * needs every object closed with all its properties required (checked at the root only, here).
 */
export function checkResponseFormat(body: Record<string, unknown>): FakeReply | undefined {
  const format = body.response_format as Record<string, unknown> | undefined;
  if (format === undefined) return undefined;
  const refuse = (message: string) => errorReply(400, message, 'invalid_request_error', 'invalid_value');
  if (format.type === 'text' || format.type === 'json_object') return undefined;
  if (format.type !== 'json_schema') return refuse(`Invalid value for 'response_format.type': ${JSON.stringify(format.type)}`);
  const spec = format.json_schema as Record<string, unknown> | undefined;
  if (typeof spec?.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(spec.name)) return refuse("Missing or invalid 'response_format.json_schema.name'");
  const schema = spec.schema as Record<string, unknown> | undefined;
  if (typeof schema !== 'object' || schema === null) return refuse("'response_format.json_schema.schema' must be an object");
  if (spec.strict === true) {
    const properties = Object.keys((schema.properties as object | undefined) ?? {});
    const required = (schema.required as string[] | undefined) ?? [];
    if (schema.additionalProperties !== false || !properties.every((name) => required.includes(name))) {
      return refuse("Invalid schema for response_format 'output': In context=(), 'additionalProperties' is required to be supplied and to be false, and 'required' must include every property");
    }
  }
  return undefined;
}

/** Starts a fake OpenAI-compatible server on loopback; it refuses a malformed `response_format` as the API does. */
export async function startFakeOpenAIServer(): Promise<FakeOpenAIServer> {
  const server = await startFakeSseServer({ refuse: checkResponseFormat });
  return Object.assign(server, { baseURL: `${server.url}/v1` });
}

/** One `data:` frame. */
export function dataFrame(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

/** The frame that ends a Chat Completions stream. */
export const DONE_FRAME = 'data: [DONE]\n\n';

/** A `chat.completion.chunk` with one choice. */
export function chunk(delta: Record<string, unknown>, finishReason: string | null = null): unknown {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
}

/** The last chunk when `stream_options.include_usage` is on: no choices, only usage. */
export function usageChunk(promptTokens: number, completionTokens: number): unknown {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
    choices: [],
    usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
  };
}

/** A streamed text answer: role, text pieces, finish, usage, [DONE]. */
export function textStream(pieces: readonly string[], usage: [number, number] = [12, 5]): FakeReply {
  return {
    kind: 'sse',
    frames: [
      dataFrame(chunk({ role: 'assistant', content: '' })),
      ...pieces.map((piece) => dataFrame(chunk({ content: piece }))),
      dataFrame(chunk({}, 'stop')),
      dataFrame(usageChunk(...usage)),
      DONE_FRAME,
    ],
  };
}

/** A non-streaming `chat.completion` body. */
export function completion(content: string | null, options: { toolCalls?: { id: string; name: string; arguments: string }[]; finishReason?: string } = {}): unknown {
  return {
    id: 'chatcmpl-2',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content,
          refusal: null,
          ...(options.toolCalls
            ? { tool_calls: options.toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) }
            : {}),
        },
        logprobs: null,
        finish_reason: options.finishReason ?? (options.toolCalls ? 'tool_calls' : 'stop'),
      },
    ],
    usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27 },
  };
}

/** An OpenAI error body, `{ error: { message, type, param, code } }`. */
export function errorReply(status: number, message: string, type: string, code: string | null = null, headers: Record<string, string> = {}): FakeReply {
  return { kind: 'json', status, body: { error: { message, type, param: null, code } }, headers };
}

/** An answer of `POST /v1/embeddings`: `{ object: 'list', data: [{ object: 'embedding', index, embedding }], model, usage }`. */
export function embeddingsReply(vectors: readonly (readonly number[])[], model = 'text-embedding-3-small', order?: readonly number[]): FakeReply {
  const indexes = order ?? vectors.map((_, index) => index);
  return {
    kind: 'json',
    status: 200,
    body: {
      object: 'list',
      data: indexes.map((index) => ({ object: 'embedding', index, embedding: vectors[index] })),
      model,
      usage: { prompt_tokens: 8 * vectors.length, total_tokens: 8 * vectors.length },
    },
  };
}
