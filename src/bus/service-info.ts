import { z } from 'zod';

/** The `$SRV` verbs of the NATS services ("micro") API, ADR-32. */
export const ServiceVerb = {
  ping: 'PING',
  info: 'INFO',
  stats: 'STATS',
} as const;
export type ServiceVerb = (typeof ServiceVerb)[keyof typeof ServiceVerb];

/** The `type` strings of the `$SRV` responses. */
export const ServiceResponseType = {
  ping: 'io.nats.micro.v1.ping_response',
  info: 'io.nats.micro.v1.info_response',
  stats: 'io.nats.micro.v1.stats_response',
} as const;
export type ServiceResponseType = (typeof ServiceResponseType)[keyof typeof ServiceResponseType];

/** The subject prefix of the services API. */
export const SERVICE_API_PREFIX = '$SRV';

/** A service or endpoint name: letters, digits, dash and underscore. */
export const SERVICE_NAME_PATTERN = /^[A-Za-z0-9_-]+$/;

/** The semver pattern recommended by semver.org, which ADR-32 asks implementations to check. */
export const SEMVER_PATTERN =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

/** The `$SRV` subject of a verb, optionally narrowed to a service name and an instance id. */
export function serviceSubject(verb: ServiceVerb, name?: string, id?: string): string {
  if (name === undefined) return `${SERVICE_API_PREFIX}.${verb}`;
  if (id === undefined) return `${SERVICE_API_PREFIX}.${verb}.${name}`;
  return `${SERVICE_API_PREFIX}.${verb}.${name}.${id}`;
}

// Other implementations send `null` for empty metadata; treat it as an empty map.
const metadataSchema = z
  .record(z.string(), z.string())
  .nullish()
  .transform((value) => value ?? {});

const endpointInfoSchema = z.object({
  name: z.string(),
  subject: z.string(),
  queue_group: z.string().nullish().transform((value) => value ?? ''),
  metadata: metadataSchema,
});

/** One endpoint of a service, as `$SRV.INFO` reports it. */
export type EndpointInfo = z.infer<typeof endpointInfoSchema>;

/** An `io.nats.micro.v1.info_response`, as read from the bus. Unknown fields are ignored. */
export const serviceInfoSchema = z.object({
  type: z.literal(ServiceResponseType.info),
  name: z.string(),
  id: z.string(),
  version: z.string(),
  description: z.string().nullish().transform((value) => value ?? ''),
  metadata: metadataSchema,
  endpoints: z
    .array(endpointInfoSchema)
    .nullish()
    .transform((value) => value ?? []),
});

/** The answer of `$SRV.INFO`: who a service instance is and what endpoints it serves. */
export type ServiceInfo = z.infer<typeof serviceInfoSchema>;

/** The answer of `$SRV.PING`. */
export interface ServicePing {
  readonly type: typeof ServiceResponseType.ping;
  readonly name: string;
  readonly id: string;
  readonly version: string;
  readonly metadata: Record<string, string>;
}

/** Request statistics of one endpoint; times are in nanoseconds, as the spec has them. */
export interface EndpointStats {
  readonly name: string;
  readonly subject: string;
  readonly queue_group: string;
  readonly num_requests: number;
  readonly num_errors: number;
  readonly last_error: string;
  readonly processing_time: number;
  readonly average_processing_time: number;
  /** Service-specific data of the endpoint, when the service gives any. */
  readonly data?: Record<string, unknown>;
}

/** The answer of `$SRV.STATS`. */
export interface ServiceStats {
  readonly type: typeof ServiceResponseType.stats;
  readonly name: string;
  readonly id: string;
  readonly version: string;
  readonly metadata: Record<string, string>;
  /** ISO 8601 time in UTC when the service started. */
  readonly started: string;
  readonly endpoints: readonly EndpointStats[];
  /**
   * What the service says of its own health beyond the spec's figures (agentbus services: event-loop delay,
   * connection state, readiness); clients that do not know it ignore it.
   */
  readonly data?: Record<string, unknown>;
}
