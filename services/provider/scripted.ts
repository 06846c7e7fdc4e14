import { nuid } from '@nats-io/nats-core';
import { ProviderError } from '../../src/errors.ts';
import type { ChatMessage, ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from './adapter.ts';
import { sleep } from './resilience.ts';
import type { Script, ScriptResponse } from './script.ts';
import { createSessionCursors } from './session-cursors.ts';

/** The name of the offline provider: models are `scripted:<anything>`. */
export const SCRIPTED_PROVIDER = 'scripted';

/** The time source of the scripted provider; tests pass one that does not wait. */
export interface ScriptedClock {
  /** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/** Options of {@link createScriptedAdapter}. */
export interface ScriptedAdapterOptions {
  /** The script to play; without one every call echoes the last user message. */
  readonly script?: Script;
  readonly clock?: ScriptedClock;
  /** Sessions whose cursor is remembered; the least recently used is forgotten first. Default 10 000. */
  readonly maxSessions?: number;
  /** Makes the id of the `n`-th tool call (1-based) of a session. Default `call_<nuid>`. */
  readonly toolCallId?: (n: number, sessionKey: string) => string;
}

/** A clock on real timers. */
export function createTimerClock(): ScriptedClock {
  return { sleep: (ms, signal) => sleep(ms, { signal }) };
}

/** Splits text into stream pieces: `chunkSize` characters, or word-sized pieces (a word and the space after it). */
export function splitText(text: string, chunkSize?: number): string[] {
  if (text === '') return [];
  if (chunkSize === undefined) return text.match(/\S+\s*|\s+/g) ?? [text];
  // Array.from walks code points, so a chunk never splits a surrogate pair.
  const characters = Array.from(text);
  const pieces: string[] = [];
  for (let i = 0; i < characters.length; i += chunkSize) pieces.push(characters.slice(i, i + chunkSize).join(''));
  return pieces;
}

function roughTokens(characters: number): number {
  return Math.ceil(characters / 4);
}

function messageLength(message: ChatMessage): number {
  const calls = message.role === 'assistant' && message.toolCalls ? JSON.stringify(message.toolCalls).length : 0;
  return message.content.length + calls;
}

function lastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === 'user') return message.content;
  }
  return '';
}

function sessionKey(request: AdapterRequest): string {
  // Requests without a session share the empty key, hence one cursor.
  if (request.sessionId === undefined) return '';
  return `${request.tenant ?? ''}\u0000${request.sessionId}`;
}

/**
 * Creates the offline `scripted` provider. Each provider call of a session (tenant + sessionId)
 * takes the next response of the script; when the script runs out it echoes the last user message.
 * Text streams as `text-delta` chunks with `delayMs` before every chunk after the first; an `error`
 * entry streams its text, if any, then throws a {@link ProviderError} with its code.
 *
 * @example
 * const adapter = createScriptedAdapter({ script: await loadScript('examples/demo-script.json') });
 */
export function createScriptedAdapter(options: ScriptedAdapterOptions = {}): ProviderAdapter {
  const responses: readonly ScriptResponse[] = options.script?.responses ?? [];
  const clock = options.clock ?? createTimerClock();
  const cursors = createSessionCursors(options.maxSessions);
  const toolCallId = options.toolCallId ?? (() => `call_${nuid.next()}`);

  async function* play(request: AdapterRequest, signal: AbortSignal): AsyncGenerator<ChunkBody, void, undefined> {
    signal.throwIfAborted();
    const own = options.script?.models?.[request.model];
    const key = own ? `${sessionKey(request)}\u0000${request.model}` : sessionKey(request);
    const response: ScriptResponse = (own ?? responses)[cursors.nextCall(key)] ?? { text: lastUserText(request.messages) };
    const delayMs = response.delayMs ?? 0;
    let sent = 0;
    const pace = async () => {
      if (sent > 0 && delayMs > 0) await clock.sleep(delayMs, signal);
      signal.throwIfAborted();
      sent += 1;
    };

    const text = response.text ?? '';
    for (const piece of splitText(text, response.chunkSize)) {
      await pace();
      yield { type: 'text-delta', text: piece };
    }
    let toolCallLength = 0;
    for (const call of response.toolCalls ?? []) {
      await pace();
      toolCallLength += call.name.length + JSON.stringify(call.args).length;
      yield { type: 'tool-call', toolCallId: toolCallId(cursors.nextToolCall(key), key), name: call.name, args: call.args };
    }
    if (response.error) {
      throw new ProviderError(response.error.code, response.error.message, {
        retryable: response.error.retryable ?? false,
        provider: SCRIPTED_PROVIDER,
      });
    }
    const usage = response.usage ?? {
      inputTokens: roughTokens(request.messages.reduce((total, message) => total + messageLength(message), 0)),
      outputTokens: roughTokens(text.length + toolCallLength),
    };
    yield { type: 'usage', usage };
    const finishReason = response.toolCalls && response.toolCalls.length > 0 ? 'tool_calls' : 'stop';
    yield { type: 'done', finishReason, model: request.model, cost: response.cost ?? 0 };
  }

  return {
    name: SCRIPTED_PROVIDER,
    generate: (request, { signal }) => play(request, signal),
  };
}
