/** What a CLI command reads and writes: injected, so tests run commands in-process. */
export interface CliContext {
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** `.agentbus/` of the working directory. */
  readonly stateDir: string;
  /** Aborted on SIGINT/SIGTERM. */
  readonly signal: AbortSignal;
}

/** A usage mistake: printed with the usage line, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
