import { createActor } from 'xstate';
import type { Actor, InspectionEvent } from 'xstate';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { ErrorCode, LogEventType, TurnEndReason } from '../../src/protocol/index.ts';
import type { Approve, EnvelopeFactory, ErrorData, Prompt, ToolSpec } from '../../src/protocol/index.ts';
import type { Logger } from '../../src/logging.ts';
import type { Scrubber } from '../../src/scrub.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { PlannedCall, QueuedTurn } from '../../machines/index.ts';
import type { RuntimeConfig } from './config.ts';
import type { LivePublisher } from './live-publisher.ts';
import { turnModels } from './model-chain.ts';
import type { PromptModels } from './model-chain.ts';
import type { ProviderPort, ToolPort } from './ports.ts';
import { createSessionWriter } from './session-writer.ts';
import { createTranscript } from './transcript.ts';
import type { UnfinishedTurn } from './transcript.ts';
import { createSessionLogic } from './turn-actors.ts';
import type { SessionLogic } from './turn-actors.ts';

/** The answer to a command sent to a session. */
export type CommandResult = { ok: true; turnId?: string } | { ok: false; error: ErrorData };

/** One live session on this node. */
export interface SessionHost {
  readonly tenant: string;
  readonly sessionId: string;
  /** Appends the prompt as `user.message` and queues its turn. */
  prompt(prompt: Prompt): Promise<{ turnId: string }>;
  cancel(reason?: string): CommandResult;
  steer(text: string): CommandResult;
  approve(decision: Approve): Promise<CommandResult>;
  /** True while a turn runs or waits. */
  busy(): boolean;
  /** Resolves `true` when no turn runs or waits, `false` when the session stops first. */
  whenIdle(): Promise<boolean>;
  /** Stops the actor; in-flight work is aborted, and the log keeps what is needed to resume. */
  stop(): void;
}

/** What the runtime shares with every session it hosts. */
export interface SessionHostDeps {
  readonly log: SessionLog;
  readonly envelopes: EnvelopeFactory;
  readonly live: LivePublisher;
  readonly provider: ProviderPort;
  readonly tools: ToolPort;
  readonly tokens: TokenCounter;
  readonly toolTokens: (specs: readonly ToolSpec[]) => number;
  readonly scrubber: Scrubber;
  readonly logger: Logger;
  readonly config: RuntimeConfig;
  readonly newId: () => string;
  readonly now: () => number;
}

const noActiveTurn = (sessionId: string): CommandResult => ({
  ok: false,
  error: { code: ErrorCode.notFound, message: `session ${sessionId} has no running turn`, retryable: false },
});

/**
 * Opens a session on this node: reads its log back, appends `session.created` for a new one, and
 * resumes turns the log holds without a `turn.ended` (completed tool calls are not run again).
 */
export async function openSession(deps: SessionHostDeps, tenant: string, sessionId: string, options: { signal?: AbortSignal } = {}): Promise<SessionHost> {
  const logger = deps.logger.child({ tenant, sessionId });
  const events = await deps.log.read(tenant, sessionId, options.signal ? { signal: options.signal } : {});
  const transcript = createTranscript(events);
  const writer = createSessionWriter({ tenant, sessionId, log: deps.log, envelopes: deps.envelopes, transcript });
  let steers: string[] = [];
  const logic: SessionLogic = createSessionLogic({
    tenant,
    sessionId,
    writer,
    transcript,
    live: deps.live,
    provider: deps.provider,
    tools: deps.tools,
    tokens: deps.tokens,
    toolTokens: deps.toolTokens,
    scrubber: deps.scrubber,
    logger,
    config: deps.config,
    newId: deps.newId,
    now: deps.now,
    takeSteers: () => {
      const taken = steers;
      steers = [];
      return taken;
    },
  });

  if (events.length === 0) {
    await writer.append(LogEventType.sessionCreated, {}, { createdBy: deps.config.nodeId });
  }
  const queue = await resumeQueue(deps, transcript.unfinishedTurns(), writer.append, options.signal);

  const lastState = new Map<string, string>();
  const inspect = (event: InspectionEvent) => {
    if (event.type !== '@xstate.snapshot') return;
    const snapshot = event.snapshot as { value?: unknown; machine?: { id?: string } };
    const machine = snapshot.machine?.id;
    if ((machine !== 'turn' && machine !== 'session') || typeof snapshot.value !== 'string') return;
    const key = `${machine}:${event.actorRef.sessionId}`;
    if (lastState.get(key) === snapshot.value) return;
    lastState.set(key, snapshot.value);
    const current = actor?.getSnapshot().context.current;
    try {
      deps.live.publish('state', { tenant, sessionId, ...(current ? { turnId: current.turnId } : {}) }, {
        machine,
        value: snapshot.value,
        event: event.event.type,
      });
    } catch (err) {
      logger.warn({ err }, 'state event not published');
    }
  };
  let actor: Actor<SessionLogic> | undefined;
  actor = createActor(logic, { input: { queue }, inspect });
  const idleWaiters = new Set<(idle: boolean) => void>();
  actor.subscribe({
    next: (snapshot) => {
      if (snapshot.value === 'idle' && snapshot.context.queue.length === 0) {
        for (const resolve of idleWaiters) resolve(true);
        idleWaiters.clear();
      }
    },
    error: (err) => logger.error({ err }, 'session actor failed'),
  });
  actor.start();
  const running = () => actor?.getSnapshot().value === 'running';
  const busy = () => {
    const snapshot = actor?.getSnapshot();
    return snapshot !== undefined && (snapshot.value !== 'idle' || snapshot.context.queue.length > 0);
  };

  return {
    tenant,
    sessionId,
    async prompt(prompt) {
      const turnId = deps.newId();
      await writer.append(LogEventType.userMessage, { turnId }, prompt);
      actor?.send({ type: 'PROMPT', turn: queuedTurn(deps.config, turnId, prompt) });
      return { turnId };
    },
    cancel(reason) {
      if (!running()) return noActiveTurn(sessionId);
      const turnId = actor?.getSnapshot().context.current?.turnId;
      actor?.send(reason === undefined ? { type: 'CANCEL' } : { type: 'CANCEL', reason });
      return turnId ? { ok: true, turnId } : { ok: true };
    },
    steer(text) {
      if (!running()) return noActiveTurn(sessionId);
      steers.push(text);
      const turnId = actor?.getSnapshot().context.current?.turnId;
      return turnId ? { ok: true, turnId } : { ok: true };
    },
    async approve(decision) {
      const turnId = actor?.getSnapshot().context.current?.turnId;
      if (!running() || !turnId) return noActiveTurn(sessionId);
      const requested = transcript.events.some(
        (event) => event.turnId === turnId && event.type === LogEventType.approvalRequested && event.data.toolCallId === decision.toolCallId,
      );
      const decided = transcript.events.some(
        (event) => event.turnId === turnId && event.type === LogEventType.approvalDecided && event.data.toolCallId === decision.toolCallId,
      );
      if (!requested || decided) {
        return {
          ok: false,
          error: { code: ErrorCode.notFound, message: `no approval is awaited for tool call ${decision.toolCallId}`, retryable: false },
        };
      }
      await writer.append(LogEventType.approvalDecided, { turnId }, decision);
      actor?.send({ type: 'APPROVAL', ...decision });
      return { ok: true, turnId };
    },
    busy,
    whenIdle() {
      if (!actor) return Promise.resolve(false);
      if (!busy()) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => idleWaiters.add(resolve));
    },
    stop() {
      actor?.stop();
      actor = undefined;
      for (const resolve of idleWaiters) resolve(false);
      idleWaiters.clear();
    },
  };
}

function queuedTurn(config: RuntimeConfig, turnId: string, prompt: PromptModels & { readonly maxSteps?: number; readonly maxCost?: number }): QueuedTurn {
  const turn: QueuedTurn = { turnId, ...turnModels(prompt, config.defaultModel), maxSteps: prompt.maxSteps ?? config.maxSteps };
  return prompt.maxCost === undefined ? turn : { ...turn, maxCost: prompt.maxCost };
}

/** Turns found unfinished in the log, as the queue to run; a turn that had already answered is ended now. */
async function resumeQueue(
  deps: SessionHostDeps,
  unfinished: readonly UnfinishedTurn[],
  append: ReturnType<typeof createSessionWriter>['append'],
  signal?: AbortSignal,
): Promise<QueuedTurn[]> {
  if (unfinished.length === 0) return [];
  const tools = await deps.tools.listTools(signal ? { signal } : {});
  const tierOf = new Map(tools.map((tool) => [tool.name, tool.tier]));
  const queue: QueuedTurn[] = [];
  for (const turn of unfinished) {
    const base = queuedTurn(deps.config, turn.turnId, turn.prompt);
    if (turn.lastStep === 0) {
      queue.push(base);
      continue;
    }
    const ending = { usage: turn.usage, cost: turn.cost, steps: turn.lastStep };
    if (turn.answered) {
      await append(LogEventType.turnEnded, { turnId: turn.turnId, step: turn.lastStep }, { reason: TurnEndReason.yielded, text: turn.text, ...ending });
      continue;
    }
    const pendingCalls: PlannedCall[] = turn.openCalls.map((call) => ({ ...call, tier: tierOf.get(call.name) ?? 'unknown' }));
    if (pendingCalls.length === 0 && turn.lastStep >= base.maxSteps) {
      await append(LogEventType.turnEnded, { turnId: turn.turnId, step: turn.lastStep }, { reason: TurnEndReason.budgetExceeded, ...ending });
      continue;
    }
    queue.push({
      ...base,
      resume: {
        step: pendingCalls.length > 0 ? turn.lastStep : turn.lastStep + 1,
        pendingCalls,
        decisions: turn.decisions,
        usage: turn.usage,
        cost: turn.cost,
      },
    });
  }
  return queue;
}
