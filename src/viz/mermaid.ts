import { transitionLabel } from './machine-graph.ts';
import type { MachineGraph } from './machine-graph.ts';

/**
 * A Mermaid `stateDiagram-v2` of a machine graph: every state, the initial one from `[*]`, final ones
 * to `[*]`, and every transition with its event and guards (root transitions from each state they leave).
 *
 * @example
 * toMermaid(machineGraph(turnMachine)); // 'stateDiagram-v2\n  [*] --> Preparing\n  …'
 */
export function toMermaid(graph: MachineGraph): string {
  const lines = ['stateDiagram-v2', `  [*] --> ${graph.initial}`];
  for (const transition of graph.transitions) {
    const label = transitionLabel(transition).replace(/[:;]/g, ' ');
    lines.push(`  ${transition.source} --> ${transition.target}${label ? `: ${label}` : ''}`);
  }
  for (const state of graph.states) if (state.type === 'final') lines.push(`  ${state.id} --> [*]`);
  return `${lines.join('\n')}\n`;
}
