// Host half of the dsh-gpu-dashboard DSH plugin (a Cordis plugin running inside the DSH server).
//
// It registers one same-origin route prefix, /dsh-gpu-dashboard, on DSH's webServer and forwards
// exactly two read-only requests to the dsh-gpu-dashboard sidecar on loopback:
//   GET|HEAD /dsh-gpu-dashboard/api/status            -> <sidecar>/api/dsh-gpu-dashboard/status
//   GET|HEAD /dsh-gpu-dashboard/api/history?since=N   -> <sidecar>/api/dsh-gpu-dashboard/history?since=N
//   GET /dsh-gpu-dashboard/api/runs?session=ID         -> <sidecar>/api/dsh-gpu-dashboard/runs, the session's runs
//   GET|HEAD /dsh-gpu-dashboard/api/compare?a=ID&b=ID  -> <sidecar>/api/dsh-gpu-dashboard/compare?a=ID&b=ID
// plus GET /dsh-gpu-dashboard/api/config (the effective config, without the token) for the
// settings page. Routes outside /api get no authentication from DSH, so every request must come
// with a loopback Host header (DNS-rebinding guard) and, when present, a loopback Origin.
//
// Nothing here may take DSH down: apply() and every handler catch everything, bad config falls
// back to defaults with a warning in the DSH log, and the Config schema never rejects.
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
  resolveRoute,
} from './core.js'
import { createUpstream, fetchJson, notServingAnswer, sessionAnswer, sessionInfo, sessionOfPid, sessionRunsAnswer } from './autostart.js'
import { ProvedAgent, peerRefusal } from './peer.js'
import { registerGpuStatusTool } from './tool.js'
import { registerGpuWatchTool } from './watch.js'
import { registerLaunchWorkspace } from './workspace.js'

export const name = PLUGIN_NAME
export const inject = ['webServer']

const VERSION = '0.1.0'

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
  // every connection to a sidecar is proved ours or root's before a request (and the token) goes out
  const agent = new ProvedAgent({ keepAlive: true, maxSockets: 4, keepAliveMsecs: 1000 }, deps.peer || {})
  let lastReachable = null // log only transitions, the panel polls every few seconds
  // where requests go: the configured sidecar, or the one autostart started (host/autostart.js)
  const current = typeof deps.upstream === 'function' ? deps.upstream : () => ({ ...config, managed: null })
  const workspace = typeof deps.workspace === 'function' ? deps.workspace : () => null

  const noteReachable = (ok, detail) => {
    if (ok === lastReachable) return
    lastReachable = ok
    if (ok) log.info(`sidecar reachable at ${current().sidecarUrl}`)
    else log.warn(`sidecar unreachable at ${current().sidecarUrl}: ${detail}`)
  }

  const unreachable = (req, res, detail) => {
    noteReachable(false, detail)
    sendJson(req, res, 502, {
      error: 'sidecar-unreachable',
      url: current().sidecarUrl,
      detail,
      hint: START_HINT,
    })
  }
  const get = (path, up) => fetchJson(agent, config.timeoutMs, up || current(), path)
  const upstreamCtx = { agent, config, current, noteReachable, unreachable }
  const session = (id) => (typeof deps.session === 'function' ? deps.session(id) : { id, workspaces: [process.cwd()] })
  const sessionRoute = (req, res, route) =>
    sessionRouteAnswer(get, route, session(route.session), deps.sessionOfPid)
      .then((a) => {
        if (a.unreachable) return unreachable(req, res, a.unreachable)
        noteReachable(true)
        return sendJson(req, res, a.status, a.body)
      })
      .catch((err) => sendJson(req, res, 500, { error: 'internal', detail: String((err && err.message) || err) }))

  const handler = (req, res) => {
    try {
      if (refused(req, res)) return undefined
      const route = resolveRoute(req.url || '/')
      const up = current()
      if (route.kind === 'config') return sendJson(req, res, 200, configAnswer(config, configWarnings, up, workspace()))
      if (route.kind !== 'proxy') {
        return sendJson(req, res, 404, {
          error: 'not-found',
          detail: `known routes: ${API_PREFIX}/status, ${API_PREFIX}/history?since=N, ${API_PREFIX}/jobs, ${API_PREFIX}/runs, ${API_PREFIX}/compare?a=ID, ${API_PREFIX}/config`,
        })
      }
      if (up.managed && up.managed.state !== 'running') {
        const a = notServingAnswer(up.managed)
        return sendJson(req, res, a.status, a.body)
      }
      if (route.session && req.method === 'GET') return void sessionRoute(req, res, route)
      return proxy(upstreamCtx, req, res, route.upstreamPath)
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
    return undefined
  }
  handler.fetchJson = get
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

/** The answer of a route kept to a session: its jobs (/jobs?session=ID) or its runs (/runs?session=ID). */
function sessionRouteAnswer(get, route, session, sessionOfPid) {
  return route.runs ? sessionRunsAnswer(get, route.upstreamPath, session) : sessionAnswer(get, route.upstreamPath, session, sessionOfPid)
}

/** Answer 403 / 405 to a request this route does not serve; true when it did. */
function refused(req, res) {
  if (!isLoopbackAddress(req.socket && req.socket.remoteAddress)) {
    sendJson(req, res, 403, { error: 'forbidden', detail: 'only loopback clients may use this route' })
    return true
  }
  const otherUser = peerRefusal(req.socket) // DSH has no login: another local user is refused here
  if (otherUser) {
    sendJson(req, res, 403, { error: 'forbidden-user', detail: otherUser })
    return true
  }
  if (!isLoopbackHostHeader(req.headers.host)) {
    sendJson(req, res, 403, {
      error: 'forbidden',
      detail: 'the Host header must name a loopback address (127.0.0.1, ::1 or localhost)',
    })
    return true
  }
  if (!isAcceptableOrigin(req.headers.origin)) {
    sendJson(req, res, 403, { error: 'forbidden', detail: 'cross-origin requests are refused' })
    return true
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    sendJson(req, res, 405, { error: 'method-not-allowed', detail: 'GET and HEAD only' }, { Allow: 'GET, HEAD' })
    return true
  }
  return false
}

/** The /api/config answer. */
function configAnswer(config, configWarnings, up, workspace) {
  return {
    plugin: PLUGIN_NAME,
    version: VERSION,
    sidecarUrl: config.sidecarUrl,
    activeSidecarUrl: up.sidecarUrl, // the one autostart started, when it did
    defaultSidecarUrl: DEFAULT_SIDECAR_URL,
    tokenSet: Boolean(config.token),
    timeoutMs: config.timeoutMs,
    autostart: config.autostart,
    sidecarCommand: config.sidecarCommand,
    sidecarArgs: config.sidecarArgs,
    prometheusUrl: config.prometheusUrl,
    launchWorkspace: config.launchWorkspace,
    workspace, // host/workspace.js: the launch folder registered as a DSH workspace, or why not
    sidecar: up.managed, // null: the configured sidecar; else the one this plugin started (never its token)
    warnings: configWarnings,
    routes: [`${API_PREFIX}/status?job=ID`, `${API_PREFIX}/history?since=N&job=ID`, `${API_PREFIX}/jobs?session=ID`, `${API_PREFIX}/cluster?job=KEY`, `${API_PREFIX}/runs?session=ID`, `${API_PREFIX}/compare?a=ID&b=ID`, `${API_PREFIX}/config`],
  }
}

/** Pass one GET/HEAD on to the sidecar, with a timeout; `flow.finished` once an answer is settled. */
function proxy(ctx, req, res, upstreamPath) {
  const { agent, config, unreachable } = ctx
  const up = ctx.current()
  const flow = { finished: false, timer: null }
  flow.done = () => {
    flow.finished = true
    clearTimeout(flow.timer)
  }
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
  flow.timer = setTimeout(() => {
    if (flow.finished) return
    flow.finished = true
    upstream.destroy(new Error('timeout'))
    unreachable(req, res, `no answer within ${config.timeoutMs} ms`)
  }, config.timeoutMs)
  upstream.on('error', (err) => {
    if (flow.finished) {
      if (res.headersSent && !res.writableEnded) res.destroy()
      return
    }
    flow.done()
    unreachable(req, res, (err && (err.code || err.message)) || 'connection failed')
  })
  upstream.on('response', (up) => relayResponse(ctx, flow, req, res, up))
  res.on('close', () => {
    if (!flow.finished) {
      flow.done()
      upstream.destroy()
    }
  })
  upstream.end()
}

/** The sidecar's answer: JSON of at most MAX_BODY_BYTES passed on as is, anything else a 502. */
function relayResponse(ctx, flow, req, res, up) {
  const { noteReachable } = ctx
  const config = ctx.current()
  if (flow.finished) {
    up.resume()
    return
  }
  const ctype = String(up.headers['content-type'] || '')
  if (!/\bjson\b/i.test(ctype) && req.method !== 'HEAD') {
    // Never serve a non-JSON body from the DSH origin (no HTML from elsewhere on this page).
    flow.done()
    up.resume()
    noteReachable(true)
    sendJson(req, res, 502, {
      error: 'sidecar-bad-response',
      url: config.sidecarUrl,
      status: up.statusCode,
      detail: `the sidecar answered ${up.statusCode} with content type "${ctype || 'none'}", not JSON`,
      hint: 'Is the sidecar URL right, and is the sidecar a dsh-gpu-dashboard sidecar of a matching version?',
    })
    return
  }
  noteReachable(true)
  if (up.statusCode === 401 || up.statusCode === 403) {
    // the card names the sidecar that refused us (the sidecar's own body does not know its URL)
    flow.done()
    up.resume()
    sendJson(req, res, up.statusCode, {
      error: 'sidecar-auth',
      url: config.sidecarUrl,
      status: up.statusCode,
      detail: config.token ? 'the sidecar refused the configured token' : 'the sidecar wants a token the plugin was not given',
      hint: 'Set `token` in the plugin config, or point sidecarUrl at your own sidecar.',
    })
    return
  }
  const declared = Number(up.headers['content-length'])
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
    flow.done()
    up.destroy()
    sendJson(req, res, 502, {
      error: 'sidecar-response-too-large',
      url: config.sidecarUrl,
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
  if (up.headers['content-length']) out['Content-Length'] = up.headers['content-length']
  res.writeHead(up.statusCode || 502, out)
  pipeBody(flow, res, up)
}

/** Stream the body with backpressure, cutting it off past MAX_BODY_BYTES. */
function pipeBody(flow, res, up) {
  let bytes = 0
  up.on('data', (chunk) => {
    bytes += chunk.length
    if (bytes > MAX_BODY_BYTES) {
      flow.done()
      up.destroy()
      res.destroy()
      return
    }
    if (!res.write(chunk)) {
      up.pause()
      res.once('drain', () => up.resume())
    }
  })
  up.on('end', () => {
    if (flow.finished && bytes > MAX_BODY_BYTES) return
    flow.done()
    res.end()
  })
  up.on('error', () => {
    flow.done()
    res.destroy()
  })
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
    const workspace = registerLaunchWorkspace(ctx, { enabled: config.launchWorkspace, log })
    const deps = { upstream, session: (id) => sessionInfo(ctx, id), sessionOfPid, workspace: () => workspace }
    const handler = createHandler(config, log, warnings, deps)
    const register = (startSidecar) => {
      let dispose = null
      try {
        dispose = ctx.webServer.register({ kind: 'prefix', path: ROUTE_PREFIX, handler })
        log.info(`proxying ${API_PREFIX}/{status,history,jobs} to ${config.sidecarUrl}${config.autostart ? ' (or the sidecar it starts)' : ''}`)
      } catch (err) {
        log.error(`could not register ${ROUTE_PREFIX}: ${(err && err.message) || err}`)
      }
      // only where DSH can dispose the plugin (ctx.effect): a sidecar nobody could stop is never started
      if (startSidecar) upstream.start(handler.fetchJson)
      else void upstream.stop()
      // disposed with the plugin (DSH runs this on SIGTERM/SIGINT too): the sidecar stops with DSH
      return async () => {
        try {
          if (typeof dispose === 'function') dispose()
        } finally {
          await upstream.stop().catch(() => {})
          handler.close()
        }
      }
    }
    if (typeof ctx.effect === 'function') ctx.effect(() => register(true), `${PLUGIN_NAME} proxy route and sidecar`)
    else register(false)
    registerTool(ctx, { handler, deps, log })
  } catch (err) {
    log.error(`apply failed, the GPU panel will show the sidecar as unreachable: ${(err && err.stack) || err}`)
  }
}

/**
 * The agent tools gpu_status and gpu_watch, when DSH has a tool registry: optional, they never hold
 * DSH's boot. gpu_watch finds DSH's background jobs (ctx.jobs) when called: without them it says so.
 */
function registerTool(ctx, options) {
  try {
    if (typeof ctx.inject === 'function') {
      ctx.inject(['tools'], (toolCtx) => {
        registerGpuStatusTool(toolCtx, options)
        registerGpuWatchTool(toolCtx, options)
      })
    }
  } catch (err) {
    options.log.warn(`the agent tools are not available: ${(err && err.message) || err}`)
  }
}

export default { name, inject, Config, apply }
