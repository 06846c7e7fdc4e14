import { z } from 'zod';

/**
 * The W3C Trace Context headers a message may carry (https://www.w3.org/TR/trace-context/): a prompt, a provider
 * call, a tool call or a memory request. With tracing on, each service reads them and its spans join the caller's
 * trace; with tracing off they are passed on untouched and nothing reads them.
 */
export const TraceHeader = {
  traceparent: 'traceparent',
  tracestate: 'tracestate',
} as const;
export type TraceHeader = (typeof TraceHeader)[keyof typeof TraceHeader];

/** A `traceparent` value of version 00 (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`). */
export const TRACEPARENT_PATTERN = /^[\da-f]{2}-([\da-f]{32})-[\da-f]{16}-[\da-f]{2}$/;

/**
 * A trace context as the log keeps it (`user.message.trace`, `turn.started.trace`): the two W3C header values.
 * A turn resumed on another node continues the trace its `turn.started` names.
 */
export const traceContextSchema = z.object({
  traceparent: z.string().max(256),
  tracestate: z.string().max(512).optional(),
});
export type TraceContext = z.infer<typeof traceContextSchema>;

/**
 * The trace id of a `traceparent` (32 lowercase hex digits), or undefined when it is not a valid one (an all-zero
 * trace id is invalid).
 *
 * @example
 * traceIdOf('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'); // '4bf92f3577b34da6a3ce929d0e0e4736'
 */
export function traceIdOf(traceparent: string | undefined): string | undefined {
  const id = traceparent === undefined ? undefined : TRACEPARENT_PATTERN.exec(traceparent.trim())?.[1];
  return id === undefined || /^0+$/.test(id) ? undefined : id;
}
