/** The first wait for a service that is not there: a worker that is restarting is often back within this. */
const FIRST_WAIT_MS = 100;

/** The longest single wait: past it a service that came back would be left unasked for too long. */
const LONGEST_WAIT_MS = 2_000;

/**
 * The waits before each new try of a request nobody answered (`no_responders`): doubling from 100 ms up to 2 s,
 * together `totalMs` exactly (the last one cut short), none when `totalMs` is 0 or less. The length plus one is the
 * number of tries, which `retry` events report as `maxAttempts`.
 *
 * @example
 * serviceWaits(1_000); // [100, 200, 400, 300]
 */
export function serviceWaits(totalMs: number): number[] {
  const waits: number[] = [];
  let left = Math.floor(totalMs);
  for (let next = FIRST_WAIT_MS; left > 0; next = Math.min(next * 2, LONGEST_WAIT_MS)) {
    const delay = Math.min(next, left);
    waits.push(delay);
    left -= delay;
  }
  return waits;
}
