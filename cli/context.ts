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
  /** Where a command asks for confirmation (`agentbus rm`); without it, or when it is not a terminal, none is asked. */
  readonly stdin?: NodeJS.ReadableStream & { readonly isTTY?: boolean };
}

/** A usage mistake: printed with the usage line, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
