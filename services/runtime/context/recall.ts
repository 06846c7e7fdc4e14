import { NoRespondersError, toErrorData } from '../../../src/errors.ts';
import type { ChatMessage, MemoryHit } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import type { MemoryClient } from '../../../src/bus/memory-client.ts';

/** The heading of the system section recalled snippets enter the model's context under. */
export const RECALL_HEADING = 'Relevant context from memory:';

/** How the runtime reaches memory: the top snippets for a query, or none when no memory service runs. */
export interface MemoryPort {
  /** `turnId`: the turn the snippets are for (a traced request is a child of its step). */
  recall(tenant: string, query: string, options: { signal: AbortSignal; timeoutMs: number; k: number; turnId?: string }): Promise<readonly MemoryHit[]>;
}

/** How long the runtime stops asking once it learned that no memory service runs. */
const ABSENT_BACKOFF_MS = 10_000;

/**
 * A memory port over the memory client. With no memory service on the bus (no responders, answered at once)
 * it says nothing for {@link ABSENT_BACKOFF_MS} before asking again: a deployment without memory pays one
 * quick request per ten seconds, not one per step. Timeouts and errors are thrown, for the step to report.
 */
export function createMemoryPort(client: MemoryClient, now: () => number): MemoryPort {
  let absentUntil = 0;
  return {
    async recall(tenant, query, options) {
      if (now() < absentUntil) return [];
      try {
        const reply = await client.search(tenant, { query: query.slice(0, 4_096), k: options.k }, { signal: options.signal, timeoutMs: options.timeoutMs, ...(options.turnId ? { turnId: options.turnId } : {}) });
        return reply.hits;
      } catch (err) {
        if (err instanceof NoRespondersError) {
          absentUntil = now() + ABSENT_BACKOFF_MS;
          return [];
        }
        throw err;
      }
    },
  };
}

/**
 * The system section of recalled snippets that fit `budget` tokens, best first, without those whose text the
 * context already holds; undefined when none is left.
 */
export function recallSection(hits: readonly MemoryHit[], messages: readonly ChatMessage[], budget: number, tokens: TokenCounter): ChatMessage | undefined {
  const inWindow = messages.map((message) => message.content);
  const lines: string[] = [];
  let used = tokens.count(RECALL_HEADING) + 4;
  for (const hit of hits) {
    const text = hit.text.trim();
    if (text === '' || inWindow.some((content) => content.includes(text))) continue;
    const line = `- (${hit.type === 'user.message' ? 'user' : hit.type === 'assistant.message' ? 'assistant' : hit.type === 'tool.result' ? 'tool result' : 'summary'}, session ${hit.sessionId}) ${text}`;
    const cost = tokens.count(line) + 1;
    if (used + cost > budget) continue;
    used += cost;
    lines.push(line);
  }
  return lines.length === 0 ? undefined : { role: 'system', content: `${RECALL_HEADING}\n${lines.join('\n')}` };
}

/** The error data a step reports when memory did not answer. */
export function memoryUnavailable(err: unknown, timeoutMs: number): { code: string; message: string; retryable: boolean } {
  const data = toErrorData(err);
  return { code: 'memory_unavailable', message: `memory did not answer (${data.code}: ${data.message}) within ${timeoutMs} ms; this step goes on without recalled context`, retryable: true };
}
