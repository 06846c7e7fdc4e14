import { z } from 'zod';
import { InvalidInputError } from '../../src/errors.ts';
import { TOKEN_PATTERN } from '../../src/protocol/index.ts';
import { parsePayloadSize } from './wire.ts';
import type { AgentIdentity } from './wire.ts';

/** The variable that holds the agents config: a path to a JSON file, or the JSON itself (starting with `{`). */
export const AGENTS_CONFIG_ENV = 'AGENTBUS_AGENTS';

/** A protocol token (§2.2): NATS-safe, no leading `$`, 1–63 characters of `A-Za-z0-9_-`. */
const AGENT_TOKEN = /^[A-Za-z0-9_-]{1,63}$/;

const agentToken = (what: string) => z.string().regex(AGENT_TOKEN, `${what} must match ${AGENT_TOKEN.source}`);
const busToken = (what: string) => z.string().regex(TOKEN_PATTERN, `${what} must match ${TOKEN_PATTERN.source}`);

const exposedAgentSchema = z.strictObject({
  /** `metadata.agent` and the subject's agent token. */
  agent: agentToken('agent').default('agentbus'),
  owner: agentToken('owner'),
  /** The instance name: the subject's last token. */
  name: agentToken('name'),
  /** The agentbus tenant whose sessions answer. */
  tenant: busToken('tenant'),
  /** One agentbus session every prompt goes to (announced as `metadata.session`); without it each prompt gets a new one. */
  session: busToken('session').optional(),
  /** The model of each turn (`<provider>:<model>`); the runtime's default when not given. */
  model: z.string().min(1).optional(),
  maxSteps: z.int().positive().optional(),
  description: z.string().optional(),
  /** `max_payload` of the `prompt` endpoint (`"256KB"`); capped by the server's max_payload. */
  maxPayload: z
    .string()
    .refine((value) => parsePayloadSize(value) !== undefined, 'maxPayload must be a size such as "1MB", "256KB" or "900B"')
    .optional(),
  /** Whether the `prompt` endpoint takes attachments (`attachments_ok`): UTF-8 text files, passed to the model. */
  attachments: z.boolean().default(true),
  /**
   * Who decides a privileged tool call of this agent's turns: `operator` (an agentbus client: the dashboard, `agentbus
   * approve`; the protocol's caller only waits) or `caller` (the prompt's caller, asked with a §7 `query` chunk).
   */
  approvals: z.enum(['operator', 'caller']).default('operator'),
});

const agentsConfigSchema = z.strictObject({
  agents: z.array(exposedAgentSchema).min(1, 'name at least one agent to expose'),
  /** Heartbeat cadence (§8.2): 30 s recommended, never under 1 s. */
  heartbeatIntervalS: z.number().min(1).default(30),
  /** The ack repeated while a turn runs, in seconds; 0 sends only the leading one. */
  keepaliveIntervalS: z.number().min(0).default(30),
  /** The longest a turn is followed before the stream ends with a 500. */
  turnTimeoutMs: z.int().positive().default(600_000),
  /** While no runtime answers (one starting), the prompt is sent again for this long. */
  readyTimeoutMs: z.int().nonnegative().default(10_000),
  /** How long a `query` chunk (an approval asked of the caller) waits for its reply; past it the call is denied. */
  queryTimeoutMs: z.int().positive().default(300_000),
});

/** One agentbus agent exposed to the protocol's callers: its identity on the bus and the session it maps to. */
export type ExposedAgent = z.infer<typeof exposedAgentSchema> & AgentIdentity;

/** The whole agents config (docs/operations.md, "Synadia Agent Protocol"). */
export type AgentsConfig = z.infer<typeof agentsConfigSchema>;

/**
 * Validates an agents config: every field checked, every identity (`agent.owner.name`) once.
 * Throws {@link InvalidInputError} naming the first problem.
 */
export function parseAgentsConfig(value: unknown, source = 'agents config'): AgentsConfig {
  const parsed = agentsConfigSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidInputError(`${source}: ${issue.path.join('.') || '(top)'}: ${issue.message}`);
  }
  const seen = new Set<string>();
  for (const agent of parsed.data.agents) {
    const key = `${agent.agent}.${agent.owner}.${agent.name}`;
    if (seen.has(key)) throw new InvalidInputError(`${source}: the identity ${key} is listed twice`);
    seen.add(key);
  }
  return parsed.data;
}

/**
 * The agents config named by {@link AGENTS_CONFIG_ENV}: inline JSON when it starts with `{`, else a file path read
 * with `readFile`. Undefined when the variable is not set (the service has nothing to expose).
 */
export async function agentsConfigFromEnv(env: NodeJS.ProcessEnv, readFile: (path: string) => Promise<string>): Promise<AgentsConfig | undefined> {
  const value = env[AGENTS_CONFIG_ENV]?.trim();
  if (!value) return undefined;
  const inline = value.startsWith('{');
  const source = inline ? AGENTS_CONFIG_ENV : value;
  const text = inline ? value : await readFile(value);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new InvalidInputError(`${source}: not JSON (${(error as Error).message})`, { cause: error });
  }
  return parseAgentsConfig(json, source);
}
