/**
 * gpt-tokenizer (production) against js-tiktoken (the design card's tokenizer), both behind the same guards and
 * time budget of `createTokenCounter`, in one process, alternating: what decided issue #18's tokenizer item
 * (docs/architecture.md, "Context building"). Not part of `npm run bench`:
 *
 *   node --import tsx bench/lib/tokenizer-ab-main.ts [--no-prep]
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Tiktoken } from 'js-tiktoken/lite';
import type { TiktokenBPE } from 'js-tiktoken/lite';
import { createTokenCounter, gptTokenizerCount } from '../../src/tokens.ts';
import type { TokenCounter, TokenEncoding } from '../../src/tokens.ts';
import { measureContextPrep } from './context-prep.ts';

const require = createRequire(import.meta.url);

/** js-tiktoken's exact count, special tokens counted as text (none allowed, none refused). */
function jsTiktokenCount(encoding: TokenEncoding): (text: string) => number {
  const encoder = new Tiktoken(require(`js-tiktoken/ranks/${encoding}`) as TiktokenBPE);
  return (text) => encoder.encode(text, [], []).length;
}

const ENCODERS = { 'gpt-tokenizer': gptTokenizerCount, 'js-tiktoken': jsTiktokenCount } as const;
type Name = keyof typeof ENCODERS;
const NAMES = Object.keys(ENCODERS) as Name[];
const counter = (name: Name, exactMsPerWindow?: number): TokenCounter => createTokenCounter({ encoder: ENCODERS[name], ...(exactMsPerWindow === undefined ? {} : { exactMsPerWindow }) });

/** A tiny deterministic generator (xorshift), so both encoders see the same texts. */
function random(seed: number): (below: number) => number {
  let state = seed * 2654435761 + 1;
  return (below) => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) % below;
  };
}
const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const ideographs = (int: (below: number) => number, length: number) => Array.from({ length }, () => String.fromCodePoint(0x4e00 + int(0x5000))).join('');
/** Texts no cache helps with: a new one per sample. */
const FRESH: Record<string, (seed: number) => string> = {
  '4 Ki random letters': (seed) => { const int = random(seed); return Array.from({ length: 4096 }, () => LETTERS[int(52)]).join(''); },
  '4 Ki random CJK ideographs': (seed) => ideographs(random(seed), 4096),
  '4 Ki Chinese-like prose': (seed) => { const int = random(seed); return Array.from({ length: 300 }, () => `${ideographs(int, 8 + int(13))}${int(2) ? '，' : '。'}`).join('').slice(0, 4096); },
  '1 MiB random CJK ideographs': (seed) => ideographs(random(seed), 1 << 20),
};
/** The pathological inputs of test/unit/tokens.test.ts, 1 MiB each (the same text every sample). */
const POISON: Record<string, string> = {
  'one letter': 'A'.repeat(1 << 20),
  'two alternating letters': 'ab'.repeat(1 << 19),
  digits: '7'.repeat(1 << 20),
  'one CJK character': '中'.repeat((1 << 20) / 3),
  'letters without a space': Array.from({ length: 1 << 20 }, ((int) => () => LETTERS[int(52)])(random(7))).join(''),
  spaces: ' '.repeat(1 << 20),
  punctuation: '=-'.repeat(1 << 19),
};

const cpuMs = (work: () => void): number => {
  const started = process.cpuUsage();
  work();
  const spent = process.cpuUsage(started);
  return (spent.user + spent.system) / 1000;
};
const wallMs = (work: () => void): number => {
  const started = performance.now();
  work();
  return performance.now() - started;
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const load = () => os.loadavg().map((value) => value.toFixed(2)).join(' ');

if (process.argv[2] === '--init') {
  // One child per measurement: the ranks' load and the first count, in a fresh process.
  const name = process.argv[3] as Name;
  const tokens = counter(name);
  const loadMs = wallMs(() => tokens.count('hello world'));
  const warmMs = wallMs(() => tokens.warmUp!());
  console.log(JSON.stringify({ loadMs, warmMs, heapMiB: process.memoryUsage().heapUsed / 2 ** 20 }));
} else {
  console.log(`load ${load()}, ${os.cpus().length} cores, Node ${process.version}`);
  const self = fileURLToPath(import.meta.url);
  for (let round = 0; round < 2; round++) {
    for (const name of NAMES) {
      const init = JSON.parse(execFileSync(process.execPath, ['--import', 'tsx', self, '--init', name], { encoding: 'utf8' })) as { loadMs: number; warmMs: number; heapMiB: number };
      console.log(`${name}: loading ranks + first count ${init.loadMs.toFixed(0)} ms, warmUp ${init.warmMs.toFixed(0)} ms, heap ${init.heapMiB.toFixed(0)} MiB`);
    }
  }
  const budgeted = Object.fromEntries(NAMES.map((name) => [name, counter(name)])) as Record<Name, TokenCounter>;
  for (const name of NAMES) budgeted[name].warmUp!();
  for (const [input, text] of Object.entries(FRESH)) {
    const samples = input.startsWith('1 MiB') ? 3 : 5;
    const figures = NAMES.map((name) => `${name} ${Math.min(...Array.from({ length: samples }, (_, seed) => text(seed + 1)).map((sample) => cpuMs(() => budgeted[name].count(sample)))).toFixed(1)} ms`);
    console.log(`${input}, one count, least CPU: ${figures.join(', ')}`);
  }
  for (const [input, text] of Object.entries(POISON)) {
    const figures = NAMES.map((name) => `${name} ${median(Array.from({ length: 5 }, () => wallMs(() => budgeted[name].count(text)))).toFixed(1)} ms`);
    console.log(`1 MiB ${input}, one count, median wall: ${figures.join(', ')}`);
  }
  if (!process.argv.includes('--no-prep')) {
    for (let round = 0; round < 2; round++) {
      for (const name of NAMES) {
        const prep = measureContextPrep(counter(name), [10, 1_000, 10_000], 100);
        console.log(`${name} context prep: ${prep.map((r) => `${r.messages} msgs cold ${r.coldMs.toFixed(1)} ms, after a step p50 ${(r.stepMs.p50 * 1000).toFixed(1)} µs, repeated p50 ${(r.warmMs.p50 * 1000).toFixed(1)} µs`).join(' | ')}`);
      }
    }
  }
  console.log(`load ${load()}`);
}
