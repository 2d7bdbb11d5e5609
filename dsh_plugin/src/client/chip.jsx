// The sidebar status chip.
import {
  NA,
  SEVERITY_COLORS,
  STATUS_COLORS,
  STATUS_TEXT_COLORS,
  statusOf,
  summarize,
  t,
} from '../../../sidecar/static/shared/format.js'
import { getStore } from './store.js'
import { useLang, useStatus, useUi } from './shared.jsx'
import { JobsSummary } from './jobs.jsx'

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
