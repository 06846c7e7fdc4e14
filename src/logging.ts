import { pino } from 'pino';
import type { Logger, DestinationStream } from 'pino';
import { createScrubber, redactionMarker } from './scrub/index.ts';
import type { Scrubber } from './scrub/index.ts';

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

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  readonly name: string;
  readonly level?: string | undefined;
  readonly destination?: DestinationStream;
  /** Exact values never written (e.g. `secretsFromEnv(process.env)`); ignored when `scrubber` is given. */
  readonly secrets?: readonly (string | undefined)[];
  /** Scrubs every line before it is written; default a scrubber of `secrets`. */
  readonly scrubber?: Scrubber;
}

/**
 * Creates the root logger of a process. One per process, made in `main.ts`. Every line is scrubbed just
 * before it is written, whatever field or bound value holds the secret (message, `err` stack, nested
 * object): configured secrets, critical patterns, secret-named assignments and high-entropy tokens
 * become `[REDACTED:<rule>]`. That is the scrubber's synchronous pass, a few microseconds for a line of a
 * few hundred bytes; pino's `redact` paths still apply first.
 *
 * @example
 * const logger = createLogger({ name: 'runtime', level: process.env.LOG_LEVEL, secrets: secretsFromEnv(process.env) });
 * const sessionLogger = logger.child({ tenant, sessionId });
 */
export function createLogger(options: LoggerOptions): Logger {
  const scrubber = options.scrubber ?? createScrubber({ secrets: options.secrets ?? [] });
  const config = {
    name: options.name,
    level: options.level ?? 'info',
    redact: { paths: REDACT_PATHS, censor: redactionMarker('log-field') },
    hooks: { streamWrite: (line: string) => scrubber.scrubJsonLine(line) },
  };
  return options.destination ? pino(config, options.destination) : pino(config, pino.destination(2));
}
