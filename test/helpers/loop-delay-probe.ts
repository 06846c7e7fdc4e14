import type { ServiceProcess } from './service-process.ts';

/** The node flag that preloads the probe into a service process started with `startServiceProcess`. */
export const LOOP_DELAY_PROBE_FLAGS: readonly string[] = ['--import', './test/helpers/loop-delay-probe.mjs'];

/** Reads a service process's event-loop delay through the probe of `loop-delay-probe.mjs`. */
export interface LoopDelayProbe {
  /**
   * The longest the loop was held (ms beyond the sampling resolution) since the last call; starts a new window
   * and resolves once that window has had its first tick.
   */
  window(options?: { timeoutMs?: number }): Promise<number>;
}

/**
 * Reads the probe preloaded (with {@link LOOP_DELAY_PROBE_FLAGS}) into `service`: each window is asked for by
 * a SIGUSR2 and answered on its output. A process whose loop is held answers only once it is free again.
 *
 * @example
 * const probe = createLoopDelayProbe(tools);
 * await probe.window(); // starts a window
 * // … calls …
 * expect(await probe.window()).toBeLessThan(100);
 */
export function createLoopDelayProbe(service: ServiceProcess): LoopDelayProbe {
  let sequence = 0;
  return {
    async window({ timeoutMs = 5_000 } = {}) {
      sequence += 1;
      const line = `loop-delay-probe seq=${sequence} `;
      service.child.kill('SIGUSR2');
      await service.waitFor(line, timeoutMs);
      const output = service.output();
      const match = new RegExp(`${line}max=([\\d.]+)`).exec(output.slice(output.lastIndexOf(line)));
      if (!match) throw new Error(`no figure in the probe's line ${sequence}`);
      // The monitor measures between its own ticks, and a new window has none yet: a loop held before the
      // first one would go unseen.
      await new Promise((resolve) => setTimeout(resolve, 50));
      return Number(match[1]);
    },
  };
}
