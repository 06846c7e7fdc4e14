import type { Scrubber } from '../src/scrub/index.ts';
import type { CliContext } from './context.ts';

/** What `agentbus mcp` writes for the person running it, every line through the scrubber first. */
export interface McpOutput {
  /** A line on stdout. */
  info(text: string): void;
  /** A line on stderr, after `agentbus: `. */
  warn(text: string): void;
  /** A line the stdio server wrote on its stderr, on stderr after `[name] `. */
  serverLine(name: string, line: string): void;
  /** `text` scrubbed, for a message that leaves another way (an error thrown to the command line's printer). */
  scrub(text: string): string;
}

/**
 * The output of `agentbus mcp`: its own lines and its server's stderr, scrubbed with the synchronous pass of
 * `scrubber` (configured secrets, critical patterns, secret assignments, high-entropy tokens), since the server's
 * text, the SDK's error messages and a command line may all carry a key.
 *
 * @example
 * const output = createMcpOutput(context, createScrubber({ secrets: secretsFromEnv(context.env) }));
 * output.serverLine('filesystem', 'listening with token …'); // [filesystem] listening with token [REDACTED:…]
 */
export function createMcpOutput(context: Pick<CliContext, 'stdout' | 'stderr'>, scrubber: Scrubber): McpOutput {
  const scrub = (text: string) => scrubber.scrubSync(text);
  return {
    info: (text) => void context.stdout.write(`${scrub(text)}\n`),
    warn: (text) => void context.stderr.write(`agentbus: ${scrub(text)}\n`),
    serverLine: (name, line) => void context.stderr.write(`[${name}] ${scrub(line)}\n`),
    scrub,
  };
}
