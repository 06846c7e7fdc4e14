import { setTimeout as delay } from 'node:timers/promises';
import { AgentbusError, ErrorCode, abortReason } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import type { GenerateChunk, GenerateRequest, LogEvent } from '../../../src/protocol/index.ts';
import type { ProviderPort } from '../ports.ts';
import type { FleetLimits, LimitTicket } from './fleet-limits.ts';

/** About how many tokens a request's text is, before it is sent: four characters a token, no tokenizer on the hot path. */
export function estimateTokens(request: Pick<GenerateRequest, 'messages' | 'tools'>): number {
  let chars = 0;
  for (const message of request.messages) chars += typeof message.content === 'string' ? message.content.length : JSON.stringify(message.content ?? '').length;
  for (const tool of request.tools) chars += tool.name.length + tool.description.length + JSON.stringify(tool.parameters).length;
  return Math.ceil(chars / 4);
}

/**
 * The provider port under the fleet-wide limits: each call first reserves its spend and counts in its rate windows
 * (see {@link FleetLimits.acquire}), and is settled with its cost and usage when it ends, however it ends. A call
 * with no room under a rate limit waits for it: each wait is a `retry` chunk (code `rate_limited`), which the step
 * publishes as a live `retry` event. A wait that would pass `maxWaitMs` in all, or the call's `deadline` (the turn's),
 * is not begun: the call fails at once with `rate_limited`, not retryable.
 */
export function limitProvider(port: ProviderPort, deps: { readonly limits: FleetLimits; readonly maxWaitMs: number; readonly now: () => number; readonly logger: Logger }): ProviderPort {
  const { limits, now, logger } = deps;
  return {
    async *generate(request, options) {
      const { signal } = options;
      const tokens = estimateTokens(request);
      const started = now();
      let ticket: LimitTicket | undefined;
      for (let attempt = 1; ticket === undefined; attempt++) {
        signal.throwIfAborted();
        const outcome = await limits.acquire({ ...(request.tenant === undefined ? {} : { tenant: request.tenant }), model: request.model, tokens });
        if ('ticket' in outcome) {
          ticket = outcome.ticket;
          break;
        }
        const waitedMs = now() - started;
        const pastBound = waitedMs + outcome.waitMs > deps.maxWaitMs;
        const pastDeadline = options.deadline !== undefined && now() + outcome.waitMs > options.deadline;
        if (pastBound || pastDeadline) {
          const why = pastDeadline ? "that is past the turn's deadline" : `waiting that long would pass the bound of ${deps.maxWaitMs} ms (AGENTBUS_RATE_MAX_WAIT_MS)`;
          throw new AgentbusError(ErrorCode.rateLimited, `${outcome.message}; ${why}${waitedMs > 0 ? `, after ${waitedMs} ms waited` : ''}`, { retryable: false });
        }
        const left = deps.maxWaitMs - waitedMs - outcome.waitMs;
        const chunk: GenerateChunk = {
          v: 1,
          requestId: request.requestId,
          seq: 0,
          type: 'retry',
          attempt: attempt + 1,
          // The bound is of time, not tries: as many more as waits this long still fit in it.
          maxAttempts: attempt + 1 + Math.floor(left / Math.max(1, outcome.waitMs)),
          delayMs: outcome.waitMs,
          error: { code: ErrorCode.rateLimited, message: outcome.message, retryable: true },
        };
        yield chunk;
        // Node rejects an aborted delay with a plain AbortError; the step needs the signal's own reason.
        await delay(outcome.waitMs, undefined, { signal }).catch(() => {
          throw abortReason(signal);
        });
      }
      let cost = 0;
      let used: number | undefined;
      try {
        for await (const chunk of port.generate(request, options)) {
          if (chunk.type === 'usage') used = chunk.usage.inputTokens + chunk.usage.outputTokens;
          else if (chunk.type === 'done') cost = chunk.cost ?? 0;
          yield chunk;
        }
      } finally {
        // Awaited: the tenant's next prompt, on any node, must see this call's cost.
        await limits.settle(ticket, { cost, tokens: used ?? tokens }).catch((err: unknown) => logger.warn({ err, model: request.model, tenant: request.tenant }, 'provider call not settled in the limits bucket'));
      }
    },
  };
}

/**
 * The turn's deadline as a provider call's option: a rate limit's wait must not pass it. The step's own scope has it
 * when the turn's input named one (a prompt's `deadlineMs`, or a resumed turn's); otherwise the logged `turn.started`
 * says it, once stored (the first step's call may go out before its acknowledgement: then the wait bound alone holds).
 */
export function deadlineOf(transcript: { turnEvents(turnId: string): readonly LogEvent[] }, scope: { readonly turnId: string; readonly deadline?: number }): { deadline?: number } {
  if (scope.deadline !== undefined) return { deadline: scope.deadline };
  for (const event of transcript.turnEvents(scope.turnId)) {
    if (event.type === LogEventType.turnStarted) return event.data.deadline === undefined ? {} : { deadline: event.data.deadline };
  }
  return {};
}
