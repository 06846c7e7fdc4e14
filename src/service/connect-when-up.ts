/**
 * The environment variable that tells a service its bus may still be starting: for that many milliseconds its first
 * connect is tried again while the server refuses connections. `agentbus ask` and `agentbus up` start the services
 * beside their embedded nats-server rather than after it, so that the services' start (most of a cold start) and
 * the server's overlap.
 */
export const BUS_STARTING_ENV = 'AGENTBUS_BUS_STARTING_MS';

/** How often a refused first connect is tried again: a refused loopback connect costs well under a millisecond. */
const RETRY_EVERY_MS = 20;

/** True when `error` is a connection the server's host refused: nothing listens on its port (yet). */
function refused(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  return cause?.code === 'ECONNREFUSED';
}

/**
 * Runs `connect` until it succeeds, trying again every 20 ms while the server refuses connections and `waitMs` has
 * not passed; any other error, or a refusal past `waitMs`, is thrown as is. `waitMs` 0 connects once.
 *
 * @example
 * const nc = await connectWhenUp(() => connectBus(options), { waitMs: Number(env.AGENTBUS_BUS_STARTING_MS ?? 0) });
 */
export async function connectWhenUp<T>(connect: () => Promise<T>, options: { readonly waitMs: number; readonly now?: () => number }): Promise<T> {
  const now = options.now ?? (() => performance.now());
  const until = now() + Math.max(0, options.waitMs);
  for (;;) {
    try {
      return await connect();
    } catch (error) {
      if (!refused(error) || now() + RETRY_EVERY_MS > until) throw error;
      await new Promise((resolve) => setTimeout(resolve, RETRY_EVERY_MS));
    }
  }
}

/** The wait of {@link BUS_STARTING_ENV} in `env`: 0 when unset or not a whole number of milliseconds (at most a minute). */
export function busStartingWaitMs(env: NodeJS.ProcessEnv): number {
  const value = Number(env[BUS_STARTING_ENV]?.trim() ?? '');
  return Number.isInteger(value) && value > 0 ? Math.min(value, 60_000) : 0;
}
