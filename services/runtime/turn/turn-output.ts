import { ErrorCode, LogEventType } from '../../../src/protocol/index.ts';
import type { ErrorData, LogEvent } from '../../../src/protocol/index.ts';
import { compileOutputSchema } from '../../../src/output-schema.ts';
import type { OutputCheck, OutputSchemaCompiler, OutputValidator } from '../../../src/output-schema.ts';

/** What the typed-output actors read of a turn's log: its events, prompt first. */
interface TurnEvents {
  turnEvents(turnId: string): LogEvent[];
}

/** The `outputSchema` of a turn's prompt, as logged (so a resumed turn has it too), or undefined. */
export function outputSchemaOf(transcript: TurnEvents, turnId: string): Record<string, unknown> | undefined {
  const prompt = transcript.turnEvents(turnId).find((event) => event.type === LogEventType.userMessage && !event.data.steer);
  return prompt?.type === LogEventType.userMessage ? prompt.data.outputSchema : undefined;
}

/** Whether the turn already asked once for a corrected final answer (its `outputRetry` message is logged). */
export function outputRetried(transcript: TurnEvents, turnId: string): boolean {
  return transcript.turnEvents(turnId).some((event) => event.type === LogEventType.userMessage && event.data.outputRetry === true);
}

/** The validator of `schema`: from the runtime's compiler (which keeps recent ones) when there is one, else compiled afresh. */
export function validatorOf(schema: Record<string, unknown>, schemas: OutputSchemaCompiler | undefined): Promise<OutputValidator> {
  return schemas?.compile(schema) ?? compileOutputSchema(schema);
}

/** The error a turn fails with when its final answer still does not match its `outputSchema`. */
export function outputInvalidError(reason: string): ErrorData {
  return { code: ErrorCode.outputInvalid, message: `the final answer does not match the prompt's outputSchema: ${reason}`, retryable: false };
}

/** A check's outcome as the `turn.ended` fields it gives: the parsed `output`, or the `output_invalid` error. */
export function endingOf(check: OutputCheck): { readonly output: unknown } | { readonly error: ErrorData } {
  return check.ok ? { output: check.value } : { error: outputInvalidError(check.message) };
}

/**
 * How a turn found answered in the log (its node died before `turn.ended`) ends when its prompt had an `outputSchema`:
 * its last answer checked now, without another retry. Nothing when it had none.
 */
export async function resumedEnding(schema: Record<string, unknown> | undefined, text: string, schemas?: OutputSchemaCompiler): Promise<ReturnType<typeof endingOf> | undefined> {
  if (!schema) return undefined;
  try {
    return endingOf((await validatorOf(schema, schemas)).check(text));
  } catch (error) {
    return { error: outputInvalidError(error instanceof Error ? error.message : String(error)) };
  }
}
