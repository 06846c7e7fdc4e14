// The session's timeline: one row per event (deltas excepted), filters by type, grouping by turn and step.
// Rows are appended as events come; the whole list is drawn again only when filters change or events arrive out of order.
import { clock, describe, h, kindOf } from './format.js';

const TYPE_GROUPS = [
  ['user.message', true], ['assistant.message', true], ['tool.use', true], ['tool.result', true],
  ['approval.requested', true], ['approval.decided', true], ['tool.input_requested', true], ['tool.input_answered', true],
  ['summary.created', true], ['turn.ended', true],
  ['session.created', true], ['session.forked', true], ['state', true], ['progress', false], ['tool.progress', false], ['retry', true], ['error', true],
];
const MAX_ROWS = 3000;

/**
 * `events()` gives the session's events in order; `cutoff()` the replay position's time (rows after it are
 * dimmed), undefined when following live; `onSelect(id)` hears a click on a row; `onFork(event)` a click on a logged
 * event's "fork" button (fork the session at that event's `seq`).
 */
export function createTimeline({ element, filters, groupSteps, events, cutoff, onSelect, onFork }) {
  const shown = new Map(TYPE_GROUPS);
  let selected;
  let rendered = 0;
  let lastHead;

  for (const [type, on] of TYPE_GROUPS) {
    const input = h('input', { type: 'checkbox', 'data-type': type });
    input.checked = on;
    input.addEventListener('change', () => {
      shown.set(type, input.checked);
      render();
    });
    filters.append(h('label', { title: `show ${type} events` }, input, type));
  }
  groupSteps.addEventListener('change', () => render());

  function row(event) {
    const failed = (event.type === 'tool.result' && event.data.isError) || event.type === 'error' || (event.type === 'turn.ended' && event.data.reason !== 'yielded');
    return h('div', {
      class: `event${failed ? ' is-error' : ''}`, role: 'listitem', 'data-id': event.id, 'data-type': event.type, 'data-ts': event.ts,
      'aria-selected': selected === event.id ? 'true' : 'false', tabindex: '0',
      onclick: () => onSelect(event.id),
      onkeydown: (key) => key.key === 'Enter' && onSelect(event.id),
    },
    h('span', { class: 'time' }, clock(event.ts)),
    h('span', { class: 'step' }, event.step ? `#${event.step}` : ''),
    h('span', { class: 'type', 'data-kind': kindOf(event.type) }, event.type === 'state' ? `state:${event.data.machine}` : event.type),
    h('span', { class: 'summary', title: describe(event) }, describe(event)),
    // Only logged events have a sequence to fork at; live ones (state, progress, deltas) do not.
    event.seq === undefined || !onFork ? h('span') : h('button', {
      type: 'button', class: 'fork', 'data-fork-seq': event.seq, title: `fork this session at seq ${event.seq}: a new session whose history ends here`,
      'aria-label': `fork at seq ${event.seq}`,
      onclick: (click) => { click.stopPropagation(); onFork(event); },
    }, 'fork'));
  }

  function visible() {
    return events().filter((event) => shown.get(event.type) !== false && event.type !== 'assistant.delta').slice(-MAX_ROWS);
  }

  function headOf(event) {
    if (!groupSteps.checked || !event.turnId) return undefined;
    return `turn ${event.turnId.slice(-8)} · step ${event.step ?? 1}`;
  }

  function markFuture() {
    const ts = cutoff();
    for (const item of element.querySelectorAll('.event')) item.classList.toggle('future', ts !== undefined && Number(item.dataset.ts) > ts);
  }

  function render() {
    const list = visible();
    const nodes = [];
    lastHead = undefined;
    for (const event of list) {
      const head = headOf(event);
      if (head && head !== lastHead) nodes.push(h('div', { class: 'step-head' }, head));
      lastHead = head ?? lastHead;
      nodes.push(row(event));
    }
    element.replaceChildren(...nodes);
    rendered = list.length;
    markFuture();
    element.scrollTop = element.scrollHeight;
  }

  /** Appends rows for events past the last one drawn, when they arrived in order; else draws again. */
  function append() {
    const list = visible();
    const lastDrawn = [...element.querySelectorAll('.event')].at(-1)?.dataset.id;
    const at = lastDrawn ? list.findIndex((event) => event.id === lastDrawn) : -1;
    if ((lastDrawn && at === -1) || at + 1 < rendered || list.length > MAX_ROWS - 1) return render();
    const stick = element.scrollHeight - element.scrollTop - element.clientHeight < 40;
    for (const event of list.slice(at + 1)) {
      const head = headOf(event);
      if (head && head !== lastHead) element.append(h('div', { class: 'step-head' }, head));
      lastHead = head ?? lastHead;
      element.append(row(event));
    }
    rendered = list.length;
    markFuture();
    if (stick) element.scrollTop = element.scrollHeight;
  }

  return {
    render,
    append,
    markFuture,
    clear() {
      selected = undefined;
      rendered = 0;
      element.replaceChildren();
    },
    select(id) {
      selected = id;
      for (const item of element.querySelectorAll('.event')) item.setAttribute('aria-selected', item.dataset.id === id ? 'true' : 'false');
    },
  };
}
