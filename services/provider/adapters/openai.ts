import type OpenAI from 'openai';
import type {
  ChatCompletion,
  ChatCompletionCreateParamsBase,
  ChatCompletionFunctionTool,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import type { ResponseFormatJSONSchema } from 'openai/resources/shared';
import type { Logger } from '../../../src/logging.ts';
import type { ChatMessage, ChunkBody, ToolSpec, Usage } from '../../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../adapter.ts';
import { ProviderErrorCode, signalReason, toProviderError } from '../provider-errors.ts';
import type { SdkErrorClasses } from '../provider-errors.ts';
import { createScrubber } from '../../../src/scrub/index.ts';
import { providerSecrets } from '../provider-secrets.ts';
import type { Scrubber } from '../../../src/scrub/index.ts';
import { ProviderError } from '../../../src/errors.ts';
import { DEFAULT_TIMEOUT_MS, FinishReason, bridgeSdkLogger, createStreamingAdapter, parseToolArguments } from './shared.ts';

/** The default base URL of the OpenAI API. */
export const OPENAI_BASE_URL = 'https://api.openai.com/v1';

/** Options of {@link createOpenAIAdapter}. */
export interface OpenAIAdapterOptions {
  /** The model prefix served: `openai`, `ollama`, or any OpenAI-compatible server's name. */
  readonly name?: string;
  /** Required for api.openai.com; local servers accept any value. */
  readonly apiKey?: string;
  /** Default {@link OPENAI_BASE_URL}; never read from the environment here. */
  readonly baseURL?: string;
  readonly defaultHeaders?: Readonly<Record<string, string>>;
  readonly logger?: Logger;
  /** Which request field carries `maxTokens`: `max_completion_tokens` for OpenAI (the default when `name` is `openai`), `max_tokens` for compatible servers. */
  readonly maxTokensField?: 'max_tokens' | 'max_completion_tokens';
  /** Ask for the usage chunk (`stream_options.include_usage`). Default true. */
  readonly streamUsage?: boolean;
  /** Fall back to one non-streaming call when the stream fails before its first token. Default true. */
  readonly streamFallback?: boolean;
  /** Send a request's `outputSchema` as `response_format` (`json_schema`). Default true; false for servers that refuse it. */
  readonly structuredOutput?: boolean;
  /** Per-request timeout of the HTTP client. Default 10 minutes. */
  readonly timeoutMs?: number;
  readonly now?: () => number;
}

/**
 * The SDK's error classes, for `toProviderError`. The SDK is imported on first use, not with the service: a provider
 * service that serves no OpenAI-compatible model (the offline scripted one) never pays the third of a second of CPU
 * its loading takes (a static import would be hoisted to the top of the compiled service).
 */
export async function openAISdkErrors(): Promise<SdkErrorClasses> {
  const { APIError, APIUserAbortError, APIConnectionError, APIConnectionTimeoutError } = await import('openai');
  return { APIError, APIUserAbortError, APIConnectionError, APIConnectionTimeoutError };
}

/**
 * The official SDK's client as every OpenAI-compatible caller here makes it: no retries of its own (the
 * caller retries), no organization or project from the environment, the SDK's log lines through `logger`
 * with `scrubber`'s fast pass applied. The SDK is imported by the first call (see {@link openAISdkErrors}).
 */
export async function createOpenAIClient(
  options: Pick<OpenAIAdapterOptions, 'apiKey' | 'baseURL' | 'defaultHeaders' | 'logger' | 'timeoutMs'>,
  scrubber: Pick<Scrubber, 'scrubSync'>,
): Promise<OpenAI> {
  const { default: OpenAI } = await import('openai');
  return new OpenAI({
    // Local servers ignore the key, but the SDK refuses to start without one.
    apiKey: options.apiKey ?? 'not-needed',
    baseURL: options.baseURL ?? OPENAI_BASE_URL,
    organization: null,
    project: null,
    maxRetries: 0,
    timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    logger: bridgeSdkLogger(options.logger, scrubber),
    logLevel: 'warn',
    ...(options.defaultHeaders ? { defaultHeaders: { ...options.defaultHeaders } } : {}),
  });
}

/**
 * Creates an adapter for the Chat Completions API: OpenAI itself, Ollama (`/v1`) and any compatible
 * server. The SDK's own retries are off; wrap the adapter with `withResilience`.
 *
 * Tool-call arguments stream in pieces keyed by `index`; they are joined and parsed when the stream
 * ends, and text that is not JSON is passed on as `{ _invalidJson, _parseError }`.
 *
 * @example
 * const adapter = createOpenAIAdapter({ apiKey: process.env.OPENAI_API_KEY, logger });
 * for await (const chunk of adapter.generate({ requestId, model: 'gpt-5.4-mini', messages, tools: [] }, { signal })) { … }
 */
export function createOpenAIAdapter(options: OpenAIAdapterOptions = {}): ProviderAdapter {
  const name = options.name ?? 'openai';
  const now = options.now ?? Date.now;
  const scrubber = createScrubber({ secrets: providerSecrets(options.apiKey, options.defaultHeaders), ...(options.logger ? { logger: options.logger } : {}) });
  const maxTokensField = options.maxTokensField ?? (name === 'openai' ? 'max_completion_tokens' : 'max_tokens');
  // Made by the first call, which imports the SDK.
  let client: Promise<OpenAI> | undefined;
  const sdkClient = () => (client ??= createOpenAIClient(options, scrubber));

  const mapError = async (error: unknown, signal: AbortSignal, { beforeResponse = false } = {}) =>
    toProviderError(error, { provider: name, scrubber, signal, classes: await openAISdkErrors(), now: now(), beforeResponse });

  function params(request: AdapterRequest): ChatCompletionCreateParamsBase {
    const body: ChatCompletionCreateParamsBase = { model: request.model, messages: toOpenAIMessages(request.messages) };
    if (request.tools.length > 0) body.tools = request.tools.map(toOpenAITool);
    if (request.maxTokens !== undefined) body[maxTokensField] = request.maxTokens;
    if (request.temperature !== undefined) body.temperature = request.temperature;
    if (request.outputSchema && options.structuredOutput !== false) body.response_format = toResponseFormat(request.outputSchema);
    return body;
  }

  async function* stream(request: AdapterRequest, signal: AbortSignal): AsyncGenerator<ChunkBody, void, undefined> {
    const body = { ...params(request), stream: true as const };
    if (options.streamUsage !== false) body.stream_options = { include_usage: true };
    const response = await sdkClient().then((sdk) => sdk.chat.completions.create(body, { signal })).catch(async (error: unknown) => {
      throw await mapError(error, signal, { beforeResponse: true });
    });
    const calls = new Map<number, { id: string; name: string; arguments: string }>();
    let usage: Usage | undefined;
    let finishReason: string | undefined;
    try {
      for await (const chunk of response) {
        if (chunk.usage) usage = { inputTokens: chunk.usage.prompt_tokens, outputTokens: chunk.usage.completion_tokens };
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        const text = choice.delta?.content;
        if (typeof text === 'string' && text !== '') yield { type: 'text-delta', text };
        for (const delta of choice.delta?.tool_calls ?? []) {
          const call = calls.get(delta.index) ?? { id: '', name: '', arguments: '' };
          if (delta.id) call.id = delta.id;
          if (delta.function?.name && call.name === '') call.name = delta.function.name;
          if (delta.function?.arguments) call.arguments += delta.function.arguments;
          calls.set(delta.index, call);
        }
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    } catch (error) {
      throw await mapError(error, signal);
    }
    // The SDK ends the iteration quietly when its request is aborted.
    if (signal.aborted) throw signalReason(signal);
    if (finishReason === undefined) {
      throw new ProviderError(ProviderErrorCode.streamInterrupted, `${name}: stream ended before a finish reason`, { provider: name, retryable: true });
    }
    const ordered = [...calls.entries()].sort(([a], [b]) => a - b).map(([index, call]) => ({ ...call, id: call.id || `${request.requestId}-call-${index}` }));
    for (const call of ordered) yield { type: 'tool-call', toolCallId: call.id, name: call.name, args: parseToolArguments(call.arguments) };
    if (usage) yield { type: 'usage', usage };
    yield { type: 'done', finishReason: normalizeFinishReason(finishReason, ordered.length > 0) };
  }

  async function complete(request: AdapterRequest, signal: AbortSignal): Promise<ChunkBody[]> {
    let completion: ChatCompletion;
    try {
      completion = await (await sdkClient()).chat.completions.create({ ...params(request), stream: false }, { signal });
    } catch (error) {
      throw await mapError(error, signal);
    }
    const choice = completion.choices?.[0];
    if (!choice) throw new ProviderError(ProviderErrorCode.invalidResponse, `${name}: completion without choices`, { provider: name });
    const chunks: ChunkBody[] = [];
    if (choice.message.content) chunks.push({ type: 'text-delta', text: choice.message.content });
    let toolCalls = 0;
    for (const call of choice.message.tool_calls ?? []) {
      if (call.type !== 'function') continue;
      toolCalls += 1;
      chunks.push({ type: 'tool-call', toolCallId: call.id, name: call.function.name, args: parseToolArguments(call.function.arguments) });
    }
    if (completion.usage) {
      chunks.push({ type: 'usage', usage: { inputTokens: completion.usage.prompt_tokens, outputTokens: completion.usage.completion_tokens } });
    }
    chunks.push({ type: 'done', finishReason: normalizeFinishReason(choice.finish_reason, toolCalls > 0) });
    return chunks;
  }

  return createStreamingAdapter({
    name,
    logger: options.logger,
    streamFallback: options.streamFallback,
    callMessage: 'chat completion',
    stream,
    complete,
  });
}

function normalizeFinishReason(reason: string | null | undefined, hasToolCalls: boolean): string {
  // Some compatible servers say `stop` even when the answer is a tool call.
  if (hasToolCalls) return FinishReason.toolCalls;
  if (reason === 'function_call') return FinishReason.toolCalls;
  return reason ?? FinishReason.stop;
}

/**
 * A request's `outputSchema` as Chat Completions' `response_format`. `strict` (the model is held to the schema) only
 * when the schema is within what strict mode takes, which the API otherwise refuses with a 400: every object closed
 * (`additionalProperties: false`) with all its properties required. Otherwise it is best effort, and the runtime's
 * check and retry do the rest.
 */
export function toResponseFormat(schema: Readonly<Record<string, unknown>>): ResponseFormatJSONSchema {
  return { type: 'json_schema', json_schema: { name: 'output', schema: { ...schema }, strict: strictCompatible(schema) } };
}

/** Whether every object schema in `schema` is closed and requires all its properties (OpenAI's strict subset, roughly). */
export function strictCompatible(schema: unknown): boolean {
  if (Array.isArray(schema)) return schema.every(strictCompatible);
  if (typeof schema !== 'object' || schema === null) return true;
  const node = schema as Record<string, unknown>;
  if (node.type === 'object' || (Array.isArray(node.type) && node.type.includes('object'))) {
    if (node.additionalProperties !== false) return false;
    const properties = typeof node.properties === 'object' && node.properties !== null ? Object.keys(node.properties) : [];
    const required = Array.isArray(node.required) ? node.required : [];
    if (!properties.every((name) => required.includes(name))) return false;
  }
  return Object.entries(node).every(([key, value]) => key === 'enum' || key === 'const' || key === 'default' || key === 'examples' || strictCompatible(value));
}

function toOpenAITool(tool: ToolSpec): ChatCompletionFunctionTool {
  return { type: 'function', function: { name: tool.name, description: tool.description, parameters: { ...tool.parameters } } };
}

/** Our messages in Chat Completions form: tool results become `tool` messages, tool calls carry JSON text. */
export function toOpenAIMessages(messages: readonly ChatMessage[]): ChatCompletionMessageParam[] {
  return messages.map((message): ChatCompletionMessageParam => {
    switch (message.role) {
      case 'system':
        return { role: 'system', content: message.content };
      case 'user':
        return { role: 'user', content: message.content };
      case 'assistant': {
        const calls = message.toolCalls ?? [];
        if (calls.length === 0) return { role: 'assistant', content: message.content };
        return {
          role: 'assistant',
          content: message.content === '' ? null : message.content,
          tool_calls: calls.map((call) => ({
            id: call.id,
            type: 'function' as const,
            function: { name: call.name, arguments: JSON.stringify(call.args ?? {}) },
          })),
        };
      }
      case 'tool':
        // Chat Completions has no error flag on tool results; say it in the text.
        return { role: 'tool', tool_call_id: message.toolCallId, content: message.isError ? `Error: ${message.content}` : message.content };
    }
  });
}
