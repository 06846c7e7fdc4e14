import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The `agentbus` binary of this checkout. */
export const AGENTBUS_BIN = fileURLToPath(new URL('../../bin/agentbus.js', import.meta.url));

/** How a run of the binary ended. */
export interface AgentbusRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs the real `agentbus` binary to its end with exactly `env`, writing `stdin` to it (then closing it) when
 * given; rejects (after killing it) when it has not exited within `timeoutMs`.
 *
 * @example
 * const run = await runAgentbus(['ask', 'hello'], { cwd: dir, env: offlineEnv() });
 */
export function runAgentbus(args: readonly string[], options: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs?: number; stdin?: string }): Promise<AgentbusRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [AGENTBUS_BIN, ...args], { cwd: options.cwd, env: options.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`agentbus ${args.join(' ')} did not exit within ${options.timeoutMs ?? 60_000} ms\n${stderr}`));
    }, options.timeoutMs ?? 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    if (options.stdin !== undefined) child.stdin.end(options.stdin);
  });
}

/**
 * This process's environment without anything that would pick a bus or a real model, and with the dashboard on any
 * free port (so that one already on 4280 does not stop a test): how the CLI runs for a newcomer, offline.
 */
export function offlineEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['NATS_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OLLAMA_HOST', 'AGENTBUS_MODEL', 'AGENTBUS_CONFIG', 'AGENTBUS_SCRIPT']) delete env[name];
  env.AGENTBUS_DASHBOARD_PORT = '0';
  env.AGENTBUS_A2A_PORT = '0';
  return env;
}
