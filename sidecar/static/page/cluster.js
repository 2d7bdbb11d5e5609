// cluster.js — the page's Cluster section: every node's GPUs and the current job's ranks across
// nodes, from GET api/dsh-gpu-dashboard/cluster (a sidecar started with --prometheus). The cells
// come from view_model.js (clusterView), as the DSH plugin's. Shown once the route answers (a 502,
// Prometheus failing, shows its error); a 404 (no --prometheus) keeps it hidden. A job that is not
// distributed gets one line, no tables: the cluster view is for jobs across ranks and nodes, and a
// node's every notebook and script drew an empty table each above the job's own processes.

import { CLUSTER_RANK_COLUMNS, clusterView, isDistributed } from '../shared/view_model.js';

const CLUSTER_URL = 'api/dsh-gpu-dashboard/cluster';
// `cluster` of /version says whether the route serves (--prometheus): asked again this often, so a
// sidecar restarted with it is seen, and no request that must fail (404) is ever made.
const VERSION_URL = 'version';
const VERSION_EVERY_S = 60;
// The sidecar caches the answer 5 s and Prometheus scrapes every 15 s: asking more often shows nothing new.
const CLUSTER_EVERY_S = 5;

function headRow(h, tr, columns) {
  return h('tr', null, columns.map((col) => h('th', { class: col.num ? 'num' : null, text: tr(col.label) })));
}

function cellEl(h, tr, col, c) {
  const cls = [col.num ? 'num' : '', c.na ? 'na' : '', c.flag === 'high' ? 'wait-high' : '', c.flag === 'missing' ? 'node-missing' : ''].filter(Boolean).join(' ');
  const body = col.key === 'slowedBy' && !c.na
    ? h('span', { class: 'eff-reasons' }, c.items.map((r) => h('span', { class: `eff-reason eff-reason-${r.kind}`, 'data-reason': r.name, text: r.label })))
    : c.text;
  return h('td', { class: cls || null, 'data-col': col.key, 'data-label': tr(col.label), title: c.title || null, 'data-flag': c.flag || null }, body);
}

function table(h, tr, testid, columns, rows, rowAttrs, empty) {
  const body = rows.length
    ? rows.map((row) => h('tr', rowAttrs(row), columns.map((col) => (row.hide && row.hide.has(col.key) ? h('td', { class: 'cont' }) : cellEl(h, tr, col, row.cells[col.key])))))
    : [h('tr', null, h('td', { colspan: columns.length, class: 'empty', text: empty }))];
  return h('div', { class: 'table-wrap card' }, h('table', { class: 'procs cluster-table', 'data-testid': testid }, h('thead', null, headRow(h, tr, columns)), h('tbody', null, body)));
}

function warningList(h, richText, tr, warnings, testid) {
  if (!warnings.length) return null;
  return h('ul', { class: 'warnings', 'data-testid': testid }, warnings.map((w) => h('li', { class: 'warning', 'data-testid': 'cluster-warning', 'data-severity': w.sev, 'data-code': w.code },
    h('span', { class: 'sev', text: w.severity }),
    h('span', { class: 'warning-message' }, richText(w.message)),
    w.hint ? h('span', { class: 'warning-hint' }, richText(w.hint)) : null)));
}

/**
 * The section's state and its two entry points: `maybeFetch()` from each poll (asks at most every
 * CLUSTER_EVERY_S), `render()` from each render. `fetchJSON` throws an Error with `status` on HTTP errors.
 */
export function createClusterPanel({ root, h, richText, tr, lang, statusDoc, fetchJSON, changed, onChange }) {
  const st = { doc: null, error: null, shown: false, at: 0, inflight: false, served: false, versionAt: 0 };

  async function served() {
    if (Date.now() - st.versionAt >= VERSION_EVERY_S * 1000) {
      st.versionAt = Date.now();
      try { st.served = (await fetchJSON(VERSION_URL)).cluster === true; } catch { /* keep what we knew */ }
      if (!st.served) st.shown = false;
    }
    return st.served;
  }

  async function maybeFetch() {
    if (st.inflight || Date.now() - st.at < CLUSTER_EVERY_S * 1000) return;
    st.inflight = true;
    st.at = Date.now();
    try {
      if (!(await served())) return;
      const doc = statusDoc();
      const key = doc && doc.distributed && doc.distributed.job_key;
      st.doc = await fetchJSON(CLUSTER_URL + (key ? `?job=${encodeURIComponent(key)}` : ''));
      if (key && !(st.doc.jobs || []).length) st.doc = await fetchJSON(CLUSTER_URL); // not a job Prometheus knows: every job
      st.error = null;
      st.shown = true;
    } catch (e) {
      if (e && e.status === 404) st.shown = false;
      else if (e && e.status === 503) { /* a query in flight: keep what is shown */ } else {
        st.error = (e && e.message) || String(e);
        st.shown = st.shown || e.status === 502;
      }
    } finally {
      st.inflight = false;
      onChange();
    }
  }

  function render() {
    const doc = statusDoc();
    const single = !isDistributed(doc && doc.distributed);
    const vm = st.shown && st.doc ? clusterView(st.doc, doc, lang()) : null;
    // not distributed: one line at most (the view's, or Prometheus's error)
    const line = single && st.shown ? (st.error ? tr('cluster.error', { error: st.error }) : vm && vm.line) : null;
    root.hidden = !st.shown || (single && !line);
    if (!changed('cluster', [st.shown, st.error, vm, line])) return;
    root.replaceChildren();
    if (root.hidden) return;
    if (single) {
      root.append(h('p', { class: `cluster-line${st.error ? ' bad' : ''}`, 'data-testid': 'cluster-line', text: line }));
      return;
    }
    const head = h('div', { class: 'block-head' }, h('h2', { class: 'block-title', text: tr('cluster.title') }),
      vm ? h('span', { class: 'cluster-summary', 'data-testid': 'cluster-summary', text: vm.summary }) : null);
    root.append(head);
    if (st.error) root.append(h('p', { class: 'cluster-error bad', 'data-testid': 'cluster-error', text: tr('cluster.error', { error: st.error }) }));
    if (!vm) return;
    root.append(warningList(h, richText, tr, vm.warnings, 'cluster-warnings') || '');
    root.append(table(h, tr, 'cluster-nodes', vm.nodeColumns,
      vm.nodes.map((r) => ({ ...r, hide: r.first ? null : new Set(['node', 'state']) })),
      (r) => ({ 'data-testid': 'cluster-node-row', 'data-node': r.node, 'data-reporting': r.reporting ? 'true' : 'false', class: r.first ? 'node-first' : null }),
      tr('cluster.noNodes')));
    if (!vm.jobs.length) root.append(h('p', { class: 'empty', text: tr('cluster.noJob') }));
    else if (!vm.matched) root.append(h('p', { class: 'empty', text: tr('cluster.otherJobs') }));
    for (const job of vm.jobs) {
      root.append(h('div', { class: 'cluster-job', 'data-testid': 'cluster-job', 'data-job-key': job.key },
        h('h3', { class: 'cluster-job-title', text: job.title }, ' ', h('span', { class: 'cluster-job-detail', text: job.detail })),
        warningList(h, richText, tr, job.warnings, 'cluster-job-warnings'),
        table(h, tr, 'cluster-ranks', CLUSTER_RANK_COLUMNS, job.ranks, (r) => ({ 'data-testid': 'cluster-rank-row', 'data-rank': r.rank }), tr('cluster.noRanks'))));
    }
    if (!vm.matched && vm.undistributed) root.append(h('p', { class: 'empty', 'data-testid': 'cluster-undistributed', text: vm.undistributed }));
  }

  return { maybeFetch, render };
}
