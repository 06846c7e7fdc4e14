import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';

/**
 * A few critical shapes, checked synchronously on every text, log lines included (secretlint's rules run
 * only in the asynchronous full pass). `group` names the capture group that is the secret, when only part
 * of the match is. `trigger` is a literal every match holds: one scan for all triggers lets a text with
 * none skip the patterns (most log lines). No pattern matches a `"`, so a JSON log line stays JSON.
 */
interface SecretPattern {
  readonly rule: string;
  readonly trigger: RegExp;
  readonly pattern: RegExp;
  readonly group?: number;
}

// Left edge of a prefixed token: not in the middle of a word.
const EDGE = String.raw`(?<![A-Za-z0-9_])`;
// Right edge of a fixed-length token.
const END = String.raw`(?![A-Za-z0-9_])`;

// Shared by the patterns of PEM-like blocks, which sit together so that it is tested once per text.
const PEM_BEGIN = /-----BEGIN/;

const SECRET_PATTERNS: readonly SecretPattern[] = [
  // Through its END line, or to the end of the text (or of the JSON string) when it was cut.
  { rule: 'private-key', trigger: PEM_BEGIN, pattern: /-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----[^"]*?(?:-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|(?="|$))/g },
  // A NATS .creds file's seed block (its END line has six dashes each side), and a bare NATS nkey seed:
  // `S`, the key's type (user, account, operator, server, cluster, curve), 56 base32 characters.
  { rule: 'nkey-seed', trigger: PEM_BEGIN, pattern: /-----BEGIN[A-Z0-9 ]{0,40} NKEY SEED-----[^"]*?(?:-----END[A-Z0-9 ]{0,40} NKEY SEED------?|(?="|$))/g },
  { rule: 'nkey-seed', trigger: /S[UAONCX][A-Z2-7]{56}/, pattern: new RegExp(String.raw`${EDGE}S[UAONCX][A-Z2-7]{56}${END}`, 'g') },
  { rule: 'jwt', trigger: /eyJ/, pattern: new RegExp(String.raw`${EDGE}eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*`, 'g') },
  { rule: 'github', trigger: /gh[pousr]_|github_pat_/, pattern: new RegExp(String.raw`${EDGE}(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})${END}`, 'g') },
  { rule: 'gitlab', trigger: /gl(?:pat|dt|rt|ptt|cbt|oas)-/, pattern: new RegExp(String.raw`${EDGE}gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}`, 'g') },
  { rule: 'slack', trigger: /xox[abposre]-/, pattern: new RegExp(String.raw`${EDGE}xox[abposre]-[A-Za-z0-9-]{10,}`, 'g') },
  { rule: 'stripe', trigger: /k_(?:live|test)_|whsec_/, pattern: new RegExp(String.raw`${EDGE}(?:[rs]k_(?:live|test)|whsec)_[A-Za-z0-9]{16,}`, 'g') },
  // SendGrid's `SG.<22-character key id>.<43-character secret>`, in base64url: secretlint's rule misses those with a `-`.
  { rule: 'sendgrid', trigger: /SG\./, pattern: new RegExp(String.raw`${EDGE}SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}${END}`, 'g') },
  // DigitalOcean's personal access (`dop_v1_`), OAuth (`doo_v1_`) and refresh (`dor_v1_`) tokens: 64 hex characters,
  // which the high-entropy rule keeps (hex is what digests are made of).
  { rule: 'digitalocean', trigger: /do[opr]_v1_/, pattern: new RegExp(String.raw`${EDGE}do[opr]_v1_[a-f0-9]{64}${END}`, 'g') },
  { rule: 'npm', trigger: /npm_/, pattern: new RegExp(String.raw`${EDGE}npm_[A-Za-z0-9]{36}${END}`, 'g') },
  // OpenAI, Anthropic and their look-alikes, also masked as some APIs echo them (`sk-proj-****abcd`).
  { rule: 'api-key', trigger: /sk-/, pattern: new RegExp(String.raw`${EDGE}sk-[A-Za-z0-9_*.-]{15,}[A-Za-z0-9_*]`, 'g') },
  { rule: 'aws', trigger: /A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|3T)/, pattern: new RegExp(String.raw`${EDGE}(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{16}${END}`, 'g') },
  { rule: 'google-api-key', trigger: /AIza/, pattern: new RegExp(String.raw`${EDGE}AIza[0-9A-Za-z_-]{35}${END}`, 'g') },
  // The credential of an Authorization header; a plain word after "Bearer" or "Basic" is prose.
  { rule: 'authorization', trigger: /Bearer|BEARER|bearer|Basic|BASIC|basic/, pattern: /\b(?:Bearer|BEARER|bearer|Basic|BASIC|basic)\s+(?![A-Za-z][a-z]+\b)([A-Za-z0-9._~+/=-]{8,})/dg, group: 1 },
  // GitHub's scheme, `Authorization: token <credential>`; only after the header's name, as "token" is a common word.
  {
    rule: 'authorization',
    trigger: /uthorization|UTHORIZATION/,
    pattern: /\b(?:authorization|Authorization|AUTHORIZATION)["']?\s*[:=]\s*["']?(?:token|Token|TOKEN)\s+(?![A-Za-z][a-z]+\b)([A-Za-z0-9._~+/=-]{8,})/dg,
    group: 1,
  },
  // The password of `scheme://user:password@host`, up to the last `@` of the authority, so a password
  // written with a raw `@` or `#` in it (`postgres://admin:p@ss#word@db/x`) is hidden whole.
  { rule: 'url-credentials', trigger: /:\/\//, pattern: /:\/\/[^\s:/?#@"'<>]*:([^\s/?"'<>]+)@/dg, group: 1 },
  // The password glued to MySQL's and MariaDB's `-p` (`mysql -u root -pS3cr3t! shop`); a bare `-p` prompts for it.
  // The command's arguments are not read past the next `mysql`, so a text of many costs one scan.
  {
    rule: 'password-flag',
    trigger: /mysql|mariadb/,
    pattern: /\b(?:mysql(?:dump|admin|import|check|show|slap)?|mariadb(?:-dump|-admin|-import|-check)?)\b(?:[^\n|;&m]|m(?!ysql|ariadb)){0,200}?\s-p([^\s"'`|;&<>]+)/dg,
    group: 1,
  },
];

const ANY_TRIGGER = new RegExp(SECRET_PATTERNS.map(({ trigger }) => trigger.source).join('|'));

/** The critical patterns' findings in `text`. */
export function findPatterns(text: string): Finding[] {
  const findings: Finding[] = [];
  if (!ANY_TRIGGER.test(text)) return findings;
  let lastTrigger: RegExp | undefined;
  let present = false;
  for (const { rule, trigger, pattern, group } of SECRET_PATTERNS) {
    if (trigger !== lastTrigger) {
      lastTrigger = trigger;
      present = trigger.test(text);
    }
    if (!present) continue;
    for (const match of text.matchAll(pattern)) {
      const [start, end] = group === undefined ? [match.index, match.index + match[0].length] : (match.indices?.[group] ?? [0, 0]);
      if (end > start) findings.push({ start, end, rule, priority: FindingPriority.pattern });
    }
  }
  return findings;
}
