// The agent tree of a session (agents calling agents): the call that started it, when it is a child session
// (`session.created.data.parent`), and the child sessions its own agent calls started (`agent__<name>` calls: the
// `tool.use` names the child as the call starts, so a running child is linked too). Handoffs are listed too.
import { h } from './format.js';

const sessionLink = (tenant, sessionId, text) => h('a', { href: `#/session/${tenant}/${sessionId}`, 'data-session': sessionId }, text ?? sessionId);

/**
 * Fills `element` with the tree around the session `target` ({ tenant, sessionId }) from its `events`, and hides it
 * when the session neither has a parent nor called an agent.
 */
export function renderAgentTree(element, target, events) {
  const created = events.find((event) => event.type === 'session.created');
  const parent = created?.data.parent;
  const children = [];
  for (const event of events) {
    if (event.type === 'tool.use' && typeof event.data.name === 'string' && event.data.name.startsWith('agent__')) {
      children.push({ toolCallId: event.data.toolCallId, turnId: event.turnId, profile: event.data.name.slice('agent__'.length), child: event.data.childSessionId, outcome: 'running' });
    } else if (event.type === 'tool.result' && typeof event.data.name === 'string' && event.data.name.startsWith('agent__')) {
      const call = children.findLast((known) => known.toolCallId === event.data.toolCallId && known.turnId === event.turnId);
      if (call) {
        call.child = event.data.child?.sessionId ?? call.child;
        call.outcome = event.data.isError ? (event.data.error?.code ?? 'error') : 'answered';
      }
    }
  }
  const handoffs = events.filter((event) => event.type === 'turn.handoff');
  if (!parent && children.length === 0 && handoffs.length === 0) {
    element.hidden = true;
    element.replaceChildren();
    return;
  }
  element.hidden = false;
  element.replaceChildren(
    parent ? h('p', { class: 'agent-parent' }, 'Called by ', sessionLink(target.tenant, parent.sessionId), ` (call ${parent.toolCallId})`) : null,
    children.length > 0
      ? h('div', { class: 'agent-children' }, 'Agents called: ', h('ul', {}, children.map((call) =>
          h('li', { 'data-outcome': call.outcome }, call.child ? sessionLink(target.tenant, call.child, `${call.profile} · ${call.child}`) : call.profile, ` — ${call.outcome}`))))
      : null,
    handoffs.length > 0 ? h('p', { class: 'agent-handoffs' }, 'Handed off to ', handoffs.map((event) => event.data.to).join(' → ')) : null,
  );
}
