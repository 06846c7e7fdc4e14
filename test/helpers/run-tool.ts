import { pino } from 'pino';
import type { ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import { executeToolCall } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';

const silent = pino({ level: 'silent' });
let sequence = 0;

/** A tool call request for `name` with `args`, due in `deadlineMs`. */
export function toolCallRequest(name: string, args: unknown, deadlineMs = 10_000): ToolCallRequest {
  sequence += 1;
  return { v: 1, callId: `c${sequence}`, effectId: `e${sequence}`, name, args, tenant: 'default', sessionId: 's', turnId: 't', deadline: Date.now() + deadlineMs };
}

/** Runs one call of `tool` in-process as a worker would (arguments checked, errors as codes). */
export function runTool(tool: AnyToolDefinition, args: unknown, options: { signal?: AbortSignal } = {}): Promise<ToolCallReply> {
  return executeToolCall({ tool, request: toolCallRequest(tool.name, args), logger: () => silent, signal: options.signal ?? new AbortController().signal, now: Date.now });
}

/** The output of a successful reply; throws with the error otherwise. */
export function outputOf<T = unknown>(reply: ToolCallReply): T {
  if (!reply.ok) throw new Error(`expected success, got ${reply.error.code}: ${reply.error.message}`);
  return reply.output as T;
}
