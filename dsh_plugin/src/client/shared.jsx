// Pieces the plugin's panels share: store hooks, the status badge, warnings, "updated" line.
import { useEffect, useState, useSyncExternalStore } from 'react'
import {
  NA,
  STATUS_COLORS,
  STATUS_TEXT_COLORS,
  fmtAgo,
  statusOf,
  summarize,
  t,
} from '../../../sidecar/static/shared/format.js'
import { getStore } from './store.js'

/** @typedef {import('../../../sidecar/static/shared/contract.js').StatusDocument} StatusDocument */

export const PLUGIN_VERSION = '0.1.0'
export const SUPPORTED_DSH = '0.1.0-rc.8'

export const isNum = (x) => typeof x === 'number' && Number.isFinite(x)

// ------------------------------------------------------------------ hooks

export function useStatus() {
  const store = getStore()
  return useSyncExternalStore(store.subscribeStatus, store.status.get, store.status.get)
}
export function useHistory() {
  const store = getStore()
  return useSyncExternalStore(store.subscribeHistory, store.history.get, store.history.get)
}
export function useSettings() {
  const store = getStore()
  return useSyncExternalStore(store.settings.subscribe, store.settings.get, store.settings.get)
}
export function useUi() {
  const store = getStore()
  return useSyncExternalStore(store.ui.subscribe, store.ui.get, store.ui.get)
}
export function useLang() {
  useSettings()
  return getStore().lang()
}
/** Re-render every `ms` (for "updated 3 s ago"). */
export function useTick(ms) {
  const [, setN] = useState(0)
  useEffect(() => {
    const id = setInterval(() => setN((n) => (n + 1) % 1e6), ms)
    return () => clearInterval(id)
  }, [ms])
}

// ------------------------------------------------------------------ small pieces

export function Badge({ doc, lang, big }) {
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

export function Warnings({ doc, lang, limit }) {
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

export function Updated({ lastOk, lang }) {
  useTick(1000)
  return (
    <span className="dgd-updated" data-testid="dsh-gpu-updated">
      {lastOk ? t(lang, 'updated.label', { ago: fmtAgo((Date.now() - lastOk) / 1000, lang) }) : t(lang, 'updated.never')}
    </span>
  )
}

export function targetText(doc, lang) {
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
