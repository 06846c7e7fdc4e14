import type { NatsConnection } from '@nats-io/nats-core';
import { discoverServices } from '../src/bus/service-discovery.ts';
import type { ServiceInfo } from '../src/bus/service-info.ts';
import type { Logger } from '../src/logging.ts';
import { toolCollisions } from '../src/mcp/index.ts';
import type { Codec, Subjects } from '../src/protocol/index.ts';
import type { AnyToolDefinition } from '../src/tool-sdk/index.ts';

/** Options of {@link createCollisionWarnings}. */
export interface CollisionWarningsOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** The `$SRV` name the tools are served under (undefined until known: nothing is checked then). */
  readonly serviceName: () => string | undefined;
  /** Writes one warning line. */
  readonly warn: (text: string) => void;
}

/**
 * The check `agentbus mcp` runs at start and on each list change: asks `$SRV.INFO` for every service, and warns once
 * per tool and service of each served tool that a service of another name serves on the same subject (its calls
 * then go to either). A failed `$SRV.INFO` is logged at warn, not thrown.
 *
 * @example
 * const check = createCollisionWarnings({ nc, subjects, codec, logger, signal, serviceName: () => name, warn });
 * await check(bridge.tools);
 */
export function createCollisionWarnings(options: CollisionWarningsOptions): (tools: readonly AnyToolDefinition[]) => Promise<void> {
  const warned = new Set<string>();
  return async (tools) => {
    const serviceName = options.serviceName();
    if (serviceName === undefined || tools.length === 0) return;
    let services: ServiceInfo[];
    try {
      services = await discoverServices(options.nc, undefined, { timeoutMs: 1000, signal: options.signal, codec: options.codec, logger: options.logger });
    } catch (err) {
      if (!options.signal.aborted) options.logger.warn({ err }, 'could not ask $SRV.INFO which services serve the same tools');
      return;
    }
    const ours = tools.map((tool) => ({ name: tool.name, subject: options.subjects.toolCall(tool.name) }));
    for (const { tool, service } of toolCollisions(services, { serviceName, tools: ours })) {
      const key = JSON.stringify([tool, service]);
      if (warned.has(key)) continue;
      warned.add(key);
      options.warn(
        `the tool ${JSON.stringify(tool)} is also served on the bus by the service ${JSON.stringify(service)}: calls of it go to either one; serve these tools under other names with --prefix (--prefix mcp_, say)`,
      );
    }
  };
}
