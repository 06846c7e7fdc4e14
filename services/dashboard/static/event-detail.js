// The detail panel of one event: the fields people look for first, then the whole event as JSON.
import { clock, duration, h, money } from './format.js';

function pre(value) {
  return h('pre', {}, typeof value === 'string' ? value : JSON.stringify(value, null, 2));
}

function list(pairs) {
  return h('dl', {}, pairs.filter(([, value]) => value !== undefined && value !== '').flatMap(([label, value]) => [h('dt', {}, label), h('dd', {}, value)]));
}

export function renderDetail(event, all) {
  const data = event.data ?? {};
  const parts = [h('div', { class: 'title' }, h('span', { class: 'chip' }, event.type), clock(event.ts))];
  parts.push(list([
    ['turn', event.turnId],
    ['step', event.step],
    ['seq', event.seq],
    ['event id', event.id],
  ]));
  switch (event.type) {
    case 'assistant.message':
      parts.push(list([
        ['model', data.model],
        ['usage', `${data.usage.inputTokens} in · ${data.usage.outputTokens} out`],
        ['cost', money(data.cost)],
        ['finish', data.finishReason],
        ['tool calls', (data.toolCalls ?? []).map((call) => call.name).join(', ') || 'none'],
      ]));
      if (data.text) parts.push(h('h4', {}, 'Text'), pre(data.text));
      if (data.toolCalls?.length) parts.push(h('h4', {}, 'Tool calls'), pre(data.toolCalls));
      break;
    case 'tool.use': {
      const result = all.find((other) => other.type === 'tool.result' && other.data.toolCallId === data.toolCallId);
      parts.push(list([['tool', data.name], ['tier', data.tier], ['call id', data.toolCallId], ['effect id', data.effectId], ['result', result ? (result.data.isError ? 'error' : 'ok') : 'pending'], ['took', result ? duration(result.data.durationMs) : undefined]]));
      parts.push(h('h4', {}, 'Arguments'), pre(data.args));
      if (result) parts.push(h('h4', {}, 'Output'), pre(result.data.output));
      break;
    }
    case 'tool.result': {
      const use = all.find((other) => other.type === 'tool.use' && other.data.toolCallId === data.toolCallId);
      parts.push(list([['tool', data.name], ['call id', data.toolCallId], ['status', data.isError ? 'error' : 'ok'], ['took', duration(data.durationMs)]]));
      if (data.error) parts.push(h('h4', {}, 'Error'), pre(data.error));
      if (use) parts.push(h('h4', {}, 'Arguments'), pre(use.data.args));
      parts.push(h('h4', {}, 'Output'), pre(data.output));
      break;
    }
    case 'turn.ended':
      parts.push(list([['reason', data.reason], ['steps', data.steps], ['usage', `${data.usage.inputTokens} in · ${data.usage.outputTokens} out`], ['cost', money(data.cost)]]));
      if (data.error) parts.push(h('h4', {}, 'Error'), pre(data.error));
      if (data.text) parts.push(h('h4', {}, 'Answer'), pre(data.text));
      break;
    case 'user.message':
      parts.push(list([['model', data.model], ['max steps', data.maxSteps], ['max cost', data.maxCost === undefined ? undefined : money(data.maxCost)], ['steer', data.steer ? 'yes' : undefined]]));
      parts.push(h('h4', {}, 'Text'), pre(data.text));
      break;
    case 'state':
      parts.push(list([['machine', data.machine], ['state', data.value], ['event', data.event]]));
      break;
    default:
      break;
  }
  parts.push(h('h4', {}, 'Event'), pre(event));
  return parts;
}
