import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { z } from 'zod';
import { ErrorCode, ToolError, abortReason } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { DEFAULT_COMMAND_SANDBOX } from './sandbox-config.ts';
import type { CommandSandbox } from './sandbox-config.ts';
import { commandLaunch, sandboxStartError } from './sandbox-launch.ts';
import type { Workspaces } from './workspace.ts';

/** Time limit of a command when the call gives none. */
export const RUN_COMMAND_DEFAULT_TIMEOUT_MS = 30_000;
/** Longest time limit a call may ask for. */
export const RUN_COMMAND_MAX_TIMEOUT_MS = 300_000;
/** Most characters of stdout (and, separately, of stderr) returned; the rest is cut with a note. */
export const RUN_COMMAND_MAX_OUTPUT = 50_000;
/** How long a process group has between SIGTERM and SIGKILL. */
export const RUN_COMMAND_KILL_GRACE_MS = 1_000;

/** The output of run_command. */
export interface CommandResult {
  /** The exit code; null when a signal ended the process. */
  readonly exitCode: number | null;
  /** The signal that ended the process, if one did. */
  readonly signal: string | null;
  /** True when the time limit was reached and the process group killed. */
  readonly timedOut: boolean;
  readonly stdout: string;
  readonly stderr: string;
  readonly durationMs: number;
  /** Set only when the command ran without a sandbox (`AGENTBUS_UNSAFE_NO_SANDBOX=1`), so that whoever reads the result knows. */
  readonly warning?: string;
}

/** Options of {@link createRunCommandTool}. */
export interface RunCommandOptions {
  /** Default {@link DEFAULT_COMMAND_SANDBOX}: bubblewrap, no network. */
  readonly sandbox?: CommandSandbox;
  /** The worker's environment, for what an unsandboxed command inherits (a few safe variables); default `process.env`. */
  readonly workerEnv?: NodeJS.ProcessEnv;
}

/** The `warning` of an unsandboxed result. */
export const UNSANDBOXED_WARNING = 'ran without a sandbox (AGENTBUS_UNSAFE_NO_SANDBOX=1): the command could read and change whatever the tools worker can';

const parameters = z.strictObject({
  command: z.array(z.string().max(100_000)).min(1).max(1000).describe("Program and arguments, e.g. ['git', 'status']; run without a shell"),
  cwd: z.string().default('.').describe('Working directory relative to the workspace; default the workspace'),
  timeoutMs: z
    .int()
    .min(1)
    .max(RUN_COMMAND_MAX_TIMEOUT_MS)
    .default(RUN_COMMAND_DEFAULT_TIMEOUT_MS)
    .describe(`Kill the command after this many milliseconds (default ${RUN_COMMAND_DEFAULT_TIMEOUT_MS})`),
});

/** Keeps the first `limit` characters of a stream and counts the rest. */
function boundedText(limit: number): { add(chunk: Buffer): void; text(): string } {
  let text = '';
  let dropped = 0;
  return {
    add(chunk) {
      const value = chunk.toString('utf8');
      const room = limit - text.length;
      if (room >= value.length) text += value;
      else {
        text += value.slice(0, Math.max(0, room));
        dropped += value.length - Math.max(0, room);
      }
    },
    text: () => (dropped > 0 ? `${text}\n[truncated: ${dropped} more characters not shown]` : text),
  };
}

/**
 * `run_command`: runs a program in the calling tenant's workspace, argv array and no shell, in a bubblewrap sandbox
 * (see `bwrapArguments`: own PID namespace and `/proc`, no network unless configured, only the workspace writable, a
 * clean environment), in its own process group, which is killed (SIGTERM, then SIGKILL) on the time limit or when the
 * call is cancelled; the sandbox dies with it. Returns the exit code and the output, each stream cut at
 * {@link RUN_COMMAND_MAX_OUTPUT} characters. Privileged: the runtime asks a human first. Refuses (`unsupported`) where
 * bwrap is not installed, unless the sandbox is configured off.
 *
 * @example
 * await createRunCommandTool(workspace).execute({ command: ['git', 'status', '--short'] }, context);
 * // { exitCode: 0, signal: null, timedOut: false, stdout: ' M README.md\n', stderr: '', durationMs: 12 }
 */
export function createRunCommandTool(workspaces: Workspaces, options: RunCommandOptions = {}): ToolDefinition<typeof parameters> {
  const sandbox = options.sandbox ?? DEFAULT_COMMAND_SANDBOX;
  const isolation =
    sandbox.kind === 'none'
      ? 'Runs WITHOUT a sandbox.'
      : `Runs in a sandbox: ${sandbox.network ? 'with' : 'no'} network, only the workspace writable, a fresh /tmp, the system's programs read-only.`;
  return defineTool({
    name: 'run_command',
    description:
      'Run a program in the workspace (argv array, no shell: no pipes, globs or variables) and return its exit code, ' +
      `stdout and stderr. Needs approval. Killed after timeoutMs. ${isolation}`,
    parameters,
    tier: SafetyTier.privileged,
    // The call's own timeoutMs is the limit that matters; this leaves room for the kill and the reply.
    timeoutMs: RUN_COMMAND_MAX_TIMEOUT_MS + 5_000,
    idempotent: false,
    async execute({ command, cwd, timeoutMs }, { signal, tenant }): Promise<CommandResult> {
      const workspace = await workspaces.forTenant(tenant, { signal });
      const directory = await workspace.resolve(cwd, { signal });
      const info = await stat(directory).catch(() => undefined);
      if (!info?.isDirectory()) throw new ToolError(ErrorCode.invalidArguments, `cwd ${JSON.stringify(cwd)} is not a directory of the workspace`);
      const root = await workspace.resolve('.', { signal });
      const hidden = await workspace.hiddenPaths({ signal });
      const program = command[0]!;
      const launch = await commandLaunch(sandbox, { workspace: root, cwd: directory, command: command as [string, ...string[]], hidden }, options.workerEnv ?? process.env);
      signal.throwIfAborted();
      const started = Date.now();
      // detached: the child leads a new process group, so a kill reaches what it started too. A sandboxed command is
      // in a session of its own inside, and dies with bwrap (--die-with-parent: its PID namespace goes with it).
      const child = spawn(launch.program, launch.args, { cwd: launch.cwd, env: launch.env, shell: false, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
      const stdout = boundedText(RUN_COMMAND_MAX_OUTPUT);
      const stderr = boundedText(RUN_COMMAND_MAX_OUTPUT);
      child.stdout.on('data', stdout.add);
      child.stderr.on('data', stderr.add);
      let timedOut = false;
      let escalation: ReturnType<typeof setTimeout> | undefined;
      const killGroup = () => {
        const kill = (which: NodeJS.Signals) => {
          try {
            if (child.pid !== undefined) process.kill(-child.pid, which);
          } catch {
            // ESRCH: the group is already gone.
          }
        };
        kill('SIGTERM');
        escalation ??= setTimeout(() => kill('SIGKILL'), RUN_COMMAND_KILL_GRACE_MS);
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, timeoutMs);
      signal.addEventListener('abort', killGroup, { once: true });
      try {
        const [exitCode, exitSignal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
          child.once('error', (error: NodeJS.ErrnoException) => {
            if (error.code === 'ENOENT') reject(new ToolError(ErrorCode.notFound, `no program ${JSON.stringify(program)} on the PATH or in ${cwd}`, { cause: error }));
            else reject(error);
          });
          // 'close' waits for the output pipes, which a grandchild holding them would keep open: it is in the group too.
          child.once('close', (code, closeSignal) => resolve([code, closeSignal]));
        });
        if (signal.aborted) throw abortReason(signal);
        const durationMs = Date.now() - started;
        const failed = launch.sandboxed && !timedOut ? sandboxStartError(exitCode, stderr.text(), program) : undefined;
        if (failed) throw failed;
        const result = { exitCode, signal: exitSignal, timedOut, stdout: stdout.text(), stderr: stderr.text(), durationMs };
        return launch.sandboxed ? result : { ...result, warning: UNSANDBOXED_WARNING };
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', killGroup);
        // Once killing has begun the SIGKILL still follows (harmless when the group is gone), without holding the process open.
        escalation?.unref();
      }
    },
  });
}
