import { RetentionPolicy, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import type { JetStreamManager, StreamConfig } from '@nats-io/jetstream';
import { createSubjects, streamNames } from '../protocol/index.ts';

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
}

const NANOS_PER_MS = 1_000_000;

/**
 * Creates or updates the log stream (`AGENTBUS_LOG`, file storage, kept forever) and the live stream
 * (`AGENTBUS_LIVE`, memory storage, short max age). Idempotent: safe to call from every process.
 */
export async function ensureStreams(jsm: JetStreamManager, settings: StreamSettings): Promise<{ log: string; live: string }> {
  const subjects = createSubjects(settings.prefix);
  const names = streamNames(settings.prefix);
  await ensureStream(jsm, {
    name: names.log,
    subjects: [subjects.anyLog()],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    duplicate_window: (settings.duplicateWindowMs ?? 120_000) * NANOS_PER_MS,
    allow_direct: true,
    ...replicasOf(settings),
  });
  await ensureStream(jsm, {
    name: names.live,
    subjects: [subjects.anyLive()],
    retention: RetentionPolicy.Limits,
    storage: StorageType.Memory,
    discard: DiscardPolicy.Old,
    max_age: (settings.liveMaxAgeMs ?? 300_000) * NANOS_PER_MS,
    max_bytes: 256 * 1024 * 1024,
    duplicate_window: 10_000 * NANOS_PER_MS,
    ...replicasOf(settings),
  });
  return names;
}

const replicasOf = (settings: StreamSettings) => (settings.replicas === undefined ? {} : { num_replicas: settings.replicas });

async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    // update() reads the stream's info itself, and fails with "not found" when there is none.
    await jsm.streams.update(config.name, config);
  } catch (error) {
    if (!(error instanceof Error) || !/not found/i.test(error.message)) throw error;
    try {
      await jsm.streams.add(config);
    } catch (addError) {
      // Another process created it meanwhile.
      if (!(addError instanceof Error) || !/already in use|exists/i.test(addError.message)) throw addError;
    }
  }
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
