// The workers view: tool workers and their tools ($SRV.STATS), providers and their circuits, runtime nodes (leases).
import { duration, h, setText } from './format.js';

const TOOLS_SERVICE = 'agentbus-tools';
const PROVIDER_SERVICE = 'agentbus-provider';

function table(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows);
  document.getElementById(id.replace('-table', '-empty')).hidden = rows.length > 0;
}

export function createWorkersView() {
  const count = document.getElementById('workers-count');
  const polled = document.getElementById('workers-polled');
  let last = '';
  return {
    update(view) {
      const key = JSON.stringify(view);
      if (key === last) return;
      last = key;
      const tools = view.services.filter((service) => service.name === TOOLS_SERVICE);
      const providers = view.services.filter((service) => service.name === PROVIDER_SERVICE);
      const others = view.services.filter((service) => service.name !== TOOLS_SERVICE && service.name !== PROVIDER_SERVICE);
      setText(count, tools.length + providers.length + view.nodes.length);
      setText(polled, `from $SRV, the leases and the nodes' heartbeats · changed ${new Date().toLocaleTimeString([], { hour12: false })}`);
      table('tools-table', tools.flatMap((service) => service.endpoints.map((endpoint) =>
        h('tr', { 'data-tool': endpoint.name, 'data-worker': service.id },
          h('td', {}, h('b', {}, endpoint.name), h('div', { class: 'hint' }, endpoint.metadata.description ?? '')),
          h('td', {}, endpoint.metadata.tier ? h('span', { class: 'chip' }, endpoint.metadata.tier) : '—'),
          h('td', { class: 'id' }, `${service.id.slice(0, 10)}…`, h('div', { class: 'hint' }, `v${service.version}`)),
          h('td', { class: 'num' }, endpoint.requests),
          h('td', { class: 'num' }, endpoint.errors),
          h('td', { class: 'num' }, endpoint.requests ? duration(endpoint.averageMs) : '—'),
          h('td', { class: 'doing' }, endpoint.lastError || '—')))));
      table('providers-table', providers.flatMap((service) => service.endpoints.map((endpoint) => {
        // A provider's embed endpoint (`<name>-embed`) has retries but no breaker of its own.
        const circuit = endpoint.name.endsWith('-embed') ? 'embeddings' : typeof endpoint.data?.circuit === 'string' ? endpoint.data.circuit : 'no breaker';
        return h('tr', { 'data-provider': endpoint.name },
          h('td', {}, h('b', {}, endpoint.name)),
          h('td', {}, h('span', { class: 'state-pill', 'data-state': circuit }, circuit)),
          h('td', { class: 'id' }, `${service.id.slice(0, 10)}…`),
          h('td', { class: 'num' }, endpoint.requests),
          h('td', { class: 'num' }, endpoint.errors),
          h('td', { class: 'num' }, endpoint.requests ? duration(endpoint.averageMs) : '—'));
      })));
      table('nodes-table', view.nodes.map((node) =>
        h('tr', { 'data-node': node.node }, h('td', { class: 'id' }, node.node), h('td', { class: 'num' }, node.sessions), h('td', { class: 'num' }, node.active))));
      table('others-table', others.map((service) =>
        h('tr', {}, h('td', {}, service.name), h('td', { class: 'id' }, service.id), h('td', {}, service.version), h('td', {}, service.endpoints.map((endpoint) => endpoint.name).join(', ')))));
    },
  };
}
