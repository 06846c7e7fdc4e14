/** One element of a parsed glob. */
export type GlobNode =
  /** One UTF-16 code unit, itself. */
  | { readonly kind: 'text'; readonly code: number }
  /** `?`: one code unit but `/`. */
  | { readonly kind: 'notSlash' }
  /** `[…]`: one code unit the class holds. */
  | { readonly kind: 'class'; test(code: number): boolean }
  /** `*`: any run of code units but `/`. */
  | { readonly kind: 'star' }
  /** `**`: any run of code units but line breaks (what `.*` matched when globs were regular expressions). */
  | { readonly kind: 'globstar' }
  /** `**\/`: nothing, or any run ending in `/`. */
  | { readonly kind: 'globstarSlash' }
  /** `{a,b}`: any one of the sequences. */
  | { readonly kind: 'alternatives'; readonly branches: readonly (readonly GlobNode[])[] };

/** A compiled glob automaton. */
export interface GlobAutomaton {
  /** Whether the whole of `path` is accepted; time O(path length × states), no backtracking, no recursion. */
  matches(path: string): boolean;
}

const SLASH = 0x2f;

/** `.` of a regular expression without the `s` flag: anything but `\n`, `\r`, U+2028 and U+2029. */
function notLineBreak(code: number): boolean {
  return code !== 0x0a && code !== 0x0d && code !== 0x2028 && code !== 0x2029;
}

function notSlash(code: number): boolean {
  return code !== SLASH;
}

/** A state that reads one code unit and goes on to `next`, or splits without reading, or accepts. */
type State =
  | { readonly kind: 'read'; readonly accepts: (code: number) => boolean; next: number }
  | { readonly kind: 'split'; outs: number[] }
  | { readonly kind: 'accept' };

/** Builds the states of a Thompson automaton from the glob's tree, from the end backwards. */
function buildStates(nodes: readonly GlobNode[]): { states: State[]; start: number } {
  const states: State[] = [{ kind: 'accept' }];
  const add = (state: State): number => states.push(state) - 1;
  const read = (accepts: (code: number) => boolean, next: number) => add({ kind: 'read', accepts, next });
  /** A loop over `accepts`, left for `next`. */
  const loop = (accepts: (code: number) => boolean, next: number): number => {
    const split: State = { kind: 'split', outs: [] };
    const index = add(split);
    split.outs = [read(accepts, index), next];
    return index;
  };
  // Recursion here goes as deep as braces nest (the tool's schema bounds a glob to 200 characters).
  const sequence = (items: readonly GlobNode[], next: number): number => {
    let target = next;
    for (let index = items.length - 1; index >= 0; index -= 1) target = node(items[index]!, target);
    return target;
  };
  const node = (item: GlobNode, next: number): number => {
    switch (item.kind) {
      case 'text':
        return read((code) => code === item.code, next);
      case 'notSlash':
        return read(notSlash, next);
      case 'class':
        return read((code) => item.test(code), next);
      case 'star':
        return loop(notSlash, next);
      case 'globstar':
        return loop(notLineBreak, next);
      case 'globstarSlash':
        return add({ kind: 'split', outs: [next, loop(notLineBreak, read((code) => code === SLASH, next))] });
      case 'alternatives':
        return add({ kind: 'split', outs: item.branches.map((branch) => sequence(branch, next)) });
    }
  };
  return { states, start: sequence(nodes, 0) };
}

/** Most states the cache of {@link compileGlobAutomaton} holds before it is emptied. */
const CACHED_STATES = 2_048;
/** Emptyings of the cache after which an automaton stops caching (a glob whose sets of states do not repeat). */
const MAX_FLUSHES = 16;
/** Transitions cached per state for code units outside ASCII. */
const CACHED_OTHER = 256;

/** A set of automaton states, cached with the sets it goes to on each code unit read so far (a lazy DFA). */
interface StateSet {
  /** Sorted indexes of the reading and accepting states in the set. */
  readonly states: Int32Array;
  readonly accepting: boolean;
  readonly ascii: (StateSet | undefined)[];
  readonly other: Map<number, StateSet>;
}

/**
 * Compiles a parsed glob into an automaton that runs over a path once, holding the set of states it may be in
 * (Thompson's construction): the cost of a match is bounded by the path's length times the glob's states,
 * whatever the glob. The sets met are cached with their transitions (a DFA built lazily, as RE2 does), so that a
 * path usually costs one lookup per character; the cache is bounded and emptied when full. Not safe for use from
 * several threads at once; a JavaScript caller never does that.
 *
 * @example
 * compileGlobAutomaton([{ kind: 'star' }, { kind: 'text', code: 0x2e }]).matches('a.'); // true
 */
export function compileGlobAutomaton(nodes: readonly GlobNode[]): GlobAutomaton {
  const { states, start } = buildStates(nodes);
  const size = states.length;
  // The states reached, as lists of indexes, with a stamp per state so that each enters a list once per step.
  let current = new Int32Array(size);
  let following = new Int32Array(size);
  const stamps = new Float64Array(size);
  // A state is pushed once per edge into it at most, before it is stamped.
  const pending = new Int32Array(states.reduce((edges, state) => edges + (state.kind === 'split' ? state.outs.length : 0), 1));
  let stamp = 0;

  /** Adds `from` and every state it reaches without reading to `list` (from `length`); returns the new length. */
  const enter = (from: number, list: Int32Array, length: number): number => {
    let top = 0;
    let count = length;
    pending[top++] = from;
    while (top > 0) {
      const index = pending[--top]!;
      if (stamps[index] === stamp) continue;
      stamps[index] = stamp;
      const state = states[index]!;
      if (state.kind === 'split') {
        for (const out of state.outs) if (stamps[out] !== stamp) pending[top++] = out;
      } else {
        list[count++] = index;
      }
    }
    return count;
  };

  /** The states `from` (the first `length` of it) goes to on `code`, written to `into`; returns their count. */
  const step = (from: Int32Array, length: number, code: number, into: Int32Array): number => {
    stamp += 1;
    let count = 0;
    for (let index = 0; index < length; index += 1) {
      const state = states[from[index]!]!;
      if (state.kind === 'read' && state.accepts(code)) count = enter(state.next, into, count);
    }
    return count;
  };

  const accepts = (list: Int32Array, length: number): boolean => {
    for (let index = 0; index < length; index += 1) if (states[list[index]!]!.kind === 'accept') return true;
    return false;
  };

  /** Without the cache: one step of the set per character. */
  const simulate = (path: string): boolean => {
    stamp += 1;
    let length = enter(start, current, 0);
    for (let position = 0; position < path.length && length > 0; position += 1) {
      length = step(current, length, path.charCodeAt(position), following);
      [current, following] = [following, current];
    }
    return accepts(current, length);
  };

  const cache = new Map<string, StateSet>();
  let initial: StateSet | undefined;
  let flushes = 0;

  const setOf = (list: Int32Array): StateSet => {
    list.sort();
    const key = list.join(',');
    let set = cache.get(key);
    if (set) return set;
    if (cache.size >= CACHED_STATES) {
      // Sets still linked from the one a running match holds are dropped with it when the match ends.
      cache.clear();
      initial = undefined;
      flushes += 1;
    }
    set = { states: list, accepting: accepts(list, list.length), ascii: new Array<StateSet | undefined>(128), other: new Map() };
    cache.set(key, set);
    return set;
  };

  const transition = (from: StateSet, code: number): StateSet => {
    const to = setOf(following.slice(0, step(from.states, from.states.length, code, following)));
    if (code < 128) from.ascii[code] = to;
    else if (from.other.size < CACHED_OTHER) from.other.set(code, to);
    return to;
  };

  return {
    matches(path) {
      if (flushes > MAX_FLUSHES) return simulate(path);
      if (!initial) {
        stamp += 1;
        initial = setOf(current.slice(0, enter(start, current, 0)));
      }
      let set = initial;
      for (let position = 0; position < path.length; position += 1) {
        const code = path.charCodeAt(position);
        set = (code < 128 ? set.ascii[code] : set.other.get(code)) ?? transition(set, code);
        if (set.states.length === 0) return false;
      }
      return set.accepting;
    },
  };
}
