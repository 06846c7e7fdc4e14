import type { AgentbusClient } from '../../src/client/index.ts';
import type { ExposedAgent } from './config.ts';
import { turnEndFailure } from './failures.ts';
import type { PromptRequest } from './request-envelope.ts';
import type { AgentFailure } from './wire.ts';

/** Runs one prompt as an agentbus turn: the answer's text as it streams, then how the turn ended. */
export type RunTurn = (request: PromptRequest, onText: (text: string) => void, signal: AbortSignal) => Promise<AgentFailure | undefined>;

/** Options of {@link createTurnRunner}. */
export interface TurnRunnerOptions {
  readonly client: AgentbusClient;
  readonly agent: ExposedAgent;
  /** A fresh session id, for an agent bound to no session. */
  readonly newSessionId: () => string;
  readonly turnTimeoutMs: number;
  readonly readyTimeoutMs: number;
}

/**
 * A turn runner for one exposed agent: it prompts the agent's session (or a fresh one) through the SDK, as any
 * client does (`agentbus.<tenant>.sessions.<sid>.prompt`, then the session's events), hands on each
 * `assistant.delta` as it comes (the final text at once when none streamed), and resolves with the failure of a turn that did not yield (undefined when it did).
 * Errors of the prompt itself (refused, no runtime, timeout) are thrown.
 */
export function createTurnRunner(options: TurnRunnerOptions): RunTurn {
  const { agent } = options;
  return async (request, onText, signal) => {
    const target = { tenant: agent.tenant, sessionId: agent.session ?? options.newSessionId() };
    // Unknown envelope fields are relayed, not dropped (§5.6): they ride in the prompt's metadata.
    const relayed = Object.keys(request.extra).length > 0 ? { metadata: { agentProtocol: { ...request.extra } } } : {};
    let streamed = false;
    const ended = await options.client.ask(
      target,
      { text: request.prompt, ...(agent.model ? { model: agent.model } : {}), ...(agent.maxSteps ? { maxSteps: agent.maxSteps } : {}), ...relayed },
      {
        signal,
        timeoutMs: options.turnTimeoutMs,
        readyTimeoutMs: options.readyTimeoutMs,
        onEvent: ({ event }) => {
          if (event.type !== 'assistant.delta') return;
          streamed = true;
          onText(event.data.text);
        },
      },
    );
    // A turn whose answer came without deltas still answers: its final text, in one chunk.
    if (!streamed && ended.text) onText(ended.text);
    return turnEndFailure(ended.reason, ended.error);
  };
}
