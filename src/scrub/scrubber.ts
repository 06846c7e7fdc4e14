import { MIN_CONFIGURED_SECRET_LENGTH, findConfigured } from './configured-secrets.ts';
import { redact } from './findings.ts';
import type { Finding } from './findings.ts';
import { findHighEntropy } from './high-entropy.ts';
import { fitToJsonLine } from './json-line.ts';
import { mapStrings } from './json-value.ts';
import { findAssignments } from './assignments.ts';
import { findPatterns } from './patterns.ts';
import { createSecretlintDetector } from './secretlint.ts';

/**
 * Removes secrets from text before it is logged, stored, indexed or sent to a model. Every secret found
 * becomes `[REDACTED:<rule>]`, the rule saying what found it (`configured-secret`, a secretlint rule such
 * as `github` or `database-connection-string`, a critical pattern such as `private-key`,
 * `secret-assignment`, or `high-entropy`).
 */
export interface Scrubber {
  /**
   * The full pass: secretlint's recommended rules, then the fast pass. For tool output, provider error
   * text and anything else whose caller can wait; well under a millisecond for a short text.
   */
  scrub(text: string): Promise<string>;
  /**
   * The fast pass, synchronous: configured secrets, a few critical patterns, secret-named assignments and
   * the high-entropy rule. For code that cannot wait, such as an SDK's log callback.
   */
  scrubSync(text: string): string;
  /**
   * The fast pass over one serialized JSON value (a log line): secrets inside its strings are replaced
   * and the line stays valid JSON, escapes included. A secret that is a bare number (`{"password":
   * 123456789}`, or a configured secret made of digits) becomes the string `"[REDACTED:…]"`.
   */
  scrubJsonLine(line: string): string;
  /**
   * The full pass over a JSON value, such as a tool call's arguments: each string is scrubbed as {@link scrub} does,
   * then the whole value as one JSON line (so that `{"password": "…"}`, a secret named by its key, goes too).
   * `redacted` says whether anything was; `value` is then a new value (a secret that was a bare number becomes
   * the marker string), else the one given.
   *
   * @example
   * await scrubber.scrubValue({ cmd: 'curl -H "Authorization: Bearer sk-live-…"' });
   * // { value: { cmd: 'curl -H "Authorization: Bearer [REDACTED:api-key]"' }, redacted: true }
   */
  scrubValue(value: unknown): Promise<ScrubbedValue>;
  /**
   * Runs every rule once on a sample, so that the first real text does not pay for compiling them (tens of
   * milliseconds of event loop on a busy machine). Call it before serving.
   */
  warmUp(): Promise<void>;
}

/** What {@link Scrubber.scrubValue} made of a value. */
export interface ScrubbedValue {
  readonly value: unknown;
  /** True when a secret was found in the value (and `value` is a scrubbed copy). */
  readonly redacted: boolean;
}

// Something for each kind of rule to chew on; none of it a real secret.
const WARM_UP_TEXT = [
  'token=ghp_000000000000000000000000000000000000 xoxb-0000000000-warm-up',
  'postgres://user:warm-up-password@localhost:5432/db Authorization: Bearer warm.up.token.value',
  '-----BEGIN PRIVATE KEY-----\nd2FybSB1cA==\n-----END PRIVATE KEY-----',
  'q8Zr3LmX9vKp2TfW7yNc4HbJ6sDg createOAuth2ClientForTenant42',
].join('\n');

/** Options of {@link createScrubber}. */
export interface ScrubberOptions {
  /** Exact values removed wherever they occur (API keys, passwords); shorter than 6 characters, ignored. */
  readonly secrets?: readonly (string | undefined)[];
  /** Told when secretlint fails on a text; that text then gets the fast pass alone. */
  readonly logger?: { warn(object: object, message: string): void };
}

// JSON escapes, blanked to the same length so that no finding starts or ends inside one.
const JSON_ESCAPE = /\\(?:u[0-9A-Fa-f]{4}|.)/g;

/**
 * Creates a scrubber. secretlint's configuration is built here, once per scrubber; a process makes one or
 * a few (the runtime's, each provider adapter's, the logger's).
 *
 * @example
 * const scrubber = createScrubber({ secrets: [process.env.OPENAI_API_KEY] });
 * await scrubber.scrub('token ghp_…'); // 'token [REDACTED:github]'
 */
export function createScrubber(options: ScrubberOptions = {}): Scrubber {
  const secrets = [...new Set(options.secrets ?? [])].filter((secret): secret is string => secret !== undefined && secret.length >= MIN_CONFIGURED_SECRET_LENGTH);
  // In a JSON line, a secret with characters JSON escapes is looked for in its escaped form.
  const escapedSecrets = secrets.map((secret) => JSON.stringify(secret).slice(1, -1)).filter((escaped, index) => escaped !== secrets[index]);
  const secretlint = createSecretlintDetector();

  const fastFindings = (text: string): Finding[] => [
    ...findConfigured(text, secrets),
    ...findPatterns(text),
    ...findAssignments(text),
    ...findHighEntropy(text),
  ];

  const scrub = async (text: string): Promise<string> => {
    let found: Finding[] = [];
    try {
      found = await secretlint.find(text);
    } catch (err) {
      options.logger?.warn({ err }, 'secretlint failed on a text; the fast pass alone scrubbed it');
    }
    return redact(text, [...found, ...fastFindings(text)]);
  };
  const scrubJsonLine = (line: string): string => {
    if (!line.includes('\\')) return redact(line, fitToJsonLine(line, fastFindings(line)));
    // Findings are looked for with escapes blanked, so none starts or ends inside one, and replaced in the line.
    const blanked = line.replace(JSON_ESCAPE, (escape) => ' '.repeat(escape.length));
    return redact(line, fitToJsonLine(blanked, [...fastFindings(blanked), ...findConfigured(line, escapedSecrets)]));
  };

  const scrubValue = async (value: unknown): Promise<ScrubbedValue> => {
    const walked = await mapStrings(value, scrub);
    let line: string | undefined;
    try {
      line = JSON.stringify(walked);
    } catch {
      // A value JSON cannot write (a bigint from msgpack): its strings were scrubbed one by one above.
    }
    const scrubbedLine = line === undefined ? undefined : scrubJsonLine(line);
    // Our own JSON, just written and scrubbed so that it stays JSON; not bus data.
    const whole = scrubbedLine === undefined || scrubbedLine === line ? walked : (JSON.parse(scrubbedLine) as unknown);
    return { value: whole, redacted: whole !== value };
  };

  return {
    scrub,
    scrubSync: (text) => redact(text, fastFindings(text)),
    scrubJsonLine,
    scrubValue,
    async warmUp() {
      await scrub(WARM_UP_TEXT);
      scrubJsonLine(`${JSON.stringify({ msg: WARM_UP_TEXT })}\n`);
    },
  };
}
