// history_view.js — the page's history block: per GPU, memory, utilisation (with GPM SM activity and
// occupancy where the GPU has GPM), power and temperature; on a machine without an NVIDIA GPU (no GPU
// listed, or NVML not usable), the job's CPU, resident memory and training rate instead; and the
// events list. Charts are charts.js's TimeChart; the data is the page's history (state.history, kept by
// ../shared/store.js).

import { NA, fmtClock, fmtMiB } from '../shared/format.js';
import { TimeChart } from '../shared/charts.js';
import { CHART_FORMATS, GPU_CHARTS, JOB_CHARTS, cpuMode, gpuChartData, jobChartData } from '../shared/history_data.js';
import { h } from './dom.js';

const num = (x) => typeof x === 'number' && Number.isFinite(x);

/** The chart window [t0, t1] for the chosen span, or null before any data. */
function timeWindow(state, samples, doc) {
  const last = samples.length ? samples[samples.length - 1].time_unix_s : (doc && num(doc.time_unix_s) ? doc.time_unix_s : null);
  if (last === null) return null;
  let t0 = last - Number(state.window);
  if (state.window === 'all') {
    t0 = samples.length ? samples[0].time_unix_s : last - 60;
    // show task events that came just before the first sample (e.g. train_start), within a minute
    if (state.history.events.length) t0 = Math.min(t0, Math.max(state.history.events[0].time_unix_s - 1, t0 - 60));
  }
  if (!(last - t0 >= 10)) t0 = last - 10;
  return { t0, t1: last, last };
}

function legend({ fig, changed }, name, series) {
  const el = fig(name).querySelector('.legend');
  if (!changed(`legend-${name}`, series.map((s) => [s.key, s.label, s.title]))) return;
  el.replaceChildren(...series.map((s) => h('span', { title: s.title || '', 'data-series': s.key },
    h('i', { class: s.dash ? 'dash' : null, style: s.dash ? `border-color:${s.color}` : `background:${s.color}` }), s.label)));
}

function gpuCharts({ charts, fig, tr }, doc, samples, common) {
  const data = gpuChartData(doc, samples, common.t0, tr);
  for (const [name, d] of Object.entries(data)) charts[name].setData({ ...common, ...d });
  const growth = doc && doc.memory_growth; // the verdict's decision (memory-growth's evidence), shown as is
  const flag = fig('mem').querySelector('.chart-flag');
  flag.dataset.testid = 'mem-growing';
  flag.textContent = growth ? tr('chart.growing', { rate: fmtMiB(growth.rate_mib_per_min) }) : '';
  return Object.fromEntries(Object.entries(data).map(([name, d]) => [name, d.series]));
}

function jobCharts({ charts }, samples, common, tr) {
  const data = jobChartData(samples, common.t0, tr);
  for (const [name, d] of Object.entries(data)) charts[name].setData({ ...common, ...d });
  return Object.fromEntries(Object.entries(data).map(([name, d]) => [name, d.series]));
}

function render(ctx, state) {
  const { charts, fig, tr } = ctx;
  const doc = state.doc;
  const samples = state.history.samples;
  const cpu = cpuMode(doc);
  for (const c of Object.values(charts)) c.setEmptyText(tr('chart.noData'));
  for (const name of JOB_CHARTS) fig(name).hidden = !cpu;
  for (const name of ['mem', 'util']) fig(name).hidden = cpu;
  document.querySelector('[data-testid="chart-cpu-note"]').hidden = !cpu;
  const win = timeWindow(state, samples, doc);
  if (win) {
    const events = state.history.events.filter((e) => e.time_unix_s >= win.t0 && e.time_unix_s <= win.t1);
    const common = { t0: win.t0, t1: win.t1, events, gapS: Math.max(5, 3 * (state.history.intervalS || (doc && doc.interval_s) || 1)) };
    const drawn = cpu ? jobCharts(ctx, samples, common, tr) : gpuCharts(ctx, doc, samples, common);
    for (const [name, series] of Object.entries(drawn)) {
      legend(ctx, name, series);
      const f = fig(name);
      f.dataset.samples = String(samples.length);
      f.dataset.lastTime = String(win.last);
    }
    // power and temperature only where the driver reports them
    for (const name of ['power', 'temp']) fig(name).hidden = cpu || !(drawn[name] || []).some((s) => s.points.length);
  } else for (const name of ['power', 'temp']) fig(name).hidden = true;
  renderEvents(ctx, state);
}

function renderEvents({ tr, changed }, state) {
  const evs = state.history.events.slice(-12).reverse();
  if (!changed('events', evs)) return;
  const list = document.querySelector('.event-list');
  list.replaceChildren();
  if (!evs.length) { list.appendChild(h('li', { class: 'none', text: tr('events.none') })); return; }
  for (const e of evs) {
    list.appendChild(h('li', { 'data-testid': 'event' },
      h('span', { class: 'ev-time', text: fmtClock(e.time_unix_s) }),
      h('span', { class: 'ev-name', text: e.name || NA }),
      e.pid ? h('span', { class: 'ev-pid', text: tr('events.pid', { pid: e.pid }) }) : null));
  }
}

export function createHistoryView({ tr, changed }) {
  const $ = (sel) => document.querySelector(sel);
  const fig = (name) => $(`[data-testid="chart-${name}"]`);
  const group = [];
  const tooltip = $('[data-testid="tooltip"]');
  const eventLabel = (e) => [e.name || NA, e.pid ? tr('events.pid', { pid: e.pid }) : null].filter(Boolean).join(' · ');
  const charts = Object.fromEntries([...GPU_CHARTS, ...JOB_CHARTS].map((name) => [name, new TimeChart(fig(name).querySelector('.chart-body'), {
    group, tooltip, eventLabel, eventsLabel: (n) => tr('chart.events', { n }), title: () => tr(`chart.${name}`), formatValue: CHART_FORMATS[name],
  })]));

  const ctx = { charts, fig, tr, changed };
  return { render: (state) => render(ctx, state) };
}
