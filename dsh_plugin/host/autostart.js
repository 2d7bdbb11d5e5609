// Autostart and session linkage for the host half (host/index.js uses these):
// - createUpstream: where requests go. Until autostart has decided, and then either the sidecar
//   configured at `sidecarUrl` (it answered) or the one the supervisor (host/supervisor.js) started.
// - fetchJson: one sidecar document read in-process (the session filter and the agent tool).
// - sessionAnswer: GET /jobs?session=ID, the jobs linked to one DSH session (host/jobs.js).
// - notServingAnswer: what the proxy answers while the started sidecar is missing or restarting.
import fs from 'node:fs'
import http from 'node:http'
import { DEFAULT_SIDECAR_COMMAND, MAX_BODY_BYTES, PLUGIN_NAME, parseSidecarUrl } from './core.js'
import { SIDECAR_INSTALL_HINT, installCommand, resolveSidecarCommand, sessionIdFromEnviron, sessionJobs, sessionRuns, unlinkedJobs } from './jobs.js'
import { SidecarSupervisor } from './supervisor.js'

const USER_AGENT = `${PLUGIN_NAME}-dsh-plugin/0.1.0`

/** The checkout this plugin comes from (dsh_plugin/..), when it holds the Python package. */
function checkoutRoot() {
  try {
    const root = new URL('../..', import.meta.url).pathname.replace(/\/+$/, '')
    return fs.existsSync(`${root}/pyproject.toml`) && fs.existsSync(`${root}/sidecar/cli/main.py`) ? root : null
  } catch {
    return null
  }
}
const CHECKOUT = checkoutRoot()
/** The command that installs the sidecar into the Python the supervisor runs (`executable`, its snapshot's). */
export const installCommandFor = (executable) => installCommand(CHECKOUT, executable)

/** The sidecar command autostart runs now (host/jobs.js resolveSidecarCommand: PATH, then this checkout's .venv). */
export function resolveCommand(command, pathEnv = process.env.PATH) {
  const isExecutable = (p) => {
    try {
      fs.accessSync(p, fs.constants.X_OK)
      return fs.statSync(p).isFile()
    } catch {
      return false
    }
  }
  return resolveSidecarCommand(command, { defaultCommand: DEFAULT_SIDECAR_COMMAND, pathEnv, checkoutRoot: CHECKOUT, isExecutable })
}

/** DSH_SESSION_ID in a process's environment (DSH's shell tool sets it for its commands), or null. */
export function sessionOfPid(pid) {
  try {
    return sessionIdFromEnviron(fs.readFileSync(`/proc/${pid}/environ`, 'latin1'))
  } catch {
    return null // gone, another user's, or not Linux
  }
}

/** A session's id and workspace root: its header's cwd when DSH knows it, else DSH's launch directory. */
export function sessionInfo(ctx, id) {
  let cwd = null
  try {
    const sessions = ctx && typeof ctx.get === 'function' ? ctx.get('sessions') : null
    const s = sessions && id ? sessions.get(id) : null
    cwd = s && s.header && typeof s.header.cwd === 'string' ? s.header.cwd : null
  } catch {
    cwd = null
  }
  let root = cwd || process.cwd()
  try {
    root = fs.realpathSync(root)
  } catch {
    /* keep it as it is */
  }
  // `from`: where the root came from (the session's header, or the directory DSH started in)
  return { id: id || null, workspaces: [root], from: cwd ? 'session' : 'dsh' }
}

/** The started sidecar's arguments: sidecarArgs, then `--prometheus URL` when prometheusUrl is set. */
export function sidecarArgsOf(config) {
  return [...config.sidecarArgs, ...(config.prometheusUrl ? ['--prometheus', config.prometheusUrl] : [])]
}

/**
 * Where requests go now: {sidecarUrl, target, token, managed}. `managed` is null for the configured
 * sidecar, else the supervisor's snapshot. Call `.start(fetchJson)` once, `.stop()` on disposal.
 */
export function createUpstream(config, log, options = {}) {
  const state = { supervisor: null, probing: config.autostart, stopped: false, reason: null }
  const command = [config.sidecarCommand, ...sidecarArgsOf(config)].join(' ')
  const configured = () => ({ sidecarUrl: config.sidecarUrl, target: config.target, token: config.token, managed: null })
  const upstream = () => {
    if (state.probing) return { ...configured(), managed: { managed: true, state: 'starting', command, restarts: 0 } }
    if (!state.supervisor) return configured()
    // `because`: why the configured sidecar is not used (the card and settings name its URL)
    const snap = { ...state.supervisor.snapshot(), because: state.reason, configuredUrl: config.sidecarUrl }
    const t = snap.state === 'running' && snap.url ? parseSidecarUrl(snap.url) : null
    if (t && !t.error) return { sidecarUrl: t.url, target: t, token: state.supervisor.token, managed: snap }
    return { ...configured(), sidecarUrl: snap.url || config.sidecarUrl, token: null, managed: snap }
  }
  const start = async (fetchJson) => {
    if (!config.autostart) return
    // a sidecar already answering at the configured URL (any JSON answer but 401) is used, unless
    // another user serves it: on a shared host anyone may bind 127.0.0.1:8765 first and answer with
    // made-up jobs linked to our sessions. The agent (peer.js ProvedAgent) proves the connection's
    // server before the request and the configured token go out: `foreignUid` says it refused.
    const probe = await fetchJson('/api/dsh-gpu-dashboard/jobs', configured())
    if (state.stopped) return
    const foreign = probe.error && probe.foreignUid !== undefined ? probe.foreignUid : null
    // 401: a sidecar that is not for us (root's node-wide one, with a token we were not given)
    const refusedUs = !probe.error && probe.status === 401
    if (probe.error && probe.foreignUid !== undefined) {
      state.reason = `${config.sidecarUrl} is served by ${foreign === null ? 'a user who cannot be told' : `another user (uid ${foreign})`}`
    }
    else if (refusedUs) state.reason = `${config.sidecarUrl} answered HTTP 401 (${config.token ? 'it refused the configured token' : 'it wants a token'})`
    else if (probe.error) state.reason = `nothing answers at ${config.sidecarUrl} (${probe.error})`
    if (!probe.error && !refusedUs) log.info(`a sidecar answers at ${config.sidecarUrl}: using it (no autostart)`)
    else {
      log.warn(`${state.reason}: not using it, starting our own sidecar`)
      state.supervisor = new SidecarSupervisor({
        command: config.sidecarCommand, args: sidecarArgsOf(config), log, spawnFn: options.spawnFn, resolve: options.resolveCommand || resolveCommand,
      })
      state.supervisor.start()
    }
    state.probing = false
  }
  upstream.start = (fetchJson) =>
    start(fetchJson).catch((err) => {
      state.probing = false
      log.error(`autostart failed: ${(err && err.stack) || err}`)
    })
  upstream.stop = () => {
    state.stopped = true
    state.probing = false
    return state.supervisor ? state.supervisor.stop() : Promise.resolve()
  }
  upstream.supervisor = () => state.supervisor
  return upstream
}

/**
 * GET one sidecar JSON document: {status, body} or {error} (with `foreignUid` when the agent refused
 * the connection's server: peer.js ProvedAgent). Never rejects.
 */
export function fetchJson(agent, timeoutMs, up, upstreamPath) {
  return new Promise((resolve) => {
    const headers = { Accept: 'application/json', 'User-Agent': USER_AGENT }
    if (up.token) headers.Authorization = `Bearer ${up.token}`
    let done = false
    const finish = (v) => {
      if (done) return
      done = true
      clearTimeout(timer)
      resolve(v)
    }
    const r = http.request({
      agent,
      hostname: up.target.hostname,
      port: up.target.port,
      family: up.target.hostname.includes(':') ? 6 : undefined,
      path: up.target.basePath + upstreamPath,
      method: 'GET',
      headers,
    })
    const timer = setTimeout(() => {
      r.destroy(new Error('timeout'))
      finish({ error: `no answer within ${timeoutMs} ms` })
    }, timeoutMs)
    r.on('error', (err) => {
      const error = (err && (err.code || err.message)) || 'connection failed'
      finish(err && 'foreignUid' in err ? { error, foreignUid: err.foreignUid } : { error })
    })
    r.on('response', (resp) => readJson(resp, finish))
    r.end()
  })
}

function readJson(resp, finish) {
  const chunks = []
  let bytes = 0
  resp.on('data', (c) => {
    bytes += c.length
    if (bytes > MAX_BODY_BYTES) {
      resp.destroy()
      finish({ error: 'answer too large' })
    } else chunks.push(c)
  })
  resp.on('error', () => finish({ error: 'connection reset' }))
  resp.on('end', () => {
    try {
      finish({ status: resp.statusCode, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) })
    } catch {
      finish({ error: `not JSON (HTTP ${resp.statusCode})` })
    }
  })
}

/** The answer to GET /jobs?session=ID: {status, body}, or {unreachable: detail}. */
export async function sessionAnswer(get, upstreamPath, session, readSession = sessionOfPid) {
  const r = await get(upstreamPath)
  if (r.error) return { unreachable: r.error }
  if (r.status !== 200 || !r.body || !Array.isArray(r.body.jobs)) return { status: r.status || 502, body: r.body }
  const jobs = sessionJobs(r.body, session, readSession)
  // the user's other jobs, marked as not this session's, so the tab never says "no job" beside a chip counting them
  const unlinked = unlinkedJobs(r.body, session, readSession)
  const body = { ...r.body, jobs, unlinked: unlinked.jobs, unlinked_other_users: unlinked.otherUsers }
  return { status: 200, body: { ...body, session: { id: session.id, workspaces: session.workspaces, from: session.from } } }
}

/** The answer to GET /runs?session=ID: the session's runs (jobs.js sessionRuns), {status, body}, or {unreachable: detail}. */
export async function sessionRunsAnswer(get, upstreamPath, session) {
  const r = await get(upstreamPath)
  if (r.error) return { unreachable: r.error }
  if (r.status !== 200 || !r.body || !Array.isArray(r.body.runs)) return { status: r.status || 502, body: r.body }
  const runs = sessionRuns(r.body, session)
  return { status: 200, body: { ...r.body, runs, session: { id: session.id, workspaces: session.workspaces, from: session.from } } }
}

/** What the proxy answers while the sidecar it started is not serving: {status, body}. */
export function notServingAnswer(m) {
  if (m.state === 'missing') {
    return {
      status: 502,
      body: { error: 'sidecar-missing', command: m.command, detail: m.lastError, hint: SIDECAR_INSTALL_HINT, install: installCommandFor(m.executable) },
    }
  }
  const detail =
    m.state === 'backoff'
      ? `${m.lastError || 'the sidecar stopped'}; restarting it in ${Math.ceil((m.nextStartInMs || 0) / 1000)} s`
      : `starting the sidecar (${m.command})`
  return { status: 503, body: { error: 'sidecar-starting', detail, restarts: m.restarts } }
}
