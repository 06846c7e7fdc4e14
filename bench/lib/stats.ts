/** Summary of a sample of durations in milliseconds. */
export interface Summary {
  readonly n: number;
  readonly p50: number;
  readonly p99: number;
  readonly mean: number;
  readonly min: number;
  readonly max: number;
}

/** The q-quantile (0..1) of sorted values, nearest rank. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** p50, p99, mean, min and max of a sample. */
export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const total = sorted.reduce((sum, value) => sum + value, 0);
  return {
    n: sorted.length,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    mean: sorted.length ? total / sorted.length : Number.NaN,
    min: sorted[0] ?? Number.NaN,
    max: sorted.at(-1) ?? Number.NaN,
  };
}

/** Milliseconds since an origin, from the monotonic clock. */
export const now = (): number => performance.now();

/** Rounds for display: 3 significant-ish digits. */
export function round(value: number, digits = 3): number {
  if (!Number.isFinite(value)) return value;
  const magnitude = Math.abs(value) >= 100 ? 1 : Math.abs(value) >= 10 ? 10 : Math.abs(value) >= 1 ? 100 : 10 ** digits;
  return Math.round(value * magnitude) / magnitude;
}
