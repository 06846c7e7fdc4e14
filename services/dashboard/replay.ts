import type { AgentEvent } from '../../src/protocol/index.ts';
import { endState } from './fleet.ts';

/** One stop of a session's path through its turn machine. */
export interface PathStep {
  readonly turnId: string;
  readonly state: string;
  readonly ts: number;
  /** `live`: a `state` event said so; `log`: inferred from the durable log (the live stream keeps 5 minutes). */
  readonly source: 'live' | 'log';
  /** The id of the event that marks this stop. */
  readonly eventId: string;
}

/**
 * The turn machine states a session went through, turn after turn, for the replay scrubber. A turn whose
 * `state` events are still in the live stream is told by them; an older one is inferred from its log:
 * `user.message` → Preparing, `summary.created` → Compacting, `assistant.message` → Streaming,
 * `tool.use` → ToolExecution, `approval.requested` → AwaitingApproval, `turn.ended` → its end state.
 *
 * @example
 * pathOf(logEvents, liveStateEvents).map((step) => step.state); // ['Preparing', 'Streaming', 'ToolExecution', …]
 */
export function pathOf(log: readonly AgentEvent[], live: readonly AgentEvent[]): PathStep[] {
  const liveByTurn = new Map<string, PathStep[]>();
  for (const event of live) {
    if (event.type !== 'state' || event.data.machine !== 'turn' || event.turnId === undefined) continue;
    const steps = liveByTurn.get(event.turnId) ?? [];
    steps.push({ turnId: event.turnId, state: event.data.value, ts: event.ts, source: 'live', eventId: event.id });
    liveByTurn.set(event.turnId, steps);
  }
  const inferred = new Map<string, PathStep[]>();
  const order: string[] = [];
  const push = (event: AgentEvent, state: string) => {
    if (event.turnId === undefined) return;
    let steps = inferred.get(event.turnId);
    if (!steps) {
      steps = [];
      inferred.set(event.turnId, steps);
      order.push(event.turnId);
    }
    const last = steps.at(-1);
    if (last?.state === state) return;
    // A new step's model answer comes after Preparing.
    if (state === 'Streaming' && last && last.state !== 'Preparing' && last.state !== 'Compacting') {
      steps.push({ turnId: event.turnId, state: 'Preparing', ts: event.ts, source: 'log', eventId: event.id });
    }
    steps.push({ turnId: event.turnId, state, ts: event.ts, source: 'log', eventId: event.id });
  };
  for (const event of log) {
    switch (event.type) {
      case 'user.message':
        if (!event.data.steer) push(event, 'Preparing');
        break;
      case 'summary.created':
        push(event, 'Compacting');
        break;
      case 'assistant.message':
        push(event, 'Streaming');
        break;
      case 'tool.use':
        push(event, 'ToolExecution');
        break;
      case 'approval.requested':
        push(event, 'AwaitingApproval');
        break;
      case 'approval.decided':
        push(event, 'ToolExecution');
        break;
      case 'turn.ended':
        push(event, endState(event.data.reason));
        break;
      default:
        break;
    }
  }
  for (const turnId of liveByTurn.keys()) if (!order.includes(turnId)) order.push(turnId);
  return order.flatMap((turnId) => {
    const fromLive = liveByTurn.get(turnId);
    const fromLog = inferred.get(turnId) ?? [];
    // Live state events are exact, but only while the live stream keeps them: use them when they reach the turn's end.
    if (fromLive && fromLive.length > 0 && (fromLog.length === 0 || fromLive.at(-1)!.state === fromLog.at(-1)!.state || !isEnd(fromLog.at(-1)!.state))) {
      return fromLive;
    }
    return fromLog;
  });
}

function isEnd(state: string): boolean {
  return state === 'Yielding' || state === 'Cancelled' || state === 'BudgetExceeded' || state === 'Failed';
}
