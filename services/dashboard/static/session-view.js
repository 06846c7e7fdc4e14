// The session view: both machines drawn from their definitions with the active state highlighted, the path
// the session took (with a replay scrubber), the answer as it streams, and a filterable timeline with details.
import { TERMINAL, clock, duration, getJson, h, money, setText } from './format.js';
import { createStatechart } from './statechart.js';
import { createTimeline } from './timeline.js';
import { renderDetail } from './event-detail.js';
import { renderAgentTree } from './agent-tree.js';

const END_STATE = { yielded: 'Yielding', cancelled: 'Cancelled', budget_exceeded: 'BudgetExceeded' };

export function createSessionView() {
  const title = document.getElementById('session-title');
  const meta = document.getElementById('session-meta');
  const agentTree = document.getElementById('agent-tree');
  const body = document.getElementById('session-body');
  const empty = document.getElementById('session-empty');
  const ndjson = document.getElementById('download-ndjson');
  const json = document.getElementById('download-json');
  const detail = document.getElementById('detail');
  const scrubber = document.getElementById('scrubber');
  const scrubLabel = document.getElementById('scrub-label');
  const liveButton = document.getElementById('replay-live');
  const playButton = document.getElementById('replay-play');
  const pathList = document.getElementById('path-list');
  const output = document.getElementById('output-text');
  const outputHint = document.getElementById('output-hint');
  const turnState = document.getElementById('turn-state');
  const sessionState = document.getElementById('session-state');
  const turnChart = createStatechart(document.getElementById('turn-chart'), 'turn');
  const sessionChart = createStatechart(document.getElementById('session-chart'), 'session');

  const timeline = createTimeline({
    element: document.getElementById('timeline'),
    filters: document.getElementById('type-filters'),
    groupSteps: document.getElementById('group-steps'),
    events: () => events,
    cutoff: () => (position === null ? undefined : path[position]?.ts),
    onSelect: (id) => select(id),
    onFork: (event) => fork(event),
  });

  /** Forks the session at a logged event (the dashboard server asks the runtime), then opens the new session. */
  async function fork(event) {
    const from = target;
    if (!from) return;
    const response = await fetch(`/api/sessions/${encodeURIComponent(from.tenant)}/${encodeURIComponent(from.sessionId)}/fork`, {
      method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ atSeq: event.seq }),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      window.alert(`fork refused: ${body?.error?.message ?? response.status}`);
      return;
    }
    location.hash = `#/session/${encodeURIComponent(from.tenant)}/${encodeURIComponent(body.sessionId)}`;
  }

  let target;
  let loading;
  let pending = [];
  let events = [];
  let ids = new Set();
  let path = [];
  let position = null; // null: follow live; else an index into path
  let selected;
  let sessionValue;
  let liveText = '';
  let liveTurn;
  let playing;
  let textFrame = 0;
  let traces = []; // [{ turnId, traceId }] of the turns whose turn.started logged a trace (tracing on)
  let traceUrl; // AGENTBUS_TRACE_URL, with {traceId}
  getJson('/api/config').then((config) => {
    traceUrl = config.traceUrl;
    if (target) renderMeta();
  }, () => {});

  function reset() {
    events = [];
    ids = new Set();
    path = [];
    position = null;
    selected = undefined;
    sessionValue = undefined;
    liveText = '';
    liveTurn = undefined;
    traces = [];
    pending = [];
    stopPlaying();
    timeline.clear();
    pathList.replaceChildren();
    output.textContent = '';
    detail.replaceChildren(h('p', { class: 'empty' }, 'Click an event to see its detail: tool arguments and output, usage, model, timings, errors.'));
  }

  function sortEvents() {
    events.sort((a, b) => (a.seq !== undefined && b.seq !== undefined ? a.seq - b.seq : a.ts - b.ts));
  }

  function addEvent(event) {
    if (ids.has(event.id)) return false;
    ids.add(event.id);
    events.push(event);
    if (events.length > 1 && events.at(-2).ts > event.ts) sortEvents();
    return true;
  }

  function addPathStep(step) {
    if (path.some((known) => known.eventId === step.eventId)) return;
    const last = [...path].reverse().find((known) => known.turnId === step.turnId);
    if (last?.state === step.state) return;
    path.push(step);
  }

  function load(data) {
    for (const event of data.log) addEvent(event);
    for (const event of data.live) addEvent(event);
    sortEvents();
    for (const step of data.path) addPathStep(step);
    const sessionStates = data.live.filter((event) => event.type === 'state' && event.data.machine === 'session');
    sessionValue = sessionStates.at(-1)?.data.value;
    const lastAnswer = [...data.log].reverse().find((event) => event.type === 'assistant.message');
    liveText = lastAnswer?.data.text ?? '';
    liveTurn = lastAnswer?.turnId;
    if (data.node) meta.dataset.node = data.node;
    for (const trace of data.traces ?? []) addTrace(trace);
  }

  function addTrace(trace) {
    if (!traces.some((known) => known.turnId === trace.turnId)) traces.push(trace);
  }

  function apply(event) {
    if (event.type === 'assistant.delta') {
      if (liveTurn !== event.turnId) {
        liveTurn = event.turnId;
        liveText = '';
      }
      liveText += event.data.text;
      return;
    }
    if (!addEvent(event)) return;
    if (event.type === 'state' && event.data.machine === 'turn' && event.turnId) {
      addPathStep({ turnId: event.turnId, state: event.data.value, ts: event.ts, source: 'live', eventId: event.id });
    } else if (event.type === 'state' && event.data.machine === 'session') {
      sessionValue = event.data.value;
    } else if (event.type === 'user.message' && !event.data.steer && event.turnId && !path.some((step) => step.turnId === event.turnId)) {
      // Queued behind another turn: the turn shows once its machine starts.
    } else if (event.type === 'turn.started' && event.turnId && event.data.trace) {
      const traceId = /^[\da-f]{2}-([\da-f]{32})-/.exec(event.data.trace.traceparent)?.[1];
      if (traceId) addTrace({ turnId: event.turnId, traceId });
    } else if (event.type === 'turn.ended' && event.turnId) {
      addPathStep({ turnId: event.turnId, state: END_STATE[event.data.reason] ?? 'Failed', ts: event.ts, source: 'log', eventId: event.id });
    } else if (event.type === 'assistant.message' && event.data.text) {
      liveTurn = event.turnId;
      liveText = event.data.text;
    }
  }

  function stepIndex() {
    return position === null ? path.length - 1 : position;
  }

  function running() {
    const last = path.at(-1);
    return last !== undefined && !TERMINAL.has(last.state);
  }

  function renderMeta() {
    const turns = new Set(events.filter((event) => event.type === 'user.message' && !event.data.steer).map((event) => event.turnId)).size;
    const ended = events.filter((event) => event.type === 'turn.ended');
    const cost = ended.reduce((sum, event) => sum + (event.data.cost ?? 0), 0);
    const usage = events.filter((event) => event.type === 'assistant.message').reduce((sum, event) => sum + event.data.usage.inputTokens + event.data.usage.outputTokens, 0);
    const created = events.find((event) => event.type === 'session.created');
    // The latest turn's trace (tracing on), linked to the tracing UI when AGENTBUS_TRACE_URL says where.
    const trace = traces.at(-1);
    const traceId = trace ? h('code', { class: 'trace-id', title: `trace of turn ${trace.turnId}` }, trace.traceId) : null;
    // replaceChildren would write an absent part (null) as the text "null".
    meta.replaceChildren(...[
      h('span', {}, h('b', {}, turns), ` turn${turns === 1 ? '' : 's'}`),
      h('span', {}, h('b', {}, events.length), ' events'),
      h('span', {}, h('b', {}, usage), ' tokens'),
      h('span', {}, h('b', {}, money(cost))),
      meta.dataset.node || created ? h('span', {}, 'node ', h('b', {}, meta.dataset.node || created.data.createdBy)) : null,
      trace ? h('span', { class: 'trace' }, 'trace ', traceUrl ? h('a', { href: traceUrl.replaceAll('{traceId}', trace.traceId), target: '_blank', rel: 'noopener' }, traceId) : traceId) : null,
    ].filter((part) => part !== null));
    renderAgentTree(agentTree, target, events);
  }

  function renderCharts() {
    const index = stepIndex();
    const step = path[index];
    const turnSteps = step ? path.slice(0, index + 1).filter((known) => known.turnId === step.turnId) : [];
    const live = position === null && running();
    turnChart.show(step?.state, turnSteps.map((known) => known.state), { live, ended: step && TERMINAL.has(step.state) ? step.state : undefined });
    setText(turnState, step ? step.state : 'no turn yet');
    turnState.dataset.state = step?.state ?? '';
    turnState.classList.toggle('running', live);
    const sessionNow = position === null ? (sessionValue ?? (running() ? 'running' : 'idle')) : TERMINAL.has(step?.state) ? 'idle' : 'running';
    sessionChart.show(sessionNow, [], { live: position === null && sessionNow !== 'idle' });
    setText(sessionState, sessionNow);
    sessionState.dataset.state = sessionNow;
  }

  function renderPath() {
    const index = stepIndex();
    pathList.replaceChildren(...path.map((step, at) =>
      h('li', { class: `${at > 0 && path[at - 1].turnId !== step.turnId ? 'turn-start' : ''}${at === index ? ' current' : ''}${at > index ? ' future' : ''}`, title: `turn ${step.turnId} · ${clock(step.ts)} · from the ${step.source}` },
        h('span', { class: 'chip state-pill', 'data-state': step.state, onclick: () => seek(at) }, step.state))));
    scrubber.max = String(Math.max(0, path.length - 1));
    scrubber.value = String(Math.max(0, index));
    scrubber.disabled = path.length < 2;
    const step = path[index];
    setText(scrubLabel, step ? `${index + 1} / ${path.length} · ${step.state} · ${clock(step.ts)} · turn ${step.turnId.slice(-8)}` : 'no state yet');
    liveButton.setAttribute('aria-pressed', String(position === null));
    setText(liveButton, running() ? '● Live' : 'Latest');
  }

  function renderOutput() {
    cancelAnimationFrame(textFrame);
    textFrame = requestAnimationFrame(() => {
      let text = liveText;
      if (position !== null) {
        const step = path[position];
        const answers = step ? events.filter((event) => event.type === 'assistant.message' && event.turnId === step.turnId) : [];
        // In Streaming, the answer that state produced (logged when it ended); elsewhere the last one so far.
        const answer = step?.state === 'Streaming' ? answers.find((event) => event.ts >= step.ts) : [...answers].reverse().find((event) => event.ts <= step.ts);
        text = answer?.data.text ?? '';
      }
      if (output.firstChild?.nodeType === Node.TEXT_NODE && text.startsWith(output.firstChild.data) && output.childNodes.length <= 2) {
        // Appending keeps the text node: a streamed answer costs one small DOM write per frame.
        const node = output.firstChild;
        if (node.data !== text) node.appendData(text.slice(node.data.length));
      } else {
        output.replaceChildren(text);
      }
      const cursor = output.querySelector('.cursor');
      const streaming = position === null && path.at(-1)?.state === 'Streaming';
      if (streaming && !cursor) output.append(h('span', { class: 'cursor' }));
      if (!streaming && cursor) cursor.remove();
      setText(outputHint, position === null ? (streaming ? 'streaming…' : '') : 'at the replay position');
    });
  }

  function select(id) {
    selected = id;
    timeline.select(id);
    const event = events.find((candidate) => candidate.id === id);
    if (event) detail.replaceChildren(...renderDetail(event, events));
  }

  function renderAll() {
    renderMeta();
    renderCharts();
    renderPath();
    renderOutput();
  }

  function seek(index) {
    position = Math.max(0, Math.min(path.length - 1, index));
    if (position === path.length - 1 && running()) position = null;
    renderCharts();
    renderPath();
    renderOutput();
    timeline.markFuture();
  }

  function stopPlaying() {
    clearInterval(playing);
    playing = undefined;
    playButton.textContent = '▶ Replay';
  }

  scrubber.addEventListener('input', () => {
    stopPlaying();
    seek(Number(scrubber.value));
  });
  document.getElementById('replay-prev').addEventListener('click', () => seek(stepIndex() - 1));
  document.getElementById('replay-next').addEventListener('click', () => seek(stepIndex() + 1));
  liveButton.addEventListener('click', () => {
    stopPlaying();
    position = null;
    renderCharts();
    renderPath();
    renderOutput();
    timeline.markFuture();
  });
  playButton.addEventListener('click', () => {
    if (playing) return stopPlaying();
    if (path.length < 2) return;
    seek(0);
    playButton.textContent = '❚❚ Pause';
    playing = setInterval(() => {
      if (stepIndex() >= path.length - 1) return stopPlaying();
      seek(stepIndex() + 1);
    }, 700);
  });

  async function fetchSession() {
    const { tenant, sessionId } = target;
    const key = `${tenant}/${sessionId}`;
    const request = getJson(`/api/sessions/${encodeURIComponent(tenant)}/${encodeURIComponent(sessionId)}`);
    loading = request;
    try {
      const data = await request;
      if (loading !== request || `${target.tenant}/${target.sessionId}` !== key) return;
      load(data);
    } catch (error) {
      if (!/no events/.test(error.message)) meta.replaceChildren(h('span', { class: 'hint' }, `Could not read the session: ${error.message}`));
    } finally {
      if (loading === request) loading = undefined;
    }
    for (const event of pending) apply(event);
    pending = [];
    timeline.render();
    renderAll();
  }

  return {
    target: () => (target ? `${target.tenant}/${target.sessionId}` : undefined),
    open(tenant, sessionId) {
      empty.hidden = true;
      body.hidden = false;
      if (target && target.tenant === tenant && target.sessionId === sessionId) return;
      target = { tenant, sessionId };
      delete meta.dataset.node;
      reset();
      setText(title, `${tenant} / ${sessionId}`);
      document.querySelector('.tabs a[data-view="session"]').href = `#/session/${tenant}/${sessionId}`;
      const base = `/api/sessions/${encodeURIComponent(tenant)}/${encodeURIComponent(sessionId)}`;
      ndjson.href = `${base}/log.ndjson`;
      json.href = `${base}/log.json`;
      renderAll();
      void fetchSession();
    },
    showCurrent() {
      empty.hidden = target !== undefined;
      body.hidden = target === undefined;
    },
    async reload() {
      if (!target) return;
      await fetchSession();
    },
    receive(batch) {
      if (!target) return;
      const mine = batch.filter((event) => event.tenant === target.tenant && event.sessionId === target.sessionId);
      if (mine.length === 0) return;
      if (loading) {
        pending.push(...mine);
        return;
      }
      const before = path.length;
      let other = false;
      for (const event of mine) {
        apply(event);
        if (event.type !== 'assistant.delta') other = true;
      }
      if (other) {
        timeline.append();
        renderMeta();
        // The selected event's detail may depend on what just came (a tool call's result).
        if (selected && mine.some((event) => event.type === 'tool.result' || event.type === 'approval.decided')) select(selected);
      }
      if (path.length !== before || other) {
        renderCharts();
        renderPath();
      }
      renderOutput();
    },
  };
}

export { duration };
