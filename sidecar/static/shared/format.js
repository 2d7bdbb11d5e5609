/**
 * format.js — the ONE source of truth for how dsh-gpu-dashboard data is worded and coloured.
 *
 * Shared by the standalone page (sidecar/static/page/app.js) and the DSH plugin (dsh_plugin/, which
 * bundles this file with esbuild). Plain ES module: pure functions, no DOM, no fetch, no globals,
 * no dependencies other than the one catalogue, ./i18n/en.json and ./i18n/zh.json (JSON modules:
 * the browser imports them from the sidecar, esbuild bundles them into the plugin). The sidecar
 * renders the same files with sidecar/common/catalogue.py.
 *
 * Languages: "en" | "zh". Any other value falls back to "en".
 * Absent values (null / undefined / NaN) are always rendered as NA ("—").
 *
 * Constants
 *   STATUS_COLORS        {GPU, CPU, MIXED, UNKNOWN} → CSS colour (badge background / accent).
 *                        GPU green, CPU orange, MIXED amber, UNKNOWN grey.
 *   STATUS_TEXT_COLORS   {GPU, CPU, MIXED, UNKNOWN} → readable text colour on STATUS_COLORS.
 *   SEVERITY_COLORS      {error, warning, info} → CSS colour (red, amber, grey).
 *   SEVERITY_ORDER       ["error", "warning", "info"] (most severe first).
 *   UTIL_THRESHOLDS      {low, high}: utilLevel() boundaries in percent.
 *   UTIL_COLORS          {none, idle, low, ok, high} → CSS colour for utilisation bars.
 *   LANGS                ["en", "zh"].
 *   NA                   "—".
 *   CATALOGUE            {en: {...}, zh: {...}}: every user-visible string (./i18n/en.json, ./i18n/zh.json):
 *                        the page's, the plugin's, and the verdict's messages and hints.
 *   UNREACHABLE_COMMAND      "dsh-sidecar --pid <PID>"               (attach to a running job)
 *   UNREACHABLE_COMMAND_RUN  "dsh-sidecar run -- python train.py"   (launch the job under it)
 *
 * Language
 *   pickLang(languages)        navigator.languages (array or string) → "zh" | "en". First supported wins.
 *   normLang(lang)             any value → "en" | "zh".
 *   t(lang, key, vars)         catalogue lookup with {var} substitution; falls back to en, then the key.
 *                              A var may be a reference (below), rendered in the same language.
 *   renderRef(ref, lang)       a reference {id, params} → text: t(lang, ref.id, ref.params), params that
 *                              are references rendered in turn (at most MAX_REF_DEPTH deep); null if
 *                              `ref` is not a reference. Never throws: an unknown id renders as the id,
 *                              a missing param leaves its {name}.
 *
 * Status document (GET api/dsh-gpu-dashboard/status, schema 2: ./contract.js)
 *   SCHEMA                     the schema this code reads (2).
 *   schemaMismatch(doc, lang)  null, or the words saying the sidecar speaks another schema.
 *   modelGpu(doc)              the entry of doc.gpus the verdict names (doc.model_gpu_index), or null.
 *   vendorName(gpu)            who made a GPU of doc.gpus, as shown: "NVIDIA" | "AMD" | "Intel"
 *                              ("NVIDIA" for a document from before the field).
 *   statusOf(doc)              "GPU" | "CPU" | "MIXED" | "UNKNOWN" (anything else → "UNKNOWN").
 *   statusText(doc, lang)      localised label of the status ("On GPU", "在 GPU 上", …).
 *   statusColor(doc)           STATUS_COLORS[statusOf(doc)].
 *   messageText(doc, lang)     doc.message_ref rendered in lang (falls back to the English doc.message); "" if none.
 *   warningMessage(w, lang)    same for a warning's message_ref / message.
 *   warningHint(w, lang)       same for hint_ref / hint; "" if none.
 *   severityOf(w)              "error" | "warning" | "info" (unknown → "warning").
 *   sortWarnings(ws)           new array, most severe first, stable.
 *   summarize(doc, lang)       compact chip data:
 *                              {status, color, textColor, label, util, utilPct, mem, message,
 *                               warnings: [{code, severity, color, message, hint}], worst}
 *                              util is a formatted string ("73 %" or "—"); worst is the most severe
 *                              warning severity or null. summarize(null) gives an UNKNOWN chip.
 *
 * Numbers
 *   fmtMiB(mib)                MiB → "512 MiB" | "1.5 GiB" | "23 GiB" | "—".
 *   fmtPct(x)                  percent value (0..100, may exceed 100 for CPU %) → "73 %" | "—".
 *                              Values below 10 keep one decimal ("2.5 %").
 *   fmtFraction(f)             fraction 0..1 → fmtPct(f * 100).
 *   fmtCount(n)                11_689_512 → "11.7 M"; 1200 → "1.2 k"; "—".
 *   fmtRate(hz)                3.21 → "3.2"; "—".
 *   fmtAgo(seconds, lang)      seconds elapsed → "just now" | "12 s ago" | "3 min ago" | "2 h ago" |…
 *   fmtClock(unix)             UNIX seconds → "14:03:07" (local time) | "—".
 *   fmtDuration(seconds)       90 → "1:30"; 3700 → "1:01:40".
 *   utilLevel(pct)             "none" (null) | "idle" (< 5) | "low" (< UTIL_THRESHOLDS.low) |
 *                              "ok" (< UTIL_THRESHOLDS.high) | "high".
 *   roleText(proc, lang)       process role → "main" / "data worker 1" / "rank 0" / "no probe" …
 *   deviceText(dev)            "cuda:0" | "cpu" | … | "—".
 *   deviceKind(dev)            "cuda" | "cpu" | "mixed" | "other" | "none" (for colouring device chips).
 *   SERIES_COLORS              palette for per-GPU chart series (index modulo length).
 *   gpuFrameworkKey(doc, gpu)  catalogue key saying how PyTorch sees an NVML GPU: "gpu.framework"
 *                              (as cuda:N), "gpu.frameworkHidden" (CUDA_VISIBLE_DEVICES set),
 *                              "gpu.frameworkNoCuda" (CPU build / CUDA unavailable),
 *                              "gpu.frameworkUnknown" (no probe: no runtime facts), "gpu.frameworkNotSeen".
 *   gpuFrameworkText(doc, gpu, lang)  that key, localised ("PyTorch sees it as cuda:0", …).
 */

import { SCHEMA } from './contract.js';
import en from './i18n/en.json' with { type: 'json' };
import zh from './i18n/zh.json' with { type: 'json' };

export const NA = '—';
export { SCHEMA };

/**
 * Null when `doc` speaks the schema this code reads, else the words that say so: a page or plugin
 * never guesses at a document of another schema (an older or newer sidecar).
 */
export function schemaMismatch(doc, lang) {
  if (doc && typeof doc === 'object' && doc.schema === SCHEMA) return null;
  const got = doc && typeof doc === 'object' && doc.schema !== undefined ? String(doc.schema) : '?';
  return t(lang, 'schema.mismatch', { got, want: SCHEMA });
}
export const LANGS = ['en', 'zh'];
export const CATALOGUE = { en, zh };
export const MAX_REF_DEPTH = 4;

export const STATUS_COLORS = {
  GPU: '#16a34a',
  CPU: '#ea580c',
  MIXED: '#f59e0b',
  UNKNOWN: '#6b7280',
};

export const STATUS_TEXT_COLORS = {
  GPU: '#ffffff',
  CPU: '#ffffff',
  MIXED: '#1f2937',
  UNKNOWN: '#ffffff',
};

export const SEVERITY_COLORS = {
  error: '#dc2626',
  warning: '#d97706',
  info: '#6b7280',
};

export const SEVERITY_ORDER = ['error', 'warning', 'info'];

export const UTIL_THRESHOLDS = { idle: 5, low: 40, high: 85 };

export const UTIL_COLORS = {
  none: '#9ca3af',
  idle: '#9ca3af',
  low: '#f59e0b',
  ok: '#16a34a',
  high: '#2563eb',
};

export const UNREACHABLE_COMMAND = 'dsh-sidecar --pid <PID>';
export const UNREACHABLE_COMMAND_RUN = 'dsh-sidecar run -- python train.py';

const STATUSES = ['GPU', 'CPU', 'MIXED', 'UNKNOWN'];

function isNum(x) {
  return typeof x === 'number' && Number.isFinite(x);
}

// ---------------------------------------------------------------- language

export function normLang(lang) {
  return lang === 'zh' ? 'zh' : 'en';
}

export function pickLang(languages) {
  let list = languages;
  if (typeof list === 'string') list = [list];
  if (!Array.isArray(list)) return 'en';
  for (const raw of list) {
    if (typeof raw !== 'string') continue;
    const l = raw.trim().toLowerCase();
    if (l === 'zh' || l.startsWith('zh-') || l.startsWith('zh_')) return 'zh';
    if (l === 'en' || l.startsWith('en-') || l.startsWith('en_')) return 'en';
  }
  return 'en';
}

function own(obj, key) {
  return obj !== null && typeof obj === 'object' && Object.prototype.hasOwnProperty.call(obj, key);
}

function isRef(x) {
  return own(x, 'id') && typeof x.id === 'string';
}

function fill(s, vars, lang, depth) {
  if (!vars || typeof vars !== 'object') return s;
  return s.replace(/\{(\w+)\}/g, (m, name) => {
    if (!own(vars, name)) return m;
    const v = vars[name];
    if (v === null || v === undefined) return m;
    if (isRef(v)) return depth < MAX_REF_DEPTH ? renderAt(v, lang, depth + 1) : m;
    return typeof v === 'object' ? m : String(v);
  });
}

function lookup(lang, key) {
  const cat = CATALOGUE[normLang(lang)];
  if (own(cat, key)) return cat[key];
  if (own(en, key)) return en[key];
  return String(key);
}

export function t(lang, key, vars) {
  return fill(lookup(lang, key), vars, lang, 0);
}

function renderAt(ref, lang, depth) {
  return fill(lookup(lang, ref.id), own(ref, 'params') ? ref.params : null, lang, depth);
}

export function renderRef(ref, lang) {
  return isRef(ref) ? renderAt(ref, lang, 0) : null;
}

// A text of the document: its reference rendered in `lang`, else its English string, else "".
function pickText(obj, field, lang) {
  if (!obj) return '';
  const rendered = renderRef(obj[`${field}_ref`], lang);
  if (rendered !== null && rendered.trim()) return rendered;
  const english = obj[field];
  return typeof english === 'string' && english.trim() ? english : '';
}

// ---------------------------------------------------------------- status document

export function statusOf(doc) {
  const s = doc && typeof doc.status === 'string' ? doc.status.toUpperCase() : '';
  return STATUSES.includes(s) ? s : 'UNKNOWN';
}

export function statusText(doc, lang) {
  return t(lang, `status.${statusOf(doc)}`);
}

export function statusColor(doc) {
  return STATUS_COLORS[statusOf(doc)];
}

export function messageText(doc, lang) {
  return pickText(doc, 'message', lang);
}

export function warningMessage(w, lang) {
  return pickText(w, 'message', lang);
}

export function warningHint(w, lang) {
  return pickText(w, 'hint', lang);
}

export function severityOf(w) {
  const s = w && typeof w.severity === 'string' ? w.severity.toLowerCase() : '';
  return SEVERITY_ORDER.includes(s) ? s : 'warning';
}

export function sortWarnings(ws) {
  if (!Array.isArray(ws)) return [];
  return ws
    .map((w, i) => [w, i])
    .sort((a, b) => SEVERITY_ORDER.indexOf(severityOf(a[0])) - SEVERITY_ORDER.indexOf(severityOf(b[0])) || a[1] - b[1])
    .map((p) => p[0]);
}

/** The GPU the verdict names (the model's, or the one the job uses), or null. */
const VENDOR_NAMES = { nvidia: 'NVIDIA', amd: 'AMD', intel: 'Intel' };

/** Who made the GPU, as shown ("NVIDIA" for a document from before the field). */
export function vendorName(g) {
  return VENDOR_NAMES[(g && g.vendor) || 'nvidia'] || String(g.vendor);
}

export function modelGpu(doc) {
  if (!doc || !Array.isArray(doc.gpus) || !isNum(doc.model_gpu_index)) return null;
  return doc.gpus.find((g) => g && g.index === doc.model_gpu_index) || null;
}

export function summarize(doc, lang) {
  const status = statusOf(doc);
  const warnings = sortWarnings(doc && doc.warnings).map((w) => ({
    code: w && w.code !== undefined ? w.code : null,
    severity: severityOf(w),
    color: SEVERITY_COLORS[severityOf(w)],
    message: warningMessage(w, lang),
    hint: warningHint(w, lang),
  }));
  const gpu = modelGpu(doc);
  const utilPct = gpu && isNum(gpu.util_pct) ? gpu.util_pct : null;
  return {
    status,
    color: STATUS_COLORS[status],
    textColor: STATUS_TEXT_COLORS[status],
    label: doc ? statusText(doc, lang) : t(lang, 'status.noData'),
    util: fmtPct(utilPct),
    utilPct,
    mem: fmtMiB(gpu ? gpu.mem_used_mib : null),
    message: messageText(doc, lang),
    warnings,
    worst: warnings.length ? warnings[0].severity : null,
  };
}

// ---------------------------------------------------------------- numbers

function trimZero(s) {
  return s.replace(/\.0$/, '');
}

export function fmtMiB(mib) {
  if (!isNum(mib)) return NA;
  const neg = mib < 0 ? '-' : '';
  const v = Math.abs(mib);
  if (v < 1024) return `${neg}${Math.round(v)} MiB`;
  const g = v / 1024;
  if (g < 1024) return `${neg}${g < 100 ? trimZero(g.toFixed(1)) : Math.round(g)} GiB`;
  return `${neg}${trimZero((g / 1024).toFixed(1))} TiB`;
}

export function fmtPct(x) {
  if (!isNum(x)) return NA;
  const v = Math.abs(x) < 10 && x !== 0 ? trimZero(x.toFixed(1)) : String(Math.round(x));
  return `${v} %`;
}

export function fmtFraction(f) {
  return isNum(f) ? fmtPct(f * 100) : NA;
}

export function fmtCount(n) {
  if (!isNum(n)) return NA;
  const v = Math.abs(n);
  if (v >= 1e9) return `${trimZero((n / 1e9).toFixed(1))} G`;
  if (v >= 1e6) return `${trimZero((n / 1e6).toFixed(1))} M`;
  if (v >= 1e3) return `${trimZero((n / 1e3).toFixed(1))} k`;
  return String(Math.round(n));
}

export function fmtRate(hz) {
  if (!isNum(hz)) return NA;
  if (hz === 0) return '0';
  return Math.abs(hz) < 10 ? hz.toFixed(1) : String(Math.round(hz));
}

export function fmtAgo(seconds, lang) {
  if (!isNum(seconds)) return NA;
  const s = Math.max(0, seconds);
  if (s < 2) return t(lang, 'ago.now');
  if (s < 60) return t(lang, 'ago.s', { n: Math.floor(s) });
  if (s < 3600) return t(lang, 'ago.m', { n: Math.floor(s / 60) });
  if (s < 86400) return t(lang, 'ago.h', { n: Math.floor(s / 3600) });
  return t(lang, 'ago.d', { n: Math.floor(s / 86400) });
}

function pad2(n) {
  return String(n).padStart(2, '0');
}

export function fmtClock(unix) {
  if (!isNum(unix)) return NA;
  const d = new Date(unix * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

export function fmtDuration(seconds) {
  if (!isNum(seconds)) return NA;
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  return h ? `${h}:${pad2(m)}:${pad2(r)}` : `${m}:${pad2(r)}`;
}

export function utilLevel(pct) {
  if (!isNum(pct)) return 'none';
  if (pct < UTIL_THRESHOLDS.idle) return 'idle';
  if (pct < UTIL_THRESHOLDS.low) return 'low';
  if (pct < UTIL_THRESHOLDS.high) return 'ok';
  return 'high';
}

export function roleText(proc, lang) {
  if (!proc) return NA;
  if (!proc.has_probe && !proc.role) return t(lang, 'probe.none');
  if (proc.role === 'rank' && isNum(proc.rank)) return t(lang, 'role.rankN', { n: proc.rank });
  if (proc.role === 'dataloader-worker' && isNum(proc.worker_id)) return t(lang, 'role.workerN', { n: proc.worker_id });
  if (proc.role && CATALOGUE.en[`role.${proc.role}`]) return t(lang, `role.${proc.role}`);
  return proc.role ? String(proc.role) : NA;
}

export function deviceText(dev) {
  if (dev === null || dev === undefined || dev === '') return NA;
  return String(dev);
}

export function deviceKind(dev) {
  if (dev === null || dev === undefined || dev === '') return 'none';
  const d = String(dev).toLowerCase();
  if (d.startsWith('cuda')) return 'cuda';
  if (d === 'cpu') return 'cpu';
  if (d === 'mixed') return 'mixed';
  return 'other';
}

export const SERIES_COLORS = ['#2563eb', '#16a34a', '#db2777', '#0891b2', '#9333ea', '#ca8a04', '#dc2626', '#4b5563'];

export function gpuFrameworkKey(doc, gpu) {
  if (gpu && isNum(gpu.framework_index)) return 'gpu.framework';
  const rt = (doc && doc.runtime) || {};
  if (!rt.torch) return 'gpu.frameworkUnknown';
  if (rt.cuda_available === false || !rt.cuda_build) return 'gpu.frameworkNoCuda';
  if (rt.cuda_visible_devices !== null && rt.cuda_visible_devices !== undefined) return 'gpu.frameworkHidden';
  return 'gpu.frameworkNotSeen';
}

export function gpuFrameworkText(doc, gpu, lang) {
  const key = gpuFrameworkKey(doc, gpu);
  return t(lang, key, key === 'gpu.framework' ? { dev: `cuda:${gpu.framework_index}` } : undefined);
}

/** Whether CUDA is available to the framework, and how many devices it sees: the sidecar's one text
 * for it (doc.runtime.cuda_ref, which --once prints too); "—" without a probe's torch. */
export function cudaText(rt, lang) {
  return (rt && renderRef(rt.cuda_ref, lang)) || NA;
}

/** Memory used as a percentage of the card's total, or null. */
export function gpuMemPct(gpu) {
  return gpu && isNum(gpu.mem_used_mib) && isNum(gpu.mem_total_mib) && gpu.mem_total_mib > 0
    ? (gpu.mem_used_mib / gpu.mem_total_mib) * 100
    : null;
}

/** "used of total" where the total is known, else the memory used. */
export function memOfText(gpu, lang) {
  return isNum(gpu.mem_total_mib)
    ? t(lang, 'gpu.memOf', { used: fmtMiB(gpu.mem_used_mib), total: fmtMiB(gpu.mem_total_mib) })
    : fmtMiB(gpu.mem_used_mib);
}

/** A command line, argv list or string, as one string. */
export function cmdText(cmd) {
  if (Array.isArray(cmd)) return cmd.filter((a) => a !== null && a !== undefined).map(String).join(' ');
  return cmd === null || cmd === undefined ? '' : String(cmd);
}

/** System GPUs NVML does not drive (integrated or other vendors'). */
export function unusableGpus(doc) {
  const all = doc && Array.isArray(doc.system_gpus) ? doc.system_gpus : [];
  // AMD and Intel GPUs the document lists among its GPUs (by PCI address) have their own cards.
  const listed = new Set((doc && Array.isArray(doc.gpus) ? doc.gpus : []).filter((g) => g && g.vendor && g.vendor !== 'nvidia').map((g) => g.pci_bus_id));
  return all.filter((s) => s && (s.nvml_index === null || s.nvml_index === undefined) && !listed.has(s.pci));
}
