// A table over one of the API's listings (`GET /api/addresses`, `/api/queues`) with the
// paging, sorting and filtering done by the broker (`offset`, `limit`, `sort`, `order`,
// `filter`): only one page of rows is ever fetched or drawn, so 10,000 queues stay fast.
// The state is in the URL's hash, so a reload or a link keeps it.

import { get, query } from './api.js';
import { count, h } from './dom.js';

const PAGE_SIZES = [25, 50, 100, 500];

export function stateFrom(params, defaults) {
  return {
    filter: params.get('filter') || '',
    sort: params.get('sort') || defaults.sort || 'name',
    order: params.get('order') === 'desc' ? 'desc' : (params.get('order') || defaults.order || 'asc'),
    offset: Math.max(0, Number(params.get('offset')) || 0),
    limit: PAGE_SIZES.includes(Number(params.get('limit'))) ? Number(params.get('limit')) : 50,
  };
}

function hashFor(route, state) {
  return `#/${route}${query(state)}`;
}

// columns: [{key, label, sort: bool, render(item) -> Node|string, numeric}]
export async function renderListing(view, { title, route, resource, columns, state, rowAttributes }) {
  const answer = await get(`api/${resource}${query(state)}`);
  const items = answer[resource];
  const go = (changes) => {
    location.hash = hashFor(route, { ...state, ...changes });
  };

  let typing;
  const filter = h('input', {
    type: 'search', id: 'filter', placeholder: 'filter names', value: state.filter,
    oninput: (event) => {
      clearTimeout(typing);
      typing = setTimeout(() => go({ filter: event.target.value, offset: 0 }), 300);
    },
  });
  const sizes = h('select', { id: 'page-size', onchange: (event) => go({ limit: Number(event.target.value), offset: 0 }) },
    PAGE_SIZES.map((size) => h('option', { value: size, selected: size === state.limit }, `${size} per page`)));

  const head = h('tr', {}, columns.map((column) => {
    if (!column.sort) return h('th', { class: column.numeric ? 'num' : '' }, column.label);
    const active = state.sort === column.key;
    const next = active && state.order === 'asc' ? 'desc' : 'asc';
    return h('th', { class: `${column.numeric ? 'num ' : ''}sortable${active ? ` sorted ${state.order}` : ''}` },
      h('a', { href: hashFor(route, { ...state, sort: column.key, order: next, offset: 0 }), dataset: { sort: column.key } },
        column.label, active ? (state.order === 'asc' ? ' ▲' : ' ▼') : ''));
  }));
  const rows = items.map((item) => h('tr', rowAttributes(item),
    columns.map((column) => h('td', { class: column.numeric ? 'num' : '', dataset: { field: column.key } },
      column.render ? column.render(item) : (column.numeric ? count(item[column.key]) : item[column.key])))));
  const first = answer.total ? state.offset + 1 : 0;
  const lastShown = state.offset + items.length;
  const pager = h('div', { class: 'pager' },
    h('button', { type: 'button', id: 'prev-page', disabled: state.offset === 0,
      onclick: () => go({ offset: Math.max(0, state.offset - state.limit) }) }, '‹ Previous'),
    h('span', { id: 'range' }, `${count(first)}–${count(lastShown)} of ${count(answer.total)}`),
    h('button', { type: 'button', id: 'next-page', disabled: lastShown >= answer.total,
      onclick: () => go({ offset: state.offset + state.limit }) }, 'Next ›'));

  const typingHere = document.activeElement && document.activeElement.id === 'filter';
  view.replaceChildren(
    h('h1', {}, title),
    h('div', { class: 'toolbar' }, filter, sizes, pager),
    h('table', { class: 'listing', id: `${resource}-table` }, h('thead', {}, head), h('tbody', {}, rows)),
  );
  if (!items.length) {
    view.append(h('p', { class: 'muted', id: 'empty' }, state.filter ? `No ${resource} match “${state.filter}”.` : `No ${resource}.`));
  }
  if (typingHere) {
    const input = view.querySelector('#filter');
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }
}

// A page's `render(view, params)` over one listing: the state comes from the hash's query.
export function listingPage({ title, resource, columns, rowAttributes }) {
  return (view, params) => renderListing(view, {
    title, route: resource, resource, columns, state: stateFrom(params, { sort: 'name' }), rowAttributes,
  });
}
