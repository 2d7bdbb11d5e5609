// charts.js — small hand-written SVG time-series charts (no library, works offline).
//
//   const c = new TimeChart(bodyElement, {formatValue, formatTime, tooltip, group, eventLabel, eventsLabel});
//   c.setData({series: [{key, label, color, points: [[t, v], …], dash?, format?}], t0, t1, yMax, events, gapS});
//   (`dash`: an SVG stroke-dasharray, drawn without the area; `format(v)`: the tooltip's value text;
//   `eventLabel(e)`: one event's words; `eventsLabel(n)`: "12 events", for a marker of merged events)
//
// Events closer than EVENT_MARKER_MIN_PX on the chart share one marker with their count (eventMarkers),
// and a chart draws at most EVENT_MARKERS_MAX of them: a job that logs an event every 0.4 s would
// otherwise hide its chart under the markers. Each marker is labelled, its event's name or "12 events",
// readable without hovering; markers whose labels would touch merge (placeEventMarkers), so no label
// overlaps another or a marker's line, or leaves the chart at its right edge.
//
// Charts in the same `group` array share a hover crosshair (same time axis).

import { fmtClock } from './format.js';

const SVG_NS = 'http://www.w3.org/2000/svg';

function el(tag, attrs, parent) {
  const e = document.createElementNS(SVG_NS, tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function niceStep(span, target) {
  const raw = span / Math.max(1, target);
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function timeStep(span, target) {
  const raw = span / Math.max(1, target);
  for (const s of TIME_STEPS) if (s >= raw) return s;
  return TIME_STEPS[TIME_STEPS.length - 1];
}

// Index of the point whose time is nearest to t (points sorted by time).
function nearest(points, t) {
  let lo = 0, hi = points.length - 1;
  if (hi < 0) return -1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < t) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(points[lo - 1][0] - t) <= Math.abs(points[lo][0] - t)) return lo - 1;
  return lo;
}

export const EVENT_MARKER_MIN_PX = 24; // room for a marker and its count beside it
export const EVENT_MARKERS_MAX = 24; // per chart, however wide
const EVENT_TITLE_LINES = 10; // events a merged marker's title lists by name

/**
 * The markers of `events` on a chart `iw` px wide over [t0, t1] (pure): the events in the window, by
 * time, gathered from the left into groups that span less than the larger of `minPx` and
 * iw / (maxMarkers - 1) each, so that no more than `maxMarkers` groups fit. A marker stands at the
 * middle of its group: [{time_unix_s, events}] in time order; markers are at least half that span apart.
 */
export function eventMarkers(events, t0, t1, iw, minPx = EVENT_MARKER_MIN_PX, maxMarkers = EVENT_MARKERS_MAX) {
  if (!(t1 > t0) || !(iw > 0) || !Array.isArray(events)) return [];
  const inWindow = events
    .filter((e) => e && Number.isFinite(e.time_unix_s) && e.time_unix_s >= t0 && e.time_unix_s <= t1)
    .sort((a, b) => a.time_unix_s - b.time_unix_s);
  const spanPx = Math.max(minPx, iw / Math.max(1, maxMarkers - 1));
  const spanS = (spanPx * (t1 - t0)) / iw;
  const groups = [];
  for (const e of inWindow) {
    const g = groups[groups.length - 1];
    if (g && e.time_unix_s - g.events[0].time_unix_s < spanS) g.events.push(e);
    else groups.push({ events: [e] });
  }
  // (the spans above allow maxMarkers at most; rounding may leave one more: it joins its neighbour)
  while (groups.length > Math.max(1, maxMarkers)) groups[groups.length - 2].events.push(...groups.pop().events);
  return groups.map(({ events: evs }) => ({
    time_unix_s: (evs[0].time_unix_s + evs[evs.length - 1].time_unix_s) / 2,
    events: evs,
  }));
}

export const EVENT_LABEL_MAX_CHARS = 24; // an event's name beyond this is cut with "…"
const EVENT_LABEL_PAD_PX = 5; // between a marker's line and its label
const EVENT_LABEL_GAP_PX = 12; // between a label and the next marker: wider than PAD, so a label reads as its own line's

/** Neighbouring markers (or parts of them: {events}) as one. */
function joinMarkers(a, b) {
  const events = [...a.events, ...b.events];
  return { time_unix_s: (events[0].time_unix_s + events[events.length - 1].time_unix_s) / 2, events };
}

/**
 * Where each marker of `markers` (eventMarkers's, in time order) and its label go (pure). A marker's
 * line stands at its first event, its label (labelOf(marker), widthOf(label) px wide) to the right,
 * over the stretch its events fall in; where that would pass `right`, the line stands at its last
 * event and the label to the left. Events that would fall under the previous marker's label join
 * that marker; a marker whose label has no room at all (at the right edge) joins it whole.
 * Returns [{time_unix_s (its line's time), events, x, label, anchor: 'start'|'end', box: [x0, x1]}]:
 * the boxes, in order, `gapPx` apart at least, none over a line but its own, within [left, right]
 * (but a chart too narrow for a single label).
 */
export function placeEventMarkers(markers, { xOf, labelOf, widthOf, left, right, padPx = EVENT_LABEL_PAD_PX, gapPx = EVENT_LABEL_GAP_PX }) {
  const after = (prev) => (prev ? Math.max(prev.box[1], prev.x) + gapPx : left);
  const fit = (mk, prev) => {
    const first = mk.events[0].time_unix_s;
    const last = mk.events[mk.events.length - 1].time_unix_s;
    const [xs, xe] = [xOf(first), xOf(last)];
    const label = labelOf(mk);
    const w = widthOf(label);
    const start = { events: mk.events, time_unix_s: first, x: xs, label, anchor: 'start', box: [xs + padPx, xs + padPx + w] };
    if (prev && xs < after(prev)) return null;
    if (start.box[1] <= right) return start;
    if (xe - padPx - w >= after(prev)) return { events: mk.events, time_unix_s: last, x: xe, label, anchor: 'end', box: [xe - padPx - w, xe - padPx] };
    return prev ? null : start;
  };
  const queue = [...markers]; // from the front; a marker split in two puts its later part back
  const out = [];
  while (queue.length) {
    let cur = queue.shift();
    for (;;) {
      const prev = out.length ? out[out.length - 1] : null;
      const placed = fit(cur, prev);
      if (placed) { out.push(placed); break; }
      out.pop();
      const k = cur.events.findIndex((e) => xOf(e.time_unix_s) >= after(prev));
      if (k > 0) queue.unshift({ events: cur.events.slice(k) });
      cur = joinMarkers(prev, k > 0 ? { events: cur.events.slice(0, k) } : cur);
    }
  }
  return out;
}

export class TimeChart {
  constructor(body, opts) {
    this.body = body;
    this.opts = opts;
    this.data = null;
    this.hoverT = null;
    this.group = opts.group || [this];
    if (!this.group.includes(this)) this.group.push(this);
    this.svg = el('svg', { role: 'img' });
    this.body.appendChild(this.svg);
    this.empty = document.createElement('div');
    this.empty.className = 'chart-empty';
    this.body.appendChild(this.empty);
    this.svg.addEventListener('pointermove', (ev) => this._onMove(ev));
    this.svg.addEventListener('pointerleave', () => this._onLeave());
    if (typeof ResizeObserver !== 'undefined') {
      let w = 0;
      new ResizeObserver(() => {
        if (this.body.clientWidth !== w) { w = this.body.clientWidth; this.render(); }
      }).observe(this.body);
    }
  }

  setData(data) {
    this.data = data;
    this.render();
  }

  setEmptyText(text) {
    this.emptyText = text;
    this.render();
  }

  _geometry() {
    const W = Math.max(120, this.body.clientWidth || 600);
    const H = Math.max(80, this.body.clientHeight || 200);
    const m = { l: 58, r: 12, t: 12, b: 24 };
    return { W, H, m, iw: W - m.l - m.r, ih: H - m.t - m.b };
  }

  render() {
    const d = this.data;
    const svg = this.svg;
    svg.replaceChildren();
    const { W, H, m, iw, ih } = this._geometry();
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const nPoints = d ? d.series.reduce((a, s) => a + s.points.length, 0) : 0;
    svg.dataset.points = String(nPoints);
    this.empty.textContent = nPoints ? '' : (this.emptyText || '');
    this.empty.hidden = nPoints > 0;
    if (!d || !(d.t1 > d.t0)) return;

    const { t0, t1 } = d;
    const yMax = d.yMax > 0 ? d.yMax : 1;
    const x = (t) => m.l + ((t - t0) / (t1 - t0)) * iw;
    const y = (v) => m.t + ih - (Math.max(0, Math.min(v, yMax)) / yMax) * ih;
    this._scale = { x, y, t0, t1, m, iw, ih, W, H, yMax };
    svg.dataset.span = String(Math.round((t1 - t0) * 1000) / 1000);

    this._drawAxes(d);
    this._drawLimits(d.limits || []);
    this._drawEvents(d.events || []);
    this._drawSeries(d.series, d.gapS || 5);
    this._drawTrends(d.trends || []);

    // hover layer
    this.hoverLayer = el('g', { class: 'hover' }, svg);
    el('rect', { x: m.l, y: m.t, width: iw, height: ih, fill: 'transparent' }, svg);
    if (this.hoverT !== null) this._drawHover();
  }

  _drawAxes(d) {
    const svg = this.svg;
    const { x, y, t0, t1, m, iw, ih, W, H } = this._scale;
    const grid = el('g', { class: 'grid' }, svg);
    const axis = el('g', { class: 'axis' }, svg);
    const ticks = d.yTicks || [];
    for (const v of ticks) {
      const yy = Math.round(y(v)) + 0.5;
      el('line', { x1: m.l, x2: W - m.r, y1: yy, y2: yy }, grid);
      const tx = el('text', { x: m.l - 8, y: yy + 3.5, 'text-anchor': 'end' }, axis);
      tx.textContent = this.opts.formatValue(v, true);
    }
    const step = timeStep(t1 - t0, Math.max(3, Math.floor(iw / 110)));
    const first = Math.ceil(t0 / step) * step;
    for (let t = first; t <= t1 + 1e-6; t += step) {
      const xx = Math.round(x(t)) + 0.5;
      el('line', { x1: xx, x2: xx, y1: m.t, y2: m.t + ih, class: 'vgrid' }, grid);
      const tx = el('text', { x: xx, y: H - 6, 'text-anchor': 'middle' }, axis);
      tx.textContent = (this.opts.formatTime || fmtClock)(t, step);
    }
  }

  /** Limit lines (e.g. total memory when within range). */
  _drawLimits(limits) {
    const svg = this.svg;
    const { y, m, W, yMax } = this._scale;
    for (const lim of limits) {
      if (!(lim.value > 0 && lim.value <= yMax)) continue;
      const yy = Math.round(y(lim.value)) + 0.5;
      el('line', { x1: m.l, x2: W - m.r, y1: yy, y2: yy, class: 'limit' }, svg);
      const tx = el('text', { x: W - m.r - 2, y: yy - 4, 'text-anchor': 'end', class: 'limit-label' }, svg);
      tx.textContent = lim.label;
    }
  }

  _drawEvents(events) {
    const svg = this.svg;
    const { x, t0, t1, m, ih, iw, W } = this._scale;
    const evg = el('g', { class: 'events' }, svg);
    this._markers = placeEventMarkers(eventMarkers(events, t0, t1, iw), {
      xOf: (t) => Math.round(x(t)) + 0.5,
      labelOf: (mk) => this._markerLabel(mk),
      widthOf: this._labelWidth(evg),
      left: m.l,
      right: W - 2,
    });
    for (const mk of this._markers) {
      const n = mk.events.length;
      const xx = mk.x;
      const g = el('g', {
        class: n > 1 ? 'event event-merged' : 'event', 'data-testid': 'event-marker', 'data-count': n,
        'data-name': n === 1 ? mk.events[0].name || '' : null,
      }, evg);
      el('line', { x1: xx, x2: xx, y1: m.t, y2: m.t + ih }, g);
      if (n > 1) { // the stretch its events fall in, along the chart's top
        const [a, z] = [mk.events[0], mk.events[n - 1]].map((e) => Math.round(x(e.time_unix_s)) + 0.5);
        if (z - a >= 2) el('line', { x1: a, x2: z, y1: m.t + 1, y2: m.t + 1, class: 'event-span' }, g);
      }
      el('path', { d: `M${xx - 4},${m.t - 6} h8 l-4,6 z` }, g);
      el('text', {
        x: mk.anchor === 'start' ? mk.box[0] : mk.box[1], y: m.t - 2, 'text-anchor': mk.anchor, class: 'event-label',
      }, g).textContent = mk.label;
      el('title', null, g).textContent = this._markerTitle(mk);
    }
  }

  /** What a marker says on the chart: its event's name (cut at EVENT_LABEL_MAX_CHARS), or "12 events". */
  _markerLabel(mk) {
    if (mk.events.length > 1) return this._eventsLabel(mk.events.length);
    const name = String(mk.events[0].name || '');
    return name.length > EVENT_LABEL_MAX_CHARS ? `${name.slice(0, EVENT_LABEL_MAX_CHARS - 1)}…` : name;
  }

  /** A label's width as drawn (a scratch text of the labels' class in `g`, each text measured once);
   *  a chart not laid out (hidden) measures nothing, so a width is estimated, wide rather than narrow. */
  _labelWidth(g) {
    const probe = el('text', { class: 'event-label', visibility: 'hidden' }, g);
    const widths = new Map();
    return (text) => {
      if (!widths.has(text)) {
        probe.textContent = text;
        const drawn = typeof probe.getComputedTextLength === 'function' ? probe.getComputedTextLength() : 0;
        widths.set(text, drawn > 0 ? drawn : [...text].reduce((a, c) => a + (c.codePointAt(0) > 0x2e80 ? 11 : 7), 0));
      }
      return widths.get(text);
    };
  }

  /** A marker's title: its event, or "12 events" and the first of them by name. */
  _markerTitle(mk) {
    const line = (e) => `${fmtClock(e.time_unix_s)} ${this._eventLabel(e)}`;
    if (mk.events.length === 1) return line(mk.events[0]);
    const shown = mk.events.slice(0, EVENT_TITLE_LINES).map(line);
    const more = mk.events.length - shown.length;
    return [this._eventsLabel(mk.events.length), ...shown, ...(more > 0 ? [`… +${more}`] : [])].join('\n');
  }

  _eventsLabel(n) {
    return this.opts.eventsLabel ? this.opts.eventsLabel(n) : String(n);
  }

  _drawSeries(series, gap) {
    const svg = this.svg;
    const { x, y, t0, t1, m, ih } = this._scale;
    const sg = el('g', { class: 'series-group' }, svg);
    for (const s of series) {
      const pts = s.points.filter((p) => p[0] >= t0 - gap && p[0] <= t1 + gap && typeof p[1] === 'number');
      if (!pts.length) continue;
      let line = '', area = '', segStart = null, prevT = null, prevX = null;
      const base = (m.t + ih).toFixed(1);
      const closeArea = () => { if (segStart !== null) area += `L${prevX},${base}L${segStart},${base}Z`; };
      for (const [t, v] of pts) {
        const px = x(t).toFixed(1), py = y(v).toFixed(1);
        if (prevT === null || t - prevT > gap) {
          closeArea();
          line += `M${px},${py}`;
          area += `M${px},${base}L${px},${py}`;
          segStart = px;
        } else {
          line += `L${px},${py}`;
          area += `L${px},${py}`;
        }
        prevT = t; prevX = px;
      }
      closeArea();
      if (!s.dash) el('path', { d: area, class: 'area', fill: s.color }, sg);
      if (pts.length === 1) el('circle', { cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5, fill: s.color }, sg);
      el('path', {
        d: line, class: 'series', stroke: s.color, 'data-testid': 'series', 'data-key': s.key,
        'data-points': pts.length, 'data-last': pts[pts.length - 1][1], 'stroke-dasharray': s.dash || null,
      }, sg);
    }
  }

  /** Trend lines (e.g. steadily growing memory). */
  _drawTrends(trends) {
    const svg = this.svg;
    const { x, y, t0 } = this._scale;
    for (const tr of trends) {
      const [[ta, va], [tb, vb]] = tr.fit;
      el('line', { x1: x(Math.max(ta, t0)), y1: y(va + ((Math.max(ta, t0) - ta) * (vb - va)) / (tb - ta || 1)), x2: x(tb), y2: y(vb), class: 'trend', 'data-testid': 'trend' }, svg);
      if (tr.label) {
        const lbl = el('text', { x: x(tb) - 4, y: y(vb) - 8, 'text-anchor': 'end', class: 'trend-label' }, svg);
        lbl.textContent = tr.label;
      }
    }
  }

  _eventLabel(e) {
    return this.opts.eventLabel ? this.opts.eventLabel(e) : String(e.name || '');
  }

  _onMove(ev) {
    if (!this._scale) return;
    const rect = this.svg.getBoundingClientRect();
    const { m, iw, t0, t1, W } = this._scale;
    const px = ((ev.clientX - rect.left) / rect.width) * W;
    if (px < m.l - 4 || px > m.l + iw + 4) { this._onLeave(); return; }
    const t = t0 + ((px - m.l) / iw) * (t1 - t0);
    this.lastClient = [ev.clientX, ev.clientY];
    for (const c of this.group) { c.hoverT = t; c._drawHover(); }
    this._showTooltip(t);
  }

  _onLeave() {
    for (const c of this.group) { c.hoverT = null; if (c.hoverLayer) c.hoverLayer.replaceChildren(); }
    const tip = this.opts.tooltip;
    if (tip) tip.hidden = true;
    this.lastClient = null;
  }

  _hits(t) {
    const d = this.data;
    if (!d) return { time: t, rows: [], markers: [] };
    let snapT = null;
    const rows = [];
    for (const s of d.series) {
      const i = nearest(s.points, t);
      if (i < 0) continue;
      const p = s.points[i];
      if (Math.abs(p[0] - t) > Math.max(d.gapS || 5, (d.t1 - d.t0) / 50)) continue;
      rows.push({ series: s, point: p });
      if (snapT === null) snapT = p[0];
    }
    // the markers drawn within 6 px of the pointer, as drawn (merged events stay merged)
    const tol = ((d.t1 - d.t0) / Math.max(1, this._scale ? this._scale.iw : 600)) * 6;
    const markers = (this._markers || []).filter((mk) => Math.abs(mk.time_unix_s - t) <= tol);
    return { time: snapT !== null ? snapT : t, rows, markers };
  }

  _drawHover() {
    if (!this.hoverLayer || !this._scale || this.hoverT === null) return;
    const { x, y, m, ih } = this._scale;
    const hit = this._hits(this.hoverT);
    this.hoverLayer.replaceChildren();
    const xx = x(hit.time);
    el('line', { x1: xx, x2: xx, y1: m.t, y2: m.t + ih, class: 'crosshair' }, this.hoverLayer);
    for (const r of hit.rows) el('circle', { cx: x(r.point[0]), cy: y(r.point[1]), r: 4, fill: r.series.color, class: 'hover-dot' }, this.hoverLayer);
    if (this.lastClient) this._showTooltip(this.hoverT);
  }

  _showTooltip(t) {
    const tip = this.opts.tooltip;
    if (!tip || !this.lastClient) return;
    const hit = this._hits(t);
    tip.replaceChildren();
    const head = document.createElement('div');
    head.className = 'tt-time';
    head.textContent = `${fmtClock(hit.time)} · ${this.opts.title ? this.opts.title() : ''}`;
    tip.appendChild(head);
    for (const r of hit.rows) {
      const row = document.createElement('div');
      row.className = 'tt-row';
      const dot = document.createElement('i');
      dot.style.background = r.series.color;
      const label = document.createElement('span');
      label.textContent = r.series.label;
      const val = document.createElement('b');
      val.textContent = r.series.format ? r.series.format(r.point[1]) : this.opts.formatValue(r.point[1], false);
      row.append(dot, label, val);
      tip.appendChild(row);
    }
    for (const mk of hit.markers) {
      const row = document.createElement('div');
      row.className = 'tt-event';
      row.textContent = mk.events.length === 1 ? `▼ ${this._eventLabel(mk.events[0])}` : `▼ ${this._markerTitle(mk)}`;
      tip.appendChild(row);
    }
    tip.hidden = false;
    const [cx, cy] = this.lastClient;
    const r = tip.getBoundingClientRect();
    let left = cx + 14;
    if (left + r.width > window.innerWidth - 8) left = cx - r.width - 14;
    let top = cy - r.height - 10;
    if (top < 8) top = cy + 16;
    tip.style.left = `${Math.max(4, left)}px`;
    tip.style.top = `${top}px`;
  }
}

// Ticks 0..max with a nice step; `unit` lets callers tick in GiB while values are MiB.
// A value near the largest double (a process's own forward rate can be 1.5e308) rounds `top` up to
// Infinity, and `v += step` never passed it: the loop filled an array until the tab died. Such a
// range gets the two ticks 0 and its maximum.
export function niceTicks(max, target = 4, unit = 1) {
  const m = max / unit;
  if (!(m > 0)) return { ticks: [0, unit], max: unit };
  const step = niceStep(m, target);
  const top = Math.ceil(m / step) * step;
  if (!Number.isFinite(top) || !(step > 0)) {
    const end = Number.isFinite(m) ? m * unit : Number.MAX_VALUE;
    return { ticks: [0, end], max: end };
  }
  const ticks = [];
  for (let v = 0; v <= top + step * 1e-9; v += step) ticks.push(v * unit);
  return { ticks, max: top * unit };
}

/**
 * The history samples from `since` on, as [time, value] points per GPU index: { indices (sorted),
 * mem: Map index -> points of memory used (MiB), util: Map index -> points of utilisation (%),
 * smActive, smOccupancy: Map index -> GPM points in percent (empty where the GPU has no GPM),
 * power: Map index -> points in W, temp: Map index -> points in °C }.
 */
export function pointsByGpu(samples, since) {
  const ok = (x) => typeof x === 'number' && Number.isFinite(x);
  const fields = {
    mem: ['mem_used_mib', 1], util: ['util_pct', 1], smActive: ['sm_activity_fraction', 100],
    smOccupancy: ['sm_occupancy_fraction', 100], power: ['power_w', 1], temp: ['temperature_c', 1],
  };
  const out = Object.fromEntries(Object.keys(fields).map((k) => [k, new Map()]));
  for (const s of samples) {
    if (!s || !ok(s.time_unix_s) || s.time_unix_s < since) continue;
    for (const g of Array.isArray(s.gpus) ? s.gpus : []) {
      if (!g || !ok(g.index)) continue;
      for (const [k, [field, scale]] of Object.entries(fields)) {
        if (!out[k].has(g.index)) out[k].set(g.index, []);
        if (ok(g[field])) out[k].get(g.index).push([s.time_unix_s, g[field] * scale]);
      }
    }
  }
  return { indices: [...out.mem.keys()].sort((a, b) => a - b), ...out };
}

/**
 * The job's own series from `since` on (for a machine without an NVIDIA GPU): { cpu: points of CPU %
 * (of one core), rss: points of MiB, forward: forward calls/s, step: training steps/s }.
 */
export function jobPoints(samples, since) {
  const ok = (x) => typeof x === 'number' && Number.isFinite(x);
  const fields = { cpu: 'cpu_pct', rss: 'rss_mib', forward: 'forward_rate_hz', step: 'step_rate_hz' };
  const out = Object.fromEntries(Object.keys(fields).map((k) => [k, []]));
  for (const s of samples) {
    if (!s || !ok(s.time_unix_s) || s.time_unix_s < since) continue;
    for (const [k, field] of Object.entries(fields)) if (ok(s[field])) out[k].push([s.time_unix_s, s[field]]);
  }
  return out;
}
