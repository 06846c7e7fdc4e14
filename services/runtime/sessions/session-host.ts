import { createActor } from 'xstate';
import type { Actor } from 'xstate';
import type { SessionLog } from '../../../src/bus/session-log.ts';
import { readSessionHistory } from '../../../src/bus/session-lineage.ts';
import { AgentbusError } from '../../../src/errors.ts';
import { ErrorCode, LiveEventType, LogEventType, TurnEndReason } from '../../../src/protocol/index.ts';
import type { Approve, InputAnswer, EnvelopeFactory, ErrorData, EventDataMap, LogEvent, Prompt, TraceContext } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import type { PlannedCall, QueuedTurn } from '../../../machines/index.ts';
import type { RuntimeConfig } from '../config.ts';
import { turnModels } from '../models/model-chain.ts';
import type { PromptModels } from '../models/model-chain.ts';
import { checkForcedCall, loggedPrompt } from './prompt-input.ts';
import { withProfile } from '../agents/profile-prompt.ts';
import { promptToolList } from '../agents/step-profile.ts';
import { answerInput, decideApproval } from './human-answers.ts';
import { createSessionWriter } from './session-writer.ts';
import type { SessionWriter } from './session-writer.ts';
import { createTranscript } from './transcript.ts';
import type { Transcript, UnfinishedTurn } from './transcript.ts';
import type { PendingSteer, RuntimeServices, SessionServices } from '../turn/session-services.ts';
import type { SessionLogic } from '../turn/turn-actors.ts';
import { resumedEnding } from '../turn/turn-output.ts';

/** Which request a prompt or steer came from, and whether one already logged must be recognised. */
export interface RequestOptions {
  readonly requestId?: string;
  readonly dedupe?: boolean;
  /** The trace context the prompt arrived with (tracing on): logged with it, for its turn to join. */
  readonly trace?: TraceContext;
}

/** The answer to a command sent to a session. */
export type CommandResult = { ok: true; turnId?: string } | { ok: false; error: ErrorData };

/** One live session on this node. */
export interface SessionHost {
  readonly tenant: string;
  readonly sessionId: string;
  /**
   * Appends the prompt as `user.message` (after `session.created` for a new session) and queues its turn.
   * `requestId` is logged with it; with `dedupe`, a prompt whose request is in the log already is not logged
   * again, and its turn is the answer (a message kept by another node, handled after its holder died).
   */
  prompt(prompt: Prompt, options?: RequestOptions): Promise<{ turnId: string }>;
  cancel(reason?: string): CommandResult;
  /** Injects `text` at the running turn's next step; `requestId` and `dedupe` as for {@link prompt}. */
  steer(text: string, options?: RequestOptions): CommandResult;
  /** Decides on an awaited approval: approve, deny, approve with edited `args`, or `respond` in the tool's place. */
  approve(decision: Approve): Promise<CommandResult>;
  /** Answers the open question of a suspended tool call (`tool.input_requested`). */
  input(answer: InputAnswer): Promise<CommandResult>;
  /** True while a turn runs or waits. */
  busy(): boolean;
  /** Resolves `true` when no turn runs or waits, `false` when the session stops first. */
  whenIdle(): Promise<boolean>;
  /** Stops the actor; in-flight work is aborted, and the log keeps what is needed to resume. */
  stop(): void;
}

/** What the runtime shares with every session it hosts: the services its actors use, and how to log. */
export interface SessionHostDeps extends RuntimeServices {
  /** The session machine, provided once per runtime (`createSessionLogic`). */
  readonly logic: SessionLogic;
  readonly log: SessionLog;
  readonly envelopes: EnvelopeFactory;
  /**
   * Called (once, outside the actor's notifications) when a turn of `session` could not write its end to the
   * log: the host no longer knows where its log stands, so it must not be used again; the runtime stops it and
   * lets the session be opened again from its log. Without it the host stops itself.
   */
  readonly giveUp?: (session: SessionHost) => void;
  /**
   * Called before each write to a session's log: rejects (with a `LogConflictError`) when the session is no
   * longer this node's, e.g. after the node was paused past its lease and another took it (see the writer).
   */
  readonly writeGuard?: (tenant: string, sessionId: string) => Promise<void> | undefined;
}

/** The longest a dry run's preparation (recall, tool discovery), or a forced call's tool discovery, may take. */
const ASK_TOOLS_TIMEOUT_MS = 15_000;

const noActiveTurn = (sessionId: string): CommandResult => ({
  ok: false,
  error: { code: ErrorCode.notFound, message: `session ${sessionId} has no running turn`, retryable: false },
});

/**
 * Opens a session on this node: reads its log back and resumes turns the log holds without a `turn.ended`
 * (completed tool calls are not run again); a fork's history is read through its parents first. A session with nothing logged yet gets its `session.created`
 * with its first prompt, the two appended as one pipelined group (see {@link SessionHost.prompt}).
 */
export async function openSession(deps: SessionHostDeps, tenant: string, sessionId: string, options: { signal?: AbortSignal; lastSeq?: Promise<number> } = {}): Promise<SessionHost> {
  // A fork's history starts with its parents' (read by reference, see `readSessionHistory`); its writer expects its own last sequence.
  const { events, lastSeq } = await readSessionHistory(deps.log, tenant, sessionId, { ...(options.signal ? { signal: options.signal } : {}), ...(options.lastSeq ? { last: options.lastSeq } : {}) });
  const transcript = createTranscript(events, deps.tokens);
  const guard = deps.writeGuard;
  const writer = createSessionWriter({
    tenant,
    sessionId,
    log: deps.log,
    envelopes: deps.envelopes,
    transcript,
    readSeq: lastSeq,
    scrubber: deps.scrubber,
    ...(guard ? { beforeWrite: () => guard(tenant, sessionId) } : {}),
  });
  const queue = await resumeQueue(deps, transcript.unfinishedTurns(), writer, options.signal);
  const host = new HostedSession(deps, tenant, sessionId, transcript, writer);
  if (queue.length > 0) host.startActor(queue);
  return host;
}

type SessionActor = Actor<SessionLogic['machine']>;

/** A state a machine entered, for the live `state` event. */
interface EnteredState {
  readonly machine: 'session' | 'turn';
  readonly value: string;
  readonly event: string;
  readonly turnId: string | undefined;
}

function isIdle(actor: SessionActor): boolean {
  const snapshot = actor.getSnapshot();
  return snapshot.value === 'idle' && snapshot.context.queue.length === 0;
}

/**
 * One hosted session. An idle one keeps only its transcript and writer: its actor, services and logger exist
 * while it has work. A class, so that the many idle sessions of a node share their methods.
 */
class HostedSession implements SessionHost {
  private actor: SessionActor | undefined;
  private stopped = false;
  private logger: Logger | undefined;
  private steers: PendingSteer[] | undefined;
  /** True while the `session.created` of a new session is on its way: a second prompt must not add another. */
  private creating = false;
  private idleWaiters: Set<(idle: boolean) => void> | undefined;
  // The last state published, per machine, so each change is published once.
  private sessionState: string | undefined;
  private turnState: string | undefined;
  /** States entered since the last publication, at most one per machine (see `stateEntered`). */
  private pendingStates: EnteredState[] | undefined;
  /** Set once a turn could not write its end: the host is being given up (see `SessionHostDeps.giveUp`). */
  private unwritable = false;

  constructor(
    private readonly deps: SessionHostDeps,
    readonly tenant: string,
    readonly sessionId: string,
    private readonly transcript: Transcript,
    private readonly writer: SessionWriter,
  ) {}

  private log(): Logger {
    return (this.logger ??= this.deps.logger.child({ tenant: this.tenant, sessionId: this.sessionId }));
  }

  private services(): SessionServices {
    const { deps } = this;
    const host = this;
    return {
      tenant: this.tenant,
      sessionId: this.sessionId,
      writer: this.writer,
      transcript: this.transcript,
      live: deps.live,
      provider: deps.provider,
      tools: deps.tools,
      ...(deps.hooks ? { hooks: deps.hooks } : {}),
      ...(deps.memory ? { memory: deps.memory } : {}),
      ...(deps.agents ? { agents: deps.agents } : {}),
      tokens: deps.tokens,
      toolTokens: deps.toolTokens,
      scrubber: deps.scrubber,
      get logger() {
        return host.log();
      },
      config: deps.config,
      newId: deps.newId,
      now: deps.now,
      ...(deps.outputSchemas ? { outputSchemas: deps.outputSchemas } : {}),
      takeSteers: () => {
        const taken = host.steers ?? [];
        host.steers = undefined;
        return taken;
      },
      stateEntered: (machine, value, event, turnId) => host.stateEntered(machine, value, event, turnId),
    };
  }

  /**
   * A machine entered a state (see `SessionServices.stateEntered`). Published a microtask later, so that a state
   * passed through within one step of the machine (`idle` on the way to `starting`) is not: the last state entered
   * is, unless it is the one published last for that machine.
   */
  private stateEntered(machine: 'session' | 'turn', value: string, event: string, turnId: string | undefined): void {
    const entered: EnteredState = { machine, value, event, turnId };
    const pending = this.pendingStates;
    if (pending) {
      const at = pending.findIndex((state) => state.machine === machine);
      if (at >= 0) pending.splice(at, 1);
      pending.push(entered);
      return;
    }
    this.pendingStates = [entered];
    queueMicrotask(() => this.publishStates());
  }

  private publishStates(): void {
    const pending = this.pendingStates ?? [];
    this.pendingStates = undefined;
    for (const { machine, value, event, turnId } of pending) {
      if (machine === 'session') {
        if (this.sessionState === value) continue;
        this.sessionState = value;
      } else {
        // A turn's first state is never its predecessor's last (a terminal one), so the value alone tells a change.
        if (this.turnState === value) continue;
        this.turnState = value;
      }
      try {
        this.deps.live.publish('state', { tenant: this.tenant, sessionId: this.sessionId, ...(turnId ? { turnId } : {}) }, { machine, value, event });
      } catch (err) {
        this.log().warn({ err }, 'state event not published');
      }
    }
  }

  /** Starts the session's actor for `turns`; it is dropped again once no turn runs or waits. */
  startActor(turns: readonly QueuedTurn[]): void {
    const created: SessionActor = createActor(this.deps.logic.machine, { input: { queue: turns } });
    this.deps.logic.bind(created.system, this.services());
    created.subscribe({
      next: (snapshot) => {
        // `unwritable`: a turn could not write its end; only a fresh read of the log can take that into account.
        if (snapshot.status === 'done') this.giveUp();
        if (!isIdle(created)) return;
        // Settled outside the actor's own notification: a prompt sent meanwhile keeps the actor, and the
        // inspection that follows this notification may find the host given up, whose waiters hear `false`
        // when it stops.
        queueMicrotask(() => {
          if (this.unwritable || this.actor !== created || !isIdle(created)) return;
          if (this.idleWaiters) for (const resolve of this.idleWaiters) resolve(true);
          this.idleWaiters = undefined;
          this.actor = undefined;
          created.stop();
          this.transcript.trim();
        });
      },
      error: (err) => this.log().error({ err }, 'session actor failed'),
    });
    this.actor = created;
    created.start();
  }

  /** Hands the session to the runtime to stop hosting here, once the actor's notification is over. */
  private giveUp(): void {
    if (this.unwritable) return;
    this.unwritable = true;
    queueMicrotask(() => {
      if (this.deps.giveUp) this.deps.giveUp(this);
      else this.stop();
    });
  }

  /** The `user.message` logged for a request, if any: a scan of the log read, for the rare message handled after a takeover. */
  private loggedRequest(requestId: string | undefined): LogEvent | undefined {
    if (requestId === undefined) return undefined;
    return this.transcript.events.findLast((event) => event.type === LogEventType.userMessage && event.data.requestId === requestId);
  }

  /** True while a turn starts or runs (a cancel while it starts ends it before its first step). */
  private running(): boolean {
    const value = this.actor?.getSnapshot().value;
    return value === 'running' || value === 'starting';
  }

  private currentTurnId(): string | undefined {
    return this.actor?.getSnapshot().context.current?.turnId;
  }

  async prompt(asked: Prompt, options: RequestOptions = {}): Promise<{ turnId: string }> {
    const logged = options.dedupe ? this.loggedRequest(options.requestId) : undefined;
    if (logged?.turnId) return { turnId: logged.turnId };
    const prompt = withProfile(asked, this.deps.agents?.profiles, this.tenant);
    if (prompt.forceTool) {
      // The tools the first step would be offered: the workers', and the tenant's agent tools allowed by the profile.
      const workerTools = await this.deps.tools.listTools({ signal: AbortSignal.timeout(ASK_TOOLS_TIMEOUT_MS) });
      checkForcedCall(promptToolList(this.deps.agents, this.tenant, prompt.profile, workerTools), prompt.forceTool);
    }
    if (prompt.dryRun) return this.dryRun(prompt);
    const data = { ...loggedPrompt(prompt), ...(options.requestId ? { requestId: options.requestId } : {}), ...(options.trace ? { trace: options.trace } : {}) };
    const turnId = this.deps.newId();
    const acceptedAt = this.deps.now();
    if (!this.creating && this.transcript.events.length === 0) {
      // A new session: `session.created` and the prompt go out as one group, the first expecting the log empty.
      this.creating = true;
      const created = this.writer.append(LogEventType.sessionCreated, {}, { createdBy: this.deps.config.nodeId, ...(prompt.parent ? { parent: prompt.parent } : {}) });
      try {
        await Promise.all([created, this.writer.append(LogEventType.userMessage, { turnId }, data)]);
      } finally {
        this.creating = false;
      }
    } else {
      await this.writer.append(LogEventType.userMessage, { turnId }, data);
    }
    const turn = queuedTurn(this.deps.config, turnId, prompt, acceptedAt);
    if (this.stopped) return { turnId };
    if (this.actor) this.actor.send({ type: 'PROMPT', turn });
    else this.startActor([turn]);
    return { turnId };
  }

  /**
   * A dry run: what the turn's first step would send, built by Preparing from the transcript with the prompt added
   * to a copy of it, published as a live `request.prepared` of the turn id it answers with. Nothing is logged (a
   * new session stays without `session.created`), and no model is called.
   */
  private async dryRun(prompt: Prompt): Promise<{ turnId: string }> {
    const { deps } = this;
    const turnId = deps.newId();
    const turn = queuedTurn(deps.config, turnId, prompt, deps.now());
    const where = { tenant: this.tenant, sessionId: this.sessionId, turnId };
    const message = { ...deps.envelopes.create(LogEventType.userMessage, where, loggedPrompt(prompt)), seq: this.transcript.lastSeq + 1 };
    const transcript = createTranscript([...this.transcript.events, message], deps.tokens);
    const { maxSteps, maxCost, turnId: _turnId, ...routing } = turn;
    const signal = AbortSignal.timeout(ASK_TOOLS_TIMEOUT_MS);
    const { request, needsCompaction } = await deps.logic.prepareDryRun({ ...this.services(), transcript, takeSteers: () => [] }, { ...routing, turnId, step: 1, maxSteps, compacted: false }, signal);
    try {
      deps.live.publish(LiveEventType.requestPrepared, { ...where, step: 1 }, {
        ...request,
        maxOutputTokens: deps.config.maxOutputTokens,
        maxSteps,
        ...(maxCost === undefined ? {} : { maxCost }),
        needsCompaction,
        ...(prompt.forceTool ? { forceTool: prompt.forceTool } : {}),
      });
    } catch (err) {
      const message = `the dry run's request could not be published: ${(err as Error).message}`;
      throw new AgentbusError(/max_payload/i.test(String(err)) ? ErrorCode.payloadTooLarge : ErrorCode.internal, message, { cause: err });
    }
    return { turnId };
  }

  cancel(reason?: string): CommandResult {
    if (!this.running()) return noActiveTurn(this.sessionId);
    const turnId = this.currentTurnId();
    this.actor?.send(reason === undefined ? { type: 'CANCEL' } : { type: 'CANCEL', reason });
    return turnId ? { ok: true, turnId } : { ok: true };
  }

  steer(text: string, options: RequestOptions = {}): CommandResult {
    if (!this.running()) return noActiveTurn(this.sessionId);
    const logged = options.dedupe ? this.loggedRequest(options.requestId) : undefined;
    if (!logged) (this.steers ??= []).push(options.requestId ? { text, requestId: options.requestId } : { text });
    const turnId = this.currentTurnId();
    return turnId ? { ok: true, turnId } : { ok: true };
  }

  async approve(decision: Approve): Promise<CommandResult> {
    const turnId = this.currentTurnId();
    if (!this.running() || !turnId) return noActiveTurn(this.sessionId);
    const toolOf = async (name: string) =>
      this.deps.tools.announced?.(name) ?? (await this.deps.tools.listTools({ signal: AbortSignal.timeout(ASK_TOOLS_TIMEOUT_MS) })).find((tool) => tool.name === name);
    // The check runs after appends in flight: a client may see `approval.requested` before its ack is back here.
    const outcome = await this.writer.exclusive((append) => decideApproval(this.transcript.turnEvents(turnId), decision, toolOf, append, turnId));
    if ('refused' in outcome) return { ok: false, error: outcome.refused };
    this.actor?.send({ type: 'APPROVAL', toolCallId: decision.toolCallId, ...outcome.accepted });
    return { ok: true, turnId };
  }

  async input(answer: InputAnswer): Promise<CommandResult> {
    const turnId = this.currentTurnId();
    if (!this.running() || !turnId) return noActiveTurn(this.sessionId);
    const outcome = await this.writer.exclusive((append) => answerInput(this.transcript.turnEvents(turnId), answer, this.deps.now(), append, turnId));
    if ('refused' in outcome) return { ok: false, error: outcome.refused };
    this.actor?.send({ type: 'INPUT', toolCallId: answer.toolCallId, requestId: outcome.accepted.requestId, answer: answer.answer });
    return { ok: true, turnId };
  }

  busy(): boolean {
    return this.actor !== undefined && !isIdle(this.actor);
  }

  whenIdle(): Promise<boolean> {
    if (this.stopped || this.unwritable) return Promise.resolve(false);
    if (!this.busy()) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => (this.idleWaiters ??= new Set()).add(resolve));
  }

  stop(): void {
    this.stopped = true;
    this.actor?.stop();
    this.actor = undefined;
    if (this.idleWaiters) for (const resolve of this.idleWaiters) resolve(false);
    this.idleWaiters = undefined;
  }
}

/** What a prompt sets of its turn's limits. */
type PromptLimits = PromptModels & { readonly maxSteps?: number; readonly maxCost?: number; readonly deadlineMs?: number; readonly finalAnswer?: boolean };

/**
 * The turn of a prompt accepted at `acceptedAt`: its deadline counts from then (the prompt's `deadlineMs`, else the
 * runtime's `turnTimeoutMs`), so a client that gives up after the same time finds the turn ended too; a turn the log
 * says started keeps the deadline logged then (`deadline`).
 */
function queuedTurn(config: RuntimeConfig, turnId: string, prompt: PromptLimits, acceptedAt: number, deadline?: number): QueuedTurn {
  const turn: QueuedTurn = {
    turnId,
    ...turnModels(prompt, config.defaultModel),
    maxSteps: prompt.maxSteps ?? config.maxSteps,
    deadline: deadline ?? acceptedAt + (prompt.deadlineMs ?? config.turnTimeoutMs),
    ...(prompt.finalAnswer === false ? { finalAnswer: false } : {}),
  };
  return prompt.maxCost === undefined ? turn : { ...turn, maxCost: prompt.maxCost };
}

/** Turns found unfinished in the log, as the queue to run; a turn that had already answered is ended now. */
async function resumeQueue(
  deps: SessionHostDeps,
  unfinished: readonly UnfinishedTurn[],
  writer: SessionWriter,
  signal?: AbortSignal,
): Promise<QueuedTurn[]> {
  if (unfinished.length === 0) return [];
  const tools = await deps.tools.listTools(signal ? { signal } : {});
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  const queue: QueuedTurn[] = [];
  for (const turn of unfinished) {
    const base = queuedTurn(deps.config, turn.turnId, turn.prompt, turn.acceptedAt, turn.deadline);
    if (turn.lastStep === 0) {
      queue.push(base);
      continue;
    }
    const ending = { usage: turn.usage, cost: turn.cost, steps: turn.lastStep };
    if (turn.answered) {
      // The last call at maxSteps answered, too: the turn still ran out of steps.
      const reason = turn.answeredAtLast ? TurnEndReason.budgetExceeded : TurnEndReason.yielded;
      // A typed turn's answer is checked as its step would have; one that does not match fails the turn.
      const typed = await resumedEnding(turn.prompt.outputSchema, turn.text, deps.outputSchemas);
      const failed = typed !== undefined && 'error' in typed;
      await writer.append(LogEventType.turnEnded, { turnId: turn.turnId, step: turn.lastStep }, { reason: failed ? TurnEndReason.failed : reason, text: turn.text, ...typed, ...ending });
      continue;
    }
    // A call goes out only after its `tool.use` is logged (write-through), and not at all when a hook blocked it:
    // an open call without one never ran, and goes out now as a first attempt. One that went out may have run. It
    // is made again as a repeat of the same effectId, with the same arguments, when that is safe: the tool is
    // read-only or idempotent, or its workers keep a result ledger (the repeat gets the outcome recorded before
    // the node died, or `interrupted` when there is none). Otherwise a side effect that may have happened is not
    // made twice: the call ends `interrupted`, and the model is told so. (A privileged call not yet approved
    // never went out.)
    const pendingCalls: PlannedCall[] = [];
    for (const call of turn.openCalls) {
      // Its real arguments held a secret, which the log keeps only scrubbed: it is not sent with the markers.
      if (turn.argsRedacted.includes(call.id)) {
        await writer.append(LogEventType.toolResult, { turnId: turn.turnId, step: turn.lastStep }, redactedResult(call));
        continue;
      }
      const tool = byName.get(call.name);
      const sent = turn.sent[call.id];
      const asked = turn.questions[call.id];
      if (asked?.asking && sent) {
        // Suspended on a question nobody has answered yet: nothing of it runs, so it waits for the answer here, its
        // request's deadline kept (it is in the log), and is then made again as a first attempt with the answers.
        const { effectId, args, argsRewrittenBy } = sent;
        pendingCalls.push({ ...call, tier: tool?.tier ?? 'unknown', effectId, sent: argsRewrittenBy ? { args, argsRewrittenBy } : { args }, asking: asked.asking, ...(asked.given.length > 0 ? { inputs: asked.given } : {}) });
        continue;
      }
      const sideEffect = tool?.tier === 'side_effecting' || (tool?.tier === 'privileged' && turn.decisions[call.id]?.approved === true);
      if (sent && sideEffect && !tool.idempotent && tool.ledger !== true) {
        await writer.append(LogEventType.toolResult, { turnId: turn.turnId, step: turn.lastStep }, interruptedResult(call));
        continue;
      }
      // Answered: the call may have gone out again with its answers when the node died, and is repeated with them.
      pendingCalls.push({ ...call, tier: tool?.tier ?? 'unknown', ...(sent ? repeatOf(sent) : {}), ...(asked && asked.given.length > 0 ? { inputs: asked.given } : {}) });
    }
    if (pendingCalls.length === 0 && turn.lastStep >= base.maxSteps) {
      await writer.append(LogEventType.turnEnded, { turnId: turn.turnId, step: turn.lastStep }, { reason: TurnEndReason.budgetExceeded, ...ending });
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

/** The result of a non-idempotent side-effecting call that was running when its node died. */
/**
 * How a call that went out is planned again: as a repeat, with the arguments it went out with when the log says
 * those were the hooks' final decision. An older runtime's log does not say so (nor mark a blocked call): then the
 * hooks are asked again.
 */
function repeatOf(sent: UnfinishedTurn['sent'][string]): Pick<PlannedCall, 'resumed' | 'sent' | 'effectId'> {
  const { args, argsRewrittenBy, effectId } = sent;
  if (!sent.final) return { resumed: true, effectId };
  return { resumed: true, effectId, sent: argsRewrittenBy ? { args, argsRewrittenBy } : { args } };
}

/** The result of an open call whose arguments the log holds only scrubbed: it is not made again. */
function redactedResult(call: { readonly id: string; readonly name: string }): EventDataMap['tool.result'] {
  const message = `the call to ${call.name} was not made again after its runtime node stopped: its arguments held a secret, which the log keeps only redacted; ask for it again if it is still needed`;
  return { toolCallId: call.id, name: call.name, output: message, isError: true, error: { code: ErrorCode.interrupted, message, retryable: false }, durationMs: 0 };
}

function interruptedResult(call: { readonly id: string; readonly name: string }): EventDataMap['tool.result'] {
  const message = `the call to ${call.name} was running when its runtime node stopped; it may or may not have taken effect, and it is not run again because the tool is not idempotent`;
  return { toolCallId: call.id, name: call.name, output: message, isError: true, error: { code: ErrorCode.interrupted, message, retryable: false }, durationMs: 0 };
}
