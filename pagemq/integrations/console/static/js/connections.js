// Connections: who is connected, from where, as whom, with what subscriptions.

import { get, name } from './api.js';
import { count, h } from './dom.js';

export async function render(view) {
  const answer = await get('api/connections');
  const rows = answer.connections.map((c) => h('tr', { dataset: { session: c.session } },
    h('td', {}, c.session), h('td', {}, c.peer), h('td', {}, c.user ?? '–'), h('td', {}, c.client_id ?? '–'),
    h('td', {}, c.version ?? '–'), h('td', { class: 'num' }, count(c.in_flight)),
    h('td', { class: 'num' }, count(c.connected_seconds)),
    h('td', {}, c.subscriptions.map((s) => h('div', {},
      h('a', { href: `#/queue/${name(s.queue)}` }, s.destination), s.selector ? ` [${s.selector}]` : '',
      ` (${s.ack}${s.browser ? ', browser' : ''}, ${s.in_flight} in flight)`)))));
  view.replaceChildren(
    h('h1', {}, 'Connections'),
    h('p', { class: 'muted' }, `${count(answer.total)} open STOMP connection(s).`),
    h('table', { class: 'listing', id: 'connections-table' },
      h('thead', {}, h('tr', {}, ['Session', 'Peer', 'User', 'Client id', 'STOMP', 'In flight', 'Seconds', 'Subscriptions']
        .map((label) => h('th', {}, label)))),
      h('tbody', {}, rows)));
}
