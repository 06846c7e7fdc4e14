/** One secret found in a text: `[start, end)` in UTF-16 code units, and the rule that found it. */
export interface Finding {
  readonly start: number;
  readonly end: number;
  /** Names the marker: `[REDACTED:<rule>]`. */
  readonly rule: string;
  /** Lower wins when two findings overlap and their union is redacted as one. */
  readonly priority: number;
  /** The marker is written as a JSON string (`"[REDACTED:…]"`): the finding is a bare JSON scalar, such as a number. */
  readonly quote?: boolean;
}

/** How much a detector's word counts when findings overlap: the more specific detector names the marker. */
export const FindingPriority = {
  configured: 0,
  secretlint: 1,
  pattern: 2,
  assignment: 3,
  highEntropy: 4,
} as const;
export type FindingPriority = (typeof FindingPriority)[keyof typeof FindingPriority];

/** The text that replaces a secret found by `rule`. */
export function redactionMarker(rule: string): string {
  return `[REDACTED:${rule}]`;
}

/** The start of every marker, for callers that test whether a text was scrubbed. */
export const REDACTED_PREFIX = '[REDACTED';

/**
 * Replaces each finding with its marker. Overlapping or touching findings are merged into one span,
 * named by the member with the lowest priority number, quoted when a member asks it; every finding must
 * index into `text`.
 *
 * @example
 * redact('key ghp_abc… end', [{ start: 4, end: 44, rule: 'github', priority: 1 }]) // 'key [REDACTED:github] end'
 */
export function redact(text: string, findings: readonly Finding[]): string {
  if (findings.length === 0) return text;
  const sorted = [...findings].sort((a, b) => a.start - b.start || b.end - a.end);
  let result = '';
  let cursor = 0;
  let current: { start: number; end: number; rule: string; priority: number; quote: boolean } | undefined;
  const flush = () => {
    if (!current) return;
    const marker = redactionMarker(current.rule);
    result += text.slice(cursor, current.start) + (current.quote ? `"${marker}"` : marker);
    cursor = current.end;
  };
  for (const finding of sorted) {
    if (finding.end <= finding.start) continue;
    if (current && finding.start <= current.end) {
      current.end = Math.max(current.end, finding.end);
      current.quote ||= finding.quote === true;
      if (finding.priority < current.priority) {
        current.rule = finding.rule;
        current.priority = finding.priority;
      }
      continue;
    }
    flush();
    current = { start: finding.start, end: finding.end, rule: finding.rule, priority: finding.priority, quote: finding.quote === true };
  }
  flush();
  return result + text.slice(cursor);
}
