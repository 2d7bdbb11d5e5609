// Browser-side data layer: settings in localStorage, and one poller shared by every slot entry
// (chip, glance card, GPU view, settings page). Polling runs only while something is subscribed,
// and pauses while the tab is hidden. What is kept of a job's history, and how each answer changes
// it, is the data layer the standalone page shares (../../../sidecar/static/shared/store.js).
//
// All requests go to the plugin's same-origin host routes (never to the sidecar directly):
//   GET /dsh-gpu-dashboard/api/status, /history?since=N, /config
import { SCHEMA, pickLang } from '../../../sidecar/static/shared/format.js'
import { emptyHistory, withHistory, withStatus } from '../../../sidecar/static/shared/store.js'

export const API = '/dsh-gpu-dashboard/api'
export const STORAGE_KEY = 'dsh-gpu-dashboard.settings'
export const REFRESH_MIN_S = 0.5
export const REFRESH_MAX_S = 60
export const DEFAULT_REFRESH_S = 2
const FETCH_TIMEOUT_MS = 6000

// ------------------------------------------------------------------ settings (localStorage)

function readSettings() {
  const d = { refreshS: DEFAULT_REFRESH_S, sidecarUrl: '', lang: 'auto' }
  try {
    const raw = window.localStorage.getItem(STORAGE_KEY)
    if (!raw) return d
    const v = JSON.parse(raw)
    if (v && typeof v === 'object') {
      const r = Number(v.refreshS)
      if (Number.isFinite(r)) d.refreshS = clampRefresh(r)
      if (typeof v.sidecarUrl === 'string') d.sidecarUrl = v.sidecarUrl.slice(0, 300)
      if (v.lang === 'en' || v.lang === 'zh' || v.lang === 'auto') d.lang = v.lang
    }
  } catch {
    /* private mode, bad JSON: defaults */
  }
  return d
}

export function clampRefresh(s) {
  const n = Number(s)
  if (!Number.isFinite(n)) return DEFAULT_REFRESH_S
  return Math.min(REFRESH_MAX_S, Math.max(REFRESH_MIN_S, Math.round(n * 10) / 10))
}

/** DSH's UI language (it sets <html lang>), then the browser's. */
function browserLang() {
  try {
    const list = []
    const html = typeof document !== 'undefined' ? document.documentElement.lang : ''
    if (html) list.push(html)
    if (navigator.languages && navigator.languages.length) list.push(...navigator.languages)
    else if (navigator.language) list.push(navigator.language)
    return pickLang(list)
  } catch {
    return 'en'
  }
}

// ------------------------------------------------------------------ tiny observable

function observable(initial) {
  let value = initial
  const subs = new Set()
  return {
    get: () => value,
    set(next) {
      value = next
      for (const fn of [...subs]) {
        try {
          fn()
        } catch {
          /* a broken subscriber must not stop the others */
        }
      }
    },
    subscribe(fn) {
      subs.add(fn)
      return () => subs.delete(fn)
    },
    size: () => subs.size,
  }
}

// ------------------------------------------------------------------ fetching

async function getJson(path) {
  const ctrl = typeof AbortController !== 'undefined' ? new AbortController() : null
  const timer = ctrl ? setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS) : null
  try {
    const res = await fetch(path, {
      headers: { Accept: 'application/json' },
      cache: 'no-store',
      credentials: 'same-origin',
      signal: ctrl ? ctrl.signal : undefined,
    })
    const ctype = res.headers.get('content-type') || ''
    let body = null
    if (/json/i.test(ctype)) {
      try {
        body = await res.json()
      } catch {
        body = null
      }
    } else {
      try {
        await res.text()
      } catch {
        /* ignore */
      }
    }
    return { httpStatus: res.status, json: /json/i.test(ctype), body }
  } finally {
    if (timer) clearTimeout(timer)
  }
}

/** Turn a response into the store's connection state. Exported for tests. */
export function classify(resp, path) {
  if (!resp.json) {
    return { kind: 'error', code: 'host-missing', message: null, path, httpStatus: resp.httpStatus }
  }
  const b = resp.body
  if (resp.httpStatus === 200 && b && typeof b === 'object' && !Array.isArray(b) && !b.error) {
    // A sidecar of another schema (an older or newer version): say so, never guess at its fields.
    return b.schema === SCHEMA ? { kind: 'ok' } : { kind: 'error', code: 'schema', got: b.schema ?? null, httpStatus: 200 }
  }
  if (b && b.error === 'sidecar-missing') {
    // autostart could not run the sidecar command: the card says how to install it
    return { kind: 'missing', command: b.command || null, install: b.install || null, hint: b.hint || null, detail: b.detail || null }
  }
  if (b && b.error === 'sidecar-unreachable') {
    return { kind: 'unreachable', url: b.url || null, hint: b.hint || null, detail: b.detail || null }
  }
  if (b && b.error === 'sidecar-bad-response') {
    return { kind: 'error', code: 'bad-response', detail: b.detail || null, httpStatus: resp.httpStatus }
  }
  if (resp.httpStatus === 503) {
    // the sidecar is up but has not finished its first poll yet
    return { kind: 'loading', detail: (b && (b.detail || b.error)) || null }
  }
  if (resp.httpStatus === 401 || resp.httpStatus === 403) {
    return { kind: 'error', code: 'auth', httpStatus: resp.httpStatus, url: (b && typeof b.url === 'string' && b.url) || null, detail: (b && (b.detail || b.error)) || null }
  }
  if (resp.httpStatus === 404 && b && b.error === 'not-found' && typeof b.detail === 'string' && b.detail.includes(API)) {
    // our own host route answered "unknown path": a version mismatch between halves
    return { kind: 'error', code: 'http', httpStatus: 404, detail: b.detail }
  }
  return {
    kind: 'error',
    code: 'http',
    httpStatus: resp.httpStatus,
    detail: (b && (b.detail || b.error || b.message)) || 'unexpected answer',
  }
}

// ------------------------------------------------------------------ the store

function isHidden() {
  try {
    return typeof document !== 'undefined' && document.visibilityState === 'hidden'
  } catch {
    return false
  }
}

/**
 * fetchConfig, pollStatus and pollHistory, each at most once in flight, writing into the observables.
 * `sel.job` is the job shown (?job=ID; null: the sidecar's default job).
 */
function createPollers(status, history, sel = { job: null }) {
  const jobQuery = (sep) => (sel.job ? `${sep}job=${encodeURIComponent(sel.job)}` : '')
  const flags = { configFetched: false, statusInFlight: false, historyInFlight: false }

  async function fetchConfig() {
    try {
      const r = await getJson(`${API}/config`)
      if (r.json && r.httpStatus === 200 && r.body) {
        flags.configFetched = true
        const prev = status.get().config
        if (prev && prev.sidecarUrl !== r.body.sidecarUrl) {
          // another sidecar (another job): its history is not a continuation of the old one
          history.set(emptyHistory())
        }
        status.set({ ...status.get(), config: r.body })
      }
    } catch {
      /* shown through the status poll */
    }
  }

  async function pollStatus() {
    if (flags.statusInFlight) return
    flags.statusInFlight = true
    const path = `${API}/status${jobQuery('?')}`
    const asked = sel.job
    try {
      const r = await getJson(path)
      if (asked !== sel.job) return // another job was chosen meanwhile
      const c = classify(r, path)
      const prev = status.get()
      if (c.kind === 'ok') {
        status.set({ ...prev, state: 'ok', doc: r.body, problem: null, lastOk: Date.now(), lastTry: Date.now() })
        // its events, and another job's document (the sidecar's default job changed) starts another history
        const h = history.get()
        const next = withStatus(h, r.body)
        if (next !== h) history.set(next)
      } else {
        status.set({ ...prev, state: c.kind, problem: c, lastTry: Date.now() })
      }
      if (!flags.configFetched || c.kind !== prev.state) fetchConfig()
    } catch (err) {
      status.set({
        ...status.get(),
        state: 'error',
        problem: { kind: 'error', code: 'fetch', detail: String((err && err.message) || err), path },
        lastTry: Date.now(),
      })
    } finally {
      flags.statusInFlight = false
    }
  }

  async function pollHistory() {
    if (flags.historyInFlight) return
    flags.historyInFlight = true
    try {
      const since = history.get().lastTime
      const query = since !== null ? `?since=${encodeURIComponent(String(since))}` : ''
      const asked = sel.job
      const r = await getJson(`${API}/history${query}${jobQuery(query ? '&' : '?')}`)
      if (asked !== sel.job) return // another job was chosen meanwhile
      if (r.httpStatus === 200 && r.json && r.body && Array.isArray(r.body.samples)) {
        history.set(withHistory(history.get(), r.body, since))
      } else {
        history.set({ ...history.get(), error: r.httpStatus })
      }
    } catch (err) {
      history.set({ ...history.get(), error: String((err && err.message) || err) })
    } finally {
      flags.historyInFlight = false
    }
  }

  return { fetchConfig, pollStatus, pollHistory, forgetConfig: () => (flags.configFetched = false) }
}

/** A poll loop: `poll` then wait `interval()`, while `wanted()`; skipped while the page is hidden. */
function createLoop(poll, wanted, interval) {
  let timer = null
  const stop = () => {
    clearTimeout(timer)
    timer = null
  }
  function schedule(delay) {
    stop()
    if (!wanted()) return
    timer = setTimeout(async () => {
      if (!isHidden()) await poll()
      schedule(interval())
    }, delay)
  }
  return { schedule, stop }
}

function whenShownAgain(fn) {
  try {
    document.addEventListener('visibilitychange', () => {
      if (!isHidden()) fn()
    })
  } catch {
    /* no document */
  }
}

function saveToStorage(next) {
  try {
    window.localStorage.setItem(STORAGE_KEY, JSON.stringify(next))
  } catch {
    /* storage full or disabled: keep it for this page */
  }
}

/** Switch the job shown: forget the old one's data and poll the new one now. */
function selectJob(sel, id, { status, history, statusLoop, historyLoop, historyUsers }) {
  const next = typeof id === 'string' && id ? id : null
  if (next === sel.job) return
  sel.job = next
  history.set(emptyHistory())
  status.set({ ...status.get(), doc: null, state: 'loading' })
  if (status.size()) statusLoop.schedule(0)
  if (historyUsers()) historyLoop.schedule(0)
}

function createStore() {
  const settings = observable(readSettings())
  const ui = observable({ glanceOpen: false })
  const status = observable({
    state: 'loading', // loading | ok | unreachable | error
    doc: null,
    problem: null,
    lastOk: null, // ms
    lastTry: null,
    config: null, // /api/config answer
  })
  const history = observable(emptyHistory())
  let historyUsers = 0

  const lang = () => {
    const l = settings.get().lang
    return l === 'en' || l === 'zh' ? l : browserLang()
  }
  const sel = { job: null }
  const pollers = createPollers(status, history, sel)
  const intervalMs = () => Math.round(clampRefresh(settings.get().refreshS) * 1000)
  const statusLoop = createLoop(pollers.pollStatus, () => status.size() > 0, intervalMs)
  const historyLoop = createLoop(pollers.pollHistory, () => historyUsers > 0, () => Math.max(2000, intervalMs()))

  whenShownAgain(() => {
    if (status.size()) statusLoop.schedule(0)
    if (historyUsers) historyLoop.schedule(0)
  })

  return {
    settings,
    ui,
    status,
    history,
    lang,
    subscribeStatus(fn) {
      const off = status.subscribe(fn)
      if (status.size() === 1) statusLoop.schedule(0)
      return () => {
        off()
        if (status.size() === 0) statusLoop.stop()
      }
    },
    subscribeHistory(fn) {
      const off = history.subscribe(fn)
      historyUsers += 1
      if (historyUsers === 1) historyLoop.schedule(0)
      return () => {
        off()
        historyUsers -= 1
        if (historyUsers <= 0) {
          historyUsers = 0
          historyLoop.stop()
        }
      }
    },
    refreshNow() {
      pollers.forgetConfig()
      if (status.size()) statusLoop.schedule(0)
      else pollers.pollStatus()
      pollers.fetchConfig()
    },
    saveSettings(patch) {
      const next = { ...settings.get(), ...patch }
      next.refreshS = clampRefresh(next.refreshS)
      settings.set(next)
      saveToStorage(next)
      if (status.size()) statusLoop.schedule(intervalMs())
    },
    job: () => sel.job,
    /** Show another job (an id from /jobs, or null for the sidecar's default one). */
    setJob: (id) => selectJob(sel, id, { status, history, statusLoop, historyLoop, historyUsers: () => historyUsers }),
    toggleGlance(open) {
      const cur = ui.get().glanceOpen
      ui.set({ ...ui.get(), glanceOpen: typeof open === 'boolean' ? open : !cur })
    },
  }
}

let singleton = null
export function getStore() {
  if (!singleton) singleton = createStore()
  return singleton
}
