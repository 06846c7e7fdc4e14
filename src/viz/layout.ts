import type { ELK, ElkExtendedEdge, ElkNode } from 'elkjs/lib/elk-api.js';
import { shortTransitionLabel, transitionLabel } from './machine-graph.ts';
import type { GraphState, GraphTransition, MachineGraph } from './machine-graph.ts';

/** A point in the laid-out drawing. */
export interface Point {
  readonly x: number;
  readonly y: number;
}

/** A state with its box. */
export interface PlacedState extends GraphState {
  readonly x: number;
  readonly y: number;
  readonly width: number;
  readonly height: number;
}

/** A transition with its route and label box; `merged` counts the transitions drawn as this one edge. */
export interface PlacedTransition {
  readonly id: string;
  readonly source: string;
  readonly target: string;
  /** The short label drawn on the edge (guards, or `done` / `error`). */
  readonly label: string;
  /** Every transition the edge stands for, with events and guards, one a line (the edge's tooltip). */
  readonly title: string;
  readonly points: readonly Point[];
  readonly labelBox?: { readonly x: number; readonly y: number; readonly width: number; readonly height: number };
}

/** A machine graph laid out by ELK: what the SVG renderer draws. */
export interface LaidOutMachine {
  readonly id: string;
  readonly initial: string;
  readonly width: number;
  readonly height: number;
  /** The centre of the initial pseudo-state's dot; its edge is among `transitions` (source `__initial`). */
  readonly initialPoint: Point;
  readonly states: readonly PlacedState[];
  readonly transitions: readonly PlacedTransition[];
  /** Root transitions (taken from every running state), drawn as a note instead of one edge per state. */
  readonly globalTransitions: readonly GraphTransition[];
}

const CHAR_WIDTH = 7.2;
const LABEL_CHAR_WIDTH = 6;
const STATE_HEIGHT = 40;
const INITIAL_ID = '__initial';

/**
 * Lays a machine graph out with ELK's layered algorithm (top to bottom). Parallel transitions between the
 * same two states become one edge with their labels joined; root transitions are left to a note.
 *
 * @example
 * const laidOut = await layoutMachine(machineGraph(turnMachine));
 */
export async function layoutMachine(graph: MachineGraph, options: { signal?: AbortSignal } = {}): Promise<LaidOutMachine> {
  options.signal?.throwIfAborted();
  const edges = new Map<string, { source: string; target: string; labels: string[]; titles: string[] }>();
  for (const transition of graph.transitions) {
    if (transition.global) continue;
    const key = `${transition.source}->${transition.target}`;
    const entry = edges.get(key) ?? { source: transition.source, target: transition.target, labels: [], titles: [] };
    const label = shortTransitionLabel(transition);
    if (!entry.labels.includes(label)) entry.labels.push(label);
    entry.titles.push(transitionLabel(transition));
    edges.set(key, entry);
  }
  const titles = new Map<string, string>();
  const elkEdges: ElkExtendedEdge[] = [...edges.entries()].map(([key, edge], index) => {
    const text = edge.labels.join(' / ');
    titles.set(`e${index}:${key}`, edge.titles.join('\n'));
    return {
      id: `e${index}:${key}`,
      sources: [edge.source],
      targets: [edge.target],
      labels: [{ text, width: Math.ceil(text.length * LABEL_CHAR_WIDTH) + 8, height: 16 }],
    };
  });
  elkEdges.push({ id: `e:${INITIAL_ID}`, sources: [INITIAL_ID], targets: [graph.initial] });
  const root: ElkNode = {
    id: graph.id,
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'DOWN',
      'elk.edgeRouting': 'POLYLINE',
      'elk.layered.spacing.nodeNodeBetweenLayers': '40',
      'elk.spacing.nodeNode': '28',
      'elk.spacing.edgeLabel': '4',
      'elk.spacing.edgeNode': '18',
      'elk.edgeLabels.placement': 'CENTER',
      'elk.layered.nodePlacement.strategy': 'NETWORK_SIMPLEX',
      'elk.padding': '[top=16,left=16,bottom=16,right=16]',
    },
    children: [
      { id: INITIAL_ID, width: 14, height: 14 },
      ...graph.states.map((state) => ({ id: state.id, width: Math.max(96, Math.ceil(state.id.length * CHAR_WIDTH) + 36), height: STATE_HEIGHT })),
    ],
    edges: elkEdges,
  };
  // elk.bundled.js is CommonJS whose module.exports is the constructor; its typings describe an ES default. Loaded
  // here, not at the top: it takes about 0.3 s, and every CLI command would pay it (the CLI is one bundle).
  const { default: elkBundle } = await import('elkjs/lib/elk.bundled.js');
  const Elk = elkBundle as unknown as new () => ELK;
  const elk = new Elk();
  const result = await elk.layout(root);
  options.signal?.throwIfAborted();
  const placed = new Map((result.children ?? []).map((child) => [child.id, child]));
  const states: PlacedState[] = graph.states.map((state) => {
    const box = placed.get(state.id)!;
    return { ...state, x: box.x ?? 0, y: box.y ?? 0, width: box.width ?? 0, height: box.height ?? 0 };
  });
  const initialBox = placed.get(INITIAL_ID)!;
  const transitions: PlacedTransition[] = (result.edges ?? []).map((edge) => {
    const section = edge.sections?.[0];
    const points: Point[] = section ? [section.startPoint, ...(section.bendPoints ?? []), section.endPoint].map(({ x, y }) => ({ x, y })) : [];
    const label = edge.labels?.[0];
    return {
      id: edge.id,
      source: edge.sources[0]!,
      target: edge.targets[0]!,
      label: label?.text ?? '',
      title: titles.get(edge.id) ?? '',
      points,
      ...(label && label.text ? { labelBox: { x: label.x ?? 0, y: label.y ?? 0, width: label.width ?? 0, height: label.height ?? 0 } } : {}),
    };
  });
  return {
    id: graph.id,
    initial: graph.initial,
    width: Math.ceil(result.width ?? 0),
    height: Math.ceil(result.height ?? 0),
    initialPoint: { x: (initialBox.x ?? 0) + 7, y: (initialBox.y ?? 0) + 7 },
    states,
    transitions,
    globalTransitions: dedupeGlobal(graph.transitions.filter((transition) => transition.global)),
  };
}

/** One entry per root transition (the graph has one per state it leaves). */
function dedupeGlobal(transitions: readonly GraphTransition[]): GraphTransition[] {
  const seen = new Map<string, GraphTransition>();
  for (const transition of transitions) seen.set(`${transition.event}|${transition.target}|${transition.guards.join(',')}`, transition);
  return [...seen.values()];
}

/** The source of the initial pseudo-state's edge in a laid-out machine. */
export const INITIAL_STATE_ID = INITIAL_ID;
