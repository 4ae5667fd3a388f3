// One queue: its counters, its consumers (selector, in flight), the page files it still
// holds with their message-id ranges, a message browser (memory and paged messages, headers
// and body preview), and the actions purge / move / retry / delete, each confirmed first.

import { api, get, name, query } from './api.js';
import { confirmAction } from './dialogs.js';
import { bytes, count, h, time } from './dom.js';
import { showNotice } from './status.js';

export const REFRESH_MS = 5000;
const BROWSE_LIMIT = 20;
const PAGES_SHOWN = 200;

const COUNTERS = [
  ['messages', 'Messages'], ['messages_in_memory', 'In memory'], ['messages_paged', 'Paged'],
  ['messages_delivering', 'Delivering'], ['consumers', 'Consumers'], ['messages_added', 'Added'],
  ['messages_acknowledged', 'Acknowledged'], ['messages_expired', 'Expired'], ['messages_killed', 'Dead-lettered'],
];

function section(id, title, ...content) {
  return h('section', { id, class: 'panel' }, h('h2', {}, title), ...content);
}

function fillCounters(holder, info) {
  holder.replaceChildren(...COUNTERS.map(([key, label]) => h('div', { class: 'counter', dataset: { field: key } },
    h('div', { class: 'card-label' }, label), h('div', { class: 'card-value' }, count(info[key])))));
}

async function fillConsumers(holder, queueName) {
  const answer = await get('api/connections');
  const rows = [];
  for (const connection of answer.connections) {
    for (const sub of connection.subscriptions) {
      if (sub.queue !== queueName) continue;
      rows.push(h('tr', {},
        h('td', {}, connection.session), h('td', {}, connection.peer), h('td', {}, connection.user ?? '–'),
        h('td', {}, sub.id), h('td', {}, sub.ack + (sub.browser ? ' (browser)' : '')),
        h('td', { dataset: { field: 'selector' } }, sub.selector ?? '–'),
        h('td', { class: 'num', dataset: { field: 'in_flight' } }, count(sub.in_flight))));
    }
  }
  holder.replaceChildren(rows.length
    ? h('table', { class: 'listing', id: 'consumers-table' },
      h('thead', {}, h('tr', {}, ['Session', 'Peer', 'User', 'Subscription', 'Ack', 'Selector', 'In flight']
        .map((label) => h('th', {}, label)))),
      h('tbody', {}, rows))
    : h('p', { class: 'muted', id: 'no-consumers' }, 'No consumers.'));
}

async function fillPages(holder, queueName) {
  const answer = await get(`api/queues/${name(queueName)}/pages?limit=${PAGES_SHOWN}`);
  if (!answer.total) {
    holder.replaceChildren(h('p', { class: 'muted', id: 'no-pages' }, 'No page files: nothing of this queue is paged.'));
    return;
  }
  const rows = answer.pages.map((page) => h('tr', { dataset: { page: page.page } },
    h('td', { dataset: { field: 'file' } }, page.file, page.live ? [' ', h('span', { class: 'badge' }, 'live')] : null),
    h('td', { class: 'num', dataset: { field: 'first_id' } }, page.first_id),
    h('td', { class: 'num', dataset: { field: 'last_id' } }, page.last_id),
    h('td', { class: 'num', dataset: { field: 'records' } }, count(page.records)),
    h('td', { class: 'num', dataset: { field: 'queue_records' } }, count(page.queue_records)),
    h('td', { class: 'num', dataset: { field: 'queue_acknowledged' } }, count(page.queue_acknowledged)),
    h('td', { class: 'num' }, bytes(page.bytes)),
    h('td', { class: 'num' }, page.queues_holding)));
  holder.replaceChildren(
    h('p', { class: 'muted', id: 'pages-total' },
      `${count(answer.total)} page file(s) of address ${answer.address}`
      + (answer.total > answer.pages.length ? `, the first ${answer.pages.length} shown` : '')),
    h('table', { class: 'listing', id: 'pages-table' },
      h('thead', {}, h('tr', {}, ['File', 'First id', 'Last id', 'Records', 'For this queue', 'Acknowledged', 'Bytes', 'Queues holding']
        .map((label) => h('th', {}, label)))),
      h('tbody', {}, rows)));
}

function messageDetail(message) {
  const headers = Object.entries(message.headers).sort(([a], [b]) => a.localeCompare(b));
  return h('div', { class: 'detail' },
    h('table', { class: 'headers' }, h('tbody', {}, headers.map(([key, value]) => h('tr', {},
      h('th', {}, key), h('td', {}, value))))),
    h('pre', { class: 'body' }, message.body_preview),
    message.body_truncated ? h('p', { class: 'muted' }, `First 256 of ${count(message.size)} bytes.`) : null);
}

class Browser {
  constructor(queueName, holder) {
    this.queueName = queueName;
    this.holder = holder;
    this.selector = '';
    this.afters = [null];  // the `after` of each page seen, to go back
  }

  async load(after) {
    const path = `api/queues/${name(this.queueName)}/messages${query({ limit: BROWSE_LIMIT, after, selector: this.selector })}`;
    let answer;
    try {
      answer = await get(path);
    } catch (error) {
      this.holder.querySelector('#browse-results').replaceChildren(h('p', { class: 'error-text', id: 'browse-error' }, error.message));
      return;
    }
    this.draw(answer);
  }

  draw(answer) {
    const rows = [];
    for (const message of answer.messages) {
      const detail = h('tr', { class: 'detail-row', hidden: true }, h('td', { colspan: 7 }, messageDetail(message)));
      const row = h('tr', {
        class: 'message', dataset: { id: message.message_id },
        onclick: () => { detail.hidden = !detail.hidden; },
      },
      h('td', { class: 'num' }, message.message_id),
      h('td', {}, message.paged ? h('span', { class: 'badge paging' }, 'paged') : 'memory',
        message.delivering ? h('span', { class: 'badge' }, 'delivering') : null),
      h('td', { class: 'num' }, message.priority),
      h('td', { class: 'num' }, bytes(message.size)),
      h('td', {}, time(message.timestamp)),
      h('td', {}, message.headers.destination ?? ''),
      h('td', { class: 'preview' }, message.body_preview.slice(0, 80)));
      rows.push(row, detail);
    }
    const page = this.afters.length;
    this.holder.querySelector('#browse-results').replaceChildren(
      answer.count ? h('table', { class: 'listing', id: 'messages-table' },
        h('thead', {}, h('tr', {}, ['Id', 'Where', 'Priority', 'Size', 'Received', 'Destination', 'Body']
          .map((label) => h('th', {}, label)))),
        h('tbody', {}, rows)) : h('p', { class: 'muted', id: 'no-messages' }, 'No messages.'),
      h('div', { class: 'pager' },
        h('button', { type: 'button', id: 'browse-prev', disabled: page <= 1, onclick: () => {
          this.afters.pop();
          this.load(this.afters[this.afters.length - 1]);
        } }, '‹ Previous'),
        h('span', {}, `page ${page}`),
        h('button', { type: 'button', id: 'browse-next', disabled: !answer.more, onclick: () => {
          this.afters.push(answer.next_after);
          this.load(answer.next_after);
        } }, 'Next ›')));
  }

  render() {
    const selector = h('input', { type: 'search', id: 'browse-selector', placeholder: "selector, e.g. color = 'red'", value: this.selector });
    const form = h('form', {
      class: 'toolbar', onsubmit: (event) => {
        event.preventDefault();
        this.selector = selector.value.trim();
        this.afters = [null];
        this.load(null);
      },
    }, selector, h('button', { type: 'submit', id: 'browse-go' }, 'Browse'));
    this.holder.replaceChildren(h('h2', {}, 'Messages'), form, h('div', { id: 'browse-results' }));
    return this.load(null);
  }

  reload() {
    return this.load(this.afters[this.afters.length - 1]);
  }
}

const ACTIONS = {
  purge: (q, info) => ({
    title: `Purge ${q}?`,
    text: `Removes the ${count(info.messages - info.messages_delivering)} message(s) not being delivered `
      + `(${count(info.messages_paged)} of them paged); page files nobody else needs are deleted. This cannot be undone.`,
    okLabel: 'Purge',
    call: () => api('POST', `api/queues/${name(q)}/purge`),
    done: (answer) => `Purged ${count(answer.purged)} message(s) from ${q}.`,
  }),
  move: (q) => ({
    title: `Move messages of ${q}`,
    text: 'Moves the pending messages (those matching the selector, if given), paged ones included, in order.',
    okLabel: 'Move',
    fields: [{ name: 'to', label: 'To address', required: true }, { name: 'selector', label: 'Selector', placeholder: 'optional' }],
    call: (fields) => api('POST', `api/queues/${name(q)}/move`,
      fields.selector ? { to: fields.to, selector: fields.selector } : { to: fields.to }),
    done: (answer) => `Moved ${count(answer.moved)} message(s) from ${q} to ${answer.to}.`,
  }),
  retry: (q) => ({
    title: `Retry the dead letters of ${q}?`,
    text: 'Sends every message carrying an original-destination back there, in order.',
    okLabel: 'Retry',
    call: () => api('POST', `api/queues/${name(q)}/retry`),
    done: (answer) => `Sent ${count(answer.retried)} message(s) back to their original destination.`,
  }),
  delete: (q, info) => ({
    title: `Delete queue ${q}?`,
    text: `Deletes the queue with its ${count(info.messages)} message(s) and page files; its `
      + `${count(info.consumers)} consumer(s) are disconnected. The address stays. This cannot be undone.`,
    okLabel: 'Delete',
    call: () => api('DELETE', `api/queues/${name(q)}`),
    done: () => `Deleted queue ${q}.`,
    after: () => { location.hash = '#/queues'; },
  }),
};

export async function render(view, params, queueName, app) {
  let info = await get(`api/queues/${name(queueName)}`);
  const counters = h('div', { class: 'counters', id: 'queue-counters' });
  const consumers = h('div');
  const pages = h('div');
  const browserHolder = h('section', { id: 'browser', class: 'panel' });
  const browser = new Browser(queueName, browserHolder);

  const refresh = async () => {
    info = await get(`api/queues/${name(queueName)}`);
    fillCounters(counters, info);
    await Promise.all([fillConsumers(consumers, queueName), fillPages(pages, queueName)]);
  };

  const act = async (kind) => {
    const action = ACTIONS[kind](queueName, info);
    const fields = await confirmAction(action);
    if (fields === null) return;
    try {
      const answer = await action.call(fields);
      showNotice(action.done(answer));
    } catch (error) {
      app.failed(`${kind[0].toUpperCase()}${kind.slice(1)} of ${queueName} failed`, error);
      return;
    }
    if (action.after) {
      action.after();
      return;
    }
    await refresh();
    await browser.reload();
  };

  const buttons = h('div', { class: 'actions' }, Object.keys(ACTIONS).map((kind) => h('button', {
    type: 'button', class: kind === 'delete' || kind === 'purge' ? 'danger' : '', dataset: { action: kind },
    onclick: () => act(kind),
  }, kind[0].toUpperCase() + kind.slice(1))));

  view.replaceChildren(
    h('h1', {}, 'Queue ', h('span', { id: 'queue-name' }, queueName)),
    h('p', { class: 'muted' }, 'Address ', h('a', { href: `#/addresses?filter=${name(info.address)}` }, info.address),
      `, ${info.routing_type}, ${info.durable ? 'durable' : 'not durable'}`,
      info.filter ? `, filter ${info.filter}` : ''),
    buttons,
    counters,
    section('consumers', 'Consumers', consumers),
    section('pages', 'Page files', pages),
    browserHolder,
  );
  fillCounters(counters, info);
  await Promise.all([fillConsumers(consumers, queueName), fillPages(pages, queueName), browser.render()]);
  return { refresh };
}

