import type { LogEvent } from '../../src/protocol/index.ts';
import type { Transcript } from '../../services/runtime/sessions/transcript.ts';
import { createLogBuilder } from './log-events.ts';

/** A seeded pseudo-random source (mulberry32), so a failing history can be replayed from its seed. */
export interface Random {
  /** In [0, 1). */
  next(): number;
  /** An integer in [0, below). */
  int(below: number): number;
  chance(probability: number): boolean;
  pick<T>(list: readonly T[]): T;
}

export function createRandom(seed: number): Random {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  const int = (below: number) => Math.floor(next() * below);
  return { next, int, chance: (probability) => next() < probability, pick: (list) => list[int(list.length)]! };
}

/** A session log growing event by event. */
export interface SimulatedSession {
  readonly events: readonly LogEvent[];
  /** The turn running now, if any. */
  running(): string | undefined;
  /** Turns with a prompt logged, oldest first. */
  turns(): readonly string[];
  /**
   * Logs what could come next and returns it. `transcript` (holding every event so far) is read to place a
   * compaction's cut the way Preparing does.
   */
  advance(transcript: Transcript): LogEvent[];
}

const defaultText = (random: Random) => 'x'.repeat(random.int(30));

/** Pieces of text from many scripts and of many kinds, including ones tokenizers treat specially. */
const PIECES = [
  'the', ' quick', ' brown', 'fox', 'Hello', ',', '.', '!?', ' ', '  ', '\n', '\t', '\r\n', '    ', '1234567', '3.14', '-', '_', '()', '{"key":"value"}', '=>',
  'naïve', 'café', 'Ünïcödé', 'e\u0301', 'ß', 'Ω', 'Привет', 'мир', 'γειά', 'שלום', 'مرحبا', 'नमस्ते', 'ไทย', '日本語', '中文字符', '한국어', 'カタカナ',
  '😀', '👩‍👩‍👧', '🇫🇷', '\u{1F600}\u{1F601}', '\u200b', '\u00a0', '\ufeff', '\ud800', '\udfff', 'a\ud83d', '\u0000', '\u{10FFFF}',
  '<|endoftext|>', '<|im_start|>', '<|fim_prefix|>', '<|endofprompt|>', '<|', '|>',
];

/** Random text of up to `maxPieces` pieces of many scripts, some repeated at length: see {@link PIECES}. */
export function randomText(random: Random, maxPieces = 12): string {
  let out = '';
  for (let count = random.int(maxPieces + 1); count > 0; count--) {
    const piece = random.pick(PIECES);
    out += random.chance(0.05) ? piece.repeat(1 + random.int(40)) : piece;
  }
  return out;
}

/**
 * A session as the runtime logs it: turns run one at a time, prompts sent meanwhile queue (with
 * `queuePrompts`); a step is steer messages, an assistant message and one result per call (in any order); a
 * cancelled or failed turn closes its open calls, then ends; a compaction cuts at a message of the running
 * turn's view, never the newest. Call ids are sometimes reused across steps, as some providers do. Texts are
 * runs of 'x' unless `text` makes them.
 */
export function simulateRuntimeSession(random: Random, options: { queuePrompts: boolean; text?: (random: Random) => string }): SimulatedSession {
  const text = options.text ?? defaultText;
  const log = createLogBuilder();
  const events: LogEvent[] = [];
  const turns: string[] = [];
  const queue: string[] = [];
  let running: string | undefined;
  let open: string[] = [];
  let calls = 0;
  const end = (turnId: string, out: LogEvent[]) => {
    for (const id of open) out.push(log.result(turnId, id, `cancelled ${id}`));
    open = [];
    out.push(log.ended(turnId));
    running = queue.shift();
  };
  const prompt = (out: LogEvent[]) => {
    const turnId = `t${turns.length}`;
    turns.push(turnId);
    out.push(log.prompt(turnId, text(random)));
    if (running === undefined) running = turnId;
    else queue.push(turnId);
  };
  return {
    events,
    running: () => running,
    turns: () => turns,
    advance(transcript) {
      const out: LogEvent[] = [];
      if (running === undefined || (options.queuePrompts && random.chance(0.1))) {
        prompt(out);
      } else if (open.length > 0) {
        if (random.chance(0.1)) {
          end(running, out);
        } else {
          const [id] = open.splice(random.int(open.length), 1);
          out.push(log.result(running, id!, text(random)));
        }
      } else {
        const view = transcript.conversation(running);
        const roll = random.next();
        if (roll < 0.08 && view.length > 2) {
          out.push(log.summary(running, 'summary', view.seq(random.int(view.length - 1))));
        } else if (roll < 0.16) {
          for (let count = 1 + random.int(2); count > 0; count--) out.push(log.steer(running, text(random)));
        } else if (roll < 0.22) {
          end(running, out);
        } else {
          const count = random.chance(0.3) ? 0 : 1 + random.int(3);
          const ids = Array.from({ length: count }, (_, index) => (random.chance(0.3) ? `c${index}` : `c${calls++}x`));
          out.push(log.answer(running, text(random), ids.map((id) => ({ id }))));
          open = ids;
          if (count === 0) end(running, out);
        }
      }
      events.push(...out);
      return out;
    },
  };
}

/**
 * A log written some other way: any event of any of a few turns, results for calls that were never made or
 * made in another step or turn, summaries cutting anywhere. The conversation index must still give the same
 * context for it.
 */
export function simulateArbitrarySession(random: Random): SimulatedSession {
  const text = defaultText;
  const log = createLogBuilder();
  const events: LogEvent[] = [];
  const turnIds = ['t0', 't1', 't2', 't3'];
  const seen: string[] = [];
  const call = () => `c${random.int(5)}`;
  return {
    events,
    running: () => seen.at(-1),
    turns: () => seen,
    advance() {
      const turnId = random.pick(turnIds);
      const roll = random.next();
      let event: LogEvent;
      if (roll < 0.15) {
        event = log.prompt(turnId, text(random));
        if (!seen.includes(turnId)) seen.push(turnId);
      } else if (roll < 0.22) event = log.steer(turnId, text(random));
      else if (roll < 0.5) event = log.answer(turnId, text(random), Array.from({ length: random.int(3) }, () => ({ id: call() })));
      else if (roll < 0.85) event = log.result(turnId, call(), text(random));
      else if (roll < 0.9) event = log.toolUse(turnId, call());
      else if (roll < 0.95) event = log.ended(turnId);
      else event = log.summary(turnId, 'summary', random.int(events.length + 1));
      events.push(event);
      return [event];
    },
  };
}
