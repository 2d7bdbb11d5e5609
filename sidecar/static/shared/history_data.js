// history_data.js — what the history charts draw (pure: no DOM), shared by the page (history_view.js)
// and the DSH plugin (charts.jsx): per GPU, memory, utilisation with GPM SM activity and occupancy
// (dashed, where the GPU has GPM), power with its limit, temperature; on a machine without an NVIDIA
// GPU, the job's CPU, resident memory and forward/step rates. Each chart's data is
// {series, yMax, yTicks, limits?, trends?} for charts.js's TimeChart.setData (plus t0, t1, events, gapS).

import { SERIES_COLORS, fmtMiB, fmtPct, fmtRate } from './format.js';
import { jobPoints, niceTicks, pointsByGpu } from './charts.js';

export const GPU_CHARTS = ['mem', 'util', 'power', 'temp'];
export const JOB_CHARTS = ['cpu', 'rss', 'rate'];
const DASH = { smActive: '6 3', smOccupancy: '2 3' };
const num = (x) => typeof x === 'number' && Number.isFinite(x);
const color = (i) => SERIES_COLORS[i % SERIES_COLORS.length];

const pct = (v, axis) => (axis && v === 0 ? '0' : axis ? `${Math.round(v)} %` : fmtPct(v));
const mib = (v, axis) => (axis && v === 0 ? '0' : fmtMiB(v));
/** How each chart writes a value: formatValue(v, axis) of TimeChart (axis: a tick label). */
export const CHART_FORMATS = {
  mem: mib,
  util: pct,
  power: (v) => `${Math.round(v)} W`,
  temp: (v) => `${Math.round(v)} °C`,
  cpu: pct,
  rss: mib,
  rate: (v, axis) => (axis ? fmtRate(v) : `${fmtRate(v)}/s`),
};

/** True when the job's history is the CPU's: no NVIDIA GPU listed, or NVML cannot be queried. */
export function cpuMode(doc) {
  return !!doc && (!Array.isArray(doc.gpus) || !doc.gpus.length || (doc.nvml && doc.nvml.ok === false));
}

function maxOf(series, t0) {
  let m = 0;
  for (const s of series) for (const p of s.points) if (p[0] >= t0 && p[1] > m) m = p[1];
  return m;
}

export function gpuChartData(doc, samples, t0, tr) {
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

  const util = [
    ...mk(p.util),
    ...mk(p.smActive, (i) => `${i}-sm-active`, (i) => tr('chart.smActive', { n: i }), DASH.smActive),
    ...mk(p.smOccupancy, (i) => `${i}-sm-occupancy`, (i) => tr('chart.smOccupancy', { n: i }), DASH.smOccupancy),
  ];

  const power = mk(p.power);
  // one line per limit value, naming every GPU that has it (two equal limits would draw over each other)
  const byLimit = new Map();
  for (const g of p.indices.map((i) => gpuNames.get(i))) {
    if (g && num(g.power_limit_w)) byLimit.set(g.power_limit_w, [...(byLimit.get(g.power_limit_w) || []), g.index]);
  }
  const powerLimits = [...byLimit].map(([value, ns]) => ({ value, label: tr('chart.powerLimit', { n: ns.join(', '), limit: `${Math.round(value)} W` }) }));
  const powerTicks = niceTicks(Math.max(maxOf(power, t0), ...powerLimits.map((l) => l.value), 50) * 1.1, 4);
  const temp = mk(p.temp);
  const tempTicks = niceTicks(Math.max(maxOf(temp, t0) * 1.15, 50), 4);
  return {
    mem: { series: mem, yMax: memTicks.max, yTicks: memTicks.ticks, limits, trends },
    util: { series: util, yMax: 100, yTicks: [0, 25, 50, 75, 100] },
    power: { series: power, yMax: powerTicks.max, yTicks: powerTicks.ticks, limits: powerLimits },
    temp: { series: temp, yMax: tempTicks.max, yTicks: tempTicks.ticks },
  };
}

export function jobChartData(samples, t0, tr) {
  const p = jobPoints(samples, t0 - 5);
  const one = (key, label, i, points) => ({ key, label: tr(label), color: color(i), points });
  const cpu = [one('cpu', 'chart.cpuSeries', 0, p.cpu)];
  const cpuTicks = niceTicks(Math.max(maxOf(cpu, t0) * 1.15, 100), 4);
  const rss = [one('rss', 'chart.rssSeries', 1, p.rss)];
  const rssMax = maxOf(rss, t0) * 1.15;
  const rssTicks = niceTicks(Math.max(rssMax, 64), 4, rssMax >= 1024 ? 1024 : 1);
  const rate = [one('forward', 'chart.forwardSeries', 2, p.forward), one('step', 'chart.stepSeries', 3, p.step)].filter((s) => s.points.length);
  const rateTicks = niceTicks(Math.max(maxOf(rate, t0) * 1.15, 1), 4);
  return {
    cpu: { series: cpu, yMax: cpuTicks.max, yTicks: cpuTicks.ticks },
    rss: { series: rss, yMax: rssTicks.max, yTicks: rssTicks.ticks },
    rate: { series: rate, yMax: rateTicks.max, yTicks: rateTicks.ticks },
  };
}

