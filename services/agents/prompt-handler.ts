import type { Codec, TraceContext } from '../../src/protocol/index.ts';
import type { Logger } from '../../src/logging.ts';
import type { RunTurn, TurnOutput } from './agentbus-turn.ts';
import { thrownFailure } from './failures.ts';
import { decodePromptRequest } from './request-envelope.ts';
import type { PromptLimits } from './request-envelope.ts';
import type { ResponseStream } from './response-stream.ts';
import type { AgentFailure } from './wire.ts';

/** What {@link handlePrompt} needs for one request. */
export interface PromptHandling {
  readonly codec: Codec;
  readonly limits: PromptLimits;
  readonly runTurn: RunTurn;
  /** Sends a `query` chunk on this stream and waits for the caller's reply (see {@link TurnOutput.ask}). */
  readonly ask: (stream: ResponseStream, question: string, signal: AbortSignal) => Promise<string | undefined>;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** The caller's trace context from the request's headers, handed on to the turn's prompt. */
  readonly trace?: TraceContext;
}

/**
 * Answers one `prompt` request in the order of §6 (as the reference host does): decode the request (a bad one gets
 * a 400 and the terminator, no ack); send the ack before any work; stream the answer's text as `response` chunks;
 * on failure send the error message; always end with the terminator. Resolves with the failure, if any, for the
 * endpoint's stats; never rejects.
 */
export async function handlePrompt(data: Uint8Array, stream: ResponseStream, handling: PromptHandling): Promise<AgentFailure | undefined> {
  let failure: AgentFailure | undefined;
  try {
    const decoded = decodePromptRequest(handling.codec, data, handling.limits);
    const request = handling.trace ? { ...decoded, trace: handling.trace } : decoded;
    stream.ack();
    const output: TurnOutput = { text: (text) => stream.text(text), ask: (question, signal) => handling.ask(stream, question, signal) };
    failure = await handling.runTurn(request, output, handling.signal);
  } catch (error) {
    failure = thrownFailure(error);
    if (failure.status === 500) handling.logger.warn({ err: error }, 'an agent protocol prompt failed');
  }
  if (failure) stream.fail(failure);
  stream.end();
  return failure;
}
