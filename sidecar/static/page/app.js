// app.js — the standalone dsh-gpu-dashboard page served by the sidecar at GET /.
// No framework: fetch the status document and the history after it every `refresh` seconds (feed.js,
// kept with the data layer the DSH plugin shares, ../shared/store.js; paused while the tab is hidden),
// render it with the shared rules of format.js, the efficiency strip with strip.js, and the history with
// history_view.js (charts.js underneath).
// All URLs are relative so the page also works behind a path prefix.

import {
  CATALOGUE, NA, STATUS_COLORS, STATUS_TEXT_COLORS, UNREACHABLE_COMMAND, UNREACHABLE_COMMAND_RUN,
  fmtAgo, fmtClock, cmdText, messageText, modelGpu, pickLang, severityOf, sortWarnings,
  statusOf, statusText, t, warningHint, warningMessage,
} from '../shared/format.js';
import { PROCESS_COLUMNS, gpuCards, heroFacts, processRows, runtimeFacts } from '../shared/view_model.js';
import { emptyHistory } from '../shared/store.js';
import { pollJob } from './feed.js';
import { renderJobs } from './jobs.js';
import { h, richText } from './dom.js';
import { migList, renderStrip } from './strip.js';
import { createHistoryView } from './history_view.js';
import { createClusterPanel } from './cluster.js';
import { createRunsPanel } from './runs.js';

/** @typedef {import('../shared/contract.js').StatusDocument} StatusDocument */
/** @typedef {import('../shared/contract.js').HistoryDocument} HistoryDocument */

const LANG_KEY = 'dsh-gpu-dashboard.lang';
const WINDOW_KEY = 'dsh-gpu-dashboard.window';

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
  needsToken: false,   // the last answer was HTTP 401: the sidecar wants its token (not "unreachable")
  history: emptyHistory(), // ../shared/store.js: the job's samples and events, oldest first
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

/** A device chip of the view model (view_model.js chip()). */
function devChip(c) {
  if (c.device === null) return document.createTextNode(NA);
  return h('span', { class: `chip dev-${c.kind}`, 'data-device': c.device, text: c.text });
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
  // No document yet is not a verdict: the badge carries no status until one arrives.
  badge.dataset.status = doc ? status : '';
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
    facts.append(...heroFacts(doc, state.lang).map((f) => h('div', { class: 'fact', 'data-testid': `fact-${f.key}` },
      h('dt', { text: f.label }), h('dd', { title: f.title || null }, f.chip ? devChip(f.chip) : f.text))));
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

// ------------------------------------------------------------------ GPU cards (cells: view_model.js gpuCards)

function meter(m) {
  const w = num(m.pct) ? Math.max(0, Math.min(100, m.pct)) : 0;
  // no figure (the driver tells none): a hatched bar, never an empty one that reads as 0
  return h('div', { class: 'meter', 'data-testid': `gpu-${m.key}`, 'data-unknown': num(m.pct) ? null : 'true' },
    h('span', { class: 'meter-label', text: m.label }),
    h('div', { class: 'bar' }, h('span', { style: `width:${w.toFixed(1)}%;--fill:${m.color}` })),
    h('span', { class: 'meter-value', text: m.value }));
}

function gpuCardEl(c) {
  return h('article', {
    class: `card gpu-card${c.modelHere ? ' model-here' : ''}`, 'data-testid': 'gpu-card', 'data-index': c.index, 'data-vendor': c.vendor,
    'data-util-level': c.utilLevel, 'data-model-here': c.modelHere ? 'true' : 'false',
  },
  h('div', { class: 'gpu-head' },
    h('span', { class: 'gpu-index', text: c.title }),
    c.tag ? h('span', { class: `tag tag-${c.tag.kind}`, text: c.tag.text }) : null),
  h('div', { class: 'gpu-name', 'data-testid': 'gpu-name', text: c.name, title: c.nameTitle }),
  h('div', { class: 'gpu-sub', 'data-testid': 'gpu-framework', text: c.framework }),
  c.meters.map(meter),
  h('div', { class: 'gpu-procs', 'data-testid': 'gpu-procs' },
    h('div', { class: 'gpu-procs-title', text: c.procsTitle }),
    c.procs.length
      ? h('ul', null, c.procs.map((p) => h('li', { 'data-pid': p.pid },
        h('span', { class: 'pid', text: String(p.pid) }),
        h('span', { class: 'role', text: p.role }),
        h('span', { class: 'mem', text: p.mem }),
        p.util ? h('span', { class: 'util', 'data-testid': 'gpu-proc-util', text: p.util }) : null)))
      : h('div', { class: 'none', text: c.noProcs }),
    c.others ? h('div', { class: 'gpu-others', 'data-testid': 'gpu-others', text: c.others }) : null),
  migList(c.mig));
}

function igpuCardEl(c) {
  return h('article', { class: 'card gpu-card igpu-card', 'data-testid': 'igpu-card', 'data-pci': c.pci },
    h('div', { class: 'gpu-head' },
      h('span', { class: 'gpu-index', text: c.vendor }),
      h('span', { class: 'tag tag-off', text: c.badge })),
    h('div', { class: 'gpu-name', 'data-testid': 'gpu-name', text: c.name, title: c.name === NA ? '' : c.name }),
    h('div', { class: 'note', text: c.note }),
    h('div', { class: 'meta', text: c.meta }));
}

/** @param {StatusDocument|null} doc */
function renderGpus(doc) {
  const vm = doc ? gpuCards(doc, state.lang) : null;
  if (!changed('gpus', vm)) return;
  const grid = $('[data-testid="gpus"]');
  grid.replaceChildren();
  if (!vm) return;
  if (vm.none) grid.append(h('div', { class: 'card empty', 'data-testid': 'no-gpu' }, h('div', { text: vm.none.text }), vm.none.error ? h('div', { class: 'meta', text: vm.none.error }) : null));
  grid.append(...vm.cards.map(gpuCardEl), ...vm.unusable.map(igpuCardEl));
}

// ------------------------------------------------------------------ process table (cells: view_model.js processRows)

// Each column's test id and data-label (the label a narrow screen shows beside the value).
const CELL_TESTIDS = { role: 'role', models: 'model-device', inputs: 'input-device', gpuMem: 'gpu-mem', sm: 'sm', cpu: 'cpu', dataWait: 'data-wait' };

function processCellEl(row) {
  const c = row.cells.process;
  return h('td', null, h('div', { class: 'proc-cell', style: `--depth:${row.depth}` },
    row.branch ? h('span', { class: 'tree', text: row.branch }) : null,
    h('div', { style: 'min-width:0' },
      h('span', { class: 'proc-name', text: c.name }), ' ',
      h('span', { class: 'proc-pid', 'data-testid': 'pid', text: c.pid }),
      c.exited ? h('span', { class: 'chip exited', 'data-testid': 'exited', title: c.exited.title, text: c.exited.text }) : null,
      c.cmd ? h('span', { class: 'proc-cmd', title: c.cmd, text: c.cmd }) : null,
      c.probeError ? h('span', { class: 'proc-err', text: c.probeError }) : null)));
}

function cellContent(key, c) {
  switch (key) {
    case 'role': return c.probed ? h('span', { class: 'chip', text: c.text }) : h('span', { class: 'chip no-probe', 'data-testid': 'no-probe', title: c.title, text: c.text });
    case 'models': return c.na ? NA : c.items.map((m) => h('div', null, devChip(m.device), h('span', { class: 'proc-model', text: m.label })));
    case 'inputs': return c.na ? NA : c.items.flatMap((d) => [devChip(d), ' ']);
    case 'dataWait': return [h('span', { 'data-testid': 'data-wait-value', text: c.value }),
      c.window ? h('span', { class: 'wait-window', 'data-testid': 'data-wait-window', text: c.window }) : null];
    default: return c.text;
  }
}

function cellEl(col, c) {
  const cls = [col.num ? 'num' : '', col.key !== 'role' && c.na ? 'na' : '', c.flag === 'high' ? 'wait-high' : ''].filter(Boolean).join(' ');
  return h('td', { class: cls || null, 'data-testid': CELL_TESTIDS[col.key], 'data-label': tr(col.label), title: c.title || null, 'data-source': c.source || null, 'data-flag': c.flag || null },
    cellContent(col.key, c));
}

/** @param {StatusDocument|null} doc */
function renderProcs(doc) {
  const rows = doc ? processRows(doc, state.lang) : null;
  if (!changed('procs', rows)) return;
  const table = $('[data-testid="processes"]');
  $('thead', table).replaceChildren(h('tr', null, PROCESS_COLUMNS.map((col) => h('th', { class: col.num ? 'num' : null, text: tr(col.label) }))));
  const body = $('tbody', table);
  body.replaceChildren();
  if (!rows) return;
  if (!rows.length) {
    body.appendChild(h('tr', null, h('td', { colspan: PROCESS_COLUMNS.length, class: 'empty', text: tr('procs.none') })));
    return;
  }
  for (const row of rows) {
    body.appendChild(h('tr', {
      class: (row.probed ? 'proc' : 'proc no-probe') + (row.exited ? ' exited' : ''), 'data-testid': 'process-row', 'data-pid': row.pid, 'data-ppid': row.ppid,
      'data-depth': row.depth, 'data-role': row.role, 'data-probe': row.probed ? 'true' : 'false',
    },
    PROCESS_COLUMNS.map((col) => (col.key === 'process' ? processCellEl(row) : cellEl(col, row.cells[col.key])))));
  }
}

// ------------------------------------------------------------------ runtime footer

/** @param {StatusDocument|null} doc */
function renderRuntime(doc) {
  if (!changed('runtime', doc && [doc.runtime, doc.nvml, doc.interval_s])) return;
  const foot = $('[data-testid="runtime"]');
  foot.replaceChildren();
  if (!doc) return;
  const facts = runtimeFacts(doc, state.lang);
  foot.append(...facts.items.map((it) => h('span', { 'data-key': it.key }, `${it.label} `, h('b', { class: it.bad ? 'bad' : null, text: it.value }))));
  if (facts.error) foot.append(h('span', { class: 'bad', text: facts.error }));
  if (facts.interval) foot.append(h('span', { text: facts.interval }));
}

// ------------------------------------------------------------------ history

const historyView = createHistoryView({ tr, changed });

function renderCharts() {
  historyView.render(state);
}

// ------------------------------------------------------------------ cluster (cluster.js)

const clusterPanel = createClusterPanel({
  root: $('[data-testid="cluster"]'), h, richText, tr, changed, fetchJSON: (url) => fetchJSON(url),
  lang: () => state.lang, statusDoc: () => state.doc, onChange: () => clusterPanel.render(),
});

// ------------------------------------------------------------------ the Runs view (runs.js), picked by the address's #runs

const runsPanel = createRunsPanel({
  root: $('[data-testid="runs-view"]'), h, richText, tr, lang: () => state.lang, fetchJSON: (url) => fetchJSON(url),
  tooltip: $('[data-testid="tooltip"]'),
});

const viewOf = () => (location.hash === '#runs' ? 'runs' : 'live');

function showView() {
  const view = viewOf();
  document.body.dataset.view = view;
  $('[data-testid="runs-view"]').hidden = view !== 'runs';
  for (const a of document.querySelectorAll('.view-tab')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (view === 'runs') runsPanel.show(); // asked each time the view is picked, then every 10 s
  else runsPanel.hide();
}

window.addEventListener('hashchange', showView);

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
  box.hidden = state.reachable !== false || state.needsToken;
  renderNeedsToken();
  document.body.classList.toggle('stale', state.reachable === false);
  document.body.classList.toggle('nodata', state.reachable === false && state.doc === null);
  document.body.classList.toggle('live', state.reachable === true);
  if (state.reachable === false) {
    $('.retry', box).textContent = tr('unreachable.retry', { s: state.refreshS });
    $('.last-seen', box).textContent = state.okAt === null ? '' : tr('unreachable.lastSeen', { ago: fmtAgo((Date.now() - state.okAt) / 1000, state.lang) });
    $('.fetch-error', box).textContent = state.error ? tr('unreachable.error', { error: state.error }) : '';
  }
}

// A 401 is no sidecar that is down: it answers, and wants the token it printed (a root sidecar makes
// one each start). Its address with the token is what to open; the tab's own token, if any, was refused.
function renderNeedsToken() {
  const box = $('[data-testid="needs-token"]');
  box.hidden = !(state.reachable === false && state.needsToken);
  if (box.hidden) return;
  $('.token-why', box).textContent = tr(token ? 'token.refused' : 'token.body');
  $('.token-address', box).textContent = `${location.origin}${location.pathname}?token=…`;
  $('.retry', box).textContent = tr('unreachable.retry', { s: state.refreshS });
  $('.fetch-error', box).textContent = state.error ? tr('unreachable.error', { error: state.error }) : '';
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
  renderJobs($('[data-testid="jobs"]'), doc, { h, tr, lang: state.lang, onPick: pickJob });
  renderCharts();
  clusterPanel.render();
  renderUpdated();
}

async function poll() {
  if (state.inflight) return;
  state.inflight = true;
  clearTimeout(state.timer);
  try {
    let got;
    const asked = state.job;
    try {
      got = await pollJob(fetchJSON, { job: asked, history: state.history, lang: state.lang });
    } catch (e) {
      if (e && e.status === 404 && state.job) { pickJob(null); return; } // the job is no longer listed
      state.reachable = false;
      state.needsToken = Boolean(e && e.status === 401);
      state.error = (e && e.message) || String(e);
      renderUpdated();
      return;
    }
    if (asked !== state.job) return; // another job was picked meanwhile
    state.doc = got.doc;
    state.history = got.history;
    state.okAt = Date.now();
    state.reachable = true;
    state.needsToken = false;
    state.error = null;
    document.body.classList.remove('loading');
    clusterPanel.maybeFetch();
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
  state.history = emptyHistory();
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
  if (document.hidden) runsPanel.hide();
  else if (viewOf() === 'runs') runsPanel.show();
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
  if (viewOf() === 'runs') runsPanel.render();
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
showView();
poll();
