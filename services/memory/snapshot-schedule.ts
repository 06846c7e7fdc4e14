import type { Logger } from '../../src/logging.ts';
import type { SnapshotStore } from './snapshots.ts';
import type { MemorySnapshot } from './tenant-memory.ts';

/** When memory writes its index snapshot. */
export interface SnapshotScheduleOptions {
  readonly store: SnapshotStore;
  /** The snapshot of the serving index, or undefined while it has not caught up with the log. */
  readonly take: () => MemorySnapshot | undefined;
  readonly logger: Logger;
  /** Changes (events indexed, chunks embedded) that call for a snapshot at once; default 20,000. */
  readonly everyEvents?: number;
  /** Longest time indexed events wait for a snapshot; default 60 s. */
  readonly intervalMs?: number;
}

/** Writes snapshots in the background, one at a time. */
export interface SnapshotSchedule {
  /** Counts one change: an indexed event, or a chunk that got its vector. */
  noteIndexed(): void;
  /** Writes a snapshot now if anything changed since the last one, or in any case with `force` (and waits for it). */
  flush(options?: { force?: boolean }): Promise<void>;
  /** Snapshots written. */
  written(): number;
  stop(): void;
}

/**
 * Writes a snapshot once {@link SnapshotScheduleOptions.everyEvents} events were indexed since the last one, or
 * when the interval passes with any; never two at once. A failed write is logged and tried again next time: the
 * log stays the truth, a missing snapshot only means a longer start.
 */
export function scheduleSnapshots(options: SnapshotScheduleOptions): SnapshotSchedule {
  const everyEvents = options.everyEvents ?? 20_000;
  let changed = 0;
  let writing: Promise<void> | undefined;
  let written = 0;
  const write = (): Promise<void> => {
    if (writing) return writing;
    if (changed === 0) return Promise.resolve();
    const snapshot = options.take();
    if (!snapshot) return Promise.resolve();
    const covered = changed;
    const started = performance.now();
    writing = options.store
      .save(snapshot)
      .then((stored) => {
        changed = Math.max(0, changed - covered);
        if (stored) {
          written += 1;
          options.logger.info({ seq: snapshot.seq, ms: Math.round(performance.now() - started) }, 'memory snapshot written');
        }
      })
      .catch((err: unknown) => options.logger.warn({ err }, 'memory snapshot failed; the next one is tried later'))
      .finally(() => {
        writing = undefined;
      });
    return writing;
  };
  const timer = setInterval(() => void write(), options.intervalMs ?? 60_000);
  timer.unref();
  return {
    noteIndexed() {
      changed += 1;
      if (changed >= everyEvents) void write();
    },
    async flush(options: { force?: boolean } = {}) {
      await writing;
      // A new index (a rebuild) is written even if a write during its catch-up counted its events as saved.
      if (options.force) changed = Math.max(changed, 1);
      await write();
    },
    written: () => written,
    stop: () => clearInterval(timer),
  };
}
