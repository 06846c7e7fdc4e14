import { randomUUID } from 'node:crypto';
import { ProviderError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { ZERO_USAGE, addUsage } from '../../src/protocol/index.ts';
import type { ChatMessage, ChunkBody, ToolCall, ToolSpec, Usage } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from './adapter.ts';
import { FinishReason } from './adapters/shared.ts';
import { findJsonObject, jsonCandidates } from './json-repair.ts';
import { ProviderErrorCode } from './provider-errors.ts';

/** What a model in JSON action mode asked for. */
export type JsonAction =
  | { readonly action: 'tool'; readonly toolName: string; readonly args: Record<string, unknown> }
  | { readonly action: 'finish'; readonly final: string };

/** The outcome of {@link parseJsonAction}: the action, or why there is none and whether any JSON was seen. */
export type JsonActionResult =
  | { readonly ok: true; readonly action: JsonAction }
  | { readonly ok: false; readonly reason: string; readonly foundJson: boolean };

/** The system prompt addition that teaches a model without native tool calling the JSON action format. */
export function jsonActionInstructions(tools: readonly ToolSpec[], outputSchema?: Readonly<Record<string, unknown>>): string {
  const lines = [
    'You answer with exactly one JSON object and nothing else: no prose, no code fence.',
    'To call a tool: {"action": "tool", "tool_name": "<tool name>", "args": {<arguments>}}',
    outputSchema
      ? `To give your final answer to the user: {"action": "finish", "final": <a JSON value matching this JSON Schema: ${JSON.stringify(outputSchema)}>}`
      : 'To give your final answer to the user: {"action": "finish", "final": "<your answer>"}',
    'One action per reply. After a tool call, the next message brings its result.',
  ];
  if (tools.length > 0) {
    lines.push('', 'Tools (args must match the JSON Schema):');
    for (const tool of tools) lines.push(`- ${tool.name}: ${tool.description} Parameters: ${JSON.stringify(tool.parameters)}`);
  } else {
    lines.push('', 'No tools are available now: answer with {"action": "finish", "final": "…"}.');
  }
  return lines.join('\n');
}

/** The message asking again after a reply that could not be used. */
function jsonActionRetryPrompt(reason: string): string {
  return `Your last reply could not be used: ${reason}. Reply again with only the JSON object, {"action": "tool", "tool_name": …, "args": {…}} or {"action": "finish", "final": …}, and nothing else.`;
}

/** The JSON text of a tool call, as the model would have written it. */
function actionText(call: ToolCall): string {
  return JSON.stringify({ action: 'tool', tool_name: call.name, args: call.args ?? {} });
}

/**
 * Rewrites a conversation for a model without tool calling: the instructions join the system
 * messages, past tool calls become the JSON the model would have written, tool results become user
 * messages that say which call they answer.
 */
export function toJsonActionMessages(messages: readonly ChatMessage[], tools: readonly ToolSpec[], outputSchema?: Readonly<Record<string, unknown>>): ChatMessage[] {
  const firstOther = messages.findIndex((message) => message.role !== 'system');
  const split = firstOther < 0 ? messages.length : firstOther;
  const rewritten = messages.map((message): ChatMessage => {
    if (message.role === 'assistant' && message.toolCalls && message.toolCalls.length > 0) {
      const parts = [message.content, ...message.toolCalls.map(actionText)].filter((part) => part !== '');
      return { role: 'assistant', content: parts.join('\n') };
    }
    if (message.role === 'tool') {
      const label = message.isError ? 'failed' : 'returned';
      return { role: 'user', content: `Tool ${message.name} (call ${message.toolCallId}) ${label}:\n${message.content}` };
    }
    return message;
  });
  return [...rewritten.slice(0, split), { role: 'system', content: jsonActionInstructions(tools, outputSchema) }, ...rewritten.slice(split)];
}

function firstString(record: Record<string, unknown>, keys: readonly string[]): string | undefined {
  for (const key of keys) {
    const value = record[key];
    if (typeof value === 'string') return value;
  }
  return undefined;
}

/**
 * Reads the action from a model's reply: the JSON object is taken from the whole text, a code fence
 * or the surrounding prose, mended when slightly broken, and checked: the action must be `tool` or
 * `finish`, a tool must be one of `toolNames`, its args an object.
 *
 * @example
 * parseJsonAction('```json\n{"action":"tool","tool_name":"read_file","args":{"path":"a.txt"}}\n```', ['read_file']);
 * // { ok: true, action: { action: 'tool', toolName: 'read_file', args: { path: 'a.txt' } } }
 */
export function parseJsonAction(text: string, toolNames: readonly string[]): JsonActionResult {
  const object = findJsonObject(text);
  if (!object) {
    const foundJson = jsonCandidates(text).length > 0;
    return { ok: false, reason: foundJson ? 'the JSON object in it is malformed' : 'it holds no JSON object', foundJson };
  }
  const toolName = firstString(object, ['tool_name', 'tool', 'name']);
  const action = firstString(object, ['action']) ?? (toolName !== undefined ? 'tool' : 'final' in object ? 'finish' : undefined);
  if (action === 'finish') {
    const final = object.final;
    if (final === undefined) return { ok: false, reason: 'a finish action needs "final"', foundJson: true };
    return { ok: true, action: { action: 'finish', final: typeof final === 'string' ? final : JSON.stringify(final) } };
  }
  if (action !== 'tool') return { ok: false, reason: `"action" must be "tool" or "finish", got ${JSON.stringify(action ?? null)}`, foundJson: true };
  if (toolName === undefined) return { ok: false, reason: 'a tool action needs "tool_name"', foundJson: true };
  if (!toolNames.includes(toolName)) {
    const known = toolNames.length > 0 ? toolNames.join(', ') : 'none';
    return { ok: false, reason: `there is no tool named ${JSON.stringify(toolName)} (tools: ${known})`, foundJson: true };
  }
  let args = object.args ?? object.arguments ?? {};
  // Some models send the arguments as a JSON string, as in OpenAI's wire format.
  if (typeof args === 'string') args = findJsonObject(args) ?? args;
  if (typeof args !== 'object' || args === null || Array.isArray(args)) {
    return { ok: false, reason: '"args" must be a JSON object', foundJson: true };
  }
  return { ok: true, action: { action: 'tool', toolName, args: args as Record<string, unknown> } };
}

/** Options of {@link withJsonActions}. */
export interface JsonActionOptions {
  /** Which models get JSON action mode (the part after `<provider>:`). Default: all. */
  readonly appliesTo?: (model: string) => boolean;
  /** Tool call ids; default random UUIDs. */
  readonly newId?: () => string;
  readonly logger?: Logger;
}

interface Collected {
  readonly text: string;
  readonly toolCalls: readonly ChunkBody[];
  readonly usage: Usage;
}

/**
 * Wraps an adapter so that models without native tool calling use tools through JSON actions. The
 * request goes out with no tools and rewritten messages; the whole reply is read (so no text streams
 * while it is written), parsed, and turned into a `tool-call` or a `text-delta`. A reply that cannot
 * be used is asked for again once, JSON only. If neither reply holds any JSON at all, the first is
 * taken as the model's plain answer; otherwise the call fails with `invalid_response`.
 */
export function withJsonActions(adapter: ProviderAdapter, options: JsonActionOptions = {}): ProviderAdapter {
  const newId = options.newId ?? (() => `call_${randomUUID()}`);

  async function* run(request: AdapterRequest, signal: AbortSignal): AsyncGenerator<ChunkBody, Collected, undefined> {
    let text = '';
    const toolCalls: ChunkBody[] = [];
    let usage: Usage = ZERO_USAGE;
    for await (const chunk of adapter.generate(request, { signal })) {
      if (chunk.type === 'text-delta') text += chunk.text;
      else if (chunk.type === 'tool-call') toolCalls.push(chunk);
      else if (chunk.type === 'usage') usage = addUsage(usage, chunk.usage);
      else if (chunk.type !== 'done') yield chunk;
    }
    return { text, toolCalls, usage };
  }

  return {
    name: adapter.name,
    async *generate(request, { signal }) {
      if (options.appliesTo && !options.appliesTo(request.model)) {
        yield* adapter.generate(request, { signal });
        return;
      }
      const toolNames = request.tools.map((tool) => tool.name);
      const messages = toJsonActionMessages(request.messages, request.tools, request.outputSchema);
      // The action object is the JSON the model writes: a typed answer travels inside it as `final` (an object is
      // passed on as its JSON text), so the backend is not asked for the output schema's structure itself.
      const { outputSchema: _outputSchema, ...plain } = request;
      const first = yield* run({ ...plain, messages, tools: [] }, signal);
      let usage = first.usage;
      const finish = (action: JsonAction): ChunkBody[] =>
        action.action === 'tool'
          ? [
              { type: 'tool-call', toolCallId: newId(), name: action.toolName, args: action.args },
              { type: 'usage', usage },
              { type: 'done', finishReason: FinishReason.toolCalls },
            ]
          : [
              ...(action.final === '' ? [] : [{ type: 'text-delta' as const, text: action.final }]),
              { type: 'usage', usage },
              { type: 'done', finishReason: FinishReason.stop },
            ];
      // A server that did call tools natively is taken at its word.
      if (first.toolCalls.length > 0) {
        yield* first.toolCalls;
        yield { type: 'usage', usage };
        yield { type: 'done', finishReason: FinishReason.toolCalls };
        return;
      }
      const parsed = parseJsonAction(first.text, toolNames);
      if (parsed.ok) {
        yield* finish(parsed.action);
        return;
      }
      options.logger?.info({ provider: adapter.name, model: request.model, reason: parsed.reason }, 'JSON action unusable; asking once more');
      const retryMessages: ChatMessage[] = [
        ...messages,
        { role: 'assistant', content: first.text },
        { role: 'user', content: jsonActionRetryPrompt(parsed.reason) },
      ];
      const second = yield* run({ ...plain, messages: retryMessages, tools: [] }, signal);
      usage = addUsage(usage, second.usage);
      const reparsed = parseJsonAction(second.text, toolNames);
      if (reparsed.ok) {
        yield* finish(reparsed.action);
        return;
      }
      if (!parsed.foundJson && !reparsed.foundJson) {
        yield* finish({ action: 'finish', final: first.text });
        return;
      }
      throw new ProviderError(ProviderErrorCode.invalidResponse, `${adapter.name}: the model gave no usable JSON action: ${reparsed.reason}`, {
        provider: adapter.name,
        retryable: false,
      });
    },
  };
}
