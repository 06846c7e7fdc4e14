export { machineGraph, shortTransitionLabel, transitionLabel } from './machine-graph.ts';
export type { GraphState, GraphTransition, MachineGraph } from './machine-graph.ts';
export { toMermaid } from './mermaid.ts';
export { layoutMachine, INITIAL_STATE_ID } from './layout.ts';
export type { LaidOutMachine, PlacedState, PlacedTransition, Point } from './layout.ts';
export { toSvg } from './svg.ts';
