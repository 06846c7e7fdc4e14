// The fleet view: every turn in flight on every runtime node, and the most recent finished ones.
import { TERMINAL, ago, duration, getJson, h, money, setText, tokens } from './format.js';

const RUNNING_STATES = ['Queued', 'Preparing', 'Compacting', 'Streaming', 'ToolExecution', 'AwaitingApproval'];

export function createFleetView({ open }) {
  const activeBody = document.querySelector('#fleet-active tbody');
  const recentBody = document.querySelector('#fleet-recent tbody');
  const tenantFilter = document.getElementById('fleet-tenant');
  const stateFilter = document.getElementById('fleet-state');
  const count = document.getElementById('fleet-count');
  const activeEmpty = document.getElementById('fleet-empty');
  const recentEmpty = document.getElementById('recent-empty');
  const sessionList = document.getElementById('session-list');
  const summary = document.getElementById('fleet-summary');
  let summaryKey = '';
  const rows = new Map();
  let snapshot = { active: [], recent: [], sessions: {} };

  for (const state of RUNNING_STATES) stateFilter.append(h('option', { value: state }, state));
  tenantFilter.addEventListener('change', () => render());
  stateFilter.addEventListener('change', () => render());
  document.getElementById('open-session').addEventListener('submit', (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    open(String(form.get('tenant')), String(form.get('session')));
  });
  const onRowClick = (event) => {
    const row = event.target.closest('tr[data-tenant]');
    if (row) open(row.dataset.tenant, row.dataset.session);
  };
  activeBody.addEventListener('click', onRowClick);
  recentBody.addEventListener('click', onRowClick);

  function makeRow(turn) {
    const cells = {
      tenant: h('td'), session: h('td', { class: 'id' }), node: h('td', { class: 'id' }),
      state: h('span', { class: 'state-pill running' }), step: h('span'), bar: h('i'),
      elapsed: h('td', { class: 'num' }), tokens: h('td', { class: 'num' }), cost: h('td', { class: 'num' }), doing: h('td', { class: 'doing' }),
    };
    const element = h('tr', { 'data-href': '1', 'data-tenant': turn.tenant, 'data-session': turn.sessionId, 'data-turn': turn.turnId },
      cells.tenant, cells.session, cells.node, h('td', {}, cells.state),
      h('td', {}, h('span', { class: 'step-bar' }, cells.step, h('span', { class: 'bar' }, cells.bar))),
      cells.elapsed, cells.tokens, cells.cost, cells.doing);
    return { element, cells, turn };
  }

  function fill(entry, now) {
    const { cells, turn } = entry;
    setText(cells.tenant, turn.tenant);
    setText(cells.session, turn.sessionId);
    setText(cells.node, turn.node ?? '—');
    setText(cells.state, turn.state);
    cells.state.dataset.state = turn.state;
    setText(cells.step, turn.step ? `${turn.step}${turn.maxSteps ? ` / ${turn.maxSteps}` : ''}` : '—');
    const width = turn.step && turn.maxSteps ? `${Math.min(100, (turn.step / turn.maxSteps) * 100)}%` : '0%';
    if (cells.bar.style.width !== width) cells.bar.style.width = width;
    setText(cells.elapsed, duration(now - turn.startedAt));
    setText(cells.tokens, `${tokens(turn.inputTokens)} / ${tokens(turn.outputTokens)}`);
    setText(cells.cost, money(turn.cost));
    setText(cells.doing, turn.message ?? (turn.toolCalls ? `${turn.toolCalls} tool call(s)` : ''));
  }

  function visible(turn) {
    return (!tenantFilter.value || turn.tenant === tenantFilter.value) && (!stateFilter.value || turn.state === stateFilter.value);
  }

  /** Keyed update: rows are added, removed and patched cell by cell; nothing is rebuilt wholesale. */
  function render() {
    const now = Date.now();
    const wanted = snapshot.active.filter(visible);
    const keep = new Set(wanted.map((turn) => turn.turnId));
    for (const [turnId, entry] of rows) {
      if (!keep.has(turnId)) {
        entry.element.remove();
        rows.delete(turnId);
      }
    }
    let previous = null;
    for (const turn of wanted) {
      let entry = rows.get(turn.turnId);
      if (!entry) {
        entry = makeRow(turn);
        rows.set(turn.turnId, entry);
      }
      entry.turn = turn;
      fill(entry, now);
      const expected = previous ? previous.nextSibling : activeBody.firstChild;
      if (expected !== entry.element) activeBody.insertBefore(entry.element, expected);
      previous = entry.element;
    }
    activeEmpty.hidden = wanted.length > 0;
    setText(count, snapshot.active.length);
    renderSummary();
    renderRecent(now);
    const tenants = new Set([...snapshot.active, ...snapshot.recent].map((turn) => turn.tenant));
    for (const tenant of tenants) {
      if (![...tenantFilter.options].some((option) => option.value === tenant)) tenantFilter.append(h('option', { value: tenant }, tenant));
    }
  }

  /** How many turns are in each state, as pills; rebuilt only when a count changes. */
  function renderSummary() {
    const counts = new Map();
    for (const turn of snapshot.active) counts.set(turn.state, (counts.get(turn.state) ?? 0) + 1);
    const key = [...counts].map(([state, n]) => `${state}:${n}`).join(',');
    if (key === summaryKey) return;
    summaryKey = key;
    const states = [...RUNNING_STATES, ...[...counts.keys()].filter((state) => !RUNNING_STATES.includes(state))];
    summary.replaceChildren(...states.filter((state) => counts.has(state)).map((state) =>
      h('span', { class: 'state-pill', 'data-state': state }, `${state} ${counts.get(state)}`)));
  }

  let recentKey = '';
  function renderRecent(now) {
    const recent = snapshot.recent.filter((turn) => !tenantFilter.value || turn.tenant === tenantFilter.value).slice(0, 30);
    const key = recent.map((turn) => turn.turnId).join(',');
    recentEmpty.hidden = recent.length > 0;
    if (key === recentKey) {
      for (const row of recentBody.children) {
        const turn = recent.find((candidate) => candidate.turnId === row.dataset.turn);
        if (turn) setText(row.lastChild, ago(turn.endedAt, now));
        row.classList.toggle('old', turn !== undefined && now - turn.endedAt > 60_000);
      }
      return;
    }
    const known = new Set([...recentBody.children].map((row) => row.dataset.turn));
    recentKey = key;
    recentBody.replaceChildren(...recent.map((turn) => {
      const row = h('tr', { 'data-href': '1', 'data-tenant': turn.tenant, 'data-session': turn.sessionId, 'data-turn': turn.turnId },
        h('td', {}, turn.tenant), h('td', { class: 'id' }, turn.sessionId),
        h('td', {}, h('span', { class: 'state-pill', 'data-state': turn.reason ?? turn.state }, turn.reason ?? turn.state)),
        h('td', {}, turn.step ?? '—'), h('td', { class: 'num' }, duration((turn.endedAt ?? now) - turn.startedAt)),
        h('td', { class: 'num' }, `${tokens(turn.inputTokens)} / ${tokens(turn.outputTokens)}`), h('td', { class: 'num' }, money(turn.cost)),
        h('td', { class: 'when' }, ago(turn.endedAt, now)));
      // Only newly finished turns flash; the rest keep still.
      if (known.has(turn.turnId)) row.style.animation = 'none';
      return row;
    }));
  }

  setInterval(() => {
    if (snapshot.active.length > 0 || snapshot.recent.length > 0) render();
  }, 1000);

  return {
    update(next) {
      snapshot = next;
      render();
      void 0;
    },
    async refreshSessions() {
      try {
        const { sessions, total } = await getJson('/api/sessions');
        sessions.sort((a, b) => a.tenant.localeCompare(b.tenant) || a.sessionId.localeCompare(b.sessionId));
        sessionList.replaceChildren(...sessions.map((entry) =>
          h('li', {}, h('a', { href: `#/session/${entry.tenant}/${entry.sessionId}` }, h('span', {}, `${entry.tenant} / ${entry.sessionId}`), h('span', { class: 'n' }, `${entry.events} events`)))));
        if (total > sessions.length) sessionList.append(h('li', { class: 'empty' }, `and ${total - sessions.length} more`));
        if (sessions.length === 0) sessionList.append(h('li', { class: 'empty' }, 'No session has a log yet.'));
      } catch (error) {
        sessionList.replaceChildren(h('li', { class: 'empty' }, `Sessions could not be listed: ${error.message}`));
      }
    },
    terminal: TERMINAL,
  };
}
