import type { Logger } from '../../../src/logging.ts';
import type { Scrubber } from '../../../src/scrub/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import type { ToolSpec } from '../../../src/protocol/index.ts';
import type { RuntimeConfig } from '../config.ts';
import type { LivePublisher } from '../sessions/live-publisher.ts';
import type { ProviderPort, ToolPort } from '../ports.ts';
import type { MemoryPort } from '../context/recall.ts';
import type { SessionWriter } from '../sessions/session-writer.ts';
import type { ToolHooks } from '../tools/tool-hooks.ts';
import type { Transcript } from '../sessions/transcript.ts';
import type { AgentsPort } from '../agents/agents-port.ts';
import type { OutputSchemaCompiler } from '../../../src/output-schema.ts';

/** What the runtime shares with every session, and its actors use as they are. */
export interface RuntimeServices {
  readonly live: LivePublisher;
  readonly provider: ProviderPort;
  readonly tools: ToolPort;
  /** The deployment's tool hooks; none when no hook is configured (then a call costs no extra round trip). */
  readonly hooks?: ToolHooks;
  /** Memory to recall from; none in tests and setups without it. */
  readonly memory?: MemoryPort;
  /** Agent profiles (`AGENTBUS_PROFILES`): offered as `agent__<name>` / `handoff__<name>` tools; none when not configured. */
  readonly agents?: AgentsPort;
  readonly tokens: TokenCounter;
  /** Tokens of a tool list, cached by the runtime. */
  readonly toolTokens: (specs: readonly ToolSpec[]) => number;
  readonly scrubber: Scrubber;
  readonly logger: Logger;
  readonly config: RuntimeConfig;
  readonly newId: () => string;
  readonly now: () => number;
  /** Compiles typed prompts' `outputSchema`s, keeping the recent ones; absent: each check compiles afresh. */
  readonly outputSchemas?: OutputSchemaCompiler;
}

/** A steering message waiting for the next step, and the request that sent it (its reply subject), if any. */
export interface PendingSteer {
  readonly text: string;
  readonly requestId?: string;
}

/** Everything one session's actors use; made by the session host. */
export interface SessionServices extends RuntimeServices {
  readonly tenant: string;
  readonly sessionId: string;
  readonly writer: SessionWriter;
  readonly transcript: Transcript;
  /** Steering messages received since the last step began (with their request's id); taking them empties the list. */
  readonly takeSteers: () => PendingSteer[];
  /**
   * The session or turn machine entered `value` (a state it rests in) on `event`, for the turn `turnId`: the host
   * publishes the live `state` event. Absent: nothing is published (a dry run's preparation).
   */
  readonly stateEntered?: (machine: 'session' | 'turn', value: string, event: string, turnId: string | undefined) => void;
}
