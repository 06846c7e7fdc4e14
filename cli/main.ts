import { runAsk, ASK_USAGE } from './ask.ts';
import { ANSWER_USAGE, APPROVE_USAGE, runAnswer, runApprove } from './approve.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { NatsServerMissingError } from './embedded-nats.ts';
import { stateDir } from './state-dir.ts';
import { MEMORY_USAGE, runMemory } from './memory.ts';
import { runRm, RM_USAGE } from './rm.ts';
import { FORK_USAGE, runFork } from './fork.ts';
import { runSessions, SESSIONS_USAGE } from './sessions.ts';
import { runShow, SHOW_USAGE } from './show.ts';
import { runTail, TAIL_USAGE } from './tail.ts';
import { runUp, UP_USAGE } from './up.ts';
import { VIZ_USAGE } from './viz-usage.ts';
import { WORKER_USAGE } from './worker-usage.ts';
import { MCP_USAGE } from './mcp-usage.ts';
import { packageVersion } from './package-version.ts';

const HELP = `agentbus — an actor-model runtime for LLM agents on a NATS message bus

Usage:
  ${UP_USAGE}
      Start the services (and, without --nats or NATS_URL, an embedded nats-server with data in .agentbus/).
  ${ASK_USAGE}
      Send a prompt (- reads it from stdin; --file attaches text files), stream the answer to stdout and progress to
      stderr (--quiet: the answer only); exit 0 when the turn yielded. --dry-run prints what the first step would send
      and calls no model; --force-tool / --force-finish pin the first step.
  ${APPROVE_USAGE}
      Decide on a privileged tool call awaiting approval: approve, --deny, approve with edited --args, or --respond
      with a text result in the tool's place.
  ${ANSWER_USAGE}
      Answer a tool's question (tool.input_requested): the text, or JSON with --json.
  ${TAIL_USAGE}
      Follow the events of every session of a tenant, or of one session.
  ${MEMORY_USAGE}
      Make every memory instance rebuild its index from the session log.
  ${SESSIONS_USAGE}
      List a tenant's sessions, oldest first (needs the memory service).
  ${SHOW_USAGE}
      Print a session's messages in order: user, assistant, tool calls and results (needs the memory service).
  ${RM_USAGE}
      Delete a session: its log, its memory and its lease; its id is refused from then on.
  ${FORK_USAGE}
      Fork a session at a sequence of its log (default: its end) into a new session, and print the new session's id.
  ${VIZ_USAGE}
      Print a machine's diagram (default: the turn machine, as Mermaid), drawn from its own definition.
  ${WORKER_USAGE}
      Serve the tools a module exports (defineTool results) as a tool worker until Ctrl-C.
  ${MCP_USAGE}
      Serve the tools of an MCP server (a command over stdio, or a streamable-HTTP URL) as a tool worker until Ctrl-C.
  agentbus help | --help | --version

Environment: NATS_URL, AGENTBUS_PREFIX, AGENTBUS_SCRIPT, AGENTBUS_MODEL, AGENTBUS_WORKSPACE, AGENTBUS_DASHBOARD_PORT, LOG_LEVEL.
`;

/** Makes the context of a real process: stdio, env, and a signal aborted on SIGINT/SIGTERM. */
function processContext(): CliContext {
  const controller = new AbortController();
  const stop = () => controller.abort(new Error('interrupted'));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env, cwd: process.cwd(), stateDir: stateDir(), signal: controller.signal };
}

/** Runs the CLI with `argv` (without node and script); resolves with the exit code. */
export async function main(argv: string[], context: CliContext = processContext()): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'up':
        return await runUp(rest, context);
      case 'ask':
        return await runAsk(rest, context);
      case 'approve':
        return await runApprove(rest, context);
      case 'answer':
        return await runAnswer(rest, context);
      case 'tail':
        return await runTail(rest, context);
      case 'sessions':
        return await runSessions(rest, context);
      case 'show':
        return await runShow(rest, context);
      case 'rm':
        return await runRm(rest, context);
      case 'fork':
        return await runFork(rest, context);
      case 'viz':
        // Loaded only here, as are worker and mcp below: other commands need none of their modules.
        return await (await import('./viz.ts')).runViz(rest, context);
      case 'memory':
        return await runMemory(rest, context);
      case 'worker':
        return await (await import('./worker.ts')).runWorker(rest, context);
      case 'mcp':
        // Loaded only here: the MCP SDK takes a while to import, and no other command needs it.
        return await (await import('./mcp.ts')).runMcp(rest, context);
      case '--version':
      case '-v':
        context.stdout.write(`${packageVersion()}\n`);
        return 0;
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        context.stdout.write(HELP);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } catch (error) {
    if (error instanceof NatsServerMissingError) {
      context.stderr.write(`agentbus: ${error.message}\n`);
      return 3;
    }
    const usage = error instanceof UsageError || (error instanceof TypeError && 'code' in error && String(error.code).startsWith('ERR_PARSE_ARGS'));
    context.stderr.write(`agentbus: ${(error as Error).message}\n`);
    if (usage) {
      context.stderr.write(`run \`agentbus help\` for usage\n`);
      return 2;
    }
    return 1;
  }
}
