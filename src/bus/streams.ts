import { RetentionPolicy, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import type { JetStreamManager, StreamConfig, StreamInfo } from '@nats-io/jetstream';
import type { Logger } from '../logging.ts';
import { withReservableBytes } from './reservable-bytes.ts';
import { createSubjects, streamNames } from '../protocol/index.ts';

/**
 * Limits of the log and live streams: what keeps one tenant (or all of them) from filling the server's disk and
 * memory. The log refuses what is past them (discard `new`: an append fails loudly, no history is dropped); the
 * live stream, kept only for resuming, drops its oldest events instead.
 */
export interface StreamLimits {
  /** Most bytes the log stream holds (`AGENTBUS_LOG_MAX_BYTES`, default 10 GiB; 0: no limit). Past it every append is refused. */
  readonly logMaxBytes: number;
  /** Most bytes of one event, on the log and the live stream (`AGENTBUS_LOG_MAX_EVENT_BYTES`, default 1 MiB). */
  readonly maxEventBytes: number;
  /** Most events of one session's log (`AGENTBUS_LOG_MAX_SESSION_EVENTS`, default 100000; 0: no limit). */
  readonly logMaxSessionEvents: number;
  /** Most bytes the live stream holds in memory (`AGENTBUS_LIVE_MAX_BYTES`, default 256 MiB); its oldest events go first. */
  readonly liveMaxBytes: number;
}

/** Defaults of {@link StreamLimits}. */
export const DEFAULT_STREAM_LIMITS: StreamLimits = {
  logMaxBytes: 10 * 1024 ** 3,
  maxEventBytes: 1024 * 1024,
  logMaxSessionEvents: 100_000,
  liveMaxBytes: 256 * 1024 * 1024,
};

/** Settings of the two session streams. */
export interface StreamSettings {
  readonly prefix: string;
  /** How long live events are kept for resuming clients. Default 5 minutes. */
  readonly liveMaxAgeMs?: number;
  /** Dedupe window of `Nats-Msg-Id` on the log. Default 2 minutes. */
  readonly duplicateWindowMs?: number;
  /**
   * Copies of each stream in a NATS cluster (`AGENTBUS_REPLICAS`, 1 to 5). Unset: a new stream gets 1 and an
   * existing one keeps its own (a node started without the variable must not cut a cluster's copies).
   */
  readonly replicas?: number;
  /**
   * Limits of the two streams, those not given as in {@link DEFAULT_STREAM_LIMITS}. A byte limit given is the
   * operator's: the server must reserve it or the stream is not made; a default is made to fit.
   */
  readonly limits?: Partial<StreamLimits>;
  /** Hears why a limit of an existing stream was left as it was (see {@link ensureStreams}). */
  readonly logger?: Logger;
}

const NANOS_PER_MS = 1_000_000;

/**
 * Creates or updates the log stream (`AGENTBUS_LOG`, file storage, discard `new` within its limits) and the live
 * stream (`AGENTBUS_LIVE`, memory storage, short max age, discard `old`). Idempotent: safe to call from every process.
 * A stream made by an older version gets the limits too, except one that would make the server drop stored events:
 * a log already holding more bytes than `logMaxBytes`, or a session with more events than `logMaxSessionEvents`, keeps
 * that limit as it was (said at warn) until the operator raises the setting or deletes sessions. A default `max_bytes`
 * the server cannot reserve is halved until it can (see {@link withReservableBytes}); a set one is an error.
 */
export async function ensureStreams(jsm: JetStreamManager, settings: StreamSettings): Promise<{ log: string; live: string }> {
  const subjects = createSubjects(settings.prefix);
  const names = streamNames(settings.prefix);
  const limits: StreamLimits = { ...DEFAULT_STREAM_LIMITS, ...settings.limits };
  const { logger } = settings;
  const log: Partial<StreamConfig> & { name: string } = {
    name: names.log,
    subjects: [subjects.anyLog()],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    // Discard new: a full log refuses appends (the turn ends failed, the client hears it) rather than dropping
    // the oldest sessions' history without a word.
    discard: DiscardPolicy.New,
    max_bytes: orUnlimited(limits.logMaxBytes),
    max_msg_size: limits.maxEventBytes,
    max_msgs_per_subject: orUnlimited(limits.logMaxSessionEvents),
    // Without it a session past its count would lose its first events instead.
    discard_new_per_subject: limits.logMaxSessionEvents > 0,
    duplicate_window: (settings.duplicateWindowMs ?? 120_000) * NANOS_PER_MS,
    allow_direct: true,
    ...replicasOf(settings),
  };
  await ensureStream(jsm, log, {
    explicit: settings.limits?.logMaxBytes !== undefined,
    variable: 'AGENTBUS_LOG_MAX_BYTES',
    ...(logger ? { logger } : {}),
    adjust: (existing) => keepWhatWouldDrop(jsm, existing, log, logger),
  });
  const live: Partial<StreamConfig> & { name: string } = {
    name: names.live,
    subjects: [subjects.anyLive()],
    retention: RetentionPolicy.Limits,
    storage: StorageType.Memory,
    discard: DiscardPolicy.Old,
    max_age: (settings.liveMaxAgeMs ?? 300_000) * NANOS_PER_MS,
    max_bytes: limits.liveMaxBytes,
    max_msg_size: limits.maxEventBytes,
    duplicate_window: 10_000 * NANOS_PER_MS,
    ...replicasOf(settings),
  };
  await ensureStream(jsm, live, { explicit: settings.limits?.liveMaxBytes !== undefined, variable: 'AGENTBUS_LIVE_MAX_BYTES', ...(logger ? { logger } : {}) });
  return names;
}

const replicasOf = (settings: StreamSettings) => (settings.replicas === undefined ? {} : { num_replicas: settings.replicas });

/** JetStream's "no limit" for a setting of 0. */
const orUnlimited = (value: number) => (value > 0 ? value : -1);

/** True when `wanted` is a tighter limit than `present` (-1 being none). */
const tighter = (wanted: number | undefined, present: number) => wanted !== undefined && wanted > 0 && (present <= 0 || wanted < present);

type Config = Partial<StreamConfig> & { name: string };

/**
 * The log's config with every limit that would make the server delete stored events put back as the stream has it:
 * nats-server enforces a lowered `max_bytes` or `max_msgs_per_subject` on update by dropping the oldest messages,
 * whatever the discard policy.
 */
async function keepWhatWouldDrop(jsm: JetStreamManager, existing: StreamInfo, wanted: Config, logger: Logger | undefined): Promise<Config> {
  const config = { ...wanted };
  const present = existing.config;
  if (tighter(wanted.max_bytes, present.max_bytes) && existing.state.bytes > (wanted.max_bytes ?? 0)) {
    logger?.warn({ stream: wanted.name, bytes: existing.state.bytes, wanted: wanted.max_bytes, kept: present.max_bytes }, 'the log holds more than AGENTBUS_LOG_MAX_BYTES; its limit stays as it was (lowering it would drop the oldest events)');
    config.max_bytes = present.max_bytes;
  }
  const perSubject = wanted.max_msgs_per_subject;
  if (tighter(perSubject, present.max_msgs_per_subject) && existing.state.messages > (perSubject ?? 0)) {
    // Only when the log holds more events than one session may: then each session's count is looked at.
    const counts = (await jsm.streams.info(wanted.name, { subjects_filter: '>' })).state.subjects ?? {};
    let most = 0;
    for (const count of Object.values(counts)) most = Math.max(most, count);
    if (most > (perSubject ?? 0)) {
      logger?.warn({ stream: wanted.name, mostEvents: most, wanted: perSubject, kept: present.max_msgs_per_subject }, 'a session log holds more events than AGENTBUS_LOG_MAX_SESSION_EVENTS; the limit stays as it was (lowering it would drop its first events)');
      config.max_msgs_per_subject = present.max_msgs_per_subject;
      config.discard_new_per_subject = present.discard_new_per_subject ?? false;
    }
  }
  return config;
}

/** How {@link ensureStream} sizes and adjusts a stream. */
interface EnsureOptions {
  /** Whether the operator set `max_bytes` (see {@link withReservableBytes}). */
  readonly explicit: boolean;
  readonly variable: string;
  readonly logger?: Logger;
  /** What of an existing stream's config to keep (see {@link keepWhatWouldDrop}). */
  readonly adjust?: (existing: StreamInfo) => Promise<Config>;
}

/**
 * Creates the stream, or updates the one there (after `adjust`), with a `max_bytes` the server can reserve: never below
 * what an existing stream holds, and that stream's present limit when nothing else fits.
 */
async function ensureStream(jsm: JetStreamManager, wanted: Config, options: EnsureOptions): Promise<void> {
  let existing: StreamInfo | undefined;
  try {
    existing = await jsm.streams.info(wanted.name);
  } catch (error) {
    if (!(error instanceof Error) || !/not found/i.test(error.message)) throw error;
  }
  const config = existing && options.adjust ? await options.adjust(existing) : wanted;
  const reserve = {
    wanted: config.max_bytes ?? -1,
    explicit: options.explicit,
    variable: options.variable,
    what: `the stream ${wanted.name}`,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(existing ? { floor: Math.max(existing.state.bytes, 64 * 1024 * 1024), fallback: existing.config.max_bytes } : {}),
  };
  if (existing) {
    await withReservableBytes(reserve, (maxBytes) => jsm.streams.update(wanted.name, { ...config, max_bytes: maxBytes }));
    return;
  }
  try {
    await withReservableBytes(reserve, (maxBytes) => jsm.streams.add({ ...config, max_bytes: maxBytes }));
  } catch (addError) {
    // Another process created it meanwhile: update that one (the same config, limits checked).
    if (!(addError instanceof Error) || !/already in use|exists/i.test(addError.message)) throw addError;
    await ensureStream(jsm, wanted, options);
  }
}

/**
 * Stream limits from `AGENTBUS_LOG_MAX_BYTES`, `AGENTBUS_LOG_MAX_EVENT_BYTES`, `AGENTBUS_LOG_MAX_SESSION_EVENTS` and
 * `AGENTBUS_LIVE_MAX_BYTES` (whole numbers; 0 is no limit for the log's bytes and events per session): only those
 * set, the others left to their defaults. Undefined when none is set. Throws an Error naming the variable of a bad value.
 *
 * @example
 * streamLimitsFromEnv({ AGENTBUS_LOG_MAX_BYTES: '53687091200' }); // { logMaxBytes: 53687091200 } (50 GiB)
 */
export function streamLimitsFromEnv(env: Readonly<Record<string, string | undefined>>): Partial<StreamLimits> | undefined {
  const limits: { -readonly [K in keyof StreamLimits]?: number } = {};
  const read = (name: string, key: keyof StreamLimits, min: number, max = Number.MAX_SAFE_INTEGER): void => {
    const raw = env[name]?.trim();
    if (!raw) return;
    const value = Number(raw);
    if (!Number.isSafeInteger(value) || value < min || value > max) throw new Error(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`);
    limits[key] = value;
  };
  read('AGENTBUS_LOG_MAX_BYTES', 'logMaxBytes', 0);
  // Smaller than a prompt or a tool result could not be stored at all; larger than the server's max_payload
  // (1 MiB unless configured) is never reached.
  read('AGENTBUS_LOG_MAX_EVENT_BYTES', 'maxEventBytes', 1024, 64 * 1024 * 1024);
  read('AGENTBUS_LOG_MAX_SESSION_EVENTS', 'logMaxSessionEvents', 0);
  read('AGENTBUS_LIVE_MAX_BYTES', 'liveMaxBytes', 1024 * 1024);
  return Object.keys(limits).length === 0 ? undefined : limits;
}

/**
 * `AGENTBUS_REPLICAS`: copies of each stream and bucket in a NATS cluster, 1 to 5 (JetStream's range);
 * undefined when not set. A bad value is an error that names the variable.
 */
export function replicasFromEnv(env: Readonly<Record<string, string | undefined>>): number | undefined {
  const raw = env.AGENTBUS_REPLICAS?.trim();
  if (!raw) return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1 || value > 5) throw new Error(`AGENTBUS_REPLICAS must be a whole number from 1 to 5, got ${JSON.stringify(raw)}`);
  return value;
}
