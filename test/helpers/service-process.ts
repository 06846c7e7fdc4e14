import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isReadyMessage } from '../../src/ready.ts';

/** The repository root. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A TypeScript entry (a service main, a bench worker) started as its own Node process with tsx. */
export interface ServiceProcess {
  readonly child: ChildProcess;
  output(): string;
  /** Resolves when the output contains `text` (within 40 s unless told: starting a service under tsx on a loaded 2-core machine has taken over 20 s); rejects when the process exits first. */
  waitFor(text: string, timeoutMs?: number): Promise<void>;
  /**
   * SIGTERM (graceful, SIGKILL after 5 s) or SIGKILL (a crash); resolves with the exit code once the
   * process has exited.
   */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Resolves when the service says it serves over IPC (started with `ipc: true`); rejects when it exits first. */
  ready(timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code (or the signal that ended it) once the process has exited. */
  readonly exited: Promise<number | NodeJS.Signals | null>;
}

/** Options of {@link startServiceProcess} past the environment. */
export interface ServiceProcessOptions {
  /** Extra node flags. */
  readonly nodeFlags?: readonly string[];
  /** Open an IPC channel, as `agentbus up` does: the service then reports ready on it and stops when it closes. */
  readonly ipc?: boolean;
}

/**
 * Starts `entry` (relative to the repository root) with `node --import tsx`, the given environment and
 * extra node flags. Used by the tests and the bench.
 */
export function startServiceProcess(entry: string, env: Record<string, string>, nodeFlags: readonly string[] | ServiceProcessOptions = []): ServiceProcess {
  const options: ServiceProcessOptions = isFlagList(nodeFlags) ? { nodeFlags } : nodeFlags;
  const child = spawn(process.execPath, [...(options.nodeFlags ?? []), '--import', 'tsx', entry], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe', ...(options.ipc ? (['ipc'] as const) : [])],
  });
  let readyNow = false;
  child.on('message', (message) => {
    if (isReadyMessage(message)) readyNow = true;
  });
  let output = '';
  const listeners = new Set<() => void>();
  const append = (chunk: Buffer) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
    for (const listener of listeners) listener();
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ended = new Promise<number | NodeJS.Signals | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  return {
    child,
    exited: ended,
    output: () => output,
    ready(timeoutMs = 30_000) {
      if (readyNow) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          child.off('message', onMessage);
          reject(new Error(`${entry}: no ready message within ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
        const onMessage = (message: unknown) => {
          if (!isReadyMessage(message)) return;
          clearTimeout(timer);
          child.off('message', onMessage);
          resolve();
        };
        child.on('message', onMessage);
        void exited.then(() => {
          clearTimeout(timer);
          child.off('message', onMessage);
          reject(new Error(`${entry} exited before it was ready; output:\n${output}`));
        });
      });
    },
    waitFor(text, timeoutMs = 40_000) {
      if (output.includes(text)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        const check = () => {
          if (!output.includes(text)) return;
          done();
          resolve();
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${entry}: "${text}" not seen within ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
        listeners.add(check);
        void exited.then(() => {
          if (!listeners.has(check)) return;
          done();
          reject(new Error(`${entry} exited before "${text}"; output:\n${output}`));
        });
      });
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        void exited.then(() => clearTimeout(timer));
      }
      return exited;
    },
  };
}

function isFlagList(value: readonly string[] | ServiceProcessOptions): value is readonly string[] {
  return Array.isArray(value);
}
