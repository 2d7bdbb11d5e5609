/**
 * efficiency.js — the efficiency strip's facts, worded and classified (pure: no DOM, no fetch).
 *
 * Shared by the standalone page (strip.js draws them) and the DSH plugin (efficiency.jsx), so both
 * show the same facts with the same words (the catalogue, ./i18n/<lang>.json) and the same rules.
 *
 *   efficiency(doc, lang)  {step, gpu, precision, loader, syncs, empty}:
 *     step       null | {pid, summary, segments: [{key, color, fraction, label, value, text}]}
 *                (the data segment's text names the window, as dataWait does);
 *                the step breakdown of the main process (else the first process that has one);
 *                `fraction` is the share of the bar (0-1), the four of them sum to at most 1.
 *     gpu        null | {index, title, cc, items: [{key, label, value, flag}], reasons: [{name, kind, label}],
 *                gpm: [{key, label, value}], gpmNa} for the model's GPU (doc.model_gpu_index, else the
 *                first GPU the job uses); an AMD or Intel GPU's title and clock are worded as its card's
 *                ("GPU 1 · AMD", "GPU clock": "SM" is NVIDIA's word); `flag` is 'bad' for a PCIe link below its maximum;
 *                `gpmNa` is the compact reason GPM fields are null (from field_errors), or null.
 *     precision  [{key, label, value}]: param dtypes, autocast, TF32, matmul precision, cuDNN benchmark.
 *     loader     [{key, label, value}]: DataLoader settings and the last input's shape.
 *     syncs      null | {key, label, value}: host-device synchronisations per step, when counted.
 *     empty      true when there is nothing to show.
 *   reasonKind(name)        'problem' (hardware, thermal, power brake) | 'neutral' (the rest).
 *   smText(proc, lang)      a process's SM % over its GPUs, or "n/a on MIG" when it runs in MIG instances.
 *   utilText(gpu, lang)     a GPU's utilisation, or why it is unmeasured (MIG mode; Intel's drivers print none).
 *   migRows(doc, gpu, lang) the MIG instances of a GPU: [{index, label, ids, mem, pids}].
 *   dataWait(proc, lang)    a process's data wait as both process tables show it, with its window:
 *                           null | {fraction, value, window, source}; `source` 'steps' (its step
 *                           breakdown, the figure of the strip's bar) or 'batches' (its models' loaders).
 *   fmtBytesPerS(b)         1.5e9 → "1.5 GB/s".
 *   fmtStepTime(s)          0.085 → "85 ms", 1.5 → "1.50 s".
 */

import { NA, fmtFraction, fmtMiB, fmtPct, modelGpu, t, vendorName } from './format.js';

const isNum = (x) => typeof x === 'number' && Number.isFinite(x);

export const STEP_SEGMENTS = [
  { key: 'data', field: 'data_wait_fraction', label: 'eff.seg.data', color: '#f59e0b' },
  { key: 'forward', field: 'forward_fraction', label: 'eff.seg.forward', color: '#2563eb' },
  { key: 'optimizer', field: 'optimizer_fraction', label: 'eff.seg.optimizer', color: '#7c3aed' },
  { key: 'other', field: 'other_fraction', label: 'eff.seg.other', color: '#9ca3af' },
];

// Clock event reasons that cost speed the job did not ask for: styled as problems. The verdict's
// `throttled` warning uses the same ones (THROTTLE_REASONS, sidecar/verdict/efficiency.py; a test keeps them equal).
export const PROBLEM_REASONS = ['hw_slowdown', 'hw_thermal_slowdown', 'sw_thermal_slowdown', 'hw_power_brake_slowdown'];

export const GPM_FIELDS = [
  { key: 'sm_activity_fraction', label: 'eff.gpm.smActivity' },
  { key: 'sm_occupancy_fraction', label: 'eff.gpm.smOccupancy' },
  { key: 'tensor_activity_fraction', label: 'eff.gpm.tensor' },
  { key: 'dram_activity_fraction', label: 'eff.gpm.dram' },
];
const GPM_TRAFFIC = [
  { key: 'pcie', tx: 'pcie_tx_bytes_per_s', rx: 'pcie_rx_bytes_per_s', label: 'eff.gpm.pcie' },
  { key: 'nvlink', tx: 'nvlink_tx_bytes_per_s', rx: 'nvlink_rx_bytes_per_s', label: 'eff.gpm.nvlink' },
];

export function reasonKind(name) {
  return PROBLEM_REASONS.includes(name) ? 'problem' : 'neutral';
}

export function fmtStepTime(s) {
  if (!isNum(s)) return NA;
  if (s < 1) return `${s < 0.01 ? (s * 1000).toFixed(1) : Math.round(s * 1000)} ms`;
  return `${s.toFixed(2)} s`;
}

export function fmtBytesPerS(b) {
  if (!isNum(b)) return NA;
  const units = ['B/s', 'kB/s', 'MB/s', 'GB/s', 'TB/s'];
  let v = Math.abs(b);
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
  return `${v < 10 && i ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

const onOff = (v, lang) => (v === true ? t(lang, 'eff.on') : v === false ? t(lang, 'eff.off') : null);
const procs = (doc) => ((doc && Array.isArray(doc.processes)) ? doc.processes.filter(Boolean) : []);

/** The process whose step breakdown the strip shows: the main one, else the first that has one. */
export function stepProcess(doc) {
  const withSteps = procs(doc).filter((p) => p.step_breakdown);
  return withSteps.find((p) => p.role === 'main') || withSteps[0] || null;
}

/** The window a step breakdown covers, worded ("last 10 s"). */
function stepWindow(b, lang) {
  return isNum(b.window_s) ? t(lang, 'eff.window.s', { s: Math.round(b.window_s) }) : NA;
}

/**
 * A process's data wait, named by its window. Its step breakdown's when it has one (the strip's bar
 * shows the same figure over the same seconds), else the highest of its models' loader timings, over
 * the batches they cover (`data_wait_batches`; the window unnamed when an older probe leaves it out).
 */
export function dataWait(proc, lang) {
  const b = proc && proc.step_breakdown;
  if (b && isNum(b.data_wait_fraction)) {
    return { fraction: b.data_wait_fraction, value: fmtFraction(b.data_wait_fraction), window: stepWindow(b, lang), source: 'steps' };
  }
  const models = (proc && Array.isArray(proc.models) ? proc.models : []).filter((m) => m && isNum(m.data_wait_fraction));
  if (!models.length) return null;
  const m = models.reduce((a, x) => (x.data_wait_fraction > a.data_wait_fraction ? x : a));
  const window = isNum(m.data_wait_batches) ? t(lang, 'eff.window.batches', { n: m.data_wait_batches }) : null;
  return { fraction: m.data_wait_fraction, value: fmtFraction(m.data_wait_fraction), window, source: 'batches' };
}

function stepFacts(doc, lang) {
  const p = stepProcess(doc);
  if (!p) return null;
  const b = p.step_breakdown;
  const window = stepWindow(b, lang);
  const sum = STEP_SEGMENTS.reduce((a, s) => a + (isNum(b[s.field]) ? Math.max(0, b[s.field]) : 0), 0);
  const scale = sum > 1 ? sum : 1;
  const segments = STEP_SEGMENTS.map((s) => {
    const f = isNum(b[s.field]) ? Math.max(0, b[s.field]) : null;
    const label = t(lang, s.label);
    const value = fmtFraction(f);
    // The data wait names its window: the process table shows the same figure with the same words.
    const text = s.key === 'data' ? t(lang, 'eff.seg.valueWindow', { label, pct: value, window }) : t(lang, 'eff.seg.value', { label, pct: value });
    return { key: s.key, color: s.color, fraction: f === null ? 0 : f / scale, label, value, text };
  });
  const summary = t(lang, 'eff.step.summary', { time: fmtStepTime(b.step_s), steps: isNum(b.steps) ? b.steps : NA, window, pid: p.pid });
  return { pid: p.pid, summary, segments };
}

/** The GPU the strip describes: the model's, else the first GPU a process of the job uses. */
export function stripGpu(doc) {
  const g = modelGpu(doc);
  if (g) return g;
  const gpus = (doc && Array.isArray(doc.gpus)) ? doc.gpus.filter(Boolean) : [];
  const used = new Set(procs(doc).flatMap((p) => (p.gpu || []).map((u) => u && u.index)));
  return gpus.find((x) => used.has(x.index)) || null;
}

function pcieItem(g, lang) {
  if (!isNum(g.pcie_link_gen) && !isNum(g.pcie_link_width)) return null;
  const link = (gen, width) => t(lang, 'eff.pcie.link', { gen: isNum(gen) ? gen : '?', width: isNum(width) ? width : '?' });
  const now = link(g.pcie_link_gen, g.pcie_link_width);
  const hasMax = isNum(g.pcie_link_gen_max) || isNum(g.pcie_link_width_max);
  const degraded = (isNum(g.pcie_link_gen_max) && isNum(g.pcie_link_gen) && g.pcie_link_gen < g.pcie_link_gen_max)
    || (isNum(g.pcie_link_width_max) && isNum(g.pcie_link_width) && g.pcie_link_width < g.pcie_link_width_max);
  const value = hasMax ? t(lang, 'eff.pcie.ofMax', { now, max: link(g.pcie_link_gen_max ?? g.pcie_link_gen, g.pcie_link_width_max ?? g.pcie_link_width) }) : now;
  return { key: 'pcie', label: t(lang, 'eff.pcie'), value, flag: degraded ? 'bad' : null, note: degraded ? t(lang, 'eff.pcie.degraded') : null };
}

/** NVIDIA's GPUs: "SM clock"; AMD's shader clock (sclk) and Intel's GT clock, which the document
 * carries in the same fields, are "GPU clock". */
function clockLabel(g, lang) {
  return vendorName(g) === 'NVIDIA' ? t(lang, 'eff.clock') : t(lang, 'eff.clock.gpu');
}

function gpuItems(g, lang) {
  const items = [];
  const mhz = (v) => String(Math.round(v));
  if (isNum(g.sm_clock_mhz)) {
    const value = isNum(g.sm_clock_max_mhz) ? t(lang, 'eff.clock.value', { now: mhz(g.sm_clock_mhz), max: mhz(g.sm_clock_max_mhz) }) : t(lang, 'eff.clock.now', { now: mhz(g.sm_clock_mhz) });
    const pct = isNum(g.sm_clock_max_mhz) && g.sm_clock_max_mhz > 0 ? (100 * g.sm_clock_mhz) / g.sm_clock_max_mhz : null;
    items.push({ key: 'clock', label: clockLabel(g, lang), value, pct, note: isNum(g.mem_clock_mhz) ? t(lang, 'eff.clock.mem', { mhz: mhz(g.mem_clock_mhz) }) : null });
  }
  if (isNum(g.power_w)) {
    const w = String(Math.round(g.power_w));
    const value = isNum(g.power_limit_w) ? t(lang, 'eff.power.value', { w, limit: String(Math.round(g.power_limit_w)) }) : t(lang, 'eff.power.now', { w });
    const pct = isNum(g.power_limit_w) && g.power_limit_w > 0 ? (100 * g.power_w) / g.power_limit_w : null;
    items.push({ key: 'power', label: t(lang, 'eff.power'), value, pct });
  }
  if (isNum(g.temperature_c)) items.push({ key: 'temp', label: t(lang, 'eff.temp'), value: t(lang, 'eff.temp.value', { c: String(Math.round(g.temperature_c)) }) });
  const pcie = pcieItem(g, lang);
  if (pcie) items.push(pcie);
  return items;
}

/** GPM values present, and one compact line for those that are null, with their field_errors. */
function gpmFacts(g, lang) {
  const errors = g.field_errors || {};
  const gpm = [];
  const missing = []; // [label, reason]
  for (const f of GPM_FIELDS) {
    if (isNum(g[f.key])) gpm.push({ key: f.key, label: t(lang, f.label), value: fmtFraction(g[f.key]) });
    else if (errors[f.key]) missing.push([t(lang, f.label), String(errors[f.key])]);
  }
  for (const f of GPM_TRAFFIC) {
    if (isNum(g[f.tx]) || isNum(g[f.rx])) gpm.push({ key: f.key, label: t(lang, f.label), value: t(lang, 'eff.gpm.traffic', { tx: fmtBytesPerS(g[f.tx]), rx: fmtBytesPerS(g[f.rx]) }) });
    else if (errors[f.tx] || errors[f.rx]) missing.push([t(lang, f.label), String(errors[f.tx] || errors[f.rx])]);
  }
  if (!missing.length) return { gpm, gpmNa: null };
  const reason = [...new Set(missing.map((m) => m[1]))].join('; ');
  // all of GPM missing: why, once; some of it: which, and why
  const gpmNa = gpm.length
    ? t(lang, 'eff.gpm.someNa', { fields: missing.map((m) => m[0]).join(', '), reason })
    : t(lang, 'eff.gpm.na', { reason });
  return { gpm, gpmNa };
}

function gpuFacts(doc, lang) {
  const g = stripGpu(doc);
  if (!g) return null;
  const reasons = (Array.isArray(g.clock_event_reasons) ? g.clock_event_reasons : [])
    .map((name) => ({ name, kind: reasonKind(name), label: t(lang, `clock-reason.${name}`) }));
  return {
    index: g.index,
    // An AMD or Intel GPU is headed as its card on the page is ("GPU 1 · AMD"): its number is the
    // sidecar's, after NVML's, not the framework's (a ROCm build's cuda:0 may be GPU 1 here)
    title: vendorName(g) === 'NVIDIA' ? t(lang, 'eff.gpu.title', { n: g.index }) : t(lang, 'gpu.vendorN', { n: g.index, vendor: vendorName(g) }),
    cc: g.compute_capability ? t(lang, 'eff.gpu.cc', { cc: g.compute_capability }) : null,
    items: gpuItems(g, lang),
    reasons,
    reasonsNone: Array.isArray(g.clock_event_reasons) && !g.clock_event_reasons.length ? t(lang, 'eff.reasons.none') : null,
    ...gpmFacts(g, lang),
  };
}

/** The first model of the step process, else of the main process, else any. */
function firstModel(doc) {
  const order = [stepProcess(doc), ...procs(doc).filter((p) => p.role === 'main'), ...procs(doc)].filter(Boolean);
  for (const p of order) if (Array.isArray(p.models) && p.models.length) return { proc: p, model: p.models[0] };
  return { proc: order[0] || null, model: null };
}

function precisionFacts(doc, lang) {
  const { proc, model } = firstModel(doc);
  const mathProc = [proc, ...procs(doc)].find((p) => p && p.math) || null;
  const math = (mathProc && mathProc.math) || {};
  const out = [];
  const add = (key, label, value) => { if (value !== null && value !== undefined && value !== '') out.push({ key, label: t(lang, label), value: String(value) }); };
  if (model && Array.isArray(model.param_dtypes) && model.param_dtypes.length) add('dtypes', 'eff.dtypes', model.param_dtypes.join(', '));
  if (model) add('autocast', 'eff.autocast', model.autocast === 'off' ? t(lang, 'eff.off') : model.autocast);
  add('tf32', 'eff.tf32', onOff(math.allow_tf32_matmul, lang));
  add('tf32Cudnn', 'eff.tf32Cudnn', onOff(math.cudnn_allow_tf32, lang));
  add('matmulPrecision', 'eff.matmulPrecision', math.float32_matmul_precision);
  add('cudnnBenchmark', 'eff.cudnnBenchmark', onOff(math.cudnn_benchmark, lang));
  return out;
}

function loaderFacts(doc, lang) {
  const { model } = firstModel(doc);
  const ls = (model && model.loader_settings) || {};
  const out = [];
  const add = (key, label, value) => { if (value !== null && value !== undefined) out.push({ key, label: t(lang, label), value: String(value) }); };
  add('workers', 'eff.loader.workers', isNum(ls.num_workers) ? ls.num_workers : null);
  add('pin', 'eff.loader.pin', typeof ls.pin_memory === 'boolean' ? String(ls.pin_memory) : null);
  add('persistent', 'eff.loader.persistent', typeof ls.persistent_workers === 'boolean' ? String(ls.persistent_workers) : null);
  add('batch', 'eff.loader.batch', isNum(ls.batch_size) ? ls.batch_size : null);
  if (model && Array.isArray(model.input_shape)) add('input', 'eff.input', `[${model.input_shape.join(', ')}]`);
  return out;
}

function syncsFact(doc, lang) {
  const p = [stepProcess(doc), firstModel(doc).proc, ...procs(doc)].find((x) => x && isNum(x.syncs_per_step));
  return p ? { key: 'syncs', label: t(lang, 'eff.syncs'), value: t(lang, 'eff.syncs.value', { n: Math.round(p.syncs_per_step * 10) / 10 }) } : null;
}

export function efficiency(doc, lang) {
  const step = stepFacts(doc, lang);
  const gpu = gpuFacts(doc, lang);
  const precision = precisionFacts(doc, lang);
  const loader = loaderFacts(doc, lang);
  const syncs = syncsFact(doc, lang);
  const gpuEmpty = !gpu || (!gpu.items.length && !gpu.reasons.length && !gpu.gpm.length && !gpu.gpmNa);
  const empty = !step && gpuEmpty && !precision.length && !loader.length && !syncs;
  return { step, gpu: gpuEmpty ? null : gpu, precision, loader, syncs, empty };
}

/** A process's SM % summed over its GPUs; "n/a on MIG" where it runs only in MIG instances. */
export function smText(proc, lang) {
  const rows = (proc && Array.isArray(proc.gpu) ? proc.gpu : []).filter(Boolean);
  const sm = rows.reduce((a, g) => (isNum(g.sm_util_pct) ? (a ?? 0) + g.sm_util_pct : a), null);
  if (sm === null && rows.length && rows.every((g) => isNum(g.mig_index))) return t(lang, 'eff.migNa');
  return fmtPct(sm);
}

/** A GPU's utilisation; "n/a on MIG" where MIG mode leaves it unmeasured (never a 0 %). */
export function utilText(gpu, lang) {
  if (gpu && !isNum(gpu.util_pct) && gpu.mig_mode === true) return t(lang, 'eff.migNa');
  // Intel's drivers print no busy figure: say so rather than a bare n/a
  if (gpu && !isNum(gpu.util_pct) && gpu.vendor === 'intel') return t(lang, 'gpu.util.none', { driver: gpu.driver || 'i915' });
  return fmtPct(gpu ? gpu.util_pct : null);
}

/** The MIG instances of `gpu` with their memory and the job's processes in each. */
export function migRows(doc, gpu, lang) {
  const devs = gpu && Array.isArray(gpu.mig_devices) ? gpu.mig_devices.filter(Boolean) : [];
  return devs.map((d) => ({
    index: d.index,
    label: t(lang, 'eff.mig.item', { index: d.index }),
    ids: isNum(d.gpu_instance_id) ? t(lang, 'eff.mig.ids', { gi: d.gpu_instance_id, ci: isNum(d.compute_instance_id) ? d.compute_instance_id : NA }) : '',
    mem: isNum(d.mem_total_mib) ? t(lang, 'gpu.memOf', { used: fmtMiB(d.mem_used_mib), total: fmtMiB(d.mem_total_mib) }) : fmtMiB(d.mem_used_mib),
    pids: procs(doc).filter((p) => (p.gpu || []).some((u) => u && u.index === gpu.index && u.mig_index === d.index)).map((p) => p.pid),
  }));
}
