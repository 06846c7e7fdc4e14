import { fromPromise } from 'xstate';
import { SafetyTier, ZERO_USAGE } from '../../src/protocol/index.ts';
import type { PreparedRequest } from '../../machines/turn.ts';
import type {
  CompactInput,
  CompactOutput,
  ExecuteToolsInput,
  ExecuteToolsOutput,
  HumanAnswer,
  PrepareInput,
  PrepareOutput,
  RequestApprovalInput,
  StreamInput,
  StreamOutput,
} from '../../machines/turn.ts';
import type { PlannedCall } from '../../machines/tool-batch.ts';

/** One recorded call of a fake turn actor: what it was given and the signal it was handed. */
export interface Recorded<TInput> {
  readonly input: TInput;
  readonly signal: AbortSignal;
}

type Implementation<TInput, TOutput> = (input: TInput, signal: AbortSignal) => Promise<TOutput> | TOutput;

/** How each fake behaves; anything left out gets a harmless default. */
export interface TurnScript {
  readonly prepare?: Implementation<PrepareInput, PrepareOutput>;
  readonly compact?: Implementation<CompactInput, CompactOutput | void>;
  readonly stream?: Implementation<StreamInput, StreamOutput>;
  readonly executeTools?: Implementation<ExecuteToolsInput, ExecuteToolsOutput | void>;
  readonly requestApproval?: Implementation<RequestApprovalInput, HumanAnswer | void>;
}

/** The fakes of the five turn actors, each recording its calls. */
export interface TurnFakes {
  readonly calls: {
    readonly prepare: Recorded<PrepareInput>[];
    readonly compact: Recorded<CompactInput>[];
    readonly stream: Recorded<StreamInput>[];
    readonly executeTools: Recorded<ExecuteToolsInput>[];
    readonly requestApproval: Recorded<RequestApprovalInput>[];
  };
  /** Every actor start, in order, as `name` or `executeTools:id,id`. */
  readonly log: string[];
  readonly actors: ReturnType<typeof buildActors>;
}

export const REQUEST: PreparedRequest = { model: 'scripted:default', messages: [{ role: 'user', content: 'hi' }], tools: [] };

export function read(id: string): PlannedCall {
  return { id, name: `read_${id}`, args: {}, tier: SafetyTier.readOnly };
}
export function write(id: string): PlannedCall {
  return { id, name: `write_${id}`, args: {}, tier: SafetyTier.sideEffecting };
}
export function privileged(id: string): PlannedCall {
  return { id, name: `admin_${id}`, args: {}, tier: SafetyTier.privileged };
}
export function unknownTool(id: string): PlannedCall {
  return { id, name: `missing_${id}`, args: {}, tier: 'unknown' };
}

/** A stream result with usage 10 in / 5 out and the given cost. */
export function answer(text: string, toolCalls: readonly PlannedCall[] = [], cost = 0.01): StreamOutput {
  return { text, toolCalls, usage: { inputTokens: 10, outputTokens: 5 }, cost };
}

/** A stream fake that returns the given outputs one call after another (the last one repeats). */
export function streamOf(...outputs: StreamOutput[]): Implementation<StreamInput, StreamOutput> {
  let next = 0;
  return () => {
    const output = outputs[Math.min(next, outputs.length - 1)];
    next += 1;
    if (!output) throw new Error('streamOf needs at least one output');
    return output;
  };
}

/** Never settles on its own; rejects with the signal's reason once aborted, as a well-behaved leaf does. */
export function untilAborted<T>(signal: AbortSignal): Promise<T> {
  return new Promise<T>((_resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets pending promise callbacks (and the actor events they send) run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 5; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
}

function buildActors(script: TurnScript, calls: TurnFakes['calls'], log: string[]) {
  return {
    prepare: fromPromise<PrepareOutput, PrepareInput>(async ({ input, signal }) => {
      calls.prepare.push({ input, signal });
      log.push('prepare');
      return script.prepare ? script.prepare(input, signal) : { needsCompaction: false, request: REQUEST };
    }),
    compact: fromPromise<CompactOutput, CompactInput>(async ({ input, signal }) => {
      calls.compact.push({ input, signal });
      log.push('compact');
      const output = script.compact ? await script.compact(input, signal) : undefined;
      return output ?? { usage: ZERO_USAGE, cost: 0 };
    }),
    stream: fromPromise<StreamOutput, StreamInput>(async ({ input, signal }) => {
      calls.stream.push({ input, signal });
      log.push('stream');
      return script.stream ? script.stream(input, signal) : answer('hello');
    }),
    executeTools: fromPromise<ExecuteToolsOutput | void, ExecuteToolsInput>(async ({ input, signal }) => {
      calls.executeTools.push({ input, signal });
      log.push(`executeTools:${input.calls.map((call) => call.id).join(',')}`);
      if (script.executeTools) return script.executeTools(input, signal);
    }),
    requestApproval: fromPromise<HumanAnswer | void, RequestApprovalInput>(async ({ input, signal }) => {
      calls.requestApproval.push({ input, signal });
      log.push(`requestApproval:${input.call.id}`);
      if (script.requestApproval) return script.requestApproval(input, signal);
    }),
  };
}

/**
 * Fakes for `turnMachine.provide({ actors })`: each records its input and signal, then does what the
 * script says.
 */
export function createTurnFakes(script: TurnScript = {}): TurnFakes {
  const calls: TurnFakes['calls'] = { prepare: [], compact: [], stream: [], executeTools: [], requestApproval: [] };
  const log: string[] = [];
  return { calls, log, actors: buildActors(script, calls, log) };
}
