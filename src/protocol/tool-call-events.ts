import { z } from 'zod';

/**
 * Headers of a tool call beyond `Content-Type`. A caller that can take more than one message on its reply
 * subject says so with `heartbeat`; a call made again for the same `effectId` (a resumed turn, a retry after
 * its worker went silent) carries its `attempt`, so that the worker looks for a recorded outcome first.
 */
export const ToolCallHeader = {
  /** `1`: send heartbeats and progress to the reply subject while the call runs. */
  heartbeat: 'Agentbus-Heartbeat',
  /** The attempt number of this logical call, `2` and up for a repeat; absent on the first. */
  attempt: 'Agentbus-Attempt',
  /** On a message a worker sends before its reply: `heartbeat` or `progress`. Absent on the reply itself. */
  event: 'Agentbus-Tool-Event',
  /**
   * `1` on a call: the caller logs the output as text, scrubbed; a worker that can scrub may send it so (a
   * successful reply's `output` as that text, scrubbed with the full pass) and say so with {@link outputScrubbed}.
   */
  scrubOutput: 'Agentbus-Scrub-Output',
  /** `1` on a reply: its `output` is text the worker scrubbed with the full pass, as {@link scrubOutput} asked. */
  outputScrubbed: 'Agentbus-Output-Scrubbed',
} as const;
export type ToolCallHeader = (typeof ToolCallHeader)[keyof typeof ToolCallHeader];

/** The kinds of message a worker sends to a call's reply subject before the reply. */
export const ToolCallEventKind = {
  heartbeat: 'heartbeat',
  progress: 'progress',
} as const;
export type ToolCallEventKind = (typeof ToolCallEventKind)[keyof typeof ToolCallEventKind];

/**
 * Keys a tool worker adds to a tool endpoint's `$SRV` metadata (strings, like the rest): how often it sends
 * heartbeats to callers that ask for them, and whether it keeps a result ledger for the tool.
 */
export const ToolWorkerMetadataKey = {
  /** Decimal milliseconds between heartbeats of a running call. */
  heartbeatMs: 'heartbeatMs',
  /** `true` when the worker records the tool's outcomes by `effectId` and answers repeats from the record. */
  ledger: 'ledger',
} as const;

/** A heartbeat or a progress report of a running call, sent to its reply subject before the reply. */
export const toolCallEventSchema = z.object({
  v: z.literal(1),
  callId: z.string().max(256),
  kind: z.enum([ToolCallEventKind.heartbeat, ToolCallEventKind.progress]),
  message: z.string().max(4096).optional(),
  progress: z.number().finite().optional(),
  total: z.number().finite().optional(),
});
export type ToolCallEvent = z.infer<typeof toolCallEventSchema>;
