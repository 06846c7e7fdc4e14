import type { AnyStateMachine } from 'xstate';

/** A state of a drawn machine: one of its root's children that an actor can rest in. */
export interface GraphState {
  readonly id: string;
  /** `final` states end the machine. */
  readonly type: 'normal' | 'final';
  /** The actors the state invokes (`prepare`, `stream`, …). */
  readonly invokes: readonly string[];
}

/** A transition between two drawn states. */
export interface GraphTransition {
  readonly source: string;
  readonly target: string;
  /** The event, shortened: `prepare done`, `stream error`, `after approvalTimeout`, `CANCEL`, or `always`. */
  readonly event: string;
  /** Guards that must hold, in order (a transient state's guard is appended to the event's). */
  readonly guards: readonly string[];
  /** Declared on the machine's root: taken from every non-final state. */
  readonly global: boolean;
}

/** A machine as a graph of states and transitions, read from its own definition. */
export interface MachineGraph {
  readonly id: string;
  readonly initial: string;
  readonly states: readonly GraphState[];
  readonly transitions: readonly GraphTransition[];
}

/** The parts of xstate's StateNode this module reads. */
interface NodeLike {
  readonly key: string;
  readonly type: string;
  readonly states: Record<string, NodeLike>;
  readonly transitions: Map<string, readonly TransitionLike[]>;
  readonly always?: readonly TransitionLike[];
  readonly invoke: ReadonlyArray<{ readonly id: string; readonly src: unknown }>;
  readonly initial?: { readonly target: readonly NodeLike[] };
}
interface TransitionLike {
  readonly target?: readonly NodeLike[];
  readonly guard?: unknown;
}

/** What an inline (anonymous) guard is called in labels. */
const INLINE_GUARD = 'inline guard';

function guardName(guard: unknown): string | undefined {
  if (guard === undefined) return undefined;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object' && guard !== null && typeof (guard as { type?: unknown }).type === 'string') return (guard as { type: string }).type;
  return INLINE_GUARD;
}

/** `xstate.done.actor.prepare` → `prepare done`; the invoke's generated id is mapped back to its source. */
function eventLabel(eventType: string, node: NodeLike): string {
  const actor = /^xstate\.(done|error)\.actor\.(.+)$/.exec(eventType);
  if (actor) {
    const invoke = node.invoke.find((entry) => entry.id === actor[2]);
    const name = invoke && typeof invoke.src === 'string' ? invoke.src : actor[2]!;
    return `${name} ${actor[1]}`;
  }
  const after = /^xstate\.after\.([^.]+)\./.exec(eventType);
  if (after) return `after ${after[1]}`;
  return eventType;
}

/**
 * A transient state has `always` transitions whose last one has no guard: the machine never rests in it
 * (a snapshot never shows it), so it is not drawn; transitions into it go straight on to its targets.
 */
function isTransient(node: NodeLike): boolean {
  const always = node.always ?? [];
  return always.length > 0 && always.at(-1)!.guard === undefined && node.invoke.length === 0 && node.transitions.size === 0;
}

/**
 * Reads a machine's graph from its definition (the root's child states, their `on`, `always`, invoked
 * actors' done and error events, delayed transitions, and the root's own transitions). Transient states
 * are folded into the transitions that pass through them, with their guards.
 *
 * @example
 * const graph = machineGraph(turnMachine);
 * graph.states.map((state) => state.id); // ['Preparing', 'Compacting', 'Streaming', …]
 */
export function machineGraph(machine: AnyStateMachine): MachineGraph {
  const root = machine.root as unknown as NodeLike;
  const children = Object.values(root.states);
  const transient = new Map(children.filter(isTransient).map((node) => [node.key, node]));
  const states: GraphState[] = children
    .filter((node) => !transient.has(node.key))
    .map((node) => ({
      id: node.key,
      type: node.type === 'final' ? 'final' : 'normal',
      invokes: node.invoke.map((entry) => (typeof entry.src === 'string' ? entry.src : entry.id)),
    }));
  const transitions: GraphTransition[] = [];

  const add = (source: string, target: NodeLike, event: string, guards: string[], global: boolean, depth = 0) => {
    const through = transient.get(target.key);
    if (through && depth < 8) {
      for (const next of through.always ?? []) {
        const guard = guardName(next.guard);
        for (const nextTarget of next.target ?? []) add(source, nextTarget, event, guard ? [...guards, guard] : guards, global, depth + 1);
      }
      return;
    }
    transitions.push({ source, target: target.key, event, guards, global });
  };

  for (const node of children) {
    if (transient.has(node.key)) continue;
    for (const [eventType, list] of node.transitions) {
      for (const transition of list) {
        const guard = guardName(transition.guard);
        for (const target of transition.target ?? []) add(node.key, target, eventLabel(eventType, node), guard ? [guard] : [], false);
      }
    }
    for (const transition of node.always ?? []) {
      const guard = guardName(transition.guard);
      for (const target of transition.target ?? []) add(node.key, target, 'always', guard ? [guard] : [], false);
    }
  }
  for (const [eventType, list] of root.transitions) {
    for (const transition of list) {
      const guard = guardName(transition.guard);
      for (const target of transition.target ?? []) {
        for (const state of states) {
          if (state.type !== 'final') add(state.id, target, eventLabel(eventType, root), guard ? [guard] : [], true);
        }
      }
    }
  }
  const initial = root.initial?.target[0]?.key ?? states[0]?.id ?? '';
  return { id: (machine as { id: string }).id, initial, states, transitions };
}

/**
 * A transition's short label, for drawings: its guards when it has some (`[hasPending]`), else `done`,
 * `error` or the event. The full label is {@link transitionLabel}'s.
 */
export function shortTransitionLabel(transition: GraphTransition): string {
  const named = transition.guards.filter((guard) => guard !== INLINE_GUARD);
  if (named.length > 0) return `[${named.join(', ')}]`;
  const actor = /^\S+ (done|error)$/.exec(transition.event);
  return actor ? actor[1]! : transition.event;
}

/** A transition's label: `event [guard, guard]`. */
export function transitionLabel(transition: GraphTransition): string {
  const event = transition.event === 'always' && transition.guards.length > 0 ? '' : transition.event;
  const guards = transition.guards.length > 0 ? `[${transition.guards.join(', ')}]` : '';
  return [event, guards].filter((part) => part !== '').join(' ');
}
