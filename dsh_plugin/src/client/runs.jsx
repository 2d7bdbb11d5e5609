// The GPU tab's runs (issue 40): the runs the sidecar's ledger remembers whose folder is the
// session's workspace (GET /dsh-gpu-dashboard/api/runs?session=ID: the host keeps those, as it links
// jobs by their cwd, host/jobs.js sessionRuns), with the rows of the shared view model
// (sidecar/static/shared/runs.js, the page's Runs view lays out the same ones), and "Compare with
// the previous run" on each (GET /dsh-gpu-dashboard/api/compare?a=ID): the outcome per figure and
// the causes ranked with their shares and evidence. A sidecar that keeps no runs (404) gets the
// notice saying how to turn them on.
import { useEffect, useState, useSyncExternalStore } from 'react'
import { t } from '../../../sidecar/static/shared/format.js'
import { RUN_COLUMNS, compareView, notRecorded, runRows, runsError } from '../../../sidecar/static/shared/runs.js'
import { API, getStore } from './store.js'

// Runs change when a job starts or ends: asked again this often while the tab is open.
const RUNS_EVERY_MS = 30000

async function getJson(path) {
  const res = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' })
  let body = null
  try {
    body = await res.json()
  } catch {
    body = null
  }
  return { status: res.status, body }
}

const errorOf = (r) => (r.body && (r.body.detail || r.body.error)) || `HTTP ${r.status}`

/** One comparison: the outcome, the figures, the causes with their evidence; no hooks (tests render it). */
export function CompareResult({ doc, lang }) {
  const vm = compareView(doc, lang)
  if (!vm) return null
  return (
    <div className="dgd-card dgd-compare" data-testid="dsh-gpu-compare" data-outcome={vm.outcome}>
      <div>
        <b className={vm.outcome === 'regression' ? 'dgd-bad' : undefined} data-testid="dsh-gpu-compare-outcome">{vm.outcomeText}</b>{' '}
        <span>{vm.headline}</span>
      </div>
      <div className="dgd-muted">{vm.baselineText}</div>
      <ul className="dgd-compare-list">
        {vm.figures.map((f) => <li key={f.figure} data-figure={f.figure} data-outcome={f.outcome}>{f.text}</li>)}
      </ul>
      {vm.causes.length ? (
        <>
          <div className="dgd-section-title">{t(lang, 'runs.compare.causes')}</div>
          <ol className="dgd-compare-list">
            {vm.causes.map((c) => (
              <li key={c.code} data-testid="dsh-gpu-compare-cause" data-code={c.code}>
                <b>{c.share}</b> {c.name}: {c.text}
                {c.reasons.length ? <ul>{c.reasons.map((r) => <li key={r.code} data-code={r.code} className="dgd-muted">{r.text}</li>)}</ul> : null}
              </li>
            ))}
          </ol>
        </>
      ) : null}
      {vm.notes.map((n) => <div key={n.code} className="dgd-muted" data-code={n.code}>{n.text}</div>)}
    </div>
  )
}

/**
 * The runs table for a fetched RunsDocument (`doc`), the not-recorded notice (`off`) or an error,
 * and the comparison asked (`compare`: {id, doc?, error?, busy?}); no hooks (tests render it).
 */
export function RunsTable({ doc, off, error, lang, compare, onCompare }) {
  const title = <h3 className="dgd-section-title">{t(lang, 'runs.sessionTitle')}</h3>
  if (off) {
    const text = notRecorded(lang)
    return (
      <section data-testid="dsh-gpu-runs" data-state="off">
        {title}
        <div className="dgd-card dgd-muted" data-testid="dsh-gpu-runs-off"><b>{text.title}</b> {text.body} {text.more}</div>
      </section>
    )
  }
  if (error) return <section data-testid="dsh-gpu-runs" data-state="error">{title}<div className="dgd-bad">{runsError(error, lang)}</div></section>
  if (!doc) return null
  const rows = runRows(doc, lang)
  const cmp = compare || {}
  return (
    <section data-testid="dsh-gpu-runs" data-state="ok">
      {title}
      <div className="dgd-card dgd-table-wrap">
        <table className="dgd-table" data-testid="dsh-gpu-runs-table">
          <thead><tr>{RUN_COLUMNS.map((c) => <th key={c.key} className={c.num ? 'dgd-num' : undefined}>{t(lang, c.label)}</th>)}<th /></tr></thead>
          <tbody>
            {rows.length ? rows.map((row) => (
              <tr key={row.id} data-testid="dsh-gpu-run" data-run-id={row.id} data-state={row.state}>
                {RUN_COLUMNS.map((c) => <td key={c.key} className={c.num ? 'dgd-num' : undefined} data-col={c.key} title={row.cells[c.key].title || undefined}>{row.cells[c.key].text}</td>)}
                <td>
                  <button type="button" className="dgd-run-compare" data-testid="dsh-gpu-run-compare" disabled={cmp.busy && cmp.id === row.id} onClick={() => onCompare && onCompare(row.id)}>
                    {t(lang, cmp.busy && cmp.id === row.id ? 'runs.comparing' : 'runs.compare')}
                  </button>
                </td>
              </tr>
            )) : <tr><td colSpan={RUN_COLUMNS.length + 1} className="dgd-muted">{t(lang, 'runs.noneHere')}</td></tr>}
          </tbody>
        </table>
      </div>
      {cmp.error ? <div className="dgd-bad" data-testid="dsh-gpu-compare-error">{runsError(cmp.error, lang, true)}</div> : null}
      {cmp.doc ? <CompareResult doc={cmp.doc} lang={lang} /> : null}
    </section>
  )
}

/** The session's runs, asked while mounted. */
export function SessionRuns({ sessionId, lang }) {
  const store = getStore()
  useSyncExternalStore(store.settings.subscribe, store.settings.get, store.settings.get)
  const [st, setSt] = useState({ doc: null, off: false, error: null })
  const [compare, setCompare] = useState(null)
  useEffect(() => {
    let stop = false
    let timer = null
    const path = `${API}/runs${sessionId ? `?session=${encodeURIComponent(sessionId)}` : ''}`
    const poll = async () => {
      try {
        const r = await getJson(path)
        if (stop) return
        if (r.status === 200 && r.body && Array.isArray(r.body.runs)) setSt({ doc: r.body, off: false, error: null })
        // --no-runs (or a sidecar older than the runs routes): the notice, never a broken view
        else if (r.status === 404) setSt({ doc: null, off: true, error: null })
        else setSt({ doc: null, off: false, error: errorOf(r) })
      } catch (err) {
        if (!stop) setSt({ doc: null, off: false, error: String((err && err.message) || err) })
      }
      if (!stop) timer = setTimeout(poll, RUNS_EVERY_MS)
    }
    poll()
    return () => {
      stop = true
      clearTimeout(timer)
    }
  }, [sessionId])
  const onCompare = async (id) => {
    setCompare({ id, busy: true })
    try {
      const r = await getJson(`${API}/compare?a=${encodeURIComponent(id)}`)
      setCompare(r.status === 200 && r.body ? { id, doc: r.body } : { id, error: errorOf(r) })
    } catch (err) {
      setCompare({ id, error: String((err && err.message) || err) })
    }
  }
  return <RunsTable doc={st.doc} off={st.off} error={st.error} lang={lang} compare={compare} onCompare={onCompare} />
}
