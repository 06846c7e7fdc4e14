import { TaskState } from '@a2a-js/sdk';
import type { AgentCard, SendMessageRequest, StreamResponse } from '@a2a-js/sdk';
import type { A2ARequestHandler } from '@a2a-js/sdk/server';
import {
  A2AError,
  ExtendedAgentCardNotConfiguredError,
  PushNotificationNotSupportedError,
  RequestMalformedError,
  TaskNotCancelableError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from '@a2a-js/sdk/errors';
import type { AgentbusClient, SessionTarget } from '../../src/client/index.ts';
import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import type { Prompt } from '../../src/protocol/index.ts';
import type { A2aConfig } from './config.ts';
import { readMessageInput } from './message-input.ts';
import type { MessageInput } from './message-input.ts';
import type { TaskReader } from './task-reader.ts';
import { followTurn, promptWhenReady } from './turn-follow.ts';
import { agentMessageOf, answerArtifact, finalArtifactOf, isTerminal, parseTaskId, recordEvent, stateOf, taskIdOf, taskOf } from './turn-task.ts';
import type { TurnRecord } from './turn-task.ts';

/** Collaborators of {@link createRequestHandler}. */
export interface RequestHandlerOptions {
  readonly client: AgentbusClient;
  readonly reader: TaskReader;
  readonly config: A2aConfig;
  readonly card: AgentCard;
  readonly logger: Logger;
  /** Aborted when the server stops: every request still following a turn ends (the turns go on). */
  readonly stopping: AbortSignal;
  /** The session id of a message that names no context. */
  readonly newSessionId: () => string;
  /** How long CancelTask waits for the turn's `turn.ended` before it answers with the task as it is; default 10 s. */
  readonly cancelWaitMs?: number;
}

/** An agentbus refusal as the A2A error nearest to it; anything else passes unchanged (the SDK makes it -32603). */
function toA2aError(error: unknown): unknown {
  if (error instanceof A2AError || !(error instanceof AgentbusError)) return error;
  switch (error.code) {
    case ErrorCode.invalidInput:
    case ErrorCode.payloadTooLarge:
      return new RequestMalformedError({ message: error.message, cause: error });
    case ErrorCode.sessionDeleted:
      return new UnsupportedOperationError({ message: `${error.message}: start a new context`, cause: error });
    default:
      return error;
  }
}

/** What a stream has told of its task so far: the state last sent, and the step whose text the answer shows. */
interface StreamProgress {
  state: TaskState;
  step: number | undefined;
}

/**
 * The stream responses one event of a running turn adds (after the task itself): a delta as a chunk of the answer
 * artifact (each step's text replaces the last step's, so that the artifact ends as the turn's final text), a change of
 * state as a status update, and the end as the whole answer (last chunk) and the final status with its message.
 */
function* streamed(record: TurnRecord, event: { type: string; step?: number | undefined; data: unknown }, progress: StreamProgress): Generator<StreamResponse> {
  const taskId = taskIdOf(record.sessionId, record.turnId);
  const contextId = record.sessionId;
  if (event.type === 'assistant.delta') {
    const append = progress.step === event.step;
    progress.step = event.step;
    const artifact = answerArtifact((event.data as { text: string }).text);
    yield { payload: { $case: 'artifactUpdate', value: { taskId, contextId, artifact, append, lastChunk: false, metadata: undefined } } };
    return;
  }
  const state = stateOf(record);
  if (state === progress.state) return;
  progress.state = state;
  const timestamp = new Date(record.lastTs).toISOString();
  const final = finalArtifactOf(record);
  if (state === TaskState.TASK_STATE_COMPLETED && final) {
    yield { payload: { $case: 'artifactUpdate', value: { taskId, contextId, artifact: final, append: false, lastChunk: true, metadata: undefined } } };
  }
  yield { payload: { $case: 'statusUpdate', value: { taskId, contextId, status: { state, message: agentMessageOf(record), timestamp }, metadata: undefined } } };
}

/**
 * The A2A request handler of agentbus (the SDK's transports call it): SendMessage prompts the context's session and
 * follows the turn, GetTask, ListTasks and CancelTask read (and cancel) turns from the session logs, streams map the
 * turn's events to status and artifact updates. No task state is kept here: a restarted server answers the same.
 * Push notifications and the extended card are not offered (their errors, as the card says).
 */
export function createRequestHandler(options: RequestHandlerOptions): A2ARequestHandler {
  const { client, reader, config, logger } = options;
  const target = (sessionId: string): SessionTarget => ({ tenant: config.tenant, sessionId });

  function promptOf(input: MessageInput, params: SendMessageRequest): Prompt {
    return {
      text: input.text,
      ...(config.model ? { model: config.model } : {}),
      ...(config.maxSteps ? { maxSteps: config.maxSteps } : {}),
      deadlineMs: config.turnTimeoutMs,
      metadata: { a2a: { messageId: input.messageId, ...(params.metadata ? { requestMetadata: params.metadata } : {}) } },
    };
  }

  /** A message may name a task only to say which context it continues: a turn that ended takes no more input. */
  async function checkNamedTask(input: MessageInput, signal: AbortSignal): Promise<void> {
    if (input.taskId === undefined) return;
    const named = parseTaskId(input.taskId);
    if (!named || named.sessionId !== input.sessionId) throw new TaskNotFoundError(`no task ${JSON.stringify(input.taskId)} in context ${input.sessionId}`);
    const record = await reader.turn(named.sessionId, named.turnId, signal);
    if (!record) throw new TaskNotFoundError(`no task ${input.taskId}`);
    throw new UnsupportedOperationError(
      isTerminal(stateOf(record))
        ? `task ${input.taskId} is in a terminal state; send a message without taskId (same contextId) to continue the conversation`
        : `task ${input.taskId} is running and takes no input; send a message without taskId (same contextId): it runs after this one`,
    );
  }

  async function prepare(params: SendMessageRequest, signal: AbortSignal) {
    const input = readMessageInput(params, options.newSessionId);
    await checkNamedTask(input, signal);
    return { input, prompt: promptOf(input, params) };
  }

  /** The turn's record from the log, waiting (bounded) for it when a follow saw less than the log holds. */
  async function recorded(sessionId: string, turnId: string, signal: AbortSignal): Promise<TurnRecord> {
    const record = await reader.turn(sessionId, turnId, signal);
    if (!record) throw new AgentbusError(ErrorCode.internal, `turn ${turnId} of session ${sessionId} is not in its log`);
    return record;
  }

  const handler: A2ARequestHandler = {
    async getAgentCard() {
      return options.card;
    },
    async getAuthenticatedExtendedAgentCard() {
      throw new ExtendedAgentCardNotConfiguredError('this agent has no extended card');
    },

    async sendMessage(params) {
      const signal = options.stopping;
      try {
        const { input, prompt } = await prepare(params, signal);
        const view = { historyLength: params.configuration?.historyLength, includeArtifacts: true };
        if (params.configuration?.returnImmediately) {
          const { turnId } = await promptWhenReady(client, target(input.sessionId), prompt, { signal, readyTimeoutMs: config.readyTimeoutMs });
          return taskOf(await recorded(input.sessionId, turnId, signal), view);
        }
        let record: TurnRecord | undefined;
        let turnId: string | undefined;
        for await (const followed of followTurn(client, target(input.sessionId), prompt, { signal, readyTimeoutMs: config.readyTimeoutMs })) {
          if (followed.type === 'accepted') turnId = followed.turnId;
          else record = recordEvent(record, followed.event);
          // A blocking call returns at an interrupted state too (A2A): the turn waits for a human.
          if (record && stateOf(record) === TaskState.TASK_STATE_INPUT_REQUIRED) break;
        }
        // The watch saw the turn from its prompt on; should it have missed the prompt, the log has it.
        if (!record || (!record.ended && stateOf(record) !== TaskState.TASK_STATE_INPUT_REQUIRED)) record = await recorded(input.sessionId, turnId!, signal);
        return taskOf(record, view);
      } catch (error) {
        throw toA2aError(error);
      }
    },

    async *sendMessageStream(params) {
      const signal = options.stopping;
      let prepared;
      try {
        prepared = await prepare(params, signal);
      } catch (error) {
        throw toA2aError(error);
      }
      const { input, prompt } = prepared;
      let record: TurnRecord | undefined;
      const progress: StreamProgress = { state: TaskState.TASK_STATE_UNSPECIFIED, step: undefined };
      try {
        for await (const followed of followTurn(client, target(input.sessionId), prompt, { signal, readyTimeoutMs: config.readyTimeoutMs })) {
          if (followed.type === 'accepted') continue;
          const opened = record !== undefined;
          record = recordEvent(record, followed.event);
          if (!record) continue;
          // The stream opens with the task (A2A §3.1.2), as soon as the turn's prompt is in the log.
          if (!opened) {
            progress.state = stateOf(record);
            yield { payload: { $case: 'task', value: taskOf(record, { includeArtifacts: true }) } };
            continue;
          }
          yield* streamed(record, followed.event, progress);
        }
      } catch (error) {
        throw toA2aError(error);
      }
    },

    async getTask(params) {
      const named = parseTaskId(params.id ?? '');
      if (!named) throw new TaskNotFoundError(`no task ${JSON.stringify(params.id)}`);
      if (params.historyLength !== undefined && params.historyLength < 0) throw new RequestMalformedError('historyLength must not be negative');
      const record = await reader.turn(named.sessionId, named.turnId, options.stopping);
      if (!record) throw new TaskNotFoundError(`no task ${params.id}`);
      return taskOf(record, { historyLength: params.historyLength, includeArtifacts: true });
    },

    listTasks: (params) => reader.list(params, options.stopping),

    async cancelTask(params) {
      const named = parseTaskId(params.id ?? '');
      if (!named) throw new TaskNotFoundError(`no task ${JSON.stringify(params.id)}`);
      const signal = options.stopping;
      const turns = await reader.turns(named.sessionId, signal);
      const record = turns.find((turn) => turn.turnId === named.turnId);
      if (!record) throw new TaskNotFoundError(`no task ${params.id}`);
      if (isTerminal(stateOf(record))) throw new TaskNotCancelableError(`task ${params.id} has ended (${record.ended?.data.reason})`);
      // A cancel stops the session's running turn: not this one while it waits behind another.
      if (turns.some((turn) => turn.turnId !== record.turnId && !turn.ended && turn.prompt.ts <= record.prompt.ts)) {
        throw new TaskNotCancelableError(`task ${params.id} is queued behind another turn of its context; it cannot be cancelled before it runs`);
      }
      const reply = await client.cancel(target(named.sessionId), 'cancelled by an A2A client', { signal, timeoutMs: 10_000 }).catch((error: unknown) => {
        throw toA2aError(error);
      });
      if (!reply.ok) {
        // Nothing was running: the turn ended meanwhile, or it has not started yet.
        const now = await recorded(named.sessionId, named.turnId, signal);
        throw new TaskNotCancelableError(now.ended ? `task ${params.id} has ended (${now.ended.data.reason})` : `task ${params.id} is not running yet: ${reply.error?.message ?? 'no turn runs'}`);
      }
      if (reply.turnId !== undefined && reply.turnId !== named.turnId) logger.warn({ taskId: params.id, cancelled: reply.turnId }, 'CancelTask stopped another turn than its own');
      const deadline = Date.now() + (options.cancelWaitMs ?? 10_000);
      for (;;) {
        const now = await recorded(named.sessionId, named.turnId, signal);
        if (now.ended) {
          if (stateOf(now) !== TaskState.TASK_STATE_CANCELED) throw new TaskNotCancelableError(`task ${params.id} ended (${now.ended.data.reason}) before it could be cancelled`);
          return taskOf(now, { includeArtifacts: true });
        }
        if (Date.now() >= deadline) return taskOf(now, { includeArtifacts: true });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },

    async *resubscribe(params) {
      const named = parseTaskId(params.id ?? '');
      if (!named) throw new TaskNotFoundError(`no task ${JSON.stringify(params.id)}`);
      const signal = options.stopping;
      const known = await reader.turn(named.sessionId, named.turnId, signal);
      if (!known) throw new TaskNotFoundError(`no task ${params.id}`);
      yield { payload: { $case: 'task', value: taskOf(known, { includeArtifacts: true }) } };
      if (known.ended) return;
      const progress: StreamProgress = { state: stateOf(known), step: undefined };
      // Watched from the log's start (read back through memory's history, then followed), so that nothing between the
      // read above and the subscriptions is lost; what the task already showed is not sent again.
      const watch = await client.watch(target(named.sessionId), { signal, from: { log: 0 } });
      try {
        let record: TurnRecord | undefined;
        for await (const { event } of watch) {
          if (event.turnId !== named.turnId) continue;
          record = recordEvent(record, event);
          if (!record) continue;
          yield* streamed(record, event, progress);
          if (record.ended) return;
        }
      } finally {
        await watch.close();
      }
    },

    async createTaskPushNotificationConfig() {
      throw new PushNotificationNotSupportedError();
    },
    async getTaskPushNotificationConfig() {
      throw new PushNotificationNotSupportedError();
    },
    async listTaskPushNotificationConfigs() {
      throw new PushNotificationNotSupportedError();
    },
    async deleteTaskPushNotificationConfig() {
      throw new PushNotificationNotSupportedError();
    },
  };
  return handler;
}

