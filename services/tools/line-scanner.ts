import { Worker } from 'node:worker_threads';
import { ErrorCode, ToolError } from '../../src/errors.ts';

/** One line a scan found. */
export interface ScannedLine {
  /** 1-based. */
  readonly line: number;
  /** The line without its `\r`, cut to `maxLine` characters with `…`. */
  readonly text: string;
}

/** Finds the lines of files that a regular expression matches, off the caller's event loop. */
export interface LineScanner {
  /**
   * The first `limit` lines of the UTF-8 text `bytes` that match, in order. Rejects with a `timeout`
   * {@link ToolError} when one file takes longer than the budget, and with the signal's reason when it aborts;
   * either way the thread is ended.
   */
  scan(bytes: Uint8Array, limit: number, signal: AbortSignal): Promise<ScannedLine[]>;
  /** Ends the thread, if one runs. */
  close(): Promise<void>;
}

/** Options of {@link createLineScanner}. */
export interface LineScannerOptions {
  /** A JavaScript regular expression (plain text comes escaped). */
  readonly source: string;
  readonly flags: string;
  /** Longest one file may take; past it the thread is ended and the scan fails. */
  readonly budgetMs: number;
  /** Longest line text returned; longer ones are cut with `…`. */
  readonly maxLine: number;
  /** What the timeout message blames: a model's regular expression, or a plain text. */
  readonly regex: boolean;
}

// Plain JavaScript run by the thread: one compiled expression; a file's bytes in, its matching lines out.
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const expression = new RegExp(workerData.source, workerData.flags);
const maxLine = workerData.maxLine;
function cut(line) {
  const trimmed = line.endsWith('\\r') ? line.slice(0, -1) : line;
  return trimmed.length > maxLine ? trimmed.slice(0, maxLine) + '\\u2026' : trimmed;
}
parentPort.on('message', ({ bytes, limit }) => {
  const lines = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8').split('\\n');
  const found = [];
  for (let index = 0; index < lines.length && found.length < limit; index += 1) {
    if (expression.test(lines[index])) found.push({ line: index + 1, text: cut(lines[index]) });
  }
  parentPort.postMessage(found);
});
`;

/**
 * Matching a file's lines can hold a thread for as long as its input allows: a model's regular expression may
 * backtrack for minutes on one line (`(a|aa)+$`), a case-insensitive text of 1,000 characters takes seconds over
 * a 4 MiB line, and splitting a file of millions of short lines takes hundreds of milliseconds. JavaScript
 * cannot interrupt any of it, and on the tools worker's own loop it would stall every call the worker serves,
 * its heartbeats too. So all of it (decoding, splitting, matching, cutting) runs in a thread of its own, ended
 * when one file takes longer than `budgetMs` or the call's signal aborts (its deadline or a cancel). The loop
 * only hands over the bytes. The thread starts on the first file.
 *
 * @example
 * const scanner = createLineScanner({ source: 'TODO\\s*:', flags: 'u', budgetMs: 5000, maxLine: 300, regex: true });
 * const found = await scanner.scan(await readFile(path), 100, signal); // [{ line: 3, text: '// TODO: …' }]
 * await scanner.close();
 */
export function createLineScanner(options: LineScannerOptions): LineScanner {
  const { source, flags, budgetMs, maxLine } = options;
  const overBudget = options.regex
    ? `the regular expression took over ${budgetMs} ms on one file (it may backtrack without end, e.g. nested repetition); simplify it or search for plain text`
    : `searching one file for the text took over ${budgetMs} ms; narrow the search with path or glob, or search case-sensitively`;
  const failed = options.regex ? 'the regular expression failed' : 'the search failed';
  let thread: Worker | undefined;
  return {
    scan(bytes, limit, signal) {
      thread ??= new Worker(THREAD, { eval: true, workerData: { source, flags, maxLine } });
      const running = thread;
      return new Promise<ScannedLine[]>((resolve, reject) => {
        const finish = (settle: () => void) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          running.off('message', onMessage);
          running.off('error', onError);
          settle();
        };
        const stop = (error: Error) => {
          if (thread === running) thread = undefined;
          void running.terminate();
          finish(() => reject(error));
        };
        const onMessage = (found: ScannedLine[]) => finish(() => resolve(found));
        const onError = (error: Error) => stop(new ToolError(ErrorCode.toolFailed, `${failed}: ${error.message}`, { cause: error }));
        const onAbort = () => stop(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        const timer = setTimeout(() => stop(new ToolError(ErrorCode.timeout, overBudget)), budgetMs);
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        running.on('message', onMessage);
        running.on('error', onError);
        running.postMessage({ bytes, limit });
      });
    },
    async close() {
      const running = thread;
      thread = undefined;
      await running?.terminate();
    },
  };
}
