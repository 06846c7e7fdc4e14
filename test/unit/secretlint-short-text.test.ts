import fc from 'fast-check';
import { lintSource } from '@secretlint/core';
import { rules as recommendedRules } from '@secretlint/secretlint-rule-preset-recommend';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { SHORTEST_SECRETLINT_FINDING, createSecretlintDetector } from '../../src/scrub/secretlint.ts';

// secretlint itself, counted: a text too short for any finding must not reach it.
vi.mock('@secretlint/core', async (importOriginal) => {
  const actual = await importOriginal<typeof import('@secretlint/core')>();
  return { ...actual, lintSource: vi.fn(actual.lintSource) };
});

const lint = vi.mocked(lintSource);

/** secretlint's own findings for `text`, every recommended rule on, as the detector configures it but without its bound. */
async function secretlintFinds(text: string): Promise<number> {
  const config = { rules: recommendedRules.filter((rule) => !rule.meta.id.endsWith('filter-comments')).map((rule) => ({ id: rule.meta.id, rule, ...(rule.meta.id.endsWith('-aws') ? { options: { enableIDScanRule: true } } : {}) })) };
  const result = await lintSource({ source: { content: text, filePath: 'scrubbed.txt', ext: '.txt', contentType: 'text' }, options: { config, noPhysicFilePath: true } });
  return result.messages.length;
}

describe('the secretlint pass on texts too short for any finding', () => {
  const detector = createSecretlintDetector();
  beforeEach(() => {
    lint.mockClear();
  });

  it('is checked against the rules of the preset it was worked out for (an upgrade adding a rule fails here)', () => {
    // SHORTEST_SECRETLINT_FINDING comes from these rules' patterns: a new rule's must be checked against it first.
    expect(recommendedRules.map((rule) => rule.meta.id.replace('@secretlint/secretlint-rule-', ''))).toEqual([
      'aws', 'gcp', 'privatekey', 'npm', 'basicauth', 'slack', 'sendgrid', 'shopify', 'github', 'gitlab', 'grafana', 'openai',
      'anthropic', 'groq', 'huggingface', 'linear', 'notion', '1password', 'database-connection-string', 'hashicorp-vault',
      'vercel', 'databricks', 'docker', 'figma', 'filter-comments',
    ]);
  });

  it('does not run secretlint on a shorter text, and does on one of that length', async () => {
    expect(await detector.find('alpha')).toEqual([]);
    expect(await detector.find('x'.repeat(SHORTEST_SECRETLINT_FINDING - 1))).toEqual([]);
    expect(lint).not.toHaveBeenCalled();
    await detector.find('x'.repeat(SHORTEST_SECRETLINT_FINDING));
    expect(lint).toHaveBeenCalledTimes(1);
  });

  it('still finds a secret just past the bound (a Slack token of 8 characters)', async () => {
    expect(await detector.find('xoxb-a-b')).toEqual([{ start: 0, end: 8, rule: 'slack', priority: expect.any(Number) }]);
  });

  it('loses nothing secretlint would find: no shorter text made of the rules\' characters is reported', async () => {
    // The characters the rules' prefixes, separators and bodies are made of.
    const chars = 'SGxobapdmyqlhfn0123456789ADIKT_-.:/@=+ \n'.split('');
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom(...chars), { maxLength: SHORTEST_SECRETLINT_FINDING - 1 }), async (picked) => {
        expect(await secretlintFinds(picked.join(''))).toBe(0);
      }),
      { numRuns: 300, seed: 17 },
    );
    for (const near of ['SG.a.b', 'xoxb-a', 'ftp://', 'mysql:', '_authT']) expect(await secretlintFinds(near)).toBe(0);
  });
});
