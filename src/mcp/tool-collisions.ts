import type { ServiceInfo } from '../bus/service-info.ts';

/** A tool served here whose call subject a service of another name serves too. */
export interface ToolCollision {
  /** The tool's name on the bus. */
  readonly tool: string;
  /** The other service's `$SRV` name. */
  readonly service: string;
}

/**
 * The tools of `ours` (served under `serviceName`, each on its call subject) that an instance of another service
 * serves on the same subject, from `$SRV.INFO` answers: its workers then join the same queue group, and each call
 * goes to either, whatever each announces. Instances of `serviceName` are not counted (several `agentbus mcp` of one
 * server share the queue group on purpose). Each tool and service is named once, in the order of `ours`.
 *
 * @example
 * const services = await discoverServices(nc, undefined, { timeoutMs: 1000 });
 * toolCollisions(services, { serviceName: 'filesystem', tools: [{ name: 'read_file', subject: 'agentbus.tools.read_file.call' }] });
 * // [{ tool: 'read_file', service: 'agentbus-tools' }] when `agentbus up` serves its own read_file
 */
export function toolCollisions(
  services: readonly ServiceInfo[],
  ours: { readonly serviceName: string; readonly tools: readonly { readonly name: string; readonly subject: string }[] },
): ToolCollision[] {
  const servedBy = new Map<string, Set<string>>();
  for (const service of services) {
    if (service.name === ours.serviceName) continue;
    for (const endpoint of service.endpoints) {
      const names = servedBy.get(endpoint.subject) ?? new Set<string>();
      names.add(service.name);
      servedBy.set(endpoint.subject, names);
    }
  }
  return ours.tools.flatMap((tool) => [...(servedBy.get(tool.subject) ?? [])].sort().map((service) => ({ tool: tool.name, service })));
}
