// The dashboard page: a hash router over three views, fed by one server-sent events stream.
import { createFleetView } from './fleet-view.js';
import { createSessionView } from './session-view.js';
import { createWorkersView } from './workers-view.js';

const views = {
  fleet: document.getElementById('view-fleet'),
  session: document.getElementById('view-session'),
  workers: document.getElementById('view-workers'),
};
const conn = document.getElementById('conn');
const fleet = createFleetView({ open: (tenant, sessionId) => (location.hash = `#/session/${tenant}/${sessionId}`) });
const session = createSessionView();
const workers = createWorkersView();

let source;
let following;

function setConnection(state, label) {
  conn.dataset.state = state;
  conn.querySelector('.label').textContent = label;
}

/** Opens the event stream, following one session's events when `target` is `<tenant>/<sessionId>`. */
function connect(target) {
  if (source && following === target) return;
  source?.close();
  following = target;
  source = new EventSource(`/api/events${target ? `?session=${encodeURIComponent(target)}` : ''}`);
  let opened = false;
  source.onopen = () => {
    setConnection('live', 'live');
    // After a drop, what was missed comes back from the log and the live stream.
    if (opened && target) void session.reload();
    opened = true;
  };
  source.onerror = () => setConnection('down', 'reconnecting…');
  source.addEventListener('fleet', (message) => fleet.update(JSON.parse(message.data)));
  source.addEventListener('workers', (message) => workers.update(JSON.parse(message.data)));
  source.addEventListener('session', (message) => session.receive(JSON.parse(message.data)));
  source.addEventListener('reload', () => void session.reload());
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const name = views[parts[0]] ? parts[0] : 'fleet';
  for (const [key, element] of Object.entries(views)) element.hidden = key !== name;
  for (const tab of document.querySelectorAll('.tabs a')) {
    if (tab.dataset.view === name) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
  if (name === 'session' && parts.length === 3) {
    session.open(parts[1], parts[2]);
    connect(`${parts[1]}/${parts[2]}`);
  } else {
    if (name === 'session') session.showCurrent();
    connect(session.target());
  }
  if (name === 'fleet') void fleet.refreshSessions();
}

window.addEventListener('hashchange', route);
route();
