// Small formatting helpers shared by the views. Plain ES module, no build step.

/** Creates an element with attributes and children (strings become text nodes). */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') element.className = value;
    else if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Sets an element's text only when it changed (no layout work for unchanged cells). */
export function setText(element, text) {
  const value = String(text);
  if (element.textContent !== value) element.textContent = value;
}

export function clock(ts) {
  const date = new Date(ts);
  return `${date.toLocaleTimeString([], { hour12: false })}.${String(date.getMilliseconds()).padStart(3, '0')}`;
}

export function duration(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} m ${Math.floor((ms % 60_000) / 1000)} s`;
}

export function ago(ts, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - ts) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

export function money(value) {
  if (!value) return '$0';
  return value < 0.01 ? `$${value.toFixed(5)}` : `$${value.toFixed(3)}`;
}

export function tokens(value) {
  if (value >= 10_000) return `${(value / 1000).toFixed(1)}k`;
  return String(value ?? 0);
}

export function short(value, max = 90) {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  const flat = (text ?? '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

export const TERMINAL = new Set(['Yielding', 'Cancelled', 'BudgetExceeded', 'Failed']);

/** The colour family of an event type in the timeline. */
export function kindOf(type) {
  if (type.startsWith('tool.') || type.startsWith('approval.')) return 'tool';
  if (type.startsWith('assistant.')) return 'assistant';
  if (type === 'user.message') return 'user';
  if (type === 'state' || type === 'progress') return 'state';
  if (type === 'turn.ended') return 'end';
  if (type === 'error' || type === 'retry') return 'error';
  return 'other';
}

/** How a decision reads: approved, approved with edited args, answered in the tool's place, or denied. */
function decision(data) {
  if (data.respond !== undefined) return `answered in the tool's place: ${short(data.respond, 60)}`;
  if (!data.approved) return 'denied';
  return data.args === undefined ? 'approved' : `approved with edited args ${short(data.args, 60)}`;
}

/** One line about an event, as `agentbus tail` prints it. */
export function describe(event) {
  const data = event.data ?? {};
  switch (event.type) {
    case 'session.created': return `by ${data.createdBy}`;
    case 'session.forked': return `forked from ${data.parentSessionId} at seq ${data.parentSeq}`;
    case 'user.message': return `${data.steer ? '(steer) ' : ''}${short(data.text)}`;
    case 'assistant.message': {
      const tools = (data.toolCalls ?? []).map((call) => call.name).join(', ');
      return `${short(data.text, 60) || '(no text)'}${tools ? ` → ${tools}` : ''}`;
    }
    case 'tool.use': return `${data.name} ${short(data.args, 70)}`;
    case 'tool.result': return `${data.name} ${data.isError ? 'ERROR ' : ''}${short(data.output, 60)} · ${duration(data.durationMs)}`;
    case 'approval.requested': return `${data.name} waits for approval${data.deadline ? ` until ${clock(data.deadline)} (then ${data.onTimeout ?? 'deny'})` : ''}`;
    case 'approval.decided': return `${decision(data)}${data.reason ? `: ${data.reason}` : ''}${data.timedOut ? ' (timed out)' : ''}`;
    case 'tool.input_requested': return `${data.name} asks: ${short(data.question, 70)}`;
    case 'tool.input_answered': return `answered: ${short(data.answer, 70)}`;
    case 'summary.created': return `${data.tokens} tokens through seq ${data.throughSeq}`;
    case 'turn.ended': return `${data.reason}${data.error ? ` (${data.error.code}: ${data.error.message})` : ''} after ${data.steps} step(s) · ${money(data.cost)}`;
    case 'assistant.delta': return JSON.stringify(data.text);
    case 'tool.progress': return `${data.name}: ${data.message}${data.progress === undefined ? '' : ` (${data.progress}${data.total === undefined ? '' : `/${data.total}`})`}`;
    case 'progress': return data.message;
    case 'state': return `${data.machine} → ${data.value}`;
    case 'retry': return `attempt ${data.attempt}/${data.maxAttempts} in ${data.delayMs} ms: ${data.error?.message ?? ''}`;
    case 'error': return `${data.code}: ${data.message}`;
    default: return short(data);
  }
}

/** Fetches JSON from the dashboard's API; throws with the server's message on an error status. */
export async function getJson(path, signal) {
  const response = await fetch(path, { signal, headers: { Accept: 'application/json' }, credentials: 'same-origin' });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body?.error?.message ?? `${response.status} ${response.statusText}`);
  return body;
}
