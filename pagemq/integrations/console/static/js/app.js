// The console's entry point: a hash router over the views, the login flow (a 401 from any
// call opens the login form; the credentials are then sent with every call), the error and
// notice banners, and the periodic refresh of the overview and of a queue's counters.

import { currentUser, logIn, logOut } from './api.js';
import * as addresses from './addresses.js';
import * as connections from './connections.js';
import { askLogin } from './dialogs.js';
import * as overview from './overview.js';
import * as queue from './queue.js';
import * as queues from './queues.js';
import { clearBanners, showError } from './status.js';

const view = document.getElementById('view');
let timer = null;
let generation = 0;

function parseHash() {
  const hash = location.hash.replace(/^#\/?/, '');
  const cut = hash.indexOf('?');
  const path = cut < 0 ? hash : hash.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? '' : hash.slice(cut + 1));
  if (path.startsWith('queue/')) {
    return { nav: 'queues', params, render: (app) => queue.render(view, params, decodeURIComponent(path.slice(6)), app), refreshMs: queue.REFRESH_MS };
  }
  const routes = {
    '': { nav: 'overview', module: overview, refreshMs: overview.REFRESH_MS },
    addresses: { nav: 'addresses', module: addresses },
    queues: { nav: 'queues', module: queues },
    connections: { nav: 'connections', module: connections },
  };
  const route = routes[path];
  if (!route) return { nav: '', params, render: () => { view.replaceChildren(`No page ${path}.`); } };
  return { ...route, params, render: (app) => route.module.render(view, params, app) };
}

function showUser() {
  const user = currentUser();
  document.getElementById('who').textContent = user ? `logged in as ${user}` : '';
  document.getElementById('logout').hidden = !user;
}

async function login(reason) {
  const { user, password } = await askLogin(reason);
  logIn(user, password);
  showUser();
}

const app = {
  async failed(what, error) {
    if (error && error.status === 401) {
      await login(error.message);
      showError(`${what} (log in again and retry)`, error);
      return;
    }
    showError(what, error);
  },
};

async function route() {
  const mine = ++generation;
  // Performance API marks: how long a page took from its route change (or, the first time,
  // from navigation start) to drawn; benchmarks/console_bench.py reads them.
  const started = performance.now();
  clearInterval(timer);
  timer = null;
  const current = parseHash();
  for (const link of document.querySelectorAll('nav a')) {
    link.classList.toggle('active', link.dataset.nav === current.nav);
  }
  let result;
  try {
    result = await current.render(app);
  } catch (error) {
    if (mine !== generation) return;
    if (error && error.status === 401) {
      view.replaceChildren('Log in to see the broker.');
      await login(error.message);
      if (mine === generation) route();
      return;
    }
    view.replaceChildren();
    showError('Could not load this page', error);
    return;
  }
  if (mine !== generation) return;
  performance.measure('pagemq:render', { start: started, end: performance.now(), detail: location.hash || '#/' });
  document.body.dataset.loaded = location.hash || '#/';
  if (current.refreshMs) {
    const refresh = result && result.refresh ? result.refresh : () => current.render(app);
    timer = setInterval(async () => {
      if (document.querySelector('dialog[open]')) return;  // never redraw under a dialog
      try {
        await refresh();
      } catch (error) {
        clearInterval(timer);
        app.failed('Refresh failed', error);
      }
    }, current.refreshMs);
  }
}

document.getElementById('logout').addEventListener('click', () => {
  logOut();
  showUser();
  route();
});
window.addEventListener('hashchange', () => {
  clearBanners();
  route();
});
showUser();
route();
