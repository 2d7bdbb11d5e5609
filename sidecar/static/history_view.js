// history_view.js — the page's history block: per GPU, memory, utilisation (with GPM SM activity and
// occupancy where the GPU has GPM), power and temperature; on a machine without an NVIDIA GPU (no GPU
// listed, or NVML not usable), the job's CPU, resident memory and training rate instead; and the
// events list. Charts are charts.js's TimeChart; the data comes from the page's merged samples.

import { NA, SERIES_COLORS, fmtClock, fmtMiB, fmtPct, fmtRate } from './format.js';
import { TimeChart, jobPoints, niceTicks, pointsByGpu } from './charts.js';
import { h } from './dom.js';

const GPU_CHARTS = ['mem', 'util', 'power', 'temp'];
const JOB_CHARTS = ['cpu', 'rss', 'rate'];
const DASH = { smActive: '6 3', smOccupancy: '2 3' };
const num = (x) => typeof x === 'number' && Number.isFinite(x);
const color = (i) => SERIES_COLORS[i % SERIES_COLORS.length];

/** True when the job's history is the CPU's: no NVIDIA GPU listed, or NVML cannot be queried. */
export function cpuMode(doc) {
  return !!doc && (!Array.isArray(doc.gpus) || !doc.gpus.length || (doc.nvml && doc.nvml.ok === false));
}

function maxOf(series, t0) {
  let m = 0;
  for (const s of series) for (const p of s.points) if (p[0] >= t0 && p[1] > m) m = p[1];
  return m;
}

/** The chart window [t0, t1] for the chosen span, or null before any data. */
function timeWindow(state, samples, doc) {
  const last = samples.length ? samples[samples.length - 1].time_unix_s : (doc && num(doc.time_unix_s) ? doc.time_unix_s : null);
  if (last === null) return null;
  let t0 = last - Number(state.window);
  if (state.window === 'all') {
    t0 = samples.length ? samples[0].time_unix_s : last - 60;
    // show task events that came just before the first sample (e.g. train_start), within a minute
    if (state.events.length) t0 = Math.min(t0, Math.max(state.events[0].time_unix_s - 1, t0 - 60));
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
  const { t0 } = common;
  const gpuNames = new Map(((doc && doc.gpus) || []).map((g) => [g.index, g]));
  const p = pointsByGpu(samples, t0 - 5);
  const title = (i) => (gpuNames.has(i) ? gpuNames.get(i).name : '');
  const mk = (map, key = (i) => String(i), label = (i) => tr('chart.gpuN', { n: i }), dash = null) => p.indices
    .filter((i) => !dash || map.get(i).length)
    .map((i) => ({ key: key(i), label: label(i), title: title(i), color: color(i), points: map.get(i), dash }));

  const mem = mk(p.mem);
  const memMax = maxOf(mem, t0);
  const memTicks = niceTicks(Math.max(memMax * 1.15, 64), 4, memMax * 1.15 >= 1024 ? 1024 : 1);
  const limits = p.indices.map((i) => gpuNames.get(i)).filter((g) => g && num(g.mem_total_mib))
    .map((g) => ({ value: g.mem_total_mib, label: `${tr('chart.gpuN', { n: g.index })} · ${tr('gpu.memTotal', { total: fmtMiB(g.mem_total_mib) })}` }));
  // "Memory growing" is the verdict's decision (the memory-growth warning's evidence), drawn as is.
  const growth = doc && doc.memory_growth;
  const trends = growth ? [{
    fit: [[growth.start_unix_s, growth.first_mib], [growth.end_unix_s, growth.last_mib]],
    label: tr('chart.trend', { rate: fmtMiB(growth.rate_mib_per_min) }),
  }] : [];
  charts.mem.setData({ ...common, series: mem, yMax: memTicks.max, yTicks: memTicks.ticks, limits, trends });
  const flag = fig('mem').querySelector('.chart-flag');
  flag.dataset.testid = 'mem-growing';
  flag.textContent = growth ? tr('chart.growing', { rate: fmtMiB(growth.rate_mib_per_min) }) : '';

  const util = [
    ...mk(p.util),
    ...mk(p.smActive, (i) => `${i}-sm-active`, (i) => tr('chart.smActive', { n: i }), DASH.smActive),
    ...mk(p.smOccupancy, (i) => `${i}-sm-occupancy`, (i) => tr('chart.smOccupancy', { n: i }), DASH.smOccupancy),
  ];
  charts.util.setData({ ...common, series: util, yMax: 100, yTicks: [0, 25, 50, 75, 100] });

  const power = mk(p.power);
  const powerLimits = p.indices.map((i) => gpuNames.get(i)).filter((g) => g && num(g.power_limit_w))
    .map((g) => ({ value: g.power_limit_w, label: tr('chart.powerLimit', { n: g.index, limit: `${Math.round(g.power_limit_w)} W` }) }));
  const powerTicks = niceTicks(Math.max(maxOf(power, t0), ...powerLimits.map((l) => l.value), 50) * 1.1, 4);
  charts.power.setData({ ...common, series: power, yMax: powerTicks.max, yTicks: powerTicks.ticks, limits: powerLimits });
  const temp = mk(p.temp);
  const tempTicks = niceTicks(Math.max(maxOf(temp, t0) * 1.15, 50), 4);
  charts.temp.setData({ ...common, series: temp, yMax: tempTicks.max, yTicks: tempTicks.ticks });
  return { mem, util, power, temp };
}

function jobCharts({ charts, tr }, samples, common) {
  const p = jobPoints(samples, common.t0 - 5);
  const one = (key, label, i, points) => ({ key, label: tr(label), color: color(i), points });
  const cpu = [one('cpu', 'chart.cpuSeries', 0, p.cpu)];
  const cpuTicks = niceTicks(Math.max(maxOf(cpu, common.t0) * 1.15, 100), 4);
  charts.cpu.setData({ ...common, series: cpu, yMax: cpuTicks.max, yTicks: cpuTicks.ticks });
  const rss = [one('rss', 'chart.rssSeries', 1, p.rss)];
  const rssMax = maxOf(rss, common.t0) * 1.15;
  const rssTicks = niceTicks(Math.max(rssMax, 64), 4, rssMax >= 1024 ? 1024 : 1);
  charts.rss.setData({ ...common, series: rss, yMax: rssTicks.max, yTicks: rssTicks.ticks });
  const rate = [one('forward', 'chart.forwardSeries', 2, p.forward), one('step', 'chart.stepSeries', 3, p.step)].filter((s) => s.points.length);
  const rateTicks = niceTicks(Math.max(maxOf(rate, common.t0) * 1.15, 1), 4);
  charts.rate.setData({ ...common, series: rate, yMax: rateTicks.max, yTicks: rateTicks.ticks });
  return { cpu, rss, rate };
}

function render(ctx, state) {
  const { charts, fig, tr } = ctx;
  const doc = state.doc;
  const samples = state.samples;
  const cpu = cpuMode(doc);
  for (const c of Object.values(charts)) c.setEmptyText(tr('chart.noData'));
  for (const name of JOB_CHARTS) fig(name).hidden = !cpu;
  for (const name of ['mem', 'util']) fig(name).hidden = cpu;
  document.querySelector('[data-testid="chart-cpu-note"]').hidden = !cpu;
  const win = timeWindow(state, samples, doc);
  if (win) {
    const events = state.events.filter((e) => e.time_unix_s >= win.t0 && e.time_unix_s <= win.t1);
    const common = { t0: win.t0, t1: win.t1, events, gapS: Math.max(5, 3 * (state.interval || (doc && doc.interval_s) || 1)) };
    const drawn = cpu ? jobCharts(ctx, samples, common) : gpuCharts(ctx, doc, samples, common);
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
  const evs = state.events.slice(-12).reverse();
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
  const pct = (v, axis) => (axis && v === 0 ? '0' : axis ? `${Math.round(v)} %` : fmtPct(v));
  const formats = {
    mem: (v, axis) => (axis && v === 0 ? '0' : fmtMiB(v)),
    util: pct,
    power: (v) => `${Math.round(v)} W`,
    temp: (v) => `${Math.round(v)} °C`,
    cpu: pct,
    rss: (v, axis) => (axis && v === 0 ? '0' : fmtMiB(v)),
    rate: (v, axis) => (axis ? fmtRate(v) : `${fmtRate(v)}/s`),
  };
  const charts = Object.fromEntries([...GPU_CHARTS, ...JOB_CHARTS].map((name) => [name, new TimeChart(fig(name).querySelector('.chart-body'), {
    group, tooltip, eventLabel, title: () => tr(`chart.${name}`), formatValue: formats[name],
  })]));

  const ctx = { charts, fig, tr, changed };
  return { render: (state) => render(ctx, state) };
}
