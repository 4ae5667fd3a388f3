// Small DOM and formatting helpers: elements are built with textContent only (names,
// headers and bodies come from clients and must never become markup).

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') element.className = value;
    else if (key === 'dataset') Object.assign(element.dataset, value);
    else if (key.startsWith('on')) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function bytes(value) {
  if (value === null || value === undefined) return '–';
  if (value < 0) return 'no limit';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${size} B` : `${size.toFixed(size < 10 ? 2 : 1)} ${units[unit]}`;
}

export function count(value) {
  if (value === null || value === undefined) return '–';
  return Number(value).toLocaleString('en-US');
}

export function rate(value) {
  if (value === null || value === undefined) return '–';
  return `${Number(value).toLocaleString('en-US', { maximumFractionDigits: 1 })}/s`;
}

export function percent(value) {
  return value === null || value === undefined ? '–' : `${Number(value).toFixed(1)}%`;
}

export function time(ms) {
  if (!ms) return '–';
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

export function card(label, value, detail, attributes = {}) {
  return h('div', { class: 'card', ...attributes },
    h('div', { class: 'card-label' }, label),
    h('div', { class: 'card-value' }, value),
    detail ? h('div', { class: 'card-detail' }, detail) : null);
}

export function meter(used, limit) {
  if (!(limit > 0)) return h('div', { class: 'meter empty' });
  const share = Math.min(100, (100 * used) / limit);
  const level = share >= 90 ? 'high' : share >= 70 ? 'mid' : 'low';
  return h('div', { class: `meter ${level}`, title: `${share.toFixed(1)}%` },
    h('div', { class: 'meter-fill', style: `width: ${share}%` }));
}
