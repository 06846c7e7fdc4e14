import { setTimeout as sleep } from 'node:timers/promises';
import { connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { createScriptedAdapter, createScriptedEmbedder, loadScript, startProviderService } from '../../services/provider/index.ts';
import type { ProviderAdapter } from '../../services/provider/index.ts';

// The provider service for the bench's recall figure, as its own process: the scripted model (AGENTBUS_SCRIPT) and
// the scripted embedder behind a delay (BENCH_EMBED_DELAY_MS, as a remote embedding model takes), and a count of the
// model calls whose context holds memory's recall section: `bench.recall.count` answers `{ steps, recalled }`.
/** The heading the runtime puts recalled snippets under (services/runtime/recall.ts `RECALL_HEADING`, docs/memory.md). */
const RECALL_HEADING = 'Relevant context from memory:';
const logger = createLogger({ name: 'bench-recall-provider', level: process.env.LOG_LEVEL ?? 'warn' });
const nc = await connectBus({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'bench-recall-provider', logger });
const delayMs = Number(process.env.BENCH_EMBED_DELAY_MS ?? '250');
const script = process.env.AGENTBUS_SCRIPT ? await loadScript(process.env.AGENTBUS_SCRIPT) : undefined;
const scripted = createScriptedAdapter(script ? { script } : {});
const counts = { steps: 0, recalled: 0 };
const counting: ProviderAdapter = {
  name: scripted.name,
  generate(request, options) {
    // The first model call of a turn: its context has no answer yet. Later calls carry the recall the first one got.
    if (!request.messages.some((message) => message.role === 'assistant')) {
      counts.steps += 1;
      if (request.messages.some((message) => message.role === 'system' && message.content.startsWith(RECALL_HEADING))) counts.recalled += 1;
    }
    return scripted.generate(request, options);
  },
};
const embedder = createScriptedEmbedder();
const service = await startProviderService({
  nc,
  logger,
  adapters: [counting],
  embedders: [{ name: embedder.name, embed: async (request, { signal }) => (await sleep(delayMs, undefined, { signal }), embedder.embed(request, { signal })) }],
});
const codec = createCodec();
nc.subscribe('bench.recall.count', {
  callback: (_error, message) => {
    message.respond(codec.encode(counts));
  },
});
await nc.flush();
drainOnSignals(nc, logger, () => service.stop());
logger.warn({ delayMs }, 'bench recall provider ready');
