import type { Scrubber } from '../../../src/scrub/index.ts';

/**
 * How far past the cut a long output is still scrubbed, so that a secret straddling the cut is seen whole
 * (a 4096-bit PEM key is about 3.3 KB; a cut PEM block is redacted to its end anyway).
 */
export const SCRUB_MARGIN_CHARS = 8192;

// Where a cut may fall without splitting a token: whitespace, quotes and separators.
const BOUNDARY = /[\s"'`,;]/;

/**
 * A tool's output as it is logged and shown to the model: scrubbed of secrets, then cut to `maxChars`
 * with a note saying so. Text far past the cut is dropped before scrubbing: scrubbing 1 MB costs about
 * 15 ms of event loop, for text nobody keeps. The head is taken up to a token boundary near
 * `maxChars + SCRUB_MARGIN_CHARS`, so no secret is scrubbed half-seen. With `scrubbedBy: 'worker'` (a tool worker
 * sent the output scrubbed with the full pass, as asked) only the fast pass runs: secretlint's rules ran there.
 *
 * @example
 * const output = await toolOutputForLog(reply.output, { scrubber, maxChars: 100_000 });
 */
export async function toolOutputForLog(output: string, options: { scrubber: Scrubber; maxChars: number; scrubbedBy?: 'worker' }): Promise<string> {
  const { scrubber, maxChars } = options;
  let head = output;
  if (output.length > maxChars + SCRUB_MARGIN_CHARS) {
    let cut = maxChars + SCRUB_MARGIN_CHARS;
    while (cut > maxChars && !BOUNDARY.test(output[cut] ?? ' ')) cut--;
    head = output.slice(0, cut);
  }
  // Text the worker scrubbed with the full pass gets the fast pass here: this scrubber's own configured secrets,
  // which no worker knows (see docs/operations.md#secret-scrubbing).
  const scrubbed = options.scrubbedBy === 'worker' ? scrubber.scrubSync(head) : await scrubber.scrub(head);
  if (scrubbed.length <= maxChars && head.length === output.length) return scrubbed;
  return `${scrubbed.slice(0, maxChars)}\n[output truncated at ${maxChars} characters]`;
}
