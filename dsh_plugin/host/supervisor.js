// The sidecar the plugin starts itself (config `autostart`, when nothing answers at `sidecarUrl`):
// `<sidecarCommand> <sidecarArgs...> --host 127.0.0.1 --port 0`, with a random token in the
// environment (DSH_SIDECAR_TOKEN, never on the command line where `ps` shows it). It reads the
// URL from the sidecar's start line, restarts it with backoff when it dies, stops it with DSH
// (the plugin's effect disposal, which DSH runs on SIGTERM/SIGINT, plus a process 'exit'
// backstop), and reports a missing command as state "missing" (the page shows how to install it).
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import {
  BACKOFF_MAX_MS,
  BACKOFF_RESET_AFTER_MS,
  SIDECAR_INSTALL_HINT,
  backoffDelay,
  parseServingUrl,
} from './jobs.js'

const START_TIMEOUT_MS = 30000
// Credentials of DSH's own environment (model API keys, ...) are none of the sidecar's business.
const SECRET_ENV = /(API_?KEY|SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL)/i

/** The sidecar's environment: DSH's, less anything credential-shaped, plus its own token. */
export function sidecarEnv(base, token) {
  const env = {}
  for (const [k, v] of Object.entries(base || {})) if (!SECRET_ENV.test(k)) env[k] = v
  return { ...env, DSH_SIDECAR_TOKEN: token, PYTHONUNBUFFERED: '1' }
}
const STOP_GRACE_MS = 3000
const TAIL_BYTES = 2000

export class SidecarSupervisor {
  /**
   * @param {{command: string, args?: string[], log: {info: Function, warn: Function, error: Function},
   *          spawnFn?: typeof spawn, env?: Record<string, string>}} options
   */
  constructor(options) {
    this.command = options.command
    this.args = Array.isArray(options.args) ? options.args.slice() : []
    this.log = options.log
    this.spawnFn = options.spawnFn || spawn
    // the command as run: looked up again at each start (the user may install the sidecar while DSH runs)
    this.resolve = typeof options.resolve === 'function' ? options.resolve : (c) => c
    this.executable = this.command
    this.baseEnv = options.env || process.env
    this.token = randomBytes(24).toString('hex')
    this.child = null
    this.url = null
    this.phase = 'stopped' // starting | running | backoff | missing | stopped
    this.failures = 0
    this.restarts = 0
    this.startedAt = 0
    this.lastError = null
    this.stderrTail = ''
    this.timer = null
    this.startTimer = null
    this.stopping = false
    this.nextStartAt = null
    this.onExit = () => this.killNow('SIGKILL')
  }

  /** What the proxy and the settings page need (never the token). */
  snapshot() {
    return {
      managed: true,
      state: this.phase,
      url: this.url,
      pid: this.child ? this.child.pid : null,
      command: [this.executable, ...this.args].join(' '),
      executable: this.executable,
      restarts: this.restarts,
      lastError: this.lastError,
      nextStartInMs: this.nextStartAt ? Math.max(0, this.nextStartAt - Date.now()) : null,
      installHint: this.phase === 'missing' ? SIDECAR_INSTALL_HINT : null,
    }
  }

  start() {
    this.stopping = false
    try {
      process.once('exit', this.onExit)
    } catch {
      /* no process events */
    }
    this.spawnOnce()
  }

  spawnOnce() {
    if (this.stopping) return
    this.timer = null
    this.nextStartAt = null
    this.url = null
    this.stderrTail = ''
    this.phase = 'starting'
    this.startedAt = Date.now()
    const argv = [...this.args, '--host', '127.0.0.1', '--port', '0']
    const env = sidecarEnv(this.baseEnv, this.token)
    let child
    try {
      this.executable = this.resolve(this.command)
      child = this.spawnFn(this.executable, argv, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: false })
    } catch (err) {
      this.handleSpawnError(err)
      return
    }
    this.child = child
    let buffer = ''
    const onLine = (line) => {
      const url = parseServingUrl(line)
      if (url && this.child === child && this.phase === 'starting') {
        this.url = url
        this.phase = 'running'
        this.lastError = null
        clearTimeout(this.startTimer)
        this.log.info(`started the sidecar (pid ${child.pid}) at ${url}`)
      }
    }
    if (child.stdout) {
      child.stdout.setEncoding('utf8')
      child.stdout.on('data', (chunk) => {
        if (this.phase !== 'starting') return // keep draining, nothing more to read
        buffer += chunk
        let nl
        while ((nl = buffer.indexOf('\n')) >= 0) {
          onLine(buffer.slice(0, nl))
          buffer = buffer.slice(nl + 1)
        }
        if (buffer.length > 8192) buffer = buffer.slice(-8192)
      })
      child.stdout.on('error', () => {})
    }
    if (child.stderr) {
      child.stderr.setEncoding('utf8')
      child.stderr.on('data', (chunk) => {
        this.stderrTail = (this.stderrTail + chunk).slice(-TAIL_BYTES)
      })
      child.stderr.on('error', () => {})
    }
    child.on('error', (err) => {
      if (this.child !== child) return
      if (child.pid === undefined) this.handleSpawnError(err)
      else this.lastError = String((err && err.message) || err)
    })
    child.on('exit', (code, signal) => {
      if (this.child !== child) return
      this.child = null
      clearTimeout(this.startTimer)
      if (this.stopping) {
        this.phase = 'stopped'
        return
      }
      const ran = Date.now() - this.startedAt
      const tail = this.stderrTail.trim().split('\n').slice(-2).join(' ').slice(0, 400)
      this.lastError = `the sidecar ${signal ? `was killed by ${signal}` : `exited with code ${code}`}${tail ? `: ${tail}` : ''}`
      this.failures = ran >= BACKOFF_RESET_AFTER_MS ? 1 : this.failures + 1
      this.schedule(backoffDelay(this.failures))
    })
    clearTimeout(this.startTimer)
    this.startTimer = setTimeout(() => {
      if (this.child === child && this.phase === 'starting') {
        this.lastError = `the sidecar printed no "serving" line within ${START_TIMEOUT_MS / 1000} s`
        this.killChild(child)
      }
    }, START_TIMEOUT_MS)
    if (this.startTimer.unref) this.startTimer.unref()
  }

  handleSpawnError(err) {
    this.child = null
    clearTimeout(this.startTimer)
    const code = err && err.code
    if (code === 'ENOENT' || code === 'EACCES' || code === 'ENOTDIR') {
      if (this.phase !== 'missing') this.log.warn(`cannot start the sidecar: ${this.executable}: ${code}. ${SIDECAR_INSTALL_HINT}`)
      this.phase = 'missing'
      this.lastError = code === 'ENOENT' ? 'command not found' : code === 'EACCES' ? 'not executable' : code
      // look again later: the user may install it while DSH runs
      this.schedule(BACKOFF_MAX_MS, 'missing')
      return
    }
    this.lastError = String((err && err.message) || err)
    this.failures += 1
    this.schedule(backoffDelay(this.failures))
  }

  schedule(delay, phase = 'backoff') {
    if (this.stopping) return
    this.phase = phase
    this.restarts += phase === 'backoff' ? 1 : 0
    clearTimeout(this.timer)
    this.nextStartAt = Date.now() + delay
    if (phase === 'backoff') this.log.warn(`${this.lastError}; restarting it in ${Math.round(delay / 100) / 10} s`)
    this.timer = setTimeout(() => this.spawnOnce(), delay)
    if (this.timer.unref) this.timer.unref()
  }

  killChild(child, sig = 'SIGTERM') {
    try {
      child.kill(sig)
    } catch {
      /* already gone */
    }
  }

  killNow(sig) {
    if (this.child) this.killChild(this.child, sig)
  }

  /** Stop for good (DSH disposes the plugin); resolves once the child is gone or killed. */
  stop() {
    this.stopping = true
    clearTimeout(this.timer)
    clearTimeout(this.startTimer)
    this.nextStartAt = null
    try {
      process.removeListener('exit', this.onExit)
    } catch {
      /* no process events */
    }
    const child = this.child
    if (!child) {
      this.phase = 'stopped'
      return Promise.resolve()
    }
    return new Promise((resolve) => {
      const hard = setTimeout(() => {
        this.killChild(child, 'SIGKILL')
        resolve()
      }, STOP_GRACE_MS)
      child.once('exit', () => {
        clearTimeout(hard)
        resolve()
      })
      this.killChild(child, 'SIGTERM')
    })
  }
}
