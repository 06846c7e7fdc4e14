import type { StateClient } from '../bus/state-client.ts';
import type { z } from 'zod';
import { AgentbusError, ErrorCode, TimeoutError, abortReason, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import type { ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import { abortPromise } from '../bus/request.ts';
import type { AnyToolDefinition, ToolProgress } from './define-tool.ts';

/** Inputs of one tool call on a worker. */
export interface ExecuteToolCallOptions {
  readonly tool: AnyToolDefinition;
  readonly request: ToolCallRequest;
  /** The call's logger, made on first use: most calls never log, and a pino child costs more than a short call. */
  readonly logger: () => Logger;
  /** Aborts on the caller's cancel or the worker stopping. */
  readonly signal: AbortSignal;
  readonly now: () => number;
  /** The tenant's state client a tool's `context.state` is (the worker's, on its connection). */
  readonly stateFor?: (tenant: string) => StateClient;
  /** Where the tool's `context.progress` reports go (the worker sends them to the caller); ignored when absent. */
  readonly onProgress?: (update: ToolProgress) => void;
  /** Called right before `execute` runs: from here on the call may have had its effect (the result ledger records it). */
  readonly onStarted?: () => void;
}

/** A state client whose calls take `signal` unless they name their own. */
function stateWithSignal(client: StateClient, signal: AbortSignal): StateClient {
  return {
    save: (key, value, options = {}) => client.save(key, value, { signal, ...options }),
    load: (key, options = {}) => client.load(key, { signal, ...options }),
    delete: (key, options = {}) => client.delete(key, { signal, ...options }),
  };
}

/** Thrown by `context.ask` for a question the request holds no answer to: the call is suspended on it. */
class InputRequired extends Error {
  constructor(
    readonly question: string,
    readonly schema: Readonly<Record<string, unknown>> | undefined,
  ) {
    super(`the call asks the user: ${question}`);
    this.name = 'InputRequired';
  }
}

/**
 * `context.ask` of one run: the n-th question is answered by the request's n-th input; one past them suspends the
 * call (rejects with {@link InputRequired}, which a tool that catches errors must let through).
 */
function askerOf(request: ToolCallRequest) {
  let asked = 0;
  return (question: string, options: { readonly schema?: Readonly<Record<string, unknown>> } = {}): Promise<unknown> => {
    const given = request.inputs?.[asked];
    asked += 1;
    if (given) return Promise.resolve(given.answer);
    return Promise.reject(new InputRequired(question, options.schema));
  };
}

/** A failed reply of a call. */
export function errorReply(callId: string, error: ErrorData): ToolCallReply {
  return { v: 1, callId, ok: false, error: { code: error.code, message: error.message, retryable: error.retryable } };
}

/** The zod issues of bad arguments as one line a model can act on. */
export function formatIssues(error: z.ZodError, limit = 5): string {
  const lines = error.issues.slice(0, limit).map((issue) => {
    const path = issue.path.length > 0 ? `${issue.path.map(String).join('.')}: ` : '';
    return `${path}${issue.message}`;
  });
  const more = error.issues.length > limit ? `; and ${error.issues.length - limit} more` : '';
  return `${lines.join('; ')}${more}`;
}

/**
 * Codes that tell the caller something of the worker, not of the tool: a call the worker never started
 * (`no_responders`, `busy`) is sent again whatever its tier, and a lost worker (`worker_lost`) makes the call
 * be repeated. A tool that throws one (a `NoRespondersError` of a request it made) must not say that of a call it
 * ran: its failure is `tool_failed`, the code kept in the message.
 */
const WORKER_CODES: ReadonlySet<string> = new Set([ErrorCode.noResponders, ErrorCode.busy, ErrorCode.workerLost]);

function failure(error: unknown): ErrorData {
  if (error instanceof AgentbusError) {
    const data = toErrorData(error);
    return WORKER_CODES.has(data.code) ? { code: ErrorCode.toolFailed, message: `${data.code}: ${data.message}`, retryable: false } : data;
  }
  const message = error instanceof Error ? error.message : String(error);
  return { code: ErrorCode.toolFailed, message: message || 'the tool failed', retryable: false };
}

/**
 * Runs one call of a tool: checks the arguments against the tool's schema, runs `execute` under a
 * signal that combines the caller's cancel, the request deadline and the tool's timeout, and turns the
 * outcome into a reply. Never throws: every failure is a reply with an error code (`invalid_arguments`,
 * `timeout`, `cancelled`, `tool_failed` or the code of a thrown `AgentbusError`). A tool that ignores its
 * signal is not waited for: the reply goes out when the signal aborts, and the late result is dropped.
 */
export async function executeToolCall(options: ExecuteToolCallOptions): Promise<ToolCallReply> {
  const { tool, request } = options;
  const callId = request.callId;
  let logger: Logger | undefined;
  const log = () => (logger ??= options.logger());
  if (request.name !== tool.name) {
    return errorReply(callId, {
      code: ErrorCode.invalidInput,
      message: `request names tool ${JSON.stringify(request.name)} but was sent to ${tool.name}`,
      retryable: false,
    });
  }
  // Models often send no arguments at all for a tool without parameters. A schema's own transform or refine may
  // throw rather than report: that is bad arguments too, not a crash of the worker.
  let parsed: ReturnType<typeof tool.parameters.safeParse>;
  try {
    parsed = tool.parameters.safeParse(request.args ?? {});
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return errorReply(callId, { code: ErrorCode.invalidArguments, message: `invalid arguments for ${tool.name}: ${message}`, retryable: false });
  }
  if (!parsed.success) {
    return errorReply(callId, {
      code: ErrorCode.invalidArguments,
      message: `invalid arguments for ${tool.name}: ${formatIssues(parsed.error)}`,
      retryable: false,
    });
  }
  const remaining = request.deadline - options.now();
  if (remaining <= 0) {
    return errorReply(callId, toErrorData(new TimeoutError(`the deadline of ${tool.name} passed before it started`, 0)));
  }
  if (options.signal.aborted) return errorReply(callId, toErrorData(abortReason(options.signal)));

  const limit = Math.min(tool.timeoutMs, remaining);
  // One controller for the caller's abort and the time limit (cheaper than AbortSignal.any per call).
  const controller = new AbortController();
  const { signal } = controller;
  const onAbort = () => controller.abort(options.signal.reason);
  options.signal.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => {
    const which = limit === tool.timeoutMs ? `its ${limit} ms timeout` : `the caller's deadline (${Math.round(limit)} ms)`;
    controller.abort(new TimeoutError(`${tool.name} ran past ${which}`, limit));
  }, limit);
  const { promise: aborted, cleanup } = abortPromise(signal);
  const ask = askerOf(request);
  try {
    options.onStarted?.();
    const output = await Promise.race([
      Promise.resolve().then(() =>
        tool.execute(parsed.data, {
          signal,
          callId,
          effectId: request.effectId,
          tenant: request.tenant,
          sessionId: request.sessionId,
          turnId: request.turnId,
          deadline: request.deadline,
          get logger() {
            return log();
          },
          ask,
          progress(update) {
            try {
              options.onProgress?.(update);
            } catch (err) {
              log().warn({ err }, 'a progress report failed');
            }
          },
          get state() {
            if (!options.stateFor) throw new Error('this tool runs without a state service: context.state needs a tool worker on the bus');
            return stateWithSignal(options.stateFor(request.tenant), signal);
          },
        }),
      ),
      aborted,
    ]);
    return { v: 1, callId, ok: true, output: output ?? null };
  } catch (error) {
    if (signal.aborted) return errorReply(callId, toErrorData(abortReason(signal)));
    if (error instanceof InputRequired) {
      const inputRequest = { question: error.question, ...(error.schema ? { schema: { ...error.schema } } : {}) };
      return { v: 1, callId, ok: false, error: { code: ErrorCode.inputRequired, message: `the call needs an answer from the user: ${error.question}`, retryable: false }, inputRequest };
    }
    log().debug({ err: error }, 'tool failed');
    return errorReply(callId, failure(error));
  } finally {
    clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
    cleanup();
  }
}
