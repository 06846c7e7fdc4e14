import { transitionLabel } from './machine-graph.ts';
import type { LaidOutMachine, Point } from './layout.ts';
import { INITIAL_STATE_ID } from './layout.ts';

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[char]!);
}

/** An edge whose every merged label is an invoked actor's error. */
function isErrorEdge(label: string): boolean {
  return label !== '' && label.split(' / ').every((part) => part === 'error' || part.endsWith(' error'));
}

function path(points: readonly Point[]): string {
  return points.map((point, index) => `${index === 0 ? 'M' : 'L'}${point.x.toFixed(1)},${point.y.toFixed(1)}`).join(' ');
}

/** Styles of a standalone drawing; the dashboard's stylesheet restyles the same classes. */
const STANDALONE_STYLE = `
.machine { font: 12px system-ui, sans-serif; }
.machine .state rect { fill: #f6f8fa; stroke: #57606a; stroke-width: 1.2; }
.machine .state.final rect.outer { fill: none; stroke: #57606a; }
.machine .state text { fill: #1f2328; font-weight: 600; }
.machine .transition path { fill: none; stroke: #8c959f; stroke-width: 1.2; }
.machine .transition text { fill: #57606a; font-size: 10.5px; }
.machine .transition.error-edge path { stroke: #d1242f; stroke-dasharray: 4 3; opacity: 0.55; }
.machine .transition.error-edge text { fill: #a40e26; }
.machine .transition rect { fill: #ffffff; opacity: 0.85; }
.machine .initial { fill: #1f2328; }
.machine .note { fill: #57606a; font-size: 11px; font-style: italic; }
.machine marker path { fill: #8c959f; }
`;

/**
 * Renders a laid-out machine as SVG. Each state is a `<g class="state" data-state="…">` (the dashboard
 * marks the active one with `aria-current="step"`), each transition a `<g class="transition"
 * data-source data-target>`; root transitions (e.g. CANCEL from any running state) are one note line.
 * `standalone` adds the XML namespace and a small stylesheet, for a file of its own.
 *
 * @example
 * const svg = toSvg(await layoutMachine(machineGraph(turnMachine)), { standalone: true });
 */
export function toSvg(machine: LaidOutMachine, options: { standalone?: boolean; idPrefix?: string } = {}): string {
  const prefix = options.idPrefix ?? machine.id;
  const notes = machine.globalTransitions.map(
    (transition) => `${transitionLabel(transition)} → ${transition.target} from any state that is not final`,
  );
  const noteHeight = notes.length * 16 + (notes.length > 0 ? 8 : 0);
  const width = machine.width;
  const height = machine.height + noteHeight;
  const parts: string[] = [];
  parts.push(
    `<svg${options.standalone ? ' xmlns="http://www.w3.org/2000/svg"' : ''} class="machine" data-machine="${escapeXml(machine.id)}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="group" aria-label="${escapeXml(machine.id)} machine">`,
  );
  if (options.standalone) parts.push(`<style>${STANDALONE_STYLE}</style>`);
  parts.push(
    `<defs><marker id="${prefix}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>`,
  );
  for (const transition of machine.transitions) {
    const label = transition.labelBox
      ? `<rect x="${transition.labelBox.x.toFixed(1)}" y="${transition.labelBox.y.toFixed(1)}" width="${transition.labelBox.width.toFixed(1)}" height="${transition.labelBox.height.toFixed(1)}" rx="3"/><text x="${(transition.labelBox.x + transition.labelBox.width / 2).toFixed(1)}" y="${(transition.labelBox.y + transition.labelBox.height / 2 + 3.5).toFixed(1)}" text-anchor="middle">${escapeXml(transition.label)}</text>`
      : '';
    const source = transition.source === INITIAL_STATE_ID ? '' : escapeXml(transition.source);
    parts.push(
      `<g class="transition${source === '' ? ' initial-edge' : ''}${isErrorEdge(transition.label) ? ' error-edge' : ''}" data-source="${source}" data-target="${escapeXml(transition.target)}">${transition.title ? `<title>${escapeXml(transition.title)}</title>` : ''}<path d="${path(transition.points)}" marker-end="url(#${prefix}-arrow)"/>${label}</g>`,
    );
  }
  parts.push(`<circle class="initial" cx="${machine.initialPoint.x.toFixed(1)}" cy="${machine.initialPoint.y.toFixed(1)}" r="6"/>`);
  for (const state of machine.states) {
    const final = state.type === 'final';
    const x = state.x.toFixed(1);
    const y = state.y.toFixed(1);
    const inner = final
      ? `<rect class="outer" x="${x}" y="${y}" width="${state.width}" height="${state.height}" rx="10"/><rect x="${(state.x + 3).toFixed(1)}" y="${(state.y + 3).toFixed(1)}" width="${state.width - 6}" height="${state.height - 6}" rx="8"/>`
      : `<rect x="${x}" y="${y}" width="${state.width}" height="${state.height}" rx="10"/>`;
    const title = state.invokes.length > 0 ? `<title>${escapeXml(state.id)}: invokes ${escapeXml(state.invokes.join(', '))}</title>` : `<title>${escapeXml(state.id)}${final ? ' (final)' : ''}</title>`;
    parts.push(
      `<g class="state${final ? ' final' : ''}" data-state="${escapeXml(state.id)}" id="${prefix}-state-${escapeXml(state.id)}">${title}${inner}<text x="${(state.x + state.width / 2).toFixed(1)}" y="${(state.y + state.height / 2 + 4).toFixed(1)}" text-anchor="middle">${escapeXml(state.id)}</text></g>`,
    );
  }
  notes.forEach((note, index) => {
    parts.push(`<text class="note" x="16" y="${machine.height + 12 + index * 16}">${escapeXml(note)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('');
}
