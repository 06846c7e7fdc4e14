import { createWriteStream, mkdirSync, openSync, renameSync, statSync } from 'node:fs';
import type { WriteStream } from 'node:fs';
import { join } from 'node:path';
import type { ServiceName } from './service-stack.ts';

/** pino's level numbers and their names. */
const LEVELS: Readonly<Record<number, string>> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/** pino's `warn`: from this level on a line is shown on the terminal even when the logs go to files. */
const WARN_LEVEL = 40;

/** A service's log file past this size at a start is moved to `<service>.log.1` (one older generation kept). */
export const LOG_ROTATE_BYTES = 5 * 1024 * 1024;

/** Where the service logs of a stack go. */
export interface ServiceLogOptions {
  /** The folder of the `<service>.log` files, e.g. `.agentbus/logs`. */
  readonly dir: string;
  /** Whose files are opened (and rotated) at once, so that each service has its file even before its first line. */
  readonly services: readonly ServiceName[];
  /** Every line also on the terminal (`[service] level message`), as `--verbose` asks. */
  readonly verbose: boolean;
  /** The terminal: one human line for each warning or error, every line when verbose. */
  readonly write: (line: string) => void;
}

/** The log files of one stack's services. */
export interface ServiceLogs {
  /** Takes one output line of a service (a pino JSON line, or anything else it printed). */
  readonly onLog: (service: ServiceName, line: string) => void;
  /** The file a service's lines go to. */
  file(service: ServiceName): string;
  /** Ends the files' streams once what was written is flushed. */
  close(): Promise<void>;
}

/**
 * Sends every output line of the services to `<dir>/<service>.log` (appended, readable by its owner alone), and to the terminal: every line when verbose, else only warnings and errors, one human line each.
 */
export function openServiceLogs(options: ServiceLogOptions): ServiceLogs {
  const streams = new Map<ServiceName, WriteStream>();
  const file = (service: ServiceName) => join(options.dir, `${service}.log`);
  const stream = (service: ServiceName): WriteStream => {
    let open = streams.get(service);
    if (open === undefined) {
      rotate(file(service));
      // Opened at once (not when the stream gets round to it): the file is there as soon as the stack says so.
      open = createWriteStream(file(service), { fd: openSync(file(service), 'a', 0o600) });
      // A full disk or a removed folder loses log lines, never the stack.
      open.on('error', () => undefined);
      streams.set(service, open);
    }
    return open;
  };
  mkdirSync(options.dir, { recursive: true, mode: 0o700 });
  for (const service of options.services) stream(service);
  return {
    file,
    onLog(service, line) {
      stream(service).write(`${line}\n`);
      if (options.verbose) options.write(`[${service}] ${humanLogLine(line)}`);
      else {
        const notice = userNotice(line);
        if (notice !== undefined) options.write(`agentbus: ${service} ${notice}`);
      }
    },
    async close() {
      await Promise.all([...streams.values()].map((open) => new Promise<void>((resolve) => open.end(resolve))));
      streams.clear();
    },
  };
}

/** Moves a log file past {@link LOG_ROTATE_BYTES} aside, over the previous one. */
function rotate(path: string): void {
  const size = statSync(path, { throwIfNoEntry: false })?.size ?? 0;
  if (size > LOG_ROTATE_BYTES) renameSync(path, `${path}.1`);
}

/** A pino JSON line as a record, or undefined for any other line. */
function parseRecord(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    // A log line of our own child process, not bus data.
    const record = JSON.parse(line) as unknown;
    return typeof record === 'object' && record !== null && !Array.isArray(record) ? (record as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Turns a pino JSON line into `level message {fields}`; other lines pass through. */
export function humanLogLine(line: string): string {
  const record = parseRecord(line);
  if (record === undefined) return line;
  const { level, msg, time: _time, pid: _pid, hostname: _hostname, name: _name, ...rest } = record;
  const extra = Object.keys(rest).length > 0 ? ` ${JSON.stringify(rest)}` : '';
  return `${LEVELS[Number(level)] ?? String(level)} ${String(msg ?? '')}${extra}`;
}

/**
 * A warning or error line as the user reads it, `warn: message: the error's message` on one line, or undefined for
 * a line below warning level or not pino's (those stay in the file).
 */
export function userNotice(line: string): string | undefined {
  const record = parseRecord(line);
  if (record === undefined || typeof record.level !== 'number' || record.level < WARN_LEVEL) return undefined;
  const err = record.err as { message?: unknown } | undefined;
  const cause = typeof err?.message === 'string' && err.message !== '' ? `: ${err.message}` : '';
  return `${LEVELS[record.level] ?? String(record.level)}: ${String(record.msg ?? '')}${cause}`.replace(/\s*\n\s*/g, ' ');
}
