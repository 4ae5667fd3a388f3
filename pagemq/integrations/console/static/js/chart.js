// Line charts as inline SVG: a handful of series over the last 15 minutes, a dashed line
// for a limit. No library: the console plots at most 180 points per series.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 480;
const HEIGHT = 160;
const PAD = { left: 64, right: 12, top: 12, bottom: 22 };

function svg(tag, attributes = {}, text) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  return element;
}

function clock(seconds) {
  return new Date(seconds * 1000).toTimeString().slice(0, 5);
}

// series: [{label, cls, points: [[unix seconds, value|null], ...]}]; limit: {value, label}
export function lineChart({ title, series, limit, format, span = 900, now }) {
  const end = now ?? Math.max(Date.now() / 1000, ...series.flatMap((s) => s.points.map((p) => p[0])));
  const start = end - span;
  const values = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v !== null && v !== undefined);
  let top = Math.max(1, ...values);
  if (limit && limit.value > 0) top = Math.max(top, limit.value);
  top *= 1.05;
  const x = (t) => PAD.left + ((t - start) / span) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => HEIGHT - PAD.bottom - (v / top) * (HEIGHT - PAD.top - PAD.bottom);

  const chart = svg('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'chart', role: 'img', 'aria-label': title });
  for (const fraction of [0, 0.5, 1]) {
    const value = (top / 1.05) * fraction;
    chart.append(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value), class: 'grid' }));
    chart.append(svg('text', { x: PAD.left - 6, y: y(value) + 4, class: 'axis', 'text-anchor': 'end' }, format(value)));
  }
  for (const t of [start, start + span / 2, end]) {
    chart.append(svg('text', { x: x(t), y: HEIGHT - 6, class: 'axis', 'text-anchor': 'middle' }, clock(t)));
  }
  if (limit && limit.value > 0) {
    chart.append(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(limit.value), y2: y(limit.value), class: 'limit' }));
    chart.append(svg('text', { x: WIDTH - PAD.right, y: y(limit.value) - 4, class: 'axis limit-label', 'text-anchor': 'end' },
      `${limit.label} ${format(limit.value)}`));
  }
  for (const one of series) {
    let path = '';
    let pen = false;
    for (const [t, v] of one.points) {
      if (v === null || v === undefined || t < start) {
        pen = false;
        continue;
      }
      path += `${pen ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    }
    if (path) chart.append(svg('path', { d: path, class: `series ${one.cls}` }));
    const latest = one.points.filter(([t, v]) => v !== null && v !== undefined && t >= start).pop();
    if (latest) chart.append(svg('circle', { cx: x(latest[0]), cy: y(latest[1]), r: 2.5, class: `dot ${one.cls}` }));
  }
  const legend = document.createElement('div');
  legend.className = 'legend';
  for (const one of series) {
    const item = document.createElement('span');
    item.className = `key ${one.cls}`;
    item.textContent = one.label;
    legend.append(item);
  }
  const figure = document.createElement('figure');
  figure.className = 'chart-box';
  const caption = document.createElement('figcaption');
  caption.textContent = title;
  figure.append(caption, chart, legend);
  return figure;
}
