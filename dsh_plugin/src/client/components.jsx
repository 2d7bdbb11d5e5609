// React components of the DSH plugin. Wording, colours and number formats come from the shared
// sidecar/static/format.js (the standalone page uses the same module); the history charts reuse
// the standalone page's sidecar/static/charts.js (TimeChart) through a ref.
import { Component, useEffect, useMemo, useRef, useState, useSyncExternalStore } from 'react'
import {
  NA,
  SERIES_COLORS,
  SEVERITY_COLORS,
  STATUS_COLORS,
  STATUS_TEXT_COLORS,
  UNREACHABLE_COMMAND,
  UNREACHABLE_COMMAND_RUN,
  UTIL_COLORS,
  deviceKind,
  deviceText,
  fmtAgo,
  fmtClock,
  fmtCount,
  fmtFraction,
  fmtMiB,
  fmtPct,
  fmtRate,
  modelGpu,
  schemaMismatch,
  roleText,
  statusOf,
  summarize,
  t,
  utilLevel,
} from '../../../sidecar/static/format.js'
import { TimeChart, niceTicks } from '../../../sidecar/static/charts.js'

/** @typedef {import('../../../sidecar/static/contract.js').StatusDocument} StatusDocument */
import { API, REFRESH_MAX_S, REFRESH_MIN_S, clampRefresh, getStore } from './store.js'
import { JobsSummary, SessionJobs, SidecarMissing } from './jobs.jsx'

export const PLUGIN_VERSION = '0.1.0'
export const SUPPORTED_DSH = '0.1.0-rc.8'

const isNum = (x) => typeof x === 'number' && Number.isFinite(x)

// ------------------------------------------------------------------ hooks

function useStatus() {
  const store = getStore()
  return useSyncExternalStore(store.subscribeStatus, store.status.get, store.status.get)
}
function useHistory() {
  const store = getStore()
  return useSyncExternalStore(store.subscribeHistory, store.history.get, store.history.get)
}
function useSettings() {
  const store = getStore()
  return useSyncExternalStore(store.settings.subscribe, store.settings.get, store.settings.get)
}
function useUi() {
  const store = getStore()
  return useSyncExternalStore(store.ui.subscribe, store.ui.get, store.ui.get)
}
function useLang() {
  useSettings()
  return getStore().lang()
}
/** Re-render every `ms` (for "updated 3 s ago"). */
function useTick(ms) {
  const [, setN] = useState(0)
  useEffect(() => {
    const id = setInterval(() => setN((n) => (n + 1) % 1e6), ms)
    return () => clearInterval(id)
  }, [ms])
}

// ------------------------------------------------------------------ error containment

export function ErrorCard({ error, where, lang }) {
  const l = lang || 'en'
  const detail = error && (error.stack || error.message) ? String(error.stack || error.message) : String(error)
  return (
    <div className="dgd-root dgd-alert dgd-alert-error" data-testid="dsh-gpu-error" role="alert">
      <div className="dgd-alert-icon" aria-hidden="true">!</div>
      <div className="dgd-alert-body">
        <p className="dgd-alert-title">{t(l, 'error.title')}</p>
        <p>{t(l, 'error.body')}</p>
        <div className="dgd-error-detail">{(where ? `[${where}] ` : '') + detail.slice(0, 2000)}</div>
      </div>
    </div>
  )
}

export class Boundary extends Component {
  constructor(props) {
    super(props)
    this.state = { error: null }
  }
  static getDerivedStateFromError(error) {
    return { error }
  }
  componentDidCatch(error) {
    try {
      console.error(`[dsh-gpu-dashboard] ${this.props.where || 'panel'} failed to render`, error)
    } catch {
      /* ignore */
    }
  }
  render() {
    if (this.state.error) {
      if (this.props.compact) {
        return (
          <span className="dgd-root" data-testid="dsh-gpu-error" title={String(this.state.error)}>
            <span className="dgd-bad">GPU ⚠</span>
          </span>
        )
      }
      return <ErrorCard error={this.state.error} where={this.props.where} />
    }
    return this.props.children
  }
}

/** Wrap a slot component so a render error shows our error card instead of a blank entry. */
export function guarded(Inner, where, compact) {
  function Guarded(props) {
    return (
      <Boundary where={where} compact={compact}>
        <Inner {...props} />
      </Boundary>
    )
  }
  Guarded.displayName = `DshGpu(${where})`
  return Guarded
}

// ------------------------------------------------------------------ small pieces

function Badge({ doc, lang, big }) {
  const s = statusOf(doc)
  return (
    <span
      className={`dgd-badge${big ? ' dgd-badge-big' : ''}`}
      data-testid="dsh-gpu-badge"
      data-status={s}
      style={{ background: STATUS_COLORS[s], color: STATUS_TEXT_COLORS[s] }}
    >
      <span className="dgd-badge-dot" />
      {doc ? summarize(doc, lang).label : t(lang, 'status.noData')}
    </span>
  )
}

function Meter({ label, pct, value, color }) {
  const w = isNum(pct) ? Math.max(0, Math.min(100, pct)) : 0
  return (
    <div className="dgd-meter">
      <span className="dgd-meter-label" title={label}>
        {label}
      </span>
      <span className="dgd-bar" role="meter" aria-label={label} aria-valuenow={isNum(pct) ? Math.round(pct) : undefined}>
        <i style={{ width: `${w}%`, background: color }} />
      </span>
      <span className="dgd-meter-value">{value}</span>
    </div>
  )
}

function gpuMemPct(g) {
  return isNum(g && g.mem_used_mib) && isNum(g && g.mem_total_mib) && g.mem_total_mib > 0
    ? (g.mem_used_mib / g.mem_total_mib) * 100
    : null
}

function GpuMeters({ gpu, lang }) {
  const memPct = gpuMemPct(gpu)
  return (
    <div className="dgd-meters">
      <Meter
        label={t(lang, 'gpu.util')}
        pct={gpu.util_pct}
        value={fmtPct(gpu.util_pct)}
        color={UTIL_COLORS[utilLevel(gpu.util_pct)]}
      />
      <Meter
        label={t(lang, 'gpu.mem')}
        pct={memPct}
        value={
          isNum(gpu.mem_total_mib)
            ? t(lang, 'gpu.memOf', { used: fmtMiB(gpu.mem_used_mib), total: fmtMiB(gpu.mem_total_mib) })
            : fmtMiB(gpu.mem_used_mib)
        }
        color={isNum(memPct) && memPct >= 90 ? SEVERITY_COLORS.error : SERIES_COLORS[0]}
      />
    </div>
  )
}

function Warnings({ doc, lang, limit }) {
  const all = summarize(doc, lang).warnings
  const list = isNum(limit) ? all.slice(0, limit) : all
  if (!all.length) return null
  return (
    <ul className="dgd-warnings" data-testid="dsh-gpu-warnings">
      {list.map((w, i) => (
        <li key={`${w.code || 'w'}-${i}`} className="dgd-warning" style={{ borderLeftColor: w.color }} data-code={w.code || ''}>
          <div className="dgd-warning-msg">
            <span className="dgd-warning-sev" style={{ color: w.color }}>
              {t(lang, `severity.${w.severity}`)}
            </span>
            {w.message || w.code || NA}
          </div>
          {w.hint ? <div className="dgd-warning-hint">{w.hint}</div> : null}
        </li>
      ))}
      {all.length > list.length ? (
        <li className="dgd-muted">{t(lang, 'glance.moreWarnings', { n: all.length - list.length })}</li>
      ) : null}
    </ul>
  )
}

function Updated({ lastOk, lang }) {
  useTick(1000)
  return (
    <span className="dgd-updated" data-testid="dsh-gpu-updated">
      {lastOk ? t(lang, 'updated.label', { ago: fmtAgo((Date.now() - lastOk) / 1000, lang) }) : t(lang, 'updated.never')}
    </span>
  )
}

export function Unreachable({ st, lang }) {
  const settings = useSettings()
  const p = st.problem || {}
  return (
    <div className="dgd-root dgd-alert" data-testid="dsh-gpu-unreachable" role="status">
      <div className="dgd-alert-icon" aria-hidden="true">
        !
      </div>
      <div className="dgd-alert-body">
        <p className="dgd-alert-title">{t(lang, 'unreachable.title')}</p>
        <p>{t(lang, 'unreachable.body')}</p>
        <div className="dgd-cmds">
          <div className="dgd-cmd">
            <code data-testid="dsh-gpu-unreachable-command">{UNREACHABLE_COMMAND}</code>
            <span className="dgd-muted">{t(lang, 'unreachable.attach')}</span>
          </div>
          <div className="dgd-cmd">
            <code>{UNREACHABLE_COMMAND_RUN}</code>
            <span className="dgd-muted">{t(lang, 'unreachable.run')}</span>
          </div>
        </div>
        <p className="dgd-alert-meta">
          {p.url ? t(lang, 'unreachable.url', { url: p.url }) + ' · ' : ''}
          {t(lang, 'unreachable.retry', { s: clampRefresh(settings.refreshS) })}
          {st.lastOk ? ' ' + t(lang, 'unreachable.lastSeen', { ago: fmtAgo((Date.now() - st.lastOk) / 1000, lang) }) : ''}
          {p.detail ? ' ' + t(lang, 'unreachable.error', { error: p.detail }) : ''}
        </p>
      </div>
    </div>
  )
}

function problemText(p, lang) {
  if (!p) return ''
  if (p.code === 'host-missing') return t(lang, 'error.hostMissing', { path: p.path || `${API}/status` })
  if (p.code === 'auth') return t(lang, 'error.auth', { status: p.httpStatus })
  if (p.code === 'bad-response') return t(lang, 'error.badResponse', { detail: p.detail || '' })
  if (p.code === 'http') return t(lang, 'error.http', { status: p.httpStatus, detail: p.detail || '' })
  if (p.code === 'schema') return schemaMismatch({ schema: p.got ?? undefined }, lang)
  return p.detail || String(p.code || 'error')
}

function ProblemCard({ st, lang }) {
  return <ErrorCard error={{ message: problemText(st.problem, lang) }} lang={lang} />
}

/** Unreachable / error / loading, or null when there is data to show. */
function ConnectionNotice({ st, lang }) {
  if (st.state === 'unreachable') return <Unreachable st={st} lang={lang} />
  if (st.state === 'missing') return <SidecarMissing st={st} lang={lang} />
  if (st.state === 'error') return <ProblemCard st={st} lang={lang} />
  if (st.state === 'loading' && !st.doc) return <p className="dgd-muted">{t(lang, 'loading')}</p>
  return null
}

// ------------------------------------------------------------------ sidebar chip

const GPU_ICON = (
  <svg viewBox="0 0 24 24" aria-hidden="true">
    <rect x="3" y="6" width="18" height="12" rx="2" />
    <rect x="8" y="9.5" width="8" height="5" rx="1" />
    <path d="M7 3v3M12 3v3M17 3v3M7 18v3M12 18v3M17 18v3" />
  </svg>
)

export function StatusChip({ wide }) {
  const st = useStatus()
  const ui = useUi()
  const lang = useLang()
  const store = getStore()
  const doc = st.state === 'ok' || st.doc ? st.doc : null
  const code = doc ? statusOf(doc) : null
  let label
  let labelStyle = {}
  let dot = STATUS_COLORS.UNKNOWN
  let util = ''
  if (st.state === 'unreachable' || st.state === 'missing') {
    label = t(lang, 'chip.unreachable')
    dot = SEVERITY_COLORS.warning
  } else if (st.state === 'error') {
    label = t(lang, 'chip.error')
    dot = SEVERITY_COLORS.error
  } else if (!doc) {
    label = t(lang, 'chip.loading')
  } else {
    label = code
    dot = STATUS_COLORS[code]
    labelStyle = { background: STATUS_COLORS[code], color: STATUS_TEXT_COLORS[code] }
    util = summarize(doc, lang).util
  }
  const statusWords =
    st.state === 'ok' && doc
      ? `${summarize(doc, lang).label}${util && util !== NA ? ` · ${util}` : ''}`
      : st.state === 'unreachable'
        ? t(lang, 'unreachable.title')
        : label
  return (
    <button
      type="button"
      className={`dgd-root dgd-chip${wide === false ? ' dgd-rail' : ''}`}
      data-testid="dsh-gpu-chip"
      data-state={st.state}
      data-status={code || ''}
      aria-expanded={ui.glanceOpen ? 'true' : 'false'}
      aria-label={t(lang, 'chip.title', { status: statusWords })}
      title={t(lang, 'chip.title', { status: statusWords })}
      onClick={() => store.toggleGlance()}
    >
      <span className="dgd-chip-icon">
        {GPU_ICON}
        <span className="dgd-chip-dot" style={{ background: dot }} />
      </span>
      {wide === false ? null : (
        <>
          <span className="dgd-chip-label" style={labelStyle} data-testid="dsh-gpu-chip-status">
            {label}
          </span>
          {doc && st.state === 'ok' ? null : <span className="dgd-chip-text dgd-muted">{t(lang, 'plugin.name')}</span>}
          <JobsSummary />
          {util ? (
            <span className="dgd-chip-util" data-testid="dsh-gpu-chip-util">
              {util}
            </span>
          ) : null}
        </>
      )}
    </button>
  )
}

// ------------------------------------------------------------------ glance card

export function GlanceCard() {
  const ui = useUi()
  if (!ui.glanceOpen) return null
  return <GlanceCardOpen />
}

function GlanceCardOpen() {
  const st = useStatus()
  const lang = useLang()
  const store = getStore()
  const ref = useRef(null)
  const [pos, setPos] = useState(null)
  useEffect(() => {
    const onKey = (e) => {
      if (e.key === 'Escape') store.toggleGlance(false)
    }
    // Float just above the chip (the sidebar may be wide, a rail, or resized).
    const place = () => {
      try {
        const chip = document.querySelector('[data-testid="dsh-gpu-chip"]')
        if (!chip) return setPos(null)
        const r = chip.getBoundingClientRect()
        setPos({ left: Math.max(8, Math.round(r.left)), bottom: Math.max(8, Math.round(window.innerHeight - r.top + 8)) })
      } catch {
        setPos(null)
      }
    }
    place()
    window.addEventListener('keydown', onKey)
    window.addEventListener('resize', place)
    return () => {
      window.removeEventListener('keydown', onKey)
      window.removeEventListener('resize', place)
    }
  }, [store])
  const doc = st.doc
  const gpus = doc && Array.isArray(doc.gpus) ? doc.gpus.filter(Boolean) : []
  return (
    <section
      ref={ref}
      className="dgd-root dgd-glance"
      style={pos ? { left: pos.left, bottom: pos.bottom, maxHeight: `calc(100vh - ${pos.bottom + 16}px)` } : undefined}
      data-testid="dsh-gpu-glance"
      data-state={st.state}
      role="dialog"
      aria-label={t(lang, 'glance.title')}
    >
      <div className="dgd-glance-head">
        <span className="dgd-glance-title">{t(lang, 'glance.title')}</span>
        <button type="button" className="dgd-close" aria-label={t(lang, 'glance.close')} onClick={() => store.toggleGlance(false)}>
          ×
        </button>
      </div>
      <ConnectionNotice st={st} lang={lang} />
      {doc ? (
        <>
          <div>
            <Badge doc={doc} lang={lang} />
          </div>
          <p className="dgd-message" data-testid="dsh-gpu-message">
            {summarize(doc, lang).message || NA}
          </p>
          {targetText(doc, lang) ? (
            <span className="dgd-muted" style={{ fontSize: 12 }}>
              {targetText(doc, lang)}
            </span>
          ) : null}
          <Warnings doc={doc} lang={lang} limit={3} />
          {gpus.length ? (
            gpus.map((g, i) => (
              <div className="dgd-glance-gpu" key={`${g.index ?? i}`} data-testid="dsh-gpu-glance-gpu">
                <span className="dgd-glance-gpu-name">
                  GPU {isNum(g.index) ? g.index : i} · {g.name || NA}
                </span>
                <GpuMeters gpu={g} lang={lang} />
              </div>
            ))
          ) : (
            <p className="dgd-muted">{t(lang, 'glance.noGpus')}</p>
          )}
          <Updated lastOk={st.lastOk} lang={lang} />
          <p className="dgd-muted" style={{ margin: 0, fontSize: 12 }}>
            {t(lang, 'glance.more')}
          </p>
        </>
      ) : null}
    </section>
  )
}

// ------------------------------------------------------------------ full view

function targetText(doc, lang) {
  const tg = doc && doc.target
  if (!tg || typeof tg !== 'object') return ''
  const parts = []
  if (isNum(tg.pid)) parts.push(t(lang, 'target.pid', { pid: tg.pid }))
  if (tg.name) parts.push(String(tg.name))
  if (tg.alive === true) parts.push(t(lang, 'target.running'))
  if (tg.alive === false) parts.push(t(lang, 'target.exited'))
  if (isNum(tg.create_time_unix_s)) parts.push(t(lang, 'target.since', { ago: fmtAgo(Date.now() / 1000 - tg.create_time_unix_s, lang) }))
  return parts.join(' · ')
}

function Hero({ doc, lang, lastOk }) {
  const rt = (doc && doc.runtime) || {}
  const cuda =
    rt.cuda_available === true
      ? t(lang, 'summary.cudaYes', { n: isNum(rt.device_count) ? rt.device_count : NA })
      : rt.cuda_available === false
        ? t(lang, 'summary.cudaNo')
        : NA
  return (
    <section className="dgd-card dgd-hero" data-testid="dsh-gpu-hero">
      <div className="dgd-hero-main">
        <Badge doc={doc} lang={lang} big />
        <div className="dgd-hero-text">
          <p className="dgd-message" data-testid="dsh-gpu-message">
            {summarize(doc, lang).message || NA}
          </p>
          {targetText(doc, lang) ? (
            <span className="dgd-muted" data-testid="dsh-gpu-target">
              {targetText(doc, lang)}
            </span>
          ) : null}
          <Updated lastOk={lastOk} lang={lang} />
        </div>
      </div>
      <dl className="dgd-facts" data-testid="dsh-gpu-facts">
        <div>
          <dt>{t(lang, 'summary.util')}</dt>
          <dd>{fmtPct(modelGpu(doc)?.util_pct)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.mem')}</dt>
          <dd>{fmtMiB(modelGpu(doc)?.mem_used_mib)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.modelDevice')}</dt>
          <dd>{deviceText(doc.model_device)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.inputDevice')}</dt>
          <dd>{deviceText(doc.input_device)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.cuda')}</dt>
          <dd title={cuda}>{cuda}</dd>
        </div>
      </dl>
      <Warnings doc={doc} lang={lang} />
    </section>
  )
}

function procsOnGpu(doc, index) {
  const out = []
  for (const p of (doc && doc.processes) || []) {
    if (!p || !Array.isArray(p.gpu)) continue
    for (const g of p.gpu) if (g && g.index === index) out.push({ proc: p, gpu: g })
  }
  return out
}

function GpuCards({ doc, lang }) {
  const gpus = Array.isArray(doc.gpus) ? doc.gpus.filter(Boolean) : []
  const unusable = Array.isArray(doc.system_gpus)
    ? doc.system_gpus.filter((s) => s && (s.nvml_index === null || s.nvml_index === undefined))
    : []
  const modelDev = typeof doc.model_device === 'string' ? doc.model_device : ''
  return (
    <section data-testid="dsh-gpu-gpus">
      <h3 className="dgd-section-title">{t(lang, 'gpus.title')}</h3>
      {!gpus.length && !unusable.length ? (
        <div className="dgd-card dgd-muted">
          {t(lang, 'gpus.none')}
          {doc.nvml && doc.nvml.ok === false && doc.nvml.error ? (
            <div className="dgd-bad">{t(lang, 'runtime.nvmlError', { error: doc.nvml.error })}</div>
          ) : null}
        </div>
      ) : null}
      <div className="dgd-gpu-grid">
        {gpus.map((g, i) => {
          const procs = procsOnGpu(doc, g.index)
          const fw = isNum(g.framework_index) ? `cuda:${g.framework_index}` : null
          return (
            <article className="dgd-card" key={`gpu-${g.index ?? i}`} data-testid="dsh-gpu-card" data-index={g.index ?? ''}>
              <div className="dgd-gpu-head">
                <span className="dgd-gpu-index">GPU {isNum(g.index) ? g.index : i}</span>
                <span className="dgd-gpu-name" title={g.uuid || ''}>
                  {g.name || NA}
                </span>
                {fw && modelDev === fw ? <span className="dgd-tag dgd-tag-ok">{t(lang, 'gpu.modelHere')}</span> : null}
                {fw ? (
                  <span className="dgd-tag" title={t(lang, 'gpu.framework', { dev: fw })}>
                    {fw}
                  </span>
                ) : (
                  <span className="dgd-tag dgd-tag-warn" title={t(lang, 'gpu.frameworkHidden')}>
                    {t(lang, 'gpu.hiddenTag')}
                  </span>
                )}
              </div>
              <GpuMeters gpu={g} lang={lang} />
              <div className="dgd-gpu-foot">
                {procs.length ? (
                  <>
                    {t(lang, 'gpu.procs')}
                    <ul className="dgd-gpu-procs">
                      {procs.map(({ proc, gpu }) => (
                        <li key={`${proc.pid}`}>
                          <span className="dgd-mono">{proc.pid}</span>
                          <span>{roleText(proc, lang)}</span>
                          <b>{fmtMiB(gpu.mem_used_mib)}</b>
                        </li>
                      ))}
                    </ul>
                  </>
                ) : (
                  <span className="dgd-muted">{t(lang, 'gpu.noProcs')}</span>
                )}
              </div>
            </article>
          )
        })}
        {unusable.map((s, i) => (
          <article className="dgd-card" key={`sys-${s.pci || i}`} data-testid="dsh-gpu-igpu">
            <div className="dgd-gpu-head">
              <span className="dgd-gpu-name">{s.name || s.vendor || NA}</span>
              <span className="dgd-tag dgd-tag-warn">{t(lang, 'igpu.badge')}</span>
            </div>
            <div className="dgd-muted">{t(lang, 'igpu.note')}</div>
            <div className="dgd-gpu-foot">
              {s.pci ? t(lang, 'igpu.pci', { pci: s.pci }) : null}
              {s.driver ? ` · ${t(lang, 'igpu.driver', { driver: s.driver })}` : null}
            </div>
          </article>
        ))}
      </div>
    </section>
  )
}

function DeviceChip({ dev }) {
  return <span className={`dgd-dev dgd-dev-${deviceKind(dev)}`}>{deviceText(dev)}</span>
}

/** cmdline may be a list (argv) or a string. */
function cmdText(cmd) {
  if (Array.isArray(cmd)) return cmd.filter((a) => a !== null && a !== undefined).map(String).join(' ')
  return cmd === null || cmd === undefined ? '' : String(cmd)
}

function ProcessTable({ doc, lang }) {
  const procs = Array.isArray(doc.processes) ? doc.processes.filter(Boolean) : []
  return (
    <section>
      <h3 className="dgd-section-title">{t(lang, 'procs.title')}</h3>
      <div className="dgd-card dgd-table-wrap">
        {procs.length ? (
          <table className="dgd-table" data-testid="dsh-gpu-processes">
            <thead>
              <tr>
                <th>{t(lang, 'col.process')}</th>
                <th>{t(lang, 'col.role')}</th>
                <th>{t(lang, 'col.model')}</th>
                <th>{t(lang, 'col.modelDevice')}</th>
                <th>{t(lang, 'col.inputDevice')}</th>
                <th className="dgd-num">{t(lang, 'col.gpuMem')}</th>
                <th className="dgd-num">{t(lang, 'col.sm')}</th>
                <th className="dgd-num">{t(lang, 'col.cpu')}</th>
                <th className="dgd-num">{t(lang, 'col.dataWait')}</th>
                <th className="dgd-num">{t(lang, 'col.rate')}</th>
              </tr>
            </thead>
            <tbody>
              {procs.map((p, i) => {
                const models = Array.isArray(p.models) ? p.models.filter(Boolean) : []
                const m = models[0] || null
                const gpuRows = Array.isArray(p.gpu) ? p.gpu.filter(Boolean) : []
                const mem = gpuRows.reduce((a, g) => (isNum(g.mem_used_mib) ? (a ?? 0) + g.mem_used_mib : a), null)
                const sm = gpuRows.reduce((a, g) => (isNum(g.sm_util_pct) ? Math.max(a ?? 0, g.sm_util_pct) : a), null)
                return (
                  <tr key={`${p.pid ?? i}`} data-testid="dsh-gpu-process" data-pid={p.pid ?? ''}>
                    <td>
                      <span className="dgd-proc-name">{p.name || NA}</span> <span className="dgd-mono dgd-muted">{p.pid ?? NA}</span>
                      {cmdText(p.cmdline) ? (
                        <span className="dgd-proc-cmd" title={cmdText(p.cmdline)}>
                          {cmdText(p.cmdline)}
                        </span>
                      ) : null}
                      {p.probe_error ? (
                        <div className="dgd-probe-error">{t(lang, 'probe.error', { error: p.probe_error })}</div>
                      ) : null}
                    </td>
                    <td title={!p.has_probe ? t(lang, 'probe.noneTitle') : undefined}>{roleText(p, lang)}</td>
                    <td>
                      {models.length
                        ? models.map((mm, j) => (
                            <div key={j}>
                              {mm.name || NA}
                              {isNum(mm.param_count) ? (
                                <span className="dgd-muted"> · {t(lang, 'model.params', { n: fmtCount(mm.param_count) })}</span>
                              ) : null}
                            </div>
                          ))
                        : NA}
                    </td>
                    <td>
                      {models.length ? models.map((mm, j) => <div key={j}><DeviceChip dev={mm.device} /></div>) : <DeviceChip dev={null} />}
                    </td>
                    <td>
                      {models.length ? (
                        models.map((mm, j) => <div key={j}><DeviceChip dev={mm.input_device} /></div>)
                      ) : (
                        <DeviceChip dev={null} />
                      )}
                    </td>
                    <td className="dgd-num">{fmtMiB(mem)}</td>
                    <td className="dgd-num">{fmtPct(sm)}</td>
                    <td className="dgd-num">{fmtPct(p.cpu_pct)}</td>
                    <td className="dgd-num">{m ? fmtFraction(m.data_wait_fraction) : NA}</td>
                    <td className="dgd-num">{m ? fmtRate(m.forward_rate_hz) : NA}</td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        ) : (
          <div className="dgd-muted" style={{ padding: 14 }}>
            {t(lang, 'procs.none')}
          </div>
        )}
      </div>
    </section>
  )
}

let tooltipEl = null
let tooltipUsers = 0
function acquireTooltip() {
  tooltipUsers += 1
  if (!tooltipEl) {
    tooltipEl = document.createElement('div')
    tooltipEl.className = 'dgd-root dgd-tooltip'
    tooltipEl.hidden = true
    tooltipEl.setAttribute('data-testid', 'dsh-gpu-tooltip')
    document.body.appendChild(tooltipEl)
  }
  return tooltipEl
}
function releaseTooltip() {
  tooltipUsers -= 1
  if (tooltipUsers <= 0 && tooltipEl) {
    tooltipEl.remove()
    tooltipEl = null
    tooltipUsers = 0
  }
}

/** The standalone page's TimeChart (sidecar/static/charts.js), mounted into a React ref. */
function TimeChartBox({ data, emptyText, formatValue, title, group, testid }) {
  const bodyRef = useRef(null)
  const chartRef = useRef(null)
  const optsRef = useRef({ formatValue, title })
  optsRef.current.formatValue = formatValue
  optsRef.current.title = title
  useEffect(() => {
    const tip = acquireTooltip()
    const opts = {
      formatValue: (v, axis) => optsRef.current.formatValue(v, axis),
      title: () => (optsRef.current.title ? optsRef.current.title() : ''),
      tooltip: tip,
      group,
    }
    chartRef.current = new TimeChart(bodyRef.current, opts)
    return () => {
      try {
        const i = group.indexOf(chartRef.current)
        if (i >= 0) group.splice(i, 1)
        bodyRef.current && bodyRef.current.replaceChildren()
      } finally {
        chartRef.current = null
        releaseTooltip()
      }
    }
  }, [group])
  useEffect(() => {
    if (!chartRef.current) return
    chartRef.current.setEmptyText(emptyText)
    chartRef.current.setData(data)
  }, [data, emptyText])
  return <div className="dgd-chart-body" ref={bodyRef} data-testid={testid} />
}

const WINDOWS = ['60', '300', '900', 'all']

function buildSeries(samples, doc, lang, t0) {
  const memByGpu = new Map()
  const utilByGpu = new Map()
  for (const s of samples) {
    if (!s || !isNum(s.time_unix_s) || s.time_unix_s < t0) continue
    for (const g of Array.isArray(s.gpus) ? s.gpus : []) {
      if (!g || !isNum(g.index)) continue
      if (!memByGpu.has(g.index)) {
        memByGpu.set(g.index, [])
        utilByGpu.set(g.index, [])
      }
      if (isNum(g.mem_used_mib)) memByGpu.get(g.index).push([s.time_unix_s, g.mem_used_mib])
      if (isNum(g.util_pct)) utilByGpu.get(g.index).push([s.time_unix_s, g.util_pct])
    }
  }
  const indices = [...memByGpu.keys()].sort((a, b) => a - b)
  const mk = (map) =>
    indices.map((idx, i) => ({
      key: `gpu${idx}`,
      label: t(lang, 'chart.gpuN', { n: idx }),
      color: SERIES_COLORS[i % SERIES_COLORS.length],
      points: map.get(idx),
    }))
  const totals = new Map()
  for (const g of (doc && doc.gpus) || []) if (g && isNum(g.index) && isNum(g.mem_total_mib)) totals.set(g.index, g.mem_total_mib)
  return { mem: mk(memByGpu), util: mk(utilByGpu), totals }
}

function Legend({ series }) {
  return (
    <span className="dgd-legend">
      {series.map((s) => (
        <span key={s.key}>
          <i style={{ background: s.color }} />
          {s.label}
        </span>
      ))}
    </span>
  )
}

function HistoryCharts({ doc, lang }) {
  const h = useHistory()
  const [win, setWin] = useState('300')
  const group = useMemo(() => [], [])
  const samples = h.samples
  const last = samples.length ? samples[samples.length - 1].time_unix_s : Date.now() / 1000
  const first = samples.length ? samples[0].time_unix_s : last - 60
  const span = win === 'all' ? Math.max(60, last - first) : Number(win)
  const t1 = last
  const t0 = win === 'all' ? Math.min(first, last - 60) : last - span
  const { mem, util, totals } = useMemo(() => buildSeries(samples, doc, lang, t0), [samples, doc, lang, t0])
  const events = (h.events && h.events.length ? h.events : (doc && doc.events) || []).filter(Boolean)
  const gapS = Math.max(5, (h.intervalS || 1) * 4)

  let memMax = 0
  for (const s of mem) for (const p of s.points) memMax = Math.max(memMax, p[1])
  const totalList = [...totals.values()]
  const maxTotal = totalList.length ? Math.max(...totalList) : 0
  if (maxTotal && memMax > maxTotal * 0.6) memMax = maxTotal
  const memTicks = niceTicks(Math.max(memMax * 1.1, 64), 4, memMax > 4096 ? 1024 : 1)
  const memData = {
    series: mem,
    t0,
    t1,
    yMax: memTicks.max,
    yTicks: memTicks.ticks,
    limits: totalList.length === 1 ? [{ value: totalList[0], label: t(lang, 'gpu.memTotal', { total: fmtMiB(totalList[0]) }) }] : [],
    events,
    gapS,
  }
  const utilData = { series: util, t0, t1, yMax: 100, yTicks: [0, 25, 50, 75, 100], events, gapS }
  const growth = doc && doc.memory_growth // the verdict's decision, shown as is

  return (
    <section data-testid="dsh-gpu-history">
      <div className="dgd-block-head">
        <h3 className="dgd-section-title">{t(lang, 'charts.title')}</h3>
        <span className="dgd-window" role="group" aria-label={t(lang, 'chart.window')}>
          {WINDOWS.map((w) => (
            <button key={w} type="button" aria-pressed={w === win ? 'true' : 'false'} onClick={() => setWin(w)} data-testid={`dsh-gpu-window-${w}`}>
              {t(lang, `window.${w}`)}
            </button>
          ))}
        </span>
      </div>
      <div className="dgd-charts">
        <figure className="dgd-card dgd-chart" data-testid="dsh-gpu-chart-mem">
          <figcaption>
            <span className="dgd-chart-title">{t(lang, 'chart.mem')}</span>
            {growth ? <span className="dgd-chart-flag">{t(lang, 'chart.growing', { rate: fmtMiB(growth.rate_mib_per_min) })}</span> : null}
            <Legend series={mem} />
          </figcaption>
          <TimeChartBox
            data={memData}
            emptyText={t(lang, 'chart.noData')}
            formatValue={(v) => fmtMiB(v)}
            title={() => t(lang, 'chart.mem')}
            group={group}
            testid="dsh-gpu-chart-mem-body"
          />
        </figure>
        <figure className="dgd-card dgd-chart" data-testid="dsh-gpu-chart-util">
          <figcaption>
            <span className="dgd-chart-title">{t(lang, 'chart.util')}</span>
            <Legend series={util} />
          </figcaption>
          <TimeChartBox
            data={utilData}
            emptyText={t(lang, 'chart.noData')}
            formatValue={(v, axis) => (axis ? `${Math.round(v)} %` : fmtPct(v))}
            title={() => t(lang, 'chart.util')}
            group={group}
            testid="dsh-gpu-chart-util-body"
          />
        </figure>
      </div>
      <div className="dgd-card" style={{ marginTop: 12 }} data-testid="dsh-gpu-events">
        <h3 className="dgd-section-title">{t(lang, 'events.title')}</h3>
        {events.length ? (
          <ol className="dgd-events">
            {events.slice(-30).map((e, i) => (
              <li key={i}>
                <span className="dgd-mono dgd-muted">{fmtClock(e.time_unix_s)}</span>
                <span className="dgd-ev-name">{e.name || NA}</span>
                {e.pid ? <span className="dgd-muted">pid {e.pid}</span> : null}
              </li>
            ))}
          </ol>
        ) : (
          <span className="dgd-muted">{t(lang, 'events.none')}</span>
        )}
      </div>
    </section>
  )
}

function RuntimeFooter({ doc, lang, intervalS }) {
  const rt = (doc && doc.runtime) || {}
  const nv = (doc && doc.nvml) || {}
  const items = []
  if (rt.torch) items.push([t(lang, 'runtime.torch'), rt.torch])
  if (rt.torch) items.push([t(lang, 'runtime.cudaBuild'), rt.cuda_build || t(lang, 'runtime.cudaBuildNone')])
  if (rt.cudnn) items.push([t(lang, 'runtime.cudnn'), String(rt.cudnn)])
  if (rt.cuda_visible_devices !== null && rt.cuda_visible_devices !== undefined)
    items.push([t(lang, 'runtime.visible'), String(rt.cuda_visible_devices)])
  if (nv.driver) items.push([t(lang, 'runtime.driver'), nv.driver])
  if (nv.cuda_driver) items.push([t(lang, 'runtime.cudaDriver'), nv.cuda_driver])
  return (
    <footer className="dgd-runtime" data-testid="dsh-gpu-runtime">
      {items.map(([k, v]) => (
        <span key={k}>
          {k} <b>{v}</b>
        </span>
      ))}
      {nv.ok === false && nv.error ? <span className="dgd-bad">{t(lang, 'runtime.nvmlError', { error: nv.error })}</span> : null}
      {isNum(intervalS) ? <span>{t(lang, 'runtime.interval', { s: intervalS })}</span> : null}
    </footer>
  )
}

export function GpuView(props) {
  return (
    <SessionJobs sessionId={props && props.sessionId}>
      <GpuViewBody />
    </SessionJobs>
  )
}

function GpuViewBody() {
  const st = useStatus()
  const lang = useLang()
  const h = useHistory()
  const doc = st.doc
  return (
    <div className="dgd-root dgd-view" data-testid="dsh-gpu-view" data-state={st.state}>
      <ConnectionNotice st={st} lang={lang} />
      {doc ? (
        <>
          <Hero doc={doc} lang={lang} lastOk={st.lastOk} />
          <GpuCards doc={doc} lang={lang} />
          <ProcessTable doc={doc} lang={lang} />
          <HistoryCharts doc={doc} lang={lang} />
          <RuntimeFooter doc={doc} lang={lang} intervalS={h.intervalS} />
        </>
      ) : null}
    </div>
  )
}

// ------------------------------------------------------------------ settings section

function vetUrl(value) {
  let u
  try {
    u = new URL(value)
  } catch {
    return 'invalid'
  }
  if (u.protocol !== 'http:' || u.username || u.password || u.search || u.hash) return 'invalid'
  const h = u.hostname.replace(/^\[|\]$/g, '').toLowerCase()
  if (h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)) return 'ok'
  return 'not-loopback'
}

function yamlSnippet(url, cfg) {
  const token = cfg && cfg.tokenSet ? '<your token>' : 'null'
  const timeout = cfg && isNum(cfg.timeoutMs) ? cfg.timeoutMs : 2000
  return [
    '- id: dsh-gpu-dashboard',
    '  config:',
    `    sidecarUrl: ${url}`,
    `    token: ${token}`,
    `    timeoutMs: ${timeout}`,
    '',
  ].join('\n')
}

export function SettingsSection() {
  const st = useStatus()
  const settings = useSettings()
  const lang = useLang()
  const store = getStore()
  useTick(1000)
  const cfg = st.config
  const effective = (cfg && cfg.sidecarUrl) || (st.problem && st.problem.url) || null
  const [url, setUrl] = useState(settings.sidecarUrl || effective || 'http://127.0.0.1:8765')
  const [refresh, setRefresh] = useState(String(settings.refreshS))
  const [saved, setSaved] = useState(false)
  const [copied, setCopied] = useState(false)
  useEffect(() => {
    if (!settings.sidecarUrl && effective && url === 'http://127.0.0.1:8765') setUrl(effective)
    // only when the host config first arrives
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [effective])
  const vet = vetUrl(url.trim())
  const normalized = vet === 'ok' ? url.trim().replace(/\/+$/, '') : null
  const differs = normalized !== null && effective !== null && normalized !== effective
  const snippet = yamlSnippet(normalized || url.trim(), cfg)
  const stateColor =
    st.state === 'ok' ? STATUS_COLORS.GPU : st.state === 'unreachable' ? SEVERITY_COLORS.warning : st.state === 'error' ? SEVERITY_COLORS.error : STATUS_COLORS.UNKNOWN
  const save = () => {
    store.saveSettings({ sidecarUrl: url.trim(), refreshS: clampRefresh(refresh) })
    setRefresh(String(clampRefresh(refresh)))
    setSaved(true)
    setTimeout(() => setSaved(false), 1500)
  }
  const copy = () => {
    try {
      navigator.clipboard.writeText(snippet).then(
        () => {
          setCopied(true)
          setTimeout(() => setCopied(false), 1500)
        },
        () => {},
      )
    } catch {
      /* no clipboard: the text is selectable */
    }
  }
  return (
    <div className="dgd-root dgd-settings" data-testid="dsh-gpu-settings">
      <section className="dgd-field" data-testid="dsh-gpu-connection" data-state={st.state}>
        <span className="dgd-field-label">{t(lang, 'settings.connection')}</span>
        <div className="dgd-conn">
          <span className="dgd-conn-state">
            <span className="dgd-conn-dot" style={{ background: stateColor }} />
            <span data-testid="dsh-gpu-connection-state">{t(lang, `settings.state.${st.state}`)}</span>
            {st.state === 'ok' && st.doc ? <Badge doc={st.doc} lang={lang} /> : null}
          </span>
          <dl className="dgd-kv">
            <dt>{t(lang, 'settings.effectiveUrl')}</dt>
            <dd className="dgd-mono" data-testid="dsh-gpu-effective-url">
              {effective || NA}
              {cfg ? <span className="dgd-muted"> · {cfg.tokenSet ? t(lang, 'settings.tokenSet') : t(lang, 'settings.tokenUnset')}</span> : null}
            </dd>
            <dt>{t(lang, 'settings.lastUpdate')}</dt>
            <dd>{st.lastOk ? fmtAgo((Date.now() - st.lastOk) / 1000, lang) : t(lang, 'updated.never')}</dd>
            {cfg && Array.isArray(cfg.warnings) && cfg.warnings.length ? (
              <>
                <dt>{t(lang, 'settings.hostWarnings')}</dt>
                <dd className="dgd-note-warn" data-testid="dsh-gpu-host-warnings">
                  {cfg.warnings.map((w, i) => (
                    <div key={i}>{w}</div>
                  ))}
                </dd>
              </>
            ) : null}
          </dl>
          {st.state === 'unreachable' ? <Unreachable st={st} lang={lang} /> : null}
          {st.state === 'error' ? <ProblemCard st={st} lang={lang} /> : null}
          <div className="dgd-row">
            <button type="button" className="dgd-btn" onClick={() => store.refreshNow()} data-testid="dsh-gpu-test">
              {t(lang, 'settings.test')}
            </button>
          </div>
        </div>
      </section>

      <section className="dgd-field">
        <label className="dgd-field-label" htmlFor="dgd-url">
          {t(lang, 'settings.sidecarUrl')}
        </label>
        <div className="dgd-row">
          <input
            id="dgd-url"
            className="dgd-input dgd-input-url"
            data-testid="dsh-gpu-url-input"
            value={url}
            spellCheck={false}
            onChange={(e) => setUrl(e.target.value)}
          />
        </div>
        {vet === 'invalid' ? <p className="dgd-note-warn">{t(lang, 'settings.urlInvalid')}</p> : null}
        {vet === 'not-loopback' ? (
          <p className="dgd-note-warn">{t(lang, 'settings.urlNotLoopback', { def: (cfg && cfg.defaultSidecarUrl) || 'http://127.0.0.1:8765' })}</p>
        ) : null}
        {vet === 'ok' && !differs && effective ? <p className="dgd-note-ok">{t(lang, 'settings.urlSame')}</p> : null}
        {differs ? (
          <p className="dgd-note-warn" data-testid="dsh-gpu-url-differs">
            {t(lang, 'settings.urlDiffers', { url: effective })}
          </p>
        ) : null}
        <p className="dgd-field-help">
          {t(lang, 'settings.sidecarUrlHelp', { file: '$DSH_HOME/profiles/web/cordis.patch.yml' })}
        </p>
        <pre className="dgd-pre" data-testid="dsh-gpu-yaml">
          {snippet}
        </pre>
        <div className="dgd-row">
          <button type="button" className="dgd-btn" onClick={copy}>
            {copied ? t(lang, 'settings.copied') : t(lang, 'settings.copy')}
          </button>
        </div>
      </section>

      <section className="dgd-field">
        <label className="dgd-field-label" htmlFor="dgd-refresh">
          {t(lang, 'settings.refresh')}
        </label>
        <div className="dgd-row">
          <input
            id="dgd-refresh"
            className="dgd-input dgd-input-num"
            data-testid="dsh-gpu-refresh-input"
            type="number"
            min={REFRESH_MIN_S}
            max={REFRESH_MAX_S}
            step="0.5"
            value={refresh}
            onChange={(e) => setRefresh(e.target.value)}
          />
          <span className="dgd-muted">{t(lang, 'settings.seconds')}</span>
        </div>
        <p className="dgd-field-help">{t(lang, 'settings.refreshHelp', { min: REFRESH_MIN_S, max: REFRESH_MAX_S })}</p>
      </section>

      <section className="dgd-field">
        <label className="dgd-field-label" htmlFor="dgd-lang">
          {t(lang, 'settings.language')}
        </label>
        <div className="dgd-row">
          <select
            id="dgd-lang"
            className="dgd-select"
            value={settings.lang}
            onChange={(e) => store.saveSettings({ lang: e.target.value })}
            data-testid="dsh-gpu-lang-select"
          >
            <option value="auto">{t(lang, 'settings.langAuto')}</option>
            <option value="en">English</option>
            <option value="zh">中文</option>
          </select>
        </div>
      </section>

      <div className="dgd-row">
        <button type="button" className="dgd-btn" onClick={save} data-testid="dsh-gpu-save">
          {saved ? t(lang, 'settings.saved') : t(lang, 'settings.save')}
        </button>
        <span className="dgd-muted" style={{ marginLeft: 'auto', fontSize: 11.5 }}>
          {t(lang, 'settings.version', { version: (cfg && cfg.version) || PLUGIN_VERSION, dsh: SUPPORTED_DSH })}
        </span>
      </div>
    </div>
  )
}

