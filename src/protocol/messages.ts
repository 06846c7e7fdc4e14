/** Provider-neutral chat messages, as the runtime sends them to a provider service. */

/** A tool call asked for by the model. `args` is the parsed JSON object. */
export interface ToolCall {
  readonly id: string;
  readonly name: string;
  readonly args: unknown;
}

/**
 * The key under which a provider passes on tool-call arguments that were not JSON (`{ _invalidJson: text,
 * _parseError }`): the model's raw text is kept so the runtime can show the model what it sent.
 */
export const INVALID_ARGUMENTS_KEY = '_invalidJson';

/** True when a tool call's arguments are the provider's stand-in for text that was not JSON. */
export function hasInvalidArguments(args: unknown): boolean {
  return typeof args === 'object' && args !== null && INVALID_ARGUMENTS_KEY in args;
}

/** A tool offered to the model. `parameters` is a JSON Schema object. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters: Record<string, unknown>;
}

/** Token counts of one provider call. */
export interface Usage {
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/** One message of the conversation sent to a provider. */
export type ChatMessage =
  | { readonly role: 'system'; readonly content: string }
  | { readonly role: 'user'; readonly content: string }
  | { readonly role: 'assistant'; readonly content: string; readonly toolCalls?: readonly ToolCall[] }
  | {
      readonly role: 'tool';
      readonly toolCallId: string;
      readonly name: string;
      readonly content: string;
      readonly isError?: boolean;
    };

/** Zero usage. */
export const ZERO_USAGE: Usage = Object.freeze({ inputTokens: 0, outputTokens: 0 });

/** Adds two usages. */
export function addUsage(a: Usage, b: Usage): Usage {
  return { inputTokens: a.inputTokens + b.inputTokens, outputTokens: a.outputTokens + b.outputTokens };
}
