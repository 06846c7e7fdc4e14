import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { getEncoding } from 'js-tiktoken';
import { ALWAYS_EXACT_CHARS, EXACT_COUNT_CHARS, countLinear, createTokenCounter } from '../../src/tokens.ts';
import type { ChatMessage } from '../../src/protocol/index.ts';
import { createRandom, randomText } from '../helpers/random-log.ts';
import type { Random } from '../helpers/random-log.ts';

const ENCODINGS = ['o200k_base', 'cl100k_base'] as const;

/** Any UTF-16 string, lone surrogates included. */
function randomCodeUnits(random: Random): string {
  const units = Array.from({ length: random.int(64) }, () => (random.chance(0.5) ? random.int(0x80) : random.chance(0.3) ? 0xd800 + random.int(0x800) : random.int(0x10000)));
  return String.fromCharCode(...units);
}

function randomMessage(random: Random, text: (random: Random) => string): ChatMessage {
  const roll = random.int(4);
  if (roll === 0) return { role: 'system', content: text(random) };
  if (roll === 1) return { role: 'user', content: text(random) };
  if (roll === 2) return { role: 'tool', toolCallId: text(random), name: text(random), content: text(random), isError: random.chance(0.2) };
  const toolCalls = Array.from({ length: random.int(3) }, (_, index) => ({ id: `c${index}`, name: text(random), args: { [text(random)]: text(random), n: random.int(1e6), list: [text(random)] } }));
  return { role: 'assistant', content: text(random), toolCalls };
}

describe('token counter', () => {
  it('counts text that spells a special token as text instead of throwing', () => {
    for (const encoding of ENCODINGS) {
      const tokens = createTokenCounter(encoding);
      const text = 'ignore this <|endoftext|> and <|im_start|>system';
      expect(tokens.count(text)).toBeGreaterThan(tokens.count('ignore this  and system'));
      expect(tokens.countMessage({ role: 'user', content: text })).toBe(4 + tokens.count(text));
    }
  });

  it('bounds a message from above by its UTF-8 length and from below by minMessageTokens, over text of every script and any code units', () => {
    for (const [seed, encoding] of ENCODINGS.entries()) {
      const tokens = createTokenCounter(encoding);
      const random = createRandom(seed + 1);
      for (let sample = 0; sample < 1_500; sample++) {
        const text = sample % 2 === 0 ? randomText : randomCodeUnits;
        const piece = text(random);
        expect(tokens.count(piece), `${encoding}: ${JSON.stringify(piece)}`).toBeLessThanOrEqual(Buffer.byteLength(piece, 'utf8'));
        const message = randomMessage(random, text);
        const count = tokens.countMessage(message);
        expect(tokens.boundMessage!(message), `${encoding}: ${JSON.stringify(message)}`).toBeGreaterThanOrEqual(count);
        // And from below by the fewest tokens any message counts, which settles a long history's total unread.
        expect(count, `${encoding}: ${JSON.stringify(message)}`).toBeGreaterThanOrEqual(tokens.minMessageTokens!);
      }
      expect(tokens.countMessage({ role: 'user', content: '' })).toBe(tokens.minMessageTokens);
    }
  });

  it('bounds a message from above over real prose and code, by about four times its count (2.5 for JSON)', () => {
    const files = ['README.md', '../shared/DESIGN.md', 'services/runtime/context/conversation.ts', 'package-lock.json'].flatMap((path) => {
      try {
        return [readFileSync(path, 'utf8')];
      } catch {
        return [];
      }
    });
    expect(files.length).toBeGreaterThan(1);
    for (const encoding of ENCODINGS) {
      const tokens = createTokenCounter(encoding);
      for (const file of files) {
        const message: ChatMessage = { role: 'tool', toolCallId: 'c', name: 'read_file', content: file.slice(0, 50_000) };
        const count = tokens.countMessage(message);
        const bound = tokens.boundMessage!(message);
        expect(bound).toBeGreaterThanOrEqual(count);
        expect(bound).toBeLessThan(count * 5);
      }
    }
  });

  it('bounds an assistant message with its tool calls’ names and arguments, as it counts them', () => {
    const tokens = createTokenCounter();
    const message: ChatMessage = { role: 'assistant', content: 'hi', toolCalls: [{ id: 'c1', name: 'read_file', args: { path: 'é.txt' } }] };
    expect(tokens.boundMessage!(message)).toBe(4 + 2 + 'read_file'.length + Buffer.byteLength('{"path":"é.txt"}'));
    expect(tokens.boundMessage!({ role: 'tool', toolCallId: 'c1', name: 'read_file', content: '' })).toBe(4);
  });
});

/** `length` CJK ideographs drawn at random: one pre-tokenizer piece, and no piece of it repeats (no cache helps). */
function randomCjk(random: Random, length: number): string {
  return Array.from({ length }, () => String.fromCodePoint(0x4e00 + random.int(0x5000))).join('');
}

/** The least CPU time (ms) that `count` took over `samples` texts from `text`: load on the machine cannot shrink it. */
function leastCpuMs(count: (text: string) => number, text: (sample: number) => string, samples = 5): number {
  let least = Infinity;
  for (let sample = 0; sample < samples; sample++) {
    const input = text(sample);
    const started = process.cpuUsage();
    count(input);
    const spent = process.cpuUsage(started);
    least = Math.min(least, (spent.user + spent.system) / 1000);
  }
  return least;
}

/** The inputs that froze a runtime node: one pre-tokenizer piece each, or close to it, up to 1 MiB. */
function pathologicalInputs(size: number): Record<string, string> {
  const random = createRandom(7);
  const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
  const noSpace = Array.from({ length: size }, () => letters[random.int(letters.length)]).join('');
  const bytes = Buffer.from(Array.from({ length: Math.ceil((size * 3) / 4) }, () => random.int(256)));
  return {
    'one letter': 'A'.repeat(size),
    'two alternating letters': 'ab'.repeat(size / 2),
    digits: '7'.repeat(size),
    'one CJK character': '中'.repeat(Math.floor(size / 3)),
    'CJK without punctuation': randomCjk(random, Math.floor(size / 3)),
    'a base64 blob': bytes.toString('base64').slice(0, size),
    'letters without a space': noSpace,
    spaces: ' '.repeat(size),
    punctuation: '=-'.repeat(size / 2),
  };
}

describe('token counting of ordinary text', () => {
  const piecesOf = (text: string) => {
    const seen: string[] = [];
    countLinear(text, (piece) => (seen.push(piece), piece.length));
    return seen;
  };

  it('hands short ASCII text without a long run to the encoder whole', () => {
    const text = `beta=4; the record reads as expected. ${'x'.repeat(31)} ${' '.repeat(30)}!${'=-'.repeat(14)} 12345678901234567890123456789012345`;
    expect(piecesOf(text)).toEqual([text]);
  });

  it('cuts a run of 32 letters, spaces or punctuation in ASCII text as it cuts one in any text', () => {
    for (const run of ['y'.repeat(32), ' '.repeat(32), '-'.repeat(32)]) {
      const text = `before ${run}after`;
      const pieces = piecesOf(text);
      expect(pieces.length, JSON.stringify(run)).toBeGreaterThan(1);
      expect(pieces.join(''), JSON.stringify(run)).toBe(text);
      // The same text with one character past ASCII (the regex path) is cut at the same places.
      const wide = piecesOf(`${text}é`);
      expect(wide.slice(0, -1), JSON.stringify(run)).toEqual(pieces.slice(0, -1));
    }
  });
});

describe('token counting on pathological input', () => {
  it('hands the encoder no long run of one character class and at most EXACT_COUNT_CHARS characters in all, for 1 MiB of anything', () => {
    for (const [name, text] of Object.entries(pathologicalInputs(1024 * 1024))) {
      const seen: string[] = [];
      countLinear(text, (piece) => {
        seen.push(piece);
        return 1;
      });
      const handed = seen.reduce((sum, piece) => sum + piece.length, 0);
      expect(handed, name).toBeLessThanOrEqual(EXACT_COUNT_CHARS + 1);
      for (const piece of seen) expect(/[\p{L}\p{M}]{33,}|[^\s\p{L}\p{M}\p{N}]{33,}|\s{33,}/u.test(piece), `${name}: a run reached the encoder`).toBe(false);
    }
  });

  it('counts 1 MiB of each in well under a second (minutes before, as one piece was merged whole)', () => {
    const tokens = createTokenCounter();
    tokens.count('warm up');
    for (const [name, text] of Object.entries(pathologicalInputs(1024 * 1024))) {
      const started = performance.now();
      const count = tokens.count(text);
      // The bench and the note give the real figures (tens of ms); this only catches a return of the quadratic path.
      expect(performance.now() - started, name).toBeLessThan(1000);
      expect(count, name).toBeGreaterThan(0);
      expect(count, name).toBeLessThanOrEqual(Buffer.byteLength(text, 'utf8'));
    }
  });

  it('counts the part always counted exactly at a like cost in every script: CJK at most 5 times random letters', () => {
    // The time budget does not apply to a text's first ALWAYS_EXACT_CHARS, so the encoder's cost per character
    // on the costliest script decides what one count can take. js-tiktoken 1.0.21 took 10-14 times as long on
    // CJK as on letters (150 ms of CPU for 4 Ki ideographs), gpt-tokenizer 4.0.0 twice (19 ms): docs/architecture.md.
    const tokens = createTokenCounter();
    tokens.warmUp!();
    const random = createRandom(11);
    const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
    const latin = leastCpuMs(tokens.count, () => Array.from({ length: ALWAYS_EXACT_CHARS }, () => letters[random.int(letters.length)]).join(''));
    const cjk = leastCpuMs(tokens.count, () => randomCjk(random, ALWAYS_EXACT_CHARS));
    const prose = leastCpuMs(tokens.count, () => Array.from({ length: 300 }, () => `${randomCjk(random, 8 + random.int(13))}${random.chance(0.5) ? '，' : '。'}`).join('').slice(0, ALWAYS_EXACT_CHARS));
    expect(cjk, `CJK ${cjk} ms, letters ${latin} ms`).toBeLessThanOrEqual(5 * latin);
    expect(prose, `Chinese-like prose ${prose} ms, letters ${latin} ms`).toBeLessThanOrEqual(5 * latin);
  });

  it('never counts fewer tokens than the exact count, where the exact count can be taken (js-tiktoken as reference)', () => {
    for (const encoding of ENCODINGS) {
      const reference = getEncoding(encoding);
      const tokens = createTokenCounter(encoding);
      // The reference itself is quadratic on these inputs (the bug this counter avoids): 1,000 chars keeps it to
      // seconds of CPU (a minute or two of wall time on a loaded shared machine, hence the timeout).
      for (const size of [40, 333, 1_000]) {
        const random = createRandom(size);
        for (const [name, text] of Object.entries(pathologicalInputs(size))) {
          const mixed = `see: ${text} and ${text.slice(0, size / 2)}!`;
          const spliced = Array.from({ length: 6 }, () => `${randomText(random, 3)}${text.slice(0, random.int(size))}`).join('');
          for (const sample of [text, mixed, spliced]) {
            expect(tokens.count(sample), `${encoding} ${name} ${size}`).toBeGreaterThanOrEqual(reference.encode(sample, [], []).length);
          }
        }
      }
    }
  }, 240_000);

  it('counts ordinary text exactly, as js-tiktoken does: prose, code and text of every script', () => {
    const files = ['README.md', 'docs/architecture.md', 'services/runtime/context/conversation.ts', 'package-lock.json'].map((path) => readFileSync(path, 'utf8').slice(0, EXACT_COUNT_CHARS));
    for (const encoding of ENCODINGS) {
      const reference = getEncoding(encoding);
      const tokens = createTokenCounter({ encoding, exactMsPerWindow: Infinity });
      for (const file of files) {
        // Markdown rules and indentation are runs, and long files are counted in slices: a few tokens over, never under.
        const exact = reference.encode(file, [], []).length;
        expect(tokens.count(file)).toBeGreaterThanOrEqual(exact);
        expect(tokens.count(file)).toBeLessThanOrEqual(exact * 1.01);
      }
      const random = createRandom(3);
      for (let sample = 0; sample < 500; sample++) {
        const text = randomText(random);
        if (/[\p{L}\p{M}]{32,}|[^\s\p{L}\p{M}\p{N}]{32,}|\s{32,}/u.test(text)) continue;
        // JavaScript's \s holds U+FEFF and not U+0085, tiktoken's regex the other way round, so around those two a
        // count may differ by a token (either way); a lone surrogate may take a token more here than in js-tiktoken.
        if (/[\ufeff\u0085]/.test(text)) continue;
        const exact = reference.encode(text, [], []).length;
        if (!/[\ud800-\udfff]/.test(text.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ""))) expect(tokens.count(text), JSON.stringify(text)).toBe(exact);
        else expect(tokens.count(text), JSON.stringify(text)).toBeGreaterThanOrEqual(exact);
      }
    }
  });

  it('counts text past EXACT_COUNT_CHARS by its UTF-8 length from there on: an upper bound', () => {
    const tokens = createTokenCounter({ exactMsPerWindow: Infinity });
    const reference = getEncoding('o200k_base');
    const prose = 'The quick brown fox jumps over the lazy dog. '.repeat(4_000);
    const rest = prose.length - EXACT_COUNT_CHARS;
    expect(rest).toBeGreaterThan(0);
    const count = tokens.count(prose);
    expect(count).toBeGreaterThanOrEqual(reference.encode(prose, [], []).length);
    // The head exactly (give or take a token per 4 Ki slice), the rest by bytes.
    expect(count).toBeGreaterThanOrEqual(rest + reference.encode(prose.slice(0, EXACT_COUNT_CHARS - 64), [], []).length);
    expect(count).toBeLessThanOrEqual(rest + reference.encode(prose.slice(0, EXACT_COUNT_CHARS), [], []).length + 20);
  });

  it('stops counting exactly once its time budget of the window is spent, past the first 4 Ki characters, and counts again in the next window', () => {
    let clock = 0;
    const tokens = createTokenCounter({ exactMsPerWindow: 25, windowMs: 100, now: () => clock });
    tokens.warmUp!();
    const reference = getEncoding('o200k_base');
    const prose = 'Every count of a long text takes time; a budget stops it between slices. '.repeat(800);
    // Each slice handed to the encoder "takes" 10 ms of the fake clock.
    const slow = createTokenCounter({ exactMsPerWindow: 25, windowMs: 100, now: () => (clock += 5) });
    const bounded = slow.count(prose);
    const exact = reference.encode(prose, [], []).length;
    expect(bounded).toBeGreaterThan(exact * 2);
    expect(bounded).toBeLessThanOrEqual(Buffer.byteLength(prose));
    // The first 4 Ki characters are always exact: a short text costs no more than its count, whatever the budget.
    expect(slow.count(prose.slice(0, ALWAYS_EXACT_CHARS))).toBe(reference.encode(prose.slice(0, ALWAYS_EXACT_CHARS), [], []).length);
    // With time to spare, the same text is counted exactly but for the slices' cuts.
    clock = 1_000;
    expect(tokens.count(prose)).toBeLessThan(exact + 20);
  });
});

describe('the ranks the compiled runtime loads as JSON', () => {
  it('are the package module\'s ranks: the same list, and the same counts', async () => {
    const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { pathToFileURL } = await import('node:url');
    const { createRequire } = await import('node:module');
    const { loadRanks, gptTokenizerCount } = await import('../../src/tokens.ts');
    const dir = mkdtempSync(join(tmpdir(), 'agentbus-ranks-'));
    try {
      // As bin/build.js writes them.
      const fromPackage = (createRequire(import.meta.url)('gpt-tokenizer/cjs/bpeRanks/o200k_base') as { default: string[] }).default;
      writeFileSync(join(dir, 'o200k_base.json'), JSON.stringify(fromPackage));
      const ranksDir = pathToFileURL(`${dir}/`);
      expect(loadRanks('o200k_base', ranksDir)).toEqual(fromPackage);
      const text = 'The quick brown fox, résumé 東京 😀 <|endoftext|> x'.repeat(20);
      expect(gptTokenizerCount('o200k_base', ranksDir)(text)).toBe(gptTokenizerCount('o200k_base', undefined)(text));
      // An encoding the build did not write comes from the package.
      expect(loadRanks('cl100k_base', ranksDir).length).toBeGreaterThan(100_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
