import { describe, expect, it } from 'vitest';
import { createScrubber } from '../../src/scrub/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import { SCRUB_MARGIN_CHARS, toolOutputForLog } from '../../services/runtime/tools/tool-output.ts';
import { ALPHABET, createRandom } from '../helpers/secret-corpus.ts';

const scrubber = createScrubber();
const token = `ghp_${createRandom(41).from(ALPHABET.base62, 36)}`;

/** A scrubber that records the texts it was given and changes nothing. */
function recordingScrubber(): Scrubber & { seen: string[] } {
  const seen: string[] = [];
  return { seen, scrub: async (text) => (seen.push(text), text), scrubSync: (text) => text, scrubJsonLine: (line) => line, scrubValue: async (value) => ({ value, redacted: false }), warmUp: async () => undefined };
}

describe('a tool output on its way to the log', () => {
  it('is scrubbed and kept whole when it fits', async () => {
    expect(await toolOutputForLog(`GITHUB_TOKEN=${token}\nok`, { scrubber, maxChars: 1000 })).toBe('GITHUB_TOKEN=[REDACTED:github]\nok');
  });

  it('is cut after scrubbing, so a secret across the cut is not left half visible', async () => {
    const output = `${'x '.repeat(40)}${token} and more`;
    const result = await toolOutputForLog(output, { scrubber, maxChars: 100 });
    expect(result).toBe(`${'x '.repeat(40)}[REDACTED:github] an\n[output truncated at 100 characters]`);
    expect(result).not.toContain(token.slice(0, 10));
  });

  it('scrubs only a head of a huge output, up to a token boundary past the cut', async () => {
    const recording = recordingScrubber();
    const output = `${'word '.repeat(300_000)}`;
    const result = await toolOutputForLog(output, { scrubber: recording, maxChars: 1000 });
    expect(recording.seen).toHaveLength(1);
    expect(recording.seen[0]!.length).toBeLessThanOrEqual(1000 + SCRUB_MARGIN_CHARS);
    expect(recording.seen[0]!.length).toBeGreaterThan(1000 + SCRUB_MARGIN_CHARS - 6);
    expect(recording.seen[0]).toMatch(/word ?$/);
    expect(result.endsWith('\n[output truncated at 1000 characters]')).toBe(true);
  });

  it('says it was cut even when redactions shrank the head below the limit', async () => {
    const key = `-----BEGIN PRIVATE KEY-----\n${'A'.repeat(64)}\n`.repeat(200);
    const output = `${key}${'z'.repeat(20_000)}`;
    const result = await toolOutputForLog(output, { scrubber, maxChars: 5_000 });
    expect(result).toBe('[REDACTED:private-key]\n[output truncated at 5000 characters]');
  });

  it('gets only the fast pass, with the runtime\'s configured secrets, when its worker scrubbed it', async () => {
    const configured = createScrubber({ secrets: ['runtime-only-secret-value'] });
    const seen: string[] = [];
    const watching: Scrubber = { ...configured, scrub: async (text) => (seen.push(text), configured.scrub(text)) };
    const output = 'the key is runtime-only-secret-value, and password=hunter2hunter2';
    const result = await toolOutputForLog(output, { scrubber: watching, maxChars: 1000, scrubbedBy: 'worker' });
    expect(seen).toEqual([]);
    expect(result).not.toContain('runtime-only-secret-value');
    expect(result).not.toContain('hunter2hunter2');
    // Without the worker's word the full pass runs.
    await toolOutputForLog(output, { scrubber: watching, maxChars: 1000 });
    expect(seen).toEqual([output]);
  });
});
