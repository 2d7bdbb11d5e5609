// The settings section: connection state, sidecar URL (host config snippet), refresh interval, language.
import { useEffect, useState } from 'react'
import {
  NA,
  SEVERITY_COLORS,
  STATUS_COLORS,
  fmtAgo,
  t,
} from '../../../sidecar/static/shared/format.js'
import { REFRESH_MAX_S, REFRESH_MIN_S, clampRefresh, getStore } from './store.js'
import { Badge, PLUGIN_VERSION, SUPPORTED_DSH, isNum, useLang, useSettings, useStatus, useTick } from './shared.jsx'
import { ProblemCard, Unreachable } from './errors.jsx'
import { SidecarMissing, StartedSidecarRow } from './jobs.jsx'

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

/** The autostart keys as the host uses them (a patch replaces the whole config: restate them). */
function autostartLines(cfg) {
  if (!cfg || typeof cfg.autostart !== 'boolean') return []
  const args = Array.isArray(cfg.sidecarArgs) ? cfg.sidecarArgs : []
  return [
    `    autostart: ${cfg.autostart}`,
    `    sidecarCommand: ${JSON.stringify(cfg.sidecarCommand || 'dsh-sidecar')}`,
    `    sidecarArgs: ${JSON.stringify(args)}`,
    `    prometheusUrl: ${cfg.prometheusUrl ? JSON.stringify(cfg.prometheusUrl) : 'null'}`,
    `    launchWorkspace: ${cfg.launchWorkspace !== false}`,
  ]
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
    ...autostartLines(cfg),
    '',
  ].join('\n')
}

const DEFAULT_URL = 'http://127.0.0.1:8765'

function connectionColor(state) {
  if (state === 'ok') return STATUS_COLORS.GPU
  if (state === 'unreachable' || state === 'missing') return SEVERITY_COLORS.warning
  if (state === 'error') return SEVERITY_COLORS.error
  return STATUS_COLORS.UNKNOWN
}

/** Show `true` for 1.5 s after `flash()`. */
function useFlash() {
  const [on, setOn] = useState(false)
  const flash = () => {
    setOn(true)
    setTimeout(() => setOn(false), 1500)
  }
  return [on, flash]
}

/** A labelled settings field. */
function Field({ id, label, children }) {
  return (
    <section className="dgd-field">
      <label className="dgd-field-label" htmlFor={id}>
        {label}
      </label>
      {children}
    </section>
  )
}

function ConnectionField({ st, cfg, effective, lang }) {
  const store = getStore()
  return (
    <section className="dgd-field" data-testid="dsh-gpu-connection" data-state={st.state}>
      <span className="dgd-field-label">{t(lang, 'settings.connection')}</span>
      <div className="dgd-conn">
        <span className="dgd-conn-state">
          <span className="dgd-conn-dot" style={{ background: connectionColor(st.state) }} />
          <span data-testid="dsh-gpu-connection-state">{t(lang, `settings.state.${st.state}`)}</span>
          {st.state === 'ok' && st.doc ? <Badge doc={st.doc} lang={lang} /> : null}
        </span>
        <dl className="dgd-kv">
          <dt>{t(lang, 'settings.effectiveUrl')}</dt>
          <dd className="dgd-mono" data-testid="dsh-gpu-effective-url">
            {effective || NA}
            {cfg ? <span className="dgd-muted"> · {cfg.tokenSet ? t(lang, 'settings.tokenSet') : t(lang, 'settings.tokenUnset')}</span> : null}
          </dd>
          <StartedSidecarRow cfg={cfg} lang={lang} />
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
        {st.state === 'missing' ? <SidecarMissing st={st} lang={lang} /> : null}
        {st.state === 'error' ? <ProblemCard st={st} lang={lang} /> : null}
        <div className="dgd-row">
          <button type="button" className="dgd-btn" onClick={() => store.refreshNow()} data-testid="dsh-gpu-test">
            {t(lang, 'settings.test')}
          </button>
        </div>
      </div>
    </section>
  )
}

function UrlField({ url, setUrl, cfg, effective, lang }) {
  const [copied, flashCopied] = useFlash()
  const vet = vetUrl(url.trim())
  const normalized = vet === 'ok' ? url.trim().replace(/\/+$/, '') : null
  const differs = normalized !== null && effective !== null && normalized !== effective
  const snippet = yamlSnippet(normalized || url.trim(), cfg)
  const copy = () => {
    try {
      navigator.clipboard.writeText(snippet).then(flashCopied, () => {})
    } catch {
      /* no clipboard: the text is selectable */
    }
  }
  return (
    <Field id="dgd-url" label={t(lang, 'settings.sidecarUrl')}>
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
        <p className="dgd-note-warn">{t(lang, 'settings.urlNotLoopback', { def: (cfg && cfg.defaultSidecarUrl) || DEFAULT_URL })}</p>
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
    </Field>
  )
}

function RefreshField({ refresh, setRefresh, lang }) {
  return (
    <Field id="dgd-refresh" label={t(lang, 'settings.refresh')}>
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
    </Field>
  )
}

function LanguageField({ settings, lang }) {
  const store = getStore()
  return (
    <Field id="dgd-lang" label={t(lang, 'settings.language')}>
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
    </Field>
  )
}

export function SettingsSection() {
  const st = useStatus()
  const settings = useSettings()
  const lang = useLang()
  const store = getStore()
  useTick(1000)
  const cfg = st.config
  const effective = (cfg && cfg.sidecarUrl) || (st.problem && st.problem.url) || null
  const [url, setUrl] = useState(settings.sidecarUrl || effective || DEFAULT_URL)
  const [refresh, setRefresh] = useState(String(settings.refreshS))
  const [saved, flashSaved] = useFlash()
  useEffect(() => {
    if (!settings.sidecarUrl && effective && url === DEFAULT_URL) setUrl(effective)
    // only when the host config first arrives
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [effective])
  const save = () => {
    store.saveSettings({ sidecarUrl: url.trim(), refreshS: clampRefresh(refresh) })
    setRefresh(String(clampRefresh(refresh)))
    flashSaved()
  }
  return (
    <div className="dgd-root dgd-settings" data-testid="dsh-gpu-settings">
      <ConnectionField st={st} cfg={cfg} effective={effective} lang={lang} />
      <UrlField url={url} setUrl={setUrl} cfg={cfg} effective={effective} lang={lang} />
      <RefreshField refresh={refresh} setRefresh={setRefresh} lang={lang} />
      <LanguageField settings={settings} lang={lang} />
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
