// Overview: memory against global-max-size, disk against its limit, connections and
// msg/s in and out, now and over the last 15 minutes (the broker's own ring of samples,
// GET /api/broker/history).

import { get } from './api.js';
import { lineChart } from './chart.js';
import { bytes, card, count, h, meter, percent, rate } from './dom.js';

export const REFRESH_MS = 5000;

export async function render(view) {
  const [broker, history, addresses, queues] = await Promise.all([
    get('api/broker'), get('api/broker/history'),
    get('api/addresses?limit=0'), get('api/queues?limit=0'),
  ]);
  const samples = history.samples || [];
  const last = samples.length ? samples[samples.length - 1] : {};
  const memory = broker.memory;
  const disk = broker.disk || {};
  const fullest = (disk.filesystems || []).filter((fs) => !fs.error)
    .sort((a, b) => b.used_percent - a.used_percent)[0];
  const limits = history.limits || {};

  const cards = h('section', { class: 'cards', id: 'overview-cards' },
    card('Memory', bytes(memory.used_bytes),
      memory.global_max_size >= 0
        ? `of global-max-size ${bytes(memory.global_max_size)} (${percent(memory.used_percent)})`
        : 'no global-max-size',
      { dataset: { field: 'memory' } }),
    card('Disk', fullest ? percent(fullest.used_percent) : '–',
      [fullest ? `${fullest.path}, ${bytes(fullest.free_bytes)} free` : 'not scanned yet',
        disk.limit_in_force ? `; ${disk.limit_in_force} ${disk.limit_in_force === 'min-disk-free'
          ? bytes(disk.min_disk_free) : `${disk.max_disk_usage}%`}` : '; no disk limit',
        disk.disk_full ? ' — FULL: producers held' : ''].join(''),
      { dataset: { field: 'disk' }, class: disk.disk_full ? 'card alert' : 'card' }),
    card('Data on disk', bytes((last.journal_bytes || 0) + (last.page_bytes || 0)),
      `journal ${bytes(last.journal_bytes)}, page files ${bytes(last.page_bytes)}`, { dataset: { field: 'data' } }),
    card('Connections', count(last.connections), null, { dataset: { field: 'connections' } }),
    card('In', rate(last.in_per_second), 'messages added to queues', { dataset: { field: 'in' } }),
    card('Out', rate(last.out_per_second), 'messages acknowledged', { dataset: { field: 'out' } }),
    card('Addresses', count(addresses.total),
      `${count(last.paging_addresses)} paging`, { dataset: { field: 'addresses' } }),
    card('Queues', count(queues.total), null, { dataset: { field: 'queues' } }),
  );
  const memoryMeter = h('div', { class: 'meter-row' }, 'Memory ', meter(memory.used_bytes, memory.global_max_size));

  const points = (key) => samples.map((s) => [s.time, s[key]]);
  const now = last.time;
  const charts = h('section', { class: 'charts', id: 'overview-charts' },
    lineChart({
      title: 'Memory', now, format: bytes,
      series: [{ label: 'used', cls: 's1', points: points('memory_used_bytes') }],
      limit: { value: limits.global_max_size, label: 'global-max-size' },
    }),
    lineChart({
      title: 'Disk (fullest filesystem)', now, format: (v) => `${v.toFixed(0)}%`,
      series: [{ label: 'used', cls: 's1', points: points('disk_used_percent') }],
      limit: { value: last.disk_limit_percent, label: 'limit' },
    }),
    lineChart({
      title: 'Messages per second', now, format: (v) => count(Math.round(v)),
      series: [{ label: 'in (added)', cls: 's1', points: points('in_per_second') },
        { label: 'out (acknowledged)', cls: 's2', points: points('out_per_second') }],
    }),
    lineChart({
      title: 'Connections', now, format: (v) => (Number.isInteger(v) ? count(v) : v.toFixed(1)),
      series: [{ label: 'open', cls: 's1', points: points('connections') }],
    }),
  );
  const note = h('p', { class: 'muted' },
    `A sample every ${history.interval_seconds ?? '–'} s, the last ${history.capacity ?? 0} kept `
    + `(${samples.length} so far).`);
  view.replaceChildren(h('h1', {}, 'Overview'), cards, memoryMeter, charts, note);
}
