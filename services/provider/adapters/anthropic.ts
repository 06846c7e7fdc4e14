import type Anthropic from '@anthropic-ai/sdk';
import type {
  ContentBlockParam,
  Message,
  MessageCreateParamsBase,
  MessageParam,
  Tool,
} from '@anthropic-ai/sdk/resources/messages';
import { ProviderError } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import type { ChatMessage, ChunkBody, ToolSpec } from '../../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../adapter.ts';
import { ProviderErrorCode, signalReason, toProviderError } from '../provider-errors.ts';
import type { SdkErrorClasses } from '../provider-errors.ts';
import { createScrubber } from '../../../src/scrub/index.ts';
import { providerSecrets } from '../provider-secrets.ts';
import { DEFAULT_TIMEOUT_MS, FinishReason, bridgeSdkLogger, createStreamingAdapter, parseToolArguments } from './shared.ts';

/** The default base URL of the Anthropic API. */
export const ANTHROPIC_BASE_URL = 'https://api.anthropic.com';
/** `max_tokens` is required by the Messages API; this is sent when the request names none. */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096;

/** Options of {@link createAnthropicAdapter}. */
export interface AnthropicAdapterOptions {
  readonly name?: string;
  readonly apiKey: string;
  /** Default {@link ANTHROPIC_BASE_URL}; never read from the environment here. */
  readonly baseURL?: string;
  readonly defaultHeaders?: Readonly<Record<string, string>>;
  readonly logger?: Logger;
  /** Sent as `max_tokens` when the request has no `maxTokens`. Default 4096. */
  readonly defaultMaxTokens?: number;
  /** Fall back to one non-streaming call when the stream fails before its first token. Default true. */
  readonly streamFallback?: boolean;
  /** Send a request's `outputSchema` as `output_config.format` (`json_schema`). Default true. */
  readonly structuredOutput?: boolean;
  /** Per-request timeout of the HTTP client. Default 10 minutes. */
  readonly timeoutMs?: number;
  /**
   * The `thinking` setting sent. Default `disabled`: newer models think by default, and a tool-use
   * turn continued without its thinking blocks (which our messages cannot carry) is refused.
   * `adaptive` turns it on; `omit` sends nothing, for models or servers that do not know the field.
   */
  readonly thinking?: AnthropicThinking;
  readonly now?: () => number;
}

/** The `thinking` settings an Anthropic adapter can send. */
export const AnthropicThinking = { disabled: 'disabled', adaptive: 'adaptive', omit: 'omit' } as const;
export type AnthropicThinking = (typeof AnthropicThinking)[keyof typeof AnthropicThinking];

/**
 * The SDK's error classes. The SDK is imported on first use, not with the service: a provider service that serves no
 * Anthropic model never pays the 0.4 s of CPU its loading takes (a static import would be hoisted to the top of the
 * compiled service).
 */
async function sdkErrors(): Promise<SdkErrorClasses> {
  const { APIError, APIUserAbortError, APIConnectionError, APIConnectionTimeoutError } = await import('@anthropic-ai/sdk');
  return { APIError, APIUserAbortError, APIConnectionError, APIConnectionTimeoutError };
}

/**
 * Creates an adapter for the Anthropic Messages API. System messages become `system`, tool results
 * become `tool_result` blocks in a user message, tool calls `tool_use` blocks. Input usage comes from
 * `message_start`, output usage from `message_delta`; each tool call is yielded at its
 * `content_block_stop`, its `input_json_delta` pieces joined and parsed.
 *
 * @example
 * const adapter = createAnthropicAdapter({ apiKey: process.env.ANTHROPIC_API_KEY!, logger });
 */
export function createAnthropicAdapter(options: AnthropicAdapterOptions): ProviderAdapter {
  const name = options.name ?? 'anthropic';
  const now = options.now ?? Date.now;
  const scrubber = createScrubber({ secrets: providerSecrets(options.apiKey, options.defaultHeaders), ...(options.logger ? { logger: options.logger } : {}) });
  const createClient = async (): Promise<Anthropic> => {
    const { default: Anthropic } = await import('@anthropic-ai/sdk');
    return new Anthropic({
      apiKey: options.apiKey,
      baseURL: options.baseURL ?? ANTHROPIC_BASE_URL,
      maxRetries: 0,
      // An explicit timeout also keeps the SDK from refusing large non-streaming fallback calls.
      timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      logger: bridgeSdkLogger(options.logger, scrubber),
      logLevel: 'warn',
      ...(options.defaultHeaders ? { defaultHeaders: { ...options.defaultHeaders } } : {}),
    });
  };
  // Made by the first call, which imports the SDK.
  let client: Promise<Anthropic> | undefined;
  const sdkClient = () => (client ??= createClient());

  const mapError = async (error: unknown, signal: AbortSignal, { beforeResponse = false } = {}) =>
    toProviderError(error, { provider: name, scrubber, signal, classes: await sdkErrors(), now: now(), beforeResponse });

  function params(request: AdapterRequest): MessageCreateParamsBase {
    const { system, messages } = toAnthropicMessages(request.messages);
    const body: MessageCreateParamsBase = {
      model: request.model,
      max_tokens: request.maxTokens ?? options.defaultMaxTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS,
      messages,
    };
    if (system !== '') body.system = system;
    const thinking = options.thinking ?? AnthropicThinking.disabled;
    if (thinking !== AnthropicThinking.omit) body.thinking = { type: thinking };
    if (request.tools.length > 0) body.tools = request.tools.map(toAnthropicTool);
    else {
      // A call without tools (the final answer at maxSteps, --force-finish) over a history with tool calls: the API
      // refuses `tool_use`/`tool_result` blocks unless tools are defined, so the tools named in the history are
      // defined again and `tool_choice: none` keeps the model from calling any of them.
      const named = toolNamesIn(messages);
      if (named.length > 0) {
        body.tools = named.map((toolName) => ({ name: toolName, description: 'Not available in this call: answer in text.', input_schema: { type: 'object' } }));
        body.tool_choice = { type: 'none' };
      }
    }
    // Structured outputs: the text of the final answer is held to the schema; tool calls are unaffected.
    if (request.outputSchema && options.structuredOutput !== false) body.output_config = { format: { type: 'json_schema', schema: { ...request.outputSchema } } };
    // `temperature` is not sent: the Messages API this SDK speaks has no such parameter any more.
    return body;
  }

  async function* stream(request: AdapterRequest, signal: AbortSignal): AsyncGenerator<ChunkBody, void, undefined> {
    const response = await sdkClient().then((sdk) => sdk.messages.create({ ...params(request), stream: true }, { signal })).catch(async (error: unknown) => {
      throw await mapError(error, signal, { beforeResponse: true });
    });
    const blocks = new Map<number, { id: string; name: string; json: string }>();
    let inputTokens = 0;
    let outputTokens = 0;
    let stopReason: string | null = null;
    let stopped = false;
    try {
      for await (const event of response) {
        switch (event.type) {
          case 'message_start': {
            const usage = event.message.usage;
            inputTokens = inputTokensOf(usage.input_tokens, usage);
            outputTokens = usage.output_tokens;
            break;
          }
          case 'content_block_start': {
            const block = event.content_block;
            if (block.type === 'text' && block.text !== '') yield { type: 'text-delta', text: block.text };
            if (block.type === 'tool_use') {
              const initial = isEmptyObject(block.input) ? '' : JSON.stringify(block.input);
              blocks.set(event.index, { id: block.id, name: block.name, json: initial });
            }
            break;
          }
          case 'content_block_delta': {
            const delta = event.delta;
            if (delta.type === 'text_delta' && delta.text !== '') yield { type: 'text-delta', text: delta.text };
            if (delta.type === 'input_json_delta') {
              const block = blocks.get(event.index);
              if (block) block.json += delta.partial_json;
            }
            break;
          }
          case 'content_block_stop': {
            const block = blocks.get(event.index);
            if (block) {
              blocks.delete(event.index);
              yield { type: 'tool-call', toolCallId: block.id, name: block.name, args: parseToolArguments(block.json) };
            }
            break;
          }
          case 'message_delta': {
            // Counts in message_delta are cumulative.
            outputTokens = event.usage.output_tokens;
            if (typeof event.usage.input_tokens === 'number') {
              inputTokens = inputTokensOf(event.usage.input_tokens, event.usage);
            }
            if (event.delta.stop_reason) stopReason = event.delta.stop_reason;
            break;
          }
          case 'message_stop':
            stopped = true;
            break;
        }
      }
    } catch (error) {
      throw await mapError(error, signal);
    }
    if (signal.aborted) throw signalReason(signal);
    if (!stopped) {
      throw new ProviderError(ProviderErrorCode.streamInterrupted, `${name}: stream ended before message_stop`, { provider: name, retryable: true });
    }
    yield { type: 'usage', usage: { inputTokens, outputTokens } };
    yield { type: 'done', finishReason: normalizeStopReason(stopReason) };
  }

  async function complete(request: AdapterRequest, signal: AbortSignal): Promise<ChunkBody[]> {
    let message: Message;
    try {
      message = await (await sdkClient()).messages.create({ ...params(request), stream: false }, { signal });
    } catch (error) {
      throw await mapError(error, signal);
    }
    const chunks: ChunkBody[] = [];
    for (const block of message.content) {
      if (block.type === 'text' && block.text !== '') chunks.push({ type: 'text-delta', text: block.text });
      if (block.type === 'tool_use') chunks.push({ type: 'tool-call', toolCallId: block.id, name: block.name, args: block.input });
    }
    const usage = message.usage;
    chunks.push({
      type: 'usage',
      usage: {
        inputTokens: inputTokensOf(usage.input_tokens, usage),
        outputTokens: usage.output_tokens,
      },
    });
    chunks.push({ type: 'done', finishReason: normalizeStopReason(message.stop_reason) });
    return chunks;
  }

  return createStreamingAdapter({
    name,
    logger: options.logger,
    streamFallback: options.streamFallback,
    callMessage: 'messages call',
    stream,
    complete,
  });
}

/** Input tokens of a usage block: cache writes and cache reads are input too. */
function inputTokensOf(input: number, cache: { cache_creation_input_tokens: number | null; cache_read_input_tokens: number | null }): number {
  return input + (cache.cache_creation_input_tokens ?? 0) + (cache.cache_read_input_tokens ?? 0);
}

function isEmptyObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && Object.keys(value).length === 0;
}

function normalizeStopReason(reason: string | null): string {
  switch (reason) {
    case null:
    case 'end_turn':
    case 'stop_sequence':
      return FinishReason.stop;
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return FinishReason.length;
    case 'tool_use':
      return FinishReason.toolCalls;
    case 'refusal':
      return FinishReason.contentFilter;
    default:
      return reason;
  }
}

/** The names of the tools called in `messages`' `tool_use` blocks, each once. */
function toolNamesIn(messages: readonly MessageParam[]): string[] {
  const names = new Set<string>();
  for (const message of messages) {
    if (typeof message.content === 'string') continue;
    for (const block of message.content) if (block.type === 'tool_use') names.add(block.name);
  }
  return [...names];
}

function toAnthropicTool(tool: ToolSpec): Tool {
  const schema = tool.parameters;
  return {
    name: tool.name,
    description: tool.description,
    input_schema: { ...schema, type: 'object' },
  };
}

/**
 * Our messages in Messages API form. System messages, wherever they are, join into `system`; tool
 * results become `tool_result` blocks, and consecutive user-side messages (tool results, then a user
 * message) merge into one user message, tool results first, as the API requires.
 */
export function toAnthropicMessages(messages: readonly ChatMessage[]): { system: string; messages: MessageParam[] } {
  const system: string[] = [];
  const result: MessageParam[] = [];
  let userBlocks: ContentBlockParam[] | undefined;
  const flushUser = () => {
    if (userBlocks && userBlocks.length > 0) result.push({ role: 'user', content: userBlocks });
    userBlocks = undefined;
  };
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        system.push(message.content);
        break;
      case 'user':
        userBlocks ??= [];
        userBlocks.push({ type: 'text', text: message.content });
        break;
      case 'tool':
        userBlocks ??= [];
        userBlocks.push({
          type: 'tool_result',
          tool_use_id: message.toolCallId,
          content: message.content,
          ...(message.isError ? { is_error: true } : {}),
        });
        break;
      case 'assistant': {
        flushUser();
        const content: ContentBlockParam[] = [];
        if (message.content !== '') content.push({ type: 'text', text: message.content });
        for (const call of message.toolCalls ?? []) {
          const input = typeof call.args === 'object' && call.args !== null && !Array.isArray(call.args) ? call.args : { value: call.args };
          content.push({ type: 'tool_use', id: call.id, name: call.name, input });
        }
        // The API refuses empty assistant turns.
        if (content.length > 0) result.push({ role: 'assistant', content });
        break;
      }
    }
  }
  flushUser();
  return { system: system.join('\n\n'), messages: result };
}
