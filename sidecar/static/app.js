// app.js — the standalone dsh-gpu-dashboard page served by the sidecar at GET /.
// No framework: fetch the status document every `refresh` seconds (paused while the tab is hidden),
// render it with the shared rules of format.js, the efficiency strip with strip.js, and the history with
// history_view.js (charts.js underneath).
// All URLs are relative so the page also works behind a path prefix.

import {
  CATALOGUE, NA, STATUS_COLORS, STATUS_TEXT_COLORS, UNREACHABLE_COMMAND,
  UNREACHABLE_COMMAND_RUN, UTIL_COLORS, deviceKind, fmtAgo, fmtClock, fmtCount, fmtMiB,
  fmtPct, fmtRate, cmdText, cudaText, gpuFrameworkKey, gpuMemPct, memOfText, unusableGpus, gpuFrameworkText, messageText, modelGpu, schemaMismatch, pickLang, roleText,
  severityOf, sortWarnings, statusOf, statusText, t, utilLevel, warningHint, warningMessage,
} from './format.js';
import { jobQuery, renderJobs } from './jobs.js';
import { h, richText } from './dom.js';
import { dataWait, smText, utilText } from './efficiency.js';
import { migList, renderStrip } from './strip.js';
import { createHistoryView } from './history_view.js';

/** @typedef {import('./contract.js').StatusDocument} StatusDocument */
/** @typedef {import('./contract.js').HistoryDocument} HistoryDocument */

const STATUS_URL = 'api/dsh-gpu-dashboard/status';
const HISTORY_URL = 'api/dsh-gpu-dashboard/history';
const LANG_KEY = 'dsh-gpu-dashboard.lang';
const WINDOW_KEY = 'dsh-gpu-dashboard.window';
const MAX_SAMPLES = 20000;
const MAX_EVENTS = 500;

// ------------------------------------------------------------------ config

const params = new URLSearchParams(location.search);

// The token of `/?token=`: kept in this tab's sessionStorage (it belongs to this origin, host and
// port) and sent as `Authorization: Bearer`, never as a cookie, which a browser would send to every
// port of the host (another user's listener included). It leaves the address bar at once.
const TOKEN_KEY = 'dsh-gpu-dashboard.token';
const token = (() => {
  const fromUrl = params.get('token');
  if (fromUrl === null) {
    try { return sessionStorage.getItem(TOKEN_KEY); } catch { return null; }
  }
  params.delete('token');
  const q = params.toString();
  history.replaceState(null, '', `${location.pathname}${q ? `?${q}` : ''}${location.hash}`);
  try { sessionStorage.setItem(TOKEN_KEY, fromUrl); } catch { /* storage off: this page load only */ }
  return fromUrl;
})();
const REQUEST_HEADERS = token ? { Accept: 'application/json', Authorization: `Bearer ${token}` } : { Accept: 'application/json' };

function readRefresh() {
  const v = parseFloat(params.get('refresh'));
  return Number.isFinite(v) && v > 0 ? Math.min(Math.max(v, 0.2), 3600) : 1.5;
}

function storageGet(key) {
  try { return localStorage.getItem(key); } catch { return null; }
}
function storageSet(key, value) {
  try { localStorage.setItem(key, value); } catch { /* private mode */ }
}

function initialLang() {
  const fromUrl = params.get('lang');
  if (fromUrl && CATALOGUE[fromUrl]) return fromUrl;
  const stored = storageGet(LANG_KEY);
  if (stored && CATALOGUE[stored]) return stored;
  return pickLang(navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language]);
}

const state = {
  lang: initialLang(),
  refreshS: readRefresh(),
  doc: null,
  okAt: null,          // Date.now() of the last successful status fetch
  reachable: null,     // null until the first answer
  error: null,
  samples: [],
  events: [],
  lastSampleT: null,
  identity: null,
  interval: null,
  window: ['60', '300', '900', 'all'].includes(storageGet(WINDOW_KEY)) ? storageGet(WINDOW_KEY) : '300',
  timer: null,
  inflight: false,
  keys: {},
  job: params.get('job') || null, // null: the sidecar's default job
};

const $ = (sel, root = document) => root.querySelector(sel);
const tr = (key, vars) => t(state.lang, key, vars);

// ------------------------------------------------------------------ DOM helpers

// Re-render a section only when what it shows changed (keeps selections and hover stable).
function changed(name, value) {
  const key = JSON.stringify([state.lang, value]);
  if (state.keys[name] === key) return false;
  state.keys[name] = key;
  return true;
}

function devChip(dev) {
  if (dev === null || dev === undefined || dev === '') return document.createTextNode(NA);
  return h('span', { class: `chip dev-${deviceKind(dev)}`, 'data-device': dev, text: dev });
}

const num = (x) => typeof x === 'number' && Number.isFinite(x);

// ------------------------------------------------------------------ static text

function applyStaticText() {
  document.documentElement.lang = state.lang === 'zh' ? 'zh-CN' : 'en';
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = tr(e.dataset.i18n);
  for (const e of document.querySelectorAll('[data-i18n-title]')) e.title = tr(e.dataset.i18nTitle);
  $('.lang-switch').dataset.lang = state.lang;
  $('.cmd-attach').textContent = UNREACHABLE_COMMAND;
  $('.cmd-run').textContent = UNREACHABLE_COMMAND_RUN;
  for (const b of document.querySelectorAll('.window-select button')) {
    b.setAttribute('aria-pressed', String(b.dataset.window === state.window));
  }
}

// ------------------------------------------------------------------ hero: badge, message, facts, warnings

/** @param {StatusDocument|null} doc */
function renderHero(doc) {
  const status = statusOf(doc);
  const root = document.documentElement;
  root.style.setProperty('--status', STATUS_COLORS[status]);
  root.style.setProperty('--status-text', STATUS_TEXT_COLORS[status]);
  const badge = $('[data-testid="badge"]');
  badge.dataset.status = status;
  $('.badge-text', badge).textContent = doc ? statusText(doc, state.lang) : tr('status.noData');
  const label = doc ? statusText(doc, state.lang) : tr('status.noData');
  document.title = `${label} · ${tr('app.title')}`;
  setFavicon(STATUS_COLORS[status]);

  if (!changed('hero', doc && [doc.status, doc.message, doc.message_ref, doc.target, doc.model_device,
    doc.input_device, modelGpu(doc), doc.runtime, doc.warnings,
    Math.floor((doc.time_unix_s || 0) / 30)])) return;

  $('[data-testid="message"]').replaceChildren(...richText(doc ? messageText(doc, state.lang) : tr('loading')));

  const tgt = doc && doc.target;
  const target = $('[data-testid="target"]');
  target.replaceChildren();
  if (tgt) {
    const bits = [h('span', { text: tr('target.pid', { pid: tgt.pid ?? NA }) })];
    if (tgt.name) bits.push(' · ', h('b', { text: tgt.name }));
    if (tgt.alive === false) bits.push(' · ', h('span', { class: 'dead', text: tr('target.exited') }));
    else if (num(tgt.create_time_unix_s) && num(doc.time_unix_s)) bits.push(' · ', tr('target.since', { ago: fmtAgo(doc.time_unix_s - tgt.create_time_unix_s, state.lang) }));
    if (tgt.cmdline) bits.push(' · ', h('code', { text: cmdText(tgt.cmdline) }));
    target.append(...bits);
    target.title = cmdText(tgt.cmdline);
  }

  const facts = $('[data-testid="facts"]');
  facts.replaceChildren();
  if (doc) {
    const fact = (key, value, testid) => h('div', { class: 'fact', 'data-testid': testid }, h('dt', { text: tr(key) }), h('dd', null, value));
    const rt = doc.runtime || {};
    const cuda = cudaText(rt, state.lang);
    const gpu = modelGpu(doc);
    facts.append(
      fact('summary.modelDevice', devChip(doc.model_device), 'fact-model-device'),
      fact('summary.inputDevice', devChip(doc.input_device), 'fact-input-device'),
      fact('summary.util', utilText(gpu, state.lang), 'fact-util'),
      fact('summary.mem', fmtMiB(gpu && gpu.mem_used_mib), 'fact-mem'),
      fact('summary.cuda', cuda, 'fact-cuda'),
    );
  }

  const list = $('[data-testid="warnings"]');
  list.replaceChildren();
  for (const w of sortWarnings(doc && doc.warnings)) {
    const sev = severityOf(w);
    const hint = warningHint(w, state.lang);
    list.appendChild(h('li', { class: 'warning', 'data-testid': 'warning', 'data-severity': sev, 'data-code': w.code },
      h('span', { class: 'sev', text: tr(`severity.${sev}`) }),
      h('span', { class: 'warning-message', 'data-testid': 'warning-message' }, richText(warningMessage(w, state.lang))),
      hint ? h('span', { class: 'warning-hint', 'data-testid': 'warning-hint' }, richText(hint)) : null,
    ));
  }
}

let faviconColor = null;
function setFavicon(color) {
  if (color === faviconColor) return;
  faviconColor = color;
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" fill="${color}"/></svg>`;
  $('#favicon').href = `data:image/svg+xml,${encodeURIComponent(svg)}`;
}

// ------------------------------------------------------------------ GPU cards

/** @param {StatusDocument|null} doc */
function modelCudaIndices(doc) {
  const set = new Set();
  const add = (dev) => {
    const m = /^cuda:(\d+)$/.exec(String(dev || ''));
    if (m) set.add(Number(m[1]));
  };
  add(doc.model_device);
  for (const p of doc.processes || []) {
    for (const mdl of p.models || []) {
      add(mdl.device);
      for (const d of mdl.devices || []) add(d);
    }
  }
  return set;
}

function meter(labelKey, pct, valueText, color, testid) {
  const w = num(pct) ? Math.max(0, Math.min(100, pct)) : 0;
  return h('div', { class: 'meter', 'data-testid': testid },
    h('span', { class: 'meter-label', text: tr(labelKey) }),
    h('div', { class: 'bar' }, h('span', { style: `width:${w.toFixed(1)}%;--fill:${color}` })),
    h('span', { class: 'meter-value', text: valueText }));
}

/** @param {StatusDocument|null} doc */
function renderGpus(doc) {
  const gpus = (doc && doc.gpus) || [];
  const igpus = unusableGpus(doc);
  const procs = (doc && doc.processes) || [];
  if (!changed('gpus', doc && [gpus, igpus, procs.map((p) => [p.pid, p.role, p.rank, p.worker_id, p.has_probe, p.gpu, p.models && p.models.map((m) => m.devices)]), doc.model_device, doc.nvml])) return;
  const grid = $('[data-testid="gpus"]');
  grid.replaceChildren();
  if (!doc) return;
  const here = modelCudaIndices(doc);

  for (const g of gpus) {
    const level = utilLevel(g.util_pct);
    const memPct = gpuMemPct(g);
    const isHere = num(g.framework_index) && here.has(g.framework_index);
    const users = procs.filter((p) => (p.gpu || []).some((u) => u.index === g.index));
    const fwKey = gpuFrameworkKey(doc, g);
    const tag = isHere ? h('span', { class: 'tag tag-model', text: tr('gpu.modelHere') })
      : fwKey === 'gpu.frameworkHidden' || fwKey === 'gpu.frameworkNotSeen' ? h('span', { class: 'tag tag-off', text: tr('gpu.hiddenTag') }) : null;
    grid.appendChild(h('article', {
      class: `card gpu-card${isHere ? ' model-here' : ''}`, 'data-testid': 'gpu-card', 'data-index': g.index,
      'data-util-level': level, 'data-model-here': isHere ? 'true' : 'false',
    },
    h('div', { class: 'gpu-head' },
      h('span', { class: 'gpu-index', text: tr('chart.gpuN', { n: g.index ?? NA }) }),
      tag),
    h('div', { class: 'gpu-name', 'data-testid': 'gpu-name', text: g.name || NA, title: [g.name, g.uuid].filter(Boolean).join('\n') }),
    h('div', { class: 'gpu-sub', 'data-testid': 'gpu-framework', text: gpuFrameworkText(doc, g, state.lang) }),
    meter('gpu.util', g.util_pct, utilText(g, state.lang), UTIL_COLORS[level], 'gpu-util'),
    meter('gpu.mem', memPct, memOfText(g, state.lang), '#7c3aed', 'gpu-mem'),
    h('div', { class: 'gpu-procs', 'data-testid': 'gpu-procs' },
      h('div', { class: 'gpu-procs-title', text: tr('gpu.procs') }),
      users.length
        ? h('ul', null, users.map((p) => {
          const u = (p.gpu || []).find((x) => x.index === g.index);
          return h('li', { 'data-pid': p.pid },
            h('span', { class: 'pid', text: String(p.pid) }),
            h('span', { class: 'role', text: roleText(p, state.lang) }),
            h('span', { class: 'mem', text: fmtMiB(u && u.mem_used_mib) }));
        }))
        : h('div', { class: 'none', text: tr('gpu.noProcs') })),
    migList(doc, g, state.lang)));
  }

  for (const g of igpus) {
    grid.appendChild(h('article', { class: 'card gpu-card igpu-card', 'data-testid': 'igpu-card', 'data-pci': g.pci || '' },
      h('div', { class: 'gpu-head' },
        h('span', { class: 'gpu-index', text: g.vendor || NA }),
        h('span', { class: 'tag tag-off', text: tr('igpu.badge') })),
      h('div', { class: 'gpu-name', 'data-testid': 'gpu-name', text: g.name || NA, title: g.name || '' }),
      h('div', { class: 'note', text: tr('igpu.note') }),
      h('div', { class: 'meta', text: [g.pci && tr('igpu.pci', { pci: g.pci }), g.driver && tr('igpu.driver', { driver: g.driver })].filter(Boolean).join(' · ') })));
  }

  if (!gpus.length) {
    const nvmlErr = doc.nvml && doc.nvml.ok === false && doc.nvml.error ? tr('runtime.nvmlError', { error: doc.nvml.error }) : '';
    grid.prepend(h('div', { class: 'card empty', 'data-testid': 'no-gpu' }, h('div', { text: tr('gpus.none') }), nvmlErr ? h('div', { class: 'meta', text: nvmlErr }) : null));
  }
}

// ------------------------------------------------------------------ process table

function treeOrder(procs) {
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  const kids = new Map();
  const roots = [];
  for (const p of procs) {
    if (p.ppid !== null && p.ppid !== undefined && byPid.has(p.ppid) && p.ppid !== p.pid) {
      if (!kids.has(p.ppid)) kids.set(p.ppid, []);
      kids.get(p.ppid).push(p);
    } else roots.push(p);
  }
  const out = [];
  const seen = new Set();
  const walk = (p, depth, last) => {
    if (seen.has(p.pid)) return;
    seen.add(p.pid);
    out.push({ p, depth, last });
    const ch = (kids.get(p.pid) || []).sort((a, b) => a.pid - b.pid);
    ch.forEach((c, i) => walk(c, depth + 1, i === ch.length - 1));
  };
  roots.sort((a, b) => a.pid - b.pid).forEach((r) => walk(r, 0, true));
  return out;
}

/** @param {StatusDocument|null} doc */
function renderProcs(doc) {
  const procs = (doc && doc.processes) || [];
  if (!changed('procs', procs)) return;
  const body = $('[data-testid="processes"] tbody');
  body.replaceChildren();
  if (!doc) return;
  if (!procs.length) {
    body.appendChild(h('tr', null, h('td', { colspan: 8, class: 'empty', text: tr('procs.none') })));
    return;
  }
  for (const { p, depth, last } of treeOrder(procs)) {
    const probed = p.has_probe === true;
    const models = p.models || [];
    const gpuMem = (p.gpu || []).reduce((a, g) => (num(g.mem_used_mib) ? (a ?? 0) + g.mem_used_mib : a), null);
    const wait = dataWait(p, state.lang);
    const inputs = [...new Set(models.map((m) => m.input_device).filter((d) => d !== null && d !== undefined))];
    const cmd = cmdText(p.cmdline);

    const procCell = h('td', null, h('div', { class: 'proc-cell', style: `--depth:${depth}` },
      depth ? h('span', { class: 'tree', text: last ? '└─' : '├─' }) : null,
      h('div', { style: 'min-width:0' },
        h('span', { class: 'proc-name', text: p.name || NA }), ' ',
        h('span', { class: 'proc-pid', 'data-testid': 'pid', text: String(p.pid) }),
        p.exited ? h('span', { class: 'chip exited', 'data-testid': 'exited', title: tr('proc.exitedTitle'), text: tr('proc.exited') }) : null,
        cmd ? h('span', { class: 'proc-cmd', title: cmd, text: cmd }) : null,
        p.probe_error ? h('span', { class: 'proc-err', text: tr('probe.error', { error: p.probe_error }) }) : null)));

    const roleCell = h('td', { 'data-testid': 'role', 'data-label': tr('col.role') }, probed
      ? h('span', { class: 'chip', text: roleText(p, state.lang) })
      : h('span', { class: 'chip no-probe', 'data-testid': 'no-probe', title: tr('probe.noneTitle'), text: tr('probe.none') }));

    const modelCell = h('td', { 'data-testid': 'model-device', 'data-label': tr('col.modelDevice') });
    if (models.length) {
      for (const m of models) {
        modelCell.append(h('div', null, devChip(m.device),
          h('span', { class: 'proc-model', text: [m.name, num(m.param_count) ? tr('model.params', { n: fmtCount(m.param_count) }) : null, num(m.forward_rate_hz) ? tr('model.rate', { n: fmtRate(m.forward_rate_hz) }) : null, num(m.step_rate_hz) ? tr('model.steps', { n: fmtRate(m.step_rate_hz) }) : null].filter(Boolean).join(' · ') })));
      }
    } else modelCell.append(NA);

    const inputCell = h('td', { 'data-testid': 'input-device', 'data-label': tr('col.inputDevice') });
    if (inputs.length) inputs.forEach((d) => inputCell.append(devChip(d), ' ')); else inputCell.append(NA);

    const memTitle = (p.gpu || []).map((g) => `${tr('chart.gpuN', { n: g.index })}: ${fmtMiB(g.mem_used_mib)}`).join('\n');
    body.appendChild(h('tr', {
      class: (probed ? 'proc' : 'proc no-probe') + (p.exited ? ' exited' : ''), 'data-testid': 'process-row', 'data-pid': p.pid, 'data-ppid': p.ppid,
      'data-depth': depth, 'data-role': p.role || '', 'data-probe': probed ? 'true' : 'false',
    },
    procCell, roleCell, modelCell, inputCell,
    h('td', { class: 'num', 'data-testid': 'gpu-mem', 'data-label': tr('col.gpuMem'), title: memTitle, text: fmtMiB(gpuMem) }),
    h('td', { class: 'num', 'data-testid': 'sm', 'data-label': tr('col.sm'), text: smText(p, state.lang) }),
    h('td', { class: 'num', 'data-testid': 'cpu', 'data-label': tr('col.cpu'), text: fmtPct(p.cpu_pct) }),
    h('td', { class: `num${wait && wait.fraction > 0.5 ? ' wait-high' : ''}`, 'data-testid': 'data-wait', 'data-label': tr('col.dataWait'), 'data-source': wait ? wait.source : null },
      h('span', { 'data-testid': 'data-wait-value', text: wait ? wait.value : NA }),
      wait && wait.window ? h('span', { class: 'wait-window', 'data-testid': 'data-wait-window', text: wait.window }) : null)));
    for (const td of body.lastChild.children) if (td !== procCell && td !== roleCell && td.textContent === NA) td.classList.add('na');
  }
}

// ------------------------------------------------------------------ runtime footer

/** @param {StatusDocument|null} doc */
function renderRuntime(doc) {
  if (!changed('runtime', doc && [doc.runtime, doc.nvml, doc.interval_s])) return;
  const foot = $('[data-testid="runtime"]');
  foot.replaceChildren();
  if (!doc) return;
  const rt = doc.runtime || {};
  const nv = doc.nvml || {};
  const item = (key, value, bad) => h('span', null, `${tr(key)} `, h('b', { class: bad ? 'bad' : null, text: value ?? NA }));
  foot.append(
    item('runtime.torch', rt.torch),
    rt.torch && !rt.cuda_build ? item('runtime.cudaBuild', tr('runtime.cudaBuildNone'), true) : item('runtime.cudaBuild', rt.cuda_build),
    item('runtime.cudnn', rt.cudnn === null || rt.cudnn === undefined ? null : String(rt.cudnn)),
    item('runtime.visible', rt.cuda_visible_devices === null || rt.cuda_visible_devices === undefined ? null : `"${rt.cuda_visible_devices}"`),
    item('runtime.driver', nv.driver),
    item('runtime.cudaDriver', nv.cuda_driver),
  );
  if (nv.ok === false && nv.error) foot.append(h('span', { class: 'bad', text: tr('runtime.nvmlError', { error: nv.error }) }));
  if (num(doc.interval_s)) foot.append(h('span', { text: tr('runtime.interval', { s: doc.interval_s }) }));
}

// ------------------------------------------------------------------ history

const historyView = createHistoryView({ tr, changed });

function resetHistory() {
  state.samples = [];
  state.events = [];
  state.lastSampleT = null;
}

function eventKey(e) {
  return `${e.time_unix_s}|${e.name}|${e.pid}`;
}

function mergeEvents(list) {
  if (!Array.isArray(list) || !list.length) return;
  const have = new Set(state.events.map(eventKey));
  let added = false;
  for (const e of list) {
    if (!e || !num(e.time_unix_s)) continue;
    const k = eventKey(e);
    if (have.has(k)) continue;
    have.add(k);
    state.events.push(e);
    added = true;
  }
  if (added) {
    state.events.sort((a, b) => a.time_unix_s - b.time_unix_s);
    if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
  }
}

function mergeHistory(hist) {
  if (!hist || !Array.isArray(hist.samples)) return;
  if (num(hist.interval_s)) state.interval = hist.interval_s;
  const fresh = hist.samples.filter((s) => s && num(s.time_unix_s) && (state.lastSampleT === null || s.time_unix_s > state.lastSampleT));
  if (fresh.length) {
    fresh.sort((a, b) => a.time_unix_s - b.time_unix_s);
    state.samples.push(...fresh);
    state.lastSampleT = state.samples[state.samples.length - 1].time_unix_s;
    if (state.samples.length > MAX_SAMPLES) state.samples.splice(0, state.samples.length - MAX_SAMPLES);
  }
  mergeEvents(hist.events);
}

function renderCharts() {
  historyView.render(state);
}

// ------------------------------------------------------------------ reachability + last updated

function renderUpdated() {
  const el = $('[data-testid="last-updated"]');
  const text = $('.updated-text', el);
  el.classList.toggle('live', state.reachable === true && !document.hidden);
  el.classList.toggle('down', state.reachable === false);
  el.classList.toggle('paused', document.hidden && state.reachable !== false);
  let s;
  if (state.okAt === null) s = tr('updated.never');
  else s = tr('updated.label', { ago: fmtAgo((Date.now() - state.okAt) / 1000, state.lang) });
  if (document.hidden) s = `${s} · ${tr('updated.paused')}`;
  text.textContent = s;
  el.title = state.doc && num(state.doc.time_unix_s) ? fmtClock(state.doc.time_unix_s) : '';
  if (state.okAt !== null) el.dataset.updatedAt = String(state.okAt);

  const box = $('[data-testid="unreachable"]');
  box.hidden = state.reachable !== false;
  document.body.classList.toggle('stale', state.reachable === false);
  document.body.classList.toggle('nodata', state.reachable === false && state.doc === null);
  document.body.classList.toggle('live', state.reachable === true);
  if (state.reachable === false) {
    $('.retry', box).textContent = tr('unreachable.retry', { s: state.refreshS });
    $('.last-seen', box).textContent = state.okAt === null ? '' : tr('unreachable.lastSeen', { ago: fmtAgo((Date.now() - state.okAt) / 1000, state.lang) });
    $('.fetch-error', box).textContent = state.error ? tr('unreachable.error', { error: state.error }) : '';
  }
}

// ------------------------------------------------------------------ fetching

async function fetchJSON(url) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), Math.max(3000, state.refreshS * 2000));
  try {
    const res = await fetch(url, { cache: 'no-store', signal: ctl.signal, headers: REQUEST_HEADERS });
    if (!res.ok) {
      let detail = '';
      try { const body = await res.json(); detail = body && (body.error || body.message) ? `: ${body.error || body.message}` : ''; } catch { /* not JSON */ }
      throw Object.assign(new Error(`HTTP ${res.status}${detail}`), { status: res.status });
    }
    return await res.json();
  } catch (e) {
    if (e && e.name === 'AbortError') throw new Error('timeout');
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

function renderAll() {
  const doc = state.doc;
  renderHero(doc);
  if (changed('strip', doc && [doc.processes, doc.gpus, doc.model_gpu_index])) renderStrip($('[data-testid="efficiency"]'), doc, state.lang);
  renderGpus(doc);
  renderProcs(doc);
  renderRuntime(doc);
  renderJobs($('[data-testid="jobs"]'), doc, { h, tr, onPick: pickJob });
  renderCharts();
  renderUpdated();
}

async function poll() {
  if (state.inflight) return;
  state.inflight = true;
  clearTimeout(state.timer);
  try {
    let doc;
    try {
      doc = await fetchJSON(STATUS_URL + jobQuery(state.job));
      const mismatch = schemaMismatch(doc, state.lang);
      if (mismatch) throw new Error(mismatch);
    } catch (e) {
      if (e && e.status === 404 && state.job) { pickJob(null); return; } // the job is no longer listed
      state.reachable = false;
      state.error = (e && e.message) || String(e);
      renderUpdated();
      return;
    }
    state.doc = doc;
    state.okAt = Date.now();
    state.reachable = true;
    state.error = null;
    document.body.classList.remove('loading');
    const tgt = doc && doc.target;
    const identity = tgt ? `${tgt.pid}|${tgt.create_time_unix_s}` : null;
    if (identity !== state.identity) { state.identity = identity; resetHistory(); }
    mergeEvents(doc.events);
    try {
      mergeHistory(await fetchJSON(HISTORY_URL + jobQuery(state.job, { since: state.lastSampleT })));
    } catch { /* charts keep what they have */ }
    renderAll();
  } finally {
    state.inflight = false;
    schedule();
  }
}

/** Show another job (null: the sidecar's default); the address keeps the choice. */
function pickJob(job) {
  state.job = job;
  if (job) params.set('job', job);
  else params.delete('job');
  const q = params.toString();
  history.replaceState(null, '', `${location.pathname}${q ? `?${q}` : ''}${location.hash}`);
  state.identity = null;
  resetHistory();
  setTimeout(poll, 0);
}

function schedule() {
  clearTimeout(state.timer);
  if (document.hidden) return;
  state.timer = setTimeout(poll, state.refreshS * 1000);
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden) clearTimeout(state.timer);
  else poll();
  renderUpdated();
});

// ------------------------------------------------------------------ controls

$('[data-testid="lang-switch"]').addEventListener('click', () => {
  state.lang = state.lang === 'zh' ? 'en' : 'zh';
  storageSet(LANG_KEY, state.lang);
  if (params.has('lang')) {
    params.set('lang', state.lang);
    history.replaceState(null, '', `${location.pathname}?${params}${location.hash}`);
  }
  applyStaticText();
  renderAll();
});

for (const b of document.querySelectorAll('.window-select button')) {
  b.addEventListener('click', () => {
    state.window = b.dataset.window;
    storageSet(WINDOW_KEY, state.window);
    applyStaticText();
    renderCharts();
  });
}

setInterval(renderUpdated, 1000);
applyStaticText();
renderAll();
poll();
