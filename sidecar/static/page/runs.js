// runs.js — the page's Runs view (issue 40): the runs the sidecar's ledger remembers, the newest
// first; one run's facts, verdict timeline and per-minute charts; and "Compare with the previous
// run" (the comparison's outcome per figure, the causes ranked by the share of the difference they
// explain, with their evidence). The cells are ../shared/runs.js's, as the DSH plugin's GPU tab shows
// them; the requests go through the page's fetchJSON (its token, its timeouts). A sidecar that keeps
// no runs (--no-runs: /version says `runs: false`, /runs answers 404) gets a notice saying how to turn them on, never a broken view.

import { TimeChart } from '../shared/charts.js';
import { CHART_FORMATS } from '../shared/history_data.js';
import {
  COMPARE_URL, RUNS_URL, RUN_COLUMNS, RUN_URL, compareView, notRecorded, runChartData, runFacts, runRows,
  runTimeline, runsError,
} from '../shared/runs.js';

const VERSION_URL = 'version';
// While the view is shown the list is read again this often: a running job's row grows (the sidecar
// writes its run every 10 s, recorder.py's WRITE_EVERY_S), and runs that start or end appear.
export const RUNS_REFRESH_MS = 10000;
const RUN_CHARTS = [['rate', 'runs.chart.rate', CHART_FORMATS.rate], ['util', 'runs.chart.util', CHART_FORMATS.util]];

function listTable(ctx, rows) {
  const { h, tr, st, open } = ctx;
  const head = h('tr', null, RUN_COLUMNS.map((c) => h('th', { class: c.num ? 'num' : null, text: tr(c.label) })), h('th'));
  const body = rows.map((row) => {
    const tr_ = h('tr', {
      class: `run-row${row.id === st.openId ? ' open' : ''}`, 'data-testid': 'run-row', 'data-run-id': row.id,
      'data-state': row.state, 'data-status': row.status || '',
    },
    RUN_COLUMNS.map((c) => h('td', { class: c.num ? 'num' : null, 'data-col': c.key, 'data-label': tr(c.label), title: row.cells[c.key].title || null, text: row.cells[c.key].text })),
    h('td', null, h('button', { type: 'button', class: 'run-open', 'data-testid': 'run-open', text: tr(row.id === st.openId ? 'runs.close' : 'runs.open') })));
    tr_.querySelector('button').addEventListener('click', () => open(row.id === st.openId ? null : row.id));
    return tr_;
  });
  return h('div', { class: 'table-wrap card' }, h('table', { class: 'procs runs-table', 'data-testid': 'runs-table' }, h('thead', null, head), h('tbody', null, body)));
}

function timelineEl({ h, tr }, items) {
  if (!items.length) return h('p', { class: 'empty', text: tr('runs.timelineNone') });
  return h('ol', { class: 'run-timeline', 'data-testid': 'run-timeline' }, items.map((it) => h('li', { 'data-testid': 'run-change', 'data-status': it.status },
    h('span', { class: 'ev-time', text: it.time }), h('b', { text: it.statusText }), h('span', { class: 'ev-name', text: it.warnings }))));
}

function chartsEl(ctx, detail) {
  const { h, tr, tooltip } = ctx;
  const data = runChartData(detail, tr);
  if (!data) return h('p', { class: 'empty', 'data-testid': 'run-charts-none', text: tr('runs.chart.none') });
  const group = [];
  const figs = RUN_CHARTS.map(([name, title, formatValue]) => {
    const fig = h('figure', { class: 'chart card', 'data-testid': `run-chart-${name}` },
      h('figcaption', null, h('span', { class: 'chart-title', text: tr(title) }),
        h('span', { class: 'legend' }, data[name].series.map((s) => h('span', { 'data-series': s.key }, h('i', { style: `background:${s.color}` }), s.label)))),
      h('div', { class: 'chart-body' }));
    // drawn once the figure is in the page (its width is known then)
    requestAnimationFrame(() => new TimeChart(fig.querySelector('.chart-body'), { group, tooltip, title: () => tr(title), formatValue })
      .setData({ t0: data.t0, t1: data.t1, gapS: data.gapS, events: [], ...data[name] }));
    return fig;
  });
  return h('div', { class: 'charts run-charts' }, figs);
}

function compareEl({ h, tr, richText }, vm) {
  const figures = h('ul', { class: 'compare-figures' }, vm.figures.map((f) => h('li', { 'data-testid': 'compare-figure', 'data-figure': f.figure, 'data-outcome': f.outcome }, richText(f.text))));
  const causes = vm.causes.length ? [h('h4', { text: tr('runs.compare.causes') }), h('ol', { class: 'compare-causes', 'data-testid': 'compare-causes' }, vm.causes.map((c) => h('li', { 'data-testid': 'compare-cause', 'data-code': c.code },
    h('span', { class: 'cause-share', style: `--share:${(c.shareFraction * 100).toFixed(0)}%`, text: c.share }), ' ',
    h('b', { class: 'cause-name', text: c.name }), ' ', h('span', { class: 'cause-text' }, richText(c.text)),
    c.reasons.length ? h('ul', { class: 'cause-reasons' }, c.reasons.map((r) => h('li', { 'data-testid': 'compare-reason', 'data-code': r.code }, richText(r.text)))) : null)))] : [];
  const notes = vm.notes.length ? [h('h4', { text: tr('runs.compare.notes') }), h('ul', { class: 'compare-notes' }, vm.notes.map((n) => h('li', { 'data-code': n.code }, richText(n.text))))] : [];
  return h('div', { class: 'compare card', 'data-testid': 'compare', 'data-outcome': vm.outcome },
    h('div', { class: 'compare-head' }, h('span', { class: `outcome outcome-${vm.outcome}`, 'data-testid': 'compare-outcome', text: vm.outcomeText }),
      h('span', { class: 'compare-headline', 'data-testid': 'compare-headline' }, richText(vm.headline))),
    h('p', { class: 'compare-baseline', text: vm.baselineText }), figures, ...causes, ...notes);
}

function detailEl(ctx) {
  const { h, tr, st, lang, compare } = ctx;
  const d = st.detail;
  const box = h('section', { class: 'run-detail card', 'data-testid': 'run-detail', 'data-run-id': st.openId });
  box.append(h('h3', { class: 'run-detail-title', text: tr('runs.detailTitle', { id: st.openId }) }));
  if (st.detailError || !d) {
    box.append(st.detailError ? h('p', { class: 'bad', text: runsError(st.detailError, lang()) }) : h('p', { class: 'empty', text: tr('runs.loading') }));
    return box;
  }
  box.append(h('dl', { class: 'run-facts' }, runFacts(d, lang()).flatMap((f) => [h('dt', { text: f.label }), h('dd', { 'data-key': f.key, text: f.text })])));
  box.append(h('h4', { text: tr('runs.timeline') }), timelineEl(ctx, runTimeline(d, lang())), chartsEl(ctx, d));
  // the run document names the previous run: without one there is nothing to compare with by default
  const btn = h('button', { type: 'button', class: 'run-compare', 'data-testid': 'run-compare', disabled: st.comparing || !d.previous, text: tr(st.comparing ? 'runs.comparing' : 'runs.compare') });
  btn.addEventListener('click', compare);
  box.append(h('div', { class: 'run-actions' }, btn, d.previous ? null : h('span', { class: 'muted', 'data-testid': 'run-no-previous', text: tr('runs.noPrevious') })));
  if (st.compareError) box.append(h('p', { class: 'bad', 'data-testid': 'compare-error', text: runsError(st.compareError, lang(), true) }));
  const vm = st.compare && compareView(st.compare, lang());
  if (vm) box.append(compareEl(ctx, vm));
  return box;
}

function offEl({ h, richText }, text) {
  return h('div', { class: 'runs-off card', 'data-testid': 'runs-off', role: 'note' },
    h('h3', { text: text.title }), h('p', null, richText(text.body)), h('p', { class: 'muted', text: text.more }));
}

/** The whole view from its state: loading, off (--no-runs), an error, or the list and the open run. */
function renderPanel(root, ctx) {
  const { h, tr, st, lang } = ctx;
  const head = h('div', { class: 'block-head' }, h('h2', { class: 'block-title', text: tr('runs.title') }));
  const parts = [head];
  if (!st.loaded) parts.push(h('p', { class: 'empty', text: tr('runs.loading') }));
  else if (st.off) parts.push(offEl(ctx, notRecorded(lang())));
  else if (st.error) parts.push(h('p', { class: 'bad', 'data-testid': 'runs-error', text: runsError(st.error, lang()) }));
  else {
    const rows = runRows(st.doc, lang());
    parts.push(h('p', { class: 'runs-subtitle', text: tr('runs.subtitle') }));
    parts.push(rows.length ? listTable(ctx, rows) : h('p', { class: 'empty', 'data-testid': 'runs-none', text: tr('runs.none') }));
    if (st.openId) parts.push(detailEl(ctx));
  }
  root.replaceChildren(...parts);
  root.dataset.state = !st.loaded ? 'loading' : st.off ? 'off' : st.error ? 'error' : 'ok';
}

/**
 * The view's state and entry points: `show()` when the view is picked (asks /runs), `render()` on
 * each render (a language switch). `fetchJSON` throws an Error with `status` on HTTP errors.
 */
export function createRunsPanel({ root, h, richText, tr, lang, fetchJSON, tooltip }) {
  const st = { doc: null, off: false, error: null, loaded: false, openId: null, detail: null, detailError: null, compare: null, compareError: null, comparing: false };

  const fail = (e) => ((e && e.message) || String(e));
  let timer = null;
  let shown = false;

  /** The view is picked: the runs read now, and again every RUNS_REFRESH_MS until `hide()`. */
  async function show() {
    shown = true;
    await load();
  }

  /** The view is left (or the tab hidden): no more reads. */
  function hide() {
    shown = false;
    clearTimeout(timer);
  }

  async function load() {
    clearTimeout(timer);
    try {
      // `runs` of /version: false (--no-runs) is said without a request that must fail (a 404 in the
      // console); an older sidecar's /version has no `runs`, and its 404 says the same
      const version = await fetchJSON(VERSION_URL).catch(() => null);
      if (version && version.runs === false) throw Object.assign(new Error('no runs'), { status: 404 });
      st.doc = await fetchJSON(RUNS_URL);
      st.off = false;
      st.error = null;
    } catch (e) {
      st.off = Boolean(e && e.status === 404);
      st.error = st.off ? null : fail(e);
    }
    st.loaded = true;
    // the open run, when it is still running: its timeline and minutes grow too
    const openRun = st.openId && st.doc && (st.doc.runs || []).find((r) => r.id === st.openId);
    if (openRun && openRun.state === 'live' && !st.comparing) await readDetail(st.openId, false);
    render();
    if (shown && !document.hidden) timer = setTimeout(load, RUNS_REFRESH_MS);
  }

  /** The open run's detail; `sayError`: a failure replaces it (opening), else it stays (a refresh). */
  async function readDetail(id, sayError) {
    try {
      const d = await fetchJSON(RUN_URL(id));
      if (st.openId === id) st.detail = d;
    } catch (e) {
      if (st.openId === id && sayError) st.detailError = fail(e);
    }
  }

  async function open(id) {
    Object.assign(st, { openId: id, detail: null, detailError: null, compare: null, compareError: null, comparing: false });
    render();
    if (!id) return;
    await readDetail(id, true);
    render();
  }

  async function compare() {
    const id = st.openId;
    Object.assign(st, { comparing: true, compare: null, compareError: null });
    render();
    try {
      const c = await fetchJSON(COMPARE_URL(id));
      if (st.openId === id) st.compare = c;
    } catch (e) {
      if (st.openId === id) st.compareError = fail(e);
    } finally {
      st.comparing = false;
    }
    render();
  }

  const ctx = { h, tr, richText, st, lang, tooltip, open, compare };
  const render = () => renderPanel(root, ctx);

  return { show, hide, render };
}
