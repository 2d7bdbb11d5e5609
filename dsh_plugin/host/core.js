// Pure helpers of the host half: config normalisation, the loopback checks and the route table.
// No I/O here, so node's test runner can exercise every branch (dsh_plugin/test/host.test.mjs).

export const PLUGIN_NAME = 'dsh-gpu-dashboard'
export const ROUTE_PREFIX = '/dsh-gpu-dashboard'
export const API_PREFIX = ROUTE_PREFIX + '/api'
export const DEFAULT_SIDECAR_URL = 'http://127.0.0.1:8765'
export const DEFAULT_TIMEOUT_MS = 2000
export const MIN_TIMEOUT_MS = 100
export const MAX_TIMEOUT_MS = 10000
// The most the proxy passes on from the sidecar (its status document is bounded to 1 MiB, the
// history to a few); sidecar/documents/bounds.py PROXY_MAX_BODY_BYTES is the same number (a test checks).
export const MAX_BODY_BYTES = 4 * 1024 * 1024
export const START_HINT =
  'Start the sidecar next to your training process: `dsh-sidecar --pid PID` ' +
  '(attach to a running process) or `dsh-sidecar run -- python train.py` (launch and watch).'

// The only sidecar paths this proxy ever reaches. Keys are the paths under API_PREFIX.
export const ROUTES = Object.freeze({
  '/status': { upstream: '/api/dsh-gpu-dashboard/status', query: ['job'] },
  '/history': { upstream: '/api/dsh-gpu-dashboard/history', query: ['since', 'job'] },
  '/jobs': { upstream: '/api/dsh-gpu-dashboard/jobs', query: [], session: true },
  // the cluster view of a sidecar started with --prometheus (prometheusUrl); `job` is a job key here
  '/cluster': { upstream: '/api/dsh-gpu-dashboard/cluster', query: ['jobKey'] },
  // the run ledger's runs (issue 40): with ?session=ID only those whose folder is the session's (host/jobs.js sessionRuns)
  '/runs': { upstream: '/api/dsh-gpu-dashboard/runs', query: ['since'], session: true, runs: true },
  // a run (`a`) compared with `b`, by default the previous run of the same command in the same folder
  '/compare': { upstream: '/api/dsh-gpu-dashboard/compare', query: ['a', 'b'] },
})
// A run's name as the runs routes take it (sidecar/documents/runs.py check_run_name): its short id, job id or key.
const RUN_NAME = /^[A-Za-z0-9._:\/-]{1,128}$/
// A distributed job key as the cluster route takes it (a label value: torchrun's run id, a Slurm job id, ...).
const JOB_KEY = /^[A-Za-z0-9._:@+=\/-]{1,256}$/
export const DEFAULT_SIDECAR_COMMAND = 'dsh-sidecar'
const CONFIG_KEYS = ['sidecarUrl', 'token', 'timeoutMs', 'autostart', 'sidecarCommand', 'sidecarArgs', 'prometheusUrl', 'launchWorkspace']

const LOOPBACK_NAMES = new Set(['localhost', 'localhost.', '::1', '0:0:0:0:0:0:0:1'])

/** True for 127.0.0.0/8, ::1, ::ffff:127.x and the name localhost. */
export function isLoopbackHostname(hostname) {
  if (typeof hostname !== 'string' || hostname === '') return false
  let h = hostname.trim().toLowerCase()
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1)
  if (LOOPBACK_NAMES.has(h)) return true
  if (h.startsWith('::ffff:')) h = h.slice(7)
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(h)
  if (!m) return false
  const parts = m.slice(1).map(Number)
  return parts.every((p) => p >= 0 && p <= 255) && parts[0] === 127
}

/** Split a Host header value into hostname and port; null when malformed. */
export function parseHostHeader(value) {
  if (typeof value !== 'string') return null
  const v = value.trim()
  if (v === '' || /[\s/@?#\\]/.test(v)) return null
  let m = /^\[([0-9a-fA-F:.]+)\](?::(\d{1,5}))?$/.exec(v)
  if (m) return { hostname: m[1], port: m[2] ?? null }
  m = /^([A-Za-z0-9.\-]+)(?::(\d{1,5}))?$/.exec(v)
  if (m) return { hostname: m[1], port: m[2] ?? null }
  return null
}

/** True when the request's Host header names a loopback host (DNS-rebinding guard). */
export function isLoopbackHostHeader(value) {
  const parsed = parseHostHeader(value)
  return parsed !== null && isLoopbackHostname(parsed.hostname)
}

/** True when an Origin header is absent, or names a loopback http(s) origin. */
export function isAcceptableOrigin(value) {
  if (value === undefined || value === null || value === '') return true
  if (typeof value !== 'string') return false
  try {
    const u = new URL(value)
    return (u.protocol === 'http:' || u.protocol === 'https:') && isLoopbackHostname(u.hostname)
  } catch {
    return false
  }
}

/** True for a loopback remote socket address (DSH binds 127.0.0.1, this is belt and braces). */
export function isLoopbackAddress(address) {
  if (address === undefined || address === null) return true // unix socket / test double
  return isLoopbackHostname(String(address))
}

/**
 * Normalise the plugin config. Never throws: every bad value falls back to its default and
 * adds a warning (the caller logs them to the DSH log).
 * @returns {{config: {sidecarUrl: string, token: string|null, timeoutMs: number,
 *            target: {protocol: string, hostname: string, port: number, basePath: string}},
 *            warnings: string[]}}
 */
export function normalizeConfig(raw) {
  const warnings = []
  let input = raw
  if (input === undefined || input === null) input = {}
  if (typeof input !== 'object' || Array.isArray(input)) {
    warnings.push(`config is not a mapping (got ${describe(raw)}); using defaults`)
    input = {}
  }
  const known = new Set(CONFIG_KEYS)
  for (const key of Object.keys(input)) {
    if (!known.has(key)) warnings.push(`unknown config key "${key}" ignored (known: ${CONFIG_KEYS.join(', ')})`)
  }

  let sidecarUrl = DEFAULT_SIDECAR_URL
  let target = parseSidecarUrl(DEFAULT_SIDECAR_URL)
  const rawUrl = input.sidecarUrl
  if (rawUrl !== undefined && rawUrl !== null && rawUrl !== '') {
    if (typeof rawUrl !== 'string') {
      warnings.push(`sidecarUrl must be a string (got ${describe(rawUrl)}); using ${DEFAULT_SIDECAR_URL}`)
    } else {
      const parsed = parseSidecarUrl(rawUrl)
      if (parsed.error) {
        warnings.push(`sidecarUrl ${JSON.stringify(rawUrl)} ${parsed.error}; using ${DEFAULT_SIDECAR_URL}`)
      } else {
        sidecarUrl = parsed.url
        target = parsed
      }
    }
  }

  let token = null
  if (input.token !== undefined && input.token !== null && input.token !== '') {
    if (typeof input.token === 'string' && /^[\x21-\x7e]+$/.test(input.token)) token = input.token
    else warnings.push('token must be a non-empty string of printable ASCII without spaces; sending no token')
  }

  let timeoutMs = DEFAULT_TIMEOUT_MS
  if (input.timeoutMs !== undefined && input.timeoutMs !== null && input.timeoutMs !== '') {
    const n = Number(input.timeoutMs)
    if (Number.isFinite(n) && n >= MIN_TIMEOUT_MS && n <= MAX_TIMEOUT_MS) timeoutMs = Math.round(n)
    else {
      warnings.push(
        `timeoutMs must be a number between ${MIN_TIMEOUT_MS} and ${MAX_TIMEOUT_MS} ` +
          `(got ${describe(input.timeoutMs)}); using ${DEFAULT_TIMEOUT_MS}`,
      )
    }
  }

  const { autostart, sidecarCommand, sidecarArgs } = normalizeAutostart(input, warnings)
  const prometheusUrl = normalizePrometheusUrl(input.prometheusUrl, warnings)
  const launchWorkspace = normalizeFlag(input, 'launchWorkspace', true, warnings)

  return {
    config: {
      sidecarUrl,
      token,
      timeoutMs,
      autostart,
      sidecarCommand,
      sidecarArgs,
      prometheusUrl,
      launchWorkspace,
      target: { protocol: target.protocol, hostname: target.hostname, port: target.port, basePath: target.basePath },
    },
    warnings,
  }
}

/** A true/false key: `fallback` when absent, and with a warning when not a boolean. */
function normalizeFlag(input, key, fallback, warnings) {
  const value = input[key]
  if (value === undefined || value === null) return fallback
  if (typeof value === 'boolean') return value
  warnings.push(`${key} must be true or false (got ${describe(value)}); using ${fallback}`)
  return fallback
}

/** The autostart keys (autostart, sidecarCommand, sidecarArgs), defaulted with a warning when bad. */
function normalizeAutostart(input, warnings) {
  const autostart = normalizeFlag(input, 'autostart', true, warnings)

  let sidecarCommand = DEFAULT_SIDECAR_COMMAND
  if (input.sidecarCommand !== undefined && input.sidecarCommand !== null && input.sidecarCommand !== '') {
    if (typeof input.sidecarCommand === 'string' && input.sidecarCommand.length <= 4096 && !input.sidecarCommand.includes('\0')) {
      sidecarCommand = input.sidecarCommand
    } else {
      warnings.push(`sidecarCommand must be a command name or path (got ${describe(input.sidecarCommand)}); using ${DEFAULT_SIDECAR_COMMAND}`)
    }
  }

  let sidecarArgs = []
  if (input.sidecarArgs !== undefined && input.sidecarArgs !== null) {
    const ok =
      Array.isArray(input.sidecarArgs) &&
      input.sidecarArgs.length <= 64 &&
      input.sidecarArgs.every((a) => (typeof a === 'string' || typeof a === 'number') && !String(a).includes('\0'))
    if (ok) sidecarArgs = input.sidecarArgs.map(String)
    else warnings.push(`sidecarArgs must be a list of strings (got ${describe(input.sidecarArgs)}); using none`)
  }
  return { autostart, sidecarCommand, sidecarArgs }
}

/**
 * The Prometheus that scrapes every node's sidecar, passed to the sidecar the plugin starts as
 * `--prometheus` (the sidecar asks it, never the browser or this host); null: no cluster view.
 * Any host is allowed (Prometheus runs elsewhere); http(s), no credentials, query or fragment.
 */
export function normalizePrometheusUrl(value, warnings) {
  if (value === undefined || value === null || value === '') return null
  let u = null
  try {
    u = typeof value === 'string' && value.length <= 2048 ? new URL(value) : null
  } catch {
    u = null
  }
  if (!u || !['http:', 'https:'].includes(u.protocol) || !u.hostname || u.username || u.password || u.search || u.hash) {
    warnings.push(`prometheusUrl must be Prometheus's http(s) address, e.g. http://prometheus:9090 (got ${describe(value)}); no cluster view`)
    return null
  }
  return u.href.replace(/\/+$/, '')
}

/** Parse and vet a sidecar URL: http only, loopback host only, no credentials/query/fragment. */
export function parseSidecarUrl(value) {
  let u
  try {
    u = new URL(value)
  } catch {
    return { error: 'is not a valid URL' }
  }
  if (u.protocol !== 'http:') return { error: 'must use http:// (the sidecar serves plain HTTP on loopback)' }
  if (u.username || u.password) return { error: 'must not carry credentials (use the token key)' }
  if (u.search || u.hash) return { error: 'must not have a query or fragment' }
  if (!isLoopbackHostname(u.hostname)) {
    return { error: 'is not a loopback address (only 127.0.0.1, ::1 or localhost are allowed)' }
  }
  const port = u.port ? Number(u.port) : 80
  if (!Number.isInteger(port) || port < 1 || port > 65535) return { error: 'has an invalid port' }
  let basePath = u.pathname.replace(/\/+$/, '')
  if (basePath === '/') basePath = ''
  const hostname = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname
  const hostForUrl = hostname.includes(':') ? `[${hostname}]` : hostname
  return {
    url: `http://${hostForUrl}:${port}${basePath}`,
    protocol: 'http:',
    hostname,
    port,
    basePath,
  }
}

/** A `since` query value as a finite, non-negative number string, or null. */
export function sanitizeSince(value) {
  if (typeof value !== 'string' || value.trim() === '' || value.length > 32) return null
  const n = Number(value)
  if (!Number.isFinite(n) || n < 0) return null
  return String(n)
}

/**
 * Resolve a request URL (path + query, as in req.url) to the sidecar path to fetch.
 * @returns {{kind: 'proxy', upstreamPath: string} | {kind: 'config'} | {kind: 'not-found'}}
 */
export function resolveRoute(reqUrl) {
  let u
  try {
    u = new URL(reqUrl, 'http://127.0.0.1')
  } catch {
    return { kind: 'not-found' }
  }
  if (!u.pathname.startsWith(API_PREFIX + '/')) return { kind: 'not-found' }
  const sub = u.pathname.slice(API_PREFIX.length)
  if (sub === '/config') return { kind: 'config' }
  if (!Object.prototype.hasOwnProperty.call(ROUTES, sub)) return { kind: 'not-found' }
  const route = ROUTES[sub]
  const params = new URLSearchParams()
  for (const key of route.query) {
    if (key === 'since') {
      const since = sanitizeSince(u.searchParams.get('since'))
      if (since !== null) params.set('since', since)
    }
    if (key === 'jobKey') {
      const job = u.searchParams.get('job')
      if (typeof job === 'string' && JOB_KEY.test(job)) params.set('job', job)
    }
    if (key === 'a' || key === 'b') {
      const run = u.searchParams.get(key)
      if (typeof run === 'string' && RUN_NAME.test(run)) params.set(key, run)
    }
    if (key === 'job') {
      const job = u.searchParams.get('job')
      if (typeof job === 'string' && /^[0-9]{1,10}-[0-9]{1,20}$/.test(job)) params.set('job', job)
    }
  }
  const qs = params.toString()
  const out = { kind: 'proxy', upstreamPath: route.upstream + (qs ? '?' + qs : '') }
  if (route.session) {
    const session = u.searchParams.get('session')
    if (typeof session === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(session)) out.session = session
  }
  if (route.runs) out.runs = true
  return out
}

function describe(v) {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'a list'
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? v.slice(0, 60) + '…' : v)
  return typeof v === 'object' ? 'a mapping' : `${typeof v} ${String(v)}`
}
