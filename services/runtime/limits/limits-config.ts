import { MODEL_PATTERN, isToken } from '../../../src/protocol/index.ts';

/** One model's (or one provider's, `openai:*`) rate limit: requests and tokens per minute, counted fleet-wide. */
export interface RateRule {
  /** `<provider>:<model>`, or `<provider>:*` for every model of the provider together. */
  readonly model: string;
  readonly requestsPerMinute?: number;
  readonly tokensPerMinute?: number;
}

/** One tenant's (or every other tenant's, `*`) spend limits, USD. */
export interface SpendRule {
  readonly tenant: string;
  readonly day?: number;
  readonly month?: number;
}

/** The fleet-wide limits of a deployment (`AGENTBUS_RATE_LIMITS`, `AGENTBUS_RATE_MAX_WAIT_MS`, `AGENTBUS_SPEND_LIMITS`). */
export interface LimitsConfig {
  readonly rates: readonly RateRule[];
  /** The longest a provider call waits for room under a rate limit before its step fails (`rate_limited`). */
  readonly rateMaxWaitMs: number;
  readonly spend: readonly SpendRule[];
}

/** Default of {@link LimitsConfig.rateMaxWaitMs}. */
export const DEFAULT_RATE_MAX_WAIT_MS = 60_000;

function entries(text: string): string[] {
  return text
    .split(/[;\s]+/)
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}

function positive(raw: string, where: string): number {
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${where}: ${JSON.stringify(raw)} is not a positive number`);
  return value;
}

/**
 * Parses `AGENTBUS_RATE_LIMITS`: entries `<provider>:<model>=<n>rpm[,<n>tpm]` (or `<provider>:*=…` for the provider's
 * models together) separated by `;` or spaces. Throws an Error naming the variable and the entry.
 *
 * @example
 * parseRateLimits('openai:gpt-5.4-mini=500rpm,200000tpm; anthropic:*=50rpm');
 */
export function parseRateLimits(text: string): RateRule[] {
  const rules: RateRule[] = [];
  for (const entry of entries(text)) {
    const where = `AGENTBUS_RATE_LIMITS entry ${JSON.stringify(entry)}`;
    const at = entry.lastIndexOf('=');
    if (at <= 0) throw new Error(`${where} must be <provider>:<model>=<n>rpm[,<n>tpm]`);
    const model = entry.slice(0, at);
    const colon = model.indexOf(':');
    const wildcard = colon > 0 && model.slice(colon + 1) === '*' && isToken(model.slice(0, colon));
    if (!wildcard && !MODEL_PATTERN.test(model)) throw new Error(`${where}: ${JSON.stringify(model)} is not <provider>:<model> or <provider>:*`);
    if (rules.some((rule) => rule.model === model)) throw new Error(`${where} names ${model} a second time`);
    let requestsPerMinute: number | undefined;
    let tokensPerMinute: number | undefined;
    for (const part of entry.slice(at + 1).split(',')) {
      const match = /^\s*([0-9.eE+]+)\s*(rpm|tpm)\s*$/.exec(part);
      if (!match) throw new Error(`${where}: ${JSON.stringify(part)} must be <n>rpm or <n>tpm`);
      if (match[2] === 'rpm') requestsPerMinute = positive(match[1]!, where);
      else tokensPerMinute = positive(match[1]!, where);
    }
    rules.push({ model, ...(requestsPerMinute === undefined ? {} : { requestsPerMinute }), ...(tokensPerMinute === undefined ? {} : { tokensPerMinute }) });
  }
  return rules;
}

/**
 * Parses `AGENTBUS_SPEND_LIMITS`: entries `<tenant>=<usd>/day[,<usd>/month]` (`*` for every tenant not named)
 * separated by `;` or spaces. Throws an Error naming the variable and the entry.
 *
 * @example
 * parseSpendLimits('acme=5/day,100/month; *=20/month');
 */
export function parseSpendLimits(text: string): SpendRule[] {
  const rules: SpendRule[] = [];
  for (const entry of entries(text)) {
    const where = `AGENTBUS_SPEND_LIMITS entry ${JSON.stringify(entry)}`;
    const at = entry.indexOf('=');
    if (at <= 0) throw new Error(`${where} must be <tenant>=<usd>/day[,<usd>/month]`);
    const tenant = entry.slice(0, at);
    if (tenant !== '*' && !isToken(tenant)) throw new Error(`${where}: ${JSON.stringify(tenant)} is not a tenant name or *`);
    if (rules.some((rule) => rule.tenant === tenant)) throw new Error(`${where} names ${tenant} a second time`);
    let day: number | undefined;
    let month: number | undefined;
    for (const part of entry.slice(at + 1).split(',')) {
      const match = /^\s*([0-9.eE+]+)\s*\/\s*(day|month)\s*$/.exec(part);
      if (!match) throw new Error(`${where}: ${JSON.stringify(part)} must be <usd>/day or <usd>/month`);
      if (match[2] === 'day') day = positive(match[1]!, where);
      else month = positive(match[1]!, where);
    }
    rules.push({ tenant, ...(day === undefined ? {} : { day }), ...(month === undefined ? {} : { month }) });
  }
  return rules;
}

/**
 * The limits from the environment; undefined when neither `AGENTBUS_RATE_LIMITS` nor `AGENTBUS_SPEND_LIMITS` is set
 * (then no call costs a bucket round trip). Throws an Error naming the variable of a bad value.
 */
export function limitsFromEnv(env: NodeJS.ProcessEnv): LimitsConfig | undefined {
  const rates = parseRateLimits(env.AGENTBUS_RATE_LIMITS ?? '');
  const spend = parseSpendLimits(env.AGENTBUS_SPEND_LIMITS ?? '');
  if (rates.length === 0 && spend.length === 0) return undefined;
  const rawWait = env.AGENTBUS_RATE_MAX_WAIT_MS?.trim();
  let rateMaxWaitMs = DEFAULT_RATE_MAX_WAIT_MS;
  if (rawWait) {
    rateMaxWaitMs = Number(rawWait);
    if (!Number.isInteger(rateMaxWaitMs) || rateMaxWaitMs < 0) {
      throw new Error(`AGENTBUS_RATE_MAX_WAIT_MS must be a whole number of milliseconds, got ${JSON.stringify(env.AGENTBUS_RATE_MAX_WAIT_MS)}`);
    }
  }
  return { rates, rateMaxWaitMs, spend };
}

/** The rules a call of `model` counts against: the model's own, and its provider's `<provider>:*`. */
export function rateRulesFor(rules: readonly RateRule[], model: string): RateRule[] {
  const provider = model.slice(0, model.indexOf(':'));
  return rules.filter((rule) => rule.model === model || rule.model === `${provider}:*`);
}

/** The spend rule of `tenant`: its own, else the `*` one. */
export function spendRuleFor(rules: readonly SpendRule[], tenant: string): SpendRule | undefined {
  return rules.find((rule) => rule.tenant === tenant) ?? rules.find((rule) => rule.tenant === '*');
}
