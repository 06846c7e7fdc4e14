import { LogEventType } from '../../../src/protocol/index.ts';
import type { EventDataMap } from '../../../src/protocol/index.ts';
import type { Transcript } from '../sessions/transcript.ts';

/** What the turn's prompt pinned for its first step: a call made without the model, or an answer without tools. */
export type ForcedStep = Pick<EventDataMap['user.message'], 'forceTool' | 'forceFinish'>;

/**
 * The `forceTool` / `forceFinish` of a turn's prompt when `step` is its first, read from the prompt as logged (so a
 * turn resumed before its first answer honours them too); undefined for later steps and unpinned turns.
 */
export function forcedStep(transcript: Transcript, turnId: string, step: number): ForcedStep | undefined {
  if (step !== 1) return undefined;
  const prompt = transcript.turnEvents(turnId).find((event) => event.type === LogEventType.userMessage && !event.data.steer);
  if (prompt?.type !== LogEventType.userMessage) return undefined;
  const { forceTool, forceFinish } = prompt.data;
  if (forceTool) return { forceTool };
  return forceFinish ? { forceFinish } : undefined;
}
