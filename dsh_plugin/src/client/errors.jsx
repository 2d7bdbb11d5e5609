// Error containment (boundary, error card) and the connection notices (unreachable, problem, loading).
import { Component } from 'react'
import {
  UNREACHABLE_COMMAND,
  UNREACHABLE_COMMAND_RUN,
  fmtAgo,
  schemaMismatch,
  t,
} from '../../../sidecar/static/shared/format.js'
import { API, clampRefresh } from './store.js'
import { useSettings } from './shared.jsx'
import { SidecarMissing } from './jobs.jsx'

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
  if (p.code === 'auth') return (p.url ? t(lang, 'unreachable.url', { url: p.url }) + ' · ' : '') + t(lang, 'error.auth', { status: p.httpStatus })
  if (p.code === 'bad-response') return t(lang, 'error.badResponse', { detail: p.detail || '' })
  if (p.code === 'http') return t(lang, 'error.http', { status: p.httpStatus, detail: p.detail || '' })
  if (p.code === 'schema') return schemaMismatch({ schema: p.got ?? undefined }, lang)
  return p.detail || String(p.code || 'error')
}

export function ProblemCard({ st, lang }) {
  return <ErrorCard error={{ message: problemText(st.problem, lang) }} lang={lang} />
}

/** Unreachable / error / loading, or null when there is data to show. */
export function ConnectionNotice({ st, lang }) {
  if (st.state === 'unreachable') return <Unreachable st={st} lang={lang} />
  if (st.state === 'missing') return <SidecarMissing st={st} lang={lang} />
  if (st.state === 'error') return <ProblemCard st={st} lang={lang} />
  if (st.state === 'loading' && !st.doc) return <p className="dgd-muted">{t(lang, 'loading')}</p>
  return null
}
