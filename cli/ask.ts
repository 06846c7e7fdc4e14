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
import { readAttachments, readPromptFromStdin } from './ask-input.ts';
import { readOutputSchema } from './ask-schema.ts';
import { describeData, formatPreparedRequest } from './format.ts';
import { embeddedBusEnv } from './embedded-nats.ts';
import { startLocalStack } from './local-stack.ts';
import type { LocalStack } from './local-stack.ts';

export const ASK_USAGE =
  'agentbus ask [--nats URL] [--tenant T] [--session S] [--model M] [--max-steps N] [--max-cost USD] [--timeout SECONDS] [--json] [--quiet] [--verbose] [--file PATH]... [--dry-run] [--force-tool NAME [--force-args JSON] | --force-finish] [--schema FILE] TEXT|-';

interface AskOptions {
  readonly tenant: string;
  readonly sessionId: string;
  readonly prompt: Prompt;
  readonly json: boolean;
  /** Only the answer: no progress on stderr. */
  readonly quiet: boolean;
  readonly timeoutMs: number;
  /** The embedded stack's service logs on stderr too, not only in .agentbus/logs/. */
  readonly verbose: boolean;
  /** The prompt's text is to be read from stdin (`ask -`). */
  readonly stdin: boolean;
  /** Files to attach, as given. */
  readonly files: readonly string[];
  /** `--schema FILE`: the JSON Schema of the typed final output, read in by `withInput`. */
  readonly schemaFile?: string;
}

/** `--force-args`: a JSON object. */
function forceArgs(raw: string | undefined): Record<string, unknown> {
  if (raw === undefined) return {};
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (error) {
    throw new UsageError(`--force-args must be a JSON object: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UsageError(`--force-args must be a JSON object, got ${JSON.stringify(raw)}`);
  return value as Record<string, unknown>;
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
      quiet: { type: 'boolean', short: 'q', default: false },
      file: { type: 'string', multiple: true, default: [] },
      'dry-run': { type: 'boolean', default: false },
      'force-tool': { type: 'string' },
      'force-args': { type: 'string' },
      'force-finish': { type: 'boolean', default: false },
      schema: { type: 'string' },
    },
    strict: true,
    allowPositionals: true,
  });
  const stdin = positionals.length === 1 && positionals[0] === '-';
  // Read from stdin later (see `readPromptFromStdin`); a placeholder keeps the prompt whole until then.
  const text = stdin ? '-' : positionals.join(' ').trim();
  if (text === '') throw new UsageError('ask needs the prompt text (or - to read it from stdin)');
  const forceTool = values['force-tool'];
  if (forceTool === undefined && values['force-args'] !== undefined) throw new UsageError('--force-args goes with --force-tool NAME');
  if (forceTool !== undefined && values['force-finish']) throw new UsageError('--force-tool and --force-finish exclude each other');
  if (forceTool !== undefined && forceTool.trim() === '') throw new UsageError('--force-tool needs a tool name');
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
    ...(values['dry-run'] ? { dryRun: true } : {}),
    ...(forceTool !== undefined ? { forceTool: { name: forceTool, args: forceArgs(values['force-args']) } } : {}),
    ...(values['force-finish'] ? { forceFinish: true } : {}),
  };
  if (values.schema !== undefined && values.schema.trim() === '') throw new UsageError('--schema needs a file name');
  return {
    nats: values.nats,
    tenant,
    sessionId,
    prompt,
    json: values.json,
    quiet: values.quiet,
    timeoutMs: timeout * 1000,
    verbose: values.verbose,
    stdin,
    files: values.file,
    ...(values.schema === undefined ? {} : { schemaFile: values.schema }),
  };
}

/** The prompt with what `-` and `--file` name read in: the text from stdin, the files as attachments. */
async function withInput<T extends AskOptions>(options: T, context: CliContext): Promise<T> {
  if (!options.stdin && options.files.length === 0 && options.schemaFile === undefined) return options;
  const outputSchema = options.schemaFile === undefined ? undefined : await readOutputSchema(options.schemaFile, context.cwd);
  const text = options.stdin ? await readPromptFromStdin(context.stdin, context.signal) : options.prompt.text;
  const attachments = await readAttachments(options.files, context.cwd);
  return { ...options, prompt: { ...options.prompt, text, ...(attachments.length > 0 ? { attachments } : {}), ...(outputSchema ? { outputSchema } : {}) } };
}

/**
 * `agentbus ask`: publishes a prompt, streams the answer to stdout and progress to stderr, and exits 0
 * when the turn yielded. Without `--nats`/`NATS_URL` it uses the stack `agentbus up` runs here, or
 * runs an embedded one for the length of the command.
 */
export async function runAsk(argv: string[], context: CliContext): Promise<number> {
  // Input is read (and refused) before anything starts.
  const options = await withInput(parseAsk(argv), context);
  const target = await findBus(context, options.nats);
  let local: LocalStack | undefined;
  if (target.kind === 'none') {
    if (!options.quiet) context.stderr.write('agentbus: no stack runs here; starting an embedded one for this command (data in .agentbus/)\n');
    local = await startLocalStack({
      stateDir: context.stateDir,
      services: ['runtime', 'provider', 'tools'],
      workspace: context.cwd,
      env: context.env,
      logs: { verbose: options.verbose, write: (line) => context.stderr.write(`${line}\n`), cwd: context.cwd },
      onNotice: (message) => {
        if (!options.quiet) context.stderr.write(`agentbus: ${message}\n`);
      },
      signal: context.signal,
    });
  }
  const url = target.kind === 'url' ? target.url : local!.url;
  const env = target.kind === 'url' ? target.env : local?.token === undefined ? context.env : { ...context.env, ...embeddedBusEnv(local.token) };
  let nc: NatsConnection | undefined;
  try {
    nc = await connectCli(url, 'agentbus-cli', env);
    return options.prompt.dryRun ? await dryRun(nc, options, context) : await ask(nc, options, context);
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
  // The log and live streams are not ordered with each other: a step's `assistant.message` may come before its last
  // deltas (then it completes the line, and the late deltas are dropped), or after the next step's first deltas.
  let textStep = 0;
  let stepText = '';
  let lastEnded = 0;
  // A typed ask prints the answer's JSON (`turn.ended`'s `output`) on stdout at the end, not its text as it streams.
  const typed = options.prompt.outputSchema !== undefined;
  const show = (event: AgentEvent) => {
    if (options.json) {
      context.stdout.write(`${JSON.stringify(event)}\n`);
      return;
    }
    if (typed && (event.type === 'assistant.delta' || event.type === 'assistant.message')) return;
    switch (event.type) {
      case 'assistant.delta': {
        const step = event.step ?? textStep;
        if (step <= lastEnded) return;
        if (step !== textStep) stepText = '';
        context.stdout.write(event.data.text);
        wroteText = true;
        textStep = step;
        stepText += event.data.text;
        return;
      }
      case 'assistant.message':
      case 'turn.ended':
      case 'retry':
        if (event.type === 'assistant.message') {
          const step = event.step ?? textStep;
          if (step < textStep) return;
          // The step's text as logged: what its deltas have not shown yet is shown now.
          const written = step === textStep ? stepText : '';
          const rest = event.data.text.startsWith(written) ? event.data.text.slice(written.length) : '';
          if (rest !== '') {
            context.stdout.write(rest);
            wroteText = true;
          }
          lastEnded = step;
          textStep = step;
          stepText = event.data.text;
        }
        if (event.type === 'retry') stepText = '';
        // A new message, the end, or a call made again (its text streams from the start) ends the line.
        if (wroteText) context.stdout.write('\n');
        wroteText = false;
        if (event.type === 'retry' && !options.quiet) context.stderr.write(`  retry: ${describeData(event)}\n`);
        if (event.type === 'turn.ended' && event.data.reason !== 'yielded') context.stderr.write(`turn ended: ${describeData(event)}\n`);
        return;
      case 'progress':
        if (!options.quiet) context.stderr.write(`  ${describeData(event)}\n`);
        return;
      case 'tool.use':
      case 'tool.result':
      case 'approval.requested':
      case 'approval.decided':
      case 'tool.input_requested':
        if (!options.quiet) context.stderr.write(`  ${event.type}: ${describeData(event)}\n`);
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
      // A caller's trace (TRACEPARENT, as CI systems and otel-cli export it): the turn joins it.
      ...(context.env.TRACEPARENT?.trim() ? { trace: { traceparent: context.env.TRACEPARENT.trim(), ...(context.env.TRACESTATE?.trim() ? { tracestate: context.env.TRACESTATE.trim() } : {}) } } : {}),
      onAccepted: (turnId) => {
        accepted = true;
        if (!options.json && !options.quiet) context.stderr.write(`session ${target.tenant}/${target.sessionId}, turn ${turnId}\n`);
      },
      onEvent: ({ event }) => show(event),
      // As `tail` does: say so on stderr, keep going.
      onInvalid: (skipped) => context.stderr.write(`agentbus: skipped a message on ${skipped.subject}: ${skipped.error.message}\n`),
    });
    if (context.signal.aborted) return 130;
    if (typed && !options.json && ended.output !== undefined) context.stdout.write(`${JSON.stringify(ended.output, null, 2)}\n`);
    // A typed answer that never matched: its text, for whoever must see what the model said.
    if (typed && !options.json && ended.output === undefined && ended.text && !options.quiet) context.stderr.write(`answer text: ${ended.text}\n`);
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

/**
 * `ask --dry-run`: sends the prompt marked `dryRun` and prints the `request.prepared` the runtime answers with (on
 * the session's live events, watched before sending): what the first step would send. No model is called, and
 * nothing is logged.
 */
async function dryRun(nc: NatsConnection, options: AskOptions, context: CliContext): Promise<number> {
  const client = createAgentbusClient({ nc, prefix: prefixFromEnv(context.env) });
  const target = { tenant: options.tenant, sessionId: options.sessionId };
  const signal = AbortSignal.any([context.signal, AbortSignal.timeout(options.timeoutMs)]);
  const watch = await client.watch(target, { signal });
  try {
    let turnId: string;
    // A runtime of an embedded stack may still be starting: no responders is asked again for a while.
    for (const readyBy = Date.now() + 15_000; ; ) {
      try {
        ({ turnId } = await client.prompt(target, options.prompt, { signal }));
        break;
      } catch (error) {
        if (!(error instanceof AgentbusError)) throw error;
        if (error.code !== ErrorCode.noResponders || Date.now() > readyBy) {
          context.stderr.write(`agentbus: prompt refused: ${error.code}: ${error.message}\n`);
          return 2;
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
    for await (const { event } of watch) {
      if (event.type !== 'request.prepared' || event.turnId !== turnId) continue;
      context.stdout.write(options.json ? `${JSON.stringify(event)}\n` : formatPreparedRequest(event.data));
      return 0;
    }
    throw new AgentbusError(ErrorCode.internal, 'the event stream ended before the dry run was published');
  } catch (error) {
    if (context.signal.aborted) return 130;
    const timedOut = signal.aborted;
    context.stderr.write(timedOut ? `agentbus: no dry run within ${options.timeoutMs / 1000} s\n` : `agentbus: ${(error as Error).message}\n`);
    return 1;
  } finally {
    await watch.close();
  }
}
