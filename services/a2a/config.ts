import { InvalidInputError } from '../../src/errors.ts';
import { isToken, MAX_DEADLINE_MS, TOKEN_PATTERN } from '../../src/protocol/index.ts';

/** The A2A server's default port. */
export const DEFAULT_A2A_PORT = 4281;

/** What the A2A server serves and where (docs/operations.md, "A2A"). */
export interface A2aConfig {
  /** Address to bind; loopback unless told otherwise. */
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** When set, every JSON-RPC request must carry `Authorization: Bearer <token>`; the card declares the scheme. */
  readonly token?: string;
  /** The base URL the card announces (`AGENTBUS_A2A_URL`), for a server behind a proxy or bound to 0.0.0.0. */
  readonly publicUrl?: string;
  /** The agentbus tenant whose sessions answer: every context is a session of it. */
  readonly tenant: string;
  /** The model of each turn (`<provider>:<model>`); the runtime's default when not given. */
  readonly model?: string;
  readonly maxSteps?: number;
  /** The card's name and description. */
  readonly name: string;
  readonly description: string;
  /** The longest a turn runs (sent as its deadline) and is followed. */
  readonly turnTimeoutMs: number;
  /** While no runtime answers (one starting), the prompt is sent again for this long. */
  readonly readyTimeoutMs: number;
}

/** Parses a port: an integer 0–65535 (0 = any free port). */
function parsePort(value: string, what: string): number {
  const port = Number(value);
  if (value.trim() === '' || !Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new InvalidInputError(`${what} must be a port number 0-65535 (0 picks a free one), got ${JSON.stringify(value)}`);
  }
  return port;
}

function positiveInt(value: string | undefined, what: string): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const number = Number(value);
  if (!Number.isInteger(number) || number <= 0) throw new InvalidInputError(`${what} must be a positive integer, got ${JSON.stringify(value)}`);
  return number;
}

/**
 * Reads the A2A server's settings from the environment: `AGENTBUS_A2A_PORT` (default 4281), `AGENTBUS_A2A_HOST`
 * (default 127.0.0.1), `AGENTBUS_A2A_TOKEN` (none: no authentication), `AGENTBUS_A2A_URL`, `AGENTBUS_A2A_TENANT`
 * (default `default`), `AGENTBUS_A2A_MODEL`, `AGENTBUS_A2A_MAX_STEPS`, `AGENTBUS_A2A_NAME`,
 * `AGENTBUS_A2A_DESCRIPTION`, `AGENTBUS_A2A_TURN_TIMEOUT_MS` (default 600000). Throws {@link InvalidInputError}
 * naming the first bad one.
 */
export function readA2aConfig(env: NodeJS.ProcessEnv): A2aConfig {
  const port = env.AGENTBUS_A2A_PORT === undefined || env.AGENTBUS_A2A_PORT.trim() === '' ? DEFAULT_A2A_PORT : parsePort(env.AGENTBUS_A2A_PORT, 'AGENTBUS_A2A_PORT');
  const host = env.AGENTBUS_A2A_HOST?.trim() || '127.0.0.1';
  const token = env.AGENTBUS_A2A_TOKEN?.trim();
  if (token !== undefined && token !== '' && token.length < 8) throw new InvalidInputError('AGENTBUS_A2A_TOKEN must be at least 8 characters');
  const tenant = env.AGENTBUS_A2A_TENANT?.trim() || 'default';
  if (!isToken(tenant)) throw new InvalidInputError(`AGENTBUS_A2A_TENANT must match ${TOKEN_PATTERN.source}, got ${JSON.stringify(tenant)}`);
  const model = env.AGENTBUS_A2A_MODEL?.trim() || undefined;
  if (model !== undefined && !/^[^:\s]+:\S+$/.test(model)) {
    throw new InvalidInputError(`AGENTBUS_A2A_MODEL must be <provider>:<model>, got ${JSON.stringify(model)}`);
  }
  const publicUrl = env.AGENTBUS_A2A_URL?.trim() || undefined;
  if (publicUrl !== undefined && !URL.canParse(publicUrl)) throw new InvalidInputError(`AGENTBUS_A2A_URL must be a URL, got ${JSON.stringify(publicUrl)}`);
  const maxSteps = positiveInt(env.AGENTBUS_A2A_MAX_STEPS, 'AGENTBUS_A2A_MAX_STEPS');
  const turnTimeoutMs = positiveInt(env.AGENTBUS_A2A_TURN_TIMEOUT_MS, 'AGENTBUS_A2A_TURN_TIMEOUT_MS');
  // It is each prompt's deadlineMs, which the runtime takes up to a day.
  if (turnTimeoutMs !== undefined && turnTimeoutMs > MAX_DEADLINE_MS) throw new InvalidInputError(`AGENTBUS_A2A_TURN_TIMEOUT_MS must be at most ${MAX_DEADLINE_MS} (one day)`);
  return {
    host,
    port,
    ...(token ? { token } : {}),
    ...(publicUrl ? { publicUrl } : {}),
    tenant,
    ...(model ? { model } : {}),
    ...(maxSteps ? { maxSteps } : {}),
    name: env.AGENTBUS_A2A_NAME?.trim() || 'agentbus',
    description: env.AGENTBUS_A2A_DESCRIPTION?.trim() || `An agentbus agent (tenant ${tenant}): each context is an agentbus session, each task one turn of it.`,
    turnTimeoutMs: turnTimeoutMs ?? 600_000,
    readyTimeoutMs: 10_000,
  };
}
