import { DEFAULT_ADMISSION_LIMITS } from './ingress/admission.ts';
import type { AdmissionLimits } from './ingress/admission.ts';
import { TOKEN_PATTERN, isToken } from '../../src/protocol/index.ts';
import type { StreamLimits } from '../../src/bus/streams.ts';
import type { LimitsConfig } from './limits/limits-config.ts';

/** How session messages reach the runtime nodes: see {@link RuntimeConfig.ingress}. */
export const IngressMode = { broadcast: 'broadcast', queue: 'queue' } as const;
export type IngressMode = (typeof IngressMode)[keyof typeof IngressMode];

/** What the runtime does with a call when a tool hook fails (no answer, a late or malformed one, or an error). */
export const ToolHookOnError = {
  /** The call is not run (before) or its result is withheld (after): the result is a `hook_failed` error. */
  block: 'block',
  /** The failed hook is skipped, logged at warn: the call runs, or its result stands, as if the hook were not there. */
  continue: 'continue',
} as const;
export type ToolHookOnError = (typeof ToolHookOnError)[keyof typeof ToolHookOnError];

/** The tool hooks of a deployment, each a service on the bus named by one subject token. */
export interface ToolHookConfig {
  /** Hooks asked before a call is sent to a worker, in order: a block stops the chain, rewritten args go on to the next. */
  readonly before: readonly string[];
  /** Hooks asked after a call's result came back, in order: a rewritten result goes on to the next. */
  readonly after: readonly string[];
  /** The longest wait for one hook's answer. */
  readonly timeoutMs: number;
  readonly onError: ToolHookOnError;
}

/** Settings of the runtime service. */
export interface RuntimeConfig {
  readonly prefix: string;
  /**
   * Node id; names the lease owner and the node's heartbeat. Unique among live nodes. A new one per process
   * by default; a stable one (`AGENTBUS_NODE_ID`) lets a restarted node take its own sessions back at once.
   */
  readonly nodeId: string;
  readonly defaultModel: string;
  readonly maxSteps: number;
  readonly systemPrompt: string;
  readonly maxOutputTokens: number;
  readonly providerTimeoutMs: number;
  readonly providerIdleTimeoutMs: number;
  /**
   * How long a call waits, in all, for a provider or tool worker that nobody serves right now (`no_responders`: it
   * has not started yet, or it is restarting) before the call fails (`AGENTBUS_WAIT_FOR_SERVICE_MS`, default 30 s).
   * Each wait is a live `retry` event; a cancel ends it at once. A tool no worker ever announced fails at once.
   */
  readonly waitForServiceMs: number;
  readonly toolTimeoutMs: number;
  /**
   * How long the worker of a running call may send no heartbeat before the call is given up (`worker_lost`) and,
   * when that is safe, made again on another worker (`AGENTBUS_TOOL_HEARTBEAT_LAPSE_MS`).
   */
  readonly toolHeartbeatLapseMs: number;
  /** How long tool workers' recorded outcomes are kept in the result ledger (`AGENTBUS_LEDGER_TTL_MS`). */
  readonly ledgerTtlMs: number;
  /**
   * The most bytes the result ledger holds (`AGENTBUS_LEDGER_MAX_BYTES`); undefined, no bound but its TTL. A full
   * ledger refuses new records (the workers log it; a repeat of such a call ends `interrupted`).
   */
  readonly ledgerMaxBytes?: number;
  readonly maxToolOutputChars: number;
  /**
   * How long a privileged call's approval, or a tool's question to the user, is waited for
   * (`AGENTBUS_APPROVAL_TIMEOUT_MS`, default 10 min). The deadline is logged with the request
   * (`approval.requested.deadline`, `tool.input_requested.deadline`), so a node that takes the session over keeps it.
   */
  readonly approvalTimeoutMs: number;
  /**
   * The decision an approval gets when nobody decides before its deadline (`AGENTBUS_APPROVAL_TIMEOUT_DECISION`,
   * `deny` or `approve`; default `deny`), logged with the request as `onTimeout`.
   */
  readonly approvalTimeoutDecision: 'deny' | 'approve';
  /**
   * A turn's deadline when its prompt names none (`AGENTBUS_TURN_TIMEOUT_MS`, default 15 min), counted from the
   * prompt's acceptance: past it the turn ends `deadline_exceeded`, its provider and tool calls cancelled.
   */
  readonly turnTimeoutMs: number;
  /**
   * How long a node's heartbeat may be silent before the other nodes find it dead and take its sessions
   * (`AGENTBUS_LEASE_TTL_MS`). It beats four times per TTL. Failover takes about this long.
   */
  readonly leaseTtlMs: number;
  /**
   * Copies of the log and live streams and of the leases, nodes and tombstones buckets in a NATS cluster
   * (`AGENTBUS_REPLICAS`, 1 to 5). 3 survives the loss of one server of three. Unset: what is made gets 1,
   * and streams that exist keep theirs.
   */
  readonly replicas?: number;
  /** An idle session is dropped from memory after this long. */
  readonly idleMs: number;
  /**
   * How session messages reach the nodes (`AGENTBUS_INGRESS`): `broadcast`, every node hears every message
   * and the holder acts (a node that stalls loses nothing: the others keep its messages); `queue`, each message
   * reaches one node of a queue group, which passes it on to the holder (the fleet's cost per message does not
   * grow with its size, but a node that stalls holds the messages handed to it until it wakes). See
   * docs/architecture.md, "Ingress".
   */
  readonly ingress: IngressMode;
  /** Prompt size and message rates per tenant and per session; over them a message is refused. */
  readonly admission: AdmissionLimits;
  /**
   * Recall from memory at a turn's first step: the share of the model's window its snippets may take (0: never
   * ask), how long to wait for memory, and how many snippets to ask for.
   */
  readonly recall: { readonly share: number; readonly timeoutMs: number; readonly k: number };
  /**
   * Tool hooks of this deployment: services on the bus asked before a call is sent to a worker and after its result
   * comes back (`AGENTBUS_TOOL_HOOKS`, `AGENTBUS_TOOL_HOOK_TIMEOUT_MS`, `AGENTBUS_TOOL_HOOK_ON_ERROR`). None by default.
   */
  readonly toolHooks: ToolHookConfig;
  /**
   * The operator's ceilings on what a prompt may ask for (`AGENTBUS_MAX_STEPS_CEILING`, `AGENTBUS_MAX_COST_CEILING`):
   * a prompt above one is refused; `maxSteps` must not be above the steps ceiling.
   */
  readonly ceilings: PromptCeilings;
  /**
   * Limits of the log and live streams the runtime makes (`AGENTBUS_LOG_MAX_BYTES`, `AGENTBUS_LOG_MAX_EVENT_BYTES`,
   * `AGENTBUS_LOG_MAX_SESSION_EVENTS`, `AGENTBUS_LIVE_MAX_BYTES`); those not set as in `DEFAULT_STREAM_LIMITS`.
   */
  readonly streamLimits?: Partial<StreamLimits>;
  /**
   * Fleet-wide provider rate limits and tenant spend limits (`AGENTBUS_RATE_LIMITS`, `AGENTBUS_RATE_MAX_WAIT_MS`,
   * `AGENTBUS_SPEND_LIMITS`), counted in the `AGENTBUS_LIMITS` bucket; none by default (no call touches the bucket).
   */
  readonly limits?: LimitsConfig;
}

/** Defaults of {@link RuntimeConfig}. */
export const DEFAULT_RUNTIME_CONFIG: Omit<RuntimeConfig, 'nodeId'> = {
  prefix: 'agentbus',
  defaultModel: 'scripted:default',
  maxSteps: 8,
  systemPrompt:
    'You are a helpful agent. Use the tools you are given when they help; answer plainly when you are done.',
  maxOutputTokens: 4096,
  providerTimeoutMs: 10 * 60_000,
  providerIdleTimeoutMs: 120_000,
  waitForServiceMs: 30_000,
  toolTimeoutMs: 60_000,
  toolHeartbeatLapseMs: 3_000,
  ledgerTtlMs: 24 * 60 * 60_000,
  maxToolOutputChars: 100_000,
  approvalTimeoutMs: 10 * 60_000,
  approvalTimeoutDecision: 'deny',
  turnTimeoutMs: 15 * 60_000,
  leaseTtlMs: 2_000,
  idleMs: 5 * 60_000,
  ingress: 'broadcast',
  admission: DEFAULT_ADMISSION_LIMITS,
  recall: { share: 0.1, timeoutMs: 300, k: 5 },
  toolHooks: { before: [], after: [], timeoutMs: 2_000, onError: ToolHookOnError.block },
  ceilings: { maxSteps: 32 },
};

/**
 * Tool hooks from `AGENTBUS_TOOL_HOOKS` (a comma-separated chain of `before:<hook>` and `after:<hook>`, e.g.
 * `before:policy,after:redact,before:audit`: before-hooks run in the order listed, after-hooks too),
 * `AGENTBUS_TOOL_HOOK_TIMEOUT_MS` (default 2000) and `AGENTBUS_TOOL_HOOK_ON_ERROR` (`block`, the default, or
 * `continue`). Undefined when none of them is set. Throws an Error naming the variable of a bad value.
 *
 * @example
 * toolHooksFromEnv({ AGENTBUS_TOOL_HOOKS: 'before:policy,after:redact' });
 * // { before: ['policy'], after: ['redact'], timeoutMs: 2000, onError: 'block' }
 */
export function toolHooksFromEnv(env: NodeJS.ProcessEnv): ToolHookConfig | undefined {
  const names = ['AGENTBUS_TOOL_HOOKS', 'AGENTBUS_TOOL_HOOK_TIMEOUT_MS', 'AGENTBUS_TOOL_HOOK_ON_ERROR'];
  if (names.every((name) => !env[name]?.trim())) return undefined;
  const defaults = DEFAULT_RUNTIME_CONFIG.toolHooks;
  const chain = parseToolHookChain(env.AGENTBUS_TOOL_HOOKS ?? '');
  const rawTimeout = env.AGENTBUS_TOOL_HOOK_TIMEOUT_MS?.trim();
  let timeoutMs = defaults.timeoutMs;
  if (rawTimeout) {
    timeoutMs = Number(rawTimeout);
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
      throw new Error(`AGENTBUS_TOOL_HOOK_TIMEOUT_MS must be a positive whole number of milliseconds, got ${JSON.stringify(env.AGENTBUS_TOOL_HOOK_TIMEOUT_MS)}`);
    }
  }
  const rawOnError = env.AGENTBUS_TOOL_HOOK_ON_ERROR?.trim();
  let onError = defaults.onError;
  if (rawOnError) {
    if (rawOnError !== ToolHookOnError.block && rawOnError !== ToolHookOnError.continue) {
      throw new Error(`AGENTBUS_TOOL_HOOK_ON_ERROR must be block or continue, got ${JSON.stringify(env.AGENTBUS_TOOL_HOOK_ON_ERROR)}`);
    }
    onError = rawOnError;
  }
  return { ...chain, timeoutMs, onError };
}

/** Parses the `AGENTBUS_TOOL_HOOKS` chain; the same hook may be both a before- and an after-hook, but once each. */
function parseToolHookChain(text: string): Pick<ToolHookConfig, 'before' | 'after'> {
  const before: string[] = [];
  const after: string[] = [];
  if (text.trim() === '') return { before, after };
  text.split(',').forEach((raw, index) => {
    const entry = raw.trim();
    const where = `AGENTBUS_TOOL_HOOKS entry ${index + 1} (${JSON.stringify(entry)})`;
    const match = /^(before|after):(.*)$/.exec(entry);
    if (!match) throw new Error(`${where} must be before:<hook> or after:<hook>, as in before:policy,after:redact`);
    const name = match[2]!.trim();
    if (!isToken(name)) throw new Error(`${where}: a hook name must match ${TOKEN_PATTERN.source}`);
    const list = match[1] === 'before' ? before : after;
    if (list.includes(name)) throw new Error(`${where} lists ${match[1]}:${name} a second time`);
    list.push(name);
  });
  return { before, after };
}

// --- Operator ceilings on a prompt's limits -------------------------------------------------------------------

/** What no prompt may lift: the most steps a turn may take and, when set, the most it may cost. */
export interface PromptCeilings {
  /** The most `maxSteps` a prompt may ask for (`AGENTBUS_MAX_STEPS_CEILING`, default 32); the built-in default maxSteps gives way to a lower one. */
  readonly maxSteps: number;
  /**
   * The most `maxCost` (USD) a prompt may ask for (`AGENTBUS_MAX_COST_CEILING`); a prompt without one runs under this
   * ceiling. Unset: no ceiling, and a prompt without `maxCost` runs without a cost limit.
   */
  readonly maxCost?: number;
}

/**
 * Ceilings from `AGENTBUS_MAX_STEPS_CEILING` (a whole number from 1 to 1000, default 32) and
 * `AGENTBUS_MAX_COST_CEILING` (a positive number of USD; unset, no cost ceiling). Undefined when neither is set.
 * Throws an Error naming the variable of a bad value.
 *
 * @example
 * ceilingsFromEnv({ AGENTBUS_MAX_COST_CEILING: '0.5' }); // { maxSteps: 32, maxCost: 0.5 }
 */
export function ceilingsFromEnv(env: NodeJS.ProcessEnv): PromptCeilings | undefined {
  const rawSteps = env.AGENTBUS_MAX_STEPS_CEILING?.trim();
  const rawCost = env.AGENTBUS_MAX_COST_CEILING?.trim();
  if (!rawSteps && !rawCost) return undefined;
  let maxSteps = DEFAULT_RUNTIME_CONFIG.ceilings.maxSteps;
  if (rawSteps) {
    maxSteps = Number(rawSteps);
    // 1000 is what the prompt schema accepts at all.
    if (!Number.isInteger(maxSteps) || maxSteps < 1 || maxSteps > 1000) {
      throw new Error(`AGENTBUS_MAX_STEPS_CEILING must be a whole number from 1 to 1000, got ${JSON.stringify(env.AGENTBUS_MAX_STEPS_CEILING)}`);
    }
  }
  if (!rawCost) return { maxSteps };
  const maxCost = Number(rawCost);
  if (!Number.isFinite(maxCost) || maxCost <= 0) {
    throw new Error(`AGENTBUS_MAX_COST_CEILING must be a positive number of USD, got ${JSON.stringify(env.AGENTBUS_MAX_COST_CEILING)}`);
  }
  return { maxSteps, maxCost };
}

/**
 * Throws an Error when the runtime's own settings break its ceilings: a default `maxSteps` above the steps ceiling
 * (every prompt without one would run past it). Called once at start.
 */
export function checkCeilings(config: Pick<RuntimeConfig, 'maxSteps' | 'ceilings'>): void {
  const { maxSteps, ceilings } = config;
  if (!Number.isInteger(ceilings.maxSteps) || ceilings.maxSteps < 1) throw new Error(`the steps ceiling must be a positive whole number, got ${ceilings.maxSteps}`);
  if (ceilings.maxCost !== undefined && !(ceilings.maxCost > 0)) throw new Error(`the cost ceiling must be a positive number of USD, got ${ceilings.maxCost}`);
  if (maxSteps > ceilings.maxSteps) {
    throw new Error(`the default maxSteps (AGENTBUS_MAX_STEPS, ${maxSteps}) is above the steps ceiling (AGENTBUS_MAX_STEPS_CEILING, ${ceilings.maxSteps}): lower it or raise the ceiling`);
  }
}
