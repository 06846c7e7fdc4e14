import type { AnyActorRef } from 'xstate';
import type { StepScope } from '../../../machines/index.ts';
import type { MemoryHit } from '../../../src/protocol/index.ts';
import type { ToolInfo } from '../ports.ts';
import type { EscalationReason } from '../models/model-escalation.ts';
import type { SessionServices } from './session-services.ts';
import { stepToolList } from '../agents/step-profile.ts';

/** The actor system a session actor and its children share. */
export type AnyActorSystem = AnyActorRef['system'];

/** What one session's actors keep between steps, besides its services. */
export interface SessionScope {
  readonly services: SessionServices;
  /** Set by Preparing when compaction is due: summarize the messages up to this log sequence. */
  compactThroughSeq: number;
  /** Turns that moved to their large model, and why; a turn stays escalated once it is. */
  escalations: Map<string, EscalationReason> | undefined;
  /**
   * The tools Preparing offered the model this step, by name: Streaming plans the calls' tiers and
   * ToolExecution runs them against the same list instead of discovering again. Undefined until a step has
   * prepared (a resumed turn starts in ToolExecution) and once the turn is finished.
   */
  tools: Map<string, ToolInfo> | undefined;
  /** What memory recalled for a turn, asked once at its first step and kept for its later ones. */
  recalled: { readonly turnId: string; readonly hits: readonly MemoryHit[] } | undefined;
}

/** What a step's actors are given by `createSessionLogic`, to find their session and speak for their step. */
export interface StepActorDeps {
  /** The scope of the session whose actor system runs the actor; throws when none is bound. */
  readonly scopeOf: (system: AnyActorSystem) => SessionScope;
  /** Where a step's live events go: the session, the turn and the step. */
  readonly stepScope: (services: SessionServices, input: StepScope) => { tenant: string; sessionId: string; turnId: string; step: number };
  /** Publishes a live `progress` event of the step, its message prefixed with `[step/maxSteps]`. */
  readonly progress: (
    services: SessionServices,
    input: StepScope,
    kind: 'provider_call' | 'tool_execution' | 'rolling_summary',
    message: string,
    toolNames?: string[],
  ) => void;
}

/** Discovers the tools live workers serve and keeps them, by name, as the step's list. */
export async function discoverTools(scope: SessionScope, signal: AbortSignal, turnId?: string): Promise<{ tools: readonly ToolInfo[]; byName: Map<string, ToolInfo> }> {
  // With agent profiles: the tenant's agent tools too, and the active profile's allow-list applied.
  const tools = stepToolList(scope.services, turnId, await scope.services.tools.listTools({ signal }));
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  scope.tools = byName;
  return { tools, byName };
}

/** The step's tools by name: those Preparing discovered, or (for a resumed turn) a discovery now. */
export async function stepTools(scope: SessionScope, signal: AbortSignal, turnId?: string): Promise<Map<string, ToolInfo>> {
  return scope.tools ?? (await discoverTools(scope, signal, turnId)).byName;
}
