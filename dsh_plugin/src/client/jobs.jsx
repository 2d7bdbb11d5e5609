// The session's jobs (GPU tab), the chip's summary of the live jobs, and the "sidecar missing" card.
//
// GET /dsh-gpu-dashboard/api/jobs?session=ID answers the jobs linked to that DSH session (the host
// matches DSH_SESSION_ID in the job's process lineage, or its working directory under the session's
// workspace); GET /dsh-gpu-dashboard/api/jobs every job of the user. Both lists are shown in the
// order, and with the rows, of the shared view model (view_model.js jobList), as the page's are.
import { useEffect, useState, useSyncExternalStore } from 'react'
import { STATUS_COLORS, STATUS_TEXT_COLORS, statusOf, t } from '../../../sidecar/static/shared/format.js'
import { defaultJobId, jobList, orderJobs } from '../../../sidecar/static/shared/view_model.js'
import { worstFirst } from '../../host/jobs.js'
import { API, clampRefresh, getStore } from './store.js'
import { useLang } from './shared.jsx'

/** Poll /jobs (for one session, or all) while mounted. {state: loading|ok|none|error, doc} */
export function useJobs(sessionId) {
  const store = getStore()
  const settings = useSyncExternalStore(store.settings.subscribe, store.settings.get, store.settings.get)
  const [result, setResult] = useState({ state: 'loading', doc: null })
  useEffect(() => {
    let stop = false
    let timer = null
    const path = `${API}/jobs${sessionId ? `?session=${encodeURIComponent(sessionId)}` : ''}`
    const poll = async () => {
      try {
        const res = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' })
        let body = null
        try {
          body = await res.json()
        } catch {
          body = null
        }
        if (stop) return
        if (res.status === 200 && body && Array.isArray(body.jobs)) setResult({ state: 'ok', doc: body })
        // an older sidecar without /jobs, or none answering: the GPU view says why
        else setResult({ state: res.status === 404 ? 'none' : 'error', doc: null, httpStatus: res.status })
      } catch {
        if (!stop) setResult({ state: 'error', doc: null })
      }
      if (!stop) timer = setTimeout(poll, Math.round(clampRefresh(settings.refreshS) * 1000))
    }
    poll()
    return () => {
      stop = true
      clearTimeout(timer)
    }
  }, [sessionId, settings.refreshS])
  return result
}

const LINK_TEXT = { shell: 'sessionJobs.linkShell', workspace: 'sessionJobs.linkWorkspace', attached: 'sessionJobs.linkAttached' }

/** Why a row is (or is not) the session's. */
function linkText(link, lang) {
  if (link && link.by === 'none') {
    return link.cwd
      ? t(lang, 'sessionJobs.linkNone', { cwd: link.cwd, workspace: link.workspace || '…' })
      : t(lang, 'sessionJobs.linkNoneNoCwd')
  }
  return t(lang, LINK_TEXT[link && link.by] || 'sessionJobs.linkWorkspace')
}

function JobRow({ row, link, lang, onSelect }) {
  return (
    <li>
      <button
        type="button"
        className={`dgd-job${row.shown ? ' dgd-job-on' : ''}`}
        data-testid="dsh-gpu-session-job"
        data-job-id={row.id}
        data-status={row.status}
        data-link={link ? link.by : ''}
        aria-pressed={row.shown ? 'true' : 'false'}
        title={t(lang, 'sessionJobs.select')}
        onClick={() => onSelect(row.id)}
      >
        <span className="dgd-job-status" style={{ background: STATUS_COLORS[row.status], color: STATUS_TEXT_COLORS[row.status] }}>
          {row.status}
        </span>
        <span className="dgd-job-pid dgd-mono">{row.pid}</span>
        <span className="dgd-job-cmd dgd-mono">{row.cmd}</span>
        <span className="dgd-muted dgd-job-link" data-testid="dsh-gpu-session-job-link">
          {row.exited ? `${row.exited} · ` : ''}
          {linkText(link, lang)}
        </span>
      </button>
    </li>
  )
}

/** One list of jobs: the live ones, then the exited ones under "Exited jobs (N)", collapsed unless the chosen job is one of them. */
export function JobRows({ jobs, selected, lang, onSelect }) {
  const vm = jobList(jobs, lang, selected)
  const links = new Map(jobs.map((j) => [j.id, j.link]))
  const rows = (list) => list.map((row) => <JobRow key={row.id} row={row} link={links.get(row.id)} lang={lang} onSelect={onSelect} />)
  return (
    <>
      {vm.live.length ? <ul className="dgd-jobs-list">{rows(vm.live)}</ul> : null}
      {vm.exited.length ? (
        <details className="dgd-jobs-exited" data-testid="dsh-gpu-session-exited" data-count={vm.exited.length} open={vm.exitedOpen || undefined}>
          <summary className="dgd-muted">{vm.exitedLabel}</summary>
          <ul className="dgd-jobs-list">{rows(vm.exited)}</ul>
        </details>
      ) : null}
    </>
  )
}

/**
 * The GPU tab of one session: `children(header, showJob)` renders the view with the session's jobs
 * (JobRows) as its header; showJob is false while the session has none. Without a session id,
 * or when the sidecar has no /jobs, the view is shown as it is: children(null, true).
 */
export function SessionJobs({ sessionId, children }) {
  const lang = useLang()
  const store = getStore()
  const [, bump] = useState(0)
  const jobs = useJobs(sessionId || null)
  const list = jobs.state === 'ok' ? jobs.doc.jobs : []
  // the user's jobs not linked to this session (host/jobs.js unlinkedJobs): shown below, marked
  const others = jobs.state === 'ok' && Array.isArray(jobs.doc.unlinked) ? jobs.doc.unlinked : []
  const otherUsers = jobs.state === 'ok' ? Number(jobs.doc.unlinked_other_users) || 0 : 0
  const chosen = store.job()
  const ids = [...list, ...others].map((j) => j.id)
  // none chosen yet (or gone): the newest live job of the session, else of the user's others, else the newest exited
  const selected = ids.includes(chosen) ? chosen : defaultJobId(list, others)
  useEffect(() => {
    if (jobs.state === 'ok' && selected && selected !== chosen) store.setJob(selected)
  }, [jobs.state, selected, chosen])
  if (!sessionId || jobs.state !== 'ok') return children(null, true)
  const workspace = jobs.doc.session && Array.isArray(jobs.doc.session.workspaces) ? jobs.doc.session.workspaces[0] : ''
  const select = (id) => {
    store.setJob(id)
    bump((n) => n + 1)
  }
  return children(
    <section className="dgd-jobs" data-testid="dsh-gpu-session-jobs" data-count={list.length}>
      <h3 className="dgd-jobs-title">{t(lang, 'sessionJobs.title')}</h3>
      {list.length === 0 ? (
        <p className="dgd-muted" data-testid="dsh-gpu-session-empty">
          {t(lang, 'sessionJobs.none', { workspace: workspace || '…' })}
        </p>
      ) : (
        <JobRows jobs={list} selected={selected} lang={lang} onSelect={select} />
      )}
      {others.length > 0 ? (
        <>
          <h4 className="dgd-jobs-title" data-testid="dsh-gpu-session-others" data-count={others.length}>
            {t(lang, 'sessionJobs.others')}
          </h4>
          <JobRows jobs={others} selected={selected} lang={lang} onSelect={select} />
        </>
      ) : null}
      {otherUsers > 0 ? (
        <p className="dgd-muted" data-testid="dsh-gpu-session-other-users" data-count={otherUsers}>
          {t(lang, 'sessionJobs.otherUsers', { n: otherUsers })}
        </p>
      ) : null}
    </section>,
    ids.length > 0,
  )
}

/** Inside the sidebar chip: how many jobs are live, coloured by the worst of them. */
export function JobsSummary() {
  const lang = useLang()
  const jobs = useJobs(null)
  return jobs.state === 'ok' ? <JobsCount jobs={jobs.doc.jobs} lang={lang} /> : null
}

/** The chip's count of `jobs` (those live; none: nothing). */
export function JobsCount({ jobs, lang }) {
  const live = orderJobs(jobs).live
  if (!live.length) return null
  const sorted = worstFirst(live)
  const worst = statusOf(sorted[0])
  const n = live.length
  return (
    <span
      className="dgd-chip-jobs"
      data-testid="dsh-gpu-chip-jobs"
      data-count={n}
      data-worst={worst}
      data-worst-job={sorted[0].id}
      style={{ borderColor: STATUS_COLORS[worst] }}
    >
      {n === 1 ? t(lang, 'sessionJobs.countOne') : t(lang, 'sessionJobs.count', { n })}
    </span>
  )
}

/** Settings: the sidecar the plugin started (config `autostart`), as <dt>/<dd>; null when none. */
export function StartedSidecarRow({ cfg, lang }) {
  const s = cfg && cfg.sidecar
  // the config answer is fetched when the connection state changes: a restart between two polls
  // changes none, so read it afresh when the settings page opens
  useEffect(() => {
    getStore().refreshNow()
  }, [])
  if (!s) return null
  const state = t(lang, `settings.started.${s.state}`)
  return (
    <>
      <dt>{t(lang, 'settings.startedSidecar')}</dt>
      <dd data-testid="dsh-gpu-started-sidecar" data-state={s.state}>
        <span className="dgd-mono">{s.command}</span>
        <span className="dgd-muted">
          {' · '}
          {t(lang, 'settings.startedDetail', { state, pid: s.pid ?? '—', restarts: s.restarts ?? 0 })}
          {s.lastError ? ` · ${s.lastError}` : ''}
        </span>
        {s.because ? (
          <span className="dgd-muted" data-testid="dsh-gpu-started-because">
            {' · '}
            {t(lang, 'settings.startedBecause', { reason: s.because, url: s.url || '—' })}
          </span>
        ) : null}
      </dd>
    </>
  )
}

/** The plugin could not run its sidecar command: what to install. */
export function SidecarMissing({ st, lang }) {
  const p = (st && st.problem) || {}
  return (
    <div className="dgd-root dgd-alert" data-testid="dsh-gpu-sidecar-missing" role="status">
      <div className="dgd-alert-icon" aria-hidden="true">
        !
      </div>
      <div className="dgd-alert-body">
        <p className="dgd-alert-title">{t(lang, 'missing.title')}</p>
        <p>{t(lang, 'missing.body', { command: p.command || 'dsh-sidecar', error: p.detail || '' })}</p>
        <div className="dgd-cmds">
          <div className="dgd-cmd">
            <code data-testid="dsh-gpu-install-command">{p.install || 'python3 -m pip install dsh-gpu-dashboard'}</code>
          </div>
        </div>
        <p className="dgd-alert-meta">
          {t(lang, 'missing.config')} {t(lang, 'missing.retry')}
        </p>
      </div>
    </div>
  )
}
