import { startFakeSseServer } from './fake-sse-server.ts';
import type { FakeReply, FakeSseServer } from './fake-sse-server.ts';

export type { FakeReply, FakeSseServer, RecordedRequest } from './fake-sse-server.ts';

/**
 * Starts a fake Anthropic Messages server on loopback; the client's `baseURL` is its `url`. It refuses, with the
 * real API's 400, what the real API refuses and a test might otherwise let through ({@link refusedAsTheApiWould}).
 */
export function startFakeAnthropicServer(): Promise<FakeSseServer> {
  return startFakeSseServer({ refuse: refusedAsTheApiWould });
}

/**
 * The real Messages API's answer to a body it refuses, else undefined: `tool_use` or `tool_result` blocks in the
 * messages with no `tools` defined (400: "Requests which include `tool_use` or `tool_result` blocks must define
 * tools."), a `tool_choice` with no `tools`, and a malformed `output_config` ({@link checkOutputConfig}).
 */
export function refusedAsTheApiWould(body: Record<string, unknown>): FakeReply | undefined {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : [];
  const toolBlocks = messages.some(
    (entry) => Array.isArray(entry.content) && (entry.content as Array<{ type?: unknown }>).some((block) => block.type === 'tool_use' || block.type === 'tool_result'),
  );
  if (toolBlocks && tools.length === 0) {
    return errorReply(400, 'invalid_request_error', 'Requests which include `tool_use` or `tool_result` blocks must define tools.');
  }
  if (body.tool_choice !== undefined && tools.length === 0) return errorReply(400, 'invalid_request_error', 'tool_choice may only be specified while providing tools.');
  return checkOutputConfig(body);
}

/**
 * What the Messages API refuses of `output_config.format` (structured outputs), with its 400: the format must be
 * `{ type: "json_schema", schema: { type: "object", … } }`.
 */
export function checkOutputConfig(body: Record<string, unknown>): FakeReply | undefined {
  const config = body.output_config as Record<string, unknown> | undefined;
  if (config?.format === undefined || config.format === null) return undefined;
  const format = config.format as Record<string, unknown>;
  if (format.type !== 'json_schema') return errorReply(400, 'invalid_request_error', `output_config.format.type: Input should be 'json_schema'`);
  const schema = format.schema as Record<string, unknown> | undefined;
  if (typeof schema !== 'object' || schema === null || schema.type !== 'object') return errorReply(400, 'invalid_request_error', 'output_config.format.schema: the root must be an object schema');
  return undefined;
}

/** One `event:` + `data:` frame, as the Messages API streams them. */
export function eventFrame(data: { type: string } & Record<string, unknown>): string {
  return `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;
}

export function messageStart(inputTokens: number): string {
  return eventFrame({
    type: 'message_start',
    message: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-sonnet-5',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    },
  });
}

export function textBlock(index: number, pieces: readonly string[]): string[] {
  return [
    eventFrame({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } }),
    ...pieces.map((text) => eventFrame({ type: 'content_block_delta', index, delta: { type: 'text_delta', text } })),
    eventFrame({ type: 'content_block_stop', index }),
  ];
}

export function toolUseBlock(index: number, id: string, name: string, jsonPieces: readonly string[]): string[] {
  return [
    eventFrame({ type: 'content_block_start', index, content_block: { type: 'tool_use', id, name, input: {} } }),
    ...jsonPieces.map((partial_json) => eventFrame({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } })),
    eventFrame({ type: 'content_block_stop', index }),
  ];
}

export function messageEnd(stopReason: string, outputTokens: number): string[] {
  return [
    eventFrame({ type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: outputTokens } }),
    eventFrame({ type: 'message_stop' }),
  ];
}

export const PING = eventFrame({ type: 'ping' });

/** A streamed text answer. */
export function textStream(pieces: readonly string[], usage: [number, number] = [10, 4]): FakeReply {
  return { kind: 'sse', frames: [messageStart(usage[0]), PING, ...textBlock(0, pieces), ...messageEnd('end_turn', usage[1])] };
}

/** A non-streaming Message body. */
export function message(content: readonly Record<string, unknown>[], stopReason = 'end_turn'): unknown {
  return {
    id: 'msg_2',
    type: 'message',
    role: 'assistant',
    model: 'claude-sonnet-5',
    content,
    stop_reason: stopReason,
    stop_sequence: null,
    usage: { input_tokens: 30, output_tokens: 9, cache_creation_input_tokens: null, cache_read_input_tokens: null },
  };
}

/** An Anthropic error body, `{ type: 'error', error: { type, message } }`. */
export function errorReply(status: number, type: string, text: string, headers: Record<string, string> = {}): FakeReply {
  return { kind: 'json', status, body: { type: 'error', error: { type, message: text }, request_id: 'req_1' }, headers };
}

/** An `error` event inside a stream. */
export function errorFrame(type: string, text: string): string {
  return eventFrame({ type: 'error', error: { type, message: text } });
}
