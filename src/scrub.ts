/** Patterns of secrets that must not reach a log, a store or a model. */
const SECRET_PATTERNS: readonly RegExp[] = [
  /\bsk-ant-[A-Za-z0-9_-]{16,}/g, // Anthropic
  /\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_-]{20,}/g, // OpenAI
  /\bgh[pousr]_[A-Za-z0-9]{30,}/g, // GitHub
  /\bgithub_pat_[A-Za-z0-9_]{30,}/g,
  /\bxox[abposr]-[A-Za-z0-9-]{10,}/g, // Slack
  /\bAKIA[0-9A-Z]{16}\b/g, // AWS access key id
  /\bAIza[0-9A-Za-z_-]{35}\b/g, // Google API key
  /\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}/g, // JWT
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----/g,
  /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{16,}/gi,
];

/** `key = value` pairs whose key names a secret. */
const ASSIGNMENT = /\b([A-Za-z0-9_]*(?:api[_-]?key|secret|password|passwd|token|private[_-]?key)[A-Za-z0-9_]*)(\s*[:=]\s*)(["']?)([^\s"',;]{6,})\3/gi;

/** The text that replaces a secret. */
export const REDACTED = '[REDACTED]';

/** A scrubber: removes known secrets and secret-looking values from text. */
export interface Scrubber {
  scrub(text: string): string;
}

/**
 * Creates a scrubber. `secrets` are exact values (e.g. configured API keys) removed wherever they occur,
 * besides the built-in patterns (provider keys, tokens, private keys, `password=...` pairs).
 *
 * @example
 * createScrubber().scrub('OPENAI_API_KEY=sk-abc...') // 'OPENAI_API_KEY=[REDACTED]'
 */
export function createScrubber(options: { secrets?: readonly string[] } = {}): Scrubber {
  const secrets = (options.secrets ?? []).filter((secret) => secret.length >= 6);
  return {
    scrub(text) {
      let result = text;
      for (const secret of secrets) result = result.split(secret).join(REDACTED);
      for (const pattern of SECRET_PATTERNS) result = result.replace(pattern, REDACTED);
      return result.replace(ASSIGNMENT, (_match, key: string, separator: string, quote: string) => `${key}${separator}${quote}${REDACTED}${quote}`);
    },
  };
}
