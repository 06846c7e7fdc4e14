import { parseArgs } from 'node:util';
import { discoverServices } from '../src/bus/service-discovery.ts';
import { isNoResponders } from '../src/bus/request.ts';
import { createCodec, createMemorySubjects, prefixFromEnv } from '../src/protocol/index.ts';
import type { MemoryRebuildReply } from '../src/protocol/index.ts';
import { findBus } from './bus-target.ts';
import { connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';

export const MEMORY_USAGE = 'agentbus memory rebuild [--nats URL] [--timeout SECONDS] [--json]';

/** The `$SRV` name memory instances register their queries under (see services/memory). */
const MEMORY_SERVICE = 'agentbus-memory';

/**
 * `agentbus memory rebuild`: every memory instance builds its index anew from the session log (beside the one it
 * serves, which it swaps out once the new one has caught up). Waits for each instance `$SRV` knows of to answer;
 * exit 0 when all did, 1 when one failed or did not answer in time.
 */
export async function runMemory(argv: string[], context: CliContext): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, timeout: { type: 'string', default: '600' }, json: { type: 'boolean', default: false } },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length !== 1 || positionals[0] !== 'rebuild') throw new UsageError(`unknown memory command ${JSON.stringify(positionals.join(' '))}: the one there is is rebuild`);
  const timeoutSeconds = Number(values.timeout);
  if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) throw new UsageError(`--timeout must be a positive number of seconds, got ${JSON.stringify(values.timeout)}`);
  const target = await findBus(context, values.nats);
  if (target.kind === 'none') throw new UsageError('no agentbus stack runs here: start one with `npx agentbus up`, or pass --nats URL');

  const nc = await connectCli(target.url, 'agentbus-memory-rebuild', target.env);
  const codec = createCodec();
  try {
    const instances = await discoverServices(nc, MEMORY_SERVICE, { timeoutMs: 2_000, signal: context.signal, codec });
    if (instances.length === 0) {
      context.stderr.write('no memory service answers on this bus: start one (agentbus up runs it)\n');
      return 1;
    }
    context.stderr.write(`rebuilding the index of ${instances.length} memory instance(s) from the log…\n`);
    const replies = await nc.requestMany(createMemorySubjects(prefixFromEnv(context.env)).rebuild(), new Uint8Array(), {
      strategy: 'count',
      maxMessages: instances.length,
      maxWait: timeoutSeconds * 1000,
    });
    let answered = 0;
    let failed = 0;
    // Ctrl-C: closing the connection ends the wait for answers.
    const abort = () => void nc.close();
    context.signal.addEventListener('abort', abort, { once: true });
    try {
      for await (const message of replies) {
        if (isNoResponders(message)) break;
        answered += 1;
        const reply = codec.decode(message.data) as Partial<MemoryRebuildReply> & { error?: { code: string; message: string } };
        if (reply.error) {
          failed += 1;
          context.stderr.write(`a memory instance could not rebuild: ${reply.error.code}: ${reply.error.message}\n`);
        } else if (values.json) {
          context.stdout.write(`${JSON.stringify(reply)}\n`);
        } else {
          context.stdout.write(`memory ${reply.instance}: ${reply.entries} chunks indexed up to log sequence ${reply.lastSeq}, in ${((reply.ms ?? 0) / 1000).toFixed(1)} s\n`);
        }
      }
    } finally {
      context.signal.removeEventListener('abort', abort);
    }
    if (answered < instances.length) context.stderr.write(`${instances.length - answered} of ${instances.length} memory instance(s) did not answer within ${timeoutSeconds} s\n`);
    return failed === 0 && answered === instances.length ? 0 : 1;
  } finally {
    await nc.close().catch(() => undefined);
  }
}
