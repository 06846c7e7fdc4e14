import { Worker } from 'node:worker_threads';
import { ErrorCode, ToolError } from '../../src/errors.ts';

/** Finds the lines a model-written regular expression matches, off the worker's event loop. */
export interface LineMatcher {
  /** Indexes of the lines that match; rejects (`timeout`) when the expression runs past its budget. */
  match(lines: readonly string[], signal: AbortSignal): Promise<number[]>;
  close(): Promise<void>;
}

// Plain JavaScript run by the thread: one compiled expression, a list of lines in, matching indexes out.
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const expression = new RegExp(workerData.source, workerData.flags);
parentPort.on('message', (lines) => {
  const found = [];
  for (let index = 0; index < lines.length; index += 1) if (expression.test(lines[index])) found.push(index);
  parentPort.postMessage(found);
});
`;

/**
 * A regular expression from a model may backtrack for minutes on one line (`(a|aa)+$`), and JavaScript cannot
 * interrupt a match: run on the tools worker's own loop it would stall every call the worker serves. This runs
 * it in a thread of its own, and ends the thread when one file's lines take longer than `budgetMs` or the call
 * is cancelled. The thread starts on the first file.
 *
 * @example
 * const lines = createLineMatcher('TODO\\s*:', 'u', 5000);
 * const found = await lines.match(text.split('\n'), signal); // [3, 17]
 * await lines.close();
 */
export function createLineMatcher(source: string, flags: string, budgetMs: number): LineMatcher {
  let thread: Worker | undefined;
  return {
    match(lines, signal) {
      thread ??= new Worker(THREAD, { eval: true, workerData: { source, flags } });
      const running = thread;
      return new Promise<number[]>((resolve, reject) => {
        const finish = (settle: () => void) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          running.off('message', onMessage);
          running.off('error', onError);
          settle();
        };
        const stop = (error: Error) => {
          thread = undefined;
          void running.terminate();
          finish(() => reject(error));
        };
        const onMessage = (found: number[]) => finish(() => resolve(found));
        const onError = (error: Error) => stop(new ToolError(ErrorCode.toolFailed, `the regular expression failed: ${error.message}`, { cause: error }));
        const onAbort = () => stop(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        const timer = setTimeout(
          () => stop(new ToolError(ErrorCode.timeout, `the regular expression took over ${budgetMs} ms on one file (it may backtrack without end, e.g. nested repetition); simplify it or search for plain text`)),
          budgetMs,
        );
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        running.on('message', onMessage);
        running.on('error', onError);
        running.postMessage(lines);
      });
    },
    async close() {
      await thread?.terminate();
      thread = undefined;
    },
  };
}
