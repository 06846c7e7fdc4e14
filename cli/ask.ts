import { parseArgs } from 'node:util';
import { nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient } from '../src/client/index.ts';
import { AgentbusError, ErrorCode, toErrorData } from '../src/errors.ts';
import { MODEL_PATTERN, isToken, prefixFromEnv } from '../src/protocol/index.ts';
import type { AgentEvent, Prompt } from '../src/protocol/index.ts';
import { findBus } from './bus-target.ts';
import { connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeData } from './format.ts';
import { embeddedBusEnv } from './embedded-nats.ts';
import { startLocalStack } from './local-stack.ts';
import type { LocalStack } from './local-stack.ts';

export const ASK_USAGE =
  'agentbus ask [--nats URL] [--tenant T] [--session S] [--model M] [--max-steps N] [--max-cost USD] [--timeout SECONDS] [--json] [--verbose] TEXT';

interface AskOptions {
  readonly tenant: string;
  readonly sessionId: string;
  readonly prompt: Prompt;
  readonly json: boolean;
  readonly timeoutMs: number;
  /** The embedded stack's service logs on stderr too, not only in .agentbus/logs/. */
  readonly verbose: boolean;
}

function positiveNumber(flag: string, raw: string | undefined, integer: boolean): number | undefined {
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new UsageError(`${flag} must be a positive ${integer ? 'whole ' : ''}number, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/** Parses and checks the flags of `ask`. */
export function parseAsk(argv: string[]): AskOptions & { nats: string | undefined } {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      nats: { type: 'string' },
      tenant: { type: 'string' },
      session: { type: 'string' },
      model: { type: 'string' },
      'max-steps': { type: 'string' },
      'max-cost': { type: 'string' },
      timeout: { type: 'string' },
      json: { type: 'boolean', default: false },
      verbose: { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: true,
  });
  const text = positionals.join(' ').trim();
  if (text === '') throw new UsageError('ask needs the prompt text');
  const tenant = values.tenant ?? 'default';
  const sessionId = values.session ?? `s-${nuid.next().slice(-12)}`;
  if (!isToken(tenant)) throw new UsageError(`--tenant must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(tenant)}`);
  if (!isToken(sessionId)) throw new UsageError(`--session must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(sessionId)}`);
  if (values.model !== undefined && !MODEL_PATTERN.test(values.model)) {
    throw new UsageError(`--model must be <provider>:<model>, e.g. scripted:default or openai:gpt-5.4-mini; got ${JSON.stringify(values.model)}`);
  }
  const maxSteps = positiveNumber('--max-steps', values['max-steps'], true);
  const maxCost = positiveNumber('--max-cost', values['max-cost'], false);
  const timeout = positiveNumber('--timeout', values.timeout, false) ?? 600;
  const prompt: Prompt = {
    text,
    ...(values.model ? { model: values.model } : {}),
    ...(maxSteps ? { maxSteps } : {}),
    ...(maxCost ? { maxCost } : {}),
  };
  return { nats: values.nats, tenant, sessionId, prompt, json: values.json, timeoutMs: timeout * 1000, verbose: values.verbose };
}

/**
 * `agentbus ask`: publishes a prompt, streams the answer to stdout and progress to stderr, and exits 0
 * when the turn yielded. Without `--nats`/`NATS_URL` it uses the stack `agentbus up` runs here, or
 * runs an embedded one for the length of the command.
 */
export async function runAsk(argv: string[], context: CliContext): Promise<number> {
  const options = parseAsk(argv);
  const target = await findBus(context, options.nats);
  let local: LocalStack | undefined;
  if (target.kind === 'none') {
    context.stderr.write('agentbus: no stack runs here; starting an embedded one for this command (data in .agentbus/)\n');
    local = await startLocalStack({
      stateDir: context.stateDir,
      services: ['runtime', 'provider', 'tools'],
      workspace: context.cwd,
      env: context.env,
      logs: { verbose: options.verbose, write: (line) => context.stderr.write(`${line}\n`), cwd: context.cwd },
      onNotice: (message) => context.stderr.write(`agentbus: ${message}\n`),
      signal: context.signal,
    });
  }
  const url = target.kind === 'url' ? target.url : local!.url;
  const env = target.kind === 'url' ? target.env : local?.token === undefined ? context.env : { ...context.env, ...embeddedBusEnv(local.token) };
  let nc: NatsConnection | undefined;
  try {
    nc = await connectCli(url, 'agentbus-cli', env);
    return await ask(nc, options, context);
  } finally {
    await nc?.close().catch(() => undefined);
    await local?.stop();
  }
}

async function ask(nc: NatsConnection, options: AskOptions, context: CliContext): Promise<number> {
  const client = createAgentbusClient({ nc, prefix: prefixFromEnv(context.env) });
  const target = { tenant: options.tenant, sessionId: options.sessionId };
  // Ctrl-C cancels the turn and waits (briefly) for its end; the wait itself is cut after 3 s.
  const stopWaiting = new AbortController();
  const onAbort = () => {
    context.stderr.write('\ncancelling…\n');
    void client.cancel(target, 'cancelled from the CLI', { timeoutMs: 3000 }).catch(() => undefined);
    setTimeout(() => stopWaiting.abort(new Error('interrupted')), 3000).unref();
  };
  context.signal.addEventListener('abort', onAbort, { once: true });
  let wroteText = false;
  const show = (event: AgentEvent) => {
    if (options.json) {
      context.stdout.write(`${JSON.stringify(event)}\n`);
      return;
    }
    switch (event.type) {
      case 'assistant.delta':
        context.stdout.write(event.data.text);
        wroteText = true;
        return;
      case 'assistant.message':
      case 'turn.ended':
      case 'retry':
        // A new message, the end, or a call made again (its text streams from the start) ends the line.
        if (wroteText) context.stdout.write('\n');
        wroteText = false;
        if (event.type === 'retry') context.stderr.write(`  retry: ${describeData(event)}\n`);
        if (event.type === 'turn.ended' && event.data.reason !== 'yielded') context.stderr.write(`turn ended: ${describeData(event)}\n`);
        return;
      case 'progress':
        context.stderr.write(`  ${describeData(event)}\n`);
        return;
      case 'tool.use':
      case 'tool.result':
      case 'approval.requested':
        context.stderr.write(`  ${event.type}: ${describeData(event)}\n`);
        return;
      default:
        return;
    }
  };
  let accepted = false;
  try {
    const ended = await client.ask(target, options.prompt, {
      signal: stopWaiting.signal,
      timeoutMs: options.timeoutMs,
      readyTimeoutMs: 15_000,
      onAccepted: (turnId) => {
        accepted = true;
        if (!options.json) context.stderr.write(`session ${target.tenant}/${target.sessionId}, turn ${turnId}\n`);
      },
      onEvent: ({ event }) => show(event),
      // As `tail` does: say so on stderr, keep going.
      onInvalid: (skipped) => context.stderr.write(`agentbus: skipped a message on ${skipped.subject}: ${skipped.error.message}\n`),
    });
    if (context.signal.aborted) return 130;
    return ended.reason === 'yielded' ? 0 : 1;
  } catch (error) {
    if (context.signal.aborted) return 130;
    // Refused: the prompt was never accepted. An error after it was (the event stream ended, say) is a turn that did not yield.
    if (!accepted && error instanceof AgentbusError && error.code !== ErrorCode.timeout && error.code !== ErrorCode.cancelled) {
      context.stderr.write(`agentbus: prompt refused: ${error.code}: ${error.message}\n`);
      return 2;
    }
    const timedOut = toErrorData(error).code === ErrorCode.timeout;
    context.stderr.write(timedOut ? `agentbus: no answer within ${options.timeoutMs / 1000} s\n` : `agentbus: ${(error as Error).message}\n`);
    return 1;
  } finally {
    context.signal.removeEventListener('abort', onAbort);
  }
}
