import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** A service main started as its own Node process, the way `agentbus up` or a container runs it. */
export interface ServiceProcess {
  readonly child: ChildProcess;
  output(): string;
  /** Resolves when the output contains `text`. */
  waitFor(text: string, timeoutMs?: number): Promise<void>;
  /** SIGTERM (graceful) or SIGKILL (crash); resolves when the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `services/<name>/main.ts` with tsx and the given environment. */
export function startServiceProcess(entry: string, env: Record<string, string>): ServiceProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const listeners = new Set<() => void>();
  const append = (chunk: Buffer) => {
    output += chunk.toString();
    for (const listener of listeners) listener();
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => output,
    waitFor(text, timeoutMs = 20_000) {
      if (output.includes(text)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`"${text}" not seen within ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
        const check = () => {
          if (!output.includes(text)) return;
          clearTimeout(timer);
          listeners.delete(check);
          resolve();
        };
        listeners.add(check);
      });
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
