import type { ToolCall } from '../src/protocol/index.ts';

/** A tool call the model asked for that has no `tool.result` yet. */
export interface OpenToolCall {
  readonly toolCallId: string;
  readonly name: string;
}

/**
 * The tool calls of a turn that still need a result: every call the model asked for (in its
 * `assistant.message`) without a `tool.result`. After a cancel, budget stop or failure each gets a
 * closing result, so the transcript stays whole.
 */
export function closeTranscript(asked: readonly ToolCall[], answered: ReadonlySet<string>): OpenToolCall[] {
  return asked.filter((call) => !answered.has(call.id)).map((call) => ({ toolCallId: call.id, name: call.name }));
}
