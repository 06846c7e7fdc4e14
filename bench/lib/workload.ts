/**
 * The one workload every system runs: three model calls with short text deltas, two of them asking for
 * two parallel read-only tool calls each (four zero-latency tool calls in all), then an answer.
 */

/** Name of the bench tool: read-only, answers at once (or after `delayMs` for the I/O-bound run). */
export const TOOL_NAME = 'bench_lookup';

/** A side-effecting bench tool: its worker records each outcome in the result ledger before it replies. */
export const RECORDED_TOOL_NAME = 'bench_record';

/** The prompt every session starts with. */
export const PROMPT = 'Look up alpha, beta, gamma and delta, then sum them up.';

/** One scripted model answer. */
export interface WorkloadStep {
  readonly text: string;
  readonly toolCalls: ReadonlyArray<{ readonly name: string; readonly args: { readonly key: string } }>;
}

/** The three model answers, in order; a session plays them from the start. */
export const STEPS: readonly WorkloadStep[] = [
  {
    text: 'Let me look up the first two.',
    toolCalls: [
      { name: TOOL_NAME, args: { key: 'alpha' } },
      { name: TOOL_NAME, args: { key: 'beta' } },
    ],
  },
  {
    text: 'Now the other two.',
    toolCalls: [
      { name: TOOL_NAME, args: { key: 'gamma' } },
      { name: TOOL_NAME, args: { key: 'delta' } },
    ],
  },
  { text: 'All four values are in: the sum is 10.', toolCalls: [] },
];

/** Model calls and tool calls per session. */
export const COUNTS = { modelCalls: STEPS.length, toolCalls: STEPS.reduce((total, step) => total + step.toolCalls.length, 0) } as const;

/** The value the bench tool returns for a key. */
export function lookup(key: string): string {
  return `${key}=${key.length}`;
}

/** Splits text into word-sized deltas (a word and the space after it), as the scripted provider does. */
export function deltas(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [text];
}

/** The workload as a `scripted` provider script (`AGENTBUS_SCRIPT`). */
export function providerScript(): { responses: Array<{ text: string; toolCalls?: Array<{ name: string; args: Record<string, unknown> }> }> } {
  return {
    responses: STEPS.map((step) =>
      step.toolCalls.length > 0
        ? { text: step.text, toolCalls: step.toolCalls.map((call) => ({ name: call.name, args: { ...call.args } })) }
        : { text: step.text },
    ),
  };
}
