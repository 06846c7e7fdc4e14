import { LogEventType } from '../../../src/protocol/index.ts';
import type { EventDataMap } from '../../../src/protocol/index.ts';
import type { Scrubber } from '../../../src/scrub/index.ts';

/**
 * The data of a log event as it is logged: the arguments of tool calls (in `assistant.message`, `tool.use` and
 * `approval.requested`) pass through the scrubber that tool output passes through, and an event whose arguments
 * held a secret says so (`argsRedacted`). Only what is logged changes: the call goes out with its real arguments,
 * which the turn keeps in memory. A turn resumed from the log (after its node stopped) does not send a call whose
 * logged arguments were redacted (see `resumeQueue`). Undefined for an event that carries no arguments, so that
 * the common case costs no await.
 *
 * @example
 * const logged = argsForLog(scrubber, type, data);
 * const data = logged ? await logged : data;
 */
export function argsForLog<T extends LogEventType>(scrubber: Pick<Scrubber, 'scrubValue'>, type: T, data: EventDataMap[T]): Promise<EventDataMap[T]> | undefined {
  switch (type) {
    case LogEventType.toolUse:
    case LogEventType.approvalRequested:
      return scrubCall(scrubber, data as EventDataMap['tool.use'] | EventDataMap['approval.requested']) as Promise<EventDataMap[T]>;
    case LogEventType.approvalDecided: {
      const decided = data as EventDataMap['approval.decided'];
      return decided.args === undefined ? undefined : (scrubCall(scrubber, decided as EventDataMap['approval.decided'] & { args: unknown }) as Promise<EventDataMap[T]>);
    }
    case LogEventType.assistantMessage: {
      const message = data as EventDataMap['assistant.message'];
      return message.toolCalls.length === 0 ? undefined : (scrubMessage(scrubber, message) as Promise<EventDataMap[T]>);
    }
    default:
      return undefined;
  }
}

/** True for an event whose data holds tool-call arguments that {@link argsForLog} scrubs. */
export function carriesArgs<T extends LogEventType>(type: T, data: EventDataMap[T]): boolean {
  if (type === LogEventType.toolUse || type === LogEventType.approvalRequested) return true;
  if (type === LogEventType.approvalDecided) return (data as EventDataMap['approval.decided']).args !== undefined;
  return type === LogEventType.assistantMessage && (data as EventDataMap['assistant.message']).toolCalls.length > 0;
}

async function scrubCall<D extends { readonly args: unknown; readonly argsRedacted?: boolean }>(scrubber: Pick<Scrubber, 'scrubValue'>, data: D): Promise<D> {
  const { value, redacted } = await scrubber.scrubValue(data.args);
  return redacted ? { ...data, args: value, argsRedacted: true } : data;
}

async function scrubMessage(scrubber: Pick<Scrubber, 'scrubValue'>, data: EventDataMap['assistant.message']): Promise<EventDataMap['assistant.message']> {
  const scrubbed = await Promise.all(data.toolCalls.map((call) => scrubber.scrubValue(call.args)));
  if (!scrubbed.some((each) => each.redacted)) return data;
  return {
    ...data,
    toolCalls: data.toolCalls.map((call, index) => (scrubbed[index]!.redacted ? { ...call, args: scrubbed[index]!.value } : call)),
    argsRedacted: data.toolCalls.filter((_, index) => scrubbed[index]!.redacted).map((call) => call.id),
  };
}

/**
 * `scrubber` remembering what it made of each arguments object: a step's calls are logged twice with the same
 * `args` object (in `assistant.message`, then in each `tool.use`), and a second full scrub would find the same.
 * Keyed weakly by the object itself, so nothing outlives the call; other values are scrubbed each time.
 */
export function rememberingScrubber(scrubber: Pick<Scrubber, 'scrubValue'>): Pick<Scrubber, 'scrubValue'> {
  const scrubbed = new WeakMap<object, ReturnType<Scrubber['scrubValue']>>();
  return {
    scrubValue(value) {
      if (typeof value !== 'object' || value === null) return scrubber.scrubValue(value);
      let result = scrubbed.get(value);
      if (!result) {
        result = scrubber.scrubValue(value);
        scrubbed.set(value, result);
        // A failed scrub is not remembered: the next append tries again.
        result.catch(() => scrubbed.delete(value));
      }
      return result;
    },
  };
}
