import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';

/** Configured secrets shorter than this are ignored: a four-letter "key" would redact every word it spells. */
export const MIN_CONFIGURED_SECRET_LENGTH = 6;

// NATS_PASSWORD, ACME_PASSWORD, OPENAI_API_KEY, AGENTBUS_DASHBOARD_TOKEN, AWS_SECRET_ACCESS_KEY, …
const SECRET_VARIABLE = /(?:^|_)(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY|SECRET_KEY|PRIVATE_KEY|CREDENTIALS)$/i;

/**
 * The values of environment variables whose names say they hold a secret (`…_API_KEY`, `…_TOKEN`,
 * `…_SECRET`, `…_PASSWORD`, …), for a process's scrubbers. Variables naming files (`NATS_KEY`) are not
 * among them.
 *
 * @example
 * const scrubber = createScrubber({ secrets: secretsFromEnv(process.env) });
 */
export function secretsFromEnv(env: Readonly<Record<string, string | undefined>>): string[] {
  const secrets: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    const trimmed = value?.trim();
    if (trimmed && trimmed.length >= MIN_CONFIGURED_SECRET_LENGTH && SECRET_VARIABLE.test(name)) secrets.push(trimmed);
  }
  return secrets;
}

/** Header names whose values are credentials (`Authorization`, `X-API-Key`, `Cookie`, …); `Accept` is none. */
const CREDENTIAL_HEADER = /auth|key|token|secret|passw|cookie|session|credential/i;

/**
 * The secrets of HTTP headers configured for a client (a provider's gateway key, an MCP server's `--header`), for
 * its scrubbers: each value of a header named like a credential, its token when it has a scheme (`Bearer <token>`),
 * and for `Basic` the password it encodes. Other headers (`Accept: application/json`) are none.
 *
 * @example
 * headerSecrets({ Authorization: 'Bearer gw-123456', Accept: 'application/json' }); // ['Bearer gw-123456', 'gw-123456']
 */
export function headerSecrets(headers: Readonly<Record<string, string>> | undefined): string[] {
  const secrets: string[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!CREDENTIAL_HEADER.test(name)) continue;
    secrets.push(value);
    const [scheme, ...rest] = value.trim().split(/\s+/);
    const token = rest.join(' ');
    if (!token) continue;
    secrets.push(token);
    if (/^basic$/i.test(scheme ?? '')) {
      const decoded = Buffer.from(token, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0) secrets.push(decoded.slice(colon + 1));
    }
  }
  return secrets;
}

/** Every occurrence of each secret in `text`; each secret at least {@link MIN_CONFIGURED_SECRET_LENGTH} long. */
export function findConfigured(text: string, secrets: readonly string[]): Finding[] {
  const findings: Finding[] = [];
  for (const secret of secrets) {
    for (let index = text.indexOf(secret); index >= 0; index = text.indexOf(secret, index + secret.length)) {
      findings.push({ start: index, end: index + secret.length, rule: 'configured-secret', priority: FindingPriority.configured });
    }
  }
  return findings;
}
