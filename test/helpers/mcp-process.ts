import { spawn } from 'node:child_process';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { AGENTBUS_BIN } from './agentbus-bin.ts';
import { ROOT } from './service-process.ts';

/** The test MCP server over stdio, as the command `agentbus mcp` starts after `--`. */
export const MCP_STDIO_SERVER = ['node', '--import', 'tsx', 'test/helpers/mcp-stdio-server.ts'];

/** A running `agentbus mcp` (or any `agentbus` command that keeps running), with its output. */
export interface AgentbusProcess {
  readonly child: ChildProcessWithoutNullStreams;
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout or stderr contains `text` (counting from `from` characters of the two joined); rejects if it exits first. */
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<void>;
  /** SIGTERM (SIGKILL after 8 s); resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** Starts the real `agentbus` binary with `args` and exactly `env`, from the repository root. */
export function startAgentbus(args: readonly string[], env: NodeJS.ProcessEnv): AgentbusProcess {
  const child = spawn(process.execPath, [AGENTBUS_BIN, ...args], { cwd: ROOT, env });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (const listener of [...listeners]) listener();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    for (const listener of [...listeners]) listener();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const seen = (text: string | RegExp) => {
    const all = `${stdout}\n${stderr}`;
    return typeof text === 'string' ? all.includes(text) : text.test(all);
  };
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    waitFor(text, timeoutMs = 20_000) {
      if (seen(text)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        const check = () => {
          if (!seen(text)) return;
          done();
          resolve();
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`agentbus ${args.join(' ')}: ${String(text)} not seen within ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        }, timeoutMs);
        listeners.add(check);
        void exited.then((code) => {
          if (!listeners.has(check)) return;
          done();
          reject(new Error(`agentbus ${args.join(' ')} exited with ${code} before ${String(text)}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        });
      });
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 8_000);
        void exited.then(() => clearTimeout(timer));
      }
      return exited;
    },
  };
}
