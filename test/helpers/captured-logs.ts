import { createLogger } from '../../src/logging.ts';
import type { Logger } from '../../src/logging.ts';

/** A logger at `level` whose lines are kept, parsed, in `lines`, for tests that assert what a service logged. */
export function captureLogs(level: 'debug' | 'info' | 'warn' = 'warn'): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ name: 'test', level, destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  return { logger, lines };
}
