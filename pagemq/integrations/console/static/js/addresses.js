// Addresses: routing type, paging state (highlighted), messages in memory and paged, page
// files and their bytes, the address-full policy, dropped messages, and the queues.

import { name } from './api.js';
import { bytes, h } from './dom.js';
import { listingPage } from './table.js';

function queueLinks(address) {
  const shown = address.queues.slice(0, 5);
  const links = shown.map((queue) => h('a', { href: `#/queue/${name(queue)}`, class: 'queue-link' }, queue));
  const more = address.queues.length - shown.length;
  return h('span', { class: 'links' }, links, more > 0
    ? h('a', { href: `#/queues?filter=${name(address.name)}` }, `+${more} more`) : null);
}

const COLUMNS = [
  { key: 'name', label: 'Address', sort: true, render: (a) => a.name },
  { key: 'routing_type', label: 'Routing', sort: true },
  {
    key: 'paging', label: 'Paging', sort: true,
    render: (a) => (a.paging ? h('span', { class: 'badge paging' }, 'PAGING') : h('span', { class: 'muted' }, 'no')),
  },
  { key: 'messages', label: 'Messages', sort: true, numeric: true },
  { key: 'messages_in_memory', label: 'In memory', sort: true, numeric: true },
  { key: 'messages_paged', label: 'Paged', sort: true, numeric: true },
  { key: 'bytes_in_memory', label: 'Memory', sort: true, numeric: true, render: (a) => bytes(a.bytes_in_memory) },
  { key: 'page_files', label: 'Page files', sort: true, numeric: true },
  { key: 'page_bytes', label: 'Page bytes', numeric: true, render: (a) => bytes(a.limits?.paging?.used_bytes ?? 0) },
  { key: 'policy', label: 'Policy', render: (a) => a.settings?.['address-full-policy'] ?? '–' },
  { key: 'dropped_messages', label: 'Dropped', sort: true, numeric: true },
  { key: 'queues', label: 'Queues', render: queueLinks },
];

export const render = listingPage({
  title: 'Addresses',
  resource: 'addresses',
  columns: COLUMNS,
  rowAttributes: (a) => ({ class: a.paging ? 'paging' : '', dataset: { name: a.name } }),
});
