import { JetStreamApiError } from '@nats-io/jetstream';

/** JetStream's error code for a write whose expected last sequence (a KV revision) is not the subject's last. */
export const WRONG_LAST_SEQUENCE = 10071;

/**
 * True when a JetStream write failed because the key or subject moved on (another writer came first, or a KV
 * `create` found a value), not for a transient reason. Matches the API error's code, and the message of an error
 * that carries only the server's text.
 *
 * @example
 * try { await kv.update(key, value, revision); } catch (error) { if (isRevisionConflict(error)) return 'lost'; throw error; }
 */
export function isRevisionConflict(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return error.code === WRONG_LAST_SEQUENCE;
  return error instanceof Error && /wrong last sequence/i.test(error.message);
}
