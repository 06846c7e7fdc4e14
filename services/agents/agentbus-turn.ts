import type { AgentbusClient } from '../../src/client/index.ts';
import type { Logger } from '../../src/logging.ts';
import { LiveEventType, LogEventType } from '../../src/protocol/index.ts';
import { approvalDecision, approvalQuestion } from './approval-query.ts';
import type { ApprovalRequest } from './approval-query.ts';
import type { ExposedAgent } from './config.ts';
import { turnEndFailure } from './failures.ts';
import type { PromptRequest } from './request-envelope.ts';
import type { AgentFailure } from './wire.ts';

/** What a turn sends back to the prompt's caller while it runs. */
export interface TurnOutput {
  /** Text of the answer as it streams. */
  text(text: string): void;
  /** Asks the caller a question (a §7 `query`) and resolves with the reply's text; undefined when none came in time. */
  ask(question: string, signal: AbortSignal): Promise<string | undefined>;
}

/** Runs one prompt as an agentbus turn: the answer's text as it streams, then how the turn ended. */
export type RunTurn = (request: PromptRequest, output: TurnOutput, signal: AbortSignal) => Promise<AgentFailure | undefined>;

/** Options of {@link createTurnRunner}. */
export interface TurnRunnerOptions {
  readonly client: AgentbusClient;
  readonly agent: ExposedAgent;
  readonly logger: Logger;
  /** A fresh session id, for an agent bound to no session. */
  readonly newSessionId: () => string;
  readonly turnTimeoutMs: number;
  readonly readyTimeoutMs: number;
  /** How long the caller has to answer an approval query; in the denial's reason when it does not. */
  readonly queryTimeoutMs: number;
}

/**
 * A turn runner for one exposed agent: it prompts the agent's session (or a fresh one) through the SDK, as any
 * client does (`agentbus.<tenant>.sessions.<sid>.prompt`, then the session's events), hands on each
 * `assistant.delta` as it comes (the final text at once when none streamed), and resolves with the failure of a turn that did not yield (undefined when it did).
 * For an agent whose `approvals` are the caller's, each `approval.requested` of the turn is asked of the caller as a
 * query and its reply sent as the decision (`approve`, as any client may).
 * Errors of the prompt itself (refused, no runtime, timeout) are thrown.
 */
export function createTurnRunner(options: TurnRunnerOptions): RunTurn {
  const { agent } = options;
  return async (request, output, signal) => {
    const target = { tenant: agent.tenant, sessionId: agent.session ?? options.newSessionId() };
    // Unknown envelope fields are relayed, not dropped (§5.6): they ride in the prompt's metadata.
    const relayed = Object.keys(request.extra).length > 0 ? { metadata: { agentProtocol: { ...request.extra } } } : {};
    const files = request.attachments.length > 0 ? { attachments: [...request.attachments] } : {};
    // Queries still open when the turn ends are moot: the turn is over.
    const turnOver = new AbortController();
    const querySignal = AbortSignal.any([signal, turnOver.signal]);
    const asked = new Set<string>();
    const decide = async (call: ApprovalRequest) => {
      const reply = await output.ask(approvalQuestion(call), querySignal);
      if (querySignal.aborted) return;
      const decision = approvalDecision(call.toolCallId, reply, `the caller did not answer within ${Math.round(options.queryTimeoutMs / 1000)} s`);
      const answer = await options.client.approve(target, decision, { signal: querySignal, timeoutMs: 10_000 });
      // Refused when the call was decided already (an operator was quicker) or the turn moved on: nothing to do.
      if (!answer.ok) options.logger.info({ toolCallId: call.toolCallId, error: answer.error }, 'the caller\'s approval decision was not taken');
    };
    let streamed = false;
    try {
      const ended = await options.client.ask(
        target,
        { text: request.prompt, ...files, ...(agent.model ? { model: agent.model } : {}), ...(agent.maxSteps ? { maxSteps: agent.maxSteps } : {}), ...relayed },
        {
          signal,
          ...(request.trace ? { trace: request.trace } : {}),
          timeoutMs: options.turnTimeoutMs,
          readyTimeoutMs: options.readyTimeoutMs,
          onEvent: ({ event }) => {
            if (event.type === LiveEventType.assistantDelta) {
              streamed = true;
              output.text(event.data.text);
            } else if (event.type === LogEventType.approvalRequested && agent.approvals === 'caller' && !asked.has(event.data.toolCallId)) {
              asked.add(event.data.toolCallId);
              decide(event.data).catch((error: unknown) => {
                if (!querySignal.aborted) options.logger.warn({ err: error, toolCallId: event.data.toolCallId }, 'an approval asked of the caller was not decided');
              });
            }
          },
        },
      );
      // A turn whose answer came without deltas still answers: its final text, in one chunk.
      if (!streamed && ended.text) output.text(ended.text);
      return turnEndFailure(ended.reason, ended.error);
    } finally {
      turnOver.abort();
    }
  };
}
