// The GPU view's cluster section: every node's GPUs and the job's ranks across nodes, from
// /dsh-gpu-dashboard/api/cluster (the sidecar started with --prometheus, the plugin's
// `prometheusUrl`). The cells come from the shared view model (view_model.js clusterView), the
// standalone page lays out the same ones. Hidden while the route answers 404 (no Prometheus). A job
// that is not distributed gets one line, no tables, as on the page.
import { useEffect, useState } from 'react'
import { t } from '../../../sidecar/static/shared/format.js'
import { CLUSTER_RANK_COLUMNS, clusterView, isDistributed } from '../../../sidecar/static/shared/view_model.js'
import { API } from './store.js'

// The sidecar caches the answer 5 s and Prometheus scrapes every 15 s: asking more often shows nothing new.
const CLUSTER_EVERY_MS = 5000
const CLUSTER_TIMEOUT_MS = 10000

function Cell({ col, c, lang }) {
  const cls = [col.num ? 'dgd-num' : '', c.na ? 'dgd-muted' : '', c.flag ? 'dgd-bad' : ''].filter(Boolean).join(' ')
  const body = col.key === 'slowedBy' && !c.na
    ? <span className="dgd-eff-reasons">{c.items.map((r) => <span key={r.name} className={`dgd-tag dgd-eff-reason-${r.kind}`} data-reason={r.name}>{r.label}</span>)}</span>
    : c.text
  return <td className={cls || undefined} data-col={col.key} data-label={t(lang, col.label)} title={c.title || undefined} data-flag={c.flag || undefined}>{body}</td>
}

function Table({ testid, columns, rows, rowProps, lang, empty }) {
  return (
    <div className="dgd-card dgd-table-wrap">
      <table className="dgd-table" data-testid={testid}>
        <thead><tr>{columns.map((col) => <th key={col.key} className={col.num ? 'dgd-num' : undefined}>{t(lang, col.label)}</th>)}</tr></thead>
        <tbody>
          {rows.length ? rows.map((row, i) => (
            <tr key={i} {...rowProps(row)}>
              {columns.map((col) => (row.hide && row.hide.includes(col.key) ? <td key={col.key} /> : <Cell key={col.key} col={col} c={row.cells[col.key]} lang={lang} />))}
            </tr>
          )) : <tr><td colSpan={columns.length} className="dgd-muted">{empty}</td></tr>}
        </tbody>
      </table>
    </div>
  )
}

function ClusterWarnings({ warnings }) {
  if (!warnings.length) return null
  return (
    <ul className="dgd-warnings">
      {warnings.map((w, i) => (
        <li key={i} className="dgd-warning" data-testid="dsh-gpu-cluster-warning" data-code={w.code} data-severity={w.sev}>
          <span className="dgd-warning-sev">{w.severity}</span>
          <span className="dgd-warning-msg">{w.message}</span>
          {w.hint ? <div className="dgd-warning-hint">{w.hint}</div> : null}
        </li>
      ))}
    </ul>
  )
}

/** The cluster section for a fetched ClusterDocument (`cluster`) or an error; no hooks (tests render it). */
export function ClusterTables({ cluster, doc, error, lang }) {
  const vm = cluster ? clusterView(cluster, doc, lang) : null
  if (!isDistributed(doc && doc.distributed)) {
    const line = error ? t(lang, 'cluster.error', { error }) : vm && vm.line
    if (!line) return null
    return (
      <section data-testid="dsh-gpu-cluster">
        <div className={error ? 'dgd-bad' : 'dgd-muted'} data-testid="dsh-gpu-cluster-line">{line}</div>
      </section>
    )
  }
  return (
    <section data-testid="dsh-gpu-cluster">
      <h3 className="dgd-section-title">
        {t(lang, 'cluster.title')} {vm ? <span className="dgd-muted">{vm.summary}</span> : null}
      </h3>
      {error ? <div className="dgd-bad" data-testid="dsh-gpu-cluster-error">{t(lang, 'cluster.error', { error })}</div> : null}
      {vm ? (
        <>
          <ClusterWarnings warnings={vm.warnings} />
          <Table testid="dsh-gpu-cluster-nodes" columns={vm.nodeColumns} lang={lang} empty={t(lang, 'cluster.noNodes')}
            rows={vm.nodes.map((r) => ({ ...r, hide: r.first ? null : ['node', 'state'] }))}
            rowProps={(r) => ({ 'data-testid': 'dsh-gpu-cluster-node', 'data-node': r.node, 'data-reporting': r.reporting ? 'true' : 'false' })} />
          {vm.jobs.length ? null : <div className="dgd-muted">{t(lang, 'cluster.noJob')}</div>}
          {vm.jobs.map((job) => (
            <div key={job.key} data-testid="dsh-gpu-cluster-job" data-job-key={job.key}>
              <h4 className="dgd-section-title">{job.title} <span className="dgd-muted">{job.detail}</span></h4>
              <ClusterWarnings warnings={job.warnings} />
              <Table testid="dsh-gpu-cluster-ranks" columns={CLUSTER_RANK_COLUMNS} rows={job.ranks} lang={lang} empty={t(lang, 'cluster.noRanks')}
                rowProps={(r) => ({ 'data-testid': 'dsh-gpu-cluster-rank', 'data-rank': r.rank })} />
            </div>
          ))}
          {!vm.matched && vm.undistributed ? <div className="dgd-muted" data-testid="dsh-gpu-cluster-undistributed">{vm.undistributed}</div> : null}
        </>
      ) : null}
    </section>
  )
}

async function fetchCluster(key) {
  const ctrl = new AbortController()
  const timer = setTimeout(() => ctrl.abort(), CLUSTER_TIMEOUT_MS)
  try {
    const res = await fetch(`${API}/cluster${key ? `?job=${encodeURIComponent(key)}` : ''}`, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin', signal: ctrl.signal })
    let body = null
    try { body = await res.json() } catch { body = null }
    return { status: res.status, body }
  } finally {
    clearTimeout(timer)
  }
}

/** What one fetch says: {shown, cluster, error} after `prev`; 503 (a query in flight) keeps `prev`. */
export function nextCluster(prev, status, body) {
  if (status === 200 && body && Array.isArray(body.nodes)) return { shown: true, cluster: body, error: null }
  if (status === 404) return { shown: false, cluster: null, error: null }
  if (status === 503) return prev
  const detail = (body && (body.detail || body.error)) || `HTTP ${status}`
  return { shown: prev.shown || status === 502, cluster: prev.cluster, error: String(detail) }
}

/** The section, polled every CLUSTER_EVERY_MS while mounted and the tab is shown (not after a 404). */
export function ClusterSection({ doc, lang }) {
  const key = (doc && doc.distributed && doc.distributed.job_key) || null
  const [st, setSt] = useState({ shown: false, cluster: null, error: null })
  useEffect(() => {
    let stopped = false
    let gone = false
    let timer = null
    const poll = async () => {
      if (stopped) return
      if (typeof document === 'undefined' || !document.hidden) {
        try {
          let r = await fetchCluster(key)
          if (key && r.status === 200 && r.body && Array.isArray(r.body.jobs) && !r.body.jobs.length) r = await fetchCluster(null)
          gone = r.status === 404
          if (!stopped) setSt((prev) => nextCluster(prev, r.status, r.body))
        } catch (err) {
          if (!stopped) setSt((prev) => ({ ...prev, error: String((err && err.message) || err) }))
        }
      }
      // a 404 (no --prometheus) is not asked again while the tab stays open: no failing request every 5 s
      if (!stopped && !gone) timer = setTimeout(poll, CLUSTER_EVERY_MS)
    }
    poll()
    return () => {
      stopped = true
      clearTimeout(timer)
    }
  }, [key])
  if (!st.shown) return null
  return <ClusterTables cluster={st.cluster} doc={doc} error={st.error} lang={lang} />
}
