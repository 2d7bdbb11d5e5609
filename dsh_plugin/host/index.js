// Host half of the dsh-gpu-dashboard DSH plugin (a Cordis plugin running inside the DSH server).
//
// It registers one same-origin route prefix, /dsh-gpu-dashboard, on DSH's webServer and forwards
// exactly two read-only requests to the dsh-gpu-dashboard sidecar on loopback:
//   GET|HEAD /dsh-gpu-dashboard/api/status            -> <sidecar>/api/dsh-gpu-dashboard/status
//   GET|HEAD /dsh-gpu-dashboard/api/history?since=N   -> <sidecar>/api/dsh-gpu-dashboard/history?since=N
// plus GET /dsh-gpu-dashboard/api/config (the effective config, without the token) for the
// settings page. Routes outside /api get no authentication from DSH, so every request must come
// with a loopback Host header (DNS-rebinding guard) and, when present, a loopback Origin.
//
// Nothing here may take DSH down: apply() and every handler catch everything, bad config falls
// back to defaults with a warning in the DSH log, and the Config schema never rejects.
import fs from 'node:fs'
import http from 'node:http'
import {
  API_PREFIX,
  DEFAULT_SIDECAR_URL,
  MAX_BODY_BYTES,
  PLUGIN_NAME,
  ROUTE_PREFIX,
  START_HINT,
  isAcceptableOrigin,
  isLoopbackAddress,
  isLoopbackHostHeader,
  normalizeConfig,
  parseSidecarUrl,
  resolveRoute,
} from './core.js'
import { SIDECAR_INSTALL_HINT, installCommand, sessionIdFromEnviron, sessionJobs } from './jobs.js'
import { SidecarSupervisor } from './supervisor.js'
import { registerGpuStatusTool } from './tool.js'

export const name = PLUGIN_NAME
export const inject = ['webServer']

const VERSION = '0.1.0'

/** The checkout this plugin comes from (dsh_plugin/..), when it holds the Python package. */
function checkoutRoot() {
  try {
    const root = new URL('../..', import.meta.url).pathname.replace(/\/+$/, '')
    return fs.existsSync(`${root}/pyproject.toml`) && fs.existsSync(`${root}/sidecar/cli.py`) ? root : null
  } catch {
    return null
  }
}
export const INSTALL_COMMAND = installCommand(checkoutRoot())

/**
 * A Standard Schema validator that never rejects: invalid config exits the dsh process in
 * DSH 0.1.0-rc.8, so normalisation (defaults + warnings) happens in apply() instead.
 */
export const Config = {
  '~standard': {
    version: 1,
    vendor: PLUGIN_NAME,
    validate: (value) => ({ value: value === undefined || value === null ? {} : value }),
  },
}

function makeLogger(ctx) {
  const fallback = {
    info: (...a) => console.log(`[${PLUGIN_NAME}]`, ...a),
    warn: (...a) => console.warn(`[${PLUGIN_NAME}]`, ...a),
    error: (...a) => console.error(`[${PLUGIN_NAME}]`, ...a),
  }
  let logger = null
  try {
    if (ctx && typeof ctx.logger === 'function') logger = ctx.logger(PLUGIN_NAME)
    else if (ctx && ctx.logger) logger = ctx.logger
  } catch {
    logger = null
  }
  const call = (level, args) => {
    try {
      if (logger && typeof logger[level] === 'function') return void logger[level](...args)
    } catch {
      /* fall through */
    }
    try {
      fallback[level](...args)
    } catch {
      /* nothing left to try */
    }
  }
  return {
    info: (...a) => call('info', a),
    warn: (...a) => call('warn', a),
    error: (...a) => call('error', a),
  }
}

function sendJson(req, res, status, body, extraHeaders = {}) {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const text = JSON.stringify(body)
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    ...extraHeaders,
  })
  res.end(req.method === 'HEAD' ? undefined : text)
}

/**
 * Build the request handler for one normalised config. Exported for tests.
 * @param {ReturnType<typeof normalizeConfig>['config']} config
 * @param {{info: Function, warn: Function, error: Function}} log
 * @param {string[]} configWarnings shown by /api/config
 */
export function createHandler(config, log, configWarnings = [], deps = {}) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4, keepAliveMsecs: 1000 })
  let lastReachable = null // log only transitions, the panel polls every few seconds
  // Where requests go now: the configured sidecar, or the one the supervisor started.
  const current = typeof deps.upstream === 'function' ? deps.upstream : () => ({ ...config, managed: null })

  const noteReachable = (ok, detail, url) => {
    if (ok === lastReachable) return
    lastReachable = ok
    if (ok) log.info(`sidecar reachable at ${url}`)
    else log.warn(`sidecar unreachable at ${url}: ${detail}`)
  }

  const unreachable = (req, res, detail, up = current()) => {
    noteReachable(false, detail, up.sidecarUrl)
    sendJson(req, res, 502, {
      error: 'sidecar-unreachable',
      url: up.sidecarUrl,
      detail,
      hint: START_HINT,
    })
  }

  /** The managed sidecar is not serving (missing command, starting, restarting): say so. */
  const notServing = (req, res, up) => {
    const m = up.managed
    if (m.state === 'missing') {
      return sendJson(req, res, 502, {
        error: 'sidecar-missing',
        command: m.command,
        detail: m.lastError,
        hint: SIDECAR_INSTALL_HINT,
        install: INSTALL_COMMAND,
      })
    }
    return sendJson(req, res, 503, {
      error: 'sidecar-starting',
      detail:
        m.state === 'backoff'
          ? `${m.lastError || 'the sidecar stopped'}; restarting it in ${Math.ceil((m.nextStartInMs || 0) / 1000)} s`
          : `starting the sidecar (${m.command})`,
      restarts: m.restarts,
    })
  }

  /** GET a sidecar JSON document in-process: {status, body} or {error}. */
  const fetchJson = (upstreamPath, up = current()) =>
    new Promise((resolve) => {
      const headers = { Accept: 'application/json', 'User-Agent': `${PLUGIN_NAME}-dsh-plugin/${VERSION}` }
      if (up.token) headers.Authorization = `Bearer ${up.token}`
      let done = false
      const finish = (v) => {
        if (!done) {
          done = true
          clearTimeout(timer)
          resolve(v)
        }
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
        finish({ error: `no answer within ${config.timeoutMs} ms` })
      }, config.timeoutMs)
      r.on('error', (err) => finish({ error: (err && (err.code || err.message)) || 'connection failed' }))
      r.on('response', (resp) => {
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
          let body = null
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
          } catch {
            return finish({ error: `not JSON (HTTP ${resp.statusCode})` })
          }
          finish({ status: resp.statusCode, body })
        })
      })
      r.end()
    })

  /** GET /jobs?session=ID: the session's jobs (shell lineage or workspace), the worst first. */
  const sessionJobsRoute = async (req, res, route, up) => {
    const r = await fetchJson(route.upstreamPath, up)
    if (r.error) return unreachable(req, res, r.error, up)
    noteReachable(true, null, up.sidecarUrl)
    if (r.status !== 200 || !r.body || !Array.isArray(r.body.jobs)) return sendJson(req, res, r.status || 502, r.body)
    const session = typeof deps.session === 'function' ? deps.session(route.session) : { id: route.session, workspaces: [process.cwd()] }
    const jobs = sessionJobs(r.body, session, deps.sessionOfPid || sessionOfPid)
    return sendJson(req, res, 200, {
      ...r.body,
      jobs,
      jobs_omitted: r.body.jobs_omitted || 0,
      session: { id: session.id, workspaces: session.workspaces },
    })
  }

  const proxy = (req, res, upstreamPath) => {
    let finished = false
    const up = current()
    const headers = { Accept: 'application/json', 'User-Agent': `${PLUGIN_NAME}-dsh-plugin/${VERSION}` }
    if (up.token) headers.Authorization = `Bearer ${up.token}`
    const upstream = http.request({
      agent,
      protocol: 'http:',
      hostname: up.target.hostname,
      port: up.target.port,
      family: up.target.hostname.includes(':') ? 6 : undefined,
      path: up.target.basePath + upstreamPath,
      method: req.method === 'HEAD' ? 'HEAD' : 'GET',
      headers,
    })
    const timer = setTimeout(() => {
      if (finished) return
      finished = true
      upstream.destroy(new Error('timeout'))
      unreachable(req, res, `no answer within ${config.timeoutMs} ms`, up)
    }, config.timeoutMs)
    const done = () => {
      finished = true
      clearTimeout(timer)
    }
    upstream.on('error', (err) => {
      if (finished) {
        if (res.headersSent && !res.writableEnded) res.destroy()
        return
      }
      done()
      unreachable(req, res, (err && (err.code || err.message)) || 'connection failed', up)
    })
    upstream.on('response', (answer) => {
      if (finished) {
        answer.resume()
        return
      }
      const ctype = String(answer.headers['content-type'] || '')
      if (!/\bjson\b/i.test(ctype) && req.method !== 'HEAD') {
        // Never serve a non-JSON body from the DSH origin (no HTML from elsewhere on this page).
        done()
        answer.resume()
        noteReachable(true, null, up.sidecarUrl)
        sendJson(req, res, 502, {
          error: 'sidecar-bad-response',
          url: up.sidecarUrl,
          status: answer.statusCode,
          detail: `the sidecar answered ${answer.statusCode} with content type "${ctype || 'none'}", not JSON`,
          hint: 'Is the sidecar URL right, and is the sidecar a dsh-gpu-dashboard sidecar of a matching version?',
        })
        return
      }
      noteReachable(true, null, up.sidecarUrl)
      const declared = Number(answer.headers['content-length'])
      if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
        done()
        answer.destroy()
        sendJson(req, res, 502, {
          error: 'sidecar-response-too-large',
          url: up.sidecarUrl,
          detail: `the sidecar answered ${declared} bytes, more than the ${MAX_BODY_BYTES} this proxy passes on`,
          hint: 'Is the sidecar a dsh-gpu-dashboard sidecar of a matching version?',
        })
        return
      }
      const out = {
        'Content-Type': 'application/json; charset=utf-8',
        'Cache-Control': 'no-store',
        'X-Content-Type-Options': 'nosniff',
      }
      if (answer.headers['content-length']) out['Content-Length'] = answer.headers['content-length']
      res.writeHead(answer.statusCode || 502, out)
      let bytes = 0
      answer.on('data', (chunk) => {
        bytes += chunk.length
        if (bytes > MAX_BODY_BYTES) {
          done()
          answer.destroy()
          res.destroy()
          return
        }
        if (!res.write(chunk)) {
          answer.pause()
          res.once('drain', () => answer.resume())
        }
      })
      answer.on('end', () => {
        if (finished && bytes > MAX_BODY_BYTES) return
        done()
        res.end()
      })
      answer.on('error', () => {
        done()
        res.destroy()
      })
    })
    res.on('close', () => {
      if (!finished) {
        done()
        upstream.destroy()
      }
    })
    upstream.end()
  }

  const handler = (req, res) => {
    try {
      if (!isLoopbackAddress(req.socket && req.socket.remoteAddress)) {
        return sendJson(req, res, 403, { error: 'forbidden', detail: 'only loopback clients may use this route' })
      }
      if (!isLoopbackHostHeader(req.headers.host)) {
        return sendJson(req, res, 403, {
          error: 'forbidden',
          detail: 'the Host header must name a loopback address (127.0.0.1, ::1 or localhost)',
        })
      }
      if (!isAcceptableOrigin(req.headers.origin)) {
        return sendJson(req, res, 403, { error: 'forbidden', detail: 'cross-origin requests are refused' })
      }
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        return sendJson(req, res, 405, { error: 'method-not-allowed', detail: 'GET and HEAD only' }, { Allow: 'GET, HEAD' })
      }
      const route = resolveRoute(req.url || '/')
      const up = current()
      if (route.kind === 'config') {
        return sendJson(req, res, 200, {
          plugin: PLUGIN_NAME,
          version: VERSION,
          sidecarUrl: config.sidecarUrl,
          activeSidecarUrl: up.sidecarUrl, // the one the plugin started, when autostart did
          defaultSidecarUrl: DEFAULT_SIDECAR_URL,
          tokenSet: Boolean(config.token),
          timeoutMs: config.timeoutMs,
          autostart: config.autostart,
          sidecar: up.managed, // null: the configured sidecar; else the one this plugin started
          warnings: configWarnings,
          routes: [`${API_PREFIX}/status?job=ID`, `${API_PREFIX}/history?since=N&job=ID`, `${API_PREFIX}/jobs?session=ID`, `${API_PREFIX}/config`],
        })
      }
      if (route.kind !== 'proxy') {
        return sendJson(req, res, 404, {
          error: 'not-found',
          detail: `known routes: ${API_PREFIX}/status, ${API_PREFIX}/history?since=N, ${API_PREFIX}/jobs, ${API_PREFIX}/config`,
        })
      }
      if (up.managed && up.managed.state !== 'running') return notServing(req, res, up)
      if (route.session && req.method === 'GET') {
        return void sessionJobsRoute(req, res, route, up).catch((err) => {
          log.error(`jobs request failed: ${(err && err.stack) || err}`)
          sendJson(req, res, 500, { error: 'internal', detail: String((err && err.message) || err) })
        })
      }
      return proxy(req, res, route.upstreamPath)
    } catch (err) {
      log.error(`request failed: ${(err && err.stack) || err}`)
      try {
        sendJson(req, res, 500, { error: 'internal', detail: String((err && err.message) || err) })
      } catch {
        try {
          res.destroy()
        } catch {
          /* gone */
        }
      }
    }
  }
  handler.fetchJson = fetchJson
  handler.current = current
  handler.close = () => {
    try {
      agent.destroy()
    } catch {
      /* already closed */
    }
  }
  return handler
}

/** DSH_SESSION_ID in a process's environment (set by DSH's shell tool for its commands), or null. */
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
  return { id: id || null, workspaces: [root] }
}

/**
 * Where requests go: the configured sidecar until autostart decides; then either that one (it
 * answered) or the supervised one. Exported for tests.
 */
export function createUpstream(config, log, options = {}) {
  let supervisor = null
  let probing = config.autostart
  const stub = () => ({
    managed: true,
    state: 'starting',
    url: null,
    pid: null,
    command: [config.sidecarCommand, ...config.sidecarArgs].join(' '),
    restarts: 0,
    lastError: null,
    nextStartInMs: null,
    installHint: null,
  })
  const configured = () => ({ sidecarUrl: config.sidecarUrl, target: config.target, token: config.token, managed: null })
  const upstream = () => {
    if (probing) return { ...configured(), managed: stub() }
    if (!supervisor) return configured()
    const snap = supervisor.snapshot()
    if (snap.state === 'running' && snap.url) {
      const t = parseSidecarUrl(snap.url)
      if (!t.error) return { sidecarUrl: t.url, target: t, token: supervisor.token, managed: snap }
    }
    return { ...configured(), sidecarUrl: snap.url || config.sidecarUrl, token: null, managed: snap }
  }
  const start = async (fetchJson) => {
    if (!config.autostart) return
    const probe = await fetchJson('/api/dsh-gpu-dashboard/jobs', configured())
    if (upstream.stopped) return
    if (!probe.error) {
      log.info(`a sidecar answers at ${config.sidecarUrl}: using it (autostart not needed)`)
      probing = false
      return
    }
    supervisor = new SidecarSupervisor({ command: config.sidecarCommand, args: config.sidecarArgs, log, spawnFn: options.spawnFn })
    probing = false
    supervisor.start()
  }
  upstream.start = (fetchJson) =>
    start(fetchJson).catch((err) => {
      probing = false
      log.error(`autostart failed: ${(err && err.stack) || err}`)
    })
  upstream.stop = () => {
    upstream.stopped = true
    probing = false
    return supervisor ? supervisor.stop() : Promise.resolve()
  }
  upstream.supervisor = () => supervisor
  return upstream
}

/** Cordis entry point. Never throws. */
export function apply(ctx, rawConfig) {
  const log = makeLogger(ctx)
  try {
    const { config, warnings } = normalizeConfig(rawConfig)
    for (const w of warnings) {
      log.warn(`config: ${w}`)
      // rc.8 keeps the Cordis log in memory only; a config mistake must also be visible where
      // `dsh web` was started (it is shown on the plugin's settings page too).
      try {
        process.stderr.write(`${PLUGIN_NAME}: config: ${w}\n`)
      } catch {
        /* no stderr */
      }
    }
    const upstream = createUpstream(config, log)
    const deps = { upstream, session: (id) => sessionInfo(ctx, id), sessionOfPid }
    const handler = createHandler(config, log, warnings, deps)
    const register = () => {
      let dispose = null
      try {
        dispose = ctx.webServer.register({ kind: 'prefix', path: ROUTE_PREFIX, handler })
        log.info(`proxying ${API_PREFIX}/{status,history,jobs} to ${config.sidecarUrl}${config.autostart ? ' (or the sidecar it starts)' : ''}`)
      } catch (err) {
        log.error(`could not register ${ROUTE_PREFIX}: ${(err && err.message) || err}`)
      }
      upstream.start(handler.fetchJson)
      return async () => {
        try {
          if (typeof dispose === 'function') dispose()
        } finally {
          try {
            await upstream.stop()
          } finally {
            handler.close()
          }
        }
      }
    }
    if (typeof ctx.effect === 'function') ctx.effect(register, `${PLUGIN_NAME} proxy route and sidecar`)
    else register()
    // The agent tool: optional, it must never hold DSH's boot (a missing registry only logs).
    try {
      if (typeof ctx.inject === 'function') {
        ctx.inject(['tools'], (toolCtx) => registerGpuStatusTool(toolCtx, { handler, deps, log }))
      }
    } catch (err) {
      log.warn(`the gpu_status tool is not available: ${(err && err.message) || err}`)
    }
  } catch (err) {
    log.error(`apply failed, the GPU panel will show the sidecar as unreachable: ${(err && err.stack) || err}`)
  }
}

export default { name, inject, Config, apply }
