// Queues: every queue with its counters; a name leads to the queue's own page.

import { name } from './api.js';
import { h } from './dom.js';
import { listingPage } from './table.js';

const COLUMNS = [
  { key: 'name', label: 'Queue', sort: true, render: (q) => h('a', { href: `#/queue/${name(q.name)}` }, q.name) },
  { key: 'address', label: 'Address', sort: true },
  { key: 'routing_type', label: 'Routing', sort: true },
  { key: 'consumers', label: 'Consumers', sort: true, numeric: true },
  { key: 'messages', label: 'Messages', sort: true, numeric: true },
  { key: 'messages_in_memory', label: 'In memory', sort: true, numeric: true },
  { key: 'messages_paged', label: 'Paged', sort: true, numeric: true },
  { key: 'messages_delivering', label: 'Delivering', sort: true, numeric: true },
  { key: 'messages_added', label: 'Added', sort: true, numeric: true },
  { key: 'messages_acknowledged', label: 'Acked', sort: true, numeric: true },
  { key: 'messages_killed', label: 'Dead-lettered', sort: true, numeric: true },
];

export const render = listingPage({
  title: 'Queues',
  resource: 'queues',
  columns: COLUMNS,
  rowAttributes: (q) => ({ class: q.messages_paged > 0 ? 'paging' : '', dataset: { name: q.name } }),
});
