import { parseArgs } from 'node:util';
import type { AnyStateMachine } from 'xstate';
import { sessionMachine, turnMachine } from '../machines/index.ts';
import { layoutMachine, machineGraph, toMermaid, toSvg } from '../src/viz/index.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { VIZ_USAGE } from './viz-usage.ts';

export { VIZ_USAGE };

/** The machines `agentbus viz` draws, by the name `--machine` takes. */
export const VIZ_MACHINES: Readonly<Record<string, AnyStateMachine>> = { turn: turnMachine, session: sessionMachine };
const FORMATS = ['mermaid', 'svg', 'json'] as const;
type VizFormat = (typeof FORMATS)[number];

/**
 * Renders a machine from its own definition: Mermaid `stateDiagram-v2`, an SVG laid out by ELK, or the
 * graph as JSON (states, transitions, and the ELK layout).
 */
export async function renderMachine(name: string, format: VizFormat, options: { signal?: AbortSignal } = {}): Promise<string> {
  const machine = VIZ_MACHINES[name];
  if (!machine) throw new UsageError(`--machine must be one of ${Object.keys(VIZ_MACHINES).join(', ')}, got ${JSON.stringify(name)}`);
  const graph = machineGraph(machine);
  if (format === 'mermaid') return toMermaid(graph);
  const laidOut = await layoutMachine(graph, options);
  if (format === 'svg') return `${toSvg(laidOut, { standalone: true })}\n`;
  return `${JSON.stringify({ graph, layout: laidOut }, null, 2)}\n`;
}

/** `agentbus viz`: prints a machine's diagram on stdout. */
export async function runViz(argv: string[], context: CliContext): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { machine: { type: 'string', default: 'turn' }, format: { type: 'string', default: 'mermaid' } },
    strict: true,
    allowPositionals: false,
  });
  const format = values.format as VizFormat;
  if (!FORMATS.includes(format)) throw new UsageError(`--format must be one of ${FORMATS.join(', ')}, got ${JSON.stringify(values.format)}`);
  context.stdout.write(await renderMachine(values.machine, format, { signal: context.signal }));
  return 0;
}
