// A machine's statechart: the SVG the dashboard draws from the machine's own definition (ELK layout),
// with the active state marked aria-current="step" and the path taken so far highlighted.
import { getJson } from './format.js';

export function createStatechart(container, name) {
  let svg;
  let wanted;

  async function load() {
    const response = await fetch(`/api/machines/${name}.svg`, { credentials: 'same-origin' });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body?.error?.message ?? `${response.status}`);
    }
    // Our own server's drawing of our own machine: trusted markup.
    container.innerHTML = await response.text();
    svg = container.querySelector('svg');
    if (wanted) apply(...wanted);
  }

  function apply(active, visited, options = {}) {
    for (const node of svg.querySelectorAll('g.state')) {
      node.removeAttribute('aria-current');
      node.classList.remove('visited', 'live', 'ended-Yielding', 'ended-Failed', 'ended-Cancelled', 'ended-BudgetExceeded');
    }
    for (const edge of svg.querySelectorAll('g.transition.taken')) edge.classList.remove('taken');
    for (const state of visited) svg.querySelector(`g.state[data-state="${CSS.escape(state)}"]`)?.classList.add('visited');
    if (visited.length > 0) svg.querySelector('g.transition.initial-edge')?.classList.add('taken');
    for (let index = 1; index < visited.length; index++) {
      const edge = svg.querySelector(`g.transition[data-source="${CSS.escape(visited[index - 1])}"][data-target="${CSS.escape(visited[index])}"]`);
      edge?.classList.add('taken');
    }
    if (active === undefined) return;
    const node = svg.querySelector(`g.state[data-state="${CSS.escape(active)}"]`);
    if (!node) return;
    node.setAttribute('aria-current', 'step');
    if (options.live) node.classList.add('live');
    if (options.ended) node.classList.add(`ended-${options.ended}`);
  }

  void load().catch((error) => {
    container.textContent = `The ${name} machine could not be drawn: ${error.message}`;
  });

  return {
    /** Marks `active` as the current state and `visited` (in order) as the path to it. */
    show(active, visited = [], options = {}) {
      wanted = [active, visited, options];
      if (svg) apply(active, visited, options);
    },
  };
}

export { getJson };
