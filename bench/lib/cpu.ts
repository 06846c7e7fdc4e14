import { readFileSync } from 'node:fs';

/** CPU time (user + system) a process has used so far, in ms, from `/proc/<pid>/stat`; undefined off Linux. */
export function cpuTimeMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    // The kernel's clock tick is 100 Hz on every Linux Node.js supports.
    return Number.isFinite(ticks) ? ticks * 10 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU ms per session of each named process over a measured stretch. */
export interface CpuShare {
  /** CPU ms per session, by process. */
  readonly perSessionMs: Readonly<Record<string, number>>;
  readonly totalMs: number;
  /** Sessions per second the measured CPU cost allows on all cores, were nothing else running. */
  readonly ceilingPerSecond: number;
}

/** Starts measuring the CPU of `pids`; `stop(sessions)` divides what they used by the sessions run. */
export function measureCpu(pids: Readonly<Record<string, number | undefined>>, cores: number): { stop(sessions: number): CpuShare | undefined } {
  const before = Object.entries(pids).map(([name, pid]) => [name, pid, cpuTimeMs(pid)] as const);
  return {
    stop(sessions) {
      const perSessionMs: Record<string, number> = {};
      for (const [name, pid, start] of before) {
        const end = cpuTimeMs(pid);
        if (start === undefined || end === undefined || sessions <= 0) return undefined;
        perSessionMs[name] = (end - start) / sessions;
      }
      const totalMs = Object.values(perSessionMs).reduce((sum, ms) => sum + ms, 0);
      return { perSessionMs, totalMs, ceilingPerSecond: (cores * 1000) / totalMs };
    },
  };
}
