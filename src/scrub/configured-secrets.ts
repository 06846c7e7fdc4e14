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
