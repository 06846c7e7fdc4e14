import { pino } from 'pino';
import type { Logger, DestinationStream } from 'pino';

export type { Logger };

/** Paths pino redacts in every log line: keys and authorization headers never reach a log. */
export const REDACT_PATHS = [
  'apiKey',
  '*.apiKey',
  '*.*.apiKey',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'headers["x-api-key"]',
  '*.headers["x-api-key"]',
  'config.providers.*.apiKey',
];

/**
 * Creates the root logger of a process. One per process, made in `main.ts`.
 *
 * @example
 * const logger = createLogger({ name: 'runtime', level: process.env.LOG_LEVEL });
 * const sessionLogger = logger.child({ tenant, sessionId });
 */
export function createLogger(options: { name: string; level?: string; destination?: DestinationStream }): Logger {
  const config = {
    name: options.name,
    level: options.level ?? 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  };
  return options.destination ? pino(config, options.destination) : pino(config, pino.destination(2));
}
