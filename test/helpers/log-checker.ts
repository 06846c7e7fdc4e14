import type { NatsConnection } from '@nats-io/nats-core';
import { jetstream } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { createCodec, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { silentLogger } from './stack.ts';

/**
 * What a fault run must never leave in a session's log, counted in the manner of Jepsen's checkers: every
 * figure must be 0. `effectsRunTwice` needs the tools' own record of what they ran (effectId → runs).
 */
export interface LogCheck {
  readonly sessions: number;
  readonly events: number;
  /** Prompts (not steers) without exactly one `turn.ended` of their turn. */
  readonly promptsWithoutOneEnd: number;
  /** Event ids logged more than once. */
  readonly duplicateIds: number;
  /** `tool.use` without exactly one `tool.result` of the same call. */
  readonly toolUsesWithoutOneResult: number;
  /** Turns whose model answers are not steps 1, 2, … with no gap or repeat. */
  readonly stepGaps: number;
  /** Side effects run more than once per `effectId`, by the tools' own count. */
  readonly effectsRunTwice: number;
}

/** Counts what must not happen in the logs of `sessions` (events as read back from the log, in order). */
export function checkLogs(logs: ReadonlyArray<readonly LogEvent[]>, effectRuns: ReadonlyMap<string, number> = new Map()): LogCheck {
  let events = 0;
  let promptsWithoutOneEnd = 0;
  let duplicateIds = 0;
  let toolUsesWithoutOneResult = 0;
  let stepGaps = 0;
  const ids = new Set<string>();
  for (const log of logs) {
    events += log.length;
    const ends = new Map<string, number>();
    const results = new Map<string, number>();
    const steps = new Map<string, number[]>();
    for (const event of log) {
      if (ids.has(event.id)) duplicateIds += 1;
      ids.add(event.id);
      if (event.type === 'turn.ended' && event.turnId) ends.set(event.turnId, (ends.get(event.turnId) ?? 0) + 1);
      if (event.type === 'tool.result') results.set(event.data.toolCallId, (results.get(event.data.toolCallId) ?? 0) + 1);
      if (event.type === 'assistant.message' && event.turnId) steps.set(event.turnId, [...(steps.get(event.turnId) ?? []), event.step ?? 0]);
    }
    for (const event of log) {
      if (event.type === 'user.message' && !event.data.steer && event.turnId && ends.get(event.turnId) !== 1) promptsWithoutOneEnd += 1;
      if (event.type === 'tool.use' && results.get(event.data.toolCallId) !== 1) toolUsesWithoutOneResult += 1;
    }
    for (const list of steps.values()) if (list.some((step, index) => step !== index + 1)) stepGaps += 1;
  }
  const effectsRunTwice = [...effectRuns.values()].filter((runs) => runs > 1).length;
  return { sessions: logs.length, events, promptsWithoutOneEnd, duplicateIds, toolUsesWithoutOneResult, stepGaps, effectsRunTwice };
}

/** How the turns in `logs` ended: the count of `turn.ended` events by `reason`. */
export function endReasons(logs: ReadonlyArray<readonly LogEvent[]>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const log of logs) {
    for (const event of log) if (event.type === 'turn.ended') counts[event.data.reason] = (counts[event.data.reason] ?? 0) + 1;
  }
  return counts;
}

/** Reads each session's whole log back from `AGENTBUS_LOG`. */
export async function readLogs(nc: NatsConnection, tenant: string, sessionIds: readonly string[]): Promise<LogEvent[][]> {
  const log = createSessionLog({ nc, js: jetstream(nc), subjects: createSubjects('agentbus'), codec: createCodec(), stream: streamNames().log, logger: silentLogger() });
  // A read just after a fault (a cluster that lost the stream's leader) may time out while the stream settles:
  // on 2 loaded cores a three-server cluster once took over 25 s to create consumers again.
  const read = async (sessionId: string): Promise<LogEvent[]> => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return [...(await log.read(tenant, sessionId, { timeoutMs: 5_000 })).events];
      } catch (error) {
        if (attempt >= 10) throw error;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  };
  const logs: LogEvent[][] = [];
  for (const sessionId of sessionIds) logs.push(await read(sessionId));
  return logs;
}
