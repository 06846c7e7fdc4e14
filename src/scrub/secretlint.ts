import { lintSource } from '@secretlint/core';
import { secretLintProfiler } from '@secretlint/profiler';
import { rules as recommendedRules } from '@secretlint/secretlint-rule-preset-recommend';
import type { SecretLintCoreConfig } from '@secretlint/types';
import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';

/** Finds secrets with secretlint's recommended rules (cloud keys, tokens, connection strings, private keys, …). */
export interface SecretlintDetector {
  find(text: string): Promise<Finding[]>;
}

const RULE_PREFIX = '@secretlint/secretlint-rule-';

/**
 * The fewest characters a finding of the recommended rules (secretlint 12) can span: every rule reports the
 * range of a match of its own patterns, the shortest of which is SendGrid's `SG\.\w+\.\w+[-_]?\w+` (`SG.a.bc`).
 * Next come Slack's `xoxb-a-b` (8), `mysql://h` (9) and a basic-auth URL (13); every other pattern needs 11 or
 * more (most 20 to 100: a token's prefix and its fixed-length body), and the GCP rule reads only `.json` and
 * `.p12` files. A shorter text (a tool call's `"id"` or `"key"` argument) is not handed to secretlint at all:
 * it costs tens of microseconds per text (hundreds on a busy node) to find nothing. The preset's rule list is
 * pinned by a test, so an upgrade that adds a rule fails until its patterns are checked against this bound.
 */
export const SHORTEST_SECRETLINT_FINDING = 7;

// The `key = ` or `"key": "` a rule's range may start with (the AWS rule reports `aws_secret_access_key = …`
// whole); not a URL's scheme.
const ASSIGNMENT_HEAD = /^["']?[A-Za-z_][\w.-]*["']?[ \t]*(?::=|=>|=|:(?!\/\/))[ \t]*["']?(?=.)/;

/**
 * The start of the value in a reported range `[start, end)` of `text`, past a key and its operator, so
 * that a redacted file keeps its keys and quotes (`"SecretAccessKey": "[REDACTED:aws]"` stays JSON).
 */
function valueStart(text: string, start: number, end: number): number {
  const head = ASSIGNMENT_HEAD.exec(text.slice(start, end));
  return head ? start + head[0].length : start;
}

/**
 * secretlint 12 marks two performance entries per rule per text and keeps them, and Node's timeline keeps
 * them too, unbounded in a process that lints every tool output (upstream issue #1633, fixed in 13.x,
 * which needs Node 22). Marking is turned off here; nothing in agentbus reads secretlint's profile.
 */
function silenceProfiler(): void {
  secretLintProfiler.mark = () => undefined;
}

/**
 * Creates the secretlint pass of a scrubber. Its configuration is built once, here: the rules of the
 * recommended preset, with AWS access key ids reported (off by default in the preset) and without the
 * `secretlint-disable` comment filter, so text being scrubbed cannot switch the scrubbing off. The rules
 * are listed one by one rather than through the preset: secretlint 12 ignores `disabled` on a rule inside
 * a preset.
 *
 * @example
 * const findings = await createSecretlintDetector().find(toolOutput);
 */
export function createSecretlintDetector(): SecretlintDetector {
  silenceProfiler();
  const config: SecretLintCoreConfig = {
    rules: recommendedRules
      .filter((rule) => rule.meta.id !== `${RULE_PREFIX}filter-comments`)
      .map((rule) => ({ id: rule.meta.id, rule, ...(rule.meta.id === `${RULE_PREFIX}aws` ? { options: { enableIDScanRule: true } } : {}) })),
  };
  return {
    async find(text) {
      if (text.length < SHORTEST_SECRETLINT_FINDING) return [];
      const result = await lintSource({
        source: { content: text, filePath: 'scrubbed.txt', ext: '.txt', contentType: 'text' },
        options: { config, noPhysicFilePath: true },
      });
      // secretlint drops a leading byte-order mark before it reports ranges.
      const offset = text.charCodeAt(0) === 0xfeff ? 1 : 0;
      return result.messages.map((message) => ({
        start: valueStart(text, message.range[0] + offset, message.range[1] + offset),
        end: message.range[1] + offset,
        rule: message.ruleId.startsWith(RULE_PREFIX) ? message.ruleId.slice(RULE_PREFIX.length) : message.ruleId,
        priority: FindingPriority.secretlint,
      }));
    },
  };
}
