import { DEFAULT_ADMISSION_LIMITS } from './admission.ts';
import type { AdmissionLimits } from './admission.ts';

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
  readonly toolTimeoutMs: number;
  /**
   * How long the worker of a running call may send no heartbeat before the call is given up (`worker_lost`) and,
   * when that is safe, made again on another worker (`AGENTBUS_TOOL_HEARTBEAT_LAPSE_MS`).
   */
  readonly toolHeartbeatLapseMs: number;
  /** How long tool workers' recorded outcomes are kept in the result ledger (`AGENTBUS_LEDGER_TTL_MS`). */
  readonly ledgerTtlMs: number;
  readonly maxToolOutputChars: number;
  readonly approvalTimeoutMs: number;
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
  /** Prompt size and message rates per tenant and per session; over them a message is refused. */
  readonly admission: AdmissionLimits;
  /**
   * Recall from memory at a turn's first step: the share of the model's window its snippets may take (0: never
   * ask), how long to wait for memory, and how many snippets to ask for.
   */
  readonly recall: { readonly share: number; readonly timeoutMs: number; readonly k: number };
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
  toolTimeoutMs: 60_000,
  toolHeartbeatLapseMs: 3_000,
  ledgerTtlMs: 24 * 60 * 60_000,
  maxToolOutputChars: 100_000,
  approvalTimeoutMs: 10 * 60_000,
  leaseTtlMs: 2_000,
  idleMs: 5 * 60_000,
  admission: DEFAULT_ADMISSION_LIMITS,
  recall: { share: 0.1, timeoutMs: 300, k: 5 },
};
