import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';

/** The output of current_time. */
export interface CurrentTime {
  /** ISO 8601 local time in the zone, with its UTC offset: `2026-03-01T14:05:09.120+01:00`. */
  readonly iso: string;
  /** Epoch milliseconds. */
  readonly unixMs: number;
  /** The IANA zone the time is shown in. */
  readonly timeZone: string;
}

const parameters = z.strictObject({
  timeZone: z.string().min(1).max(64).optional().describe("IANA time zone such as 'Europe/Paris' or 'UTC'; default the worker's zone"),
});

function formatterFor(timeZone: string | undefined): Intl.DateTimeFormat {
  try {
    return new Intl.DateTimeFormat('en-US', {
      ...(timeZone === undefined ? {} : { timeZone }),
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      hourCycle: 'h23',
      timeZoneName: 'longOffset',
    });
  } catch (error) {
    if (error instanceof RangeError) {
      throw new ToolError(ErrorCode.invalidArguments, `unknown time zone ${JSON.stringify(timeZone)}; use an IANA name such as Europe/Paris or UTC`, { cause: error });
    }
    throw error;
  }
}

/** `unixMs` as ISO 8601 local time of the formatter's zone, with the zone's offset at that instant. */
function isoIn(formatter: Intl.DateTimeFormat, unixMs: number): string {
  const parts = Object.fromEntries(formatter.formatToParts(unixMs).map((part) => [part.type, part.value]));
  // longOffset reads `GMT+01:00`, or just `GMT` for a zero offset.
  const offset = (parts['timeZoneName'] ?? 'GMT').replace(/^GMT/, '') || '+00:00';
  const millis = String(((unixMs % 1000) + 1000) % 1000).padStart(3, '0');
  return `${parts['year']}-${parts['month']}-${parts['day']}T${parts['hour']}:${parts['minute']}:${parts['second']}.${millis}${offset}`;
}

/**
 * `current_time`: the current time in a time zone, as ISO 8601 with offset and as epoch milliseconds.
 * `now` is the clock (injected for tests).
 *
 * @example
 * await createCurrentTimeTool().execute({ timeZone: 'Asia/Tokyo' }, context);
 * // { iso: '2026-03-01T22:05:09.120+09:00', unixMs: 1772370309120, timeZone: 'Asia/Tokyo' }
 */
export function createCurrentTimeTool(now: () => number = Date.now): ToolDefinition<typeof parameters> {
  return defineTool({
    name: 'current_time',
    description: 'The current date and time in a time zone (default the worker\'s): ISO 8601 with UTC offset, epoch milliseconds, and the zone.',
    parameters,
    tier: SafetyTier.readOnly,
    timeoutMs: 1_000,
    idempotent: true,
    execute({ timeZone }): CurrentTime {
      const formatter = formatterFor(timeZone);
      const unixMs = now();
      // The zone as asked (ICU may canonicalise Asia/Kolkata to Asia/Calcutta), else the one the worker runs in.
      return { iso: isoIn(formatter, unixMs), unixMs, timeZone: timeZone ?? formatter.resolvedOptions().timeZone };
    },
  });
}
