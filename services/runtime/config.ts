/** Settings of the runtime service. */
export interface RuntimeConfig {
  readonly prefix: string;
  /** Node id, unique per process; names the lease owner. */
  readonly nodeId: string;
  readonly defaultModel: string;
  readonly maxSteps: number;
  readonly systemPrompt: string;
  readonly maxOutputTokens: number;
  readonly providerTimeoutMs: number;
  readonly providerIdleTimeoutMs: number;
  readonly toolTimeoutMs: number;
  readonly maxToolOutputChars: number;
  readonly approvalTimeoutMs: number;
  readonly leaseTtlMs: number;
  /** An idle session is dropped from memory after this long. */
  readonly idleMs: number;
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
  maxToolOutputChars: 100_000,
  approvalTimeoutMs: 10 * 60_000,
  leaseTtlMs: 15_000,
  idleMs: 5 * 60_000,
};
